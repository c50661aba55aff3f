//! `fa4-gen tune`: compiles the candidates of one spec after another on a background
//! thread (rayon inside) while the GPU checks and times the previous spec's kernels, and
//! keeps every outcome in the tuning database (`fa4_gen::tune` does the measuring loop).

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Args;
use fa4_spec::{Arch, KernelSpec, TileConfig};
use indicatif::{ProgressBar, ProgressStyle};

use super::{check_build, compile_pool, load_nvrtc, parse_list, CliError, CliResult, SpecArgs};
use fa4_gen::compile::{self, BuildDir, BuildSummary, Reporter};
use fa4_gen::db::{Device, Outcome, TuningDb};
use fa4_gen::measure::gpu::Gpu;
use fa4_gen::render::Renderer;
use fa4_gen::space::{self, Template};
use fa4_gen::tune::{self, GpuMeasurer, Key, Progress, TuneKernel};

#[derive(Debug, Args)]
pub struct TuneArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Causal masks to tune when --mask is not given: both, yes or no.
    #[arg(long, default_value = "both")]
    pub causal: String,
    /// Sequence-length buckets (powers of two, 128 to 32768) [default: all].
    #[arg(long, value_delimiter = ',')]
    pub buckets: Vec<u32>,
    /// Start no new measurement after this much wall time (90s, 10m, 1h); what was
    /// measured is kept and the next run resumes.
    #[arg(long)]
    pub budget: Option<String>,
    /// Tune the i-th of n shards of the keys (0-based, e.g. 0/4), for sweeps split over
    /// GPUs or hosts; `fa4-gen db merge` combines their databases.
    #[arg(long)]
    pub shard: Option<String>,
    /// The tuning database [default: tuning-db/<arch>.sled].
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Take every key's finals again, side by side in this run, even where they are
    /// complete (after a change of GPU, driver or clocks; finals are otherwise taken
    /// again only where a key's finalists change).
    #[arg(long)]
    pub retake_finals: bool,
    /// Render, compile and prune without a GPU: no checking, no timing.
    #[arg(long)]
    pub compile_only: bool,
    /// Print the closing summary as JSON (no progress bar).
    #[arg(long)]
    pub json: bool,
    /// Build folder for sources and cubins.
    #[arg(long, env = "FA4_GEN_OUT", default_value = "build")]
    pub build_dir: PathBuf,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Parallel NVRTC compilations [default: one per core].
    #[arg(short, long)]
    pub jobs: Option<usize>,
}

/// One spec's build, handed from the compile thread to the GPU loop.
pub(super) struct Built {
    template: Template,
    spec: KernelSpec,
    summary: Result<BuildSummary, compile::BuildError>,
}

