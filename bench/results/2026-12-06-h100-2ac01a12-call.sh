#!/usr/bin/env bash
# main (2ac01a12) on the serving mixes, on an H100, after `bash bench/serving_check.sh stash`:
# its cache built on the host and checked through Python, bench --serving --db beside the
# peers; every persistent and pack-GQA config on the same mixes (what ragged buckets
# could pick); racecheck's hazard report on the causal defaults (d64, d128, d256) and on
# every persistent d256 config. (The site set-up is serving_check.sh's fa4_site.)
set -u
. bench/device_steps.sh
unpack_binaries
steps_begin
trap 'steps_end' EXIT
"$B" db import tuning-db/sm90.json --db /tmp/db.sled -q > "$R/import.log" 2>&1
PY="env PYTHONPATH=$PWD/python:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages FA4GEN_LIB=$PWD/.device/libfa4_runtime.so"
step cache 100 "$B" build-cache --arch sm90
step pycheck 40 $PY python3 -m fa4gen.check --json "$R/pycheck.json"
step serving 60 "$B" bench --serving all --db /tmp/db.sled --template hopper --build-dir build --json "$R/serving.json"
step peers 100 $PY python3 bench/peers_serving.py "$R/serving.json" --json "$R/serving-peers.json"
step explore-persistent 90 "$B" bench --serving all --config-filter persistent1 --budget-ms 60 \
    --template hopper --build-dir build --json "$R/explore-persistent.json"
step explore-packgqa 60 "$B" bench --serving all --config-filter packgqa1 --budget-ms 60 \
    --template hopper --build-dir build --json "$R/explore-packgqa.json"
RC="compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 40"
step race-defaults 60 $RC "$B" verify --arch sm90 --template hopper --head-dim 64,128,256 --dtype bf16 \
    --mask causal --cases s128 --build-dir build
step race-d256-persistent 40 $RC "$B" verify --arch sm90 --template hopper --head-dim 256 --dtype bf16 \
    --mask causal --config-filter persistent1 --cases s128 --build-dir build
