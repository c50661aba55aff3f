# Renders the upper-bound probes of bench/NOTES.md ("What a tile boundary costs, by
# removing it piece by piece") into templates/include/fa4/hopper/kernel_ws.cuh of commit
# 25333067: `python3 THIS BITS` from the repository root, BITS the sum of the probes
# (1 no O/LSE store, 2 no Q reload, 4 no first softmax, 8 Q from fixed rows, 16 O to
# fixed rows, 32 no O TMA store, 64 no O staging, 128 next Q a tile ahead, 256 O stored
# a block late, 512/1024 odd blocks start 5000/10000 cycles late, 4096 shared O slot freed
# after the next tile's first QK issue), then build.
import sys
bits = int(sys.argv[1])
p='templates/include/fa4/hopper/kernel_ws.cuh'
s=open(p).read()
s = s.replace('#pragma once\n', f'#pragma once\n#define FA4_PROBE {bits}\n', 1)
# P1: no O / LSE stores
s = s.replace("        bool writes_o = true;", "        bool writes_o = !(FA4_PROBE & 1);")
# P2: Q loaded in the first round only
old = """            // ---- Q: each consumer's 64 rows, once its last tile's reads are done ----------
            {"""
assert old in s
s = s.replace(old, """            // ---- Q: each consumer's 64 rows, once its last tile's reads are done ----------
            if (!(FA4_PROBE & 2) || q_round == 0) {""")
old = """        const int qb = q_round % kQBuffers;
        const u32 q_tile = q_slot(consumer, qb);
        mbarrier_wait(full_q(consumer, qb), (q_round / kQBuffers) & 1);"""
assert old in s
s = s.replace(old, """        const int qb = (FA4_PROBE & 2) ? 0 : q_round % kQBuffers;
        const u32 q_tile = q_slot(consumer, qb);
        if (!(FA4_PROBE & 2) || q_round == 0) mbarrier_wait(full_q(consumer, qb), (q_round / kQBuffers) & 1);""")
# P4: the first block's softmax skipped
old = "            return scores(tile, live, o_scale, fixed);"
assert old in s
s = s.replace(old, """            if ((FA4_PROBE & 4) && tile == 0) {
#pragma unroll
                for (int i = 0; i < kNTiles * 4; ++i) s_flat[i] = 0.f;
                return false;
            }
            return scores(tile, live, o_scale, fixed);""")
open(p,'w').write(s)
s=open(p).read()
old="""                            tma_load_tile<T::kHeadDim, 64>(q_slot(c, qb), maps.q, full_q(c, qb),
                                                           q_map_row(w) + row_begin, w.head, q_map_batch(w));"""
assert old in s
s=s.replace(old,"""                            if (FA4_PROBE & 8) {
                                tma_load_tile<T::kHeadDim, 64>(q_slot(c, qb), maps.q, full_q(c, qb), 64 * c, 0, 0);
                            } else {
                            tma_load_tile<T::kHeadDim, 64>(q_slot(c, qb), maps.q, full_q(c, qb),
                                                           q_map_row(w) + row_begin, w.head, q_map_batch(w));
                            }""")
old="""                    tma_store_tile<T::kHeadDimV, 64>(smem_u32(o_stage), maps.o, q_map_row(w) + wg_row_begin, head,
                                                     q_map_batch(w));"""
assert old in s
s=s.replace(old,"""                    if (FA4_PROBE & 16) {
                        tma_store_tile<T::kHeadDimV, 64>(smem_u32(o_stage), maps.o, 64 * consumer, 0, 0);
                    } else {
                    tma_store_tile<T::kHeadDimV, 64>(smem_u32(o_stage), maps.o, q_map_row(w) + wg_row_begin, head,
                                                     q_map_batch(w));
                    }""")
open(p,'w').write(s)
s=open(p).read()
# P32: no TMA store of O (staging kept); P64: no staging of O (TMA store kept)
old="""        if (writes_o) {
            stage_o<kBf16, LayoutO>(o_stage, o_acc, o_norm, warp * T::kRowsPerWarp, rows_at);"""
