//! Launch grids cover every work tile once (heaviest first where causal), and the split
//! tail takes the grids it pays on.

mod common;

use common::good;
use fa4_runtime::*;
use fa4_spec::{Footprint, FwdParams, MaskKind};

/// A kernel of 128 threads over `block_m` rows, one block per tile.
fn plain_footprint(block_m: u32) -> Footprint {
    Footprint {
        threads: 128,
        block_m,
        smem_bytes: 0,
        est_registers: 0,
        pack_gqa: false,
        tma_rows: 0,
        persistent_per_sm: 0,
        section_key_bytes: 0,
        causal_m_blocks_in_y: false,
        split_head_dim_v: 0,
        cluster_m: 0,
        varlen_tiles: false,
    }
}

#[test]
fn grids_cover_every_row() {
    let fp = plain_footprint(128);
    // 100 queries, 8 query heads on 2 KV heads, 2 sequences.
    assert_eq!(
        launch_grid(MaskKind::None, &fp, &good(), 132).unwrap(),
        Some((1, 8, 2))
    );
    let long = FwdParams {
        seqlen_q: 129,
        ..good()
    };
    assert_eq!(
        launch_grid(MaskKind::None, &fp, &long, 132).unwrap(),
        Some((2, 8, 2))
    );
    // Pack-GQA: 4 query heads per KV head make 400 rows per KV head.
    let packed = Footprint {
        pack_gqa: true,
        ..fp
    };
    assert_eq!(
        launch_grid(MaskKind::None, &packed, &good(), 132).unwrap(),
        Some((4, 2, 2))
    );
    // Nothing to compute: no launch.
    let empty = FwdParams {
        seqlen_q: 0,
        ..good()
    };
    assert_eq!(launch_grid(MaskKind::None, &fp, &empty, 132).unwrap(), None);
    // Clusters of two blocks along m: the m-blocks rounded up to pairs (the second
    // block of the last pair past the rows), the rest alike.
    let pairs = Footprint { cluster_m: 2, ..fp };
    assert_eq!(
        launch_grid(MaskKind::None, &pairs, &good(), 132).unwrap(),
        Some((2, 8, 2))
    );
    let three = FwdParams {
        seqlen_q: 257,
        ..good()
    };
    assert_eq!(
        launch_grid(MaskKind::None, &fp, &three, 132).unwrap(),
        Some((3, 8, 2))
    );
    assert_eq!(
        launch_grid(MaskKind::None, &pairs, &three, 132).unwrap(),
        Some((4, 8, 2))
    );
    assert_eq!(
        launch_grid(MaskKind::None, &pairs, &long, 132).unwrap(),
        Some((2, 8, 2))
    );
    assert_eq!(
        launch_grid(MaskKind::None, &pairs, &empty, 132).unwrap(),
        None
    );
    // Persistent: the work tiles (m-blocks x heads x sequences) in one dimension, at
    // most persistent_per_sm blocks per SM.
    let persistent = Footprint {
        persistent_per_sm: 1,
        ..fp
    };
    assert_eq!(
        launch_grid(MaskKind::None, &persistent, &good(), 132).unwrap(),
        Some((16, 1, 1))
    );
    assert_eq!(
        launch_grid(MaskKind::None, &persistent, &good(), 10).unwrap(),
        Some((10, 1, 1))
    );
    assert_eq!(
        launch_grid(MaskKind::None, &persistent, &empty, 132).unwrap(),
        None
    );
    // Causal: as many blocks as make a section of whole pairs exactly two rounds.
    let causal = |seqlen_q, heads_q, sm_count| {
        let p = FwdParams {
            seqlen_q,
            heads_q,
            heads_kv: heads_q,
            batch: 8,
            ..good()
        };
        launch_grid(MaskKind::Causal, &persistent, &p, sm_count)
            .unwrap()
            .unwrap()
            .0
    };
    // 16 m-blocks: sections of 16 pairs (256 tiles) over 128 of 132 SMs.
    assert_eq!(causal(2048, 32, 132), 128);
    // 4 m-blocks: 66 pairs, every SM.
    assert_eq!(causal(512, 32, 132), 132);
    // 128 m-blocks: 2 pairs per section.
    assert_eq!(causal(16384, 32, 132), 128);
    // 5 m-blocks (odd sections): 52 pairs of 5 tiles, 130 blocks; the kernel's
    // ceil(2 * 130 / 5) gives back 52.
    assert_eq!(causal(640, 32, 132), 130);
    assert_eq!((2 * 130u32).div_ceil(5), 52);
    // One m-block: every block, as unmasked.
    assert_eq!(causal(100, 32, 132), 132);
    // Never more blocks than tiles: one head of one sequence has 16.
    let one = FwdParams {
        seqlen_q: 2048,
        heads_q: 1,
        heads_kv: 1,
        batch: 1,
        ..good()
    };
    assert_eq!(
        launch_grid(MaskKind::Causal, &persistent, &one, 132).unwrap(),
        Some((16, 1, 1))
    );
    assert_eq!(
        launch_grid(MaskKind::None, &fp, &FwdParams { batch: 0, ..good() }, 132).unwrap(),
        None
    );
}

