//! Config space of the portable (mma.sync) template. The arithmetic mirrors
//! `templates/include/fa4/portable/traits.cuh`; the rendered kernel asserts that its
//! shared-memory size equals the one computed here.

use std::collections::BTreeMap;

use fa4_spec::{Arch, Dtype, KernelSpec, MaskKind, TileConfig};
use serde_json::{json, Value};

use super::switches::*;
use super::{Footprint, RejectKind, Rejection};

pub(super) const HEAD_DIMS: &[(u32, u32)] =
    &[(64, 64), (96, 96), (128, 128), (192, 192), (256, 256)];

/// Switch: load Q's MMA fragments into registers once instead of re-reading shared
/// memory every key block (fewer shared-memory reads, more registers).
const Q_IN_REGS: &str = "qregs";

/// The register file of one SM on every arch the portable template compiles for, in
/// 32-bit registers.
const REGISTERS_PER_SM: u32 = 65_536;
/// Shared memory the runtime reserves per block on top of what the kernel asks for.
const SMEM_RESERVED_PER_BLOCK: u32 = 1024;

/// (block_m, warps): each warp owns 16 or 32 query rows.
const BLOCK_M_WARPS: &[(u32, u32)] = &[(64, 4), (128, 4), (128, 8)];
const BLOCK_N: &[u32] = &[32, 64, 128];
const STAGES: &[u32] = &[1, 2, 3];

/// The `q_in_regs` argument of [`config`] for a padded-row config without Q in registers.
const PAD_ROWS: u32 = 2;
/// The `q_in_regs` argument of [`config`] for a warp-skipping config without Q in registers.
const SKIPPING: u32 = 3;

/// Or-ed onto any `q_in_regs` argument of [`config`]: the config rescales lazily.
const LAZY_BIT: u32 = 8;

/// A config; `q_in_regs` 0 or 1 sets that switch, [`PAD_ROWS`] picks padded rows instead
/// and [`SKIPPING`] warp skipping; [`LAZY_BIT`] or-ed onto either adds lazy rescaling.
fn config(block_m: u32, warps: u32, block_n: u32, stages: u32, q_in_regs: u32) -> TileConfig {
    let lazy = q_in_regs & LAZY_BIT != 0;
    let q_in_regs = q_in_regs & !LAZY_BIT;
    let mut switches = BTreeMap::from([(Q_IN_REGS.to_string(), q_in_regs.min(1))]);
    if lazy {
        switches.insert(LAZY_RESCALE.to_string(), 1);
    }
    if q_in_regs == PAD_ROWS || q_in_regs == SKIPPING {
        switches.insert(Q_IN_REGS.to_string(), 0);
        let switch = if q_in_regs == PAD_ROWS {
            PADDED
        } else {
            WARP_SKIP
        };
        switches.insert(switch.to_string(), 1);
    }
    TileConfig {
        block_m,
        block_n,
        warps,
        stages,
        switches,
    }
}

pub(super) fn candidates(spec: &KernelSpec) -> Vec<TileConfig> {
    let mut out = Vec::new();
    for &(block_m, warps) in BLOCK_M_WARPS {
        for &block_n in BLOCK_N {
            for &stages in STAGES {
                for q_in_regs in [0, 1] {
                    out.push(config(block_m, warps, block_n, stages, q_in_regs));
                }
            }
        }
    }
    // Padded-row variants of the one-stage tiles, where rows could be swizzled: the
    // swizzle's XORs cost registers that some tiles (d256 128x128) miss more than they
    // gain from whole-line copies.
    if can_swizzle(spec) {
        for &(block_m, warps) in BLOCK_M_WARPS {
            for block_n in [64, 128] {
                let mut c = config(block_m, warps, block_n, 1, 0);
                c.switches.insert(PADDED.to_string(), 1);
                out.push(c);
            }
        }
    }
    // Pack-GQA variants of the tiles that measure best unpacked (64 or 128 keys, 1 or 2
    // stages): the switch changes which rows a block owns, not the tile's inner loop.
    for &(block_m, warps) in BLOCK_M_WARPS {
        for block_n in [64, 128] {
            for stages in [1, 2] {
                let mut c = config(block_m, warps, block_n, stages, 0);
                c.switches.insert(PACK_GQA.to_string(), 1);
                out.push(c);
            }
        }
    }
    // Lazy twins of the tiles the picks use (64 or fewer keys, and 128 keys over 8 warps:
    // the rescale's share of a block's instructions is largest where O is wide and the
    // block short), unpadded and padded.
    for &(block_m, warps) in BLOCK_M_WARPS {
        for block_n in [32, 64, 128] {
            if block_n == 128 && warps != 8 {
                continue;
            }
            for &stages in STAGES {
                for q_in_regs in [0, 1, PAD_ROWS] {
                    if q_in_regs == PAD_ROWS && (stages != 1 || block_n == 32 || !can_swizzle(spec))
                    {
                        continue;
                    }
                    out.push(config(
                        block_m,
                        warps,
                        block_n,
                        stages,
                        q_in_regs | LAZY_BIT,
                    ));
                }
            }
        }
    }
    // Warp-skipping variants of the tiles most causal and local picks use.
    if spec.mask != MaskKind::None {
        for &(block_m, warps) in BLOCK_M_WARPS {
            for block_n in [64, 128] {
                for stages in [1, 2] {
                    out.push(config(block_m, warps, block_n, stages, SKIPPING));
                }
            }
        }
    }
    // Occupancy twins of the plain tiles: every blocks-per-SM count whose register cap
    // binds (below 255) and leaves the accumulators and Q's fragments 32 registers of
    // room; ptxas's report prunes those that spill all the same.
    let plain: Vec<TileConfig> = out
        .iter()
        .filter(|c| c.switches.keys().all(|k| k == Q_IN_REGS))
        .cloned()
        .collect();
    for base in plain {
        for blocks in 2..=4 {
            let cap = register_cap(base.warps * 32, blocks);
            if cap < 255 && cap >= payload_registers(spec, &base) + 32 {
                let mut c = base.clone();
                c.switches.insert(MIN_BLOCKS.to_string(), blocks);
                if check(spec, &c).is_ok() {
                    out.push(c);
                }
            }
        }
    }
    // Staggered twins of the ringed tiles of two m-tiles a warp, without other switches
    // but Q in registers and lazy rescaling, for soft-capped specs: there the tanh makes
    // the softmax long enough to pay (1.01 to 1.04x the twin at d64); plain d64 tiles
    // lost up to 7% with it (`bench/NOTES.md`).
    push_twins(&mut out, spec, STAGGER, |c| {
        spec.features.softcap
            && c.stages >= 2
            && c.block_m / c.warps == 32
            && c.switches
                .keys()
                .all(|k| k == Q_IN_REGS || k == LAZY_RESCALE)
    });
    // The cap's fixed offset (bf16 soft-capped specs): twins of the plain, lazy and
    // staggered tiles.
    push_twins(&mut out, spec, CAP_OFFSET, |c| {
        c.switches
            .keys()
            .all(|k| k == Q_IN_REGS || k == LAZY_RESCALE || k == STAGGER)
    });
    // (Exp2 emulation, EXP2_EMU, is offered by check() and rendered but not enumerated:
    // on d64's soft-capped tiles it ran 0.99 to 1.00x its twin at k = 8, 0.96 to 1.00x
    // at 4 and 0.92 to 0.96x at 2; bench/NOTES.md.)
    out
}

