#!/bin/bash
# The first GPU run of head dim 96 on the Hopper template (d128's tiles, six QK k-steps;
# the shipped cache serves d96 with the portable template until this passes). Prepared
# here without a GPU, run in one device call:
#
#   bench/d96_check.sh prepare      # here (about 8 minutes on 2 cores): .device/d96*
#   bash bench/d96_check.sh run     # on the GPU host, carrying .device; results in $OUT
#
# prepare: the d96 Hopper defaults of every mask and feature set, and every candidate of
# the unmasked and causal bf16/fp16 specs, compiled into a build folder; that folder, the
# binary, the committed export and the peers' scripts (../shared/bench) go to .device.
# run: `verify` of the defaults (every mask, none/sinks/softcap/sinks+softcap/paged, both
# dtypes) and of every bf16 candidate (unmasked and causal); `tune` of the four specs
# under a budget; the grid's lengths at d96 (hidden 3072, Phi-3-mini's 32 heads): our
# tuned Hopper picks and the portable default (`fa4-gen bench --db`), beside FA2 and cuDNN
# (`peers.py --hdims 96`) in the same call; the new export. First, while it is there:
# `python -m fa4gen.check --cases calls` (flash_attn_with_kvcache and the packed qkv/kv
# calls through the committed cache, their first GPU run).
set -euo pipefail
cd "$(dirname "$0")/.."
D96=(--arch sm90 --template hopper --head-dim 96)
TUNED=("${D96[@]}" --dtype bf16,fp16 --mask none,causal --features none)

prepare() {
    local B=target/release/fa4-gen W
    W=$(mktemp -d)
    cargo build --release --quiet
    "$B" compile "${D96[@]}" --default-only --mask none,causal,local \
        --features none,sinks,softcap,sinks+softcap,paged --out "$W/build" -q
    "$B" tune "${TUNED[@]}" --compile-only --build-dir "$W/build" --db "$W/db.sled" -q
    source bench/device_steps.sh
    pack_kit d96 "$W/build"
    xz -T0 -6 -c target/release/libfa4_gen.so > .device/libfa4_gen.so.xz
    cp ../shared/bench/peers.py ../shared/bench/compare.py .device/
    rm -rf "$W"
    echo "carry .device and run: bash bench/d96_check.sh run"
}

run() {
    source bench/device_steps.sh
    unpack_kit d96
    xz -dc .device/libfa4_gen.so.xz > python/fa4gen/libfa4_gen.so
    PYTHONPATH=$PWD/python step calls 30 python3 -m fa4gen.check --cases calls --json "$R/calls.json"
    local V=("$B" verify "${D96[@]}" --build-dir /tmp/build -q)
    step verify-defaults 60 "${V[@]}" --mask none,causal,local \
        --features none,sinks,softcap,sinks+softcap,paged --json "$R/verify-defaults.json"
    step verify-all 90 "${V[@]}" --dtype bf16 --mask none,causal --all-configs --json "$R/verify-all.json"
    step tune 150 "$B" tune "${TUNED[@]}" --db /tmp/db.sled --build-dir /tmp/build --json \
        --budget $(($(left) - 130))s
    local G=(--seqlen 512,1024,2048,4096,8192,16384 --hidden 3072)
    step ours 40 "$B" bench --db /tmp/db.sled --head-dim 96 "${G[@]}" --build-dir /tmp/build \
        --json "$R/ours.json" -q
    step peers 60 python3 .device/peers.py --hdims 96 --seqlens 512,1024,2048,4096,8192,16384 \
        --hidden 3072 --backends flash,cudnn --json "$R/peers.json"
    python3 .device/compare.py "$R/peers.json" "$R/ours.json" --ours fa4-gen-hopper-tuned \
        --vs flash,cudnn > "$R/compare.txt" 2>&1 || true
}

"${1:?usage: bench/d96_check.sh prepare|run}"
