//! `fa4-gen tune`: the arguments become a [`TuneRequest`] for `fa4_gen::tune::run`, which
//! compiles one spec ahead of the GPU and keeps every outcome in the tuning database;
//! this shows its progress (`progress`) and prints the closing table.

mod progress;

use std::path::PathBuf;

use clap::Args;
use fa4_spec::Arch;

use super::{check_build, parse_list, CliError, CliResult, SpecArgs};
use fa4_gen::measure::gpu::Gpu;
use fa4_gen::tune::{self, RunError, TuneRequest, TuneSummary};
use progress::Printer;

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
    /// Ragged buckets to tune (varlen batches of prompts of mixed length, timed on such a
    /// batch; causal and unmasked specs): both (each bucket dense and ragged), yes
    /// (ragged only) or no (dense only).
    #[arg(long, default_value = "both")]
    pub ragged: String,
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

pub(super) fn run(a: TuneArgs, quiet: bool) -> CliResult {
    let quiet = quiet || a.json;
    let request = request(&a)?;
    // The GPU first, so a wrong --arch fails before anything is compiled.
    let gpu = if a.compile_only {
        None
    } else {
        Some(open_gpu(a.device, request.arch)?)
    };
    let printer = Printer::new(quiet, a.compile_only);
    let summary = tune::run(&request, gpu.as_ref(), &printer).map_err(|e| match e {
        // NVRTC's logs first, then what failed.
        RunError::UnsoundBuild(s) => check_build(&s)
            .err()
            .unwrap_or_else(|| CliError::Failed(RunError::UnsoundBuild(s).to_string())),
        e => CliError::Failed(e.to_string()),
    })?;
    printer.finish();
    print_summary(&summary, a.json);
    Ok(())
}

/// The validated request: one arch, its specs (both causal masks unless told), the
/// buckets, the shard and the budget.
fn request(a: &TuneArgs) -> Result<TuneRequest, CliError> {
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
    let buckets = tune::parse_buckets(&a.buckets)
        .and_then(|b| tune::with_ragged(&b, &a.ragged))
        .map_err(CliError::Usage)?;
    let shard = match &a.shard {
        Some(s) => tune::parse_shard(s).map_err(CliError::Usage)?,
        None => (0, 1),
    };
    let budget = match &a.budget {
        Some(b) => Some(tune::parse_budget(b).map_err(CliError::Usage)?),
        None => None,
    };
    Ok(TuneRequest {
        buckets,
        shard,
        budget,
        db: a
            .db
            .clone()
            .unwrap_or_else(|| TuneRequest::default_db(arch)),
        retake_finals: a.retake_finals,
        build_dir: a.build_dir.clone(),
        jobs: a.jobs,
        ..TuneRequest::new(arch, specs)
    })
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

/// The closing summary: the compile numbers, and with a GPU the table of winners
/// against the defaults (text, or JSON with `--json`).
fn print_summary(s: &TuneSummary, json: bool) {
    let (compiled, jobs, per_core) = (s.compiled, s.jobs, s.kernels_per_second_per_core());
    if json {
        let out = serde_json::to_string_pretty(&s.to_json()).expect("serialises");
        println!("{out}");
        return;
    }
    let Some(t) = &s.timing else {
        println!(
            "{} specs: {} kernels built ({compiled} compiled now, {per_core:.2} kernels/s per core on {jobs} cores); nothing timed (--compile-only)",
            s.specs, s.built
        );
        return;
    };
    let (c, busy_share) = (&t.counts, s.gpu_busy_share());
    // ms are settled times where the key's finals ran, screening times (marked *)
    // where they did not.
    println!(
        "{:<34} {:>11} {:<30} {:>10} {:<30} {:>10} {:>7}",
        "spec", "bucket", "default", "ms", "winner", "ms", "speedup"
    );
    for r in &t.rows {
        let mark = if r.settled { " " } else { "*" };
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |m| format!("{m:.4}{mark}"));
        println!(
            "{:<34} {:>11} {:<30} {:>10} {:<30} {:>10} {:>7}",
            r.spec,
            fa4_spec::Bucket {
                seqlen: r.bucket,
                ragged: r.ragged
            }
            .to_string(),
            r.default_config,
            ms(r.default_ms),
            r.winner_config.as_deref().unwrap_or("(none measured)"),
            ms(r.winner_ms),
            r.speedup.map_or("-".into(), |s| format!("{s:.3}x"))
        );
    }
    if t.rows.iter().any(|r| !r.settled) {
        println!("* screening times: the key's finals have not run yet");
    }
    println!(
        "{} keys on {} into {}: winners {:.3}x the defaults (geomean); {} checked ({} wrong), {} timed ({} failed), {} finalists re-timed, {} already measured, {} kept from another template version (same machine code; the finals of {} keys with them)",
        t.rows.len(),
        t.device.name,
        t.db.display(),
        t.geomean_speedup(),
        c.checked,
        c.check_failed,
        c.timed,
        c.time_failed,
        c.finals,
        c.skipped,
        c.carried,
        c.finals_carried
    );
    println!(
        "wall {:.1} s, GPU busy {:.0}% of it; {compiled} kernels compiled at {per_core:.2} kernels/s per core ({jobs} cores)",
        s.wall.as_secs_f64(),
        busy_share * 100.0
    );
    if c.finals_unbuilt > 0 {
        println!(
            "the finals of {} keys were left as they were: a finalist was not built in this run; run the same command again to take them",
            c.finals_unbuilt
        );
    }
    if t.stopped_by_budget {
        println!("stopped by --budget: run the same command again to measure the rest");
    }
}