/// Adds a twin with `switch` on of each config in `out` that `of` selects, where
/// check() passes.
fn push_twins(
    out: &mut Vec<TileConfig>,
    spec: &KernelSpec,
    switch: &str,
    of: impl Fn(&TileConfig) -> bool,
) {
    let twins = super::twins(out, switch, 1, of);
    out.extend(twins.into_iter().filter(|c| check(spec, c).is_ok()));
}

/// Shared-memory layout (traits.cuh, layout.cuh): rows of whole 128-byte lines (head
/// dims that are multiples of 64) are swizzled and followed by 16 bytes of per-block
/// scalars; other rows are padded by 8 elements (an odd pitch in 16-byte chunks).
fn swizzled(spec: &KernelSpec, c: &TileConfig) -> bool {
    can_swizzle(spec) && c.switch(PADDED, 0) == 0
}

/// Whether rows of this spec are whole 128-byte lines, so that they may be swizzled
/// (padding is then a choice, offered as the `pad` switch).
fn can_swizzle(spec: &KernelSpec) -> bool {
    spec.head_dim % 64 == 0 && spec.head_dim_v % 64 == 0
}

pub(super) fn smem_bytes(spec: &KernelSpec, c: &TileConfig) -> u32 {
    let (pad, scalars) = if swizzled(spec, c) { (0, 16) } else { (8, 0) };
    let pitch_qk = spec.head_dim + pad;
    let pitch_v = spec.head_dim_v + pad;
    let q_or_o = (c.block_m * pitch_qk).max(c.block_m * pitch_v);
    let kv_stage = c.block_n * pitch_qk + c.block_n * pitch_v;
    (q_or_o + c.stages * kv_stage) * spec.dtype.size() + scalars
}

/// Registers per thread that hold data across the key loop: the f32 accumulators of O
/// and S, and Q's fragments when they stay in registers.
fn payload_registers(spec: &KernelSpec, c: &TileConfig) -> u32 {
    let m_tiles = c.block_m / c.warps / 16;
    let o = m_tiles * spec.head_dim_v / 2;
    let s = m_tiles * c.block_n / 2;
    let q = if c.switch(Q_IN_REGS, 0) == 1 {
        m_tiles * spec.head_dim / 4
    } else {
        0
    };
    o + s + q
}

/// Registers per thread, as listed: [`payload_registers`] plus a fixed allowance for
/// addresses, softmax state and temporaries (measured on sm90: the real count runs 40
/// to 60 above the accumulators, less where registers are short), or the cap (255, or
/// that of [`MIN_BLOCKS`]) where that is lower.
pub(super) fn est_registers(spec: &KernelSpec, c: &TileConfig) -> u32 {
    let free = payload_registers(spec, c) + 48;
    free.min(register_cap(c.warps * 32, c.switch(MIN_BLOCKS, 1)))
}

/// The most registers per thread that let `blocks` blocks of `threads` share an SM:
/// what ptxas allots under `__launch_bounds__(threads, blocks)` (whole multiples of 8,
/// at most 255).
fn register_cap(threads: u32, blocks: u32) -> u32 {
    (REGISTERS_PER_SM / (threads * blocks.max(1)) / 8 * 8).min(255)
}

