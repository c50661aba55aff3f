//! The kernel cache's contract: what `fa4-gen build-cache` writes into
//! `generated/manifest.json` and the runtime reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Arch, Footprint, KernelSpec, Template, TileConfig};

/// The manifest's format. 2: causal Hopper kernels take their tiles from a grid in
/// sections (`Footprint::section_key_bytes`), which a runtime reading format 1 would
/// launch as `m-blocks x heads x batch` and get wrong tiles from. 3: causal portable
/// kernels read their m-block from the grid's y (`Footprint::causal_m_blocks_in_y`),
/// which a runtime reading format 2 would not know and launch wrongly. (A kernel's
/// varlen cubin, `KernelEntry::varlen_cubin_hash`, needs no new format: a runtime that
/// does not know it launches the dense cubin with the dense grid.)
pub const MANIFEST_FORMAT: &str = "fa4-gen kernel cache 3";
pub const MANIFEST_FILE: &str = "manifest.json";

/// One kernel in the cache: how to launch it and where its cubin is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelEntry {
    pub template: Template,
    pub spec: KernelSpec,
    pub config: TileConfig,
    /// Launch parameters: threads, rows per block, dynamic shared memory, pack-GQA.
    pub footprint: Footprint,
    /// Relative to the cache folder.
    pub cubin: String,
    /// FNV-1a 64 of the cubin, hex: a cubin that does not match is never loaded.
    pub cubin_hash: String,
    /// The kernel's machine-code identity (`compile::code::code_hash`): equal across
    /// template edits that leave its instructions and resources alone, while its id and
    /// cubin hash change with any edit.
    #[serde(default)]
    pub code_hash: String,
    pub registers: u32,
    /// FNV-1a 64 of the kernel's varlen cubin (`varlen_cubin_path`), where it has one
    /// (`Footprint::varlen_tiles`): varlen batches launch it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub varlen_cubin_hash: Option<String>,
}

/// What serves one spec: the default, and the tuned choice per bucket where tuned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecEntry {
    pub default: String,
    /// Bucket upper bound (seqlen) -> kernel id, ascending.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tuned: BTreeMap<u32, String>,
    /// Set where the spec has no tuned record of its own: `tuned` then holds the tuned
    /// choices of this related spec (its tag), built for this one ([`donor`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowed_from: Option<String>,
    /// The tuned choices measured on the arch's other GPUs (not `ArchEntry::tuned_on`):
    /// GPU, named as `tuned_on` names it ("NVIDIA H100 80GB HBM3 (132 SMs)") -> bucket ->
    /// kernel id. A device of that name is served these; any other device of the arch
    /// `tuned`. (A runtime that does not know the field serves `tuned` to every device.)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tuned_by_gpu: BTreeMap<String, BTreeMap<u32, String>>,
    /// Ragged bucket upper bound -> kernel id: the choices tuned on varlen batches of
    /// several sequences ([`Bucket::of_batch`](crate::Bucket::of_batch)), which serve
    /// such batches in their bucket; other buckets and batches are served `tuned`. (A
    /// runtime that does not know the field serves `tuned` to every batch.)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tuned_ragged: BTreeMap<u32, String>,
    /// `tuned_ragged` of the arch's other GPUs, as `tuned_by_gpu`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tuned_ragged_by_gpu: BTreeMap<String, BTreeMap<u32, String>>,
}

impl SpecEntry {
    /// Every kernel id the entry names: the default, then the tuned choices (dense and
    /// ragged, this GPU's and the others').
    pub fn kernel_ids(&self) -> impl Iterator<Item = &String> {
        let others = self
            .tuned_by_gpu
            .values()
            .chain(self.tuned_ragged_by_gpu.values());
        std::iter::once(&self.default)
            .chain(self.tuned.values())
            .chain(self.tuned_ragged.values())
            .chain(others.flat_map(|t| t.values()))
    }
}

/// The kernels of one arch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchEntry {
    /// The GPU the tuned choices were measured on (the arch's GPU with the most tuning
    /// records: devices without their own, `SpecEntry::tuned_by_gpu`, are served its
    /// choices); none: every spec serves its default.
    pub tuned_on: Option<String>,
    /// Spec tag -> what serves it.
    pub specs: BTreeMap<String, SpecEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub fa4_gen_version: String,
    pub nvrtc: String,
    /// FNV-1a 64 of the tuning-db export the cache was built from.
    pub tuning_db_hash: String,
    pub archs: BTreeMap<Arch, ArchEntry>,
    /// Kernel id -> kernel.
    pub kernels: BTreeMap<String, KernelEntry>,
}
