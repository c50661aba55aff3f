#!/usr/bin/env bash
# The GPU checks and the grid beside the peers, in one device call on an sm90 host:
#
#   here:   cargo build --release && bash bench/gpu_check.sh prepare
#   there:  bash bench/gpu_check.sh run        (carrying .device; results in $OUT/r.tgz)
#
# prepare copies the binary, the runtime library and the peers' scripts
# (../shared/bench/{peers,compare}.py) into .device/. run builds the shipped sm90 cache
# with the host's NVRTC (every core), checks it (the served defaults by `verify` with
# every feature set, FP8's (e4m3) too, the Python calls by `fa4gen.check` through the cache), tunes one
# small key (the tuner end to end), times the FA3 grid with the tuned picks beside
# PyTorch's FA2 and cuDNN (`compare.py`) and the host cost of a call. Each step has its
# log and exit status under r/ (r/steps.txt), within one time limit (LIMIT, 570 s).
set -u
cd "$(dirname "$0")/.."
# shellcheck source=bench/device_steps.sh
. bench/device_steps.sh

prepare() {
    pack_binaries
    cp ../shared/bench/peers.py ../shared/bench/compare.py .device/
    du -ch .device/*.xz | tail -1
}

run() {
    unpack_binaries
    steps_begin
    trap 'steps_end' EXIT
    cp .device/commit "$R/commit"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$R/gpu.csv" 2>&1
    "$B" db import tuning-db/sm90.json --db /tmp/db.sled -q > "$R/import.log" 2>&1
    step cache 120 "$B" build-cache --arch sm90
    step verify 200 "$B" verify --arch sm90 --template hopper \
        --features none,sinks,softcap,paged,sinks+softcap --build-dir build --json "$R/verify.json"
    step verify-e4m3 30 "$B" verify --arch sm90 --template hopper --dtype e4m3 --build-dir build \
        --json "$R/verify-e4m3.json"
    step verify-d96 40 "$B" verify --arch sm90 --template portable --head-dim 96 \
        --features none,sinks,softcap,paged --build-dir build --json "$R/verify-d96.json"
    step pycheck 60 env PYTHONPATH="$PWD/python" FA4GEN_LIB="$PWD/.device/libfa4_runtime.so" \
        python3 -m fa4gen.check --json "$R/pycheck.json"
    step tune 40 "$B" tune --arch sm90 --template hopper --head-dim 64 --dtype bf16 \
        --mask causal --buckets 1024 --db /tmp/tune.sled
    step peers 90 python3 .device/peers.py --backends flash,cudnn --json "$R/grid-peers.json"
    step grid 90 "$B" bench --db /tmp/db.sled --template hopper --build-dir build \
        --json "$R/grid.json"
    step compare 5 python3 .device/compare.py "$R/grid.json" "$R/grid-peers.json" \
        --ours fa4-gen-hopper-tuned --vs flash,cudnn
    step host 30 "$B" bench --host --cache generated
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    *) echo "usage: bench/gpu_check.sh prepare|run" >&2; exit 2 ;;
esac