pub(super) fn check(spec: &KernelSpec, c: &TileConfig) -> Result<Footprint, Rejection> {
    let reject = |kind, reason: String| Err(Rejection { kind, reason });
    if c.warps == 0
        || c.block_m % (16 * c.warps) != 0
        || !(1..=2).contains(&(c.block_m / c.warps / 16))
    {
        return reject(
            RejectKind::Shape,
            format!(
                "block_m {} over {} warps is not 16 or 32 rows per warp",
                c.block_m, c.warps
            ),
        );
    }
    if c.block_n % 16 != 0 || c.block_n == 0 {
        return reject(
            RejectKind::Shape,
            format!("block_n {} is not a multiple of 16", c.block_n),
        );
    }
    if spec.head_dim % 16 != 0 || spec.head_dim_v % 16 != 0 {
        return reject(
            RejectKind::Shape,
            "head dims must be multiples of 16".into(),
        );
    }
    if !(1..=4).contains(&c.stages) {
        return reject(
            RejectKind::Shape,
            format!("{} stages (1 to 4 supported)", c.stages),
        );
    }
    let emu = c.switch(EXP2_EMU, 0);
    if emu != 0 && emu > c.block_n / 8 {
        return reject(
            RejectKind::Shape,
            format!(
                "exp2emu {emu}: every {emu}th of {} S fragments is none",
                c.block_n / 8
            ),
        );
    }
    if c.switch(STAGGER, 0) == 1 && (c.stages < 2 || c.switch(WARP_SKIP, 0) == 1) {
        return reject(
            RejectKind::Shape,
            format!(
                "stagger needs 2 or more stages and no warp skipping ({} stages)",
                c.stages
            ),
        );
    }
    if c.switch(CAP_OFFSET, 0) == 1 {
        let why = if !spec.features.softcap {
            Some("a fixed offset needs soft-capped scores")
        } else if spec.dtype != Dtype::Bf16 {
            Some("a fixed offset needs P in bf16 (2^48 overflows fp16)")
        } else if c.switch(EXP2_EMU, 0) != 0 {
            Some("a fixed offset takes every exp2 on the MUFU (no exp2emu)")
        } else {
            None
        };
        if let Some(why) = why {
            return reject(RejectKind::Shape, format!("capoffset: {why}"));
        }
    }
    let blocks = c.switch(MIN_BLOCKS, 1);
    if !(1..=4).contains(&blocks) {
        return reject(
            RejectKind::Shape,
            format!("minblocks {blocks}: 1 to 4 blocks per SM supported"),
        );
    }
    let smem = smem_bytes(spec, c);
    let limit = spec.arch.max_smem_per_block();
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
    let per_sm = spec.arch.smem_per_sm();
    if blocks > 1 && blocks * (smem + SMEM_RESERVED_PER_BLOCK) > per_sm {
        return reject(
            RejectKind::SharedMemory,
            format!(
                "minblocks {blocks}: {blocks} blocks of {} KiB of shared memory do not fit the {} KiB of an {} SM",
                smem.div_ceil(1024),
                per_sm / 1024,
                spec.arch
            ),
        );
    }
    // Only what must stay in registers over the loop prunes statically: ptxas fits the
    // rest (addresses, softmax state) into less than the estimate's allowance often
    // enough (d256 causal's 512-token winner is one such tile), and its resource report
    // prunes the configs that do spill.
    let (cap, payload) = (
        register_cap(c.warps * 32, blocks),
        payload_registers(spec, c),
    );
    if payload > cap {
        let why = if blocks > 1 {
            format!("minblocks {blocks} allows {cap} registers per thread")
        } else {
            format!("{cap} registers per thread at most")
        };
        return reject(
            RejectKind::Registers,
            format!("its accumulators and Q fragments take {payload} registers per thread, {why}: it would spill"),
        );
    }
    let regs = est_registers(spec, c);
    Ok(Footprint {
        threads: c.warps * 32,
        block_m: c.block_m,
        smem_bytes: smem,
        est_registers: regs,
        pack_gqa: c.switch(PACK_GQA, 0) == 1,
        tma_rows: 0,
        persistent_per_sm: 0,
        section_key_bytes: 0,
        causal_m_blocks_in_y: spec.mask == MaskKind::Causal && c.switch(PACK_GQA, 0) == 0,
        split_head_dim_v: 0,
        cluster_m: 0,
    })
}