pub(super) fn run(a: TuneArgs, quiet: bool) -> CliResult {
    let quiet = quiet || a.json;
    let archs: Vec<Arch> = parse_list(&a.spec.arch)?;
    let [arch] = archs[..] else {
        return Err(CliError::Usage(
            "tune needs --arch with one architecture, e.g. --arch sm90".into(),
        ));
    };
    let mut spec_args = a.spec.clone();
    if spec_args.mask.is_empty() {
        spec_args.mask = match a.causal.as_str() {
            "both" => vec!["none".into(), "causal".into()],
            "yes" => vec!["causal".into()],
            "no" => vec!["none".into()],
            other => {
                return Err(CliError::Usage(format!(
                    "--causal {other}: expected both, yes or no"
                )))
            }
        };
    }
    let specs = spec_args.specs(&[arch])?;
    let buckets = tune::parse_buckets(&a.buckets).map_err(CliError::Usage)?;
    let (shard, shards) = match &a.shard {
        Some(s) => tune::parse_shard(s).map_err(CliError::Usage)?,
        None => (0, 1),
    };
    let deadline = match &a.budget {
        Some(b) => Some(tune::parse_budget(b).map_err(CliError::Usage)?),
        None => None,
    };
    let keys = tune::shard_keys(&specs, &buckets, shard, shards);
    let mut shard_specs: Vec<(Template, KernelSpec)> =
        keys.iter().map(|k| (k.template, k.spec)).collect();
    shard_specs.dedup();

    // The GPU first, so a wrong --arch fails before anything is compiled.
    let gpu = if a.compile_only {
        None
    } else {
        Some(open_gpu(a.device, arch)?)
    };
    let started = Instant::now();
    let deadline = deadline.map(|d| started + d);
    let renderer = Renderer::embedded()?;
    let dir = BuildDir::new(&a.build_dir);
    fa4_gen::fsutil::ensure_writable_dir(dir.root())?;
    let nvrtc = load_nvrtc(quiet)?;
    let pool = compile_pool(a.jobs)?;
    let jobs = pool.current_num_threads();
    let support = match &gpu {
        Some(gpu) => {
            let path =
                fa4_gen::measure::support::build_support(&nvrtc, renderer.templates(), &dir, arch)
                    .map_err(CliError::Failed)?;
            Some(fa4_gen::measure::support::Support::load(
                gpu,
                &std::fs::read(path)?,
            )?)
        }
        None => None,
    };
    let db_path =
        a.db.clone()
            .unwrap_or_else(|| PathBuf::from(format!("tuning-db/{arch}.sled")));
    let db = match &gpu {
        Some(_) => Some(TuningDb::open(&db_path)?),
        None => None,
    };

    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} tuning {pos}/{len} [{elapsed_precise} eta {eta}] {msg}",
        )
        .expect("valid template"),
    );
    let watcher = Watcher {
        bar: bar.clone(),
        counts: Default::default(),
    };

    let mut compiled = 0usize;
    let mut built_total = 0usize;
    let mut compile_busy = Duration::ZERO;
    let mut totals = tune::Counts::default();
    let mut stopped = false;
    let mut measurer = match (&gpu, &support) {
        (Some(gpu), Some(support)) => Some(GpuMeasurer::new(gpu, support)?),
        _ => None,
    };
    let template_hash = |t: Template| renderer.template_hash(t).to_string();
    let device = gpu.as_ref().map(|g| Device {
        name: g.info.name.clone(),
        sm_count: g.info.sm_count,
        driver: g.info.driver.clone(),
        nvrtc: nvrtc.version_string(),
    });

    // After a template edit, the keys this run leaves out keep records of the old
    // version, which build-cache and bench --db skip: say so before the GPU time goes in.
    if let (Some(db), Some(device), false) = (&db, &device, a.compile_only) {
        let every_shard = tune::shard_keys(&specs, &buckets, 0, 1);
        let left = tune::stale_outside(&db.records()?, device, &template_hash, &every_shard);
        if !left.is_empty() {
            let mut tags: Vec<String> = left.iter().map(|k| k.spec.tag()).collect();
            tags.dedup();
            let shown = tags.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
            let more = tags.len().saturating_sub(4);
            eprintln!(
                "warning: {} keys outside this run have records of another template version \
                 ({shown}{}): build-cache and bench --db serve their defaults until they are \
                 tuned too (a wider `fa4-gen tune` keeps the timings of unchanged kernels)",
                left.len(),
                if more > 0 {
                    format!(" and {more} more specs")
                } else {
                    String::new()
                }
            );
        }
    }

    // Each spec's plan, planned once: with every key's record current, only the
    // candidates still to be timed (a finals top-up compiles the finalists alone).
    let mut to_build: Vec<(Template, KernelSpec, Vec<space::Planned>)> = Vec::new();
    for &(template, spec) in &shard_specs {
        let mut planned = space::plan(template, &spec);
        if let (Some(db), Some(device), false) = (&db, &device, a.compile_only) {
            let spec_keys: Vec<Key> = keys
                .iter()
                .filter(|k| k.template == template && k.spec == spec)
                .copied()
                .collect();
            let configs: Vec<TileConfig> =
                planned.iter().map(|p| p.candidate.config.clone()).collect();
            if let Some(needed) = tune::configs_to_time(
                db,
                device,
                &template_hash,
                &spec_keys,
                &configs,
                a.retake_finals,
            )? {
                planned.retain(|p| needed.contains(&p.candidate.config));
            }
        }
        to_build.push((template, spec, planned));
    }

    std::thread::scope(|scope| -> CliResult {
        // Compile spec k+1 while the GPU measures spec k (one build in hand at a time).
        let (tx, rx) = mpsc::sync_channel::<(Built, Duration)>(1);
        let (renderer, dir, nvrtc, pool) = (&renderer, &dir, &nvrtc, &pool);
        scope.spawn(move || {
            for (template, spec, planned) in to_build {
                let t = Instant::now();
                let summary =
                    pool.install(|| compile::build(nvrtc, renderer, dir, &planned, &QuietReporter));
                if tx
                    .send((
                        Built {
                            template,
                            spec,
                            summary,
                        },
                        t.elapsed(),
                    ))
                    .is_err()
                {
                    return; // the GPU loop ended early
                }
            }
        });
        for (built, took) in rx {
            let summary = built.summary?;
            compile_busy += took;
            compiled += summary.compiled;
            built_total += summary.built().count();
            check_build(&summary)?;
            watcher.counts.lock().expect("lock").compiled += summary.compiled;
            if a.compile_only {
                if !quiet {
                    println!(
                        "{:<34} {:>3} built, {:>3} set aside, {:>3} compiled now",
                        built.spec.tag(),
                        summary.built().count(),
                        summary.rejected().count(),
                        summary.compiled
                    );
                }
                continue;
            }
            // The default first: it is candidate 0 of every new record.
            let mut kernels: Vec<TuneKernel> = Vec::new();
            for k in summary.built() {
                let cubin = dir.read_cubin(k).map_err(CliError::Failed)?;
                kernels.push(TuneKernel {
                    built: k.clone(),
                    cubin,
                });
            }
            kernels.sort_by(|x, y| {
                (!x.built.is_default, &x.built.candidate.config)
                    .cmp(&(!y.built.is_default, &y.built.candidate.config))
            });
            let spec_keys: Vec<Key> = keys
                .iter()
                .filter(|k| k.template == built.template && k.spec == built.spec)
                .copied()
                .collect();
            let session = tune::Session {
                db: db.as_ref().expect("a database with a GPU"),
                device: device.clone().expect("a device with a GPU"),
                template_hash: &template_hash,
                deadline,
                retake_finals: a.retake_finals,
            };
            let (counts, hit_deadline) = tune::tune_spec(
                &session,
                &spec_keys,
                &kernels,
                measurer.as_mut().expect("a measurer with a GPU"),
                &watcher,
            )
            .map_err(|e| CliError::Failed(e.to_string()))?;
            totals += counts;
            if hit_deadline {
                stopped = true;
                break;
            }
        }
        Ok(())
    })?;
    bar.finish_and_clear();

    let wall = started.elapsed();
    let per_core = compiled as f64 / (compile_busy.as_secs_f64() * jobs as f64).max(1e-9);
    if a.compile_only {
        let summary = serde_json::json!({
            "arch": arch.name(),
            "specs": shard_specs.len(),
            "built": built_total,
            "compiled": compiled,
            "compile_seconds": compile_busy.as_secs_f64(),
            "kernels_per_second_per_core": per_core,
        });
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&summary).expect("serialises")
            );
        } else {
            println!(
                "{} specs: {built_total} kernels built ({compiled} compiled now, {per_core:.2} kernels/s per core on {jobs} cores); nothing timed (--compile-only)",
                shard_specs.len()
            );
        }
        return Ok(());
    }

    let db = db.expect("a database with a GPU");
    let device = device.expect("a device with a GPU");
    let rows = tune::winners(&db, &device, &keys, &template_hash)?;
    let gpu_busy = measurer.as_ref().map_or(Duration::ZERO, |m| m.busy);
    let busy_share = gpu_busy.as_secs_f64() / wall.as_secs_f64().max(1e-9);
    if a.json {
        let out = serde_json::json!({
            "device": device,
            "db": db_path,
            "keys": rows,
            "counts": {
                "compiled": compiled,
                "checked": totals.checked,
                "check_failed": totals.check_failed,
                "timed": totals.timed,
                "time_failed": totals.time_failed,
                "finals": totals.finals,
                "already_measured": totals.skipped,
                "carried": totals.carried,
                "finals_carried": totals.finals_carried,
                "finals_unbuilt": totals.finals_unbuilt,
            },
            "wall_seconds": wall.as_secs_f64(),
            "gpu_busy_share": busy_share,
            "kernels_per_second_per_core": per_core,
            "stopped_by_budget": stopped,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serialises")
        );
        return Ok(());
    }
    // ms are settled times where the key's finals ran, screening times (marked *)
    // where they did not.
    println!(
        "{:<34} {:>6} {:<30} {:>10} {:<30} {:>10} {:>7}",
        "spec", "bucket", "default", "ms", "winner", "ms", "speedup"
    );
    for r in &rows {
        let mark = if r.settled { " " } else { "*" };
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |m| format!("{m:.4}{mark}"));
        println!(
            "{:<34} {:>6} {:<30} {:>10} {:<30} {:>10} {:>7}",
            r.spec,
            r.bucket,
            r.default_config,
            ms(r.default_ms),
            r.winner_config.as_deref().unwrap_or("(none measured)"),
            ms(r.winner_ms),
            r.speedup.map_or("-".into(), |s| format!("{s:.3}x"))
        );
    }
    if rows.iter().any(|r| !r.settled) {
        println!("* screening times: the key's finals have not run yet");
    }
    let gains: Vec<f64> = rows.iter().filter_map(|r| r.speedup).collect();
    let geomean = (gains.iter().map(|g| g.ln()).sum::<f64>() / gains.len().max(1) as f64).exp();
    println!(
        "{} keys on {} into {}: winners {geomean:.3}x the defaults (geomean); {} checked ({} wrong), {} timed ({} failed), {} finalists re-timed, {} already measured, {} kept from another template version (same machine code; the finals of {} keys with them)",
        rows.len(),
        device.name,
        db_path.display(),
        totals.checked,
        totals.check_failed,
        totals.timed,
        totals.time_failed,
        totals.finals,
        totals.skipped,
        totals.carried,
        totals.finals_carried
    );
    println!(
        "wall {:.1} s, GPU busy {:.0}% of it; {compiled} kernels compiled at {per_core:.2} kernels/s per core ({jobs} cores)",
        wall.as_secs_f64(),
        busy_share * 100.0
    );
    if totals.finals_unbuilt > 0 {
        println!(
            "the finals of {} keys were left as they were: a finalist was not built in this run; run the same command again to take them",
            totals.finals_unbuilt
        );
    }
    if stopped {
        println!("stopped by --budget: run the same command again to measure the rest");
    }
    Ok(())
}

