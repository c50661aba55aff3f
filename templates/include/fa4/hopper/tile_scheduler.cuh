// The tile schedulers of the warp-specialised Hopper kernel (kernel_ws.cuh): which work
// tiles a block works, in which order, and what each covers. A work tile is one block's
// rows (m-block) of one head of one sequence; schedule.cuh has the orders themselves.
//
//   GridScheduler        one block per tile, in schedule.cuh's launch order: one round
//   PersistentScheduler  about one block per SM, walking the tiles in rounds (a snake;
//                        causal sections; unmasked, a split tail)
//
// A persistent kernel's varlen build (kVarlenTiles: fa4_fwd_varlen) walks a varlen
// batch's tiles numbered sequence by sequence instead (VarlenPersistentScheduler); the
// dense build's code is left as it was.
//
// Both walk `for (round = 0; round < rounds; ++round)`: coords(round) says where a round
// puts this block (small: the consumers work it out under their last PV GEMM), work(at)
// what the tile there covers, work_at(round) both. (The loop spells out its bound: a
// `valid(round)` call instead gave ptxas the compare the other way round, and other code.)
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/hopper/schedule.cuh"
#include "fa4/hopper/tma.cuh"
#include "fa4/hopper/traits.cuh"

namespace fa4 {
namespace hopper {

// One work tile: its sequence, heads and rows, and the key blocks they see (tile t of
// the key loop is key block n_end - 1 - t).
struct WorkTile {
    SeqView seq;
    int batch, head, kv_head, rows, row_begin;
    int query_first, query_last, n_end, n_tiles;
    // The first K/V tile runs past the keys: cp.async, zero-filled. (Paged K/V: a page's
    // rows past the keys hold whatever the cache left there, and the pages past them are
    // not in the table.)
    bool first_by_copy;

    // A tile past its sequence's rows has nothing to do (no K/V, no epilogue).
    __device__ bool has_rows() const { return row_begin < rows; }
};

// Where a work tile's Q rows come from and its O rows go (the producer's Q load, the
// epilogue's O store): by TMA, whole 64-row chunks of a strided Q inside the sequence
// (rows of the next sequence are never touched, so a packed batch needs no row count);
// by cp.async and the consumers' stores otherwise.
template <class T>
struct QoRows {
    const FwdParams& params;
    bool packed;  // a packed (varlen) batch: one batch of all rows in the Q and O maps

    __device__ __forceinline__ explicit QoRows(const FwdParams& p) : params(p), packed(p.cu_seqlens_q != nullptr) {}
    __device__ bool by_tma(int valid_rows) const { return T::kTma && !T::kPackGqa && valid_rows >= 64; }
    // The map coordinates of the sequence's first row.
    __device__ int map_row(const WorkTile& w) const { return packed ? params.cu_seqlens_q[w.batch] : 0; }
    __device__ int map_batch(const WorkTile& w) const { return packed ? 0 : w.batch; }
};

// What every scheduler shares: the heads the grid walks and a tile's extent from its
// coordinates.
template <class T, class Coords>
struct TileMap {
    const FwdParams& params;
    int group;       // query heads per KV head
    int row_group;   // block rows per query row: the group with pack-GQA, else 1
    int heads_grid;  // heads along the grid: KV heads with pack-GQA

    __device__ __forceinline__ explicit TileMap(const FwdParams& p)
        : params(p),
          group(p.heads_q / p.heads_kv),
          row_group(T::kPackGqa ? group : 1),
          heads_grid(T::kPackGqa ? p.heads_kv : p.heads_q) {}

