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
    // lost up to 7% with it.
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
    // at 4 and 0.92 to 0.96x at 2.)
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
        varlen_tiles: false,
    })
}

/// The heuristic default: the first of these that fits the arch. On sm90 the first
/// choices are the configs with the best geomean over the FA3-paper grid in
/// every config timed on the H200 (d128 and d256 again with swizzled rows); elsewhere,
/// conservative
/// tiles that compile without spills on every arch (a test holds both to that). The
/// tuner replaces the default wherever it measures better.
pub(super) fn default_config(spec: &KernelSpec) -> TileConfig {
    let softcap = spec.features.softcap;
    // Swizzled rows unless marked PAD_ROWS: the tiles where the swizzle's XORs spill
    // (d192, d128 with softcap) keep padded rows. d256 non-causal: FA2's 128x64 tile
    // over 8 warps, best once rows are swizzled (312.6 against 285 TFLOP/s geomean for the padded 128x128). SKIPPING (warps skip
    // the masked blocks they cannot see): d96 causal and the d128 window (1.13 to 1.20x);
    // d128 causal gains at 512 only (1.10x) and loses 3% from 4096 on, d64, d192 and
    // d256 lose: theirs stay off, the tuner decides per length
    // (`tuning-db/`).
    // LAZY_BIT on d128's 128x64 tile: 1.04 to 1.11x unmasked, 1.00 to 1.03x causal
    // (padded: the swizzled lazy tile spills there), and its plain twin now spills.
    let measured_sm90: &[(u32, u32, u32, u32, u32)] = match (spec.head_dim, spec.mask, softcap) {
        (..=64, MaskKind::Local, _) => &[],
        // Soft-capped d64: the two-stage twin, 1.06 to 1.07x the one-stage tile with the
        // tanh.
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
    // per score) keeps the measured tiles up to d128 (softcap ran 0.75x plain on the
    // conservative tiles, 0.86x on these); d256's 128x128
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
    // unpadded d128 128x64x4 one 1.10 to 1.16x the padded pick; with sinks too
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
mod tests;