/// Opens the GPU for `arch` (the shared check), or says how to go on without it.
fn open_gpu(device: usize, arch: Arch) -> Result<Gpu, CliError> {
    let hint =
        format!("`--compile-only` renders, compiles and prunes the {arch} kernels without a GPU");
    super::open_gpu(device, &[arch])
        .map(|(gpu, _)| gpu)
        .map_err(|e| match e {
            CliError::Usage(m) => CliError::Usage(format!("{m}; {hint}")),
            CliError::Failed(m) => CliError::Failed(format!("no GPU to tune on ({m}); {hint}")),
        })
}

/// The compile thread reports nothing: the tune's bar shows its counts.
pub(super) struct QuietReporter;
impl Reporter for QuietReporter {}

#[derive(Default)]
pub(super) struct Tally {
    compiled: usize,
    checked: usize,
    wrong: usize,
    timed: usize,
    failed: usize,
    finals: usize,
}

impl Tally {
    /// The bar's message: the counts, then what `key` is at.
    fn line(&self, key: &Key, at: &str) -> String {
        format!(
            "compiled {} · checked {} ({} wrong) · timed {} · failed {} · finals {} · {} s{}: {at}",
            self.compiled,
            self.checked,
            self.wrong,
            self.timed,
            self.failed,
            self.finals,
            key.spec.tag(),
            key.bucket.seqlen,
        )
    }
}

