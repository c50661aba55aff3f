//! A whole tune: a background thread renders and compiles one spec's candidates after
//! another (rayon inside), one spec ahead of the GPU, which checks and times the spec
//! before ([`tune_spec`]); every outcome goes into the tuning database as it is
//! measured. [`run`] does it for a [`TuneRequest`] and hands back a [`TuneSummary`]:
//! the closing table and the run's numbers (compile throughput, GPU busy share).

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fa4_spec::{Arch, Bucket, KernelSpec, TileConfig};

use super::{
    configs_to_time, shard_keys, stale_outside, tune_spec, winners, Counts, GpuMeasurer, Key,
    Progress, Session, TuneError, TuneKernel, WinnerRow,
};
use crate::compile::{self, BuildDir, BuildError, BuildSummary, Nvrtc, NvrtcError};
use crate::db::{DbError, Device, TuningDb};
use crate::fsutil::{ensure_writable_dir, WriteError};
use crate::measure::gpu::{Gpu, GpuError};
use crate::measure::support::{build_support, Support};
use crate::render::{RenderError, Renderer};
use crate::space::{self, Template};

/// What a run tunes, and where its kernels and records go.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneRequest {
    /// The architecture of every spec, and of the GPU that measures them.
    pub arch: Arch,
    /// The specs to tune, of every shard: `shard` picks this run's keys among them.
    pub specs: Vec<(Template, KernelSpec)>,
    /// The sequence-length buckets every spec is tuned at.
    pub buckets: Vec<Bucket>,
    /// `(index, count)`: the run tunes the index-th of count shards of the keys
    /// ([`shard_keys`]); `(0, 1)` tunes them all.
    pub shard: (usize, usize),
    /// No new measurement starts after this much wall time; what was measured is kept
    /// and the next run resumes.
    pub budget: Option<Duration>,
    /// The tuning database (opened only when a GPU measures).
    pub db: PathBuf,
    /// Take every key's finals again, side by side, even where they are complete
    /// (after a change of GPU, driver or clocks).
    pub retake_finals: bool,
    /// The build folder for sources and cubins.
    pub build_dir: PathBuf,
    /// Parallel NVRTC compilations; None for one per core.
    pub jobs: Option<usize>,
}

impl TuneRequest {
    /// `specs` at every bucket (dense and ragged), every shard, no budget, into [`Self::default_db`], built
    /// under `build/`.
    pub fn new(arch: Arch, specs: Vec<(Template, KernelSpec)>) -> Self {
        TuneRequest {
            arch,
            specs,
            buckets: Bucket::all()
                .chain(Bucket::all().map(Bucket::ragged))
                .collect(),
            shard: (0, 1),
            budget: None,
            db: Self::default_db(arch),
            retake_finals: false,
            build_dir: PathBuf::from("build"),
            jobs: None,
        }
    }

