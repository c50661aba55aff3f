// The Hopper FlashAttention forward kernel, warp-specialised (sm_90a).
//
// Warpgroup 0 is the producer: it gives most of its registers back (setmaxnreg) and loads
// K and V tiles into a ring of kStages slots, by TMA (one thread, tensor maps encoded on
// the host) or by cp.async (paged K/V, a tile running past the keys); each slot is
// guarded by a "full" mbarrier (its bytes landed) and an "empty" one (every consumer
// warp is done reading it). Warpgroups 1 .. kWarpgroups are consumers of 64 query rows each; they never wait
// on one another except for their turn at the tensor cores:
//
//   load      Q: each consumer its own 64 rows (cp.async), once
//   QK GEMM   S = Q K^T            wgmma SS from the K slot
//   mask      only on blocks that straddle a mask edge or the end of the keys
//   softmax   running max and sum; P = exp2(S * scale_log2 - max * scale_log2)
//   PV GEMM   O = O * rescale + P V   wgmma RS: P from registers, V from the V slot
//   epilogue  O / rowsum (sink logits join the rowsum) through shared memory; LSE per row
//
// Overlap (kOverlap): iteration j issues QK(j) and then PV(j - 1) before waiting for
// either, so the softmax of block j runs while the tensor cores finish PV(j - 1).
// Pingpong (kPingpong): consumers issue their GEMMs in turn (named barriers, round
// robin), so one warpgroup's softmax runs under the others' GEMMs.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/common/softmax.cuh"
#include "fa4/hopper/load.cuh"
#include "fa4/hopper/pipeline.cuh"
#include "fa4/hopper/tma.cuh"
#include "fa4/hopper/traits.cuh"
#include "fa4/hopper/wgmma.cuh"
#include "fa4/portable/kernel.cuh"  // store_rows

