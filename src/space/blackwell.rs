//! Config space of the Blackwell (tcgen05) template, sm100 only. The arithmetic mirrors
//! `templates/include/fa4/blackwell/traits.cuh`; the rendered kernel asserts that its
//! shared memory, threads and tensor-memory columns equal the ones computed here.
//!
//! A block owns `q_stages` tiles of 128 query rows (`block_m = 128 * q_stages`), one
//! softmax warpgroup each, plus a correction warpgroup and one that loads and issues the
//! MMAs: `warps = 4 * (q_stages + 2)`. S (`block_n` f32 columns) and O (`head_dim_v`
//! padded to 64) of every stage live in tensor memory, 512 columns at most.
//!
//! No sm100 GPU has run these kernels: the template is compiled and checked here (ptxas,
//! resources, descriptors) and never served ([`HELD_BACK`]).

use std::collections::BTreeMap;

use fa4_spec::{Arch, Dtype, KernelSpec, MaskKind, TileConfig};
use serde_json::{json, Value};

use super::switches::*;
use super::{Footprint, RejectKind, Rejection};
use crate::render::tcgen05::{
    cuda_u32, cuda_u64, AccumFormat, InstrDescriptor, Leading, Major, OperandFormat,
    SmemDescriptor, Swizzle,
};

/// Head dims the template builds: FA4's on sm100 and d256. Shared memory holds whole
/// 64-column blocks (the 128-byte swizzle atom), so d96 runs in d128's tiles.
pub(super) const HEAD_DIMS: &[(u32, u32)] = &[
    (64, 64),
    (96, 96),
    (128, 128),
    (192, 128),
    (192, 192),
    (256, 256),
];

/// Whether the shipped cache keeps every sm100 spec off this template. It does until
/// `fa4-gen verify --arch sm100 --template blackwell` passes on an sm100 GPU: none has
/// run these kernels.
pub(super) const HELD_BACK: bool = true;

/// Columns of one tensor-memory allocation (a CTA's share of an SM's 512).
const TMEM_COLUMNS: u32 = 512;

/// Key-block widths: whole 64-key P stores. (192 keys spill on one Q stage's 248
/// registers and cannot fit two stages' 192: [`softmax_registers_needed`].)
const BLOCK_N: &[u32] = &[64, 128];
const STAGES: &[u32] = &[2, 3, 4];

/// Columns of a head dim in shared memory and the PV GEMM's N (traits.cuh's kQkPad, kVPad).
fn padded(head_dim: u32) -> u32 {
    head_dim.div_ceil(64) * 64
}

/// bf16 and fp16, strided or packed (varlen) K/V by TMA; every mask, sinks and softcap.
/// FP8 (V must be K-major for kind::f8f6f4) and paged K/V (TMA cannot follow a page
/// table) are not built yet.
pub(super) fn supports_spec(spec: &KernelSpec) -> bool {
    matches!(spec.dtype, Dtype::Bf16 | Dtype::Fp16) && !spec.features.paged_kv
}

fn q_stages(c: &TileConfig) -> u32 {
    c.block_m / 128
}

fn config(q_stages: u32, block_n: u32, stages: u32, lazy: bool) -> TileConfig {
    let mut switches = BTreeMap::new();
    if lazy {
        switches.insert(LAZY_RESCALE.to_string(), 1);
    }
    TileConfig {
        block_m: 128 * q_stages,
        block_n,
        warps: 4 * (q_stages + 2),
        stages,
        switches,
    }
}

/// Every (Q stages, key block, ring depth), with and without lazy rescaling, and the
/// lazy ones also with every 4th 8-key group's exp2 emulated (FA4's split of the
/// exponentials between the MUFU and the FMA pipes).
pub(super) fn candidates(spec: &KernelSpec) -> Vec<TileConfig> {
    let _ = spec;
    let mut out = Vec::new();
    for q in [2, 1] {
        for &n in BLOCK_N {
            for &s in STAGES {
                for lazy in [true, false] {
                    out.push(config(q, n, s, lazy));
                }
                let mut emulated = config(q, n, s, true);
                emulated.switches.insert(EXP2_EMU.to_string(), 4);
                out.push(emulated);
            }
        }
    }
    out
}

/// Threads: a softmax warpgroup per Q stage, the correction warpgroup, and the one whose
/// warps load and issue the MMAs.
fn threads(c: &TileConfig) -> u32 {
    128 * (q_stages(c) + 2)
}

/// traits.cuh's kColumnsUsed and kTmemColumns (a power of two from 32).
fn tmem_columns_used(spec: &KernelSpec, c: &TileConfig) -> u32 {
    q_stages(c) * (c.block_n + padded(spec.head_dim_v))
}
fn tmem_columns(spec: &KernelSpec, c: &TileConfig) -> u32 {
    tmem_columns_used(spec, c).next_power_of_two().max(32)
}

