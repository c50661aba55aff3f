//! Config space of the Hopper (wgmma) template, sm90 only. The arithmetic mirrors
//! `templates/include/fa4/hopper/traits.cuh`; the rendered kernel asserts that its
//! shared-memory size equals the one computed here.
//!
//! A config's `warps` is four per warpgroup, and each warpgroup that computes owns 64
//! query rows, so `block_m = 16 * warps`; with the warp-specialised schedule one more
//! warpgroup loads Q, K and V (`block_m = 16 * (warps - 4)`). `block_n` is the N of the QK
//! wgmma, `head_dim_v` the N of the PV wgmma.

use std::collections::BTreeMap;

use fa4_spec::{Arch, Dtype, KernelSpec, MaskKind, TileConfig};
use serde_json::{json, Value};

use super::switches::*;
use super::{twins, Footprint, RejectKind, Rejection};

/// Head dims the template builds. Its tiles hold whole 64-column blocks (the 128-byte
/// swizzle atom of wgmma's operands), so d96 runs in d128's tiles ([`padded`]).
pub(super) const HEAD_DIMS: &[(u32, u32)] = &[
    (64, 64),
    (96, 96),
    (128, 128),
    (192, 128),
    (192, 192),
    (256, 256),
];

/// Head dims the template builds but does not serve yet: the shipped cache keeps them on
/// the portable template ([`super::serving_template`]) until `fa4-gen verify` has passed
/// on an H200 and a tune has timed the Hopper kernels ahead (d96: checks passed, tune and
/// timing to come; `bench/headdim_check.sh run d96`).
pub(super) const HELD_BACK_HEAD_DIMS: &[(u32, u32)] = &[(96, 96)];

/// Columns a head dim takes in shared memory and as the PV GEMM's N: whole 64-column
/// blocks (traits.cuh's kHeadDimPad). An MN-major wgmma operand (V) cannot end inside a
/// swizzle atom; the QK GEMM steps over the real columns only.
fn padded(head_dim: u32) -> u32 {
    head_dim.div_ceil(64) * 64
}

const WARPGROUPS: &[u32] = &[1, 2, 3];
const BLOCK_N: &[u32] = &[64, 128, 176];
const STAGES: &[u32] = &[1, 2];

fn config(warpgroups: u32, block_n: u32, stages: u32) -> TileConfig {
    TileConfig {
        block_m: 64 * warpgroups,
        block_n,
        warps: 4 * warpgroups,
        stages,
        switches: BTreeMap::new(),
    }
}

pub(super) fn candidates(spec: &KernelSpec) -> Vec<TileConfig> {
    let mut out = Vec::new();
    for &wg in WARPGROUPS {
        for &block_n in BLOCK_N {
            for &stages in STAGES {
                out.push(config(wg, block_n, stages));
            }
        }
    }
    for block_n in [64, 128] {
        let mut c = config(2, block_n, 2);
        c.switches.insert(PACK_GQA.to_string(), 1);
        out.push(c);
    }
    // Warp-specialised: (consumers, block_n, pingpong, overlap, pack-GQA). FA3's tiles
    // (two consumers over 176 keys at d128, 80 at d256, three over 128 at d64) and their
    // neighbours, and the switches off once each so the tuner sees what they are worth.
    for (consumers, block_n, pingpong, overlap, pack) in [
        (1, 64, 0, 1, 0),
        (1, 128, 0, 1, 0),
        (2, 64, 1, 1, 0),
        (2, 80, 1, 1, 0),
        (2, 128, 1, 1, 0),
        (2, 176, 1, 1, 0),
        (2, 128, 0, 1, 0),
        (2, 128, 1, 0, 0),
        (2, 128, 1, 1, 1),
        (3, 64, 1, 1, 0),
        (3, 128, 1, 1, 0),
    ] {
        out.push(ws_config(consumers, block_n, pingpong, overlap, pack));
    }
    // The leading tiles also with a persistent grid; 64 keys too, which divide 512 and
    // 1024 keys where 80 leave a block nine-tenths and two-fifths empty (d256).
    for (consumers, block_n, pack) in [
        (2, 64, 0),
        (2, 80, 0),
        (2, 128, 0),
        (2, 128, 1),
        (2, 176, 0),
        (3, 128, 0),
    ] {
        let mut c = ws_config(consumers, block_n, 1, 1, pack);
        c.switches.insert(PERSISTENT.to_string(), 1);
        out.push(c);
    }
    // Two persistent consumers without pingpong, on masked specs: with no turns neither
    // waits for the other's at a tile's start or end, which pays on some short masked
    // keys (up to 4% over the best tile with turns, mostly at 128 to 512 keys) and loses
    // 3 to 8% on long ones and unmasked (bench/NOTES.md); the tuner decides per bucket.
    if spec.mask != MaskKind::None {
        for block_n in [64, 128] {
            let mut c = ws_config(2, block_n, 0, 1, 0);
            c.switches.insert(PERSISTENT.to_string(), 1);
            out.push(c);
        }
    }
    // One consumer per block and two blocks per SM, persistent: the two blocks' tiles
    // start and end at unrelated times, so one block's epilogue and first softmax run
    // under the other's GEMMs (two consumers of one tile meet every tile's start and end
    // together). Only where two blocks' shared memory fits an SM (check()).
    for block_n in [64, 128] {
        let mut c = ws_config(1, block_n, 0, 1, 0);
        c.switches.insert(PERSISTENT.to_string(), 1);
        out.push(c);
    }
    // A third ring stage for the three-consumer tile, where shared memory holds it (d64):
    // +2 to 6% on long unmasked sequences against its two-stage twin. Not on the other
    // tiles: two consumers over 128 keys ran 0.95 to 1.03x (d128), the persistent tiles
    // 0.88 to 1.02x (bench/NOTES.md).
    let mut c = ws_config(3, 128, 1, 1, 0);
    c.stages = 3;
    out.push(c);
    // Lazy rescaling on every tile with pingpong or a persistent grid, and overlap.
    out.extend(twins(&out, LAZY_RESCALE, 1, |c| {
        (c.switch(PINGPONG, 0) == 1 || persistent(c)) && c.switch(OVERLAP, 0) == 1
    }));
    // Turns at the MUFU ran 1.02 to 1.05x their twins on causal tiles and 0.96 to 0.99x
    // on unmasked ones (bench/NOTES.md), so only masked specs enumerate them.
    let masked = spec.mask != MaskKind::None;
    out.extend(twins(&out, MUFU_TURNS, 1, |c| {
        masked && c.switch(PINGPONG, 0) == 1
    }));
    // The first consumer's hidden first block skipped but for its MUFU turn, on the masked
    // tiles with turns at the MUFU that have no half first block (head dims past 128):
    // 1.5 to 3% over their twins on d256 causal from 1024 keys, level at 512
    // (bench/NOTES.md).
    out.extend(twins(&out, HIDDEN_FIRST, 1, |c| {
        masked && spec.head_dim_v > 128 && c.switch(MUFU_TURNS, 0) == 1
    }));
    // cuDNN's loop over 256 keys: two persistent consumers without intra-warpgroup
    // overlap (P packed as S dies, so d64's S of 256 columns fits), turns at the MUFU on
    // every mask (without them 0.89x). Half the key blocks of the 128-key tile, so half its
    // per-block cost: 1.04 to 1.08x it at 512 to 2048 unmasked keys, level causal
    // (bench/NOTES.md). Where shared memory holds 256 keys (d64).
    let mut wide = ws_config(2, 256, 1, 0, 0);
    wide.switches.insert(PERSISTENT.to_string(), 1);
    wide.switches.insert(MUFU_TURNS.to_string(), 1);
    out.push(wide);
    // The cap's fixed offset (bf16 soft-capped specs): a twin of every warp-specialised
    // tile.
    let capped_bf16 = spec.features.softcap && spec.dtype == Dtype::Bf16;
    out.extend(twins(&out, CAP_OFFSET, 1, |c| {
        capped_bf16 && warp_specialized(c)
    }));
    // Exp2 emulation (EXP2_EMU, every 4th fragment) on the fixed-offset tiles of d64, where
    // the tanh makes two MUFU ops a score and no row max is left to wait for: 1.02x causal
    // and 1.05x unmasked against the same tile without it (k = 2 and d128 lost). Elsewhere
    // it is offered by check() but not enumerated: on every pingpong tile it ran 0.86 to
    // 1.0x its twin, with the max path's softcap at best 1.02x the cell's best
    // (bench/NOTES.md).
    out.extend(twins(&out, EXP2_EMU, 4, |c| {
        spec.head_dim <= 64 && c.switch(CAP_OFFSET, 0) == 1
    }));
    // Pairs of blocks sharing their K/V loads (unmasked, one block per tile, strided K/V),
    // on the pingpong tiles with overlap: half the K/V reads from L2 lets the power cap
    // hold a 2 to 4% higher clock, at the cost of the pair's blocks waiting for each
    // other's slots (bench/NOTES.md). Not on the tiles without pingpong or overlap, nor
    // with pack-GQA, which led nowhere unmasked.
    out.extend(twins(&out, CLUSTER, 2, |c| {
        pairs_share_loads(spec, c)
            && c.switch(PINGPONG, 0) == 1
            && c.switch(OVERLAP, 0) == 1
            && c.switch(PACK_GQA, 0) == 0
    }));
    out
}

