#!/bin/bash
# The grid and the layers on the merged database (split tail, re-tuned unmasked keys)
# beside the peers in one call; the rebuilt cache opened and served; the Python check.
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
step() {
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $name (left $(left))" | tee -a $R/steps.txt; return; fi
  local t0=$(date +%s)
  timeout $(( $(left) - 10 )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s left $(left)" | tee -a $R/steps.txt
}
finish() { tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-new.xz > $B; chmod +x $B
xz -dc .device/libfa4_gen.so.xz > python/fa4gen/libfa4_gen.so
tar xJf .device/gen-sm90.tar.xz
xz -dc .device/sm90-cur.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import.log 2>&1
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
step verify 60 $B verify --arch sm90 --template hopper --dtype bf16,fp16 --head-dim 64,128,256 --mask none --config-filter persistent1 --cases split_q2200_k4100,split_gqa4to1_q2600_k4400,s4096 --build-dir build --json $R/verify.json
step peers 120 python3 .device/peers.py --backends flash,cudnn --json $R/grid-peers.json
step grid 90 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper.json
step layers 40 $B bench --db /tmp/db.sled --layers all --build-dir build --json $R/layers.json
step layers-peers 40 python3 bench/peers_layers.py --json $R/layers-peers.json
step host 30 $B bench --host --cache generated
step pycheck 60 env PYTHONPATH=$PWD/python python3 -m fa4gen.check --head-dims 128 --json $R/pycheck.json
# The slow fourth buffer set (call 1: whichever buffer moves): the clocks beside it.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 20 > $R/clocks.csv 2>&1 &
SMI=$!
stamp() { while IFS= read -r l; do echo "$(date +%H:%M:%S.%N) $l"; done; }
export -f stamp
step placements 30 bash -c "$B bench --db /tmp/db.sled --template hopper --head-dim 128 --mask causal --seqlen 4096 --placements 6 --move-buffer o --build-dir build --budget-ms 60 --json $R/placements.json 2>&1 | stamp"
kill $SMI
echo "left $(left)" >> $R/steps.txt
