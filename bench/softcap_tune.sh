#!/bin/bash
# The tune of the unmasked soft-capped Hopper specs (bf16 and fp16, d64 to d256: 8 specs,
# 72 keys), which no tune has reached: they serve their heuristic default. Prepared here
# without a GPU, run in one device call:
#
#   bench/softcap_tune.sh prepare      # here (about 8 minutes on 2 cores): .device/softcap*
#   bash bench/softcap_tune.sh run     # on the GPU host, carrying .device; results in $OUT
#
# prepare: every candidate of the 8 specs compiled (`tune --compile-only`, 86 a spec) into
# a build folder, so the device spends its time checking and timing, not compiling; that
# folder, the binary and the committed export go to .device.
# run: the export imported into a scratch database; `tune` of the 8 specs under a budget
# (a tune resumes where its budget stopped it: commit the returned export as
# tuning-db/sm90.json and run again); the new export; then `bench --db` of the unmasked
# cells, plain and soft-capped, so each soft-capped cell's default and new pick are timed
# beside the plain pick in one run.
# The sinks+softcap twins of these specs are not tuned here: `build-cache --borrow-sinks`
# serves them these specs' picks.
set -euo pipefail
cd "$(dirname "$0")/.."
SPECS=(--arch sm90 --template hopper --dtype bf16,fp16 --head-dim 64,128,192,256 --mask none --features softcap)

prepare() {
    local W
    W=$(mktemp -d)
    cargo build --release --quiet
    target/release/fa4-gen tune "${SPECS[@]}" --compile-only --build-dir "$W/build" --db "$W/db.sled" -q
    source bench/device_steps.sh
    pack_kit softcap "$W/build"
    rm -rf "$W"
    echo "carry .device and run: bash bench/softcap_tune.sh run"
}

run() {
    source bench/device_steps.sh
    unpack_kit softcap
    step tune 120 "$B" tune "${SPECS[@]}" --db /tmp/db.sled --build-dir /tmp/build --json --budget $(($(left) - 90))s
    step bench 45 "$B" bench --db /tmp/db.sled --template hopper --head-dim 64,128,256 --mask none \
        --features none,softcap --seqlen 1024,4096,16384 --budget-ms 100 --build-dir /tmp/build \
        --json "$R/bench.json" -q
}

"${1:?usage: bench/softcap_tune.sh prepare|run}"