/// traits.cuh's kSmemBytes: Q tiles, the K and V rings, per-row statistics, the barriers
/// and the TMEM address.
pub(super) fn smem_bytes(spec: &KernelSpec, c: &TileConfig) -> u32 {
    let (q, n, s) = (q_stages(c), c.block_n, c.stages);
    let (qk, v) = (padded(spec.head_dim), padded(spec.head_dim_v));
    let tiles = q * 128 * qk * 2 + s * (n * qk * 2 + n * v * 2);
    let stats = q * 128 * 4 * 3;
    let barriers = 5 * s + 7 * q;
    tiles + stats + 8 * barriers + 8
}

/// traits.cuh's register split: the launch's share per thread, and what a softmax thread
/// gets once the correction and issuing warpgroups have given theirs back.
fn launch_registers(c: &TileConfig) -> u32 {
    (65536 / threads(c)) / 8 * 8
}
/// traits.cuh's kIssueRegs and kCorrectionRegs.
fn issue_and_correction_registers(spec: &KernelSpec, c: &TileConfig) -> (u32, u32) {
    match (q_stages(c), padded(spec.head_dim)) {
        (1, _) => (96, 160),
        (_, 0..=128) => (56, 72),
        _ => (48, 80),
    }
}
fn softmax_registers(spec: &KernelSpec, c: &TileConfig) -> u32 {
    let q = q_stages(c);
    let (issue, correction) = issue_and_correction_registers(spec, c);
    ((launch_registers(c) * (q + 2) - issue - correction) / q) / 8 * 8
}

/// What a config holds beyond the footprint's shared memory: tensor-memory columns and
/// each warp role's registers after setmaxnreg (ptxas reports the launch's only).
pub(super) fn resource_note(spec: &KernelSpec, c: &TileConfig) -> String {
    let (issue, correction) = issue_and_correction_registers(spec, c);
    format!(
        "TMEM {} of 512 columns ({} used); registers per thread: softmax {}, correction {correction}, load/MMA {issue}",
        tmem_columns(spec, c),
        tmem_columns_used(spec, c),
        softmax_registers(spec, c),
    )
}

/// What a softmax thread holds: a key block of f32 scores (P's 16-bit pairs take their
/// registers as they die) and about 64 more (addresses, row state, the loop): ptxas
/// spilled 192 keys at 248 registers, fits 128 at 192.
fn softmax_registers_needed(c: &TileConfig) -> u32 {
    c.block_n + 64
}

pub(super) fn check(spec: &KernelSpec, c: &TileConfig) -> Result<Footprint, Rejection> {
    let reject = |kind, reason: String| Err(Rejection { kind, reason });
    if spec.arch != Arch::Sm100 {
        return reject(
            RejectKind::Shape,
            format!("tcgen05 is sm100's (sm_100a); {} has none", spec.arch),
        );
    }
    if !supports_spec(spec) {
        return reject(
            RejectKind::Shape,
            "the blackwell template builds bf16 and fp16 over strided or packed K/V (no FP8, no pages yet)".into(),
        );
    }
    let q = q_stages(c);
    if !(q == 1 || q == 2) || c.block_m != 128 * q || c.warps != 4 * (q + 2) {
        return reject(
            RejectKind::Shape,
            format!(
                "block_m is 128 per Q stage (one or two) and warps 4 per stage plus 8; got block_m {} warps {}",
                c.block_m, c.warps
            ),
        );
    }
    if c.block_n % 64 != 0 || c.block_n > 256 || c.stages < 2 {
        return reject(
            RejectKind::Shape,
            format!(
                "key blocks of whole 64-key P stores up to the MMA's N of 256, and a ring of 2 or more stages; got block_n {} stages {}",
                c.block_n, c.stages
            ),
        );
    }
    let emu = c.switch(EXP2_EMU, 0);
    if emu != 0 && (c.switch(LAZY_RESCALE, 0) != 1 || emu > c.block_n / 8) {
        return reject(
            RejectKind::Shape,
            format!("exp2emu {emu}: a lazy tile with at most one emulated group per 8 keys"),
        );
    }
    if let Some(other) = c
        .switches
        .keys()
        .find(|k| ![LAZY_RESCALE, EXP2_EMU].contains(&k.as_str()))
    {
        return reject(
            RejectKind::Shape,
            format!("the blackwell template has no switch {other}"),
        );
    }
    let columns = tmem_columns_used(spec, c);
    if columns > TMEM_COLUMNS {
        return reject(
            RejectKind::SharedMemory,
            format!(
                "S and O of {q} Q stage(s) take {columns} tensor-memory columns, more than the {TMEM_COLUMNS} an SM has"
            ),
        );
    }
    let smem = smem_bytes(spec, c);
    let limit = spec.arch.max_smem_per_block();
    if smem > limit {
        return reject(
            RejectKind::SharedMemory,
            format!("{smem} bytes of shared memory, more than the {limit} a block may have"),
        );
    }
    let needed = softmax_registers_needed(c);
    let granted = softmax_registers(spec, c);
    if needed > granted {
        return reject(
            RejectKind::Registers,
            format!(
                "a softmax thread needs about {needed} registers for {} keys; {q} Q stage(s) leave it {granted}",
                c.block_n
            ),
        );
    }
    Ok(Footprint {
        threads: threads(c),
        block_m: c.block_m,
        smem_bytes: smem,
        est_registers: launch_registers(c),
        pack_gqa: false,
        tma_rows: c.block_n,
        persistent_per_sm: 0,
        section_key_bytes: 0,
        causal_m_blocks_in_y: false,
        split_head_dim_v: 0,
        cluster_m: 0,
        varlen_tiles: false,
    })
}