/// Blocks per cluster (1: none).
fn cluster_m(c: &TileConfig) -> u32 {
    c.switch(CLUSTER, 0).max(1)
}

/// Whether a cluster's blocks would walk the same key tiles and load them by TMA, so
/// they can share the loads: unmasked, one block per tile, strided K/V.
fn pairs_share_loads(spec: &KernelSpec, c: &TileConfig) -> bool {
    tma(spec, c) && !persistent(c) && spec.mask == MaskKind::None
}

fn ws_config(
    consumers: u32,
    block_n: u32,
    pingpong: u32,
    overlap: u32,
    pack_gqa: u32,
) -> TileConfig {
    let mut c = config(consumers, block_n, 2);
    c.warps += 4;
    c.switches.insert(WARP_SPECIALIZED.to_string(), 1);
    c.switches.insert(PINGPONG.to_string(), pingpong);
    c.switches.insert(OVERLAP.to_string(), overlap);
    if pack_gqa == 1 {
        c.switches.insert(PACK_GQA.to_string(), 1);
    }
    c
}

/// How the warp-specialised schedule shares an SM's registers: blocks per SM, the
/// registers each thread gets at launch, and what `setmaxnreg` leaves the producer and
/// gives the consumers (0: no reallocation, every thread keeps the launch count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RegisterSplit {
    pub blocks_per_sm: u32,
    pub launch: u32,
    pub producer: u32,
    pub consumer: u32,
}

/// Shared memory an SM offers its blocks (228 KiB, 1 KiB of it reserved per block).
const SM_SMEM_BYTES: u32 = 233_472;

fn register_split(spec: &KernelSpec, c: &TileConfig) -> RegisterSplit {
    let threads = c.warps * 32;
    let consumers = consumers(c);
    // One consumer: two blocks per SM where their shared memory fits, so two consumers
    // share the tensor cores as pingpong's two would.
    let blocks_per_sm = if consumers == 1 && 2 * (smem_bytes(spec, c) + 1024) <= SM_SMEM_BYTES {
        2
    } else {
        1
    };
    let launch = (65536 / (threads * blocks_per_sm)).min(255) / 8 * 8;
    if launch >= 240 {
        return RegisterSplit {
            blocks_per_sm,
            launch,
            producer: 0,
            consumer: 0,
        };
    }
    // The producer keeps enough for its copy loop without spilling (ptxas's report:
    // 24 spills, page lookups need more); three consumers leave it less, as in FA3
    // (32 + 3 x 160 of 512 threads x 128).
    // A persistent producer also walks the work tiles: as many as for page lookups.
    let lean = !spec.features.paged_kv && !persistent(c);
    let producer = match (consumers >= 3, lean) {
        (true, true) => 32,
        (true, false) => 40,
        (false, true) => 40,
        (false, false) => 56,
    };
    let consumer = ((launch * threads - producer * 128) / (128 * consumers)).min(256) / 8 * 8;
    RegisterSplit {
        blocks_per_sm,
        launch,
        producer,
        consumer,
    }
}

/// Computing warpgroups of a warp-specialised config (its warps less the producer's 4).
fn consumers(c: &TileConfig) -> u32 {
    (c.warps / 4).saturating_sub(1)
}

fn warp_specialized(c: &TileConfig) -> bool {
    c.switch(WARP_SPECIALIZED, 0) == 1
}

fn persistent(c: &TileConfig) -> bool {
    warp_specialized(c) && c.switch(PERSISTENT, 0) == 1
}

/// Unmasked persistent kernels may split their last tiles by keys (traits.cuh's
/// kSplitTail, `gpu::split_tail`): not with sinks, which join one denominator, nor with
/// paged K/V.
fn splits_tail(spec: &KernelSpec, c: &TileConfig) -> bool {
    persistent(c) && spec.mask == MaskKind::None && !spec.features.sinks && !spec.features.paged_kv
}

/// Slots for O beside Q on a persistent grid, so the producer loads the next tile's Q
/// while the consumers finish this one (with none, O is staged in the Q slot and the
/// next Q waits for O's store out of it): one per consumer where shared memory allows,
/// else, past head dim 128, one that two consumers take in turn (d256 over 64 keys:
/// 32 KiB beside 192), else none. (d128 over 176 keys has room for a shared slot too,
/// but its consumers then spill: 16 bytes, or ptxas serialises their wgmmas.)
fn o_slots(spec: &KernelSpec, c: &TileConfig) -> u32 {
    let limit = spec.arch.max_smem_per_block();
    if !persistent(c) {
        0
    } else if smem_bytes_with(spec, c, consumers(c), 1) <= limit {
        consumers(c)
    } else if consumers(c) == 2 && spec.head_dim_v > 128 && smem_bytes_with(spec, c, 1, 1) <= limit
    {
        1
    } else {
        0
    }
}

/// Q slots per consumer: two where O has a slot beside them and shared memory holds a
/// second Q, so the producer loads the next tile's Q while this one's is still being
/// read (with one, the next Q could start only after the last QK GEMM, and the
/// consumers waited for it at every tile's start).
fn q_buffers(spec: &KernelSpec, c: &TileConfig) -> u32 {
    let o = o_slots(spec, c);
    if o > 0 && smem_bytes_with(spec, c, o, 2) <= spec.arch.max_smem_per_block() {
        2
    } else {
        1
    }
}

/// Where a masked tile's first key block is at most half visible to a consumer, the
/// warp-specialised schedule runs that block's QK GEMM (an N = block_n / 2 wgmma), softmax
/// and PV GEMM over the visible half. Not over head dims past 128 (the block's second
/// path spills d256 with sinks and softcap, and the half softmax alone measured level
/// there), nor with softcap at head dim 64, whose MUFU-bound tiles lost 2% to the second
/// path (bench/NOTES.md).
fn half_first_block(spec: &KernelSpec, c: &TileConfig) -> bool {
    warp_specialized(c)
        && spec.mask != MaskKind::None
        && spec.head_dim_v <= 128
        && !(spec.features.softcap && spec.head_dim <= 64)
}

/// The warp-specialised producer loads strided K/V (and Q) by TMA; pages stay with
/// cp.async (TMA cannot gather rows).
fn tma(spec: &KernelSpec, c: &TileConfig) -> bool {
    warp_specialized(c) && !spec.features.paged_kv
}

pub(super) fn smem_bytes(spec: &KernelSpec, c: &TileConfig) -> u32 {
    smem_bytes_with(spec, c, o_slots(spec, c), q_buffers(spec, c))
}

