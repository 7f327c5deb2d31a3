"""The NVRTC rule (src/runtime/nvrtc_loader.hpp): $MOEJIT_NVRTC, then the CUDA toolkits, then
the nvidia pip packages, then the soname, whatever NVRTC the process loaded first. CPU only:
each scenario runs in a fresh Python process (the library loads NVRTC once per process).

- A fake NVRTC 13.2 (every symbol, built here) loaded first by soname from LD_LIBRARY_PATH, as
  PyTorch loads its pip copy: moejit still takes the toolkit's, and warns once.
- A cache warmed by moejit-warmup (no PyTorch in its process) is complete for a process that
  imported torch first (which maps the pip NVRTC), with JIT off: no kernel is missing.
"""

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import PYTHON_ROOT, REPO_ROOT

STUB_SOURCE = r"""
/* A fake NVRTC: every symbol moejit resolves, version 13.2, every other call fails. */
typedef int nvrtcResult;
enum { STUB_ERROR = 11 };  /* NVRTC_ERROR_INTERNAL_ERROR */
nvrtcResult nvrtcVersion(int *major, int *minor) { *major = 13; *minor = 2; return 0; }
const char *nvrtcGetErrorString(nvrtcResult r) { (void)r; return "stub NVRTC"; }
#define FAIL(name) nvrtcResult name(void) { return STUB_ERROR; }
FAIL(nvrtcCreateProgram) FAIL(nvrtcDestroyProgram) FAIL(nvrtcCompileProgram)
FAIL(nvrtcGetProgramLogSize) FAIL(nvrtcGetProgramLog) FAIL(nvrtcGetCUBINSize) FAIL(nvrtcGetCUBIN)
FAIL(nvrtcAddNameExpression) FAIL(nvrtcGetLoweredName) FAIL(nvrtcGetNumSupportedArchs)
FAIL(nvrtcGetSupportedArchs)
"""

CUDA_MAJOR = 13
SONAME = f"libnvrtc.so.{CUDA_MAJOR}"


def _toolkit_nvrtc():
    """The NVRTC the rule's toolkit step finds first (CUDA_HOME, CUDA_PATH, /usr/local/cuda)."""
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    for root in filter(None, roots):
        for lib in ("lib64", "lib"):
            path = os.path.join(root, lib, SONAME)
            if os.path.isfile(path):
                return os.path.realpath(path)
    return None


def _version(path):
    major, minor = ctypes.c_int(), ctypes.c_int()
    assert ctypes.CDLL(path).nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) == 0
    return major.value * 100 + minor.value


def _library():
    path = os.environ.get("MOEJIT_LIBRARY") or os.path.join(REPO_ROOT, "build", "capi", "libmoejit.so")
    if not os.path.isfile(path):
        pytest.skip(f"{path} not built (set MOEJIT_LIBRARY)")
    return path


def _warmup_tool():
    path = os.environ.get("MOEJIT_WARMUP") or os.path.join(REPO_ROOT, "build", "tools", "moejit-warmup")
    if not os.path.isfile(path):
        pytest.skip(f"{path} not built (set MOEJIT_WARMUP)")
    return path


def _run(parts, env_extra, drop=("MOEJIT_NVRTC", "LD_PRELOAD")):
    """Runs the script made of `parts` (each dedented on its own) in a fresh Python."""
    script = "".join(textwrap.dedent(p) for p in ([parts] if isinstance(parts, str) else parts))
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["MOEJIT_LIBRARY"] = _library()
    env["PYTHONPATH"] = PYTHON_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", script], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return out.stdout


@pytest.fixture(scope="module")
def stub_dir(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler for the fake NVRTC")
    folder = tmp_path_factory.mktemp("fake_nvrtc")
    src = folder / "stub.c"
    src.write_text(STUB_SOURCE)
    subprocess.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{SONAME}", "-o", str(folder / SONAME),
                    str(src)], check=True)
    return str(folder)


