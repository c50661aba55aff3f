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

/// Dtypes the template builds but the shipped cache does not serve until `fa4-gen verify`
/// of every default has passed on a GPU (`build-cache --held-back` builds them for that
/// check). None now: e4m3's defaults passed on an H100 (126/126, and the tune's 208
/// candidates), `bench/results/2026-12-06-h100-211c431a-fp8-*`.
pub(super) const HELD_BACK_DTYPES: &[Dtype] = &[];

/// Masks whose FP8 (e4m3) specs the template builds but the shipped cache does not serve
/// until `fa4-gen verify` has passed on a GPU, as for a held-back dtype. None now: e4m3
/// local windows and sinks passed on an H100 (every default, 378/378 checks; every tile,
/// 14654 of 14658, the four misses lazy tiles, none a default, O at 3.0-3.3e-2 on one
/// 12-row case), `bench/results/2026-12-07-h100-952a3a77-fp8-verify-*`.
pub(super) const HELD_BACK_FP8_MASKS: &[MaskKind] = &[];

/// Likewise for FP8 specs with sinks (the sink's term joins the row sum with P's shift,
/// fragments.cuh's finalize). Lifted with the masks above, on the same verify.
pub(super) const HELD_BACK_FP8_SINKS: bool = false;

/// Likewise for soft-capped FP8 specs: the descales scale the scores before the tanh
/// (kernel_ws.cuh), the exp2 keeps the cap's scale. Lifted: every default passed `verify`
/// on an H100 (ce3b699e, with the rest of e4m3's defaults, 1512/1512; through Python 3 of 3).
pub(super) const HELD_BACK_FP8_SOFTCAP: bool = false;

/// FP8's QK/V head dims: d64, d128, d256 and DeepSeek's 192/128 (V, O and P as d128's, Q
/// and K over six k32 steps).
const FP8_HEAD_DIMS: &[(u32, u32)] = &[(64, 64), (128, 128), (256, 256), (192, 128)];

/// Likewise for FP8 at these QK/V head dims. None now: 192/128's defaults passed `verify`
/// on an H100 (ce3b699e, 1512/1512 with the rest; through Python 3 of 3).
pub(super) const HELD_BACK_FP8_HEAD_DIMS: &[(u32, u32)] = &[];

/// Columns a head dim takes in shared memory and as the PV GEMM's N: whole 64-column
/// blocks (traits.cuh's kHeadDimPad). An MN-major wgmma operand (V) cannot end inside a
/// swizzle atom; the QK GEMM steps over the real columns only.
fn padded(head_dim: u32) -> u32 {
    head_dim.div_ceil(64) * 64
}

/// A row of `cols` elements of `dtype` in shared memory, as 16-bit units in whole 64-unit
/// (128-byte) blocks: traits.cuh's kHeadDimPad and kVColsPad (FP8 moves as pairs).
fn padded_units(cols: u32, dtype: Dtype) -> u32 {
    padded(cols * dtype.size() / 2)
}

/// What the template offers in FP8 (e4m3): [`FP8_HEAD_DIMS`], any mask, sinks, softcap
/// and paged K/V.
pub(super) fn supports_dtype(spec: &KernelSpec) -> bool {
    !spec.dtype.is_fp8() || FP8_HEAD_DIMS.contains(&(spec.head_dim, spec.head_dim_v))
}

