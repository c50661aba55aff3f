#!/bin/bash
# Split tail (fixed walk): verify every unmasked persistent Hopper tile on split shapes,
# then time them old / not split / split, interleaved, twice.
set -u
START=$(date +%s); LIMIT=${LIMIT:-380}
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
B=$PWD/.device/fa4-gen; O=$PWD/.device/fa4-old
xz -dc .device/fa4-gen-new.xz > $B; chmod +x $B
xz -dc .device/fa4-old.xz > $O; chmod +x $O
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
CASES=split_q1100_k1000,split_gqa4to1_s2000,s1,q77_k513,varlen_ragged,s4096
step verify 120 $B verify --arch sm90 --template hopper --dtype bf16,fp16 --head-dim 64,128,256 --mask none --config-filter persistent1 --cases $CASES --build-dir build --json $R/verify.json
BB="bench --template hopper --mask none --head-dim 64,128,256 --config-filter persistent1 --budget-ms 50 -q"
for p in 1 2; do
step old-$p 60 $O $BB --build-dir build-old --json $R/old-$p.json
step nosplit-$p 60 $B $BB --build-dir build --no-split-tail --json $R/nosplit-$p.json
step split-$p 60 $B $BB --build-dir build --json $R/split-$p.json
done
echo "left $(left)" >> $R/steps.txt