namespace fa4 {
namespace hopper {

// Named barriers: 1 + c is consumer c's own (128 threads); kTurnBarrier + c is its turn
// at the tensor cores (its 128 threads wait, the consumer before it arrives); the
// producer's warps meet at kProducerBarrier.
constexpr int kTurnBarrier = 4;
constexpr int kProducerBarrier = 7;

// k_map and v_map: the TMA kernels' tensor maps over K and V (TmaFwdParams), else null.
template <class Config>
__device__ __forceinline__ void forward_warp_specialized(const FwdParams& params, const TensorMap* k_map,
                                                         const TensorMap* v_map) {
    using T = Traits<Config>;
    constexpr bool kBf16 = T::kIsBf16;
    constexpr int kNTiles = T::kNTiles;
    constexpr int kOTiles = T::kOTiles;
    constexpr int kStages = T::kStages;
    constexpr int kConsumers = T::kWarpgroups;
    using Mma = Wgmma<T::kBlockN, kBf16>;
    using MmaO = Wgmma<T::kHeadDimV, kBf16>;
    using LayoutQ = WgmmaLayout<64, T::kHeadDim>;   // one consumer's rows
    using LayoutO = WgmmaLayout<64, T::kHeadDimV>;  // staged where its Q was
    constexpr int kSmemQOBytes = T::kSmemQO / kConsumers * 2;

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const u32 q_smem_addr = smem_u32(smem_raw);
    const u32 k_smem_addr = q_smem_addr + T::kSmemQO * 2;
    const u32 v_smem_addr = k_smem_addr + kStages * T::kSmemK * 2;
    // Ring barriers, 8 bytes each: full K, full V, empty K, empty V, kStages of each.
    const u32 bars = q_smem_addr + T::kSmemTilesBytes;
    auto full_k = [&](int slot) { return bars + 8 * slot; };
    auto full_v = [&](int slot) { return bars + 8 * (kStages + slot); };
    auto empty_k = [&](int slot) { return bars + 8 * (2 * kStages + slot); };
    auto empty_v = [&](int slot) { return bars + 8 * (3 * kStages + slot); };

    // The work tiles: one block's rows of one head of one sequence. A grid of one block
    // per tile takes its tile from blockIdx (causal: the blocks further down, which see
    // more keys, first); a persistent grid (unmasked only) strides over them, m-blocks
    // fastest, so the blocks running together share a head's K/V in L2.
    const int group = params.heads_q / params.heads_kv;
    const int kGroup = T::kPackGqa ? group : 1;
    const int heads_grid = T::kPackGqa ? params.heads_kv : params.heads_q;
    const int m_blocks = T::kPersistent ? (params.seqlen_q * kGroup + T::kBlockM - 1) / T::kBlockM : gridDim.x;
    const int tiles = T::kPersistent ? m_blocks * heads_grid * params.batch : 1;
    const int first_tile = T::kPersistent ? blockIdx.x : 0;
    const int tile_stride = T::kPersistent ? gridDim.x : 1;
    struct Work {
        SeqView seq;
        int batch, head, kv_head, rows, row_begin;
        int query_first, query_last, n_end, n_tiles;
    };
    auto work_at = [&](int t) {
        Work w;
        int m = blockIdx.x, head_idx = blockIdx.y;
        w.batch = blockIdx.z;
        if constexpr (T::kPersistent) {
            m = t % m_blocks;
            head_idx = (t / m_blocks) % heads_grid;
            w.batch = t / (m_blocks * heads_grid);
        }
        const int m_block = T::kMask == MaskKind::Causal ? m_blocks - 1 - m : m;
        w.seq = seq_view<T::kPaged>(params, w.batch);
        w.rows = w.seq.seqlen_q * kGroup;
        w.row_begin = m_block * T::kBlockM;
        w.kv_head = T::kPackGqa ? head_idx : head_idx / group;
        w.head = T::kPackGqa ? w.kv_head * group : head_idx;
        w.query_first = w.row_begin / kGroup;
        w.query_last = (imin(w.row_begin + T::kBlockM, w.rows) - 1) / kGroup;
        const Mask<T::kMask> mask{w.seq.seqlen_q, w.seq.seqlen_k, params.window_left, params.window_right};
        w.n_end = mask.n_block_end(w.query_first, w.query_last + 1, T::kBlockN);
        // A block past its sequence's rows has nothing to do (0 tiles, no epilogue).
        w.n_tiles = w.row_begin >= w.rows ? 0 : imax(0, w.n_end - mask.n_block_begin(w.query_first, T::kBlockN));
        return w;
    };
    if constexpr (!T::kPersistent) {
        if (work_at(0).row_begin >= work_at(0).rows) return;
    }

    if (threadIdx.x == 0) {
        for (int slot = 0; slot < kStages; ++slot) {
            mbarrier_init(full_k(slot), 1);  // the producer's one arrival (+ its copies)
            mbarrier_init(full_v(slot), 1);
            mbarrier_init(empty_k(slot), 4 * kConsumers);  // every consumer warp
            mbarrier_init(empty_v(slot), 4 * kConsumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    const int warpgroup = threadIdx.x / 128;
    const int tid = threadIdx.x % 128;  // within the warpgroup

    // ---- producer: K and V tiles into the ring ------------------------------------------
    // Whole tiles of a strided K/V go by TMA, one thread issuing; the first tile when it
    // runs past the keys (its tail zero-filled) and every paged tile go by cp.async, the
    // whole warpgroup copying and the barrier held open until the copies land. `it`
    // counts key tiles over the block's work tiles: ring slot and phase follow from it.
    if (warpgroup == 0) {
        if constexpr (T::kProducerRegs > 0) registers_release<T::kProducerRegs>();
        if constexpr (T::kTma) {
            if (tid == 0) {
                tma_prefetch(k_map);
                tma_prefetch(v_map);
            }
        }
        int it = 0;
        for (int t = first_tile; t < tiles; t += tile_stride) {
            const Work w = work_at(t);
            const u16* const k_gmem =
                static_cast<const u16*>(params.k) + w.seq.k_offset + w.kv_head * params.k_head_stride;
            const u16* const v_gmem =
                static_cast<const u16*>(params.v) + w.seq.v_offset + w.kv_head * params.v_head_stride;
            const PageTable pages{params.page_table + i64(w.batch) * params.page_table_batch_stride,
                                  params.page_size};
            auto copy_tile = [&](int tile) {  // cp.async by the whole warpgroup
                const int slot = (it + tile) % kStages;
                const u32 free_parity = (((it + tile) / kStages) & 1) ^ 1;
                const int key_begin = (w.n_end - 1 - tile) * T::kBlockN;
                // The first tile is the last key block: rows past the keys load as zeros.
                const int valid = tile == 0 ? w.seq.seqlen_k - key_begin : T::kBlockN;
                mbarrier_wait(empty_k(slot), free_parity);
                producer_load_kv<T::kPaged, T::kBlockN, typename T::LayoutK, 128>(
                    k_smem_addr + slot * T::kSmemK * 2, k_gmem, params.k_row_stride, params.k_batch_stride, pages,
                    key_begin, valid, tid);
                cp_async_mbarrier_track(full_k(slot));
                named_barrier_sync(kProducerBarrier, 128);      // every copy is tracked ...
                if (tid == 0) mbarrier_arrive(full_k(slot));  // ... before the one arrival
                mbarrier_wait(empty_v(slot), free_parity);
                producer_load_kv<T::kPaged, T::kBlockN, typename T::LayoutV, 128>(
                    v_smem_addr + slot * T::kSmemV * 2, v_gmem, params.v_row_stride, params.v_batch_stride, pages,
                    key_begin, valid, tid);
                cp_async_mbarrier_track(full_v(slot));
                named_barrier_sync(kProducerBarrier, 128);
                if (tid == 0) mbarrier_arrive(full_v(slot));
            };
            if constexpr (T::kTma) {
                // The other threads wait here for thread 0 to finish the last work tile's
                // issues: a slot's barrier is never waited on two phases ahead.
                if constexpr (T::kPersistent) named_barrier_sync(kProducerBarrier, 128);
                int first = 0;
                if (w.n_tiles > 0 && w.seq.seqlen_k - (w.n_end - 1) * T::kBlockN < T::kBlockN) {
                    copy_tile(0);
                    first = 1;
                }
                if (tid == 0) {
                    // TMA coordinates of the sequence: a packed batch is one batch of all rows.
                    const int row0 = params.cu_seqlens_k != nullptr ? params.cu_seqlens_k[w.batch] : 0;
                    const int batch_coord = params.cu_seqlens_k != nullptr ? 0 : w.batch;
                    for (int tile = first; tile < w.n_tiles; ++tile) {
                        const int slot = (it + tile) % kStages;
                        const u32 free_parity = (((it + tile) / kStages) & 1) ^ 1;
                        const int row = row0 + (w.n_end - 1 - tile) * T::kBlockN;
                        mbarrier_wait(empty_k(slot), free_parity);
                        mbarrier_arrive_expect_tx(full_k(slot), T::kSmemK * 2);
#pragma unroll
                        for (int cb = 0; cb < T::kHeadDim / 64; ++cb) {
                            tma_load_4d(k_smem_addr + slot * T::kSmemK * 2 + cb * T::kBlockN * 128, k_map,
                                        full_k(slot), cb * 64, row, w.kv_head, batch_coord);
                        }
                        mbarrier_wait(empty_v(slot), free_parity);
                        mbarrier_arrive_expect_tx(full_v(slot), T::kSmemV * 2);
#pragma unroll
                        for (int cb = 0; cb < T::kHeadDimV / 64; ++cb) {
                            tma_load_4d(v_smem_addr + slot * T::kSmemV * 2 + cb * T::kBlockN * 128, v_map,
                                        full_v(slot), cb * 64, row, w.kv_head, batch_coord);
                        }
                    }
                }
            } else {
                for (int tile = 0; tile < w.n_tiles; ++tile) copy_tile(tile);
            }
            it += w.n_tiles;
        }
        cp_async_wait<0>();
        return;
    }

    // ---- consumers ----------------------------------------------------------------------
    if constexpr (T::kConsumerRegs > 0) registers_claim<T::kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int quad_row = lane / 4;
    const int quad_col = lane % 4;
    const u32 q_tile = q_smem_addr + consumer * kSmemQOBytes;
    const float score_scale_log2 = T::kSoftcap ? kLog2e : params.scale_log2;

    // Turns at the tensor cores, round robin from consumer 0 (the last one lets it start).
    auto take_turn = [&] {
        if constexpr (T::kPingpong) named_barrier_sync(kTurnBarrier + consumer, 256);
    };
    auto pass_turn = [&] {
        if constexpr (T::kPingpong) named_barrier_arrive(kTurnBarrier + (consumer + 1) % kConsumers, 256);
    };
    if constexpr (T::kPingpong) {
        if (consumer == kConsumers - 1) named_barrier_arrive(kTurnBarrier, 256);
    }
    // A warp is done with a slot once its wgmma reads of it have completed.
    auto release = [&](u32 bar) {
        __syncwarp();
        if (lane == 0) mbarrier_arrive(bar);
    };

    int it = 0;  // key tiles consumed over the block's work tiles (ring slot and phase)
    for (int t = first_tile; t < tiles; t += tile_stride) {
        const Work w = work_at(t);
        if (w.n_tiles == 0 && w.row_begin >= w.rows) continue;
        const SeqView& seq = w.seq;
        const int rows = w.rows;
        const int head = w.head;
        const int n_end = w.n_end;
        const int n_tiles = w.n_tiles;
        const int query_first = w.query_first;
        const int query_last = w.query_last;
        const Mask<T::kMask> mask{seq.seqlen_q, seq.seqlen_k, params.window_left, params.window_right};
        const int wg_row_begin = w.row_begin + consumer * 64;  // this consumer's first row
        const int warp_row = wg_row_begin + warp * T::kRowsPerWarp;

        // ---- load: this consumer's Q rows ------------------------------------------------
        {
            const u16* const q_gmem =
                static_cast<const u16*>(params.q) + seq.q_offset + head * params.q_head_stride;
            const TileCopy<64, LayoutQ, 128> q_copy(tid);
            if constexpr (T::kPackGqa) {
                q_copy.load_rows(q_tile, q_gmem, [&](int r) {
                    const int row = wg_row_begin + r;
                    return q_gmem + i64(row / kGroup) * params.q_row_stride + (row % kGroup) * params.q_head_stride;
                }, rows - wg_row_begin);
            } else {
                q_copy.load(q_tile, q_gmem + i64(wg_row_begin) * params.q_row_stride, params.q_row_stride,
                            rows - wg_row_begin);
            }
            cp_async_commit();
            cp_async_wait<0>();
            fence_proxy_async();
            named_barrier_sync(1 + consumer, 128);
        }

        float o_acc[kOTiles * 4];
#pragma unroll
        for (int i = 0; i < kOTiles * 4; ++i) o_acc[i] = 0.f;
        OnlineSoftmax<1, kNTiles> softmax;
        softmax.init();
        float s[1][kNTiles][4];
        float(&s_flat)[kNTiles * 4] = reinterpret_cast<float(&)[kNTiles * 4]>(s[0]);
        u32 p[T::kPvSteps][4];

        // ---- QK GEMM: S = Q K^T (wgmma, both operands in shared memory), issued only ---------
        auto issue_qk = [&](int tile) {
            const int slot = (it + tile) % kStages;
            mbarrier_wait(full_k(slot), ((it + tile) / kStages) & 1);
            fence_proxy_async();  // cp.async's writes (generic proxy) before wgmma's reads
            const u32 k_tile = k_smem_addr + slot * T::kSmemK * 2;
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < T::kQkSteps; ++ks) {
                Mma::ss(s_flat, k_major_desc<LayoutQ>(q_tile, ks), k_major_desc<typename T::LayoutK>(k_tile, ks), ks > 0);
            }
            wgmma_commit();
        };
        // ---- PV GEMM: O += P V (wgmma, P from registers, V MN-major), issued only ------------
        auto issue_pv = [&](int tile) {
            const int slot = (it + tile) % kStages;
            mbarrier_wait(full_v(slot), ((it + tile) / kStages) & 1);
            fence_proxy_async();
            const u32 v_tile = v_smem_addr + slot * T::kSmemV * 2;
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < T::kPvSteps; ++ks) {
                MmaO::rs(o_acc, p[ks], mn_major_desc<typename T::LayoutV>(v_tile, ks), 1);
            }
            wgmma_commit();
        };
        // ---- soft-capping, mask, online softmax on S (which the QK GEMM has written) --------
        auto scores = [&](int tile, float (&o_scale)[2]) {
            if constexpr (T::kSoftcap) {
                const float to_unit = params.softmax_scale / params.softcap;
#pragma unroll
                for (int i = 0; i < kNTiles * 4; ++i) s_flat[i] = params.softcap * tanh_approx(s_flat[i] * to_unit);
            }
            const int col_begin = (n_end - 1 - tile) * T::kBlockN;
            const bool needs_mask = T::kMask == MaskKind::None
                                        ? tile == 0
                                        : mask.block_needs_mask(query_first, query_last, col_begin,
                                                                col_begin + T::kBlockN);
            if (needs_mask) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = (warp_row + h * 8 + quad_row) / kGroup;
                    const int first = mask.col_begin(row);
                    const int end = mask.col_end(row);
#pragma unroll
                    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int col = col_begin + nt * 8 + quad_col * 2 + e;
                            if (col < first || col >= end) s[0][nt][2 * h + e] = neg_inf();
                        }
                }
            }
            softmax.update(s, score_scale_log2, o_scale);
        };
        auto pack_p = [&] {
#pragma unroll
            for (int ks = 0; ks < T::kPvSteps; ++ks) {
                p[ks][0] = pack2<kBf16>(s[0][2 * ks][0], s[0][2 * ks][1]);
                p[ks][1] = pack2<kBf16>(s[0][2 * ks][2], s[0][2 * ks][3]);
                p[ks][2] = pack2<kBf16>(s[0][2 * ks + 1][0], s[0][2 * ks + 1][1]);
                p[ks][3] = pack2<kBf16>(s[0][2 * ks + 1][2], s[0][2 * ks + 1][3]);
            }
        };
        auto rescale_o = [&](const float (&o_scale)[2]) {
#pragma unroll
            for (int ot = 0; ot < kOTiles; ++ot)
#pragma unroll
                for (int e = 0; e < 4; ++e) o_acc[ot * 4 + e] *= o_scale[e / 2];
        };
        auto pv_done = [&](int tile) {
            fence_regs(o_acc);
#pragma unroll
            for (int ks = 0; ks < T::kPvSteps; ++ks) fence_regs(p[ks]);
            release(empty_v((it + tile) % kStages));
        };