    /// The tuning database of `arch` in the repository: `tuning-db/<arch>.sled`.
    pub fn default_db(arch: Arch) -> PathBuf {
        PathBuf::from(format!("tuning-db/{arch}.sled"))
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct TuneSummary {
    pub arch: Arch,
    /// The specs of this run's shard.
    pub specs: usize,
    /// Kernels built for the run (compiled now or found in the build folder), and the
    /// ones compiled now.
    pub built: usize,
    pub compiled: usize,
    /// Time the compile thread spent building, on `jobs` threads.
    pub compile_busy: Duration,
    pub jobs: usize,
    /// Wall time from the start of the run to the end of its last measurement.
    pub wall: Duration,
    /// What the GPU measured; None for a run without one (compile only).
    pub timing: Option<TimingSummary>,
}

/// What the GPU of a run measured, and the closing table.
#[derive(Debug, Clone)]
pub struct TimingSummary {
    pub device: Device,
    /// The tuning database the records went into.
    pub db: PathBuf,
    /// Each key of the run with a current record: its winner against its default.
    pub rows: Vec<WinnerRow>,
    pub counts: Counts,
    /// Time spent in GPU work (checking, timing, making problems).
    pub gpu_busy: Duration,
    /// Whether the budget stopped the run before everything was measured.
    pub stopped_by_budget: bool,
}

impl TuneSummary {
    /// Kernels compiled per second of one compile thread.
    pub fn kernels_per_second_per_core(&self) -> f64 {
        self.compiled as f64 / (self.compile_busy.as_secs_f64() * self.jobs as f64).max(1e-9)
    }

    /// The share of the wall time the GPU was busy (0 without one).
    pub fn gpu_busy_share(&self) -> f64 {
        let busy = self.timing.as_ref().map_or(Duration::ZERO, |t| t.gpu_busy);
        busy.as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }
}

impl TuneSummary {
    /// The summary as `fa4-gen tune --json` prints it.
    pub fn to_json(&self) -> serde_json::Value {
        let per_core = self.kernels_per_second_per_core();
        let Some(t) = &self.timing else {
            return serde_json::json!({
                "arch": self.arch.name(),
                "specs": self.specs,
                "built": self.built,
                "compiled": self.compiled,
                "compile_seconds": self.compile_busy.as_secs_f64(),
                "kernels_per_second_per_core": per_core,
            });
        };
        let c = &t.counts;
        serde_json::json!({
            "device": t.device,
            "db": t.db,
            "keys": t.rows,
            "counts": {
                "compiled": self.compiled,
                "checked": c.checked,
                "check_failed": c.check_failed,
                "timed": c.timed,
                "time_failed": c.time_failed,
                "finals": c.finals,
                "already_measured": c.skipped,
                "carried": c.carried,
                "finals_carried": c.finals_carried,
                "finals_unbuilt": c.finals_unbuilt,
            },
            "wall_seconds": self.wall.as_secs_f64(),
            "gpu_busy_share": self.gpu_busy_share(),
            "kernels_per_second_per_core": per_core,
            "stopped_by_budget": t.stopped_by_budget,
        })
    }
}

impl TimingSummary {
    /// The geometric mean of the winners' speedups over the defaults (1 with none).
    pub fn geomean_speedup(&self) -> f64 {
        let gains: Vec<f64> = self.rows.iter().filter_map(|r| r.speedup).collect();
        (gains.iter().map(|g| g.ln()).sum::<f64>() / gains.len().max(1) as f64).exp()
    }
}

/// Why a run ended early; what was measured before is in the database.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The GPU given is not of the request's architecture.
    #[error("{gpu} is not an {arch} GPU: {arch} kernels are tuned on the GPU they run on")]
    OtherArch { arch: Arch, gpu: String },
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Nvrtc(#[from] NvrtcError),
    /// The compile threads could not be started.
    #[error("{0}")]
    Threads(String),
    /// The checking kernels could not be built.
    #[error("{0}")]
    Support(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A built kernel's cubin could not be read back.
    #[error("{0}")]
    Cubin(String),
    #[error(transparent)]
    Tune(#[from] TuneError),
    /// NVRTC refused sources (the summary holds its logs) or a spec's default config
    /// was set aside: a bug in a template or the config space, never a tuning outcome.
    #[error("{}", unsound_build(.0))]
    UnsoundBuild(Box<BuildSummary>),
}

/// What is wrong with a build that [`RunError::UnsoundBuild`] ended a run with.
fn unsound_build(s: &BuildSummary) -> String {
    if !s.failures.is_empty() {
        return format!("{} kernels failed to compile", s.failures.len());
    }
    let bad_defaults: Vec<String> = s
        .rejected()
        .filter(|r| r.is_default)
        .map(|r| format!("{} ({})", r.id, r.rejection.reason))
        .collect();
    format!(
        "heuristic default configs were rejected: {}",
        bad_defaults.join("; ")
    )
}

/// One spec's build, handed from the compile thread to the GPU loop.
struct Built {
    template: Template,
    spec: KernelSpec,
    summary: Result<BuildSummary, BuildError>,
}

/// Tunes `request` on `gpu` (of `request.arch`), or only renders, compiles and prunes
/// its kernels without one: every spec's pending candidates are compiled on a
/// background thread while the GPU checks and times the spec before, each outcome
/// written to the database as it is measured (a killed run loses at most the one in
/// flight and the next resumes). `progress` hears of every stage and measurement.
pub fn run(
    request: &TuneRequest,
    gpu: Option<&Gpu>,
    progress: &dyn Progress,
) -> Result<TuneSummary, RunError> {
    let started = Instant::now();
    let arch = request.arch;
    if let Some(gpu) = gpu.filter(|g| g.info.arch != Some(arch)) {
        let gpu = gpu.info.name.clone();
        return Err(RunError::OtherArch { arch, gpu });
    }
    let (shard, shards) = request.shard;
    let keys = shard_keys(&request.specs, &request.buckets, shard, shards);
    let mut shard_specs: Vec<(Template, KernelSpec)> =
        keys.iter().map(|k| (k.template, k.spec)).collect();
    shard_specs.dedup();
    let deadline = request.budget.map(|d| started + d);

    let renderer = Renderer::embedded()?;
    let dir = BuildDir::new(&request.build_dir);
    ensure_writable_dir(dir.root())?;
    let nvrtc = Nvrtc::load()?;
    progress.nvrtc_loaded(&nvrtc);
    let jobs = request
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| RunError::Threads(e.to_string()))?;
    let jobs = pool.current_num_threads();
    let support = match gpu {
        Some(gpu) => {
            let path = build_support(&nvrtc, renderer.templates(), &dir, arch)
                .map_err(RunError::Support)?;
            Some(Support::load(gpu, &std::fs::read(path)?)?)
        }
        None => None,
    };
    let db = match gpu {
        Some(_) => Some(TuningDb::open(&request.db)?),
        None => None,
    };
    let mut measurer = match (gpu, &support) {
        (Some(gpu), Some(support)) => Some(GpuMeasurer::new(gpu, support)?),
        _ => None,
    };
    let template_hash = |t: Template| renderer.template_hash(t).to_string();
    let device = gpu.map(|g| Device {
        name: g.info.name.clone(),
        sm_count: g.info.sm_count,
        driver: g.info.driver.clone(),
        nvrtc: nvrtc.version_string(),
    });
    let measuring = db.as_ref().zip(device.as_ref());

    // After a template edit, the keys this run leaves out keep records of the old
    // version, which build-cache and bench --db skip: say so before the GPU time goes in.
    if let Some((db, device)) = measuring {
        let every_shard = shard_keys(&request.specs, &request.buckets, 0, 1);
        let left = stale_outside(&db.records()?, device, &template_hash, &every_shard);
        if !left.is_empty() {
            progress.stale_outside(&left);
        }
    }

    // Each spec's plan, planned once: with every key's record current, only the
    // candidates still to be timed (a finals top-up compiles the finalists alone).
    let mut to_build: Vec<(Template, KernelSpec, Vec<space::Planned>)> = Vec::new();
    for &(template, spec) in &shard_specs {
        let mut planned = space::plan(template, &spec);
        if let Some((db, device)) = measuring {
            let configs: Vec<TileConfig> =
                planned.iter().map(|p| p.candidate.config.clone()).collect();
            if let Some(needed) = configs_to_time(
                db,
                device,
                &template_hash,
                &spec_keys(&keys, template, &spec),
                &configs,
                request.retake_finals,
            )? {
                planned.retain(|p| needed.contains(&p.candidate.config));
            }
        }
        to_build.push((template, spec, planned));
    }

    let mut compiled = 0usize;
    let mut built_total = 0usize;
    let mut compile_busy = Duration::ZERO;
    let mut counts = Counts::default();
    let mut stopped = false;
    std::thread::scope(|scope| -> Result<(), RunError> {
        // Compile spec k+1 while the GPU measures spec k (one build in hand at a time).
        let (tx, rx) = mpsc::sync_channel::<(Built, Duration)>(1);
        let (renderer, dir, nvrtc, pool) = (&renderer, &dir, &nvrtc, &pool);
        scope.spawn(move || {
            for (template, spec, planned) in to_build {
                let t = Instant::now();
                let summary = pool
                    .install(|| compile::build(nvrtc, renderer, dir, &planned, &compile::Silent));
                let built = Built {
                    template,
                    spec,
                    summary,
                };
                if tx.send((built, t.elapsed())).is_err() {
                    return; // the GPU loop ended early
                }
            }
        });
        for (built, took) in rx {
            let summary = built.summary?;
            compile_busy += took;
            compiled += summary.compiled;
            built_total += summary.built().count();
            if !summary.failures.is_empty() || summary.rejected().any(|r| r.is_default) {
                return Err(RunError::UnsoundBuild(Box::new(summary)));
            }
            progress.built(built.template, &built.spec, &summary);
            let (Some((db, device)), Some(measurer)) = (measuring, measurer.as_mut()) else {
                continue;
            };
            // The default first: it is candidate 0 of every new record.
            let mut kernels: Vec<TuneKernel> = Vec::new();
            for k in summary.built() {
                let cubin = dir.read_cubin(k).map_err(RunError::Cubin)?;
                let varlen_cubin = dir.read_varlen_cubin(k).map_err(RunError::Cubin)?;
                kernels.push(TuneKernel {
                    built: k.clone(),
                    cubin,
                    varlen_cubin,
                });
            }
            kernels.sort_by(|x, y| {
                (!x.built.is_default, &x.built.candidate.config)
                    .cmp(&(!y.built.is_default, &y.built.candidate.config))
            });
            let session = Session {
                db,
                device: device.clone(),
                template_hash: &template_hash,
                deadline,
                retake_finals: request.retake_finals,
            };
            let spec_keys = spec_keys(&keys, built.template, &built.spec);
            let (spec_counts, hit_deadline) =
                tune_spec(&session, &spec_keys, &kernels, measurer, progress)?;
            counts += spec_counts;
            progress.tuned(built.template, &built.spec, &spec_counts);
            if hit_deadline {
                stopped = true;
                break;
            }
        }
        Ok(())
    })?;

    let wall = started.elapsed();
    let timing = match measuring {
        Some((db, device)) => Some(TimingSummary {
            device: device.clone(),
            db: request.db.clone(),
            rows: winners(db, device, &keys, &template_hash)?,
            counts,
            gpu_busy: measurer.as_ref().map_or(Duration::ZERO, |m| m.busy),
            stopped_by_budget: stopped,
        }),
        None => None,
    };
    Ok(TuneSummary {
        arch,
        specs: shard_specs.len(),
        built: built_total,
        compiled,
        compile_busy,
        jobs,
        wall,
        timing,
    })
}

/// The keys of `template`'s `spec` among `keys`.
fn spec_keys(keys: &[Key], template: Template, spec: &KernelSpec) -> Vec<Key> {
    keys.iter()
        .filter(|k| k.template == template && k.spec == *spec)
        .copied()
        .collect()
}