    // The tile at `at`; past the last tile (m_block < 0) one with no rows.
    __device__ WorkTile work(const Coords& at) const {
        WorkTile w;
        if (T::kPersistent && at.m_block < 0) {
            w.rows = w.row_begin = 0;
            return w;
        }
        const int head_idx = at.head_idx;
        w.batch = at.batch;
        w.seq = seq_view<T::kPaged>(params, w.batch);
        w.rows = w.seq.seqlen_q * row_group;
        w.row_begin = at.m_block * T::kBlockM;
        w.kv_head = T::kPackGqa ? head_idx : head_idx / group;
        w.head = T::kPackGqa ? w.kv_head * group : head_idx;
        w.query_first = w.row_begin / row_group;
        w.query_last = (imin(w.row_begin + T::kBlockM, w.rows) - 1) / row_group;
        const Mask<T::kMask> mask{w.seq.seqlen_q, w.seq.seqlen_k, params.window_left, params.window_right};
        w.n_end = mask.n_block_end(w.query_first, w.query_last + 1, T::kBlockN);
        w.n_tiles = imax(0, w.n_end - mask.n_block_begin(w.query_first, T::kBlockN));
        if constexpr (T::kSplitTail) {
            if (at.key_end >= 0) {  // a piece of a split tile: its key blocks alone
                w.n_end = at.key_end;
                w.n_tiles = at.key_end - at.key_begin;
            }
        }
        if constexpr (T::kClusterM > 1) {
            // Unmasked: every block of the cluster walks all of its sequence's key tiles,
            // also one past the sequence's rows (it loads its share for the others).
            w.n_end = ceil_div(w.seq.seqlen_k, T::kBlockN);
            w.n_tiles = w.n_end;
        }
        w.first_by_copy = !(T::kTma || T::kTmaPages) ||
                          (w.n_tiles > 0 && w.seq.seqlen_k - (w.n_end - 1) * T::kBlockN < T::kBlockN);
        return w;
    }

    // A split tail's coordinates carry its key blocks: -1, every block the mask leaves.
    static __device__ Coords whole(const TileCoords& tile) {
        Coords c;
        static_cast<TileCoords&>(c) = tile;
        if constexpr (T::kSplitTail) c.key_begin = 0, c.key_end = -1;
        return c;
    }
};

// ---- a varlen batch's tiles, sequence by sequence -----------------------------------------
// A packed batch numbers only the tiles that have rows: sequence after sequence (in the
// batch's order), each its m-blocks x heads. The dense numbering, the longest sequence's
// m-blocks for every sequence, dealt a persistent grid's rounds by the longest sequence's
// shape: most of a ragged batch's tiles had no rows and a block's share was as uneven as
// the lengths. Within a sequence, causal: its heaviest m-blocks first, the heads of an L2
// section side by side (the section's K/V stays in L2 while its m-blocks go by);
// unmasked and local: a head's m-blocks side by side (they read the same K/V). Kernels of
// one block per tile keep the dense grid, whose launch order (every sequence's m-block i
// before its i - 1) is longest-first across the sequences; so do a cluster's pairs.
template <class T>
struct VarlenTiles {
    static_assert(T::kVarlenTiles && T::kPersistent && T::kClusterM == 1, "varlen builds are persistent kernels without a cluster");
    // The sequence a tile belongs to: its index, its first tile, its m-blocks.
    struct Seq {
        int batch, first_tile, m_blocks;
    };

    int heads;      // heads along the grid
    int row_group;  // block rows per query row
    int section;    // causal: heads per L2 section (l2_section)

    // Heads whose K/V (of the longest sequence's keys) fit in 32 MB of L2, a power of two
    // of KV heads: all query heads of a KV head come together. At least 1.
    static __device__ int l2_section(const FwdParams& p, int heads_grid) {
        const i64 kv_bytes = i64(imax(p.seqlen_k, 1)) * (T::kHeadDim + T::kHeadDimV) * T::kElemBytes;
        int kv_heads = 1;
        while (kv_heads < 16 && i64(2 * kv_heads) * kv_bytes <= (i64(32) << 20)) kv_heads *= 2;
        const int per_kv = heads_grid == p.heads_kv ? 1 : p.heads_q / p.heads_kv;
        return imin(kv_heads * per_kv, heads_grid);
    }

    __device__ int m_blocks(const FwdParams& p, int b) const {
        const int q = imin(p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b], p.seqlen_q);
        return ceil_div(imax(q, 0) * row_group, T::kBlockM);
    }

