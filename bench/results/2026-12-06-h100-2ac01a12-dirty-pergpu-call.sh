#!/usr/bin/env bash
# Per-GPU picks on an H100: the grid with the H200's picks (the committed export) and
# with the H100's own dense picks over them (its 72 bf16 keys), alternated twice; then
# the serving mixes with the H100's picks (ragged batches keep the ragged buckets).
set -u
. bench/device_steps.sh
B=$PWD/.device2/fa4-gen
xz -dc .device2/fa4-gen.xz > "$B"; chmod +x "$B"
steps_begin
trap 'steps_end' EXIT
cp .device2/commit "$R/commit"
xz -dc .device2/sm90-h100-carried.json.xz > /tmp/h100.json
"$B" db import tuning-db/sm90.json --db /tmp/h200.sled -q > "$R/import.log" 2>&1
"$B" db import tuning-db/sm90.json --db /tmp/both.sled -q >> "$R/import.log" 2>&1
"$B" db import /tmp/h100.json --db /tmp/both.sled -q >> "$R/import.log" 2>&1
G="bench --template hopper --build-dir build --budget-ms 150"
step grid-h200-1 60 "$B" $G --db /tmp/h200.sled --json "$R/grid-h200-1.json"
step grid-h100-1 60 "$B" $G --db /tmp/both.sled --json "$R/grid-h100-1.json"
step grid-h200-2 40 "$B" $G --db /tmp/h200.sled --json "$R/grid-h200-2.json"
step grid-h100-2 40 "$B" $G --db /tmp/both.sled --json "$R/grid-h100-2.json"
step serving-h100 30 "$B" bench --serving all --db /tmp/both.sled --template hopper --build-dir build --json "$R/serving-h100.json"