/// The heuristic default: the first of these that fits the arch. On sm90 the first
/// choices are the configs with the best geomean over the FA3-paper grid in
/// `bench/results/2026-11-30-h200-7f68a4e-bench-all.json` and, with swizzled rows,
/// `bench/results/2026-11-30-h200-21aaeed-bench-all-d{128,256}.json`; elsewhere, conservative
/// tiles that compile without spills on every arch (a test holds both to that). The
/// tuner replaces the default wherever it measures better.
pub(super) fn default_config(spec: &KernelSpec) -> TileConfig {
    let softcap = spec.features.softcap;
    // Swizzled rows unless marked PAD_ROWS: the tiles where the swizzle's XORs spill
    // (d192, d128 with softcap) keep padded rows. d256 non-causal: FA2's 128x64 tile
    // over 8 warps, best once rows are swizzled (bench/NOTES.md). SKIPPING (warps skip
    // the masked blocks they cannot see): d96 causal and the d128 window (1.13 to 1.20x);
    // d128 causal gains at 512 only (1.10x) and loses 3% from 4096 on, d64, d192 and
    // d256 lose: theirs stay off, the tuner decides per length
    // (`bench/results/2026-11-30-h200-{d3226a7-warpskip,99f8474}-*`, `tuning-db/`).
    // LAZY_BIT on d128's 128x64 tile: 1.04 to 1.11x unmasked, 1.00 to 1.03x causal
    // (padded: the swizzled lazy tile spills there), and its plain twin now spills
    // (`bench/results/2026-12-03-h200-7a6e420-dirty-portable-lazy-ab-*`).
    let measured_sm90: &[(u32, u32, u32, u32, u32)] = match (spec.head_dim, spec.mask, softcap) {
        (..=64, MaskKind::Local, _) => &[],
        // Soft-capped d64: the two-stage twin, 1.06 to 1.07x the one-stage tile with the
        // tanh (`bench/results/2026-12-03-h200-94226f4-emu-old.json.xz`).
        (..=64, _, true) => &[(128, 4, 64, 2, 1)],
        (..=64, _, _) => &[(128, 4, 64, 1, 1)],
        (..=96, MaskKind::Causal, false) => &[(128, 4, 64, 1, SKIPPING)],
        // d96 and d192: the configs with the best geomean over every bucket of their tune
        // (`tuning-db/sm90.json`): 1.18 to 1.33x the generic picks they replace.
        (..=96, MaskKind::None, false) => &[(128, 4, 32, 3, 0)],
        (..=96, _, _) => &[],
        (..=128, MaskKind::Local, false) => &[(128, 4, 64, 2, SKIPPING)],
        (..=128, MaskKind::Local, true) => &[],
        (..=128, MaskKind::None, false) => &[(128, 4, 64, 1, LAZY_BIT)],
        (..=128, _, false) => &[(128, 4, 64, 1, PAD_ROWS | LAZY_BIT)],
        (..=128, _, true) => &[(128, 4, 64, 1, PAD_ROWS)],
        // d192 (its 128x128 tile spills): 128x64 over 8 warps; without skipping, which
        // cost 18% there. With softcap d256's causal pick, padded (swizzled it spills).
        (..=192, MaskKind::Causal, false) => &[(128, 8, 64, 1, 0)],
        (..=192, MaskKind::Causal, true) => &[(64, 4, 64, 1, PAD_ROWS)],
        (..=192, MaskKind::None, false) => &[(128, 8, 64, 3, 0)],
        (..=192, _, _) => &[],
        (_, MaskKind::Local, _) => &[],
        (_, MaskKind::None, _) => &[(128, 8, 64, 1, 0)],
        (_, MaskKind::Causal, _) => &[(64, 4, 64, 1, 0)],
    };

    let generic: &[(u32, u32, u32, u32, u32)] = if spec.head_dim <= 64
        && spec.features.paged_kv
        && (spec.mask == MaskKind::Local || softcap)
    {
        // Two window bounds, or the tanh's temporaries, plus three page-table paths
        // spill the 128-row tile.
        &[(64, 4, 64, 2, 0), (64, 4, 32, 1, 0)]
    } else if spec.head_dim <= 64 {
        &[
            (128, 4, 64, 2, 0),
            (128, 8, 64, 2, 0),
            (64, 4, 64, 2, 0),
            (64, 4, 32, 1, 0),
        ]
    } else if spec.head_dim <= 128 {
        &[(128, 8, 64, 2, 0), (64, 4, 64, 2, 0), (64, 4, 32, 1, 0)]
    } else {
        &[(128, 8, 32, 2, 0), (128, 8, 32, 1, 0), (64, 4, 32, 1, 0)]
    };
    // Local masks (two bounds per row) cost registers the measured tiles may not have:
    // they start from the conservative list until they are tuned. Soft-capping (a tanh
    // per score) keeps the measured tiles up to d128 (timed in
    // `bench/results/2026-11-30-h200-485f95e-bench-softcap-all.json`); d256's 128x128
    // spills with it.
    // Paged K/V gather rows through the page table, which needs registers the measured
    // tiles do not have (ptxas spills them): the conservative list until tuned.
    let softcap_fits = !softcap || spec.head_dim <= 128;
    let measured = if spec.arch == Arch::Sm90 && softcap_fits && !spec.features.paged_kv {
        measured_sm90
    } else {
        &[]
    };
    let chosen = measured
        .iter()
        .chain(generic)
        .map(|&(m, w, n, s, q)| config(m, w, n, s, q))
        .find(|c| check(spec, c).is_ok())
        .unwrap_or_else(|| config(64, 4, 32, 1, 0));
    if !softcap {
        return chosen;
    }
    // Soft-capped: the cap's fixed offset (CAP_OFFSET) where check() allows it (bf16). Measured on the H200: the
    // staggered d64 128x64x4 tile with it 1.06 to 1.13x the plain pick above, the
    // unpadded d128 128x64x4 one 1.10 to 1.16x the padded pick
    // (`bench/results/2026-12-03-h200-b751ec7-dirty-capoffset-ab-*`); with sinks too
    // (1.09 to 1.16x). Elsewhere the chosen tile's twin where a warp holds 32 rows (d64's
    // plain 128x64x4 twin: 1.02 to 1.07x); of 16 rows it can lose (d128's paged 128x64
    // over 8 warps: 0.95 to 0.97x; `...-capoffset-defaults-*`). Not timed off the H200.
    let with = |mut c: TileConfig, switches: &[&str]| {
        for s in switches {
            c.switches.insert(s.to_string(), 1);
        }
        c
    };
    let mut offset = Vec::new();
    if !measured.is_empty() && spec.mask != MaskKind::Local {
        match spec.head_dim {
            64 => offset.push(with(config(128, 4, 64, 2, 1), &[STAGGER, CAP_OFFSET])),
            128 => offset.push(with(config(128, 4, 64, 1, 0), &[CAP_OFFSET])),
            _ => {}
        }
    }
    if chosen.block_m / chosen.warps == 32 {
        offset.push(with(chosen.clone(), &[CAP_OFFSET]));
    }
    offset
        .into_iter()
        .find(|c| check(spec, c).is_ok())
        .unwrap_or(chosen)
}

