#!/usr/bin/env bash
# Ragged buckets on whichever Hopper GPU comes: tune (d64, d128 bf16 causal, 1024 to 8192;
# the d64 m192 pack-GQA tile is a new candidate), serving before/after, cache from the
# tuned export checked through Python, the peers on the same batches, then every d64
# pack-GQA config on the mixes.
set -u
. bench/device_steps.sh
unpack_binaries
steps_begin
trap 'steps_end /tmp/db.sled' EXIT
cp .device/commit "$R/commit"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$R/gpu.csv" 2>&1
{
    mkdir -p /tmp/site && tar xJf /tmp/stash/site-rest.tar.xz -C /tmp/site
    (W=$(ls $PWD/.device/nvidia_cudnn_frontend-*.whl); cd /tmp/site && python3 -m zipfile -e "$W" .)
    cat /tmp/stash/ir.so.xz.part00 .device/ir.so.xz.part01 | xz -dc \
        > /tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
} > "$R/site.log" 2>&1 &
"$B" db import tuning-db/sm90.json --db /tmp/before.sled -q > "$R/import.log" 2>&1
"$B" db import tuning-db/sm90.json --db /tmp/db.sled -q >> "$R/import.log" 2>&1
PY="env PYTHONPATH=$PWD/python:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages FA4GEN_LIB=$PWD/.device/libfa4_runtime.so FA4GEN_CACHE=/tmp/gen"
step tune 150 "$B" tune --arch sm90 --template hopper --head-dim 64,128 --dtype bf16 --mask causal \
    --buckets 1024,2048,4096,8192 --ragged yes --budget 170s --db /tmp/db.sled --build-dir build --json
step serving-before 30 "$B" bench --serving all --db /tmp/before.sled --template hopper --build-dir build \
    --json "$R/serving-before.json"
step serving 30 "$B" bench --serving all --db /tmp/db.sled --template hopper --build-dir build \
    --json "$R/serving.json"
"$B" db export --db /tmp/db.sled --out /tmp/sm90-tuned.json > "$R/export0.log" 2>&1
step cache 100 "$B" build-cache --arch sm90 --tuning-db /tmp/sm90-tuned.json --out /tmp/gen
wait
step pycheck 25 $PY python3 -m fa4gen.check --json "$R/pycheck.json"
step peers 60 $PY python3 bench/peers_serving.py "$R/serving.json" --json "$R/serving-peers.json"
step explore-m192 30 "$B" bench --serving gpt-oss-20b --config-filter m192n128w16 --template hopper \
    --build-dir build --json "$R/explore-m192.json"
