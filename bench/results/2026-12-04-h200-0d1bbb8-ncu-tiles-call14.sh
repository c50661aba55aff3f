#!/bin/bash
# ncu's L2 and shared-memory counters for our d128 unmasked 16k tiles one launch each:
# the plain 128x128 tile (FA4's), the served 128x176 one, the persistent 128x128 one.
set -u
R=$OUT/r; mkdir -p $R
finish() { tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-new.xz > $B; chmod +x $B
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum,smsp__inst_executed_pipe_uniform.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_sectors.sum,lts__t_requests.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_l1.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_atom.sum,lts__t_sectors_op_red.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_ltcfabric.sum
for c in m128n128w12s2_overlap1_pingpong1_ws1 m128n176w12s2_overlap1_pingpong1_ws1 m128n128w12s2_overlap1_persistent1_pingpong1_ws1; do
  $B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter $c --budget-ms 1 --warmup-ms 0 -q --build-dir build > /dev/null 2>&1
  timeout 120 ncu --clock-control none -k regex:fa4_fwd -c 1 --metrics $M --csv $B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter $c --budget-ms 1 --warmup-ms 0 -q --build-dir build > $R/ncu-$c.csv 2> $R/ncu-$c.err
  echo "$c rc=$?" >> $R/steps.txt
done
