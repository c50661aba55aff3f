#!/bin/bash
# p32 no TMA store of O (staged); p4096 (shared O slot, d256): the storing thread waits
# for the store's read and frees the slot after its next first QK issue, not in its
# epilogue (checked first). Three passes.
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
BINS="base p32 p4096"
for b in $BINS; do xz -dc .device/fa4-gen-$b.xz > .device/$b; chmod +x .device/$b; done
CELLS="256:none:m128n64w12s2_lazy1_overlap1_persistent1_pingpong1_ws1:512,1024,2048,16384
256:causal:m128n64w12s2_overlap1_persistent1_pingpong1_ws1:512,1024,2048
128:none:m128n128w12s2_lazy1_overlap1_persistent1_pingpong1_ws1:512"
timeout 150 .device/p4096 verify --template hopper --head-dim 256 --dtype bf16 --mask none,causal --config-filter persistent1_pingpong1 -q --build-dir build-p4096 > $R/verify-p4096.log 2>&1; echo "verify rc=$? left $(left)" >> $R/steps.txt
for pass in 1 2 3; do
  for b in $BINS; do
    for c in $CELLS; do
      IFS=: read hd m cfg sl <<< "$c"
      [ "$(left)" -lt 20 ] && break
      timeout 60 .device/$b bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen $sl --budget-ms 100 -q --build-dir build-$b --json $R/$b-$pass-$hd-$m-$sl.json > /dev/null 2>> $R/bench.err
    done
    echo "$b pass $pass left $(left)" >> $R/steps.txt
  done
done