        if constexpr (T::kOverlap) {
            // Block 0 alone, then each iteration: QK(j) and PV(j - 1) in flight, softmax(j)
            // under PV(j - 1); the last PV after the loop.
            if (n_tiles > 0) {
                take_turn();
                issue_qk(0);
                pass_turn();
                wgmma_wait<0>();
                fence_regs(s_flat);
                release(empty_k(it % kStages));
                float o_scale[2];
                scores(0, o_scale);
                pack_p();
            }
            for (int tile = 1; tile < n_tiles; ++tile) {
                take_turn();
                issue_qk(tile);
                issue_pv(tile - 1);
                pass_turn();
                wgmma_wait<1>();  // S(tile) is in; PV(tile - 1) may still run
                fence_regs(s_flat);
                release(empty_k((it + tile) % kStages));
                float o_scale[2];
                scores(tile, o_scale);
                wgmma_wait<0>();
                pv_done(tile - 1);
                rescale_o(o_scale);
                pack_p();
            }
            if (n_tiles > 0) {
                take_turn();
                issue_pv(n_tiles - 1);
                pass_turn();
                wgmma_wait<0>();
                pv_done(n_tiles - 1);
            }
        } else {
            for (int tile = 0; tile < n_tiles; ++tile) {
                take_turn();
                issue_qk(tile);
                pass_turn();
                wgmma_wait<0>();
                fence_regs(s_flat);
                release(empty_k((it + tile) % kStages));
                float o_scale[2];
                scores(tile, o_scale);
                rescale_o(o_scale);
                pack_p();
                take_turn();
                issue_pv(tile);
                pass_turn();
                wgmma_wait<0>();
                pv_done(tile);
            }
        }