/// Moves the bar and keeps its message: counts and the current key's best.
pub(super) struct Watcher {
    bar: ProgressBar,
    counts: std::sync::Mutex<Tally>,
}

impl Progress for Watcher {
    fn planned(&self, count: usize) {
        self.bar.inc_length(count as u64);
    }

    fn checked(&self, _kernel: &TuneKernel, passed: bool) {
        let mut c = self.counts.lock().expect("lock");
        c.checked += 1;
        c.wrong += usize::from(!passed);
    }

    fn measured(
        &self,
        key: &Key,
        _kernel: &TuneKernel,
        outcome: &Outcome,
        best: Option<(String, f64)>,
    ) {
        let mut c = self.counts.lock().expect("lock");
        match outcome {
            Outcome::Measured { .. } => c.timed += 1,
            Outcome::Failed { .. } => c.failed += 1,
        }
        self.bar.inc(1);
        let best = best.map_or("-".into(), |(cfg, ms)| format!("{cfg} {ms:.4} ms"));
        self.bar.set_message(c.line(key, &format!("best {best}")));
    }

    fn finalist(&self, key: &Key, kernel: &TuneKernel, settled_ms: Option<f64>) {
        let mut c = self.counts.lock().expect("lock");
        match settled_ms {
            Some(_) => c.finals += 1,
            None => c.failed += 1,
        }
        self.bar.inc(1);
        let settled = settled_ms.map_or("failed".into(), |ms| format!("{ms:.4} ms settled"));
        let at = format!("finalist {} {settled}", kernel.built.candidate.config.tag());
        self.bar.set_message(c.line(key, &at));
    }

    fn finals_kept(&self, key: &Key, planned: usize) {
        let c = self.counts.lock().expect("lock");
        self.bar.inc(planned as u64);
        self.bar
            .set_message(c.line(key, "finals kept (same machine code)"));
    }
}
