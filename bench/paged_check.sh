#!/bin/bash
# The GPU check of paged K/V (SGLang's and vLLM's caches), prepared here without a GPU and
# run in one device call:
#
#   bench/paged_check.sh prepare     # here: the binary, the runtime library and the export
#                                    # into .device/
#   bash bench/paged_check.sh run    # on the GPU host, carrying .device; results in $OUT/r
#   bash bench/paged_check.sh served # there too: run's timings and Python check alone
#
# run: `verify` of every paged default (bf16 and fp16 at every head dim, e4m3 at its four;
# unmasked, causal and local; with and without sinks and softcap), each on the standard
# cases (pages of 1, 16, 32, 64, 128 and 256: the page boxes and the copies); a cache of
# d64 and d128 with every feature, built from the export and checked through Python
# (`fa4gen.check`: the paged cases among the rest); the serving
# mixes with K/V packed and through pages of 16 (`bench --serving all --features
# none,paged --db`); the model layers over an FP8 cache in pages of 16 as vLLM calls
# FlashAttention-3 (`bench/fp8_layers.py`). The first step after a change of the paged
# defaults or of the producer's page loads: what it has not passed is not served.
set -euo pipefail
cd "$(dirname "$0")/.."

prepare() {
    cargo build --release --quiet
    . bench/device_steps.sh
    pack_binaries
    xz -T0 -6 -c tuning-db/sm90.json > .device/sm90.json.xz
    du -sh .device
}

FEATURES=(--features paged,sinks+paged,softcap+paged,sinks+softcap+paged)
PAGED16=(--arch sm90 --template hopper --dtype bf16,fp16 --head-dim 64,96,128,192/128,256 "${FEATURES[@]}")
PAGED8=(--arch sm90 --template hopper --dtype e4m3 --head-dim 64,128,192/128,256 "${FEATURES[@]}")

begin() {
    set +e
    . bench/device_steps.sh
    unpack_binaries
    steps_begin
    trap steps_end EXIT
    cp .device/commit "$R/commit"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$R/gpu.csv" 2>&1
    xz -dc .device/sm90.json.xz > /tmp/sm90.json
    "$B" db import /tmp/sm90.json --db /tmp/db.sled -q > "$R/import.log" 2>&1
}

run() {
    begin
    step compile 40 "$B" compile "${PAGED16[@]}" --default-only --out /tmp/build -q
    step compile-e4m3 40 "$B" compile "${PAGED8[@]}" --default-only --out /tmp/build -q
    step verify-paged 60 "$B" verify "${PAGED16[@]}" --build-dir /tmp/build -q --json "$R/verify-paged.json"
    step verify-paged-e4m3 60 "$B" verify "${PAGED8[@]}" --build-dir /tmp/build -q --json "$R/verify-paged-e4m3.json"
    served
}

# The served picks: the serving mixes packed and over pages (each side its tuned picks),
# a cache of d64 and d128 from the export checked through Python, the FP8 layers.
served() {
    step serving-paged 60 "$B" bench --serving all --features none,paged --template hopper --db /tmp/db.sled \
        --build-dir /tmp/bench -q --json "$R/serving-paged.json"
    step cache 60 "$B" build-cache --arch sm90 --head-dim 64,128 --features all \
        --tuning-db /tmp/sm90.json --out /tmp/gen -q
    local py="env PYTHONPATH=$PWD/python FA4GEN_LIB=$PWD/.device/libfa4_runtime.so FA4GEN_CACHE=/tmp/gen"
    step pycheck 40 $py python3 -m fa4gen.check --head-dims 64,128 --json "$R/pycheck.json"
    step fp8-layers 40 $py python3 bench/fp8_layers.py --backends e4m3-paged,bf16q-e4m3-paged,e4m3-packed,bf16-paged \
        --out "$R" --cache /tmp/gen
}

case "${1:-}" in
prepare) prepare ;;
run) run ;;
served)
    begin
    served
    ;;
*)
    echo "usage: bench/paged_check.sh prepare | run | served" >&2
    exit 2
    ;;
esac
