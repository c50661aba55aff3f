//! The shipped kernel cache: which kernel serves each (spec, bucket), built from the
//! tuning database's export and the templates into `generated/`.
//!
//! For every spec a template offers on an arch, the cache holds the heuristic default
//! and, where the export has records for that arch, each bucket's tuned choice
//! ([`crate::db::Record::choice`]). The manifest (`generated/manifest.json`) is sorted
//! JSON with no dates or timings in it, and cubins are compiled under their file name
//! (not a path), so building twice from the same inputs gives the same bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fa4_spec::{fnv1a64, Arch, Bucket, Dtype, Features, KernelSpec, TileConfig};
use rayon::prelude::*;

use crate::compile::{code, resources, varlen_build};
use crate::compile::{Nvrtc, Reporter};
use crate::db::{self, GpuId, Record};
use crate::fsutil::{write_atomic, WriteError};
use crate::render::{RenderError, Renderer};
use crate::space::{self, Candidate, Footprint, Template, TemplateSpace};
use fa4_spec::manifest::{
    ArchEntry, KernelEntry, Manifest, SpecEntry, MANIFEST_FILE, MANIFEST_FORMAT,
};
use fa4_spec::KERNEL_ENTRY;

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
    #[error(
        "{out}/manifest.json was built from another tuning-db export, NVRTC or cache format, \
         and this build would keep some of its entries; build the whole cache (`fa4-gen \
         build-cache` without --arch, --head-dim or --features)"
    )]
    Mixed { out: String },
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

/// What a cache holds, before anything is compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Per arch, the GPU its tuned choices come from (none: every spec serves its default).
    pub tuned_on: BTreeMap<Arch, Option<String>>,
    /// Every (candidate, tuned bucket or `None` for the default) the cache needs.
    pub wanted: Vec<(Candidate, Option<Bucket>)>,
    /// The specs without tuned records of their own that serve a related spec's tuned
    /// choices ([`donor`]): spec -> that spec.
    pub borrowed: BTreeMap<KernelSpec, KernelSpec>,
    /// The tuned choices of each arch's other GPUs (those not `tuned_on`): (GPU, the
    /// choice, its bucket), served to devices of that name (`SpecEntry::tuned_by_gpu`).
    pub by_gpu: Vec<(String, Candidate, Bucket)>,
}

/// The spec whose tuned choices serve `spec` where `spec` was not tuned itself: the same
/// spec without attention sinks. A sink is one logit per row, added to the softmax's
/// denominator once after the key loop, so it leaves a tile's loop as it was: where both
/// were tuned (Hopper d64, causal and local, bf16 and fp16), the plain spec's winner timed
/// within 1% of the sinks spec's own winner in 18 of 22 buckets (at most 8% off), while
/// the heuristic default takes 1.01 to 1.97x the tuned choice's time.
/// Soft-capping and paging change what bounds a tile (the MUFU, the gather), so nothing
/// is borrowed across them.
pub fn donor(spec: &KernelSpec) -> Option<KernelSpec> {
    spec.features.sinks.then_some(KernelSpec {
        features: Features {
            sinks: false,
            ..spec.features
        },
        ..*spec
    })
}

/// What the cache serves: every dtype and mask at these head dims (all offered, where
/// none are given), with these feature sets, each from the one template that serves it
/// ([`TemplateSpace::serves`]). FP8 (e4m3) too, where a template offers it (sm90's
/// Hopper template, no score features yet). Specs held back until their defaults pass
/// `verify` on a GPU (`space::awaits_verify`: none now) are built only
/// `with_held_back`, for that check. A head dim no template offers for an arch is
/// an error.
pub fn specs(
    archs: &[Arch],
    head_dims: &[(u32, Option<u32>)],
    features: &[Features],
    with_held_back: bool,
) -> Result<Vec<(Template, KernelSpec)>, space::SelectionError> {
    let selection = space::Selection {
        features: features.to_vec(),
        head_dims: head_dims.to_vec(),
        ..space::Selection::all(archs.to_vec())
    };
    let mut specs = selection.specs()?;
    match (space::Selection {
        dtypes: vec![Dtype::E4m3],
        ..selection
    })
    .specs()
    {
        Ok(fp8) => specs.extend(fp8),
        Err(space::SelectionError::Dtype { .. }) => {} // none offered among these
        Err(e) => return Err(e),
    }
    // (no template serves a held-back spec: kept only when asked for)
    specs.retain(|(t, spec)| {
        t.serves(spec) || (with_held_back && space::awaits_verify(spec) && t.supports(spec))
    });
    Ok(specs)
}

