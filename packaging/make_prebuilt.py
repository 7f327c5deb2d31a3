"""Builds the read-only tier of prebuilt kernels a wheel can ship (meson -Dprebuilt_kernels=true,
docs/DESIGN.md §4.10): moejit-warmup compiles every plan variant of the presets for the arch
into a scratch cache, whose <version>/ folder becomes OUT/<version>/, with a STAMP file
(packaging/prebuilt_stamp.cpp: this machine's NVRTC version and headers digest, which the
library puts into the tier's keys). Folders 0755, files 0644: the library refuses a tier that
group or others can write.

usage: make_prebuilt.py --warmup EXE --library-dir DIR --stamp EXE --out DIR --done FILE
                        [--arch sm_90a] [--preset NAME]...   (no --preset: every preset)

--library-dir (the build's libmoejit.so) goes first on LD_LIBRARY_PATH: meson-python rewrites
the built moejit-warmup's RUNPATH in place to the wheel's $ORIGIN, so in a reused build folder
the tool no longer finds the build's library by itself.
"""

import argparse
import os
import shutil
import subprocess
import sys


def presets(warmup, env):
    out = subprocess.run([warmup, "--list-presets"], check=True, capture_output=True, text=True,
                         env=env).stdout
    return [line.split()[0] for line in out.splitlines()[1:] if line.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warmup", required=True)
    p.add_argument("--library-dir", required=True)
    p.add_argument("--stamp", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--done", required=True)
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--preset", action="append", default=[])
    args = p.parse_args()

    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [args.library_dir, env.get("LD_LIBRARY_PATH")]))
    names = args.preset or presets(args.warmup, env)
    scratch = args.out + ".scratch"
    for folder in (args.out, scratch):
        shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(scratch, mode=0o700)
    command = [args.warmup, "--arch", args.arch, "--cache-dir", scratch]
    for name in names:
        command += ["--preset", name]
    print("make_prebuilt:", " ".join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
    stamp = subprocess.run([args.stamp], check=True, capture_output=True, text=True).stdout

    (version,) = [d for d in os.listdir(scratch) if os.path.isdir(os.path.join(scratch, d))]
    tier = os.path.join(args.out, version)
    os.makedirs(args.out, mode=0o755)
    os.chmod(args.out, 0o755)
    shutil.move(os.path.join(scratch, version), tier)
    shutil.rmtree(scratch)
    with open(os.path.join(tier, "STAMP"), "w") as f:
        f.write(stamp)
        f.write(f"arch {args.arch}\npresets {','.join(names)}\n")
    os.chmod(tier, 0o755)
    entries = 0
    for name in os.listdir(tier):
        os.chmod(os.path.join(tier, name), 0o644)
        entries += name.endswith(".cubin")
    if entries == 0:
        sys.exit(f"make_prebuilt: no kernels in {tier}")
    with open(args.done, "w") as f:
        f.write(f"{entries} kernels for {args.arch}: {', '.join(names)}\n")
    print(f"make_prebuilt: {entries} kernels in {tier}")


if __name__ == "__main__":
    main()
