#!/bin/bash
# The GPU checks of the FP8 (e4m3) kernels, prepared here without a GPU and run in one
# device call:
#
#   bench/fp8_check.sh prepare      # here: the binary, the runtime library, the export and
#                                   # cudnn-frontend's wheel into .device/
#   bash bench/fp8_check.sh run     # on the GPU host, carrying .device; results in $OUT/r
#   bash bench/fp8_check.sh tune    # there too: the tune of the e4m3 specs, then the grid
#                                   # (GRID=0 GRID_S=110: the Python check alone)
#   bash bench/fp8_check.sh verify  # there too: run's checks without the timings, the
#                                   # defaults' first (FEATURES=paged,sinks+paged narrows
#                                   # the specs)
#
# Every mask, sinks, softcap and pages, and e4m3 at 192/128, are verified here and checked
# through Python. HEAD_DIMS narrows the head dims as FEATURES the features.
# run: every e4m3 kernel compiled on the host; `verify` of the defaults; a cache with them
# (`build-cache`) checked through Python (`fa4gen.check`); the FP8 grid beside cuDNN's
# FP8 SDPA and our bf16 kernels (bench/peers_fp8.py); then `verify` and `bench` of every
# e4m3 tile (steps, logs and the archive by bench/device_steps.sh).
# tune: the defaults' verify; `tune` of the e4m3 specs (dense buckets) under what the
# call's limit leaves; the export ($OUT/r/sm90-new.json.xz, to commit as
# tuning-db/sm90.json); a cache from it checked through Python and timed on the FP8 grid
# beside cuDNN's FP8 SDPA and our bf16 kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL=nvidia_cudnn_frontend-1.32.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl

prepare() {
    cargo build --release --quiet
    . bench/device_steps.sh
    pack_binaries
    xz -T0 -6 -c tuning-db/sm90.json > .device/sm90.json.xz
    if [ ! -f ".device/$WHEEL" ]; then
        python3 -m pip download nvidia-cudnn-frontend==1.32.0 --no-deps --only-binary=:all: \
            --python-version 3.12 --platform manylinux_2_28_x86_64 -d .device -q
    fi
    du -sh .device
}

# There: the binary, the call's records (gpu.csv, commit), cudnn-frontend unpacked into
# /tmp/site and the export into /tmp/sm90.json; $1 is the database steps_end exports, if any.
begin() {
    set +e
    . bench/device_steps.sh
    unpack_binaries
    steps_begin
    # shellcheck disable=SC2064 # the database is fixed now
    trap "steps_end $1" EXIT
    cp .device/commit "$R/commit"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$R/gpu.csv" 2>&1
    mkdir -p /tmp/site /tmp/build
    (cd /tmp/site && python3 -m zipfile -e "$OLDPWD/.device/$WHEEL" .) > "$R/site.log" 2>&1
    xz -dc .device/sm90.json.xz > /tmp/sm90.json
    PY="env PYTHONPATH=$PWD/python:/tmp/site FA4GEN_LIB=$PWD/.device/libfa4_runtime.so FA4GEN_CACHE=/tmp/gen"
}

# A cache of the e4m3 kernels from the export $1 (paged ones included), checked
# through Python; then the model layers over a paged e4m3 cache as vLLM calls them.
pycheck() {
    step cache 50 "$B" build-cache --arch sm90 --head-dim 64,128,256,192 \
        --features none,sinks,paged,sinks+paged,softcap,sinks+softcap --tuning-db "$1" --out /tmp/gen -q
    step pycheck 30 $PY python3 -m fa4gen.check --cases fp8 --head-dims 64,128,256 --json "$R/pycheck.json"
    step fp8-layers 40 $PY python3 bench/fp8_layers.py --out "$R" --cache /tmp/gen
}

# That, then the FP8 grid beside cuDNN's FP8 SDPA and our bf16 kernels.
grid() {
    pycheck "$1"
    step peers-fp8 150 $PY python3 bench/peers_fp8.py --out "$R" --cache /tmp/gen
}

SPECS=(--arch sm90 --template hopper --dtype e4m3 --head-dim "${HEAD_DIMS:-64,128,256,192}" --features "${FEATURES:-none,sinks,paged,sinks+paged,softcap,sinks+softcap}")
# What the tuner tunes: the dense buckets of causal and unmasked kernels (local windows and
# sinks are served their defaults).
TUNE_SPECS=(--arch sm90 --template hopper --dtype e4m3 --head-dim 64,128,256 --mask none,causal --features none)

run() {
    begin ""
    step compile 60 "$B" compile "${SPECS[@]}" --out /tmp/build -q
    step verify-e4m3 40 "$B" verify "${SPECS[@]}" --build-dir /tmp/build -q --json "$R/verify-e4m3.json"
    grid /tmp/sm90.json
    step verify-e4m3-all 100 "$B" verify "${SPECS[@]}" --all-configs \
        --build-dir /tmp/build -q --json "$R/verify-e4m3-all.json"
    step bench-e4m3-all 60 "$B" bench --dtype e4m3 --template hopper --all-configs --budget-ms 40 \
        --seqlen 2048,8192 --build-dir /tmp/build --json "$R/bench-e4m3-all.json"
}

verify() {
    begin ""
    # the defaults first (what the shipped cache would serve), every tile after them
    step compile 60 "$B" compile "${SPECS[@]}" --default-only --out /tmp/build -q
    step verify-e4m3 40 "$B" verify "${SPECS[@]}" --build-dir /tmp/build -q --json "$R/verify-e4m3.json"
    pycheck /tmp/sm90.json
    step verify-e4m3-all 100 "$B" verify "${SPECS[@]}" --all-configs \
        --build-dir /tmp/build -q --json "$R/verify-e4m3-all.json"
}

tune() {
    begin /tmp/db.sled
    "$B" db import /tmp/sm90.json --db /tmp/db.sled -q > "$R/import.log" 2>&1
    step compile 60 "$B" compile "${TUNE_SPECS[@]}" --out /tmp/build -q
    step verify-e4m3 40 "$B" verify "${TUNE_SPECS[@]}" --build-dir /tmp/build -q --json "$R/verify-e4m3.json"
    # every lazy tile on every case (their O error is the one lazy rescaling adds in e4m3)
    step verify-e4m3-lazy 300 "$B" verify "${TUNE_SPECS[@]}" --all-configs --config-filter lazy1 \
        --build-dir /tmp/build -q --json "$R/verify-e4m3-lazy.json"
    # the tune leaves what the FP8 grid beside cuDNN needs (about 200 s) to the end
    step tune 120 "$B" tune "${TUNE_SPECS[@]}" --ragged no --buckets 512,1024,2048,4096,8192,16384 \
        --db /tmp/db.sled --build-dir /tmp/build --json --budget $(($(left) - ${GRID_S:-260}))s
    step export 20 "$B" db export --db /tmp/db.sled --out /tmp/sm90-tuned.json
    # GRID=0: the Python check of the new picks without the timed grid (a short call)
    if [ "${GRID:-1}" = 1 ]; then grid /tmp/sm90-tuned.json; else pycheck /tmp/sm90-tuned.json; fi
}

case "${1:-}" in
prepare) prepare ;;
run) run ;;
tune) tune ;;
verify) verify ;;
*) echo "usage: bench/fp8_check.sh prepare|run|tune|verify" >&2; exit 2 ;;
esac