/// traits.cuh's kSmemBytes: Q slots (which stage O too unless it has slots of its
/// own), O's slots, the K/V stages, and the block scalars or the mbarriers.
fn smem_bytes_with(spec: &KernelSpec, c: &TileConfig, o_slots: u32, q_buffers: u32) -> u32 {
    let (d, dv) = (padded(spec.head_dim), padded(spec.head_dim_v));
    let q_slot_cols = if o_slots > 0 { d } else { d.max(dv) };
    let o_region = o_slots * 64 * dv;
    let kv_stage = c.block_n * (d + dv);
    // the K/V ring's mbarriers (full and empty, K and V, per stage), each consumer's Q
    // slot's (full and empty), and a shared O slot's (free)
    let extra = if warp_specialized(c) {
        let shared_o = o_slots == 1 && consumers(c) > 1;
        // (+ the word that ties a turn at the MUFU to the exponentials)
        let mufu_turn = if c.switch(MUFU_TURNS, 0) == 1 { 8 } else { 0 };
        // (+ the block's share of a split tail)
        let split = if splits_tail(spec, c) { 56 } else { 0 };
        32 * c.stages
            + 16 * (c.block_m / 64) * q_buffers
            + if shared_o { 8 } else { 0 }
            + mufu_turn
            + split
    } else {
        16
    };
    (c.block_m * q_slot_cols * q_buffers + o_region + c.stages * kv_stage) * spec.dtype.size()
        + extra
}

/// Registers per thread: the f32 accumulators of O (head_dim_v / 2) and S (block_n / 2),
/// P packed to 16 bits (block_n / 4), and an allowance for addresses and softmax state.
/// The warp-specialised consumers keep only their own addresses (the producer holds the
/// loads'): a smaller allowance.
pub(super) fn est_registers(spec: &KernelSpec, c: &TileConfig) -> u32 {
    let allowance = if warp_specialized(c) { 24 } else { 64 };
    // P (16 bits) beside S: all of it with intra-warpgroup overlap (P(j - 1) lives while S(j)
    // fills); without it P is packed as S dies, so an eighth of S's columns at most.
    let p_regs = if warp_specialized(c) && c.switch(OVERLAP, 0) == 0 {
        c.block_n / 8
    } else {
        c.block_n / 4
    };
    padded(spec.head_dim_v) / 2 + c.block_n / 2 + p_regs + allowance
}

pub(super) fn check(spec: &KernelSpec, c: &TileConfig) -> Result<Footprint, Rejection> {
    let reject = |kind, reason: String| Err(Rejection { kind, reason });
    if spec.arch != Arch::Sm90 {
        return reject(
            RejectKind::Shape,
            format!("wgmma is sm90's (sm_90a); {} has none", spec.arch),
        );
    }
    let ws = warp_specialized(c);
    if c.switch(CAP_OFFSET, 0) == 1 && !(ws && spec.features.softcap && spec.dtype == Dtype::Bf16) {
        return reject(
            RejectKind::Shape,
            "capoffset: a warp-specialised tile of a bf16 soft-capped spec".into(),
        );
    }
    let producer_warps = if ws { 4 } else { 0 };
    let compute_warps = c.warps.saturating_sub(producer_warps);
    if c.warps % 4 != 0
        || !(1..=3).contains(&(compute_warps / 4))
        || c.block_m != 16 * compute_warps
    {
        return reject(
            RejectKind::Shape,
            format!(
                "block_m {} over {} warps is not 64 rows per computing warpgroup of 4 warps (1 to 3{})",
                c.block_m,
                c.warps,
                if ws { ", plus the producer's 4" } else { "" }
            ),
        );
    }
    if !ws
        && [
            PINGPONG,
            OVERLAP,
            PERSISTENT,
            LAZY_RESCALE,
            EXP2_EMU,
            MUFU_TURNS,
        ]
        .iter()
        .any(|s| c.switch(s, 0) != 0)
    {
        return reject(
            RejectKind::Shape,
            "pingpong, overlap, persistent, lazy, exp2emu and mufuturn are switches of the warp-specialised schedule"
                .into(),
        );
    }
    if cluster_m(c) > 1 && (cluster_m(c) != 2 || !pairs_share_loads(spec, c)) {
        return reject(
            RejectKind::Shape,
            "clusters are of two blocks, on unmasked warp-specialised tiles with one block per tile and strided K/V (TMA)"
                .into(),
        );
    }
    if c.switch(HIDDEN_FIRST, 0) == 1
        && (c.switch(MUFU_TURNS, 0) != 1
            || spec.mask == MaskKind::None
            || half_first_block(spec, c))
    {
        return reject(
            RejectKind::Shape,
            "hidden: a masked tile with turns at the MUFU and no half first block".into(),
        );
    }
    if c.switch(MUFU_TURNS, 0) == 1 && c.switch(PINGPONG, 0) != 1 {
        return reject(
            RejectKind::Shape,
            "turns at the MUFU take pingpong consumers".into(),
        );
    }
    if ws && c.switch(PINGPONG, 0) == 1 && compute_warps < 8 {
        return reject(
            RejectKind::Shape,
            "pingpong takes two or more computing warpgroups".into(),
        );
    }
    if ws && !(2..=3).contains(&c.stages) {
        return reject(
            RejectKind::Shape,
            "the warp-specialised ring has 2 or 3 stages".into(),
        );
    }
    if c.block_n % 16 != 0 || c.block_n == 0 || c.block_n > 256 {
        return reject(
            RejectKind::Shape,
            format!("block_n {} is not a multiple of 16 up to 256", c.block_n),
        );
    }
    if spec.head_dim % 16 != 0 || spec.head_dim_v % 16 != 0 || padded(spec.head_dim_v) > 256 {
        return reject(
            RejectKind::Shape,
            "head dims must be whole 16-column k-steps, V's at most 256".into(),
        );
    }
    if !ws && !(1..=2).contains(&c.stages) {
        return reject(
            RejectKind::Shape,
            format!("{} stages (1 or 2 supported)", c.stages),
        );
    }
    let smem = smem_bytes(spec, c);
    let limit = spec.arch.max_smem_per_block();
    if persistent(c) && consumers(c) == 1 && register_split(spec, c).blocks_per_sm < 2 {
        return reject(
            RejectKind::SharedMemory,
            format!(
                "a persistent single consumer shares its SM with a second block, and two blocks of {} KiB do not fit",
                smem.div_ceil(1024)
            ),
        );
    }
    if smem > limit {
        return reject(
            RejectKind::SharedMemory,
            format!(
                "needs {} KiB of shared memory, {} allows {} KiB per block",
                smem.div_ceil(1024),
                spec.arch,
                limit / 1024
            ),
        );
    }
    // One block per SM: 64K registers over the block's threads, at most 255 each; the
    // warp-specialised consumers get what setmaxnreg gives them.
    let threads = c.warps * 32;
    let budget = if ws {
        let split = register_split(spec, c);
        if split.consumer > 0 {
            split.consumer
        } else {
            split.launch
        }
    } else {
        (65536 / threads).min(255) / 8 * 8
    };
    let regs = est_registers(spec, c);
    if regs > budget {
        return reject(
            RejectKind::Registers,
            format!(
                "needs about {regs} registers per thread, {threads} threads get {budget}: it would spill"
            ),
        );
    }
    Ok(Footprint {
        threads,
        block_m: c.block_m,
        smem_bytes: smem,
        est_registers: regs,
        pack_gqa: c.switch(PACK_GQA, 0) == 1,
        tma_rows: if tma(spec, c) { c.block_n } else { 0 },
        persistent_per_sm: if persistent(c) {
            register_split(spec, c).blocks_per_sm
        } else {
            0
        },
        section_key_bytes: if spec.mask == MaskKind::Causal && !persistent(c) {
            (spec.head_dim + spec.head_dim_v) * spec.dtype.size()
        } else {
            0
        },
        causal_m_blocks_in_y: false,
        // (the workspace holds the consumers' O accumulators, padding columns too)
        split_head_dim_v: if splits_tail(spec, c) {
            padded(spec.head_dim_v)
        } else {
            0
        },
        cluster_m: if cluster_m(c) > 1 { cluster_m(c) } else { 0 },
    })
}