/// Whether a spec never tuned serves its [`donor`]'s tuned choices or its heuristic
/// default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untuned {
    /// The heuristic default (the shipped cache's, until the borrowed kernels have been
    /// checked on a GPU: `fa4-gen verify` of each, `bench/borrowed_check.sh`).
    Default,
    /// The donor's choice per bucket, built for the spec.
    Borrow,
}

/// The kernels the cache needs for `specs`: every spec's default (bucket `None`), plus
/// the tuned choices in `records` (for records of several GPUs of one arch, the GPU with
/// the most records serves every device, and each other GPU's choices serve devices of
/// its name: [`Plan::by_gpu`]), and per arch the GPU they were measured on. With
/// [`Untuned::Borrow`], a spec with no record of its own whose [`donor`] has records
/// serves the donor's choices, each built for the spec where the config space admits it
/// there.
pub fn plan(specs: &[(Template, KernelSpec)], records: &[Record], untuned: Untuned) -> Plan {
    let mut archs: Vec<Arch> = specs.iter().map(|(_, s)| s.arch).collect();
    archs.sort();
    archs.dedup();
    let mut tuned_on = BTreeMap::new();
    let mut wanted: Vec<(Candidate, Option<Bucket>)> = Vec::new();
    let mut borrowed = BTreeMap::new();
    let mut by_gpu = Vec::new();
    for &arch in &archs {
        let gpu = db::served_gpu(records, arch, None);
        // Every other GPU's own choices, for the specs the cache serves.
        for r in records.iter().filter(|r| {
            r.spec.arch == arch
                && gpu.as_ref().is_some_and(|g| GpuId::of(r) != *g)
                && specs.iter().any(|(t, s)| *t == r.template && *s == r.spec)
        }) {
            if let Some(choice) = r.choice() {
                let c = Candidate {
                    template: r.template,
                    spec: r.spec,
                    config: choice.config.clone(),
                };
                by_gpu.push((GpuId::of(r).to_string(), c, r.bucket));
            }
        }
        for (template, spec) in specs.iter().filter(|(_, s)| s.arch == arch) {
            wanted.push((space::default_candidate(*template, spec), None));
        }
        if let Some(gpu) = &gpu {
            let on_gpu: Vec<&Record> = records
                .iter()
                .filter(|r| r.spec.arch == arch && GpuId::of(r) == *gpu)
                .collect();
            // The record's choice for its bucket, built for `spec`.
            let choice_for = |r: &Record, spec: KernelSpec| {
                let choice = r.choice()?;
                let c = Candidate {
                    template: r.template,
                    spec,
                    config: choice.config.clone(),
                };
                Some((c, Some(r.bucket)))
            };
            let served = |r: &Record| specs.iter().any(|(t, s)| *t == r.template && *s == r.spec);
            wanted.extend(
                on_gpu
                    .iter()
                    .filter(|r| served(r))
                    .filter_map(|r| choice_for(r, r.spec)),
            );
            if untuned == Untuned::Borrow {
                for (template, spec) in specs.iter().filter(|(_, s)| s.arch == arch) {
                    let records_of = |s: KernelSpec| {
                        on_gpu
                            .iter()
                            .filter(move |r| r.template == *template && r.spec == s)
                    };
                    let tuned = |s: KernelSpec| records_of(s).any(|r| r.choice().is_some());
                    let Some(from) = donor(spec).filter(|d| !tuned(*spec) && tuned(*d)) else {
                        continue;
                    };
                    let before = wanted.len();
                    wanted.extend(
                        records_of(from)
                            .filter_map(|r| choice_for(r, *spec))
                            .filter(|(c, _)| template.check(spec, &c.config).is_ok()),
                    );
                    if wanted.len() > before {
                        borrowed.insert(*spec, from);
                    }
                }
            }
        }
        tuned_on.insert(arch, gpu.map(|g| g.to_string()));
    }
    Plan {
        tuned_on,
        wanted,
        borrowed,
        by_gpu,
    }
}