/// The default, untimed (no sm100 GPU here): FA4's layout where it fits, two Q stages
/// over 128 keys with lazy rescaling; d192/128 over 64 keys (two stages' S and O in
/// TMEM), d256 one stage over 64 keys (its Q and K/V ring in shared memory). The ring as
/// deep as shared memory allows, up to 3.
pub(super) fn default_config(spec: &KernelSpec) -> TileConfig {
    let (q, n) = match padded(spec.head_dim) {
        0..=128 => (2, 128),
        129..=192 => (2, 64),
        _ => (1, 64),
    };
    for stages in [3, 2] {
        let c = config(q, n, stages, true);
        if check(spec, &c).is_ok() {
            return c;
        }
    }
    config(q, n, 2, true)
}

/// The instruction and shared-memory descriptors a config's kernel issues with.
struct Descriptors {
    idesc_qk: u32,
    idesc_pv: u32,
    k_major: u64,
    v: u64,
}

fn descriptors(spec: &KernelSpec, c: &TileConfig) -> Descriptors {
    let format = OperandFormat::from(spec.dtype);
    let v_cols = padded(spec.head_dim_v);
    let instr = |b_major, n| {
        InstrDescriptor::dense(
            format,
            format,
            AccumFormat::F32,
            (Major::K, b_major),
            128,
            n,
        )
        .encode()
        .unwrap_or_else(|e| panic!("{spec} {c}: no tcgen05 MMA of N = {n}: {e}"))
    };
    let smem = |major, leading| {
        SmemDescriptor {
            start_address: 0,
            major,
            swizzle: Swizzle::Bytes128,
            leading,
            stride_byte_offset: 1024,
            base_offset: 0,
        }
        .encode()
        .unwrap_or_else(|e| panic!("{spec} {c}: {e}"))
    };
    Descriptors {
        idesc_qk: instr(Major::K, c.block_n),
        idesc_pv: instr(Major::Mn, v_cols),
        // Q and K: 8-row groups 1024 bytes apart (K-major swizzled: no leading offset)
        k_major: smem(Major::K, Leading::Unused),
        // V: 64-column groups of the head dim a tile's column block apart, 8 keys 1024 bytes
        v: smem(Major::Mn, Leading::Offset(c.block_n * 128)),
    }
}

pub(super) fn render_values(
    spec: &KernelSpec,
    c: &TileConfig,
    fp: &Footprint,
) -> Vec<(&'static str, Value)> {
    let d = descriptors(spec, c);
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
        ("q_stages", json!(q_stages(c))),
        ("block_m", json!(c.block_m)),
        ("block_m_stage", json!(128)),
        ("block_n", json!(c.block_n)),
        ("pv_n", json!(padded(spec.head_dim_v))),
        ("stages", json!(c.stages)),
        ("sinks", json!(spec.features.sinks)),
        ("softcap", json!(spec.features.softcap)),
        ("lazy_rescale", json!(c.switch(LAZY_RESCALE, 0) == 1)),
        ("exp2_emu_every", json!(c.switch(EXP2_EMU, 0))),
        ("idesc_qk", json!(cuda_u32(d.idesc_qk))),
        ("idesc_pv", json!(cuda_u32(d.idesc_pv))),
        ("desc_k_major", json!(cuda_u64(d.k_major))),
        ("desc_v", json!(cuda_u64(d.v))),
        ("threads", json!(fp.threads)),
        ("smem_bytes", json!(fp.smem_bytes)),
        ("tmem_columns", json!(tmem_columns(spec, c))),
    ]
}

#[cfg(test)]
mod tests;