        // ---- epilogue: O / rowsum -> shared -> global (16-byte stores); LSE per row -------
        // This consumer's Q tile takes its O: its own QK GEMMs, the only readers, are done.
        const int seq_rows = rows;
        float o_norm[2];
        float lse[2];
        float sink_log2[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = warp_row + r * 8 + quad_row;
            sink_log2[r] = T::kSinks ? params.sinks[head + row % kGroup] * kLog2e : neg_inf();
        }
        softmax.finalize(score_scale_log2, sink_log2, o_norm, lse);
        u16* const o_stage = reinterpret_cast<u16*>(smem_raw + consumer * kSmemQOBytes);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = warp * T::kRowsPerWarp + h * 8 + quad_row;
#pragma unroll
            for (int ot = 0; ot < kOTiles; ++ot) {
                const int col = ot * 8 + quad_col * 2;
                *reinterpret_cast<u32*>(o_stage + LayoutO::offset(row, col)) =
                    pack2<kBf16>(o_acc[ot * 4 + 2 * h] * o_norm[h], o_acc[ot * 4 + 2 * h + 1] * o_norm[h]);
            }
        }
        if (quad_col == 0) {
            float* const lse_gmem = params.lse + seq.lse_offset + head * params.lse_head_stride;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = warp_row + h * 8 + quad_row;
                if (row < seq_rows) lse_gmem[(row % kGroup) * params.lse_head_stride + row / kGroup] = lse[h];
            }
        }
        named_barrier_sync(1 + consumer, 128);
        u16* const o_gmem = static_cast<u16*>(params.o) + seq.o_offset + head * params.o_head_stride;
        store_rows<64, LayoutO, 128>(
            [&](int r) {
                const int row = wg_row_begin + r;
                return T::kPackGqa ? o_gmem + i64(row / kGroup) * params.o_row_stride + (row % kGroup) * params.o_head_stride
                                   : o_gmem + i64(row) * params.o_row_stride;
            },
            o_stage, seq_rows - wg_row_begin, tid);

        it += n_tiles;
        // The next work tile's Q lands where this one's O was staged: every thread of the
        // consumer is past its reads of it.
        if constexpr (T::kPersistent) named_barrier_sync(1 + consumer, 128);
    }
}

}  // namespace hopper
}  // namespace fa4