/// `grid_tile` of `schedule.cuh` for a causal grid in sections, block by block in
/// launch order: (batch, head, m-block), or None for a spare block (no rows).
fn sectioned_tiles(
    grid: (u32, u32, u32),
    p: &FwdParams,
    pack_gqa: bool,
    block_m: u32,
) -> Vec<Option<(i32, i32, i32)>> {
    let (heads, m_blocks) = tile_shape(p, pack_gqa, block_m);
    let mut out = Vec::new();
    for y in 0..grid.1 as i32 {
        for x in 0..grid.0 as i32 {
            let section_pairs = grid.0 as i32 / m_blocks;
            let first_pair = y * section_pairs;
            let n_pairs = section_pairs.min(heads * p.batch - first_pair);
            if x >= n_pairs * m_blocks {
                out.push(None);
                continue;
            }
            let pair = first_pair + x % n_pairs;
            out.push(Some((
                pair / heads,
                pair % heads,
                m_blocks - 1 - x / n_pairs,
            )));
        }
    }
    out
}

/// (heads of the grid, m-blocks per pair): KV heads over all their query heads' rows
/// with pack-GQA, as the kernel counts them.
fn tile_shape(p: &FwdParams, pack_gqa: bool, block_m: u32) -> (i32, i32) {
    let (heads, rows) = if pack_gqa {
        (p.heads_kv, p.seqlen_q * (p.heads_q / p.heads_kv))
    } else {
        (p.heads_q, p.seqlen_q)
    };
    (heads, (rows as u32).div_ceil(block_m) as i32)
}

/// A causal d128 bf16 Hopper kernel of one block per 128-row tile.
fn sectioned_footprint() -> Footprint {
    Footprint {
        threads: 384,
        block_m: 128,
        smem_bytes: 0,
        est_registers: 0,
        pack_gqa: false,
        tma_rows: 128,
        persistent_per_sm: 0,
        section_key_bytes: 2 * (128 + 128),
        causal_m_blocks_in_y: false,
        split_head_dim_v: 0,
        cluster_m: 0,
        varlen_tiles: false,
    }
}