    // Every tile of the batch: a warp sums 32 sequences at a time (whole warps only).
    __device__ int total(const FwdParams& p) const {
        const int lane = threadIdx.x % 32;
        int tiles = 0;
        for (int base = 0; base < p.batch; base += 32) {
            const int b = base + lane;
            tiles += __reduce_add_sync(0xffffffffu, b < p.batch ? m_blocks(p, b) * heads : 0);
        }
        return tiles;
    }

    // A persistent block's next tile t (its tiles only grow, t below the total): one
    // thread's walk on from `at`.
    __device__ void walk(const FwdParams& p, int t, Seq& at) const {
        while (t >= at.first_tile + at.m_blocks * heads) {
            at.first_tile += at.m_blocks * heads;
            at.m_blocks = m_blocks(p, ++at.batch);
        }
    }

    // Tile t of sequence `at`.
    __device__ TileCoords coords(const Seq& at, int t) const {
        const int local = t - at.first_tile;
        if constexpr (T::kMask == MaskKind::Causal) {
            const int first_head = local / (section * at.m_blocks) * section;
            const int n = imin(section, heads - first_head);
            const int in_section = local - first_head * at.m_blocks;
            return TileCoords{at.batch, first_head + in_section % n, at.m_blocks - 1 - in_section / n};
        } else {
            return TileCoords{at.batch, local / at.m_blocks, local % at.m_blocks};
        }
    }
};

// ---- one block per tile ---------------------------------------------------------------
// The tile comes from the launch order (causal: heaviest first) and is worked out once,
// before the block's barriers, so a block without rows leaves at once.
template <class T>
struct GridScheduler : TileMap<T, TileCoords> {
    using Coords = TileCoords;
    using Map = TileMap<T, TileCoords>;
    int rounds;  // one

    __device__ __forceinline__ GridScheduler(const FwdParams& p, const SplitArgs&, SplitItems) : Map(p), rounds(1) {}
    __device__ Coords coords(int) const { return Map::whole(grid_tile<T>(this->params)); }
    // The block's tile: the kernel works it out once (first_work), before its barriers.
    __device__ WorkTile work_at(int round) const { return Map::work(coords(round)); }
    __device__ __forceinline__ void write_share() const {}
    __device__ __forceinline__ void read_share() {}
};

// ---- persistent: rounds of one tile per block -------------------------------------------
// Block b takes the b-th tile of even rounds and the b-th from the end of odd ones (a
// snake), m-blocks fastest; causal tiles go in sections of about two rounds' tiles, each
// section's heaviest m-blocks first, so the snake deals every block one heavy and one
// light tile per two rounds.
// With a split tail (unmasked, when the host asks for one: split.tail > 0) the whole
// rounds go so, then the block's share of the tail (schedule.cuh's SplitTail), which
// thread 0 writes to shared memory before the block's first barrier (write_share) and
// every round reads back from there: kept in registers, its numbers spilled at d256.
// (One type with the tail as a compile-time branch: coords() is one function either way,
// the shape ptxas was tuned on.)
template <class T>
struct PersistentScheduler : TileMap<T, typename CoordsOf<T::kSplitTail>::type> {
    using Coords = typename CoordsOf<T::kSplitTail>::type;
    using Map = TileMap<T, Coords>;
    int m_blocks, pairs, tiles, rounds, section_pairs;
    const SplitArgs& split;  // a reference into the parameters, read where used
    SplitItems items;        // the block's share of the split tail
    __device__ __forceinline__ PersistentScheduler(const FwdParams& p, const SplitArgs& s, SplitItems share)
        : Map(p),
          m_blocks(ceil_div(p.seqlen_q * this->row_group, T::kBlockM)),
          pairs(this->heads_grid * p.batch),
          tiles(m_blocks * pairs),
          rounds(ceil_div(tiles, gridDim.x)),
          section_pairs(T::kMask == MaskKind::Causal ? ceil_div(2 * gridDim.x, imax(m_blocks, 1)) : 1),
          split(s),
          items(share) {}