/// Whether the template builds `spec` but the shipped cache waits for `fa4-gen verify` on
/// a GPU before serving it: a held-back dtype, or an FP8 spec of a held-back mask, head
/// dim or feature.
pub(super) fn awaits_verify(spec: &KernelSpec) -> bool {
    HELD_BACK_DTYPES.contains(&spec.dtype)
        || (spec.dtype.is_fp8()
            && (HELD_BACK_FP8_MASKS.contains(&spec.mask)
                || HELD_BACK_FP8_HEAD_DIMS.contains(&(spec.head_dim, spec.head_dim_v))
                || (HELD_BACK_FP8_SINKS && spec.features.sinks)
                || (HELD_BACK_FP8_SOFTCAP && spec.features.softcap)))
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
    if spec.dtype.is_fp8() {
        return fp8_candidates(spec);
    }
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
        // FA4's sm90 tile for d64 with its default pack-GQA: on gpt-oss-20b's serving
        // mixes (64:8, causal) FA4 ran 1.05 to 1.14x our best tile of any schedule, and
        // our pack-GQA tiles were two consumers only (at best 0.99x the 192-row one).
        (3, 128, 1, 1, 1),
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
    // 3 to 8% on long ones and unmasked; the tuner decides per bucket.
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
    // 0.88 to 1.02x.
    let mut c = ws_config(3, 128, 1, 1, 0);
    c.stages = 3;
    out.push(c);
    // Lazy rescaling on every tile with pingpong or a persistent grid, and overlap.
    out.extend(twins(&out, LAZY_RESCALE, 1, |c| {
        (c.switch(PINGPONG, 0) == 1 || persistent(c)) && c.switch(OVERLAP, 0) == 1
    }));
    // Turns at the MUFU ran 1.02 to 1.05x their twins on causal tiles and 0.96 to 0.99x
    // on unmasked ones, so only masked specs enumerate them.
    let masked = spec.mask != MaskKind::None;
    out.extend(twins(&out, MUFU_TURNS, 1, |c| {
        masked && c.switch(PINGPONG, 0) == 1
    }));
    // The first consumer's hidden first block skipped but for its MUFU turn, on the masked
    // tiles with turns at the MUFU that have no half first block (head dims past 128):
    // 1.5 to 3% over their twins on d256 causal from 1024 keys, level at 512.
    out.extend(twins(&out, HIDDEN_FIRST, 1, |c| {
        masked && spec.head_dim_v > 128 && c.switch(MUFU_TURNS, 0) == 1
    }));
    // cuDNN's loop over 256 keys: two persistent consumers without intra-warpgroup
    // overlap (P packed as S dies, so d64's S of 256 columns fits), turns at the MUFU on
    // every mask (without them 0.89x). Half the key blocks of the 128-key tile, so half its
    // per-block cost: 1.04 to 1.08x it at 512 to 2048 unmasked keys, level causal.
    // Where shared memory holds 256 keys (d64).
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
    // 1.0x its twin, with the max path's softcap at best 1.02x the cell's best.
    out.extend(twins(&out, EXP2_EMU, 4, |c| {
        spec.head_dim <= 64 && c.switch(CAP_OFFSET, 0) == 1
    }));
    // Pairs of blocks sharing their K/V loads (unmasked, one block per tile, strided K/V),
    // on the pingpong tiles with overlap: half the K/V reads from L2 lets the power cap
    // hold a 2 to 4% higher clock, at the cost of the pair's blocks waiting for each
    // other's slots (d128 16k sustained 1.038x, clock +2.4%). Not on the tiles without pingpong or overlap, nor
    // with pack-GQA, which led nowhere unmasked.
    out.extend(twins(&out, CLUSTER, 2, |c| {
        pairs_share_loads(spec, c)
            && c.switch(PINGPONG, 0) == 1
            && c.switch(OVERLAP, 0) == 1
            && c.switch(PACK_GQA, 0) == 0
    }));
    out
}

