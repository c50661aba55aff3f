#!/bin/bash
# The first GPU run of a head dim the Hopper template builds but the shipped cache does not
# serve from it yet (space/hopper.rs's HELD_BACK_HEAD_DIMS), prepared here without a GPU and run in one
# device call:
#
#   bench/headdim_check.sh prepare d96        # here (about 8 minutes on 2 cores): .device/d96*
#   bash bench/headdim_check.sh run d96       # on the GPU host, carrying .device; results in $OUT
#   bash bench/headdim_check.sh verify d96,d192v128   # the checks alone, of both, in one call
#
#   d96        Phi-3's head dim, in d128's tiles (V and O padded to 128 columns)
#   d192v128   DeepSeek-V3's prefill: Q and K at 192, V and O at 128
#
# prepare: the head dim's Hopper defaults of every mask and feature set, and every
# candidate of the unmasked and causal bf16/fp16 specs, compiled into a build folder; that
# folder, the binary, the library, the committed export, the committed cache's kernels the
# Python calls' cases use and the peers' scripts (../shared/bench) go to .device.
# run: first, while it is there, `python -m fa4gen.check --cases calls` (the Python entry
# points through the committed cache); then `verify` of the defaults (every mask,
# none/sinks/softcap/sinks+softcap/paged, both dtypes) and of every bf16 candidate
# (unmasked and causal); `tune` of the four unmasked and causal specs under a budget; our
# tuned picks (`fa4-gen bench --db`) beside FA2 and cuDNN in the same call: d96 on the
# grid's lengths at hidden 3072 (Phi-3-mini's 32 heads), d192v128 on `--layers
# deepseek-v3`; the new export.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${2:?usage: bench/headdim_check.sh prepare|run|verify d96|d192v128 (verify: both, comma-separated)}
dims_of() {
    case $1 in
        d96) echo 96 ;;
        d192v128) echo 192/128 ;;
        *) echo "unknown head dim $1: d96 or d192v128" >&2; exit 2 ;;
    esac
}
for n in ${NAME//,/ }; do dims_of "$n" > /dev/null; done
HD=(--arch sm90 --template hopper --head-dim "$(dims_of "${NAME%%,*}")")
# The committed cache's specs that `fa4gen.check --cases calls` calls (its cubins are not
# in git: the kit carries these, cut out of a local `fa4-gen build-cache`).
CALLS=sm90_bf16_d128_causal,sm90_fp16_d64_causal,sm90_bf16_d128_none,sm90_bf16_d128_causal_paged
CALLS+=,sm90_bf16_d64_local_sinks_paged,sm90_fp16_d256_causal_softcap_paged
TUNED=("${HD[@]}" --dtype bf16,fp16 --mask none,causal --features none)

prepare() {
    local B=target/release/fa4-gen W
    W=$(mktemp -d)
    cargo build --release --quiet
    "$B" compile "${HD[@]}" --default-only --mask none,causal,local \
        --features none,sinks,softcap,sinks+softcap,paged --out "$W/build" -q
    "$B" tune "${TUNED[@]}" --compile-only --build-dir "$W/build" --db "$W/db.sled" -q
    source bench/device_steps.sh
    pack_kit "$NAME" "$W/build"
    xz -T0 -6 -c target/release/libfa4_runtime.so > .device/libfa4_runtime.so.xz
    [ -f "generated/$(python3 -c 'import json; m = json.load(open("generated/manifest.json")); print(next(iter(m["kernels"].values()))["cubin"])')" ] \
        || "$B" build-cache -q
    python3 bench/cache_subset.py generated/manifest.json generated "$W/calls-cache" "$CALLS"
    tar cf - -C "$W" calls-cache | xz -T0 -6 > .device/calls-cache.tar.xz
    cp ../shared/bench/peers.py ../shared/bench/compare.py .device/
    rm -rf "$W"
    echo "carry .device and run: bash bench/headdim_check.sh run $NAME"
}

# The Python calls' GPU cases, through the committed cache's kernels the kit carries.
check_calls() {
    xz -dc .device/libfa4_runtime.so.xz > python/fa4gen/libfa4_runtime.so
    tar xJf .device/calls-cache.tar.xz -C /tmp
    PYTHONPATH=$PWD/python step calls 30 python3 -m fa4gen.check --cases calls --cache /tmp/calls-cache \
        --json "$R/calls.json"
}

# verify of a head dim's defaults (every mask and feature set) and of every bf16
# unmasked/causal candidate, from the build in $2; step names end in $1.
verify_dims() {
    local V=("$B" verify --arch sm90 --template hopper --head-dim "$(dims_of "$1")" --build-dir "$2" -q)
    step "verify-defaults$3" 60 "${V[@]}" --mask none,causal,local \
        --features none,sinks,softcap,sinks+softcap,paged --json "$R/verify-defaults$3.json"
    step "verify-all$3" 90 "${V[@]}" --dtype bf16 --mask none,causal --all-configs --json "$R/verify-all$3.json"
}

# Only the checks, of several head dims in one call (when machines are scarce): the
# Python calls, then each head dim's verify steps.
verify() {
    source bench/device_steps.sh
    unpack_kit "${NAME%%,*}"
    check_calls
    for n in ${NAME//,/ }; do
        mkdir -p "/tmp/kit-$n"
        tar xJf ".device/$n-build.tar.xz" -C "/tmp/kit-$n"
        verify_dims "$n" "/tmp/kit-$n/build" "-$n"
    done
}

run() {
    source bench/device_steps.sh
    unpack_kit "$NAME"
    check_calls
    verify_dims "$NAME" /tmp/build ""
    step tune 150 "$B" tune "${TUNED[@]}" --db /tmp/db.sled --build-dir /tmp/build --json \
        --budget $(($(left) - 130))s
    if [ "$NAME" = d96 ]; then
        local G=(--seqlen 512,1024,2048,4096,8192,16384 --hidden 3072)
        step ours 40 "$B" bench --db /tmp/db.sled --head-dim 96 "${G[@]}" --build-dir /tmp/build \
            --json "$R/ours.json" -q
        step peers 60 python3 .device/peers.py --hdims 96 --seqlens 512,1024,2048,4096,8192,16384 \
            --hidden 3072 --backends flash,cudnn --json "$R/peers.json"
        python3 .device/compare.py "$R/peers.json" "$R/ours.json" --ours fa4-gen-hopper-tuned \
            --vs flash,cudnn > "$R/compare.txt" 2>&1 || true
    else
        step ours 40 "$B" bench --db /tmp/db.sled --layers deepseek-v3 --template hopper \
            --build-dir /tmp/build --json "$R/ours.json" -q
        step peers 40 python3 bench/peers_layers.py --layers deepseek-v3 --json "$R/peers.json"
    fi
}

"${1:?usage: bench/headdim_check.sh prepare|run|verify d96|d192v128}"
