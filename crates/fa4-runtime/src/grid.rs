//! The grid of a forward launch, and the split workspace an unmasked persistent grid
//! may share its last tiles out with.

use fa4_spec::{Footprint, FwdParams, MaskKind};

use crate::checks::ProblemError;

/// The grid of a forward launch, `None` when there is nothing to compute, an error when
/// the problem does not fit the grid's limits: one block per
/// `block_m` rows of the longest sequence, per query head (or per KV head with
/// pack-GQA, whose rows are the query heads of one KV head), per sequence. A persistent
/// kernel gets those work tiles in one dimension and at most `persistent_per_sm` blocks
/// per SM of the device's `sm_count`, which stride over them.
///
/// A causal persistent kernel deals its tiles in sections of whole (head, sequence)
/// pairs, `ceil(2 * blocks / m_blocks)` pairs each, heaviest m-blocks first, snaking
/// over two rounds (`kernel_ws.cuh`): its grid is sized so that a section is two rounds
/// exactly (a few SMs may idle), which pairs every heavy tile with a light one.
///
/// A causal kernel with `causal_m_blocks_in_y` (the portable one without pack-GQA) takes
/// its m-block from y, reversed: `(heads, m-blocks, batch)`, so every head of a sequence
/// takes its heaviest m-block first, then its next. Past y's 65535 m-blocks it is an
/// error that says how to split the queries.
///
/// A kernel with `varlen_tiles` given a varlen batch takes its tiles sequence by sequence
/// (`hopper/tile_scheduler.cuh`'s VarlenTiles) from a grid of one dimension: one block per
/// tile the batch can have (the longest sequence's m-blocks for every sequence), or a
/// persistent grid over them.
///
/// A causal kernel with `section_key_bytes` takes one block per tile from a grid of
/// `(section pairs x m-blocks, sections)` (`schedule.cuh`): the hardware hands blocks out
/// in launch order, so within a section the heaviest m-block of every pair goes first
/// (`causal_section_pairs` sizes the sections).
pub fn launch_grid(
    mask: MaskKind,
    footprint: &Footprint,
    params: &FwdParams,
    sm_count: u32,
) -> Result<Option<(u32, u32, u32)>, ProblemError> {
    // Query heads per KV head: pack-GQA makes them the rows of one KV head's tiles.
    let group = (params.heads_q / params.heads_kv.max(1)) as u64;
    let (rows, heads, pairs_per_kv) = if footprint.pack_gqa {
        (
            params.seqlen_q.max(0) as u64 * group,
            params.heads_kv as u32,
            1,
        )
    } else {
        (
            params.seqlen_q.max(0) as u64,
            params.heads_q as u32,
            group.max(1),
        )
    };
    let mut grid_x = rows.div_ceil(u64::from(footprint.block_m.max(1)));
    if grid_x == 0 || params.batch <= 0 {
        return Ok(None);
    }
    // A cluster's blocks take consecutive m-blocks: the last cluster of an odd count gets
    // a block past the rows, which loads its share of the K/V tiles and computes nothing.
    if footprint.cluster_m > 1 {
        grid_x = grid_x.next_multiple_of(u64::from(footprint.cluster_m));
    }
    let pairs = u64::from(heads) * params.batch as u64;
    if footprint.varlen_tiles && params.cu_seqlens_q != 0 {
        // A varlen batch's tiles, sequence by sequence (`tile_scheduler.cuh`): the
        // longest sequence's m-blocks for every sequence bound them; the blocks past the
        // batch's last tile find no rows and leave.
        let tiles = grid_x * pairs;
        if tiles > i32::MAX as u64 {
            return Err(ProblemError::TooLarge {
                what: "work tiles of the varlen batch",
                value: tiles as i64,
                max: i32::MAX as i64,
                hint: "split the batch into calls of fewer sequences or tokens",
            });
        }
        let blocks = match footprint.persistent_per_sm {
            0 => tiles,
            per_sm => tiles.min(u64::from(per_sm * sm_count.max(1))),
        };
        return Ok(Some((blocks as u32, 1, 1)));
    }
    if footprint.persistent_per_sm > 0 {
        let tiles = grid_x * pairs;
        let mut blocks = u64::from(footprint.persistent_per_sm * sm_count.max(1));
        if mask == MaskKind::Causal {
            let section_pairs = (2 * blocks / grid_x).max(1);
            // Rounded down: the kernel's ceil(2 * blocks / m_blocks) gives back exactly
            // section_pairs (m_blocks > 1), or all of them (m_blocks = 1).
            blocks = (section_pairs * grid_x / 2).clamp(1, blocks);
        }
        return Ok(Some((tiles.min(blocks) as u32, 1, 1)));
    }
    if mask == MaskKind::Causal && footprint.causal_m_blocks_in_y {
        // y stops at 65535 m-blocks (4.19 million queries at 64 rows per block).
        if grid_x > 65535 {
            return Err(ProblemError::TooLarge {
                what: "seqlen_q",
                value: params.seqlen_q.into(),
                max: 65535 * i64::from(footprint.block_m),
                hint: "split the queries: the causal mask aligns them to the keys' end, so \
                       the last queries go as one call with seqlen_q cut, then the ones before",
            });
        }
        return Ok(Some((heads, grid_x as u32, params.batch as u32)));
    }
    if mask == MaskKind::Causal && footprint.section_key_bytes > 0 {
        let mut section_pairs = causal_section_pairs(
            pairs,
            grid_x,
            params.seqlen_k.max(1) as u64 * u64::from(footprint.section_key_bytes),
            pairs_per_kv,
            sm_count,
        );
        // The grid's y dimension stops at 65535 sections.
        section_pairs = section_pairs.max(pairs.div_ceil(65535));
        let sections = pairs.div_ceil(section_pairs);
        return Ok(Some(((section_pairs * grid_x) as u32, sections as u32, 1)));
    }
    Ok(Some((grid_x as u32, heads, params.batch as u32)))
}

