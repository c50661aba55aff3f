#!/usr/bin/env bash
# The varlen builds (fa4_fwd_varlen) on the serving mixes, before and after in one call
# (H100/H200): the sm90 cache built on the host and checked (verify of every Hopper
# default with five feature sets, its varlen cases on the varlen builds; the Python
# calls), `bench --serving --db` with this commit's binary and with the one before it
# (its own export), the peers on the same batches (bench/peers_serving.py: fa4-gen's
# Python call, FA4, cuDNN, FA2), and the grid beside FA2 and cuDNN. Two calls before it
# stash FA4's and cudnn-frontend's wheels in /tmp/stash (bench/serving_check.sh).
set -u
. bench/device_steps.sh
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen.xz > "$B"; xz -dc .device/fa4-gen-old.xz > /tmp/fa4-gen-old
xz -dc .device/libfa4_runtime.so.xz > .device/libfa4_runtime.so
chmod +x "$B" /tmp/fa4-gen-old
steps_begin
trap 'steps_end' EXIT
cp .device/commit "$R/commit"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$R/gpu.csv" 2>&1
{
    mkdir -p /tmp/site && tar xJf /tmp/stash/site-rest.tar.xz -C /tmp/site
    (W=$(ls $PWD/.device/nvidia_cudnn_frontend-*.whl); cd /tmp/site && python3 -m zipfile -e "$W" .)
    cat /tmp/stash/ir.so.xz.part00 /tmp/stash/ir.so.xz.part01 | xz -dc \
        > /tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
} > "$R/site.log" 2>&1
"$B" db import tuning-db/sm90.json --db /tmp/db.sled -q > "$R/import.log" 2>&1
xz -dc .device/sm90-old.json.xz > /tmp/sm90-old.json
/tmp/fa4-gen-old db import /tmp/sm90-old.json --db /tmp/db-old.sled -q >> "$R/import.log" 2>&1
step cache 150 "$B" build-cache --arch sm90
step verify 120 "$B" verify --arch sm90 --template hopper \
    --features none,sinks,softcap,paged,sinks+softcap --build-dir build --json "$R/verify.json"
step pycheck 40 env PYTHONPATH="$PWD/python" FA4GEN_LIB="$PWD/.device/libfa4_runtime.so" \
    python3 -m fa4gen.check --json "$R/pycheck.json"
step serving 60 "$B" bench --serving all --db /tmp/db.sled --template hopper --build-dir build \
    --json "$R/serving.json"
step serving-old 60 /tmp/fa4-gen-old bench --serving all --db /tmp/db-old.sled --template hopper \
    --build-dir build-old --json "$R/serving-old.json"
step peers 120 env PYTHONPATH="$PWD/python:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages" \
    FA4GEN_LIB="$PWD/.device/libfa4_runtime.so" \
    python3 bench/peers_serving.py "$R/serving.json" --json "$R/serving-peers.json"
step verify-persistent 60 "$B" verify --arch sm90 --template hopper --head-dim 64,128,256 --dtype bf16 \
    --mask causal,none --config-filter persistent1 --build-dir build --json "$R/verify-persistent.json"