impl CacheBuildError {
    /// The kernel a failure of one kernel names.
    fn kernel_id(&self) -> Option<&str> {
        match self {
            CacheBuildError::Compile { id, .. } | CacheBuildError::Rejected { id, .. } => Some(id),
            _ => None,
        }
    }
}

/// Leaves out of `plan` the borrowed choices whose kernels are in `failed` (they did not
/// build: spills, say, that the donor's build did not have) and returns those kernels'
/// ids. A kernel the plan also needs as a default or a spec's own tuned choice is kept, so
/// its failure stays the build's error; a spec left with no borrowed choice serves its
/// default again.
pub fn drop_unbuilt_borrowed(
    renderer: &Renderer,
    plan: &mut Plan,
    failed: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    if failed.is_empty() {
        return Vec::new();
    }
    // Each wanted kernel's id, and whether the entry is a borrowed choice.
    let entries: Vec<(String, bool)> = plan
        .wanted
        .iter()
        .map(|(c, b)| {
            let borrowed = b.is_some() && plan.borrowed.contains_key(&c.spec);
            (renderer.kernel_id(c).0, borrowed)
        })
        .collect();
    let needed_otherwise: std::collections::BTreeSet<&str> = entries
        .iter()
        .filter(|(_, borrowed)| !borrowed)
        .map(|(id, _)| id.as_str())
        .collect();
    let dropped: std::collections::BTreeSet<&str> = entries
        .iter()
        .filter(|(id, borrowed)| {
            *borrowed && failed.contains(id) && !needed_otherwise.contains(id.as_str())
        })
        .map(|(id, _)| id.as_str())
        .collect();
    let mut keep = entries
        .iter()
        .map(|(id, borrowed)| !(*borrowed && dropped.contains(id.as_str())));
    plan.wanted
        .retain(|_| keep.next().expect("one flag per entry"));
    let wanted = &plan.wanted;
    plan.borrowed
        .retain(|spec, _| wanted.iter().any(|(c, b)| c.spec == *spec && b.is_some()));
    dropped.into_iter().map(str::to_string).collect()
}

/// A built cache, and the borrowed choices left out of it because their kernels did not
/// build ([`drop_unbuilt_borrowed`]).
#[derive(Debug)]
pub struct Built {
    pub manifest: Manifest,
    /// The kernels this build compiled (a partial build's manifest holds others too).
    pub compiled: BTreeMap<String, KernelEntry>,
    pub dropped: Vec<String>,
}

/// What a cache build takes.
pub struct BuildRequest<'a> {
    /// The specs to build (each with the template that serves it: [`specs`]).
    pub specs: &'a [(Template, KernelSpec)],
    /// The tuning-db export's records, and the hash of its bytes ([`export_hash`]).
    pub records: &'a [Record],
    pub export_hash: &'a str,
    pub untuned: Untuned,
    /// The manifest the build replaces, if any: the specs it holds that this build does
    /// not (other archs, head dims or feature sets) keep their entries and kernels.
    pub previous: Option<&'a Manifest>,
}