@pytest.fixture(scope="module")
def toolkit_nvrtc():
    path = _toolkit_nvrtc()
    if path is None:
        pytest.skip("no CUDA toolkit NVRTC (CUDA_HOME, CUDA_PATH, /usr/local/cuda)")
    return path


# In the child: what the process maps, and the warning through a context's log.
PROBE = """
    import ctypes, moejit
    def mapped():
        with open("/proc/self/maps") as maps:
            return sorted({l.split()[-1] for l in maps if "/libnvrtc.so" in l})
    messages = []
    with moejit.Context(compile_only=True, arch="sm_90a", cache_dir="", jit="off",
                        log=lambda level, text: messages.append(text)) as ctx:
        for _ in range(2):  # two kernel lookups: the warning comes once
            try:
                moejit.warmup(ctx, dtype="bfloat16", hidden_size=256, intermediate_size=128,
                              num_experts=4, top_k=2)
            except moejit.errors.JitDisabledError:
                pass
    print("VERSION", moejit.nvrtc_version())
    print("MAPPED", *mapped())
    print("WARNINGS", sum("another NVRTC was already loaded" in m for m in messages))
    for m in messages:
        if "another NVRTC" in m:
            print("TEXT", m)
"""


def _field(out, name):
    for line in out.splitlines():
        if line.startswith(name + " "):
            return line.split()[1:]
    raise AssertionError(f"no {name} line in:\n{out}")


def _nvrtc_number(value):
    """moejit.nvrtc_version() as major*100+minor, whether it returns an int or (major, minor)."""
    text = " ".join(value).strip("()").replace(",", " ").split()
    return int(text[0]) if len(text) == 1 else int(text[0]) * 100 + int(text[1])


def test_toolkit_wins_over_an_nvrtc_loaded_first(stub_dir, toolkit_nvrtc):
    # The fake 13.2 is loaded first, by soname, globally: what `import torch` does with its pip copy.
    script = f"""
        import ctypes
        fake = ctypes.CDLL("{SONAME}", mode=ctypes.RTLD_GLOBAL)
        major, minor = ctypes.c_int(), ctypes.c_int()
        fake.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        assert (major.value, minor.value) == (13, 2), "the fake NVRTC was not the one loaded"
    """
    out = _run([script, PROBE], {"LD_LIBRARY_PATH": stub_dir, "CUDA_HOME": os.path.dirname(os.path.dirname(toolkit_nvrtc))})
    assert _nvrtc_number(_field(out, "VERSION")) == _version(toolkit_nvrtc), out
    mapped = _field(out, "MAPPED")
    assert toolkit_nvrtc in mapped, out
    assert os.path.join(stub_dir, SONAME) in mapped, out  # both stay loaded, each used by its owner
    assert _field(out, "WARNINGS") == ["1"], out
    assert os.path.join(stub_dir, SONAME) in out and "13.2" in out, out


def test_no_warning_when_nothing_else_is_loaded(toolkit_nvrtc):
    out = _run(PROBE, {})
    assert _field(out, "WARNINGS") == ["0"], out
    assert _field(out, "MAPPED") == [toolkit_nvrtc], out


def test_moejit_nvrtc_overrides_the_toolkit(stub_dir, toolkit_nvrtc):
    # The explicit path wins over the toolkit (even a fake one: only its version is asked).
    out = _run(PROBE, {"MOEJIT_NVRTC": os.path.join(stub_dir, SONAME)}, drop=("LD_PRELOAD",))
    assert _nvrtc_number(_field(out, "VERSION")) == 1302, out
    assert toolkit_nvrtc not in _field(out, "MAPPED"), out