assert old in s
s=s.replace(old,"""        if (writes_o) {
            if (!(FA4_PROBE & 64)) stage_o<kBf16, LayoutO>(o_stage, o_acc, o_norm, warp * T::kRowsPerWarp, rows_at);""")
old="""            if (o_by_tma) {
                if (tid == 0) {
                    if (FA4_PROBE & 16) {"""
assert old in s
s=s.replace(old,"""            if (o_by_tma) {
                if (tid == 0 && !(FA4_PROBE & 32)) {
                    if (FA4_PROBE & 16) {""")
# P128: the next tile's Q right after this tile's first K/V (two Q slots)
old="""        int q_round = 0;
        for (int round = 0; round < rounds; ++round) {
            const Work w = T::kPersistent ? work_at(round) : first_work;"""
assert old in s
s=s.replace(old,"""        int q_round = 0;
        bool q_primed = false;
        constexpr bool kAhead = (FA4_PROBE & 128) && kQBuffers == 2 && T::kPersistent;
        for (int round = 0; round < rounds; ++round) {
            const Work w = T::kPersistent ? work_at(round) : first_work;""")
old="""            // ---- Q: each consumer's 64 rows, once its last tile's reads are done ----------
            if (!(FA4_PROBE & 2) || q_round == 0) {"""
assert old in s
s=s.replace(old,"""            // ---- Q: each consumer's 64 rows, once its last tile's reads are done ----------
            if ((!(FA4_PROBE & 2) || q_round == 0) && (!kAhead || !q_primed)) {
                q_primed = true;""")
old="""                            tma_load_tile<T::kHeadDimV, T::kBlockN>(v_smem_addr + slot * T::kSmemV * 2, maps.v,
                                                                    full_v(slot), row, w.kv_head, batch_coord);
                        }
                    }"""
assert old in s
s=s.replace(old,"""                            tma_load_tile<T::kHeadDimV, T::kBlockN>(v_smem_addr + slot * T::kSmemV * 2, maps.v,
                                                                    full_v(slot), row, w.kv_head, batch_coord);
                        }
                        if (kAhead && tile == first && round + 1 < rounds) {
                            const Work wn = work_at(round + 1);
                            if (has_rows(wn)) {
                                const int qb = q_round % kQBuffers;
                                for (int c = 0; c < kConsumers; ++c) {
                                    mbarrier_wait(empty_q(c, qb), ((q_round / kQBuffers) & 1) ^ 1);
                                    mbarrier_arrive_expect_tx(full_q(c, qb), T::kHeadDim * 64 * 2);
                                    tma_load_tile<T::kHeadDim, 64>(q_slot(c, qb), maps.q, full_q(c, qb),
                                                                   q_map_row(wn) + wn.row_begin + 64 * c, wn.head,
                                                                   q_map_batch(wn));
                                }
                                ++q_round;
                            }
                        }
                    }""")
open(p,'w').write(s)
s=open(p).read()
# P256: the O TMA store issued in the next tile's second iteration (separate O slots only)
old="""    int it = 0;       // key tiles consumed over the block's work tiles (ring slot and phase)
    int q_round = 0;  // work tiles (Q's phase)"""
assert old in s
s=s.replace(old, old + """
    constexpr bool kLateO = (FA4_PROBE & 256) && T::kSeparateO && !kSharedO && T::kTma && T::kPersistent;
    int late_row = -1, late_head = 0, late_batch = 0;  // a pending O store (tid 0)
    auto issue_late_o = [&] {
        if constexpr (kLateO) {
            if (tid == 0 && late_row >= 0) {
                tma_store_tile<T::kHeadDimV, 64>(smem_u32(o_stage), maps.o, late_row, late_head, late_batch);
                late_row = -1;
            }
        }
    };""")
old="""                        issue_pv(tile - 1, live_prev);
                        pass_turn();"""
assert old in s
s=s.replace(old, """                        issue_pv(tile - 1, live_prev);
                        pass_turn();
                        if (tile == 1) issue_late_o();""")
