#!/usr/bin/env bash
# The Hugging Face transformers backend's GPU check (python/fa4gen/check_transformers.py)
# in one device call on an sm90 host:
#
#   here:   cargo build --release && bash bench/transformers_check.sh prepare
#   there:  bash bench/transformers_check.sh run       (carrying .device; results in $OUT/r.tgz)
#
# run builds an sm90 cache of head dims 64 and 128, without features and with sinks
# (gpt-oss), with the host's NVRTC, then runs `python3 -m fa4gen.check_transformers`
# through it on the host image's torch and transformers (small random-weight Llama, Qwen2
# and gpt-oss models built in code; nothing is downloaded). r/transformers.json holds
# every number, r/transformers.log the table.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=bench/device_steps.sh
. bench/device_steps.sh

prepare() {
    pack_binaries
    du -ch .device/*.xz | tail -1
}

run() {
    unpack_binaries
    steps_begin
    trap 'steps_end' EXIT
    cp .device/commit "$R/commit"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$R/gpu.csv" 2>&1
    python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__)' \
        > "$R/versions.txt" 2>&1
    # a folder of its own: build-cache refuses to mix into a cache built from another export
    local gen
    gen=$(mktemp -d)/gen
    step cache 40 "$B" build-cache --arch sm90 --head-dim 64,128 --features none,sinks --out "$gen" -q
    step transformers 60 env PYTHONPATH="$PWD/python" FA4GEN_LIB="$PWD/.device/libfa4_runtime.so" \
        FA4GEN_CACHE="$gen" python3 -m fa4gen.check_transformers --json "$R/transformers.json"
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    *) echo "usage: bench/transformers_check.sh prepare|run" >&2; exit 2 ;;
esac