/// The heuristic default: per head dim the config with the best geomean over the FA3
/// grid (causal and not, seqlen 512 to 16k) among every config of the template. Strided
/// K/V: the warp-specialised schedule with pingpong and overlap, three consumers over 128
/// keys at d64 (1.14x the stage-1 pick), two over 128 at d128 (1.37x), two over 80 at
/// d256 (1.40x) and, untimed, d192 (`bench/results/2026-11-30-h200-*-ws-tma-bench.json`).
/// Sliding windows see a few key blocks per query block: one warpgroup over 64 keys led
/// on window (128, 0) at d64; at d128 one consumer over 64 keys, persistent with two
/// blocks per SM, 1.06x the non-persistent one over windows of 128 and 1024 keys
/// (`bench/results/2026-12-02-h200-1107d61-dirty-local-*`). Paged K/V keep the stage-1 schedule, whose
/// every warp shares the page lookups (the producer alone ran 0.7 to 0.8x). Then smaller
/// tiles, for feature sets that need more registers (ptxas has the last word: a test
/// compiles every default without spills). Soft-capped bf16 specs take the chosen tile's
/// fixed-offset twin (CAP_OFFSET) where check() allows it (warp-specialised tiles): over
/// every bf16 soft-capped causal and local key of the H200 tune the twins ran 1.055 to
/// 1.10x their bases (geomean per spec, about 2500 pairs,
/// `bench/results/2026-12-03-h200-b38e037-dirty-hopper-capoffset-tune-d*.json.xz`).
pub(super) fn default_config(spec: &KernelSpec) -> TileConfig {
    let tile = default_tile(spec);
    let mut fixed = tile.clone();
    fixed.switches.insert(CAP_OFFSET.to_string(), 1);
    if check(spec, &fixed).is_err() {
        return tile;
    }
    // At d64 the fixed-offset default also emulates every 4th fragment's exp2 (as the
    // space's twins): 1.015 to 1.036x the same tile without it, unmasked and causal at
    // 4k and 16k (`bench/results/2026-12-03-h200-636620f-dirty-emu-probe-ab-*`).
    let mut emulated = fixed.clone();
    emulated.switches.insert(EXP2_EMU.to_string(), 4);
    if spec.head_dim <= 64 && check(spec, &emulated).is_ok() {
        emulated
    } else {
        fixed
    }
}

/// default_config()'s tile before the soft-capped switches.
fn default_tile(spec: &KernelSpec) -> TileConfig {
    let local = spec.mask == MaskKind::Local;
    let paged = spec.features.paged_kv;
    if !paged {
        // (consumers, block_n, pingpong, overlap, persistent)
        let ws: &[(u32, u32, u32, u32, u32)] = match (spec.head_dim, local) {
            (..=64, true) => &[],
            (..=128, true) => &[(1, 64, 0, 1, 1), (1, 64, 0, 1, 0)],
            (_, true) => &[],
            (..=64, false) => &[(3, 128, 1, 1, 0), (2, 128, 1, 1, 0)],
            (..=128, false) => &[(2, 128, 1, 1, 0), (2, 80, 1, 1, 0)],
            // A wide QK over 128 V columns (DeepSeek's 192/128): d128's tile, as FA3 takes
            // 128 x 128 there; the wider Q and K fit beside it (check() prices them).
            (_, false) if spec.head_dim_v <= 128 => &[(2, 128, 1, 1, 0), (2, 80, 1, 1, 0)],
            _ => &[(2, 80, 1, 1, 0), (2, 64, 1, 1, 0)],
        };
        if let Some(c) = ws
            .iter()
            .map(|&(n, bn, pp, ov, pers)| {
                let mut c = ws_config(n, bn, pp, ov, 0);
                if pers == 1 {
                    c.switches.insert(PERSISTENT.to_string(), 1);
                }
                c
            })
            .find(|c| check(spec, c).is_ok())
        {
            return c;
        }
    }
    // Stage 1. d128 with paged K/V: one warpgroup copying 128-key tiles holds 16 page
    // lookups per thread and spills; two warpgroups share them. Windows: one warpgroup
    // over 64 keys ran 1.10 to 1.18x the causal picks on window (128, 0)
    // (`bench/results/2026-11-30-h200-6f2d618-hopper-bench-all-local.json`).
    let measured: &[(u32, u32, u32)] = match (spec.head_dim, paged, local) {
        (..=64, _, true) => &[(1, 64, 2)],
        (..=128, _, true) | (_, false, true) => &[(1, 64, 1)],
        (..=64, _, false) => &[(1, 64, 1)],
        (..=128, false, false) => &[(1, 128, 1)],
        (..=128, true, false) => &[(2, 128, 2)],
        _ => &[(2, 64, 2)],
    };
    // d64 over pages: two warpgroups over 64 keys with the pack-GQA row mapping ran 1.14
    // to 1.22x the portable kernel (and 1.33x the same tile without it, a difference not
    // yet explained: `bench/results/2026-11-30-h200-da26ca6-hopper-bench-d64-paged.json`).
    if spec.head_dim <= 64 && paged {
        let mut c = config(2, 64, 2);
        c.switches.insert(PACK_GQA.to_string(), 1);
        if check(spec, &c).is_ok() {
            return c;
        }
    }
    measured
        .iter()
        .chain(&[(1, 64, 1), (1, 64, 2)])
        .map(|&(wg, n, s)| config(wg, n, s))
        .find(|c| check(spec, c).is_ok())
        .unwrap_or_else(|| config(1, 64, 1))
}

/// One wgmma shape the entry point defines: N, the accumulator registers and their
/// operand lists, written out here so the template reads as plain inline assembly.
fn wgmma_shape(n: u32, dtype: Dtype) -> Value {
    let regs = n / 2;
    let d: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let operands: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    json!({
        "n": n,
        "regs": regs,
        "bf16": dtype == Dtype::Bf16,
        "ab": if dtype == Dtype::Bf16 { "bf16" } else { "f16" },
        "d": d.join(", "),
        "d_operands": operands.join(", "),
    })
}