old="""            if (o_by_tma) {
                if (tid == 0 && !(FA4_PROBE & 32)) {
                    if (FA4_PROBE & 16) {"""
assert old in s
s=s.replace(old, """            if (o_by_tma && kLateO) {
                if (tid == 0) late_row = q_map_row(w) + wg_row_begin, late_head = head, late_batch = q_map_batch(w);
            } else if (o_by_tma) {
                if (tid == 0 && !(FA4_PROBE & 32)) {
                    if (FA4_PROBE & 16) {""")
old="""    // Shared memory outlives the reads of the last TMA store.
    if (T::kTma && tid == 0) tma_store_wait_read();"""
assert old in s
s=s.replace(old, """    issue_late_o();
    // Shared memory outlives the reads of the last TMA store.
    if (T::kTma && tid == 0) tma_store_wait_read();""")
old = """        } else if constexpr (T::kSeparateO) {
            if (T::kTma && tid == 0) tma_store_wait_read();"""
assert old in s
s = s.replace(old, """        } else if constexpr (T::kSeparateO) {
            issue_late_o();  // a tile without a second block left its O pending
            if (T::kTma && tid == 0) tma_store_wait_read();""")
open(p,'w').write(s)
s=open(p).read()
# P512 / P1024: odd blocks' consumers start 5000 / 10000 cycles late (boundaries desynchronised)
old="""    if constexpr (T::kConsumerRegs > 0) registers_claim<T::kConsumerRegs>();"""
assert old in s
s=s.replace(old, old + """
    if constexpr ((FA4_PROBE & (512 | 1024)) != 0) {
        if (blockIdx.x & 1) {
            const long long start = clock64();
            const long long delay = (FA4_PROBE & 512) ? 5000 : 10000;
            while (clock64() - start < delay) {
            }
        }
    }""")
open(p,'w').write(s)
s=open(p).read()
# P4096: (shared O slot) the storing thread waits for its store's read and frees the slot
# after its next tile's first QK issue instead of in its epilogue
old="""        if constexpr (kSharedO) {
            // Free once every thread has read its rows (store_rows) and the TMA store its
            // chunk. (Both waits, whichever path ran: branching on o_by_tma here took
            // ptxas's uniform registers off the main loop's descriptors, 471 -> 514
            // instructions per iteration.)
            named_barrier_sync(1 + consumer, 128);
            if (tid == 0) {
                tma_store_wait_read();
                mbarrier_arrive(o_free);
            }
        }"""
assert old in s
s=s.replace(old, """        if constexpr (kSharedO) {
            named_barrier_sync(1 + consumer, 128);
            if constexpr (FA4_PROBE & 4096) {
                o_pending = true;
            } else if (tid == 0) {
                tma_store_wait_read();
                mbarrier_arrive(o_free);
            }
        }""")
old="""    int it = 0;       // key tiles consumed over the block's work tiles (ring slot and phase)"""
assert old in s
s=s.replace(old, """    bool o_pending = false;  // P4096: this consumer's last O store not yet waited for
    auto free_o_slot = [&] {
        if constexpr ((FA4_PROBE & 4096) && kSharedO) {
            if (o_pending) {
                if (tid == 0) {
                    tma_store_wait_read();
                    mbarrier_arrive(o_free);
                }
                o_pending = false;
            }
        }
    };
""" + old)
old="""        auto qk_scores = [&](int tile, auto live, float (&o_scale)[2], auto fixed) -> bool {
            take_turn();
            issue_qk(tile, live);
            pass_turn();"""
assert old in s
s=s.replace(old, old + """
            if (tile == 0) free_o_slot();""")
old="""    // Shared memory outlives the reads of the last TMA store.
    if (T::kTma && tid == 0) tma_store_wait_read();"""
assert old in s
s=s.replace(old, """    free_o_slot();
""" + old)
old="""        if constexpr (kSharedO) {
            // The slot's u-th use"""
assert old in s
s=s.replace(old, """        free_o_slot();  // a tile without key blocks left it pending
""" + old)
open(p,'w').write(s)
