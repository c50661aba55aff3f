//! A small cache manifest the unit tests select from, with nothing on disk but the
//! manifest (no cubins).

use std::collections::BTreeMap;

use fa4_spec::manifest::{
    ArchEntry, KernelEntry, Manifest, SpecEntry, MANIFEST_FILE, MANIFEST_FORMAT,
};
use fa4_spec::{Arch, Dtype, Features, Footprint, KernelSpec, MaskKind, Template, TileConfig};

use crate::{CacheError, KernelCache, Query};

pub(crate) fn spec(head_dim: u32, mask: MaskKind) -> KernelSpec {
    KernelSpec::new(Arch::Sm90, Dtype::Bf16, head_dim, mask)
}

/// A portable tile of `block_m` x `block_n` over 8 warps.
pub(crate) fn tile(block_m: u32, block_n: u32) -> TileConfig {
    TileConfig {
        block_m,
        block_n,
        warps: 8,
        stages: 2,
        switches: BTreeMap::new(),
    }
}

pub(crate) fn entry(spec: KernelSpec, config: TileConfig) -> KernelEntry {
    let footprint = Footprint {
        threads: config.warps * 32,
        block_m: config.block_m,
        smem_bytes: 48 * 1024,
        est_registers: 200,
        pack_gqa: false,
        tma_rows: 0,
        persistent_per_sm: 0,
        section_key_bytes: 0,
        causal_m_blocks_in_y: true,
        split_head_dim_v: 0,
        cluster_m: 0,
        varlen_tiles: false,
    };
    KernelEntry {
        template: Template::Portable,
        spec,
        config,
        footprint,
        cubin: "sm90/x.cubin".into(),
        cubin_hash: "0".into(),
        code_hash: String::new(),
        registers: 200,
        varlen_cubin_hash: None,
    }
}

/// d128 causal tuned at buckets 1024 (default kept) and 4096 (another tile); d64
/// causal untuned.
pub(crate) fn manifest() -> Manifest {
    let d128 = spec(128, MaskKind::Causal);
    let d64 = spec(64, MaskKind::Causal);
    let default128 = tile(128, 64);
    let other = tile(64, 64);
    let kernels = BTreeMap::from([
        ("a_d128_default".to_string(), entry(d128, default128)),
        ("b_d128_tuned".to_string(), entry(d128, other)),
        ("b_d128_ragged".to_string(), entry(d128, tile(128, 128))),
        ("c_d64_default".to_string(), entry(d64, tile(128, 128))),
    ]);
    let specs = BTreeMap::from([
        (
            d128.tag(),
            SpecEntry {
                default: "a_d128_default".into(),
                tuned: BTreeMap::from([
                    (1024, "a_d128_default".into()),
                    (4096, "b_d128_tuned".into()),
                ]),
                borrowed_from: None,
                // The H100 kept the default at 4096.
                tuned_by_gpu: BTreeMap::from([(
                    "NVIDIA H100 80GB HBM3 (132 SMs)".into(),
                    BTreeMap::from([(4096, "a_d128_default".into())]),
                )]),
                // Ragged batches: another tile at 4096 (none tuned at 1024).
                tuned_ragged: BTreeMap::from([(4096, "b_d128_ragged".into())]),
                tuned_ragged_by_gpu: BTreeMap::new(),
            },
        ),
        (
            d64.tag(),
            SpecEntry {
                default: "c_d64_default".into(),
                ..Default::default()
            },
        ),
    ]);
    Manifest {
        format: MANIFEST_FORMAT.into(),
        fa4_gen_version: "0".into(),
        nvrtc: "13.0".into(),
        tuning_db_hash: "0".into(),
        archs: BTreeMap::from([(
            Arch::Sm90,
            ArchEntry {
                tuned_on: Some("NVIDIA H200 (132 SMs)".into()),
                specs,
            },
        )]),
        kernels,
    }
}

pub(crate) fn open(m: &Manifest) -> (tempfile::TempDir, Result<KernelCache, CacheError>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(MANIFEST_FILE),
        serde_json::to_string(m).unwrap(),
    )
    .unwrap();
    let cache = KernelCache::open(dir.path());
    (dir, cache)
}

pub(crate) fn query(head_dim: u32, seqlen: u32) -> Query {
    Query {
        arch: Arch::Sm90,
        dtype: Dtype::Bf16,
        head_dim,
        head_dim_v: head_dim,
        mask: MaskKind::Causal,
        features: Features::default(),
        max_seqlen_q: seqlen,
        window: (-1, -1),
        ragged: false,
    }
}