pub(super) fn render_values(
    spec: &KernelSpec,
    c: &TileConfig,
    fp: &Footprint,
) -> Vec<(&'static str, Value)> {
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
        ("block_m", json!(c.block_m)),
        ("block_n", json!(c.block_n)),
        ("warps", json!(c.warps)),
        ("stages", json!(c.stages)),
        (
            "q_in_regs",
            json!(if c.switch(Q_IN_REGS, 0) == 1 {
                "true"
            } else {
                "false"
            }),
        ),
        ("sinks", json!(spec.features.sinks)),
        ("softcap", json!(spec.features.softcap)),
        ("paged_kv", json!(spec.features.paged_kv)),
        ("pack_gqa", json!(c.switch(PACK_GQA, 0) == 1)),
        (
            "warp_skip",
            json!(c.switch(WARP_SKIP, 0) == 1 && spec.mask != MaskKind::None),
        ),
        ("lazy", json!(c.switch(LAZY_RESCALE, 0) == 1)),
        ("exp2_emu_every", json!(c.switch(EXP2_EMU, 0))),
        ("min_blocks", json!(c.switch(MIN_BLOCKS, 1))),
        ("stagger", json!(c.switch(STAGGER, 0) == 1)),
        ("cap_offset", json!(c.switch(CAP_OFFSET, 0) == 1)),
        ("swizzle", json!(swizzled(spec, c))),
        ("smem_bytes", json!(fp.smem_bytes)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smem_matches_hand_computation() {
        // d=128 (swizzled), 128x64 tile, 2 stages: Q 128*128 + 2 * (64*128 + 64*128)
        // elements, and 16 bytes of per-block scalars.
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        assert_eq!(smem_bytes(&spec, &config(128, 8, 64, 2, 0)), 98_304 + 16);
        let spec = KernelSpec {
            head_dim_v: 64,
            ..spec
        };
        // O (128*64) is smaller than Q (128*128): the larger wins.
        assert_eq!(
            smem_bytes(&spec, &config(128, 8, 64, 1, 0)),
            (128 * 128 + 64 * 128 + 64 * 64) * 2 + 16
        );
        // d=96 rows are padded: 104 elements, no scalars after the tiles.
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 96, MaskKind::None);
        assert_eq!(
            smem_bytes(&spec, &config(64, 4, 64, 1, 0)),
            (64 * 104 + 64 * 104 * 2) * 2
        );
    }

    #[test]
    fn shapes_are_checked() {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
        let bad = config(64, 8, 64, 2, 0); // 8 rows per warp
        assert_eq!(check(&spec, &bad).unwrap_err().kind, RejectKind::Shape);
        let bad = config(128, 4, 40, 2, 0);
        assert_eq!(check(&spec, &bad).unwrap_err().kind, RejectKind::Shape);
        let ok = check(&spec, &config(128, 4, 64, 2, 0)).unwrap();
        assert_eq!(ok.threads, 128);
        assert_eq!(ok.block_m, 128);
    }

    #[test]
    fn warp_skipping_is_offered_only_where_blocks_are_masked() {
        let skips = |mask| {
            let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, mask);
            candidates(&spec)
                .iter()
                .filter(|c| c.switch(WARP_SKIP, 0) == 1)
                .count()
        };
        assert_eq!(skips(MaskKind::None), 0);
        assert_eq!(skips(MaskKind::Causal), 12);
        assert_eq!(skips(MaskKind::Local), 12);
        // The measured d128 window pick skips, and the rendered kernel is told so.
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Local);
        let c = default_config(&spec);
        assert_eq!(c.switch(WARP_SKIP, 0), 1);
        let fp = check(&spec, &c).unwrap();
        let values = render_values(&spec, &c, &fp);
        assert!(values.contains(&("warp_skip", json!(true))));
        // d64 loses with it: its default does not skip.
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
        assert_eq!(default_config(&spec).switch(WARP_SKIP, 0), 0);
    }

    #[test]
    fn lazy_rescaling_is_a_twin_of_the_plain_tiles() {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
        let all = candidates(&spec);
        let lazy: Vec<_> = all
            .iter()
            .filter(|c| c.switch(LAZY_RESCALE, 0) == 1)
            .collect();
        assert_eq!(lazy.len(), 46);
        // Every lazy config is a plain one with the switch on: no lazy-only shape.
        for c in &lazy {
            let mut plain = (*c).clone();
            plain.switches.remove(LAZY_RESCALE);
            assert!(all.contains(&plain), "{c:?} has no plain twin");
        }
        // Padded lazy twins only where rows could be swizzled instead.
        let d96 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 96, MaskKind::None);
        assert!(candidates(&d96)
            .iter()
            .all(|c| c.switch(LAZY_RESCALE, 0) == 0 || c.switch(PADDED, 0) == 0));
        // d128's default rescales lazily, and the rendered kernel is told so; plain
        // configs render `lazy = false`, so their source (and machine code) is unchanged.
        for mask in [MaskKind::None, MaskKind::Causal] {
            let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, mask);
            let c = default_config(&spec);
            assert_eq!(c.switch(LAZY_RESCALE, 0), 1, "{mask:?}");
            let values = render_values(&spec, &c, &check(&spec, &c).unwrap());
            assert!(values.contains(&("lazy", json!(true))));
        }
        let plain = config(128, 4, 64, 1, 0);
        let values = render_values(&spec, &plain, &check(&spec, &plain).unwrap());
        assert!(values.contains(&("lazy", json!(false))));
    }

    #[test]
    fn exp2_emulation_is_rendered_but_not_enumerated() {
        let mut capped = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
        capped.features.softcap = true;
        // It measured no faster than its twins: the tuner does not spend time on it.
        assert!(candidates(&capped)
            .iter()
            .all(|c| c.switch(EXP2_EMU, 0) == 0));
        // Offered to a probe: the d64 soft-capped plain tile's twins check and render k.
        let base = config(128, 4, 64, 2, 1);
        for k in [2, 4, 8] {
            let mut c = base.clone();
            c.switches.insert(EXP2_EMU.to_string(), k);
            let fp = check(&capped, &c).unwrap();
            let values = render_values(&capped, &c, &fp);
            assert!(values.contains(&("exp2_emu_every", json!(k))), "{values:?}");
        }
        // Every other config renders 0.
        let values = render_values(&capped, &base, &check(&capped, &base).unwrap());
        assert!(values.contains(&("exp2_emu_every", json!(0))));
        // A share past the block's fragments would emulate nothing.
        let mut c = config(128, 4, 32, 1, 0);
        c.switches.insert(EXP2_EMU.to_string(), 8);
        assert_eq!(check(&capped, &c).unwrap_err().kind, RejectKind::Shape);
    }

    #[test]
    fn staggered_twins_are_ringed_soft_capped_tiles_of_two_m_tiles_a_warp() {
        let mut spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
        // Plain specs lost with it: not offered.
        assert!(candidates(&spec).iter().all(|c| c.switch(STAGGER, 0) == 0));
        spec.features.softcap = true;
        let all = candidates(&spec);
        let twins: Vec<_> = all
            .iter()
            .filter(|c| c.switch(STAGGER, 0) == 1 && c.switch(CAP_OFFSET, 0) == 0)
            .collect();
        assert!(!twins.is_empty());
        for c in &twins {
            assert!(c.stages >= 2 && c.block_m / c.warps == 32, "{c:?}");
            let mut base = (*c).clone();
            base.switches.remove(STAGGER);
            assert!(
                base.switches
                    .keys()
                    .all(|k| k == Q_IN_REGS || k == LAZY_RESCALE),
                "{c:?}"
            );
            assert!(all.contains(&base), "{c:?} has no twin without the switch");
            // The same registers: the m-tiles take turns, nothing more is held.
            assert_eq!(payload_registers(&spec, c), payload_registers(&spec, &base));
        }
        // d64's soft-capped winner (128x64 over 4 warps, two stages) has one.
        let mut winner = config(128, 4, 64, 2, 1);
        winner.switches.insert(STAGGER.to_string(), 1);
        assert!(all.contains(&winner));
        // The kernel is told; other configs render false.
        let values = render_values(&spec, &winner, &check(&spec, &winner).unwrap());
        assert!(values.contains(&("stagger", json!(true))));
        let plain = config(128, 4, 64, 2, 1);
        let values = render_values(&spec, &plain, &check(&spec, &plain).unwrap());
        assert!(values.contains(&("stagger", json!(false))));
        // check() refuses a one-stage tile (V cannot be waited for with K) and warp skipping.
        let mut c = config(128, 4, 64, 1, 0);
        c.switches.insert(STAGGER.to_string(), 1);
        assert_eq!(check(&spec, &c).unwrap_err().kind, RejectKind::Shape);
        let mut c = config(128, 4, 64, 2, SKIPPING);
        c.switches.insert(STAGGER.to_string(), 1);
        assert_eq!(check(&spec, &c).unwrap_err().kind, RejectKind::Shape);
    }

    #[test]
    fn cap_offset_twins_are_bf16_soft_capped_plain_lazy_and_staggered_tiles() {
        let mut spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
        assert!(candidates(&spec)
            .iter()
            .all(|c| c.switch(CAP_OFFSET, 0) == 0));
        spec.features.softcap = true;
        let all = candidates(&spec);
        let fixed: Vec<_> = all
            .iter()
            .filter(|c| c.switch(CAP_OFFSET, 0) == 1)
            .collect();
        let bases = all
            .iter()
            .filter(|c| {
                c.switch(CAP_OFFSET, 0) == 0
                    && c.switches
                        .keys()
                        .all(|k| k == Q_IN_REGS || k == LAZY_RESCALE || k == STAGGER)
            })
            .count();
        // One twin per such tile (every one passes check), none of other switches.
        assert_eq!(fixed.len(), bases);
        assert!(fixed.iter().any(|c| c.switch(STAGGER, 0) == 1));
        assert!(fixed.iter().any(|c| c.switch(LAZY_RESCALE, 0) == 1));
        for c in &fixed {
            let mut base = (*c).clone();
            base.switches.remove(CAP_OFFSET);
            assert!(all.contains(&base), "{c:?}");
            let values = render_values(&spec, c, &check(&spec, c).unwrap());
            assert!(values.contains(&("cap_offset", json!(true))));
        }
        let mut winner = config(128, 4, 64, 2, 1);
        winner.switches.insert(STAGGER.to_string(), 1);
        let values = render_values(&spec, &winner, &check(&spec, &winner).unwrap());
        assert!(values.contains(&("cap_offset", json!(false))));
        // fp16 (P up to 2^48), caps absent, and the plain loop are refused with the reason.
        winner.switches.insert(CAP_OFFSET.to_string(), 1);
        assert!(check(&spec, &winner).is_ok());
        let mut fp16 = spec;
        fp16.dtype = Dtype::Fp16;
        assert!(candidates(&fp16)
            .iter()
            .all(|c| c.switch(CAP_OFFSET, 0) == 0));
        let err = check(&fp16, &winner).unwrap_err();
        assert!(err.reason.contains("fp16"), "{}", err.reason);
        let mut plain_spec = spec;
        plain_spec.features.softcap = false;
        assert!(check(&plain_spec, &winner).is_err());
        winner.switches.insert(EXP2_EMU.to_string(), 8);
        let err = check(&spec, &winner).unwrap_err();
        assert!(err.reason.contains("exp2emu"), "{}", err.reason);
    }

    #[test]
    fn bf16_soft_capped_defaults_fix_the_offset() {
        for arch in [Arch::Sm80, Arch::Sm86, Arch::Sm89, Arch::Sm90, Arch::Sm120] {
            for head_dim in [64, 128, 256] {
                for mask in [MaskKind::None, MaskKind::Causal, MaskKind::Local] {
                    let mut spec = KernelSpec::new(arch, Dtype::Bf16, head_dim, mask);
                    spec.features.softcap = true;
                    let c = default_config(&spec);
                    let measured = arch == Arch::Sm90
                        && mask != MaskKind::Local
                        && (head_dim == 64 || head_dim == 128);
                    let fixed = measured || c.block_m / c.warps == 32;
                    assert_eq!(c.switch(CAP_OFFSET, 0) == 1, fixed, "{spec:?}: {c:?}");
                    assert!(check(&spec, &c).is_ok());
                    spec.dtype = Dtype::Fp16;
                    assert_eq!(default_config(&spec).switch(CAP_OFFSET, 0), 0);
                    spec.dtype = Dtype::Bf16;
                    spec.features.softcap = false;
                    assert_eq!(default_config(&spec).switch(CAP_OFFSET, 0), 0);
                }
            }
        }
        // Off the H200: d64's 128x64x4 tile takes it, d128's 128x64 over 8 warps does not.
        let mut a100 = KernelSpec::new(Arch::Sm80, Dtype::Bf16, 64, MaskKind::Causal);
        a100.features.softcap = true;
        assert_eq!(default_config(&a100).switch(CAP_OFFSET, 0), 1);
        a100.head_dim = 128;
        a100.head_dim_v = 128;
        assert_eq!(default_config(&a100).switch(CAP_OFFSET, 0), 0);
        // The H200's measured picks: d64 staggered, d128 unpadded.
        let mut spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
        spec.features.softcap = true;
        assert_eq!(default_config(&spec).switch(STAGGER, 0), 1);
        spec.head_dim = 128;
        spec.head_dim_v = 128;
        assert_eq!(default_config(&spec).switch(PADDED, 0), 0);
    }

    #[test]
    fn cap_offset_bounds_keep_p_normal_and_finite() {
        // The constants the kernels use, read from the templates: the portable softmax and
        // the Hopper fragments keep their own copies, which must agree.
        let templates = crate::render::templates::TemplateSet::embedded();
        let constant = |header: &str, name: &str| -> f64 {
            let (_, text) = templates
                .headers()
                .find(|(h, _)| *h == header)
                .unwrap_or_else(|| panic!("{header} not embedded"));
            let line = text
                .lines()
                .find(|l| l.contains(&format!("constexpr float {name} =")))
                .unwrap_or_else(|| panic!("{name} not in {header}"));
            let value = line.split('=').nth(1).unwrap();
            value
                .trim()
                .trim_end_matches(';')
                .trim_end_matches('f')
                .parse()
                .unwrap()
        };
        let portable = "fa4/portable/softmax.cuh";
        let hopper = "fa4/hopper/fragments.cuh";
        let headroom = constant(portable, "kCapOffsetHeadroomLog2");
        let max_cap_log2 = constant(portable, "kCapOffsetMaxCapLog2");
        assert_eq!(constant(hopper, "kCapOffsetHeadroomLog2"), headroom);
        assert_eq!(constant(hopper, "kCapOffsetMaxCapLog2"), max_cap_log2);
        // The smallest p (a score at -cap, 2C below the bound) is a normal f32 and bf16
        // with 24 binades below it, so that the row's mantissa survives.
        assert!(headroom - 2.0 * max_cap_log2 >= -126.0 + 24.0);
        // The largest, times 2^20 keys and values up to 2^59, stays finite in f32.
        assert!(headroom + 20.0 + 59.0 < 128.0);
        // Gemma-2's cap (50) takes the fixed offset; fp16's P (at most 65504) could not.
        assert!(50.0 * std::f64::consts::LOG2_E <= max_cap_log2);
        assert!(2f64.powf(headroom) > 65504.0);
    }

    #[test]
    fn occupancy_twins_cap_registers_where_the_cap_binds() {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
        let all = candidates(&spec);
        let twins: Vec<_> = all.iter().filter(|c| c.switch(MIN_BLOCKS, 1) > 1).collect();
        assert!(!twins.is_empty());
        for c in &twins {
            // A twin of a plain tile (Q in registers or not, nothing else switched).
            let mut plain = (*c).clone();
            plain.switches.remove(MIN_BLOCKS);
            assert!(plain.switches.keys().all(|k| k == Q_IN_REGS), "{c:?}");
            assert!(all.contains(&plain), "{c:?} has no plain twin");
            // Its cap binds (below ptxas's own 255) and still holds the accumulators.
            let blocks = c.switch(MIN_BLOCKS, 1);
            let cap = register_cap(c.warps * 32, blocks);
            assert!(
                cap < 255 && cap >= payload_registers(&spec, c) + 32,
                "{c:?}"
            );
            assert_eq!(
                check(&spec, c).unwrap().est_registers,
                cap.min(payload_registers(&spec, c) + 48)
            );
        }
        // 8 warps: two blocks at 128 registers; 4 warps: three at 168 or four at 128.
        assert_eq!(register_cap(256, 2), 128);
        assert_eq!(register_cap(128, 3), 168);
        assert_eq!(register_cap(128, 4), 128);
        assert_eq!(register_cap(128, 1), 255);
        assert!(twins
            .iter()
            .any(|c| c.warps == 8 && c.switch(MIN_BLOCKS, 1) == 2));
        assert!(twins
            .iter()
            .any(|c| c.warps == 4 && c.switch(MIN_BLOCKS, 1) == 4));
        // Two 4-warp blocks always fit under 255 registers: no twin would change anything.
        assert!(!twins
            .iter()
            .any(|c| c.warps == 4 && c.switch(MIN_BLOCKS, 1) == 2));
        // d256's O alone (128 registers at 16 rows per warp) leaves no room under a cap.
        let d256 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::Causal);
        assert!(candidates(&d256)
            .iter()
            .all(|c| c.switch(MIN_BLOCKS, 1) == 1));

        // The kernel is told, and plain configs render 1 (ptxas's own choice).
        let twin = twins[0];
        let values = render_values(&spec, twin, &check(&spec, twin).unwrap());
        assert!(values.contains(&("min_blocks", json!(twin.switch(MIN_BLOCKS, 1)))));
        let plain = config(128, 4, 64, 1, 1);
        let values = render_values(&spec, &plain, &check(&spec, &plain).unwrap());
        assert!(values.contains(&("min_blocks", json!(1))));

        // check() refuses counts the SM cannot hold: shared memory, the accumulators, range.
        // (d128 128x64, three stages: 128 KiB, one block fits an sm90 SM, two do not.)
        let mut c = config(128, 8, 64, 3, 0);
        let d128 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
        assert!(check(&d128, &c).is_ok());
        c.switches.insert(MIN_BLOCKS.to_string(), 2);
        let r = check(&d128, &c).unwrap_err();
        assert_eq!(r.kind, RejectKind::SharedMemory, "{r:?}");
        assert!(r.reason.contains("minblocks 2"), "{}", r.reason);
        let mut c = config(128, 4, 128, 1, 1);
        c.switches.insert(MIN_BLOCKS.to_string(), 4);
        assert_eq!(check(&spec, &c).unwrap_err().kind, RejectKind::Registers);
        let mut c = config(64, 4, 64, 1, 0);
        c.switches.insert(MIN_BLOCKS.to_string(), 5);
        assert_eq!(check(&spec, &c).unwrap_err().kind, RejectKind::Shape);
    }

    #[test]
    fn register_estimate_prunes_the_hopeless() {
        // 32 rows per warp at head dim 256: O alone is 256 f32 registers per thread.
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Fp16, 256, MaskKind::None);
        let r = check(&spec, &config(128, 4, 32, 1, 0)).unwrap_err();
        assert_eq!(r.kind, RejectKind::Registers);
        assert!(r.reason.contains("registers"));
    }
}
