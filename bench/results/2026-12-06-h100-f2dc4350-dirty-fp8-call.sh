#!/usr/bin/env bash
# FP8 first contact (the kit: `pack_binaries` of the FP8 tree on f2dc4350): verify the
# e4m3 defaults (then every candidate), a bf16 sanity verify, and the grid in e4m3 beside
# bf16 through the CLI, every kernel compiled on the host.
set -u
. bench/device_steps.sh
unpack_binaries
steps_begin
trap 'steps_end' EXIT
cp .device/commit "$R/commit"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$R/gpu.csv" 2>&1
mkdir -p /tmp/build
step compile 60 "$B" compile --arch sm90 --template hopper --dtype e4m3 --out /tmp/build -q
step verify-e4m3 90 "$B" verify --arch sm90 --template hopper --dtype e4m3 --build-dir /tmp/build -q --json "$R/verify-e4m3.json"
step verify-bf16 60 "$B" verify --arch sm90 --template hopper --dtype bf16 --head-dim 64,128 --build-dir /tmp/build -q --json "$R/verify-bf16.json"
step bench-e4m3 90 "$B" bench --dtype e4m3 --template hopper --build-dir /tmp/build --json "$R/bench-e4m3.json"
step bench-bf16 90 "$B" bench --dtype bf16 --template hopper --build-dir /tmp/build --json "$R/bench-bf16.json"
step verify-e4m3-all 120 "$B" verify --arch sm90 --template hopper --dtype e4m3 --all-configs --build-dir /tmp/build -q --json "$R/verify-e4m3-all.json"
step bench-e4m3-all 120 "$B" bench --dtype e4m3 --template hopper --all-configs --seqlen 2048,8192 --budget-ms 60 --build-dir /tmp/build --json "$R/bench-e4m3-all.json"