pub(super) fn render_values(
    spec: &KernelSpec,
    c: &TileConfig,
    fp: &Footprint,
) -> Vec<(&'static str, Value)> {
    let ws = warp_specialized(c);
    let half_first = half_first_block(spec, c);
    // QK over N = block_n, PV over N = head_dim_v padded, the half first block's QK over
    // N = block_n / 2.
    let mut ns = vec![c.block_n, padded(spec.head_dim_v)];
    if half_first {
        ns.push(c.block_n / 2);
    }
    ns.sort_unstable();
    ns.dedup();
    let split = if ws {
        register_split(spec, c)
    } else {
        RegisterSplit {
            blocks_per_sm: 1,
            launch: 0,
            producer: 0,
            consumer: 0,
        }
    };
    vec![
        ("dtype", json!(spec.dtype.name())),
        (
            "mask",
            json!(match spec.mask {
                MaskKind::None => "None",
                MaskKind::Causal => "Causal",
                MaskKind::Local => "Local",
            }),
        ),
        ("head_dim", json!(spec.head_dim)),
        ("head_dim_v", json!(spec.head_dim_v)),
        ("warpgroups", json!(c.block_m / 64)),
        ("threads", json!(fp.threads)),
        ("warp_specialized", json!(ws)),
        ("pingpong", json!(c.switch(PINGPONG, 0) == 1)),
        ("overlap", json!(c.switch(OVERLAP, 0) == 1)),
        ("tma", json!(fp.tma_rows > 0)),
        ("persistent", json!(fp.persistent_per_sm > 0)),
        ("o_slots", json!(o_slots(spec, c))),
        ("q_buffers", json!(q_buffers(spec, c))),
        ("lazy_rescale", json!(c.switch(LAZY_RESCALE, 0) == 1)),
        ("exp2_emu_every", json!(c.switch(EXP2_EMU, 0))),
        ("cap_offset", json!(c.switch(CAP_OFFSET, 0) == 1)),
        ("half_first", json!(half_first)),
        ("hidden_first", json!(c.switch(HIDDEN_FIRST, 0) == 1)),
        ("mufu_turns", json!(c.switch(MUFU_TURNS, 0) == 1)),
        ("cluster_m", json!(cluster_m(c))),
        ("blocks_per_sm", json!(split.blocks_per_sm)),
        ("producer_regs", json!(split.producer)),
        ("consumer_regs", json!(split.consumer)),
        ("block_m", json!(c.block_m)),
        ("block_n", json!(c.block_n)),
        ("stages", json!(c.stages)),
        ("sinks", json!(spec.features.sinks)),
        ("softcap", json!(spec.features.softcap)),
        ("paged_kv", json!(spec.features.paged_kv)),
        ("pack_gqa", json!(c.switch(PACK_GQA, 0) == 1)),
        ("smem_bytes", json!(fp.smem_bytes)),
        (
            "wgmma",
            Value::Array(ns.into_iter().map(|n| wgmma_shape(n, spec.dtype)).collect()),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::TemplateSpace;
    use super::*;

    #[test]
    fn smem_and_shapes_follow_the_traits() {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        // Q 128x128, two stages of K and V 128x128: (16384 + 2 * 32768) * 2 + 16.
        let c = config(2, 128, 2);
        assert_eq!(smem_bytes(&spec, &c), 163_856);
        let fp = check(&spec, &c).unwrap();
        assert_eq!((fp.threads, fp.block_m), (256, 128));
        // Not on other archs; not 32 rows per warp.
        let sm80 = KernelSpec {
            arch: Arch::Sm80,
            ..spec
        };
        assert_eq!(check(&sm80, &c).unwrap_err().kind, RejectKind::Shape);
        let bad = TileConfig {
            block_m: 128,
            warps: 4,
            ..c.clone()
        };
        assert_eq!(check(&spec, &bad).unwrap_err().kind, RejectKind::Shape);
        // Three warpgroups at d128 with 176 keys: more registers than 384 threads get.
        assert_eq!(
            check(&spec, &config(3, 176, 1)).unwrap_err().kind,
            RejectKind::Registers
        );
        // At d256 they do not even fit in shared memory.
        let d256 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::None);
        assert_eq!(
            check(&d256, &config(3, 176, 1)).unwrap_err().kind,
            RejectKind::SharedMemory
        );
        assert!(check(&d256, &default_config(&d256)).is_ok());
    }

    #[test]
    fn warp_specialized_configs_add_a_producer_and_move_its_registers() {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        let c = ws_config(2, 128, 1, 1, 0);
        let fp = check(&spec, &c).unwrap();
        // Two consumers of 64 rows and the producer: 384 threads; TMA boxes of 128 keys.
        assert_eq!((fp.threads, fp.block_m, fp.tma_rows), (384, 128, 128));
        // Q, two stages of K and V, and mbarriers instead of block scalars: 4 per stage
        // for the ring, 2 per consumer for its Q slot.
        assert_eq!(
            fp.smem_bytes,
            (128 * 128 + 2 * 2 * 128 * 128) * 2 + 2 * 32 + 2 * 16
        );
        let split = register_split(&spec, &c);
        assert_eq!(
            split,
            RegisterSplit {
                blocks_per_sm: 1,
                launch: 168,
                producer: 40,
                consumer: 232
            }
        );
        assert!(split.producer * 128 + split.consumer * 256 <= split.launch * 384);
        // Paged K/V: the producer gathers by cp.async (no TMA) and keeps more registers.
        let mut paged = spec;
        paged.features.paged_kv = true;
        assert_eq!(check(&paged, &c).unwrap().tma_rows, 0);
        assert_eq!(register_split(&paged, &c).producer, 56);
        // Three consumers: 512 threads at 128 registers, 32 + 3 x 160 after the move.
        let d64 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
        assert_eq!(
            register_split(&d64, &ws_config(3, 128, 1, 1, 0)),
            RegisterSplit {
                blocks_per_sm: 1,
                launch: 128,
                producer: 32,
                consumer: 160
            }
        );
        // One consumer: two blocks per SM where their shared memory fits, else one block
        // whose 256 threads keep 248 registers each (no move).
        assert_eq!(
            register_split(&spec, &ws_config(1, 64, 0, 1, 0)).blocks_per_sm,
            2
        );
        let big = register_split(&spec, &ws_config(1, 128, 0, 1, 0));
        assert_eq!((big.blocks_per_sm, big.producer, big.consumer), (1, 0, 0));
        // Pingpong takes two consumers; its switches belong to the warp-specialised schedule.
        let kind = |c: &TileConfig| check(&spec, c).unwrap_err().kind;
        assert_eq!(kind(&ws_config(1, 64, 1, 1, 0)), RejectKind::Shape);
        let mut stage1 = config(2, 128, 2);
        stage1.switches.insert(PINGPONG.to_string(), 1);
        assert_eq!(kind(&stage1), RejectKind::Shape);
        // A persistent grid, one block per SM here, any mask; O gets a slot per consumer
        // where shared memory allows, and then each consumer a second Q slot where that
        // fits too (d128 over 128 keys: 2 x 32 KiB of Q, 32 of O, 128 of K/V), not at d256.
        let mut persistent = ws_config(2, 128, 1, 1, 0);
        persistent.switches.insert(PERSISTENT.to_string(), 1);
        let fp = check(&spec, &persistent).unwrap();
        assert_eq!(fp.persistent_per_sm, 1);
        assert_eq!(o_slots(&spec, &persistent), 2);
        assert_eq!(q_buffers(&spec, &persistent), 2);
        assert_eq!(
            fp.smem_bytes,
            (2 * 2 * 64 * 128 + 2 * 64 * 128 + 2 * 128 * 256) * 2 + 64 + 2 * 32
        );
        assert!(fp.smem_bytes <= Arch::Sm90.max_smem_per_block());
        // Over 176 keys a second Q would not fit beside O's slot.
        let mut long = ws_config(2, 176, 1, 1, 0);
        long.switches.insert(PERSISTENT.to_string(), 1);
        assert_eq!((o_slots(&spec, &long), q_buffers(&spec, &long)), (0, 1));
        assert_eq!(check(&spec, &c).unwrap().persistent_per_sm, 0);
        assert_eq!(o_slots(&spec, &c), 0);
        let d256 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::Causal);
        let mut wide = ws_config(2, 80, 1, 1, 0);
        wide.switches.insert(PERSISTENT.to_string(), 1);
        assert!(check(&d256, &wide).is_ok());
        assert_eq!(o_slots(&d256, &wide), 0);
        assert_eq!(q_buffers(&d256, &wide), 1);
        // Over 64 keys d256 has room for one O slot, which its two consumers take in turn
        // (and its mbarrier): 64 KiB of Q, 32 of O, 128 of K/V.
        let mut narrow = ws_config(2, 64, 1, 1, 0);
        narrow.switches.insert(PERSISTENT.to_string(), 1);
        assert_eq!((o_slots(&d256, &narrow), q_buffers(&d256, &narrow)), (1, 1));
        assert_eq!(
            check(&d256, &narrow).unwrap().smem_bytes,
            (2 * 64 * 256 + 64 * 256 + 2 * 64 * 512) * 2 + 64 + 32 + 8
        );
        // The consumers' registers bound the tiles: 176 keys at d128 fit 232, not 160.
        assert!(check(&spec, &ws_config(2, 176, 1, 1, 0)).is_ok());
        assert_eq!(kind(&ws_config(3, 176, 1, 1, 0)), RejectKind::Registers);
        // Lazy rescaling is a switch of the warp-specialised schedule, rendered as such.
        let mut lazy = ws_config(2, 128, 1, 1, 0);
        lazy.switches.insert(LAZY_RESCALE.to_string(), 1);
        let fp = check(&spec, &lazy).unwrap();
        let values = render_values(&spec, &lazy, &fp);
        let value = |k: &str| values.iter().find(|(n, _)| *n == k).unwrap().1.clone();
        assert_eq!(value("lazy_rescale"), json!(true));
        let mut stage1_lazy = config(2, 128, 2);
        stage1_lazy.switches.insert(LAZY_RESCALE.to_string(), 1);
        assert_eq!(kind(&stage1_lazy), RejectKind::Shape);
        // Exp2 emulation likewise: offered by check() and rendered, never enumerated (it
        // ran 0.86 to 1.01x its twin on the H200).
        let mut emulated = ws_config(2, 128, 1, 1, 0);
        emulated.switches.insert(EXP2_EMU.to_string(), 4);
        let fp = check(&spec, &emulated).unwrap();
        let values = render_values(&spec, &emulated, &fp);
        let rendered = values.iter().find(|(k, _)| *k == "exp2_emu_every").unwrap();
        assert_eq!(rendered.1, json!(4));
        assert!(candidates(&spec).iter().all(|c| c.switch(EXP2_EMU, 0) == 0));
        let mut stage1_emulated = config(2, 128, 2);
        stage1_emulated.switches.insert(EXP2_EMU.to_string(), 2);
        assert_eq!(kind(&stage1_emulated), RejectKind::Shape);
        // The producer's ring takes a third stage where shared memory holds it (d128 over
        // 80 keys: 32 + 3 x 40 KiB), the stage-1 schedule does not; d256 over 80 keys
        // would need 264 KiB.
        let mut three = ws_config(2, 80, 1, 1, 0);
        three.stages = 3;
        assert!(check(&spec, &three).is_ok());
        assert_eq!(kind(&config(2, 80, 3)), RejectKind::Shape);
        assert_eq!(
            check(&d256, &three).unwrap_err().kind,
            RejectKind::SharedMemory
        );
    }

    #[test]
    fn the_three_consumer_tile_takes_a_third_stage_where_it_fits() {
        // Whether each enumerated three-stage, three-consumer candidate passes the checks.
        let fits = |hd| {
            let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, MaskKind::None);
            candidates(&spec)
                .into_iter()
                .filter(|c| warp_specialized(c) && c.stages == 3 && c.block_m == 192)
                .map(|c| check(&spec, &c).is_ok())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            fits(64),
            vec![true, true, true, true],
            "plain and lazy, at d64, and their clusters"
        );
        assert_eq!(
            fits(128),
            vec![false, false, false, false],
            "d128's K/V stages do not fit three, with a cluster or without"
        );
    }

    #[test]
    fn clusters_pair_unmasked_pingpong_tiles_with_one_block_per_tile() {
        let clustered = |spec: &KernelSpec| {
            candidates(spec)
                .into_iter()
                .filter(|c| c.switch(CLUSTER, 0) == 2)
                .collect::<Vec<_>>()
        };
        let unmasked = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
        let pairs = clustered(&unmasked);
        assert!(!pairs.is_empty());
        for c in &pairs {
            assert!(
                warp_specialized(c) && !persistent(c) && c.switch(PINGPONG, 0) == 1,
                "{c:?}"
            );
            assert!(
                c.switch(OVERLAP, 0) == 1 && c.switch(PACK_GQA, 0) == 0,
                "{c:?}"
            );
        }
        // FA3's d128 tile (two consumers over 176 keys) has its pair, which launches in
        // pairs of blocks and renders the cluster's size.
        let fa3 = pairs
            .iter()
            .find(|c| c.block_n == 176 && c.switch(LAZY_RESCALE, 0) == 0)
            .expect("the 128x176 tile's cluster twin");
        let fp = check(&unmasked, fa3).unwrap();
        assert_eq!(fp.cluster_m, 2);
        let values = render_values(&unmasked, fa3, &fp);
        let value = |key| values.iter().find(|(k, _)| *k == key).unwrap().1.clone();
        assert_eq!(value("cluster_m"), json!(2));
        let mut single = fa3.clone();
        single.switches.remove(CLUSTER);
        assert_eq!(check(&unmasked, &single).unwrap().cluster_m, 0);
        let single_values = render_values(&unmasked, &single, &check(&unmasked, &single).unwrap());
        assert!(single_values.contains(&("cluster_m", json!(1))));
        // Masked tiles walk different key tiles per m-block, persistent ones other
        // tiles altogether, pages go by cp.async: none of them pairs.
        for mask in [MaskKind::Causal, MaskKind::Local] {
            let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, mask);
            assert!(clustered(&spec).is_empty(), "{mask:?}");
            assert_eq!(check(&spec, fa3).unwrap_err().kind, RejectKind::Shape);
        }
        let mut persistent_pair = fa3.clone();
        persistent_pair.switches.insert(PERSISTENT.to_string(), 1);
        assert_eq!(
            check(&unmasked, &persistent_pair).unwrap_err().kind,
            RejectKind::Shape
        );
        let mut paged = unmasked;
        paged.features.paged_kv = true;
        assert!(clustered(&paged).is_empty());
        assert_eq!(check(&paged, fa3).unwrap_err().kind, RejectKind::Shape);
        let mut four = fa3.clone();
        four.switches.insert(CLUSTER.to_string(), 4);
        assert_eq!(check(&unmasked, &four).unwrap_err().kind, RejectKind::Shape);
    }

    #[test]
    fn a_persistent_single_consumer_runs_two_blocks_per_sm_or_not_at_all() {
        // (block_n, lazy) of each enumerated persistent single-consumer candidate that
        // passes the checks, and how many of its blocks the launch puts on an SM.
        let fits = |hd| {
            let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, MaskKind::Causal);
            candidates(&spec)
                .into_iter()
                .filter(|c| persistent(c) && consumers(c) == 1)
                .filter_map(|c| {
                    let fp = check(&spec, &c).ok()?;
                    Some((c.block_n, c.switch(LAZY_RESCALE, 0), fp.persistent_per_sm))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            fits(64),
            vec![(64, 0, 2), (128, 0, 2), (64, 1, 2), (128, 1, 2)]
        );
        assert_eq!(
            fits(128),
            vec![(64, 0, 2), (64, 1, 2)],
            "two blocks over 128 keys need 354 KiB"
        );
        assert_eq!(fits(256), vec![], "no d256 tile fits twice");
    }

    #[test]
    fn the_hidden_first_block_is_a_twin_of_masked_mufu_turn_tiles_past_d128() {
        let hidden = |hd, mask| {
            let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, mask);
            let all = candidates(&spec);
            let twins: Vec<&TileConfig> = all
                .iter()
                .filter(|c| c.switch(HIDDEN_FIRST, 0) == 1)
                .collect();
            for c in &twins {
                // Each is a twin of a tile with turns at the MUFU that the space also offers.
                let mut plain = (*c).clone();
                plain.switches.remove(HIDDEN_FIRST);
                assert!(
                    all.contains(&plain) && plain.switch(MUFU_TURNS, 0) == 1,
                    "{c:?}"
                );
                assert!(!half_first_block(&spec, c));
            }
            twins.len()
        };
        for mask in [MaskKind::Causal, MaskKind::Local] {
            assert!(hidden(256, mask) > 0 && hidden(192, mask) > 0, "{mask:?}");
            // Up to d128 the half path covers a hidden block.
            assert_eq!((hidden(64, mask), hidden(128, mask)), (0, 0), "{mask:?}");
        }
        assert_eq!(
            hidden(256, MaskKind::None),
            0,
            "nothing is hidden without a mask"
        );
        // check() holds the switch to where it is defined.
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::Causal);
        let mut c = ws_config(2, 64, 1, 1, 0);
        c.switches.insert(HIDDEN_FIRST.to_string(), 1);
        assert_eq!(
            check(&spec, &c).unwrap_err().kind,
            RejectKind::Shape,
            "GEMM turns"
        );
        c.switches.insert(MUFU_TURNS.to_string(), 1);
        assert!(check(&spec, &c).is_ok());
        let d128 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        assert_eq!(
            check(&d128, &c).unwrap_err().kind,
            RejectKind::Shape,
            "the half path's"
        );
    }

    #[test]
    fn persistent_pairs_without_turns_are_offered_to_masked_specs_alone() {
        // Two persistent consumers without pingpong (and their lazy twins) over 64 and
        // 128 keys where shared memory holds them; never unmasked.
        let pairs = |hd, mask| {
            let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, mask);
            let mut found: Vec<(u32, u32)> = candidates(&spec)
                .into_iter()
                .filter(|c| persistent(c) && consumers(c) == 2 && c.switch(PINGPONG, 1) == 0)
                .filter(|c| check(&spec, c).is_ok())
                .map(|c| (c.block_n, c.switch(LAZY_RESCALE, 0)))
                .collect();
            found.sort();
            found
        };
        let both = vec![(64, 0), (64, 1), (128, 0), (128, 1)];
        for mask in [MaskKind::Causal, MaskKind::Local] {
            assert_eq!(pairs(64, mask), both, "d64 {mask:?}");
            assert_eq!(pairs(128, mask), both, "d128 {mask:?}");
            // 128 keys of K and V in two stages do not fit beside d256's Q and O.
            assert_eq!(pairs(256, mask), vec![(64, 0), (64, 1)], "d256 {mask:?}");
        }
        for hd in [64, 128, 256] {
            assert!(pairs(hd, MaskKind::None).is_empty(), "d{hd} unmasked");
        }
    }

    #[test]
    fn the_256_key_tile_without_overlap_is_d64s_alone() {
        // cuDNN's loop over 256 keys, enumerated once per spec (turns at the MUFU on every
        // mask), kept where S of 256 columns and its K/V stages fit: d64 only.
        let wide = |hd, mask| {
            let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, mask);
            let found: Vec<_> = candidates(&spec)
                .into_iter()
                .filter(|c| c.block_n == 256)
                .collect();
            assert_eq!(found.len(), 1, "d{hd} {mask:?}: {found:?}");
            let c = &found[0];
            assert!(persistent(c) && c.switch(OVERLAP, 1) == 0 && c.switch(MUFU_TURNS, 0) == 1);
            check(&spec, c).map(|fp| fp.est_registers)
        };
        for mask in [MaskKind::None, MaskKind::Causal, MaskKind::Local] {
            // S 128 + O 32 + P packed as S dies (32) + 24: within the consumers' 224.
            assert_eq!(wide(64, mask), Ok(216));
            assert_eq!(wide(128, mask).unwrap_err().kind, RejectKind::SharedMemory);
            assert_eq!(wide(256, mask).unwrap_err().kind, RejectKind::SharedMemory);
        }
        // With overlap, P(j - 1) lives beside S(j): the same tile would need 248.
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
        let mut overlapped = ws_config(2, 256, 1, 1, 0);
        overlapped.switches.insert(PERSISTENT.to_string(), 1);
        assert_eq!(
            check(&spec, &overlapped).unwrap_err().kind,
            RejectKind::Registers
        );
    }

    #[test]
    fn mufu_turns_take_pingpong_tiles_of_masked_specs() {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
        let with = |mut c: TileConfig, switch: &str| {
            c.switches.insert(switch.to_string(), 1);
            c
        };
        let mut persistent_tile = ws_config(2, 128, 1, 1, 0);
        persistent_tile.switches.insert(PERSISTENT.to_string(), 1);
        let value = |spec: &KernelSpec, c: &TileConfig, key: &str| {
            let fp = check(spec, c).unwrap();
            let values = render_values(spec, c, &fp);
            values.iter().find(|(k, _)| *k == key).unwrap().1.clone()
        };
        // Pingpong's, and one word of shared memory more.
        let mufu = with(persistent_tile.clone(), MUFU_TURNS);
        assert_eq!(value(&spec, &mufu, "mufu_turns"), json!(true));
        assert_eq!(value(&spec, &persistent_tile, "mufu_turns"), json!(false));
        assert_eq!(
            smem_bytes(&spec, &mufu),
            smem_bytes(&spec, &persistent_tile) + 8
        );
        let free_running = with(ws_config(2, 128, 0, 1, 0), MUFU_TURNS);
        assert_eq!(
            check(&spec, &free_running).unwrap_err().kind,
            RejectKind::Shape
        );
        let stage1 = with(config(2, 128, 2), MUFU_TURNS);
        assert_eq!(check(&spec, &stage1).unwrap_err().kind, RejectKind::Shape);
        // Enumerated as a twin of every pingpong tile of a masked spec, of none unmasked
        // (the 256-key tile without overlap comes with its turns alone, on every mask:
        // the_256_key_tile_without_overlap_is_d64s_alone).
        let turns = |spec: &KernelSpec| {
            let all = candidates(spec);
            let pingpong = all
                .iter()
                .filter(|c| c.switch(PINGPONG, 0) == 1 && c.block_n != 256);
            let (with, without): (Vec<_>, Vec<_>) =
                pingpong.partition(|c| c.switch(MUFU_TURNS, 0) == 1);
            for c in &with {
                let mut twin = (*c).clone();
                twin.switches.remove(MUFU_TURNS);
                assert!(without.contains(&&twin), "{c:?} has no twin");
            }
            (with.len(), without.len())
        };
        let (with_turns, pingpong) = turns(&spec);
        assert!(pingpong > 0);
        assert_eq!(with_turns, pingpong);
        let local = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Local);
        assert_eq!(turns(&local).0, turns(&local).1);
        let unmasked = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
        assert_eq!(turns(&unmasked).0, 0);
    }

    #[test]
    fn defaults_take_the_warp_specialized_schedule_where_it_led() {
        let ws = |hd, mask, paged| {
            let mut spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, mask);
            spec.features.paged_kv = paged;
            let c = default_config(&spec);
            assert!(check(&spec, &c).is_ok(), "{spec}: {c}");
            (warp_specialized(&c), c.block_m, c.block_n)
        };
        assert_eq!(ws(64, MaskKind::Causal, false), (true, 192, 128));
        assert_eq!(ws(128, MaskKind::None, false), (true, 128, 128));
        assert_eq!(ws(256, MaskKind::Causal, false), (true, 128, 80));
        assert_eq!(ws(128, MaskKind::Local, false), (true, 64, 64));
        let local = default_config(&KernelSpec::new(
            Arch::Sm90,
            Dtype::Bf16,
            128,
            MaskKind::Local,
        ));
        assert!(
            persistent(&local),
            "d128 windows: a persistent single consumer, two blocks per SM"
        );
        // Pages stay with the stage-1 schedule, whose every warp shares the lookups.
        assert!(!ws(128, MaskKind::Causal, true).0);
        assert!(!ws(64, MaskKind::Local, false).0);
    }

    #[test]
    fn exp2_emulation_twins_the_fixed_offset_tiles_of_d64_alone() {
        for hd in [64, 128] {
            for softcap in [false, true] {
                let mut spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, MaskKind::Causal);
                spec.features.softcap = softcap;
                let all = candidates(&spec);
                let emulated: Vec<_> = all.iter().filter(|c| c.switch(EXP2_EMU, 0) != 0).collect();
                let fixed = all.iter().filter(|c| c.switch(CAP_OFFSET, 0) == 1).count();
                if hd == 64 && softcap {
                    // One k = 4 twin per fixed-offset tile, of which every one has a base.
                    assert!(fixed > 0);
                    assert_eq!(emulated.len() * 2, fixed);
                    for c in &emulated {
                        assert_eq!((c.switch(EXP2_EMU, 0), c.switch(CAP_OFFSET, 0)), (4, 1));
                        let mut base = (*c).clone();
                        base.switches.remove(EXP2_EMU);
                        assert!(all.contains(&base), "{c:?} has no base");
                        assert!(check(&spec, c).is_ok(), "{c:?}");
                    }
                } else {
                    assert!(emulated.is_empty(), "{spec}");
                }
            }
        }
    }

    #[test]
    fn soft_capped_bf16_defaults_fix_the_offset_on_warp_specialized_tiles_alone_and_emulate_at_d64()
    {
        for hd in [64, 128, 192, 256] {
            for mask in [MaskKind::None, MaskKind::Causal, MaskKind::Local] {
                for dtype in [Dtype::Bf16, Dtype::Fp16] {
                    for (sinks, paged) in [(false, false), (true, false), (false, true)] {
                        let mut spec = KernelSpec::new(Arch::Sm90, dtype, hd, mask);
                        spec.features.sinks = sinks;
                        spec.features.paged_kv = paged;
                        let plain = default_config(&spec);
                        spec.features.softcap = true;
                        let capped = default_config(&spec);
                        assert!(check(&spec, &capped).is_ok(), "{spec}: {capped}");
                        let fixed = capped.switch(CAP_OFFSET, 0) == 1;
                        let expect = dtype == Dtype::Bf16 && warp_specialized(&capped);
                        assert_eq!(fixed, expect, "{spec}: {capped}");
                        // At d64 with exp2 emulation on every 4th fragment.
                        let emulated = if fixed && hd <= 64 { 4 } else { 0 };
                        assert_eq!(capped.switch(EXP2_EMU, 0), emulated, "{spec}: {capped}");
                        // The switches come on top of the tile the spec would take anyway.
                        let mut base = capped.clone();
                        base.switches.remove(CAP_OFFSET);
                        base.switches.remove(EXP2_EMU);
                        if check(&spec, &plain).is_ok() {
                            assert_eq!(base, plain, "{spec}");
                        }
                    }
                }
            }
        }
    }

    /// DeepSeek's prefill head dims: Q and K at 192, V and O at 128. d128's tile by
    /// default; the space prices Q and K at 192 columns and V and O at 128. Served by the
    /// Hopper template since its H200 check (bench/NOTES.md).
    #[test]
    fn d192v128_takes_d128s_tile() {
        let spec = |dv| KernelSpec {
            head_dim_v: dv,
            ..KernelSpec::new(Arch::Sm90, Dtype::Bf16, 192, MaskKind::Causal)
        };
        let (narrow, wide) = (spec(128), spec(192));
        assert!(super::super::Template::Hopper.supports(&narrow));
        assert_eq!(super::super::held_back_template(&narrow), None);
        assert_eq!(
            super::super::serving_template(&narrow),
            super::super::Template::Hopper
        );
        assert!(!super::super::Template::Portable.supports(&narrow));
        let default = default_config(&narrow);
        assert_eq!(
            (
                default.block_m,
                default.block_n,
                default.switch(PINGPONG, 0)
            ),
            (128, 128, 1)
        );
        // Every candidate both build with the same buffers (V at 128 leaves persistent
        // tiles room for a second Q buffer or O slots of their own): V's and O's 64
        // columns fewer per row cost less shared memory (each K/V stage's V, and O where
        // it has its own slot) and 32 fewer accumulator registers.
        let mut both = 0;
        for c in candidates(&narrow) {
            let buffers = |s: &KernelSpec| (o_slots(s, &c), q_buffers(s, &c));
            if buffers(&narrow) != buffers(&wide) {
                continue;
            }
            if let (Ok(a), Ok(b)) = (check(&narrow, &c), check(&wide, &c)) {
                // At least each stage's V: stages x block_n rows x 64 columns x 2 bytes.
                assert!(
                    b.smem_bytes >= a.smem_bytes + c.stages * c.block_n * 64 * 2,
                    "{c:?}: {} against {}",
                    a.smem_bytes,
                    b.smem_bytes
                );
                assert_eq!(a.est_registers + 32, b.est_registers, "{c:?}");
                both += 1;
            }
        }
        assert!(both > 15, "{both}");
        // 128-key tiles fit only with V at 128.
        assert!(check(&wide, &default).is_err());
    }

    #[test]
    fn d96_runs_in_d128s_tiles_and_is_not_yet_served() {
        let d96 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 96, MaskKind::None);
        let d128 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
        assert!(super::super::Template::Hopper.supports(&d96));
        assert_eq!(
            super::super::serving_template(&d96),
            super::super::Template::Portable
        );
        // ... and `explain` names the template held back; nothing is held back elsewhere.
        assert_eq!(
            super::super::held_back_template(&d96),
            Some(super::super::Template::Hopper)
        );
        assert_eq!(super::super::held_back_template(&d128), None);
        let sm80 = KernelSpec::new(Arch::Sm80, Dtype::Bf16, 96, MaskKind::None);
        assert_eq!(super::super::held_back_template(&sm80), None);
        // Shared memory, registers and the split workspace are d128's (padded columns),
        // for every candidate both build.
        let mut both = 0;
        for c in candidates(&d96) {
            match (check(&d96, &c), check(&d128, &c)) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(
                        (a.smem_bytes, a.est_registers, a.split_head_dim_v),
                        (b.smem_bytes, b.est_registers, b.split_head_dim_v),
                        "{c:?}"
                    );
                    both += 1;
                }
                (a, b) => assert_eq!(a.is_ok(), b.is_ok(), "{c:?}"),
            }
        }
        assert!(both > 40, "{both}");
        let persistent = {
            let mut c = ws_config(2, 128, 1, 1, 0);
            c.switches.insert(PERSISTENT.to_string(), 1);
            c
        };
        assert_eq!(check(&d96, &persistent).unwrap().split_head_dim_v, 128);
        // The PV GEMM's N is the padded 128 (an MN-major operand ends on a swizzle atom),
        // QK's N the key block.
        let c = ws_config(2, 64, 1, 1, 0);
        let fp = check(&d96, &c).unwrap();
        let values = render_values(&d96, &c, &fp);
        let shapes = &values.iter().find(|(k, _)| *k == "wgmma").unwrap().1;
        let ns: Vec<_> = shapes
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["n"].clone())
            .collect();
        assert_eq!(ns, vec![json!(64), json!(128)]);
        assert_eq!(
            values.iter().find(|(k, _)| *k == "head_dim").unwrap().1,
            json!(96)
        );
        // Soft-capped bf16 specs take the fixed-offset tile as d128's do.
        let capped = KernelSpec {
            features: "softcap".parse().unwrap(),
            ..d96
        };
        assert_eq!(default_config(&capped).switch(CAP_OFFSET, 0), 1);
        // Head dims that are not whole k-steps are refused.
        let d72 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 72, MaskKind::None);
        assert_eq!(check(&d72, &c).unwrap_err().kind, RejectKind::Shape);
    }

    #[test]
    fn the_entry_point_gets_each_wgmma_shape_once() {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Fp16, 128, MaskKind::None);
        let c = config(2, 128, 1);
        let fp = check(&spec, &c).unwrap();
        let values = render_values(&spec, &c, &fp);
        let shapes = &values.iter().find(|(k, _)| *k == "wgmma").unwrap().1;
        assert_eq!(shapes.as_array().unwrap().len(), 1);
        assert_eq!(shapes[0]["regs"], json!(64));
        assert_eq!(shapes[0]["ab"], json!("f16"));
        assert!(shapes[0]["d"].as_str().unwrap().ends_with("%63"));
        let c = config(2, 64, 1);
        let fp = check(&spec, &c).unwrap();
        let values = render_values(&spec, &c, &fp);
        let shapes = &values.iter().find(|(k, _)| *k == "wgmma").unwrap().1;
        assert_eq!(shapes.as_array().unwrap().len(), 2);
    }

    #[test]
    fn masked_warp_specialized_kernels_get_the_half_block_shape() {
        let ns = |spec: &KernelSpec, c: &TileConfig| -> Vec<u64> {
            let fp = check(spec, c).unwrap();
            let values = render_values(spec, c, &fp);
            let shapes = &values.iter().find(|(k, _)| *k == "wgmma").unwrap().1;
            shapes
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["n"].as_u64().unwrap())
                .collect()
        };
        let causal = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        assert_eq!(ns(&causal, &ws_config(2, 128, 1, 1, 0)), vec![64, 128]);
        // The stage-1 schedule has no half path.
        assert_eq!(ns(&causal, &config(2, 128, 1)), vec![128]);
        // d64: the half (64) is the PV's N already.
        let causal64 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
        assert_eq!(ns(&causal64, &ws_config(2, 128, 1, 1, 0)), vec![64, 128]);
        let unmasked = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
        assert_eq!(ns(&unmasked, &ws_config(2, 176, 1, 1, 0)), vec![128, 176]);
        let local = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Local);
        assert_eq!(ns(&local, &ws_config(2, 80, 1, 1, 0)), vec![40, 80, 128]);
        // Over head dim 128 the first block keeps one path.
        let causal256 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::Causal);
        assert_eq!(ns(&causal256, &ws_config(2, 80, 1, 1, 0)), vec![80, 256]);
    }

    #[test]
    fn the_half_first_block_is_rendered_where_it_pays() {
        let half_first = |spec: &KernelSpec, c: &TileConfig| -> bool {
            let fp = check(spec, c).unwrap();
            let values = render_values(spec, c, &fp);
            values
                .iter()
                .find(|(k, _)| *k == "half_first")
                .unwrap()
                .1
                .as_bool()
                .unwrap()
        };
        let three = ws_config(3, 128, 1, 1, 0);
        let mut causal64 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
        assert!(half_first(&causal64, &three));
        assert!(
            !half_first(&causal64, &config(2, 128, 1)),
            "stage 1 has no half path"
        );
        causal64.features.softcap = true;
        assert!(
            !half_first(&causal64, &three),
            "softcap at d64 keeps one path"
        );
        let mut causal128 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        causal128.features.softcap = true;
        assert!(half_first(&causal128, &ws_config(2, 128, 1, 1, 0)));
        let unmasked = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
        assert!(!half_first(&unmasked, &three));
    }
}