#[test]
fn causal_grids_in_sections_cover_every_tile_once_heaviest_first() {
    let fp = sectioned_footprint();
    let cases = [
        // (seqlen, heads_q, heads_kv, batch, pack_gqa)
        (512, 16, 16, 32, false), // the FA3 grid at d128: 512 pairs of 4 m-blocks
        (4096, 16, 16, 4, false), // 64 pairs of 32
        (16384, 16, 16, 1, false), // 128 m-blocks fill most of a wave: pair by pair
        (1000, 7, 7, 3, false),   // 21 pairs, ragged rows
        (777, 32, 8, 5, false),   // GQA
        (777, 32, 8, 5, true),    // packed GQA: 8 x 5 pairs of 4 x 777 rows
        (100, 1, 1, 1, false),    // one tile
        (300, 3, 1, 67, false),   // 201 pairs: sections evened, a spare pair or none
    ];
    for (seqlen, heads_q, heads_kv, batch, pack_gqa) in cases {
        let p = FwdParams {
            seqlen_q: seqlen,
            seqlen_k: seqlen,
            heads_q,
            heads_kv,
            batch,
            ..good()
        };
        let fp = Footprint { pack_gqa, ..fp };
        let grid = launch_grid(MaskKind::Causal, &fp, &p, 132)
            .unwrap()
            .unwrap();
        assert_eq!(grid.2, 1, "{grid:?}");
        let tiles = sectioned_tiles(grid, &p, pack_gqa, fp.block_m);
        let (heads, m_blocks) = tile_shape(&p, pack_gqa, fp.block_m);
        let mut seen = std::collections::BTreeSet::new();
        for t in tiles.iter().flatten() {
            assert!(seen.insert(*t), "tile {t:?} twice in {grid:?}");
            assert!(t.0 < batch && t.1 < heads && (0..m_blocks).contains(&t.2));
        }
        assert_eq!(seen.len() as i32, batch * heads * m_blocks, "{grid:?}");
        // Spare blocks are fewer than one per section and m-block.
        let spare = tiles.iter().filter(|t| t.is_none()).count() as u32;
        assert!(
            spare < grid.1 * m_blocks as u32,
            "{spare} spare blocks in {grid:?}"
        );
        // Within a section no tile comes before a heavier one.
        for section in tiles.chunks(grid.0 as usize) {
            let ms: Vec<i32> = section.iter().flatten().map(|t| t.2).collect();
            assert!(ms.windows(2).all(|w| w[0] >= w[1]), "{ms:?}");
        }
    }
    // Unmasked kernels and kernels without sections keep (m-blocks, heads, batch).
    let p = FwdParams {
        seqlen_q: 512,
        seqlen_k: 512,
        ..good()
    };
    assert_eq!(
        launch_grid(MaskKind::None, &fp, &p, 132).unwrap(),
        Some((4, 8, 2))
    );
    let plain = Footprint {
        section_key_bytes: 0,
        causal_m_blocks_in_y: false,
        split_head_dim_v: 0,
        ..fp
    };
    assert_eq!(
        launch_grid(MaskKind::Causal, &plain, &p, 132).unwrap(),
        Some((4, 8, 2))
    );
}

#[test]
fn causal_grids_with_m_blocks_in_y_cover_every_tile_once_heaviest_first() {
    let fp = Footprint {
        causal_m_blocks_in_y: true,
        split_head_dim_v: 0,
        ..plain_footprint(64)
    };
    for (seqlen, heads_q, batch) in [(512, 8, 32), (4096, 16, 4), (1000, 7, 3), (100, 1, 1)] {
        let p = FwdParams {
            seqlen_q: seqlen,
            seqlen_k: seqlen,
            heads_q,
            heads_kv: 1,
            batch,
            ..good()
        };
        let grid = launch_grid(MaskKind::Causal, &fp, &p, 132)
            .unwrap()
            .unwrap();
        let m_blocks = (seqlen as u32).div_ceil(64);
        assert_eq!(grid, (heads_q as u32, m_blocks, batch as u32));
        // The kernel's decode in launch order (x fastest): head x, m-block y reversed,
        // sequence z. Every tile once; within a sequence never a lighter one first.
        let mut seen = std::collections::BTreeSet::new();
        let mut last = (-1, u32::MAX);
        for z in 0..grid.2 {
            for y in 0..grid.1 {
                for x in 0..grid.0 {
                    let m_block = grid.1 - 1 - y;
                    assert!(seen.insert((z, x, m_block)));
                    assert!(last.0 != z as i32 || m_block <= last.1, "{grid:?}");
                    last = (z as i32, m_block);
                }
            }
        }
        assert_eq!(seen.len() as u32, grid.0 * grid.1 * grid.2);
    }
    // Pack-GQA, unmasked and local grids keep (m-blocks, heads, batch).
    let p = FwdParams {
        seqlen_q: 512,
        seqlen_k: 512,
        ..good()
    };
    let packed = Footprint {
        pack_gqa: true,
        causal_m_blocks_in_y: false,
        split_head_dim_v: 0,
        ..fp
    };
    assert_eq!(
        launch_grid(MaskKind::Causal, &packed, &p, 132).unwrap(),
        Some((32, 2, 2))
    );
    assert_eq!(
        launch_grid(MaskKind::None, &fp, &p, 132).unwrap(),
        Some((8, 8, 2))
    );
    assert_eq!(
        launch_grid(MaskKind::Local, &fp, &p, 132).unwrap(),
        Some((8, 8, 2))
    );
    // y stops at 65535 m-blocks: longer sequences are refused before launch, with the
    // way to split them.
    let long = FwdParams {
        seqlen_q: 65535 * 64 + 1,
        ..p
    };
    let msg = launch_grid(MaskKind::Causal, &fp, &long, 132)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("seqlen_q is 4194241") && msg.contains("split the queries"),
        "{msg}"
    );
    launch_grid(MaskKind::Causal, &packed, &long, 132).unwrap();
    launch_grid(MaskKind::None, &fp, &long, 132).unwrap();
}

