#!/usr/bin/env bash
# The ragged buckets on an H100: two device calls after `bash bench/serving_check.sh stash`
# (FA4's and cudnn-frontend's wheels in /tmp/stash), the machine kept warm between them.
# Call 1: `tune` the ragged keys into the committed export's database, time the serving
# mixes with them (bench --serving --db) beside the peers; racecheck's analysis of a
# persistent d256 tile (two consumers taking turns at one O slot) and of a d128 tile with
# turns at the MUFU. (Its build-cache step failed: --arch with another export needs a
# whole build, so its Python column is missing; call 2 builds into a fresh folder.)
# Call 2: the cache built from call 1's export (tuning-db/sm90.json as committed), checked
# through Python, and the serving mixes again (CLI and Python) beside the peers.
set -u
. bench/device_steps.sh
unpack_binaries
steps_begin
if [ "${1:-}" = tune ]; then
    trap 'steps_end /tmp/db.sled' EXIT
    "$B" db import tuning-db/sm90.json --db /tmp/db.sled -q > "$R/import.log" 2>&1
    step tune 200 "$B" tune --arch sm90 --template hopper --head-dim 64,128 --dtype bf16 --mask causal \
        --buckets 1024,2048,4096,8192 --ragged yes --budget 230s --db /tmp/db.sled --build-dir build --json
    RC="compute-sanitizer --tool racecheck --racecheck-report analysis --print-limit 20"
    step race-d256-shared-o 40 $RC "$B" verify --arch sm90 --template hopper --head-dim 256 --dtype bf16 \
        --mask causal --config-filter m128n64w12s2_overlap1_persistent1_pingpong1_ws1 --cases s128 --build-dir build
    step race-d128-mufu 40 $RC "$B" verify --arch sm90 --template hopper --head-dim 128 --dtype bf16 \
        --mask causal --config-filter m128n128w12s2_mufuturn1_overlap1_persistent1_pingpong1_ws1 --cases s128 --build-dir build
else
    trap 'steps_end' EXIT
    xz -dc .device/sm90-ragged.json.xz > /tmp/sm90-ragged.json  # call 1's export
    "$B" db import /tmp/sm90-ragged.json --db /tmp/db.sled -q > "$R/import.log" 2>&1
    step cache 100 "$B" build-cache --arch sm90 --tuning-db /tmp/sm90-ragged.json --out /tmp/gen
fi
PY="env PYTHONPATH=$PWD/python:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages FA4GEN_LIB=$PWD/.device/libfa4_runtime.so FA4GEN_CACHE=/tmp/gen"
step pycheck 30 $PY python3 -m fa4gen.check --json "$R/pycheck.json"
step serving 40 "$B" bench --serving all --db /tmp/db.sled --template hopper --build-dir build --json "$R/serving.json"
step peers 60 $PY python3 bench/peers_serving.py "$R/serving.json" --json "$R/serving-peers.json"