/// The footprint a launch runs with: a varlen batch goes to the kernel's varlen build
/// (`fa4_spec::VARLEN_KERNEL_ENTRY`) where it has one, with `varlen_tiles` kept; anything
/// else runs the dense build, whose grid is the dense one (`varlen_tiles` false).
pub fn launch_footprint(
    footprint: &Footprint,
    params: &FwdParams,
    has_varlen_build: bool,
) -> Footprint {
    Footprint {
        varlen_tiles: footprint.varlen_tiles && has_varlen_build && params.cu_seqlens_q != 0,
        ..*footprint
    }
}

/// The counters at the head of a split workspace (`split.cuh`): one per (block,
/// consumer) of any grid, in the same place for every kernel, zero when the workspace is
/// first handed over and after every launch.
pub const SPLIT_COUNTER_BYTES: u64 = 4096;

/// Bytes of the split tail's workspace (`split.cuh`) for a grid of `blocks` blocks of
/// `block_m` rows (a consumer per 64) and `head_dim_v` O columns: the counters, then per
/// (block, piece, consumer) its 64 rows of O in f32 and their LSE.
pub fn split_workspace_bytes(blocks: u32, block_m: u32, head_dim_v: u32) -> u64 {
    let consumers = u64::from(block_m / 64);
    SPLIT_COUNTER_BYTES
        + u64::from(blocks) * 2 * consumers * 128 * (u64::from(head_dim_v) / 2 + 2) * 4
}

/// A split workspace that serves every kernel on a device of `sm_count` SMs: persistent
/// grids of one block of up to 192 rows per SM (two per SM only with 64 rows), O up to
/// 256 columns. 52.7 MB on 132 SMs.
pub fn max_split_workspace_bytes(sm_count: u32) -> u64 {
    split_workspace_bytes(sm_count, 192, 256)
}

/// The work tiles of a launch: m-blocks x (head, sequence) pairs (`launch_grid`).
fn work_tiles(footprint: &Footprint, params: &FwdParams) -> u64 {
    let group = (params.heads_q / params.heads_kv.max(1)).max(1) as u64;
    let (rows, heads) = if footprint.pack_gqa {
        (params.seqlen_q.max(0) as u64 * group, params.heads_kv)
    } else {
        (params.seqlen_q.max(0) as u64, params.heads_q)
    };
    rows.div_ceil(u64::from(footprint.block_m.max(1)))
        * heads.max(0) as u64
        * params.batch.max(0) as u64
}

/// The fewest keys a split tail is worth (`split_tail`).
pub const SPLIT_MIN_KEYS: i32 = 4096;

/// A split workspace a caller hands a launch: device memory of `bytes` bytes (at least
/// `max_split_workspace_bytes` of the device, which covers every kernel's grid),
/// 256-byte aligned, its first `SPLIT_COUNTER_BYTES` zero when first handed over. Every
/// launch leaves them zero; two launches must not use one at the same time. The launches
/// check it (`check_split_workspace`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitWorkspace {
    pub ptr: u64,
    pub bytes: u64,
}