#[test]
fn causal_sections_hold_few_pairs_whose_kv_fits_in_l2() {
    const MIB: u64 = 1 << 20;
    // 16 pairs at most, evened: 512 pairs of 128 KiB go in 32 sections of 16.
    assert_eq!(causal_section_pairs(512, 4, MIB / 8, 1, 132), 16);
    // 20 pairs: two sections of 10, not 16 and 4.
    assert_eq!(causal_section_pairs(20, 4, MIB / 8, 1, 132), 10);
    // K/V of 8 MiB per pair: 4 fit in 32 MiB; query heads sharing a KV head count once.
    assert_eq!(causal_section_pairs(64, 64, 8 * MIB, 1, 132), 4);
    assert_eq!(causal_section_pairs(64, 64, 8 * MIB, 4, 132), 16);
    // A pair larger than the budget still makes a section of one.
    assert_eq!(causal_section_pairs(8, 64, 64 * MIB, 1, 132), 1);
    // A pair whose m-blocks fill 7/8 of a wave or more goes alone.
    assert_eq!(causal_section_pairs(16, 128, MIB, 1, 132), 1);
    assert_eq!(causal_section_pairs(16, 115, MIB, 1, 132), 16);
    assert_eq!(causal_section_pairs(1, 4, MIB, 1, 132), 1);
    // Past 65535 sections the grid takes more pairs per section.
    let p = FwdParams {
        seqlen_q: 128,
        seqlen_k: 128,
        heads_q: 64,
        heads_kv: 64,
        batch: 40000,
        ..good()
    };
    let (x, y, z) = launch_grid(MaskKind::Causal, &sectioned_footprint(), &p, 132)
        .unwrap()
        .unwrap();
    assert!(y <= 65535 && z == 1, "{x} {y} {z}");
    assert!(u64::from(x) * u64::from(y) >= 64 * 40000);
}

#[test]
fn empty_problems_need_no_pointers() {
    let p = FwdParams {
        batch: 0,
        q: 0,
        k: 0,
        v: 0,
        o: 0,
        lse: 0,
        ..good()
    };
    assert_eq!(check_problem(&p), Ok(()));
    // Queries without keys: the output is still written (zeros, LSE -inf).
    let p = FwdParams {
        seqlen_k: 0,
        k: 0,
        v: 0,
        ..good()
    };
    assert_eq!(check_problem(&p), Ok(()));
}