    // Where round `round` puts this block; m_block < 0 past the last tile.
    __device__ Coords coords(int round) const {
        if constexpr (T::kSplitTail) {
            // The tail's rounds: this block's share, not the round's snake.
            if (split.tail > 0 && round >= items.whole_rounds()) {
                if (round >= rounds) return Map::whole(TileCoords{0, 0, -1});
                TailItem item;
                const int tile = items.item(round - items.whole_rounds(), item);
                const int pair = tile / m_blocks;
                Coords c = Map::whole(TileCoords{pair / this->heads_grid, pair % this->heads_grid, tile % m_blocks});
                c.key_begin = item.key_begin;
                c.key_end = item.key_end;
                return c;
            }
        }
        const int t = round * gridDim.x + ((round & 1) ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
        if (t >= tiles) return Map::whole(TileCoords{0, 0, -1});  // the last round's blocks past the last tile
        if constexpr (T::kMask == MaskKind::Causal) {
            return Map::whole(causal_tile(t, m_blocks, pairs, section_pairs, this->heads_grid));
        } else {
            const int pair = t / m_blocks;
            return Map::whole(TileCoords{pair / this->heads_grid, pair % this->heads_grid, t % m_blocks});
        }
    }
    __device__ WorkTile work_at(int round) const { return this->work(coords(round)); }

    // Thread 0, before the block's first barrier: the block's share of the tail.
    __device__ __forceinline__ void write_share() const {
        if constexpr (T::kSplitTail) {
            if (split.tail > 0) {
                const int key_blocks = ceil_div(this->params.seqlen_k, T::kBlockN);
                items.write(SplitTail{tiles - split.tail, key_blocks, i64(split.tail) * key_blocks, int(gridDim.x)},
                            blockIdx.x);
            }
        }
    }
    // Every thread, after that barrier: the rounds end with the share.
    __device__ __forceinline__ void read_share() {
        if constexpr (T::kSplitTail) {
            if (split.tail > 0) rounds = items.whole_rounds() + items.count();
        }
    }
};

// ---- varlen batches: the tiles numbered sequence by sequence ------------------------------
// Rounds of one tile per block over VarlenTiles' numbering, a snake as the dense grid's;
// each thread walks on through the sequences as its tiles grow (never the split tail:
// the host splits dense batches only).
template <class T>
struct VarlenPersistentScheduler : TileMap<T, typename CoordsOf<T::kSplitTail>::type> {
    using Coords = typename CoordsOf<T::kSplitTail>::type;
    using Map = TileMap<T, Coords>;
    using Tiling = VarlenTiles<T>;
    Tiling tiling;
    int tiles, rounds;
    mutable typename Tiling::Seq at;  // the sequence of the block's last tile

    // (whole warps: a warp's sum counts the tiles)
    __device__ __forceinline__ VarlenPersistentScheduler(const FwdParams& p, const SplitArgs&, SplitItems)
        : Map(p), tiling{this->heads_grid, this->row_group, Tiling::l2_section(p, this->heads_grid)} {
        tiles = tiling.total(p);
        rounds = ceil_div(tiles, gridDim.x);
        at = typename Tiling::Seq{0, 0, tiles > 0 ? tiling.m_blocks(p, 0) : 0};
    }

    // Where round `round` puts this block (rounds only grow); m_block < 0 past the last tile.
    __device__ Coords coords(int round) const {
        const int t = round * gridDim.x + ((round & 1) ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
        if (t >= tiles) return Map::whole(TileCoords{0, 0, -1});
        tiling.walk(this->params, t, at);
        return Map::whole(tiling.coords(at, t));
    }
    __device__ WorkTile work_at(int round) const { return this->work(coords(round)); }
    __device__ __forceinline__ void write_share() const {}
    __device__ __forceinline__ void read_share() {}
};

template <class T>
using DenseSchedulerOf = typename Select<T::kPersistent, PersistentScheduler<T>, GridScheduler<T>>::type;
template <class T>
using SchedulerOf = typename Select<T::kVarlenTiles, VarlenPersistentScheduler<T>, DenseSchedulerOf<T>>::type;

}  // namespace hopper
}  // namespace fa4
