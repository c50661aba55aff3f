#!/bin/bash
# The LSE's global store after O's store is issued (lselate1) or not at all (lselate2, a
# bound), against the served tiles; three interleaved passes, 100 ms a cell.
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-solo.xz > $B; chmod +x $B
tar xJf .device/build.tar.xz
step() { echo "$1 rc=$2 $(( $(date +%s) - $3 ))s left $(left)" >> $R/steps.txt; }
t0=$(date +%s); timeout 60 $B verify --template hopper --head-dim 64,128,256 --dtype bf16 --mask none,causal --config-filter lselate1 -q --build-dir build --json $R/verify.json > $R/verify.log 2>&1; step verify $? $t0
for pass in 1 2 3; do
  t0=$(date +%s)
  while IFS=: read hd m cfg; do
    [ "$(left)" -lt 20 ] && break
    timeout 60 $B bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen 512,1024,2048 --budget-ms 100 -q --build-dir build --json $R/p$pass-$hd-$m-$cfg.json > /dev/null 2>> $R/bench.err
  done < .device/cells.txt
  step pass$pass 0 $t0
done