#[test]
fn a_split_workspace_is_checked_before_the_launch() {
    let need = max_split_workspace_bytes(132);
    let good_ws = SplitWorkspace {
        ptr: 0x20_0000,
        bytes: need,
    };
    assert_eq!(check_split_workspace(Some(good_ws), 132), Ok(Some(good_ws)));
    // None, or a null pointer (the C ABI's "none"), is no workspace at all.
    assert_eq!(check_split_workspace(None, 132), Ok(None));
    let null = SplitWorkspace { ptr: 0, bytes: 0 };
    assert_eq!(check_split_workspace(Some(null), 132), Ok(None));
    // Misaligned: named, with the alignment it needs.
    let odd = SplitWorkspace {
        ptr: 0x20_0080,
        ..good_ws
    };
    let e = check_split_workspace(Some(odd), 132).unwrap_err();
    assert_eq!(
        e,
        ProblemError::Misaligned {
            tensor: "split workspace",
            addr: 0x20_0080,
            align: 256
        }
    );
    // Too small for the largest kernel: an error that says what to allocate, even
    // where this shape's kernel would not split (it would fail on the next shape).
    let small = SplitWorkspace {
        bytes: need - 256,
        ..good_ws
    };
    let msg = check_split_workspace(Some(small), 132)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains(&format!("{} bytes", need - 256))
            && msg.contains("fa4gen_split_workspace_bytes(132)"),
        "{msg}"
    );
    // A device with more SMs needs more.
    assert!(check_split_workspace(Some(good_ws), 144).is_err());
}

#[test]
fn the_split_tail_takes_long_dense_unmasked_grids_with_idle_blocks_in_the_last_round() {
    // d128, 128-row persistent tiles, one block per SM: the FA3 grid's 16 heads at 16k
    // tokens are 2048 tiles, 15 whole rounds of 132 and 68 over.
    let fp = Footprint {
        threads: 384,
        block_m: 128,
        smem_bytes: 0,
        est_registers: 168,
        pack_gqa: false,
        tma_rows: 128,
        persistent_per_sm: 1,
        section_key_bytes: 0,
        causal_m_blocks_in_y: false,
        split_head_dim_v: 128,
        cluster_m: 0,
        varlen_tiles: false,
    };
    let p = FwdParams {
        batch: 1,
        seqlen_q: 16384,
        seqlen_k: 16384,
        heads_q: 16,
        heads_kv: 16,
        ..good()
    };
    let need = split_workspace_bytes(132, 128, 128);
    // counters, then 132 slots x 2 pieces x 2 consumers x 128 threads x (64 + 2) floats
    assert_eq!(need, 4096 + 132 * 2 * 2 * 128 * 66 * 4);
    assert!(need <= max_split_workspace_bytes(132));
    let full = SplitWorkspace {
        ptr: 0x10_0000,
        bytes: need,
    };
    let ws = Some(full);
    // The last round's 68 tiles and one round more.
    assert_eq!(split_tail(&fp, &p, 132, ws), 132 + 68);
    // Not without a workspace, nor with one too small or misaligned.
    assert_eq!(split_tail(&fp, &p, 132, None), 0);
    let small = SplitWorkspace {
        bytes: need - 1,
        ..full
    };
    assert_eq!(split_tail(&fp, &p, 132, Some(small)), 0);
    let odd = SplitWorkspace {
        ptr: 0x10_0010,
        ..full
    };
    assert_eq!(split_tail(&fp, &p, 132, Some(odd)), 0);
    // Not for kernels built without it, nor O wider than 128 columns.
    for split_head_dim_v in [0, 256] {
        let other = Footprint {
            split_head_dim_v,
            ..fp
        };
        assert_eq!(split_tail(&other, &p, 132, ws), 0);
    }
    // Not for varlen batches, whose tiles see different keys.
    let varlen = FwdParams {
        cu_seqlens_q: 0x8000,
        ..p
    };
    assert_eq!(split_tail(&fp, &varlen, 132, ws), 0);
    // Not under SPLIT_MIN_KEYS keys.
    let short = FwdParams {
        seqlen_k: SPLIT_MIN_KEYS - 1,
        ..p
    };
    assert_eq!(split_tail(&fp, &short, 132, ws), 0);
    // Not when the rounds come out even (2112 tiles), nor when fewer than an eighth
    // of the blocks would idle (2048 tiles over 137 blocks: 130 in the last round).
    let even = FwdParams {
        heads_q: 33,
        heads_kv: 33,
        ..p
    };
    assert_eq!(split_tail(&fp, &even, 132, ws), 0);
    let big = SplitWorkspace {
        bytes: max_split_workspace_bytes(137),
        ..full
    };
    assert_eq!(split_tail(&fp, &p, 137, Some(big)), 0);
    // Nor with no more tiles than blocks.
    let few = FwdParams {
        heads_q: 1,
        heads_kv: 1,
        ..p
    };
    assert_eq!(split_tail(&fp, &few, 132, ws), 0);

    // The TMA argument block takes the decision and, only with a split, the workspace.
    // SAFETY: TmaFwdParams is plain integers, for which zero bits are a value.
    let mut arg: TmaFwdParams = unsafe { std::mem::zeroed() };
    arg.fwd = p;
    arg.set_split_tail(&fp, 132, ws);
    assert_eq!((arg.split_tail, arg.split_workspace), (132 + 68, 0x10_0000));
    arg.set_split_tail(&fp, 132, None);
    assert_eq!((arg.split_tail, arg.split_workspace), (0, 0));
    arg.fwd = short;
    arg.set_split_tail(&fp, 132, ws);
    assert_eq!((arg.split_tail, arg.split_workspace), (0, 0));
}

