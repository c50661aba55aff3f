//! Compiling: rendered kernels become cubins, in parallel, each with its ptxas report.
//!
//! Output, under a build folder (`--out`, default `build/`):
//!
//! ```text
//! include/fa4/...            the headers, so every rendered source compiles on its own
//! src/<arch>/<id>.cu         rendered sources
//! cubin/<arch>/<id>.cubin    cubins of the kernels that passed every check
//! report/<arch>.json         every candidate: its resources, or why it was set aside
//! ```
//!
//! Files are written atomically and the report last, so an interrupted build leaves no
//! file that looks complete and is not. A kernel whose id, cubin and report entry are
//! already there is not compiled again.

pub mod code;
pub mod nvrtc;
pub mod resources;
pub mod sass;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use fa4_spec::{fnv1a64, Arch};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::fsutil::{ensure_writable_dir, write_atomic, write_if_changed, WriteError};
use crate::render::{KernelId, RenderError, Renderer};
use crate::space::{Candidate, Footprint, Planned, RejectKind, Rejection};
use fa4_spec::{KERNEL_ENTRY, VARLEN_KERNEL_ENTRY};
pub use nvrtc::{CompileFailure, Nvrtc, NvrtcError};
pub use resources::Resources;

/// Version of the report's JSON layout.
const REPORT_FORMAT: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Nvrtc(#[from] NvrtcError),
    #[error("build report {path} is unreadable ({message}); delete it or choose another --out")]
    CorruptReport { path: PathBuf, message: String },
}

/// A build folder and the paths inside it.
#[derive(Debug, Clone)]
pub struct BuildDir {
    root: PathBuf,
}

impl BuildDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        BuildDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Checks the folder can be written and puts the headers under `include/`, so every
    /// rendered source in it compiles on its own.
    pub fn prepare(&self, renderer: &Renderer) -> Result<(), WriteError> {
        ensure_writable_dir(&self.root)?;
        for (name, text) in renderer.templates().headers() {
            write_if_changed(&self.path(&format!("include/{name}")), text.as_bytes())?;
        }
        Ok(())
    }

    pub fn source_rel(arch: Arch, id: &KernelId) -> String {
        format!("src/{arch}/{id}.cu")
    }

    pub fn cubin_rel(arch: Arch, id: &KernelId) -> String {
        format!("cubin/{arch}/{id}.cubin")
    }

    pub fn report_path(&self, arch: Arch) -> PathBuf {
        self.root.join(format!("report/{arch}.json"))
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The report of an arch; `None` when nothing was built for it yet.
    pub fn load_report(&self, arch: Arch) -> Result<Option<Report>, BuildError> {
        let path = self.report_path(arch);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(BuildError::CorruptReport {
                    path,
                    message: e.to_string(),
                })
            }
        };
        let report: Report =
            serde_json::from_str(&text).map_err(|e| BuildError::CorruptReport {
                path: path.clone(),
                message: e.to_string(),
            })?;
        if report.format != REPORT_FORMAT || report.arch != arch {
            return Err(BuildError::CorruptReport {
                path,
                message: format!(
                    "format {} for {}, expected format {REPORT_FORMAT} for {arch}",
                    report.format, report.arch
                ),
            });
        }
        Ok(Some(report))
    }

    /// Reads a built kernel's cubin and checks it is the one the report describes.
    pub fn read_cubin(&self, k: &BuiltKernel) -> Result<Vec<u8>, String> {
        self.read_checked(&k.cubin, &k.cubin_hash)
    }

    /// The varlen build's cubin of `k`, where it has one, checked against the report.
    pub fn read_varlen_cubin(&self, k: &BuiltKernel) -> Result<Option<Vec<u8>>, String> {
        k.varlen_cubin_hash
            .as_ref()
            .map(|hash| self.read_checked(&fa4_spec::varlen_cubin_path(&k.cubin), hash))
            .transpose()
    }

    /// The file at `rel`, whose FNV-1a 64 the report says is `hash`.
    fn read_checked(&self, rel: &str, hash: &str) -> Result<Vec<u8>, String> {
        let path = self.path(rel);
        let bytes =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if format!("{:016x}", fnv1a64(&bytes)) != hash {
            return Err(format!(
                "{} does not match its build report (hash differs): rebuild with `fa4-gen compile`",
                path.display()
            ));
        }
        Ok(bytes)
    }
}

/// Everything built for one arch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    pub arch: Arch,
    pub fa4_gen_version: String,
    pub kernels: Vec<BuiltKernel>,
    pub rejected: Vec<RejectedKernel>,
}

