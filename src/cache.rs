//! The shipped kernel cache: which kernel serves each (spec, bucket), built from the
//! tuning database's export and the templates into `generated/`.
//!
//! For every spec a template offers on an arch, the cache holds the heuristic default
//! and, where the export has records for that arch, each bucket's tuned choice
//! ([`crate::db::Record::choice`]). The manifest (`generated/manifest.json`) is sorted
//! JSON with no dates or timings in it, and cubins are compiled under their file name
//! (not a path), so building twice from the same inputs gives the same bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fa4_spec::{fnv1a64, Arch, Features, KernelSpec, TileConfig};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::compile::resources;
use crate::compile::Nvrtc;
use crate::db::Record;
use crate::fsutil::{write_atomic, WriteError};
use crate::render::{RenderError, Renderer, KERNEL_ENTRY};
use crate::space::{self, Candidate, Footprint, Template};

/// The manifest's format. 2: causal Hopper kernels take their tiles from a grid in
/// sections (`Footprint::section_key_bytes`), which a runtime reading format 1 would
/// launch as `m-blocks x heads x batch` and get wrong tiles from. 3: causal portable
/// kernels read their m-block from the grid's y (`Footprint::causal_m_blocks_in_y`),
/// which a runtime reading format 2 would not know and launch wrongly.
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
    pub registers: u32,
}

/// What serves one spec: the default, and the tuned choice per bucket where tuned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecEntry {
    pub default: String,
    /// Bucket upper bound (seqlen) -> kernel id, ascending.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tuned: BTreeMap<u32, String>,
}

/// The kernels of one arch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchEntry {
    /// The GPU the tuned choices were measured on; none: every spec serves its default.
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

#[derive(Debug, thiserror::Error)]
pub enum CacheBuildError {
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("NVRTC could not compile {id}: {log}")]
    Compile { id: String, log: String },
    #[error(transparent)]
    Nvrtc(#[from] crate::compile::NvrtcError),
    #[error("{id}: {why}; the cache ships only kernels that build cleanly")]
    Rejected { id: String, why: String },
    #[error(
        "{count} kernels did not build; the cache ships only kernels that build cleanly:\n{all}"
    )]
    Several { count: usize, all: String },
}

/// The hash a manifest records of the tuning-db exports it was built from (their
/// texts, in the order given).
pub fn export_hash<S: AsRef<str>>(texts: &[S]) -> String {
    let each: String = texts
        .iter()
        .map(|t| format!("{:016x}", fnv1a64(t.as_ref().as_bytes())))
        .collect();
    format!("{:016x}", fnv1a64(each.as_bytes()))
}

/// Per arch the GPU its tuned choices come from, and every (candidate, tuned bucket or
/// `None` for the default) the cache needs.
pub type Plan = (
    BTreeMap<Arch, Option<String>>,
    Vec<(Candidate, Option<u32>)>,
);

/// What the cache serves: every head dim, dtype and mask, with these feature sets, each
/// from the one template that serves it ([`Template::serves`]).
pub fn specs(archs: &[Arch], features: &[Features]) -> Vec<(Template, KernelSpec)> {
    let mut specs = space::Selection {
        features: features.to_vec(),
        ..space::Selection::all(archs.to_vec())
    }
    .specs()
    .expect("every arch has a template and the head dims it offers");
    specs.retain(|(t, spec)| t.serves(spec));
    specs
}

/// The kernels the cache needs for `specs`: every spec's default (bucket `None`), plus
/// the tuned choices in `records` (for records of several GPUs of one arch, the GPU with
/// the most records), and per arch the GPU they were measured on.
pub fn plan(specs: &[(Template, KernelSpec)], records: &[Record]) -> Plan {
    let mut archs: Vec<Arch> = specs.iter().map(|(_, s)| s.arch).collect();
    archs.sort();
    archs.dedup();
    let mut tuned_on = BTreeMap::new();
    let mut wanted: Vec<(Candidate, Option<u32>)> = Vec::new();
    let gpu_of = |r: &Record| format!("{} ({} SMs)", r.device.name, r.device.sm_count);
    for &arch in &archs {
        let mut by_gpu: BTreeMap<String, usize> = BTreeMap::new();
        for r in records.iter().filter(|r| r.spec.arch == arch) {
            *by_gpu.entry(gpu_of(r)).or_default() += 1;
        }
        let gpu = by_gpu
            .iter()
            .max_by_key(|(name, n)| (**n, std::cmp::Reverse((*name).clone())))
            .map(|(g, _)| g.clone());
        for (template, spec) in specs.iter().filter(|(_, s)| s.arch == arch) {
            wanted.push((space::default_candidate(*template, spec), None));
        }
        if let Some(gpu) = &gpu {
            let served = |r: &Record| specs.iter().any(|(t, s)| *t == r.template && *s == r.spec);
            for r in records
                .iter()
                .filter(|r| r.spec.arch == arch && served(r) && gpu_of(r) == *gpu)
            {
                if let Some(choice) = r.choice() {
                    let c = Candidate {
                        template: r.template,
                        spec: r.spec,
                        config: choice.config.clone(),
                    };
                    wanted.push((c, Some(r.bucket.seqlen)));
                }
            }
        }
        tuned_on.insert(arch, gpu);
    }
    (tuned_on, wanted)
}