/// Builds the cache for the request's specs into `out`, untuned specs served as
/// `untuned` says. Compiles in parallel on the current rayon pool, reporting each kernel.
/// A kernel that does not build is an error, unless it serves only borrowed choices:
/// those are left out, and named in [`Built::dropped`]. A partial build over a manifest
/// of another export or NVRTC is refused before anything is compiled: the kept entries
/// would then not follow from the manifest's inputs.
pub fn build(
    nvrtc: &Nvrtc,
    renderer: &Renderer,
    req: &BuildRequest,
    reporter: &dyn Reporter,
    out: &Path,
) -> Result<Built, CacheBuildError> {
    let export_hash = req.export_hash;
    if let Some(prev) = req.previous {
        let built: BTreeSet<(Arch, String)> =
            req.specs.iter().map(|(_, s)| (s.arch, s.tag())).collect();
        let keeps_some = prev.archs.iter().any(|(arch, entry)| {
            entry
                .specs
                .keys()
                .any(|tag| !built.contains(&(*arch, tag.clone())))
        });
        let same_inputs = prev.format == MANIFEST_FORMAT
            && prev.tuning_db_hash == export_hash
            && prev.nvrtc == nvrtc.version_string();
        if keeps_some && !same_inputs {
            return Err(CacheBuildError::Mixed {
                out: out.display().to_string(),
            });
        }
    }
    let mut plan = plan(req.specs, req.records, req.untuned);
    // Unique kernels, by id.
    let mut kernels: BTreeMap<String, (Candidate, Footprint)> = BTreeMap::new();
    let other_gpus = plan.by_gpu.iter().map(|(_, c, _)| c);
    for c in plan.wanted.iter().map(|(c, _)| c).chain(other_gpus) {
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
    reporter.start(kernels.len());
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
                // The varlen build beside it (a kernel whose varlen build spills ships
                // without: varlen batches then take the dense build and grid).
                let varlen = match footprint.varlen_tiles {
                    false => None,
                    true => {
                        varlen_build(nvrtc, &name, &rendered.source, &headers, &rendered.options)?
                            .map_err(|f| CacheBuildError::Compile {
                                id: id.clone(),
                                log: f.log,
                            })?
                            .map(|(cubin, _)| cubin)
                    }
                };
                write_if_differs(&out.join(&src_rel), rendered.source.as_bytes())?;
                write_if_differs(&out.join(&cubin_rel), &output.cubin)?;
                if let Some(cubin) = &varlen {
                    write_if_differs(&out.join(fa4_spec::varlen_cubin_path(&cubin_rel)), cubin)?;
                }
                reporter.compiled();
                Ok((
                    id.clone(),
                    KernelEntry {
                        template: c.template,
                        spec: c.spec,
                        config: c.config.clone(),
                        footprint: *footprint,
                        cubin: cubin_rel,
                        cubin_hash: format!("{:016x}", fnv1a64(&output.cubin)),
                        code_hash: code::code_hash(&output.cubin, &res).unwrap_or_default(),
                        registers: res.registers,
                        varlen_cubin_hash: varlen.map(|c| format!("{:016x}", fnv1a64(&c))),
                    },
                ))
            },
        )
        .collect();
    reporter.finish();
    // Every failure at once: a cache build is long, and one rebuild should fix them all.
    let (built, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    let mut failed: Vec<CacheBuildError> = failed.into_iter().filter_map(Result::err).collect();
    let failed_ids = failed
        .iter()
        .filter_map(|e| e.kernel_id().map(str::to_string))
        .collect();
    let dropped = drop_unbuilt_borrowed(renderer, &mut plan, &failed_ids);
    failed.retain(|e| {
        e.kernel_id()
            .is_none_or(|id| !dropped.iter().any(|d| d == id))
    });
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

    let arch_entries = arch_entries(renderer, &plan);
    let compiled = kernel_map.clone();
    let built = Manifest {
        format: MANIFEST_FORMAT.into(),
        fa4_gen_version: env!("CARGO_PKG_VERSION").into(),
        nvrtc: nvrtc.version_string(),
        tuning_db_hash: export_hash.into(),
        archs: arch_entries,
        kernels: kernel_map,
    };
    let manifest = match req.previous {
        Some(prev) => merged(prev, built),
        None => built,
    };
    // Files of kernels no longer in the cache go; the manifest is written last.
    remove_unlisted(out, &manifest)?;
    write_atomic(
        &out.join(MANIFEST_FILE),
        (serde_json::to_string_pretty(&manifest).expect("manifest serialises") + "\n").as_bytes(),
    )?;
    Ok(Built {
        manifest,
        compiled,
        dropped,
    })
}