/// A kernel that compiled and passed every check.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuiltKernel {
    pub id: KernelId,
    #[serde(flatten)]
    pub candidate: Candidate,
    pub is_default: bool,
    pub template_hash: String,
    pub footprint: Footprint,
    pub resources: Resources,
    /// Paths relative to the build folder.
    pub source: String,
    pub cubin: String,
    /// FNV-1a 64 of the cubin, hex.
    pub cubin_hash: String,
    /// The machine code's identity ([`code::code_hash`]): equal across template edits
    /// that leave the kernel's instructions and resources alone; empty in reports
    /// written before it existed.
    #[serde(default)]
    pub code_hash: String,
    /// The varlen build (`fa4_spec::varlen_cubin_path` of `cubin`) of a kernel with
    /// `Footprint::varlen_tiles`: its cubin's hash and registers, `None` where there is
    /// none (a varlen build that spills is left out: varlen batches then take the dense
    /// build). The code hash covers the dense build alone: the tuner times dense batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub varlen_cubin_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub varlen_registers: Option<u32>,
    pub nvrtc_version: String,
    pub compile_ms: u64,
}

/// A varlen build's cubin and ptxas's report for its entry; None: the kernel ships without
/// one. Err: NVRTC refused the source.
pub type VarlenBuild = Result<Option<(Vec<u8>, Resources)>, CompileFailure>;

/// A kernel's varlen build: `source` compiled again with `FA4_VARLEN_ENTRY` (its entry,
/// `VARLEN_KERNEL_ENTRY`), apart from the dense build (hopper_fwd.cu.tera says why).
/// Ok(None) where the build spills or ptxas reports nothing for the entry: the kernel
/// then ships without one and varlen batches take the dense build and grid.
pub fn varlen_build(
    nvrtc: &Nvrtc,
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    options: &[String],
) -> Result<VarlenBuild, NvrtcError> {
    let mut options = options.to_vec();
    options.push("-DFA4_VARLEN_ENTRY".into());
    Ok(nvrtc
        .compile(name, source, headers, &options)?
        .map(|output| {
            resources::parse(&output.log, VARLEN_KERNEL_ENTRY)
                .filter(|r| r.disqualification().is_none())
                .map(|r| (output.cubin, r))
        }))
}

/// A candidate set aside, statically or after compiling, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RejectedKernel {
    pub id: KernelId,
    #[serde(flatten)]
    pub candidate: Candidate,
    pub is_default: bool,
    pub template_hash: String,
    #[serde(flatten)]
    pub rejection: Rejection,
}

/// What became of one candidate. (Built outweighs Rejected, but outcomes are few, one
/// per candidate of a build, and every consumer reads the built kernel in place.)
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Outcome {
    Built { kernel: BuiltKernel, reused: bool },
    Rejected(RejectedKernel),
}

impl Outcome {
    pub fn candidate(&self) -> &Candidate {
        match self {
            Outcome::Built { kernel, .. } => &kernel.candidate,
            Outcome::Rejected(r) => &r.candidate,
        }
    }
}

/// Progress callbacks; the CLI draws a progress bar with them.
pub trait Reporter: Sync {
    fn start(&self, _to_compile: usize) {}
    /// One candidate compiled (or set aside).
    fn finished(&self, outcome: &Outcome) {
        let _ = outcome;
        self.compiled();
    }
    /// One kernel compiled, where there is no outcome to report (`cache::build`).
    fn compiled(&self) {}
    fn finish(&self) {}
}

/// Reports nothing.
pub struct Silent;
impl Reporter for Silent {}

/// The result of a build.
#[derive(Debug)]
pub struct BuildSummary {
    pub outcomes: Vec<Outcome>,
    /// Kernels NVRTC refused: a template bug, never a tuning decision.
    pub failures: Vec<(PathBuf, CompileFailure)>,
    pub compiled: usize,
    pub wall_seconds: f64,
    pub nvrtc_version: String,
}

impl BuildSummary {
    pub fn built(&self) -> impl Iterator<Item = &BuiltKernel> {
        self.outcomes.iter().filter_map(|o| match o {
            Outcome::Built { kernel, .. } => Some(kernel),
            _ => None,
        })
    }

    pub fn rejected(&self) -> impl Iterator<Item = &RejectedKernel> {
        self.outcomes.iter().filter_map(|o| match o {
            Outcome::Rejected(r) => Some(r),
            _ => None,
        })
    }
}

