//! Config space of the Hopper (wgmma) template, sm90 only. The arithmetic mirrors
//! `templates/include/fa4/hopper/traits.cuh`; the rendered kernel asserts that its
//! shared-memory size equals the one computed here.
//!
//! A config's `warps` is four per warpgroup, and each warpgroup owns 64 query rows, so
//! `block_m = 16 * warps`; `block_n` is the N of the QK wgmma, `head_dim_v` the N of the PV
//! wgmma.

use std::collections::BTreeMap;

use fa4_spec::{Arch, Dtype, KernelSpec, MaskKind, TileConfig};
use serde_json::{json, Value};

use super::{Footprint, RejectKind, Rejection};

/// Head dims of whole 64-column blocks (the 128-byte swizzle atom of wgmma's operands).
pub(super) const HEAD_DIMS: &[(u32, u32)] = &[(64, 64), (128, 128), (192, 192), (256, 256)];

/// Switch: pack the query heads that share a KV head into one block's rows (as the
/// portable template's).
pub const PACK_GQA: &str = super::portable::PACK_GQA;

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

pub(super) fn candidates(_spec: &KernelSpec) -> Vec<TileConfig> {
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
    out
}

pub(super) fn smem_bytes(spec: &KernelSpec, c: &TileConfig) -> u32 {
    let q_or_o = c.block_m * spec.head_dim.max(spec.head_dim_v);
    let kv_stage = c.block_n * (spec.head_dim + spec.head_dim_v);
    (q_or_o + c.stages * kv_stage) * spec.dtype.size() + 16
}

/// Registers per thread: the f32 accumulators of O (head_dim_v / 2) and S (block_n / 2),
/// P packed to 16 bits (block_n / 4), and an allowance for addresses and softmax state.
pub(super) fn est_registers(spec: &KernelSpec, c: &TileConfig) -> u32 {
    spec.head_dim_v / 2 + c.block_n / 2 + c.block_n / 4 + 64
}

pub(super) fn check(spec: &KernelSpec, c: &TileConfig) -> Result<Footprint, Rejection> {
    let reject = |kind, reason: String| Err(Rejection { kind, reason });
    if spec.arch != Arch::Sm90 {
        return reject(
            RejectKind::Shape,
            format!("wgmma is sm90's (sm_90a); {} has none", spec.arch),
        );
    }
    if c.warps % 4 != 0 || !(1..=3).contains(&(c.warps / 4)) || c.block_m != 16 * c.warps {
        return reject(
            RejectKind::Shape,
            format!(
                "block_m {} over {} warps is not 64 rows per warpgroup of 4 warps (1 to 3)",
                c.block_m, c.warps
            ),
        );
    }
    if c.block_n % 16 != 0 || c.block_n == 0 || c.block_n > 256 {
        return reject(
            RejectKind::Shape,
            format!("block_n {} is not a multiple of 16 up to 256", c.block_n),
        );
    }
    if spec.head_dim % 64 != 0 || spec.head_dim_v % 64 != 0 || spec.head_dim_v > 256 {
        return reject(
            RejectKind::Shape,
            "head dims must be 64-column blocks, V's at most 256".into(),
        );
    }
    if !(1..=2).contains(&c.stages) {
        return reject(
            RejectKind::Shape,
            format!("{} stages (1 or 2 supported)", c.stages),
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
    // One block per SM: 64K registers over the block's threads, at most 255 each.
    let threads = c.warps * 32;
    let budget = (65536 / threads).min(255) / 8 * 8;
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
    })
}

/// The heuristic default: per head dim the config with the best geomean over the FA3
/// grid (causal and not, seqlen 512 to 16k) among every config of the template
/// (`bench/results/2026-11-30-h200-*-hopper-bench-all.json.gz`): one warpgroup of 64 rows
/// over 64 keys at d64 and 128 keys at d128 (three to four blocks per SM, whose softmax
/// and GEMMs interleave), two warpgroups over 64 keys in two stages at d192 and d256.
/// Then smaller tiles, for feature sets that need more registers (ptxas has the last
/// word: a test compiles every default without spills).
pub(super) fn default_config(spec: &KernelSpec) -> TileConfig {
    // d128 with paged K/V: one warpgroup copying 128-key tiles holds 16 page lookups
    // per thread and spills; two warpgroups share them. Sliding windows see a few key
    // blocks per query block: one warpgroup over 64 keys ran 1.10 to 1.18x the
    // defaults above on window (128, 0) (`bench/results/2026-11-30-h200-6f2d618-hopper-bench-all-local.json`).
    let local = spec.mask == MaskKind::Local;
    // d192/d256 windows over pages keep two warpgroups: one spills there.
    let measured: &[(u32, u32, u32)] = match (spec.head_dim, spec.features.paged_kv, local) {
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
    if spec.head_dim <= 64 && spec.features.paged_kv {
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
    let mut ns = vec![c.block_n, spec.head_dim_v];
    ns.sort_unstable();
    ns.dedup();
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
        ("warpgroups", json!(c.warps / 4)),
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
}
