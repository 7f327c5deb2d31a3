"""Retags a wheel: meson-python tags one with native files for the Python that built it
(cp311-cp311-linux_x86_64), though moejit holds no extension module (ctypes loads libmoejit.so)
and runs on any Python 3. Writes <name>-<version>-py3-none-<platform>.whl with WHEEL's Tag and
RECORD's hash of WHEEL rewritten; every other file is copied byte for byte.

usage: python retag_wheel.py WHEEL --platform manylinux_2_28_x86_64 --out DIR
"""

import argparse
import base64
import hashlib
import os
import sys
import zipfile


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest},{len(data)}"


def retag(src: str, platform: str, out_dir: str) -> str:
    name, version = os.path.basename(src).split("-")[:2]
    tag = f"py3-none-{platform}"
    dst = os.path.join(out_dir, f"{name}-{version}-{tag}.whl")
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        wheel_name = next(i.filename for i in infos if i.filename.endswith(".dist-info/WHEEL"))
        record_name = wheel_name[:-len("WHEEL")] + "RECORD"
        lines = zin.read(wheel_name).decode().splitlines()
        lines = [ln for ln in lines if not ln.startswith("Tag:")] + [f"Tag: {tag}"]
        wheel_data = ("\n".join(lines) + "\n").encode()
        record = []
        for row in zin.read(record_name).decode().splitlines():
            path = row.split(",")[0]
            record.append(f"{wheel_name},{record_hash(wheel_data)}" if path == wheel_name else row)
        record_data = ("\n".join(record) + "\n").encode()
        os.makedirs(out_dir, exist_ok=True)
        with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
            for info in infos:
                data = zin.read(info.filename)
                if info.filename == wheel_name:
                    data = wheel_data
                elif info.filename == record_name:
                    data = record_data
                zout.writestr(info, data)  # keeps the mode bits (moejit-warmup stays executable)
    return dst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel")
    parser.add_argument("--platform", default="manylinux_2_28_x86_64")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    print(retag(args.wheel, args.platform, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