#[test]
fn a_varlen_batch_gets_a_grid_of_one_dimension_over_its_tiles() {
    // 36 sequences, the longest 1,500 queries; 32 query heads on 8 KV heads.
    let ragged = FwdParams {
        batch: 36,
        seqlen_q: 1500,
        seqlen_k: 1500,
        heads_q: 32,
        heads_kv: 8,
        cu_seqlens_q: 0x1000,
        cu_seqlens_k: 0x2000,
        ..good()
    };
    let fp = Footprint {
        varlen_tiles: true,
        ..plain_footprint(128)
    };
    // One block per tile the batch can have: the longest sequence's 12 m-blocks for each.
    for mask in [MaskKind::None, MaskKind::Causal, MaskKind::Local] {
        assert_eq!(
            launch_grid(mask, &fp, &ragged, 132).unwrap(),
            Some((36 * 12 * 32, 1, 1)),
            "{mask:?}"
        );
    }
    // Pack-GQA: the rows are (query, head) pairs of a KV head's 4 query heads.
    let packed = Footprint {
        pack_gqa: true,
        ..fp
    };
    assert_eq!(
        launch_grid(MaskKind::Causal, &packed, &ragged, 132).unwrap(),
        Some((36 * 47 * 8, 1, 1))
    );
    // A persistent kernel: its blocks over them, the causal sections no longer sized.
    let persistent = Footprint {
        persistent_per_sm: 1,
        ..fp
    };
    assert_eq!(
        launch_grid(MaskKind::Causal, &persistent, &ragged, 132).unwrap(),
        Some((132, 1, 1))
    );
    let few = FwdParams {
        batch: 1,
        seqlen_q: 300,
        heads_q: 8,
        ..ragged
    };
    assert_eq!(
        launch_grid(MaskKind::Causal, &persistent, &few, 132).unwrap(),
        Some((3 * 8, 1, 1))
    );
    // The launch takes the varlen build (and grid) only for a varlen batch of a kernel
    // that has one.
    assert!(launch_footprint(&fp, &ragged, true).varlen_tiles);
    assert!(!launch_footprint(&fp, &ragged, false).varlen_tiles);
    let dense_batch = FwdParams {
        cu_seqlens_q: 0,
        ..ragged
    };
    assert!(!launch_footprint(&fp, &dense_batch, true).varlen_tiles);
    assert!(!launch_footprint(&plain_footprint(128), &ragged, true).varlen_tiles);
    // A kernel without the varlen numbering (and a dense batch) keeps the dense grid.
    assert_eq!(
        launch_grid(MaskKind::None, &plain_footprint(128), &ragged, 132).unwrap(),
        Some((12, 32, 36))
    );
    let dense = FwdParams {
        cu_seqlens_q: 0,
        cu_seqlens_k: 0,
        ..ragged
    };
    assert_eq!(
        launch_grid(MaskKind::None, &fp, &dense, 132).unwrap(),
        Some((12, 32, 36))
    );
}
