#!/bin/bash
# Packs FA4 (flash-attn-4 4.0.0b36 and nvidia-cutlass-dsl 4.8.1, CUDA 13, Python 3.12,
# x86-64) for the GPU host, which has no network and takes 64 MiB a call: the CuTe DSL's
# MLIR library alone is 52 MB compressed, so it travels in one call (`.whl/ir.so.xz`,
# kept in /tmp/stash there while the machine stays warm) and the rest in the next
# (`.whl/site-rest.tar.xz`), which unpacks both into /tmp/site. The host's image already
# has torch, einops, protobuf, cuda-bindings and cuda-pathfinder.
#
#   bench/fa4_wheels.sh OUT_DIR    -> OUT_DIR/ir.so.xz, OUT_DIR/site-rest.tar.xz
#
# On the GPU host, the first call carries .whl/ir.so.xz alone:
#   mkdir -p /tmp/stash && cp .whl/ir.so.xz /tmp/stash/
# and the second (as bench/results/*-featpeers-call.sh does) carries the rest:
#   mkdir -p /tmp/site && tar xJf .whl/site-rest.tar.xz -C /tmp/site
#   xz -dc /tmp/stash/ir.so.xz > /tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
#   export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
set -euo pipefail
out=$(realpath -m "${1:?usage: bench/fa4_wheels.sh OUT_DIR}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/whl" "$work/site"
for pkg in flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
    nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
    apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 quack-kernels==0.6.5; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        -d "$work/whl" "$pkg"
done
for w in "$work"/whl/*.whl; do (cd "$work/site" && unzip -q -o "$w"); done
# The DSL's .pth adds dsl_packages to sys.path in a site directory; with PYTHONPATH it
# must be named there too: PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
ir=nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
xz -T2 -6 -c "$work/site/$ir" > "$out/ir.so.xz"
tar cJf "$out/site-rest.tar.xz" -C "$work/site" --exclude="./$ir" .
ls -la "$out"