def test_soname_is_the_last_resort(stub_dir, tmp_path):
    # No toolkit reachable (roots pointed at empty folders, /usr/local/cuda aside): only when
    # /usr/local/cuda has none does the soname step (LD_LIBRARY_PATH's fake) come into play.
    if _toolkit_nvrtc() and os.path.realpath(_toolkit_nvrtc()).startswith(
            os.path.realpath("/usr/local/cuda")):
        pytest.skip("/usr/local/cuda has an NVRTC: the toolkit step cannot be emptied here")
    out = _run(PROBE, {"LD_LIBRARY_PATH": stub_dir, "CUDA_HOME": str(tmp_path), "CUDA_PATH": str(tmp_path)})
    assert _nvrtc_number(_field(out, "VERSION")) == 1302, out


def _pip_nvrtc():
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations if spec else []):
        for sub in (f"cu{CUDA_MAJOR}", "cuda_nvrtc"):
            path = os.path.join(base, sub, "lib", SONAME)
            if os.path.isfile(path):
                return os.path.realpath(path)
    return None


# Every plan variant moejit-warmup warms for one bf16 spec (tools/warmup/variants.cpp).
VARIANTS = """
    import itertools
    def variants(spec):
        for merged, wgrad32, acc, idx32, route32 in itertools.product((0, 1), repeat=5):
            if acc and not wgrad32:
                continue
            yield dict(dtype="bfloat16", merged=bool(merged),
                                   weight_grad_dtype="float32" if wgrad32 else "bfloat16",
                                   weight_grad_accumulate=bool(acc),
                                   index_dtype="int32" if idx32 else "int64",
                                   routing_dtype="float32" if route32 else "bfloat16", **spec)
"""


def test_warm_then_off_in_a_process_that_imported_torch_first(tmp_path, toolkit_nvrtc):
    """The deployment: moejit-warmup fills the cache (no PyTorch), the training process imports
    torch first (its pip NVRTC is mapped), then moejit with JIT off finds every kernel."""
    pytest.importorskip("torch")
    if _pip_nvrtc() is None:
        pytest.skip("torch brings no pip NVRTC here: nothing loaded first to test against")
    tool = _warmup_tool()
    cache = tmp_path / "cache"
    spec = dict(hidden_size=256, intermediate_size=128, num_experts=4, top_k=2)
    # No CUDA_HOME/CUDA_PATH (a pip user's shell): the headers come from beside NVRTC, so a
    # process that took torch's NVRTC would differ in the headers' digest even at the same version.
    unset = ("MOEJIT_NVRTC", "LD_PRELOAD", "CUDA_HOME", "CUDA_PATH")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    warm = subprocess.run([tool, "--spec", "256,128,4,2", "--dtype", "bf16", "--arch", "sm_90a",
                           "--cache-dir", str(cache), "--jobs", "2"],
                          env=env, capture_output=True, text=True, timeout=1800)
    assert warm.returncode == 0, warm.stdout + warm.stderr
    script = """
        import torch  # first: maps the pip NVRTC, as in a training job
        with open("/proc/self/maps") as maps:
            before = {l.split()[-1] for l in maps if "/libnvrtc.so" in l}
        print("TORCH_NVRTC", *sorted(before))
        import moejit
    """
    check = f"""
    n = 0
    with moejit.Context(compile_only=True, arch="sm_90a", cache_dir={str(cache)!r}, jit="off",
                        log=False) as ctx:
        for desc in variants({spec!r}):
            moejit.warmup(ctx, **desc)  # JitDisabledError if any kernel is missing
            n += 1
        stats = ctx.cache_stats()
    print("PLANS", n)
    print("MISSES", stats["misses"])
    print("DISK_HITS", stats["disk_hits"])
    """
    out = _run([script, VARIANTS, check], {}, drop=unset)
    assert _pip_nvrtc() in _field(out, "TORCH_NVRTC"), out
    assert _field(out, "PLANS") == ["24"], out
    assert _field(out, "MISSES") == ["0"], out
    assert int(_field(out, "DISK_HITS")[0]) > 0, out
