#!/usr/bin/env bash
# Pack the fused peers of python -m moejit_bench (SonicMoE, QuACK; bench/moejit_bench/peers_fast.py)
# for the offline H200, on a machine that reaches PyPI:
#
#   bash bench/peers_pack.sh SET [OUTDIR]      SET = sonic | quack, OUTDIR default .peers
#
# Downloads the set's wheels for CPython 3.12 / manylinux x86_64 (the H200 image's Python),
# installs them into a site-packages tree here (pip --target, nothing imported), and packs that
# tree as OUTDIR/SET.tar.xz.part-aa, -ab, ... of at most 60 MB each (a device call carries at
# most 64 MiB with the working tree), with OUTDIR/SET.sha256 of the whole archive. xz packs the
# ~190 MB of CuTe DSL libraries into ~53 MB, where the wheels take ~80 MB.
# dev/gpu/peers.sh unpacks it on the device (one piece per call, straight after each other).
#
# The two sets cannot share one interpreter: sonic-moe 0.1.2.post1 calls quack-kernels 0.3.11's
# GEMMs on nvidia-cutlass-dsl 4.4.2, VeOmni's QuACK backend is quack-kernels 0.6.5 on 4.8.1.
# sonic-moe pins torch <= 2.9.1 and runs on the image's 2.11: its metadata is not enforced
# (--no-deps); torch, triton, numpy, einops, cuda-bindings come from the image.
set -euo pipefail
set_name=${1:?usage: $0 sonic|quack [OUTDIR]}
out=$(mkdir -p "${2:-.peers}" && cd "${2:-.peers}" && pwd)
case "$set_name" in
  sonic) specs="sonic-moe==0.1.2.post1 quack-kernels==0.3.11 nvidia-cutlass-dsl==4.4.2
                nvidia-cutlass-dsl-libs-cu13==4.4.2 apache-tvm-ffi==0.1.10 torch-c-dlpack-ext==0.1.5" ;;
  quack) specs="quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1
                nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1
                apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 cloudpickle==3.1.3" ;;
  *) echo "unknown set '$set_name' (sonic | quack)" >&2; exit 2 ;;
esac
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
platform=(--python-version 3.12 --implementation cp --only-binary=:all:
          --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
          --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
          --platform manylinux2014_x86_64)
for spec in $specs; do
  python3 -m pip download -q --no-deps "${platform[@]}" -d "$work/wheels" "$spec"
done
python3 -m pip install -q --no-index --no-deps --no-compile --ignore-requires-python \
  "${platform[@]}" --target "$work/site-packages" "$work"/wheels/*.whl
(cd "$work/wheels" && ls) > "$work/site-packages/moejit-peer-set-$set_name.txt"
rm -f "$out/$set_name".tar.xz.part-*
tar cf - -C "$work" site-packages | xz -9 -T2 | split -b 60000000 -a 2 - "$out/$set_name.tar.xz.part-"
cat "$out/$set_name".tar.xz.part-* | sha256sum | cut -d' ' -f1 > "$out/$set_name.sha256"
ls -l "$out/$set_name".tar.xz.part-*