/// `prev` with the specs `built` holds replaced by `built`'s entries: every other spec of
/// `prev` keeps its entry but a held-back spec's (a `--held-back` build's, which a later build
/// without it drops), and the kernels are those some entry names.
pub fn merged(prev: &Manifest, built: Manifest) -> Manifest {
    let mut archs = prev.archs.clone();
    for entry in archs.values_mut() {
        entry.specs.retain(|_, spec| {
            prev.kernels
                .get(&spec.default)
                .is_none_or(|k| !space::awaits_verify(&k.spec))
        });
    }
    for (arch, entry) in built.archs {
        let kept = archs.entry(arch).or_insert_with(|| ArchEntry {
            tuned_on: None,
            specs: BTreeMap::new(),
        });
        kept.tuned_on = entry.tuned_on;
        kept.specs.extend(entry.specs);
    }
    let mut kernels = BTreeMap::new();
    for spec in archs.values().flat_map(|a| a.specs.values()) {
        for id in spec.kernel_ids() {
            if let Some(k) = built.kernels.get(id).or_else(|| prev.kernels.get(id)) {
                kernels.insert(id.clone(), k.clone());
            }
        }
    }
    Manifest {
        archs,
        kernels,
        ..built
    }
}

/// How a rebuilt cache's machine code compares with the manifest it replaces, kernel by
/// kernel of the same template, spec and config: what a template edit changed.
#[derive(Debug, Default, PartialEq)]
pub struct CodeChanges {
    /// Kernels of both manifests with the same code hash.
    pub unchanged: usize,
    /// Kernels of both whose machine code differs: (old id, new id).
    pub changed: Vec<(String, String)>,
    /// Kernels new to the cache, or whose old entry has no code hash.
    pub new: usize,
}

pub fn code_changes(old: &Manifest, compiled: &BTreeMap<String, KernelEntry>) -> CodeChanges {
    let old_code: BTreeMap<(Template, &KernelSpec, &TileConfig), (&str, &str)> = old
        .kernels
        .iter()
        .filter(|(_, k)| !k.code_hash.is_empty())
        .map(|(id, k)| {
            (
                (k.template, &k.spec, &k.config),
                (id.as_str(), k.code_hash.as_str()),
            )
        })
        .collect();
    let mut out = CodeChanges::default();
    for (id, k) in compiled {
        match old_code.get(&(k.template, &k.spec, &k.config)) {
            Some((_, code)) if *code == k.code_hash => out.unchanged += 1,
            Some((old_id, _)) => out.changed.push((old_id.to_string(), id.clone())),
            None => out.new += 1,
        }
    }
    out
}

/// Per arch, what serves each spec: the kernel ids of the default and of the tuned (or
/// borrowed) choices the plan wants.
pub fn arch_entries(renderer: &Renderer, plan: &Plan) -> BTreeMap<Arch, ArchEntry> {
    let mut out: BTreeMap<Arch, ArchEntry> = plan
        .tuned_on
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
    for (c, bucket) in &plan.wanted {
        let id = renderer.kernel_id(c).0;
        let entry = out
            .get_mut(&c.spec.arch)
            .expect("planned arch")
            .specs
            .entry(c.spec.tag())
            .or_insert_with(|| SpecEntry {
                default: String::new(),
                tuned: BTreeMap::new(),
                borrowed_from: plan.borrowed.get(&c.spec).map(KernelSpec::tag),
                tuned_by_gpu: BTreeMap::new(),
                tuned_ragged: BTreeMap::new(),
                tuned_ragged_by_gpu: BTreeMap::new(),
            });
        match bucket {
            None => entry.default = id,
            Some(b) if b.ragged => {
                entry.tuned_ragged.insert(b.seqlen, id);
            }
            Some(b) => {
                entry.tuned.insert(b.seqlen, id);
            }
        }
    }
    for (gpu, c, bucket) in &plan.by_gpu {
        let id = renderer.kernel_id(c).0;
        if let Some(entry) = out
            .get_mut(&c.spec.arch)
            .and_then(|a| a.specs.get_mut(&c.spec.tag()))
        {
            let choices = if bucket.ragged {
                &mut entry.tuned_ragged_by_gpu
            } else {
                &mut entry.tuned_by_gpu
            };
            choices
                .entry(gpu.clone())
                .or_default()
                .insert(bucket.seqlen, id);
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
                Some(out.join(&k.cubin)),
                k.varlen_cubin_hash
                    .as_ref()
                    .map(|_| out.join(fa4_spec::varlen_cubin_path(&k.cubin))),
                Some(out.join(format!("{}/src/{id}.cu", k.spec.arch))),
            ]
            .into_iter()
            .flatten()
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