/// Builds the cache for `archs` into `out` from the export's `records` (whose bytes
/// hash to `export_hash`). Compiles in parallel on the current rayon pool.
pub fn build(
    nvrtc: &Nvrtc,
    renderer: &Renderer,
    specs: &[(Template, KernelSpec)],
    records: &[Record],
    export_hash: &str,
    out: &Path,
) -> Result<Manifest, CacheBuildError> {
    let (tuned_on, wanted) = plan(specs, records);
    // Unique kernels, by id.
    let mut kernels: BTreeMap<String, (Candidate, Footprint)> = BTreeMap::new();
    for (c, _) in &wanted {
        let footprint =
            c.template
                .check(&c.spec, &c.config)
                .map_err(|r| CacheBuildError::Rejected {
                    id: renderer.kernel_id(c).0,
                    why: r.reason,
                })?;
        kernels.insert(renderer.kernel_id(c).0, (c.clone(), footprint));
    }
    let headers: Vec<(&str, &str)> = renderer.templates().headers().collect();
    let results: Vec<Result<(String, KernelEntry), CacheBuildError>> = kernels
        .par_iter()
        .map(
            |(id, (c, footprint))| -> Result<(String, KernelEntry), CacheBuildError> {
                let rendered = renderer.render(c, footprint)?;
                let arch = c.spec.arch;
                let name = format!("{id}.cu");
                let output = nvrtc
                    .compile(&name, &rendered.source, &headers, &rendered.options)?
                    .map_err(|f| CacheBuildError::Compile {
                        id: id.clone(),
                        log: f.log,
                    })?;
                let res = resources::parse(&output.log, KERNEL_ENTRY).ok_or_else(|| {
                    CacheBuildError::Rejected {
                        id: id.clone(),
                        why: "ptxas printed no resource report".into(),
                    }
                })?;
                if let Some(why) = res.disqualification() {
                    return Err(CacheBuildError::Rejected {
                        id: id.clone(),
                        why,
                    });
                }
                let src_rel = format!("{arch}/src/{name}");
                let cubin_rel = format!("{arch}/{id}.cubin");
                write_if_differs(&out.join(&src_rel), rendered.source.as_bytes())?;
                write_if_differs(&out.join(&cubin_rel), &output.cubin)?;
                Ok((
                    id.clone(),
                    KernelEntry {
                        template: c.template,
                        spec: c.spec,
                        config: c.config.clone(),
                        footprint: *footprint,
                        cubin: cubin_rel,
                        cubin_hash: format!("{:016x}", fnv1a64(&output.cubin)),
                        registers: res.registers,
                    },
                ))
            },
        )
        .collect();
    // Every failure at once: a cache build is long, and one rebuild should fix them all.
    let (built, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    let mut failed: Vec<CacheBuildError> = failed.into_iter().filter_map(Result::err).collect();
    match failed.len() {
        0 => {}
        1 => return Err(failed.remove(0)),
        n => {
            let all: Vec<String> = failed.iter().map(|e| e.to_string()).collect();
            return Err(CacheBuildError::Several {
                count: n,
                all: all.join("\n"),
            });
        }
    }
    let kernel_map: BTreeMap<String, KernelEntry> = built.into_iter().map(Result::unwrap).collect();

    let arch_entries = arch_entries(renderer, &tuned_on, &wanted);
    let manifest = Manifest {
        format: MANIFEST_FORMAT.into(),
        fa4_gen_version: env!("CARGO_PKG_VERSION").into(),
        nvrtc: nvrtc.version_string(),
        tuning_db_hash: export_hash.into(),
        archs: arch_entries,
        kernels: kernel_map,
    };
    // Files of kernels no longer in the cache go; the manifest is written last.
    remove_unlisted(out, &manifest)?;
    write_atomic(
        &out.join(MANIFEST_FILE),
        (serde_json::to_string_pretty(&manifest).expect("manifest serialises") + "\n").as_bytes(),
    )?;
    Ok(manifest)
}

/// Per arch, what serves each spec: the kernel ids of the default and of the tuned
/// choices in `wanted` (from [`plan`]).
pub fn arch_entries(
    renderer: &Renderer,
    tuned_on: &BTreeMap<Arch, Option<String>>,
    wanted: &[(Candidate, Option<u32>)],
) -> BTreeMap<Arch, ArchEntry> {
    let mut out: BTreeMap<Arch, ArchEntry> = tuned_on
        .iter()
        .map(|(arch, gpu)| {
            (
                *arch,
                ArchEntry {
                    tuned_on: gpu.clone(),
                    specs: BTreeMap::new(),
                },
            )
        })
        .collect();
    for (c, bucket) in wanted {
        let id = renderer.kernel_id(c).0;
        let entry = out
            .get_mut(&c.spec.arch)
            .expect("planned arch")
            .specs
            .entry(c.spec.tag())
            .or_insert_with(|| SpecEntry {
                default: String::new(),
                tuned: BTreeMap::new(),
            });
        match bucket {
            None => entry.default = id,
            Some(b) => {
                entry.tuned.insert(*b, id);
            }
        }
    }
    out
}

/// Writes only when the bytes differ, so an unchanged cache keeps its files' times.
fn write_if_differs(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    write_atomic(path, bytes)
}

/// Removes cubins and sources under `out/<arch>/` that the manifest does not list.
fn remove_unlisted(out: &Path, m: &Manifest) -> Result<(), WriteError> {
    let listed: std::collections::BTreeSet<PathBuf> = m
        .kernels
        .iter()
        .flat_map(|(id, k)| {
            [
                out.join(&k.cubin),
                out.join(format!("{}/src/{id}.cu", k.spec.arch)),
            ]
        })
        .collect();
    for arch in m.archs.keys() {
        for dir in [out.join(arch.name()), out.join(arch.name()).join("src")] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                let ours = p.extension().is_some_and(|x| x == "cubin" || x == "cu");
                if ours && !listed.contains(&p) {
                    std::fs::remove_file(&p).map_err(|e| WriteError::new(&p, e))?;
                }
            }
        }
    }
    Ok(())
}