/// Renders, compiles and checks `planned`, writing everything under `dir`.
pub fn build(
    nvrtc: &Nvrtc,
    renderer: &Renderer,
    dir: &BuildDir,
    planned: &[Planned],
    reporter: &dyn Reporter,
) -> Result<BuildSummary, BuildError> {
    let started = Instant::now();
    dir.prepare(renderer)?;

    let mut reports: BTreeMap<Arch, Report> = BTreeMap::new();
    for p in planned {
        let arch = p.candidate.spec.arch;
        if let std::collections::btree_map::Entry::Vacant(e) = reports.entry(arch) {
            e.insert(dir.load_report(arch)?.unwrap_or_else(|| Report {
                format: REPORT_FORMAT,
                arch,
                fa4_gen_version: env!("CARGO_PKG_VERSION").into(),
                kernels: Vec::new(),
                rejected: Vec::new(),
            }));
        }
    }

    // Static rejections and kernels already built need no compiler.
    let mut outcomes: Vec<Option<Outcome>> = vec![None; planned.len()];
    let mut jobs = Vec::new();
    for (i, p) in planned.iter().enumerate() {
        let id = renderer.kernel_id(&p.candidate);
        match &p.verdict {
            Err(rejection) => {
                outcomes[i] = Some(Outcome::Rejected(RejectedKernel {
                    id,
                    candidate: p.candidate.clone(),
                    is_default: p.is_default,
                    template_hash: renderer.template_hash(p.candidate.template).to_string(),
                    rejection: rejection.clone(),
                }))
            }
            Ok(footprint) => {
                let report = &reports[&p.candidate.spec.arch];
                let existing = report.kernels.iter().find(|k| k.id == id);
                match existing.map(|k| (k, dir.read_cubin(k))) {
                    Some((k, Ok(cubin))) => {
                        // A report written before code hashes existed gets one now.
                        let code_hash = if k.code_hash.is_empty() {
                            code::code_hash(&cubin, &k.resources).unwrap_or_default()
                        } else {
                            k.code_hash.clone()
                        };
                        outcomes[i] = Some(Outcome::Built {
                            kernel: BuiltKernel {
                                is_default: p.is_default,
                                code_hash,
                                ..k.clone()
                            },
                            reused: true,
                        })
                    }
                    _ => jobs.push((i, id, footprint)),
                }
            }
        }
    }

    reporter.start(jobs.len());
    let headers: Vec<(&str, &str)> = renderer.templates().headers().collect();
    let nvrtc_version = nvrtc.version_string();
    let compiled: Vec<(usize, Result<JobResult, BuildError>)> = jobs
        .par_iter()
        .map(|(i, id, footprint)| {
            let result = compile_one(nvrtc, renderer, dir, &headers, &planned[*i], id, footprint);
            if let Ok((outcome, _)) = &result {
                reporter.finished(outcome);
            }
            (*i, result)
        })
        .collect();
    reporter.finish();

    let mut failures = Vec::new();
    for (i, result) in compiled {
        let (outcome, failure) = result?;
        failures.extend(failure);
        outcomes[i] = Some(outcome);
    }
    let outcomes: Vec<Outcome> = outcomes
        .into_iter()
        .map(|o| o.expect("every candidate decided"))
        .collect();

    for (arch, report) in reports.iter_mut() {
        merge_into_report(
            renderer,
            dir,
            report,
            outcomes.iter().filter(|o| o.candidate().spec.arch == *arch),
        );
        write_atomic(
            &dir.report_path(*arch),
            (serde_json::to_string_pretty(report).expect("report serialises") + "\n").as_bytes(),
        )?;
    }

    Ok(BuildSummary {
        compiled: jobs.len(),
        outcomes,
        failures,
        wall_seconds: started.elapsed().as_secs_f64(),
        nvrtc_version,
    })
}

/// What compiling one candidate gave: its outcome, and NVRTC's refusal if it refused.
type JobResult = (Outcome, Option<(PathBuf, CompileFailure)>);

