"""Checks a moejit wheel (packaging/build_wheel.sh runs it; usable on any wheel file):

- the tag: py3-none-manylinux_<major>_<minor>_x86_64 in the file name and in WHEEL, where the
  glibc <major>.<minor> is at most 2.28 and covers every GLIBC_ version the binaries need;
- the contents: the moejit package with libmoejit.so, moejit-warmup and moejit-compile-worker
  (executables), moejit.h, the
  build stamp and warmup.py; no Python extension module; the moejit-warmup entry point;
- every ELF file stripped (no .symtab), needing only libraries a manylinux system has (glibc's,
  libgcc_s), no libstdc++ (linked in), and no symbol version newer than the tag allows
  (readelf -V: GLIBC_ at most the tag's, GCC_ at most 7.0.0, no GLIBCXX_ or CXXABI_);
- auditwheel show agrees, when auditwheel is installed (optional).

usage: python check_wheel.py WHEEL   (exit 0: all good; 1: what is wrong is listed)
"""

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile

MAX_GLIBC = (2, 28)
MAX_GCC = (7, 0, 0)
ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                  "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libmoejit.so"}
EXECUTABLES = ["moejit/moejit-warmup", "moejit/moejit-compile-worker"]
REQUIRED = ["moejit/__init__.py", "moejit/libmoejit.so", *EXECUTABLES, "moejit/moejit.h",
            "moejit/_build_info.py", "moejit/warmup.py", "moejit/_capi.py"]
TAG_RE = re.compile(r"^moejit-(?P<version>[^-]+)-py3-none-manylinux_(?P<major>\d+)_(?P<minor>\d+)_x86_64\.whl$")


def version_tuple(text):
    return tuple(int(x) for x in text.split("."))