/// A caller's split workspace, checked before a launch: 256-byte aligned and as large as
/// `max_split_workspace_bytes`, so that a workspace that serves one shape serves every
/// shape (a smaller one would fail only on the shapes that split). A null pointer is
/// none.
pub fn check_split_workspace(
    split: Option<SplitWorkspace>,
    sm_count: u32,
) -> Result<Option<SplitWorkspace>, ProblemError> {
    let Some(ws) = split.filter(|w| w.ptr != 0) else {
        return Ok(None);
    };
    if ws.ptr % 256 != 0 {
        return Err(ProblemError::Misaligned {
            tensor: "split workspace",
            addr: ws.ptr,
            align: 256,
        });
    }
    let need = max_split_workspace_bytes(sm_count);
    if ws.bytes < need {
        return Err(ProblemError::SplitWorkspace {
            bytes: ws.bytes,
            need,
            sm_count,
        });
    }
    Ok(Some(ws))
}

/// The tiles whose keys an unmasked persistent grid of `blocks` blocks shares out
/// (`schedule.cuh`'s SplitTail: the last round's and one round's more), or 0 for none.
/// A split takes a kernel built for it, a workspace as large as
/// `split_workspace_bytes`, a dense batch (no cu_seqlens or seqused_k: every tile sees
/// the same keys), more tiles than blocks, and a last round that would leave at least
/// an eighth of the blocks idle (one idle block in 132 does not pay for the merges).
///
/// And where it paid on the H200: O of up to 128 columns and at least
/// `SPLIT_MIN_KEYS` keys. Every persistent tile of the FA3 grid split against not split,
/// twice: d64 and d128 1.006 to 1.016x from 4096 keys, 0.97 to 0.98x at 512 (a tile of
/// four key blocks cut in pieces pays a merge for little), d256 0.91x at 512 and 0.99 to
/// 1.01x at 8k and 16k.
pub fn split_tail(
    footprint: &Footprint,
    params: &FwdParams,
    blocks: u32,
    workspace: Option<SplitWorkspace>,
) -> i32 {
    let dense = params.cu_seqlens_q == 0 && params.cu_seqlens_k == 0 && params.seqused_k == 0;
    let Some(ws) = workspace else { return 0 };
    if footprint.split_head_dim_v == 0
        || footprint.split_head_dim_v > 128
        || params.seqlen_k < SPLIT_MIN_KEYS
        || footprint.persistent_per_sm == 0
        || ws.ptr == 0
        || ws.ptr % 256 != 0
        || !dense
        || blocks == 0
    {
        return 0;
    }
    let need = split_workspace_bytes(blocks, footprint.block_m, footprint.split_head_dim_v);
    let counters = u64::from(blocks) * u64::from(footprint.block_m / 64) * 4;
    if ws.bytes < need || counters > SPLIT_COUNTER_BYTES {
        return 0;
    }
    let (tiles, blocks) = (work_tiles(footprint, params), u64::from(blocks));
    let last = tiles % blocks;
    if tiles <= blocks || last == 0 || 8 * (blocks - last) < blocks {
        return 0;
    }
    (blocks + last) as i32
}

/// The K/V a section of causal pairs may keep in L2: two thirds of the H100's and H200's
/// 50 MB, leaving room for Q, O and the K/V of the section before.
const SECTION_L2_BYTES: u64 = 32 << 20;
/// At most this many pairs per section, so the blocks running together still share a few
/// pairs' K/V as they read it (sections of up to 256 pairs ran 2.5% slower at 512 tokens
/// than sections of 16 or 8 on the H200).
const MAX_SECTION_PAIRS: u64 = 16;

/// Pairs per section of a causal grid of `pairs` x `m_blocks` tiles. Taken one pair at a
/// time, the m-blocks of a pair run from heaviest to lightest, and a wave of blocks that
/// holds a few pairs' heavy ends and light ends unevenly leaves SMs idle at the end
/// (0.88 to 0.95 of the work's time in a list-schedule model of the FA3 grid). Sections
/// of several pairs, each pair's heaviest m-block first, then their next, even out the
/// waves. One pair at a time where a pair's m-blocks fill most of a wave already: the
/// model then loses nothing, and more pairs in flight only share less K/V in L2.
/// Otherwise as many pairs as keep the section's K/V (`pair_bytes` each; `pairs_per_kv`
/// query heads side by side share one KV head's) in `SECTION_L2_BYTES`, at most
/// `MAX_SECTION_PAIRS`, evened so the last section is not a sliver.
pub fn causal_section_pairs(
    pairs: u64,
    m_blocks: u64,
    pair_bytes: u64,
    pairs_per_kv: u64,
    sm_count: u32,
) -> u64 {
    if pairs <= 1 || 8 * m_blocks >= 7 * u64::from(sm_count) {
        return 1;
    }
    let fit = (SECTION_L2_BYTES * pairs_per_kv / pair_bytes.max(1)).clamp(1, MAX_SECTION_PAIRS);
    let sections = pairs.div_ceil(fit.min(pairs));
    pairs.div_ceil(sections)
}