fn compile_one(
    nvrtc: &Nvrtc,
    renderer: &Renderer,
    dir: &BuildDir,
    headers: &[(&str, &str)],
    p: &Planned,
    id: &KernelId,
    footprint: &Footprint,
) -> Result<JobResult, BuildError> {
    let c = &p.candidate;
    let arch = c.spec.arch;
    let rendered = renderer.render(c, footprint)?;
    let source_rel = BuildDir::source_rel(arch, id);
    let source_path = dir.path(&source_rel);
    write_if_changed(&source_path, rendered.source.as_bytes())?;
    let cubin_rel = BuildDir::cubin_rel(arch, id);
    let cubin_path = dir.path(&cubin_rel);

    let started = Instant::now();
    let result = nvrtc.compile(
        &source_path.display().to_string(),
        &rendered.source,
        headers,
        &rendered.options,
    )?;
    let reject = |kind, reason: String| {
        let _ = std::fs::remove_file(&cubin_path);
        Outcome::Rejected(RejectedKernel {
            id: id.clone(),
            candidate: c.clone(),
            is_default: p.is_default,
            template_hash: rendered.template_hash.clone(),
            rejection: Rejection { kind, reason },
        })
    };
    let output = match result {
        Ok(output) => output,
        Err(failure) => {
            let first = failure
                .log
                .lines()
                .find(|l| l.contains("error"))
                .unwrap_or("compile error");
            let outcome = reject(RejectKind::Compile, format!("NVRTC: {}", first.trim()));
            return Ok((outcome, Some((source_path, failure))));
        }
    };
    let Some(resources) = resources::parse(&output.log, KERNEL_ENTRY) else {
        return Ok((
            reject(
                RejectKind::Compile,
                if output.log.trim().is_empty() {
                    format!(
                        "ptxas printed no resource report for {KERNEL_ENTRY}: NVRTC's log is empty, \
                         which is what a hit in the CUDA compute cache gives (run with {}=1)",
                        nvrtc::CACHE_DISABLE_ENV
                    )
                } else {
                    format!(
                        "ptxas printed no resource report for {KERNEL_ENTRY} (NVRTC log: {:?})",
                        output.log.chars().take(400).collect::<String>()
                    )
                },
            ),
            None,
        ));
    };
    if let Some(reason) = resources.disqualification() {
        return Ok((reject(RejectKind::Spills, reason), None));
    }
    // The varlen build, apart (hopper_fwd.cu.tera says why).
    let mut varlen_registers = None;
    let mut varlen_cubin_hash = None;
    let varlen_path = dir.path(&fa4_spec::varlen_cubin_path(&cubin_rel));
    let _ = std::fs::remove_file(&varlen_path);
    if footprint.varlen_tiles {
        let name = source_path.display().to_string();
        match varlen_build(nvrtc, &name, &rendered.source, headers, &rendered.options)? {
            Ok(None) => {}
            Ok(Some((cubin, res))) => {
                write_atomic(&varlen_path, &cubin)?;
                varlen_cubin_hash = Some(format!("{:016x}", fnv1a64(&cubin)));
                varlen_registers = Some(res.registers);
            }
            Err(failure) => {
                let outcome = reject(RejectKind::Compile, "NVRTC: the varlen build failed".into());
                return Ok((outcome, Some((source_path, failure))));
            }
        }
    }
    write_atomic(&cubin_path, &output.cubin)?;
    let code_hash = code::code_hash(&output.cubin, &resources).unwrap_or_default();
    let kernel = BuiltKernel {
        id: id.clone(),
        candidate: c.clone(),
        is_default: p.is_default,
        template_hash: rendered.template_hash,
        footprint: *footprint,
        resources,
        source: source_rel,
        cubin: cubin_rel,
        cubin_hash: format!("{:016x}", fnv1a64(&output.cubin)),
        code_hash,
        varlen_cubin_hash,
        varlen_registers,
        nvrtc_version: nvrtc.version_string(),
        compile_ms: started.elapsed().as_millis() as u64, // the dense build and the varlen one
    };
    Ok((
        Outcome::Built {
            kernel,
            reused: false,
        },
        None,
    ))
}

/// Folds a build's outcomes into an arch's report: an entry per candidate, the newest
/// wins; entries of an older version of a template are dropped with their files.
fn merge_into_report<'a>(
    renderer: &Renderer,
    dir: &BuildDir,
    report: &mut Report,
    outcomes: impl Iterator<Item = &'a Outcome>,
) {
    let current = |c: &Candidate, hash: &str| renderer.template_hash(c.template) == hash;
    for stale in report
        .kernels
        .iter()
        .filter(|k| !current(&k.candidate, &k.template_hash))
    {
        let _ = std::fs::remove_file(dir.path(&stale.cubin));
        let _ = std::fs::remove_file(dir.path(&fa4_spec::varlen_cubin_path(&stale.cubin)));
        let _ = std::fs::remove_file(dir.path(&stale.source));
    }
    report
        .kernels
        .retain(|k| current(&k.candidate, &k.template_hash));
    report
        .rejected
        .retain(|k| current(&k.candidate, &k.template_hash));
    for outcome in outcomes {
        let c = outcome.candidate();
        report.kernels.retain(|k| &k.candidate != c);
        report.rejected.retain(|k| &k.candidate != c);
        match outcome {
            Outcome::Built { kernel, .. } => report.kernels.push(kernel.clone()),
            Outcome::Rejected(r) => report.rejected.push(r.clone()),
        }
    }
    report.kernels.sort_by(|a, b| a.id.cmp(&b.id));
    report.rejected.sort_by(|a, b| a.id.cmp(&b.id));
    report.fa4_gen_version = env!("CARGO_PKG_VERSION").into();
}
