"""The package imports without the library, finds it, and reports its version."""

import os
import re
import subprocess
import sys

import pytest

import moejit
from conftest import PYTHON_ROOT, REPO_ROOT


def _run(code, **env_changes):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_ROOT
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


def test_import_does_not_load_the_library():
    r = _run("import moejit, moejit._capi as c; assert c._library is None; print('ok')",
             MOEJIT_LIBRARY="/nonexistent/libmoejit.so")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_bad_moejit_library_is_reported_with_the_path():
    r = _run("import moejit\n"
             "try:\n"
             "    moejit.library_version()\n"
             "except moejit.LibraryNotFoundError as e:\n"
             "    print(e)\n",
             MOEJIT_LIBRARY="/nonexistent/libmoejit.so")
    assert r.returncode == 0, r.stderr
    assert "/nonexistent/libmoejit.so" in r.stdout
    assert "$MOEJIT_LIBRARY" in r.stdout


def test_lookup_without_env_lists_every_path_tried():
    r = _run("import moejit\n"
             "try:\n"
             "    moejit.load_library()\n"
             "    print('LOADED')\n"
             "except moejit.LibraryNotFoundError as e:\n"
             "    print(e)\n",
             MOEJIT_LIBRARY=None, LD_LIBRARY_PATH="")
    assert r.returncode == 0, r.stderr
    if "LOADED" in r.stdout:
        pytest.skip("a libmoejit is installed where the system loader finds it")
    package_dir = os.path.join(PYTHON_ROOT, "moejit")
    assert os.path.join(package_dir, "libmoejit.so") in r.stdout  # next to the package
    assert "libmoejit.so.0" in r.stdout                             # the system loader
    assert "system loader" in r.stdout


def test_library_version_matches_the_c_function(lib):
    raw = lib.moejit_version().decode()
    assert moejit.library_version() == raw
    assert re.fullmatch(r"\d+\.\d+\.\d+", raw)
    major, minor, patch = (int(p) for p in raw.split("."))
    assert moejit.library_version_number() == major * 10000 + minor * 100 + patch


def test_package_version_matches_the_library(lib):
    assert moejit.__version__ == moejit.library_version(), (
        "bump moejit.__version__ (python/moejit/__init__.py) with meson.build's version")


def test_library_version_matches_meson_project():
    meson = os.path.join(REPO_ROOT, "meson.build")
    if not os.path.exists(meson):
        pytest.skip("not running from a source checkout")
    with open(meson) as f:
        m = re.search(r"version\s*:\s*'([^']+)'", f.read())
    assert m and m.group(1) == moejit.library_version()


def test_library_path_is_the_one_asked_for(lib):
    env = os.environ.get("MOEJIT_LIBRARY")
    if not env:
        pytest.skip("MOEJIT_LIBRARY is not set")
    assert lib.path == os.path.realpath(env)


def test_every_header_function_is_exported(lib):
    assert lib.missing == [], f"{lib.path} does not export: {', '.join(lib.missing)}"


def test_nvrtc_version_is_plausible(lib):
    v = moejit.nvrtc_version()
    assert isinstance(v, tuple) and len(v) == 2 and v == (v.major, v.minor), v
    assert (11, 0) <= v < (100, 0) and 0 <= v.minor < 100, v
    # the C ABI's number, also through int() (what nvrtc_version() returned before 0.10)
    assert int(v) == moejit.nvrtc_version_number() == v.major * 100 + v.minor
    assert str(v) == repr(v) == f"({v.major}, {v.minor})"


def test_torch_names_need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed")
    with pytest.raises(AttributeError, match="PyTorch"):
        moejit.fused_moe  # noqa: B018
