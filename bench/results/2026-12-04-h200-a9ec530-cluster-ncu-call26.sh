#!/bin/bash
# ncu's L2 request coalescing on the cluster pairs against their twins (d128 unmasked
# 16k, one launch each): does the multicast halve L2 reads as the design says?
set -u
R=$OUT/r; mkdir -p $R
finish() { tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-cl.xz > $B; chmod +x $B
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lrc__average_xbar2gpc_sectors_op_read.ratio,lrc__lts2lrc_sectors_op_read.sum,lrc__xbar2gpc_sectors_op_read.sum,lts__t_sectors.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum
for c in m128n176w12s2_cluster2_lazy1_overlap1_pingpong1_ws1 m128n176w12s2_lazy1_overlap1_pingpong1_ws1 m128n128w12s2_cluster2_overlap1_pingpong1_ws1 m128n128w12s2_overlap1_pingpong1_ws1; do
  $B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter $c --budget-ms 1 --warmup-ms 0 -q --build-dir build > /dev/null 2>&1
  timeout 100 ncu --clock-control none -k regex:fa4_fwd -c 1 --metrics $M --csv $B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter $c --budget-ms 1 --warmup-ms 0 -q --build-dir build > $R/ncu-$c.csv 2> $R/ncu-$c.err
  echo "$c rc=$?" >> $R/steps.txt
done