def elf_report(path):
    """(needed libraries, {file: [version names]}, has .symtab) from readelf."""
    out = subprocess.run(["readelf", "-d", "-V", "-S", "--wide", path], capture_output=True,
                         text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    versions, current = {}, None
    for line in out.splitlines():
        m = re.search(r"File: (\S+)\s+Cnt:", line)
        if m:
            current = m.group(1)
            versions.setdefault(current, [])
            continue
        m = re.search(r"Name: (\S+)\s+Flags:", line)
        if m and current:
            versions[current].append(m.group(1))
    has_symtab = re.search(r"\]\s+\.symtab\s", out) is not None
    return needed, versions, has_symtab


def check_elf(name, path, glibc_tag, problems, report):
    needed, versions, has_symtab = elf_report(path)
    if has_symtab:
        problems.append(f"{name}: not stripped (has .symtab)")
    for lib in needed:
        if lib not in ALLOWED_NEEDED:
            problems.append(f"{name}: needs {lib}, which a manylinux system need not have")
    newest = {}
    for file, names in versions.items():
        for v in names:
            kind, _, number = v.partition("_")
            if kind in ("GLIBCXX", "CXXABI"):
                problems.append(f"{name}: needs {v} from {file} (libstdc++ must be linked in)")
            elif kind == "GLIBC" and number and version_tuple(number) > glibc_tag:
                problems.append(f"{name}: needs {v} from {file}, newer than the tag's glibc "
                                f"{'.'.join(map(str, glibc_tag))}")
            elif kind == "GCC" and number and version_tuple(number) > MAX_GCC:
                problems.append(f"{name}: needs {v} from {file}, newer than GCC_7.0.0")
            if kind in ("GLIBC", "GCC") and number:
                if kind not in newest or version_tuple(number) > version_tuple(newest[kind]):
                    newest[kind] = number
    report.append(f"{name}: stripped={not has_symtab} needed={','.join(needed)} "
                  f"newest GLIBC_{newest.get('GLIBC', '-')} GCC_{newest.get('GCC', '-')}")


def check(wheel):
    problems, report = [], []
    base = os.path.basename(wheel)
    m = TAG_RE.match(base)
    if not m:
        return [f"{base}: expected moejit-<version>-py3-none-manylinux_<x>_<y>_x86_64.whl"], report
    glibc_tag = (int(m["major"]), int(m["minor"]))
    if glibc_tag > MAX_GLIBC:
        problems.append(f"{base}: manylinux_{glibc_tag[0]}_{glibc_tag[1]} is newer than manylinux_2_28")
    tag = base[len(f"moejit-{m['version']}-"):-len(".whl")]
    report.append(f"{base}: tag {tag}")
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
        names = z.namelist()
        info = f"moejit-{m['version']}.dist-info"
        wheel_meta = z.read(f"{info}/WHEEL").decode()
        tags = re.findall(r"^Tag: (\S+)$", wheel_meta, re.M)
        if tags != [tag]:
            problems.append(f"WHEEL says Tag {tags}, the file name {tag}")
        if "Root-Is-Purelib: false" not in wheel_meta:
            problems.append("WHEEL: Root-Is-Purelib should be false (native files)")
        entry_points = z.read(f"{info}/entry_points.txt").decode() if f"{info}/entry_points.txt" in names else ""
        if "moejit-warmup = moejit.warmup:main" not in entry_points:
            problems.append("entry_points.txt lacks moejit-warmup = moejit.warmup:main")
        for required in REQUIRED:
            if required not in names:
                problems.append(f"missing {required}")
        for n in names:
            if re.search(r"\.(cpython|abi3|pypy)[^/]*\.so$", n):
                problems.append(f"{n}: a Python extension module (the wheel is for every Python)")
            if n.endswith(".so") and n != "moejit/libmoejit.so" and not n.startswith("moejit/moejit-kernels/"):
                problems.append(f"{n}: an unexpected shared library")
        for exe in EXECUTABLES:
            info = z.getinfo(exe) if exe in names else None
            if info and not (info.external_attr >> 16) & stat.S_IXUSR:
                problems.append(f"{exe} is not executable in the wheel")
        for n in names:
            data = z.read(n)
            if data[:4] != b"\x7fELF":
                continue
            path = os.path.join(tmp, n.replace("/", "_"))
            with open(path, "wb") as f:
                f.write(data)
            check_elf(n, path, glibc_tag, problems, report)
        kernels = [n for n in names if n.startswith("moejit/moejit-kernels/")]
        report.append(f"prebuilt kernels: {len(kernels)} files" if kernels else "prebuilt kernels: none")
        if kernels:  # -Dprebuilt_kernels=true: moejit-kernels/<version>/ with a STAMP and entries
            tier = f"moejit/moejit-kernels/{m['version']}/"
            if tier + "STAMP" not in names:
                problems.append(f"{tier}STAMP missing (the library would not use the tier)")
            for n in kernels:
                if not n.startswith(tier) or not (n.endswith(".cubin") or n == tier + "STAMP"):
                    problems.append(f"{n}: not an entry of {tier}")
    auditwheel = shutil.which("auditwheel") or shutil.which("auditwheel", path=os.path.dirname(sys.executable))
    if auditwheel:
        out = subprocess.run([auditwheel, "show", wheel], capture_output=True, text=True)
        text = " ".join((out.stdout + out.stderr).split())
        report.append("auditwheel show: " + text)
        # auditwheel names the most compatible tag it finds; the wheel's must be that or newer.
        found = re.search(r'consistent with the following platform tag: "manylinux_(\d+)_(\d+)_x86_64"', text)
        if out.returncode != 0 or not found or (int(found[1]), int(found[2])) > glibc_tag:
            problems.append(f"auditwheel show does not find the wheel consistent with "
                            f"manylinux_{glibc_tag[0]}_{glibc_tag[1]}_x86_64")
    else:
        report.append("auditwheel: not installed (readelf checks only)")
    return problems, report


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    problems, report = check(argv[1])
    for line in report:
        print("check_wheel:", line)
    for p in problems:
        print("check_wheel: FAIL:", p, file=sys.stderr)
    print("check_wheel:", "OK" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