/// FP8's tiles: warp-specialised with pingpong and overlap, as FA3's FP8 forward (three
/// consumers over 160 keys at d64, two over 224 at d128 and over 128 at d256) and their
/// neighbours in whole k32 steps of keys; two-consumer tiles also persistent; lazy
/// rescaling and, masked, turns at the MUFU as twins.
fn fp8_candidates(spec: &KernelSpec) -> Vec<TileConfig> {
    let mut out = Vec::new();
    // (d256: 96 keys, and 128 with O staged in the V ring, `o_in_v_ring`, beside 64)
    let wide = if spec.head_dim > 128 {
        &[96][..]
    } else {
        &[][..]
    };
    for &block_n in [64, 128, 160, 192, 224].iter().chain(wide) {
        out.push(ws_config(2, block_n, 1, 1, 0));
    }
    for block_n in [128, 160] {
        out.push(ws_config(3, block_n, 1, 1, 0));
    }
    if spec.head_dim > 128 {
        // d256 over 128 keys holds S beside O only without the intra-warpgroup overlap
        // (P(j - 1) would live beside S(j))
        out.push(ws_config(2, 128, 1, 0, 0));
    }
    for block_n in [64, 128, 160, 192, 224] {
        let mut c = ws_config(2, block_n, 1, 1, 0);
        c.switches.insert(PERSISTENT.to_string(), 1);
        out.push(c);
    }
    out.extend(twins(&out, LAZY_RESCALE, 1, |_| true));
    let masked = spec.mask != MaskKind::None;
    out.extend(twins(&out, MUFU_TURNS, 1, |_| masked));
    // With the tensor cores twice as fast, d128's exponentials take about as long as its
    // GEMMs (as d64's do in bf16): every 4th fragment's exp2 on the FMA pipes, as twins
    // of the tiles with one block per tile, up to d128.
    out.extend(twins(&out, EXP2_EMU, 4, |c| {
        spec.head_dim <= 128 && !persistent(c)
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
    } else if smem_bytes_with(spec, c, consumers(c), 1, false) <= limit {
        consumers(c)
    } else if consumers(c) == 2
        && spec.head_dim_v > 128
        && smem_bytes_with(spec, c, 1, 1, false) <= limit
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
    if o > 0 && smem_bytes_with(spec, c, o, 2, false) <= spec.arch.max_smem_per_block() {
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
/// path.
fn half_first_block(spec: &KernelSpec, c: &TileConfig) -> bool {
    // (FP8's key blocks are whole: a k32 step spans four fragments, and the half block's
    // paths are not written for it.)
    warp_specialized(c)
        && !spec.dtype.is_fp8()
        && spec.mask != MaskKind::None
        && spec.head_dim_v <= 128
        && !(spec.features.softcap && spec.head_dim <= 64)
}

/// The warp-specialised producer loads strided K/V (and Q) by TMA maps over the tensors.
/// Paged K/V goes by boxes of maps over the page pools instead (`tma_rows` still set:
/// the launcher encodes them), Q by cp.async.
fn tma(spec: &KernelSpec, c: &TileConfig) -> bool {
    warp_specialized(c) && !spec.features.paged_kv
}

pub(super) fn smem_bytes(spec: &KernelSpec, c: &TileConfig) -> u32 {
    smem_bytes_with(
        spec,
        c,
        o_slots(spec, c),
        q_buffers(spec, c),
        o_in_v_ring(spec, c),
    )
}

/// FP8 on a grid of one block per tile: O (16-bit, twice Q's bytes) is staged in the V
/// ring where Q slots sized for it would not fit, consumer c in slot c. That ring holds
/// only what TMA landed, all of it transposed before the last "full V" each consumer
/// waits on, and the block's one work tile loads nothing after it (d256's 128-key tiles).
fn o_in_v_ring(spec: &KernelSpec, c: &TileConfig) -> bool {
    let v = padded_units(spec.head_dim_v, spec.dtype);
    spec.dtype.is_fp8()
        && warp_specialized(c)
        && !persistent(c)
        && c.stages >= consumers(c)
        && c.block_n * v >= 64 * padded(spec.head_dim_v)
        && smem_bytes_with(spec, c, 0, 1, false) > spec.arch.max_smem_per_block()
}

/// traits.cuh's kSmemBytes: Q slots (which stage O too unless it has slots of its
/// own), O's slots, the K/V stages, and the block scalars or the mbarriers.
/// In 16-bit units: Q and K rows of `d` units, V's of `v`, O's of `dv` (O is 16-bit);
/// FP8's V transposed (Vt) beside them, `dv` rows of the tile's keys.
/// With `o_in_v`, O is staged in the V ring (`o_in_v_ring`), not in the Q slots.
fn smem_bytes_with(
    spec: &KernelSpec,
    c: &TileConfig,
    o_slots: u32,
    q_buffers: u32,
    o_in_v: bool,
) -> u32 {
    let d = padded_units(spec.head_dim, spec.dtype);
    let v = padded_units(spec.head_dim_v, spec.dtype);
    let dv = padded(spec.head_dim_v);
    let q_slot_cols = if o_slots > 0 || o_in_v { d } else { d.max(dv) };
    let o_region = o_slots * 64 * dv;
    let vt = if spec.dtype.is_fp8() {
        dv * padded(c.block_n / 2)
    } else {
        0
    };
    let kv_stage = c.block_n * (d + v) + vt;
    // the K/V ring's mbarriers (full and empty, K and V, per stage), each consumer's Q
    // slot's (full and empty), and a shared O slot's (free)
    let extra = if warp_specialized(c) {
        let shared_o = o_slots == 1 && consumers(c) > 1;
        // (+ the word that ties a turn at the MUFU to the exponentials)
        let mufu_turn = if c.switch(MUFU_TURNS, 0) == 1 { 8 } else { 0 };
        // (+ the block's share of a split tail)
        let split = if splits_tail(spec, c) { 56 } else { 0 };
        // (+ FP8's loaded-V barriers)
        let loaded_v = if spec.dtype.is_fp8() { 8 * c.stages } else { 0 };
        // (+ the producer's page rows: each key's page and row within it)
        let page_rows = if spec.features.paged_kv {
            8 * c.block_n
        } else {
            0
        };
        32 * c.stages
            + 16 * (c.block_m / 64) * q_buffers
            + if shared_o { 8 } else { 0 }
            + mufu_turn
            + split
            + loaded_v
            + page_rows
    } else {
        16
    };
    (c.block_m * q_slot_cols * q_buffers + o_region + c.stages * kv_stage) * 2 + extra
}

/// Registers per thread: the f32 accumulators of O (head_dim_v / 2) and S (block_n / 2),
/// P packed to 16 bits (block_n / 4), and an allowance for addresses and softmax state.
/// The warp-specialised consumers keep only their own addresses (the producer holds the
/// loads'): a smaller allowance.
pub(super) fn est_registers(spec: &KernelSpec, c: &TileConfig) -> u32 {
    let allowance = if warp_specialized(c) { 24 } else { 64 };
    // P (16 bits) beside S: all of it with intra-warpgroup overlap (P(j - 1) lives while S(j)
    // fills); without it P is packed as S dies, so an eighth of S's columns at most.
    // (FP8's P packs four e4m3 a register: an eighth of S's columns too.)
    let p_regs = if spec.dtype.is_fp8() || (warp_specialized(c) && c.switch(OVERLAP, 0) == 0) {
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
    if !supports_dtype(spec) {
        return reject(
            RejectKind::Shape,
            format!(
                "{} is offered at head dims 64, 128, 256 and 192/128, any mask, with or without sinks, softcap or pages",
                spec.dtype
            ),
        );
    }
    if spec.dtype.is_fp8()
        // (by TMA, over the tensors or over the page pools: warp-specialised either way)
        && (!ws
            || c.block_n % 32 != 0
            || c.stages < 2
            || c.switch(PACK_GQA, 0) == 1
            || cluster_m(c) > 1
            || c.switch(HIDDEN_FIRST, 0) == 1)
    {
        return reject(
            RejectKind::Shape,
            "FP8 tiles: warp-specialised, K/V by TMA or from pages (the producer transposes V), keys in whole k32 steps, 2 or 3 stages, no pack-GQA, clusters or hidden first block".into(),
        );
    }
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
        // Paged: maps over the page pool, for the whole key tiles inside a sequence.
        tma_rows: if warp_specialized(c) { c.block_n } else { 0 },
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
        // Persistent warp-specialised kernels (tile_scheduler.cuh): a kernel of one block
        // per tile keeps the dense grid, whose launch order (every sequence's m-block i
        // before its i - 1) is longest-first across the sequences; numbered sequence by
        // sequence it ran 0.92 to 0.98x on the ragged mixes (H100, 29417995).
        varlen_tiles: warp_specialized(c) && persistent(c) && cluster_m(c) <= 1,
    })
}

/// The heuristic default: per head dim the config with the best geomean over the FA3
/// grid (causal and not, seqlen 512 to 16k) among every config of the template. Strided
/// K/V: the warp-specialised schedule with pingpong and overlap, three consumers over 128
/// keys at d64 (1.14x the stage-1 pick), two over 128 at d128 (1.37x), two over 80 at
/// d256 (1.40x) and, untimed, d192.
/// Sliding windows see a few key blocks per query block: one warpgroup over 64 keys led
/// on window (128, 0) at d64; at d128 one consumer over 64 keys, persistent with two
/// blocks per SM, 1.06x the non-persistent one over windows of 128 and 1024 keys
/// (166 to 173 against 154 to 159 TFLOP/s at window 128). Paged K/V keep the stage-1 schedule
/// until a warp-specialised default passes `verify` on a GPU: since the producer looks each
/// key's page up once a tile, the tuned paged picks (mostly three consumers over 64 keys)
/// run 1.63 to 1.87x it (H100, 166a4c91-dirty). Then smaller
/// tiles, for feature sets that need more registers (ptxas has the last word: a test
/// compiles every default without spills). Soft-capped bf16 specs take the chosen tile's
/// fixed-offset twin (CAP_OFFSET) where check() allows it (warp-specialised tiles): over
/// every bf16 soft-capped causal and local key of the H200 tune the twins ran 1.055 to
/// 1.10x their bases (geomean per spec, about 2500 pairs).
pub(super) fn default_config(spec: &KernelSpec) -> TileConfig {
    let tile = default_tile(spec);
    let mut fixed = tile.clone();
    fixed.switches.insert(CAP_OFFSET.to_string(), 1);
    if check(spec, &fixed).is_err() {
        return tile;
    }
    // At d64 the fixed-offset default also emulates every 4th fragment's exp2 (as the
    // space's twins): 1.015 to 1.036x the same tile without it, unmasked and causal at
    // 4k and 16k.
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
    if spec.dtype.is_fp8() {
        // FA3's FP8 tiles, then narrower ones where those do not fit. d256: 96 keys (128
        // hold S beside O only without the intra-warpgroup overlap: a candidate, untimed),
        // whose QK GEMM's N reads less of shared memory per flop than 64's.
        let paged_softcap = spec.features.paged_kv && spec.features.softcap;
        let tiles: &[(u32, u32)] = match (spec.head_dim, spec.head_dim_v) {
            // Soft-capped over pages three consumers spill (28 to 32 bytes at 128
            // registers) beside the page boxes' producer; two do not.
            (0..=64, _) if paged_softcap => &[(2, 128)],
            (0..=64, _) => &[(3, 160), (3, 128), (2, 128)],
            (65..=128, _) => &[(2, 224), (2, 192), (2, 128)],
            // DeepSeek's 192/128: V and O as d128's, the wider Q and K beside them
            (_, ..=128) => &[(2, 160), (2, 128), (2, 96)],
            _ => &[(2, 96), (2, 64)],
        };
        return tiles
            .iter()
            .map(|&(n, bn)| ws_config(n, bn, 1, 1, 0))
            .find(|c| check(spec, c).is_ok())
            .unwrap_or_else(|| ws_config(2, 64, 1, 1, 0));
    }
    let local = spec.mask == MaskKind::Local;
    let paged = spec.features.paged_kv;
    if paged && !local && matches!((spec.head_dim, spec.head_dim_v), (64, 64) | (128, 128)) {
        // Over pages: three consumers over 64 keys, the tuner's pick on most paged keys,
        // ran 1.66x (d128) and 1.78x (d64) the stage-1 tile at 4,096 causal keys (H100).
        let c = ws_config(3, 64, 1, 1, 0);
        if check(spec, &c).is_ok() {
            return c;
        }
    }
    // d96, 192/128 and d256 over pages take their packed tile: the tuner's winners over
    // pages (causal, 4,096 and 16,384 keys) ran 2.02 to 2.53x the stage-1 tile, and are
    // two consumers over 80 to 176 keys (H100). Windows over pages, and 192/192 (no GPU
    // has verified its tile over pages), keep stage 1.
    let ws_over_pages = !local
        && matches!(
            (spec.head_dim, spec.head_dim_v),
            (96, 96) | (192, 128) | (256, 256)
        );
    if !paged || ws_over_pages {
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
    // over 64 keys ran 1.10 to 1.18x the causal picks on window (128, 0).
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
    // yet explained).
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
        "fp8": dtype.is_fp8(),
        "ab": match dtype {
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "f16",
            Dtype::E4m3 => "e4m3",
        },
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
        ("fp8", json!(spec.dtype.is_fp8())),
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
        ("tma", json!(tma(spec, c))),
        ("tma_args", json!(fp.tma_rows > 0)),
        ("persistent", json!(fp.persistent_per_sm > 0)),
        ("o_slots", json!(o_slots(spec, c))),
        ("q_buffers", json!(q_buffers(spec, c))),
        ("o_in_v_ring", json!(o_in_v_ring(spec, c))),
        ("lazy_rescale", json!(c.switch(LAZY_RESCALE, 0) == 1)),
        ("exp2_emu_every", json!(c.switch(EXP2_EMU, 0))),
        ("cap_offset", json!(c.switch(CAP_OFFSET, 0) == 1)),
        ("half_first", json!(half_first)),
        ("hidden_first", json!(c.switch(HIDDEN_FIRST, 0) == 1)),
        ("mufu_turns", json!(c.switch(MUFU_TURNS, 0) == 1)),
        ("cluster_m", json!(cluster_m(c))),
        ("varlen_tiles", json!(fp.varlen_tiles)),
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
mod tests;
