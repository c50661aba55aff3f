# Probe 8192 of bench/NOTES.md ("What a tile boundary costs"): O staged in the Q buffer its
# tile read (two Q buffers; the O slots left unused), the buffer handed back to the
# producer at the next tile's first QK issue. `python3 THIS` from the repository root
# on 25333067's templates, then build.
import sys
p='templates/include/fa4/hopper/kernel_ws.cuh'
s=open(p).read()
s = s.replace('#pragma once\n', '#pragma once\n#define FA4_PROBE 8192\n', 1)
old="""    u16* const o_stage = reinterpret_cast<u16*>(smem_raw) +
                         (o_smem_addr - q_smem_addr) / 2 +
                         (kSharedO ? 0 : consumer * (T::kSeparateO ? kOSlotBytes : kQSlotBytes) / 2);"""
assert old in s
s=s.replace(old, """    u16* const o_stage_slot = reinterpret_cast<u16*>(smem_raw) +
                         (o_smem_addr - q_smem_addr) / 2 +
                         (kSharedO ? 0 : consumer * (T::kSeparateO ? kOSlotBytes : kQSlotBytes) / 2);""")
old="""    int it = 0;       // key tiles consumed over the block's work tiles (ring slot and phase)"""
assert old in s
s=s.replace(old, """    constexpr bool kOInQ = (FA4_PROBE & 8192) && T::kSeparateO && !kSharedO && kQBuffers == 2 && T::kPersistent;
    int q_pending = -1;  // kOInQ: the Q buffer whose O store is not yet waited for
    auto hand_back_q = [&] {
        if constexpr (kOInQ) {
            if (q_pending >= 0) {
                fence_proxy_async();
                if (T::kTma && tid == 0) tma_store_wait_read();
                release(empty_q(consumer, q_pending));
                q_pending = -1;
            }
        }
    };
""" + old)
old="""        const int qb = q_round % kQBuffers;
        const u32 q_tile = q_slot(consumer, qb);
        mbarrier_wait(full_q(consumer, qb), (q_round / kQBuffers) & 1);"""
assert old in s
s=s.replace(old, old + """
        u16* const o_stage = kOInQ ? reinterpret_cast<u16*>(smem_raw) + (q_tile - q_smem_addr) / 2 : o_stage_slot;""")
# no release at the last QK
n = s.count("if constexpr (T::kSeparateO) release(empty_q(consumer, qb));")
assert n == 2
s=s.replace("if constexpr (T::kSeparateO) release(empty_q(consumer, qb));", "if constexpr (T::kSeparateO && !kOInQ) release(empty_q(consumer, qb));")
old="""        auto qk_scores = [&](int tile, auto live, float (&o_scale)[2], auto fixed) -> bool {
            take_turn();
            issue_qk(tile, live);
            pass_turn();"""
assert old in s
s=s.replace(old, old + """
            if (tile == 0) hand_back_q();""")
old="""        } else if constexpr (T::kSeparateO) {
            if (T::kTma && tid == 0) tma_store_wait_read();
            named_barrier_sync(1 + consumer, 128);
        }"""
assert old in s
s=s.replace(old, """        } else if constexpr (kOInQ) {
            hand_back_q();  // a tile without key blocks left one pending
        } else if constexpr (T::kSeparateO) {
            if (T::kTma && tid == 0) tma_store_wait_read();
            named_barrier_sync(1 + consumer, 128);
        }""")
old="""        it += n_tiles;
        ++q_round;"""
assert old in s
s=s.replace(old, """        if constexpr (kOInQ) q_pending = qb;
""" + old)
open(p,'w').write(s)
