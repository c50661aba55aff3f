#!/usr/bin/env bash
# The serving batches beside the peers, on an sm90 host, in two device calls (FA4's
# CuTe DSL library travels alone in the first: bench/fa4_wheels.sh):
#
#   here:   cargo build --release && bash bench/serving_check.sh prepare
#           bash bench/fa4_wheels.sh .whl && split -b 26M -d .whl/ir.so.xz .whl/ir.so.xz.part
#           rm .whl/ir.so.xz && mv .whl/ir.so.xz.part01 .device/
#           pip download nvidia-cudnn-frontend==1.32.0 (cp312 manylinux x86_64) into .device/
#   (a call carries at most 64 MiB with the tree: FA4's MLIR library goes half in each)
#   there:  call 1, carrying .whl (site-rest, half the library): bash bench/serving_check.sh stash
#           call 2, carrying .device (while the machine is warm):
#                                                     bash bench/serving_check.sh run
#
# run builds the sm90 cache with the host's NVRTC, times `fa4-gen bench --serving all`
# with the tuned picks (the CLI's rows), then bench/peers_serving.py: fa4-gen's Python
# call beside FA4, cuDNN and FA2 on the same batches. Logs and rows in $OUT/r.tgz.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=bench/device_steps.sh
. bench/device_steps.sh

prepare() {
    pack_binaries
    du -ch .device/*.xz | tail -1
}

stash() {
    mkdir -p /tmp/stash && cp .whl/* /tmp/stash/ && ls -la /tmp/stash
}

fa4_site() {
    mkdir -p /tmp/site && tar xJf /tmp/stash/site-rest.tar.xz -C /tmp/site
    # cudnn-frontend (its varlen SDPA op; needs the CuTe DSL that FA4 brings)
    (cd /tmp/site && python3 -m zipfile -e "$OLDPWD"/.device/nvidia_cudnn_frontend-*.whl .)
    cat /tmp/stash/ir.so.xz.part00 .device/ir.so.xz.part01 | xz -dc > /tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
}

run() {
    unpack_binaries
    steps_begin
    trap 'steps_end' EXIT
    cp .device/commit "$R/commit"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$R/gpu.csv" 2>&1
    fa4_site > "$R/fa4.log" 2>&1
    "$B" db import tuning-db/sm90.json --db /tmp/db.sled -q > "$R/import.log" 2>&1
    step cache 120 "$B" build-cache --arch sm90
    step serving 120 "$B" bench --serving all --db /tmp/db.sled --template hopper --build-dir build \
        --json "$R/serving.json"
    step peers 240 env PYTHONPATH="$PWD/python:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages" \
        FA4GEN_LIB="$PWD/.device/libfa4_runtime.so" \
        python3 bench/peers_serving.py "$R/serving.json" --json "$R/serving-peers.json"
}

case "${1:-}" in
    prepare) prepare ;;
    stash) stash ;;
    run) run ;;
    *) echo "usage: bench/serving_check.sh prepare|stash|run" >&2; exit 2 ;;
esac
