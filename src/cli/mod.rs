//! The command line: argument parsing (clap), turning arguments into validated
//! selections, and printing. The work itself is done by the library modules.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

use clap::{Args, Parser, Subcommand};
use fa4_spec::{fnv1a64, Arch, Dtype, Features, KernelSpec, MaskKind, ParseError};
use indicatif::{ProgressBar, ProgressStyle};

use crate::compile::{self, BuildDir, BuildSummary, BuiltKernel, Nvrtc, Outcome, Reporter};
use crate::measure::gpu::{FwdKernel, Gpu};
use crate::measure::verify;
use crate::render::Renderer;
use crate::space::{self, Candidate, Planned, RejectKind, Selection, Template, TemplateSpace};

mod cache;
mod tune;

/// Ahead-of-time generator, compiler and autotuner for FlashAttention-style prefill kernels.
#[derive(Debug, Parser)]
#[command(name = "fa4-gen", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Print only results and errors (no progress bars).
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the config space: specs, candidate configs and what static pruning keeps.
    List(ListArgs),
    /// Render kernel sources (no compiler needed).
    Render(RenderArgs),
    /// Render and compile kernels with NVRTC: cubins plus a resource report.
    Compile(CompileArgs),
    /// Run kernels on the GPU and check them against an f32 reference.
    Verify(VerifyArgs),
    /// Time kernels on the FlashAttention-3 paper's grid, in the peers' row format.
    Bench(BenchArgs),
    /// Check and time every candidate per sequence-length bucket; keep the winners in
    /// the tuning database.
    Tune(tune::TuneArgs),
    /// Read and maintain a tuning database: show, export, import, merge, gc.
    Db(DbArgs),
    /// Build the shipped kernel cache (generated/) from the tuning-db export.
    BuildCache(cache::BuildCacheArgs),
    /// Which kernel the dispatcher picks for a problem, and why (no GPU).
    Explain(cache::ExplainArgs),
    /// The main loop of built kernels, read from their SASS: instructions per iteration
    /// and of which kinds, optionally against another build (needs nvdisasm; no GPU).
    Sass(SassArgs),
}

#[derive(Debug, Args)]
pub struct SassArgs {
    /// Build folder to read (what `fa4-gen compile --out` wrote).
    #[arg(long, default_value = "build", env = "FA4_GEN_OUT")]
    pub out: PathBuf,
    /// The arch whose kernels to read.
    #[arg(long, default_value = "sm90")]
    pub arch: String,
    /// Only the kernels whose id contains this text.
    #[arg(long)]
    pub filter: Option<String>,
    /// Another build folder (e.g. of the last commit's templates): each kernel beside the
    /// one there of the same spec and config, whatever their template hashes.
    #[arg(long)]
    pub against: Option<PathBuf>,
    /// Print JSON (every opcode's count too).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DbArgs {
    #[command(subcommand)]
    pub action: DbAction,
    /// The tuning database (a folder; created when missing).
    #[arg(long, global = true, default_value = "tuning-db/sm90.sled")]
    pub db: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum DbAction {
    /// One line per key: spec, bucket, device, winner and its speed against the default.
    Show,
    /// Write the sorted JSON export (the file committed under tuning-db/).
    Export {
        #[arg(long, default_value = "tuning-db/sm90.json")]
        out: PathBuf,
    },
    /// Add the records of an export; on a shared key the faster winner stays.
    Import { file: PathBuf },
    /// Add the records of another database; the faster winner per key and device stays.
    Merge { other: PathBuf },
    /// Remove the records measured with other template versions than these.
    Gc,
    /// Move the records of older template versions to the current ones where a build of
    /// the current templates (`fa4-gen compile --out BUILD`) repeats the machine code of
    /// every kernel they timed: a template edit that changes none of a spec's kernels
    /// then costs its records no GPU time. The others stay for `fa4-gen tune`.
    Carry {
        /// Build folder of the current templates, covering the specs to carry.
        #[arg(long)]
        build: PathBuf,
    },
    /// Give timings recorded without a code hash the one of their kernel in a build of
    /// the same templates (`fa4-gen compile --out BUILD`), so that the next template edit
    /// keeps the timings of the kernels it leaves alone.
    StampCode {
        /// Build folder whose reports name the kernels.
        #[arg(long)]
        build: PathBuf,
    },
}

/// Which kernel specs to work on; every list is comma separated.
#[derive(Debug, Clone, Args)]
pub struct SpecArgs {
    /// GPU architectures: sm80, sm86, sm89, sm90, sm100, sm120.
    #[arg(long, value_delimiter = ',')]
    pub arch: Vec<String>,
    /// Head dims of Q and K, or QK/V pairs such as 192/128 (a bare 192 takes every V
    /// head dim offered with it) [default: every head dim offered].
    #[arg(long = "head-dim", value_delimiter = ',')]
    pub head_dim: Vec<String>,
    /// Element types: bf16, fp16 [default: both].
    #[arg(long, value_delimiter = ',')]
    pub dtype: Vec<String>,
    /// Masks: none, causal, local (a sliding window given at run time) [default: all].
    #[arg(long, value_delimiter = ',')]
    pub mask: Vec<String>,
    /// Features: none, or sinks, softcap, paged joined with + [default: none].
    #[arg(long, value_delimiter = ',')]
    pub features: Vec<String>,
    /// Templates [default: every template that supports the arch].
    #[arg(long, value_delimiter = ',')]
    pub template: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// List every candidate config with its verdict, not one line per spec.
    #[arg(long)]
    pub configs: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Build folder: sources go to <out>/src/<arch>/<id>.cu.
    #[arg(long, default_value = "build", env = "FA4_GEN_OUT")]
    pub out: PathBuf,
    /// Only each spec's heuristic default config.
    #[arg(long)]
    pub default_only: bool,
}

#[derive(Debug, Args)]
pub struct CompileArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Build folder for sources, cubins and the report.
    #[arg(long, default_value = "build", env = "FA4_GEN_OUT")]
    pub out: PathBuf,
    /// Only each spec's heuristic default config.
    #[arg(long)]
    pub default_only: bool,
    /// Only the configs whose tag contains this text (e.g. mufuturn1), as `verify` and
    /// `bench` take them: a probe's new tiles without the rest of their specs.
    #[arg(long)]
    pub config_filter: Option<String>,
    /// Parallel NVRTC compilations [default: one per core].
    #[arg(short, long)]
    pub jobs: Option<usize>,
    /// Print one line per kernel.
    #[arg(short, long)]
    pub verbose: bool,
}

/// Which configs of each spec a GPU command runs: the heuristic defaults unless asked.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// Every compiled config, not only each spec's default.
    #[arg(long)]
    pub all_configs: bool,
    /// Only the configs whose tag contains this text (e.g. packgqa1); implies --all-configs.
    #[arg(long)]
    pub config_filter: Option<String>,
}

impl ConfigArgs {
    /// `None` for the defaults, `Some(text)` for every config whose tag contains `text`
    /// (all of them for "").
    fn choice(&self) -> Option<&str> {
        match &self.config_filter {
            Some(f) => Some(f.as_str()),
            None => self.all_configs.then_some(""),
        }
    }
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Build folder to take cubins from (kernels missing there are compiled into it).
    #[arg(long, default_value = "build", env = "FA4_GEN_OUT")]
    pub build_dir: PathBuf,
    #[command(flatten)]
    pub configs: ConfigArgs,
    /// Only these cases (names as printed), comma separated.
    #[arg(long, value_delimiter = ',')]
    pub cases: Vec<String>,
    /// Seed of the random inputs [default: from the clock; printed for replay].
    #[arg(long)]
    pub seed: Option<u64>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Also time each cell's tuned choice from this tuning database (rows with backend
    /// `fa4-gen-tuned`: the winner where it beats the default by 2%, or 10% on screening
    /// times before the key's finals, else the default).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Head dims.
    #[arg(long = "head-dim", value_delimiter = ',', default_value = "64,128,256")]
    pub head_dim: Vec<u32>,
    /// Sequence lengths (batch = total tokens / seqlen).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "512,1024,2048,4096,8192,16384"
    )]
    pub seqlen: Vec<i32>,
    /// Masks: none, causal, local.
    #[arg(long, value_delimiter = ',', default_value = "none,causal")]
    pub mask: Vec<String>,
    /// Features: none, or sinks, softcap, paged joined with + (sinks+softcap).
    #[arg(long, value_delimiter = ',', default_value = "none")]
    pub features: Vec<String>,
    /// Keys per page for paged kernels.
    #[arg(long, default_value_t = 16)]
    pub page_size: i32,
    /// Time model layers instead of the grid: gpt-oss-20b (sliding and full layers),
    /// llama-3-8b, or all. Each layer brings its own head dim, heads, mask and features.
    #[arg(long, value_delimiter = ',')]
    pub layers: Vec<String>,
    /// Hand the grid's batches over packed with cu_seqlens (varlen) instead of dense.
    #[arg(long)]
    pub varlen: bool,
    /// Sliding window LEFT,RIGHT for local masks (-1: unbounded).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "128,0",
        allow_hyphen_values = true
    )]
    pub window: Vec<i32>,
    /// Soft-capping value for softcap kernels.
    #[arg(long, default_value_t = 50.0)]
    pub softcap: f32,
    /// Element type.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Tokens per batch.
    #[arg(long, default_value_t = 16384)]
    pub total_tokens: i32,
    /// Hidden size: heads = hidden / head dim.
    #[arg(long, default_value_t = 2048)]
    pub hidden: i32,
    #[command(flatten)]
    pub configs: ConfigArgs,
    /// Kernel time spent per (kernel, cell), in milliseconds.
    #[arg(long, default_value_t = 200.0)]
    pub budget_ms: f64,
    /// Back-to-back runs before the timed ones, in milliseconds of kernel time, so the
    /// clocks settle (the peers' `do_bench` warms up for 50)
    #[arg(long, default_value_t = 50.0)]
    pub warmup_ms: f64,
    /// Build folder to take cubins from (kernels missing there are compiled into it).
    #[arg(long, default_value = "build", env = "FA4_GEN_OUT")]
    pub build_dir: PathBuf,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Write the rows as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Measure the host's cost of a prefill call through the runtime instead (lookup +
    /// launch per call, first call, preload), with the Python module's and FA4's per-call
    /// overhead and first call beside it when python3 with torch (and flash_attn.cute)
    /// is there.
    #[arg(long)]
    pub host: bool,
    /// The kernel cache `--host` launches from.
    #[arg(long, default_value = "generated")]
    pub cache: PathBuf,
    /// Templates to time [default: every template that supports the GPU's arch].
    #[arg(long, value_delimiter = ',')]
    pub template: Vec<String>,
    /// Time each cell on this many buffer sets, each allocated behind a spacer of another
    /// size (rows carry `placement`), to tell a kernel's speed from where its buffers
    /// landed in memory.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub placements: u32,
    /// With --placements: move only this buffer (q, k, v or o) behind each set's spacer,
    /// the others staying where the first set put them [default: all four together].
    #[arg(long)]
    pub move_buffer: Option<String>,
    /// Launch without a split workspace: unmasked persistent kernels then work their last
    /// round whole instead of sharing its tiles out by keys (to measure what that buys).
    #[arg(long)]
    pub no_split_tail: bool,
}

/// A failure of a command, with its exit status.
#[derive(Debug)]
pub enum CliError {
    /// The arguments ask for something fa4-gen does not offer (exit 2).
    Usage(String),
    /// The work failed (exit 1).
    Failed(String),
}

impl<E: std::error::Error> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError::Failed(e.to_string())
    }
}

type CliResult = Result<(), CliError>;

/// Runs a parsed command line; prints errors as one `error:` line.
pub fn run(cli: Cli) -> ExitCode {
    let quiet = cli.quiet;
    let result = match cli.command {
        Command::List(a) => list(a),
        Command::Render(a) => render(a, quiet),
        Command::Compile(a) => compile_cmd(a, quiet),
        Command::Verify(a) => verify_cmd(a, quiet),
        Command::Bench(a) => bench_cmd(a, quiet),
        Command::Tune(a) => tune::tune_cmd(a, quiet),
        Command::Db(a) => db_cmd(a),
        Command::BuildCache(a) => cache::build_cache_cmd(a, quiet),
        Command::Explain(a) => cache::explain_cmd(a),
        Command::Sass(a) => sass_cmd(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Usage(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
        Err(CliError::Failed(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(1)
        }
    }
}

// ---- arguments -> selections -------------------------------------------------------------

fn parse_list<T: FromStr<Err = ParseError>>(values: &[String]) -> Result<Vec<T>, CliError> {
    values
        .iter()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.parse::<T>().map_err(|e| CliError::Usage(e.to_string())))
        .collect()
}

impl SpecArgs {
    /// The selection these arguments name; `default_archs` when --arch is absent.
    fn selection(&self, default_archs: &[Arch]) -> Result<Selection, CliError> {
        let archs: Vec<Arch> = parse_list(&self.arch)?;
        let defaulted = archs.is_empty();
        let mut sel = Selection::all(if defaulted {
            default_archs.to_vec()
        } else {
            archs
        });
        let dtypes: Vec<Dtype> = parse_list(&self.dtype)?;
        if !dtypes.is_empty() {
            sel.dtypes = dtypes;
        }
        let masks: Vec<MaskKind> = parse_list(&self.mask)?;
        if !masks.is_empty() {
            sel.masks = masks;
        }
        let features: Vec<Features> = parse_list(&self.features)?;
        if !features.is_empty() {
            sel.features = features;
        }
        let templates: Vec<Template> = parse_list(&self.template)?;
        if !templates.is_empty() {
            sel.templates = templates;
        }
        // Without --arch, the archs some selected template compiles for (`--template
        // hopper` alone means sm90); archs named with --arch stay, and a template that
        // cannot compile for one is an error.
        if defaulted {
            let templates = &sel.templates;
            let kept: Vec<Arch> = sel
                .archs
                .iter()
                .copied()
                .filter(|a| templates.iter().any(|t| t.archs().contains(a)))
                .collect();
            // None left (e.g. --template hopper on an sm80 GPU): keep them, so that
            // specs() names the arch and what the templates compile for.
            if !kept.is_empty() {
                sel.archs = kept;
            }
        }
        sel.head_dims = self
            .head_dim
            .iter()
            .filter(|v| !v.trim().is_empty())
            .map(|v| head_dims_arg(v))
            .collect::<Result<_, CliError>>()?;
        Ok(sel)
    }

    fn specs(&self, default_archs: &[Arch]) -> Result<Vec<(Template, KernelSpec)>, CliError> {
        self.selection(default_archs)?
            .specs()
            .map_err(|e| CliError::Usage(e.to_string()))
    }
}

fn plan_all(specs: &[(Template, KernelSpec)], default_only: bool) -> Vec<Planned> {
    specs
        .iter()
        .flat_map(|(t, s)| space::plan(*t, s))
        .filter(|p| !default_only || p.is_default)
        .collect()
}

fn untested_note(archs: impl IntoIterator<Item = Arch>) -> Option<String> {
    let mut untested: Vec<Arch> = archs
        .into_iter()
        .filter(|a| !a.verified_on_hardware())
        .collect();
    untested.sort_unstable();
    untested.dedup();
    (!untested.is_empty()).then(|| {
        let names: Vec<&str> = untested.iter().map(|a| a.name()).collect();
        format!(
            "note: {} kernels are compile-checked only: no such GPU is available to run or time them",
            names.join(", ")
        )
    })
}

// ---- list ----------------------------------------------------------------------------------

fn list(a: ListArgs) -> CliResult {
    let specs = a.spec.specs(&Arch::ALL)?;
    let planned = plan_all(&specs, false);
    if a.json {
        let rows: Vec<serde_json::Value> = planned
            .iter()
            .map(|p| {
                let verdict = match &p.verdict {
                    Ok(fp) => serde_json::json!({ "ok": fp }),
                    Err(r) => serde_json::json!({ "rejected": r }),
                };
                serde_json::json!({
                    "template": p.candidate.template,
                    "spec": p.candidate.spec,
                    "config": p.candidate.config,
                    "is_default": p.is_default,
                    "verdict": verdict,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("serialises")
        );
        return Ok(());
    }
    if a.configs {
        println!(
            "{:<9} {:<26} {:<22} {:>8} {:>5}  verdict",
            "template", "spec", "config", "smem", "regs~"
        );
        for p in &planned {
            let (smem, regs, verdict) = match &p.verdict {
                Ok(fp) => (
                    format!("{}K", fp.smem_bytes.div_ceil(1024)),
                    fp.est_registers.to_string(),
                    if p.is_default {
                        "default".to_string()
                    } else {
                        "ok".to_string()
                    },
                ),
                Err(r) => ("-".into(), "-".into(), format!("pruned: {}", r.reason)),
            };
            println!(
                "{:<9} {:<26} {:<22} {:>8} {:>5}  {verdict}",
                p.candidate.template.name(),
                p.candidate.spec.tag(),
                p.candidate.config.tag(),
                smem,
                regs
            );
        }
    } else {
        println!(
            "{:<9} {:<6} {:<5} {:>7} {:<7} {:>5} {:>5}  {:<22} {:>6} {:>5}",
            "template",
            "arch",
            "dtype",
            "hdim",
            "mask",
            "cands",
            "kept",
            "default config",
            "smem",
            "regs~"
        );
        for (t, s) in &specs {
            let plan = space::plan(*t, s);
            let kept = plan.iter().filter(|p| p.verdict.is_ok()).count();
            let default = plan
                .iter()
                .find(|p| p.is_default)
                .expect("default in space");
            let fp = default
                .verdict
                .as_ref()
                .expect("default passes the static check");
            println!(
                "{:<9} {:<6} {:<5} {:>7} {:<7} {:>5} {:>5}  {:<22} {:>5}K {:>5}",
                t.name(),
                s.arch.name(),
                s.dtype.name(),
                fa4_spec::head_dims_name(s.head_dim, Some(s.head_dim_v)),
                s.mask.name(),
                plan.len(),
                kept,
                default.candidate.config.tag(),
                fp.smem_bytes.div_ceil(1024),
                fp.est_registers
            );
        }
    }
    if let Some(note) = untested_note(specs.iter().map(|(_, s)| s.arch)) {
        println!("{note}");
    }
    Ok(())
}

/// A `--head-dim` value: `128`, or a QK/V pair `192/128`.
fn head_dims_arg(v: &str) -> Result<(u32, Option<u32>), CliError> {
    let usage = || {
        CliError::Usage(format!(
            "head dim `{v}` is not a number or a QK/V pair: pass e.g. --head-dim 64,128 or \
             --head-dim 192/128"
        ))
    };
    let (qk, dv) = match v.trim().split_once('/') {
        Some((qk, dv)) => (qk, Some(dv.trim().parse::<u32>().map_err(|_| usage())?)),
        None => (v.trim(), None),
    };
    Ok((qk.trim().parse::<u32>().map_err(|_| usage())?, dv))
}

// ---- render --------------------------------------------------------------------------------

fn render(a: RenderArgs, quiet: bool) -> CliResult {
    let specs = a.spec.specs(&Arch::ALL)?;
    let planned = plan_all(&specs, a.default_only);
    let renderer = Renderer::embedded()?;
    let dir = BuildDir::new(&a.out);
    dir.prepare(&renderer)?;
    let mut rendered = 0;
    for p in &planned {
        let Ok(fp) = &p.verdict else { continue };
        let k = renderer.render(&p.candidate, fp)?;
        crate::fsutil::write_if_changed(
            &dir.path(&BuildDir::source_rel(p.candidate.spec.arch, &k.id)),
            k.source.as_bytes(),
        )?;
        rendered += 1;
    }
    if !quiet {
        println!(
            "rendered {rendered} kernels into {} ({} pruned before rendering)",
            dir.path("src").display(),
            planned.len() - rendered
        );
    }
    Ok(())
}

// ---- compile -------------------------------------------------------------------------------

struct BarReporter(ProgressBar);

impl BarReporter {
    fn new(quiet: bool) -> Self {
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(0)
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} compiling {pos}/{len} [{elapsed_precise} eta {eta}] {msg}",
            )
            .expect("valid template"),
        );
        BarReporter(bar)
    }
}

impl Reporter for BarReporter {
    fn start(&self, to_compile: usize) {
        self.0.set_length(to_compile as u64);
    }
    fn finished(&self, outcome: &Outcome) {
        self.0.inc(1);
        if let Outcome::Rejected(r) = outcome {
            self.0
                .set_message(format!("last rejected: {}", r.candidate.config.tag()));
        }
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

fn load_nvrtc(quiet: bool) -> Result<Nvrtc, CliError> {
    let nvrtc = Nvrtc::load()?;
    if nvrtc.version() != (13, 0) && !quiet {
        eprintln!(
            "warning: NVRTC {} from {}: cubins meant to ship are built with 13.0.x (the GPU hosts run CUDA 13.0)",
            nvrtc.version_string(),
            nvrtc.path()
        );
    }
    Ok(nvrtc)
}

/// The threads NVRTC compiles on: `jobs`, or one per core.
fn compile_pool(jobs: Option<usize>) -> Result<rayon::ThreadPool, CliError> {
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| CliError::Failed(e.to_string()))
}

fn compile_cmd(a: CompileArgs, quiet: bool) -> CliResult {
    if a.spec.arch.is_empty() {
        return Err(CliError::Usage(
            "compile needs --arch (one or more of sm80, sm86, sm89, sm90, sm100, sm120)".into(),
        ));
    }
    let specs = a.spec.specs(&[])?;
    let mut planned = plan_all(&specs, a.default_only);
    if let Some(filter) = &a.config_filter {
        planned.retain(|p| p.candidate.config.tag().contains(filter.as_str()));
        if planned.is_empty() {
            return Err(CliError::Usage(format!(
                "no config of the selected specs has a tag containing {filter:?}: \
                 `fa4-gen list --configs` shows their tags"
            )));
        }
    }
    let renderer = Renderer::embedded()?;
    let dir = BuildDir::new(&a.out);
    crate::fsutil::ensure_writable_dir(dir.root())?;
    let nvrtc = load_nvrtc(quiet)?;
    let pool = compile_pool(a.jobs)?;
    let reporter = BarReporter::new(quiet);
    let summary = pool.install(|| compile::build(&nvrtc, &renderer, &dir, &planned, &reporter))?;
    let mut archs: Vec<Arch> = specs.iter().map(|(_, s)| s.arch).collect();
    archs.dedup();
    for arch in &archs {
        crate::measure::support::build_support(&nvrtc, renderer.templates(), &dir, *arch)
            .map_err(CliError::Failed)?;
    }
    print_build_summary(
        &summary,
        &dir,
        a.verbose,
        quiet,
        pool.current_num_threads(),
        &nvrtc,
    );
    if let Some(note) = untested_note(archs) {
        if !quiet {
            println!("{note}");
        }
    }
    check_build(&summary)
}

/// A built kernel's id without its hash: its spec and config, across template edits.
fn id_without_hash(id: &str) -> &str {
    id.rsplit_once('_').map_or(id, |(head, _)| head)
}

/// One built kernel's SASS, as `fa4-gen sass` reports it.
#[derive(serde::Serialize)]
struct KernelSass {
    kernel: String,
    main_loop: Option<compile::sass::LoopCensus>,
    /// Instructions in the whole kernel, each once (`sass::instruction_count`).
    instructions: u32,
    /// LDL/STL anywhere in the kernel.
    local_accesses: u32,
}

impl KernelSass {
    /// Instructions outside the main loop: once per block or work tile, or in outer loops.
    /// `instructions` leaves NOPs out, so the loop's NOPs are not taken off it.
    fn outside_loop(&self) -> u32 {
        let in_loop = self.main_loop.as_ref().map_or(0, |c| {
            c.instructions - c.opcodes.get("NOP").copied().unwrap_or(0)
        });
        self.instructions.saturating_sub(in_loop)
    }
}

fn sass_cmd(a: SassArgs) -> CliResult {
    use compile::sass;
    let arch: Arch = a
        .arch
        .parse()
        .map_err(|e: ParseError| CliError::Usage(e.to_string()))?;
    let nvdisasm = sass::find_nvdisasm()
        .ok_or_else(|| CliError::Failed(sass::SassError::NoNvdisasm.to_string()))?;
    // (id without hash) -> census, of one build folder's kernels.
    let census_of = |root: &PathBuf| -> Result<BTreeMap<String, KernelSass>, CliError> {
        let dir = BuildDir::new(root);
        let report = dir.load_report(arch)?.ok_or_else(|| {
                let root = root.display();
                CliError::Usage(format!(
                    "{root}: nothing built for {arch}; run `fa4-gen compile --arch {arch} --out {root}` first"
                ))
            })?;
        let mut out = BTreeMap::new();
        for k in &report.kernels {
            if a.filter
                .as_ref()
                .is_some_and(|f| !k.id.0.contains(f.as_str()))
            {
                continue;
            }
            let text = sass::disassemble(&nvdisasm, &dir.path(&k.cubin))
                .map_err(|e| CliError::Failed(e.to_string()))?;
            out.insert(
                id_without_hash(&k.id.0).to_string(),
                KernelSass {
                    kernel: k.id.0.clone(),
                    main_loop: sass::main_loop(&text),
                    instructions: sass::instruction_count(&text),
                    local_accesses: sass::local_accesses(&text),
                },
            );
        }
        Ok(out)
    };
    let ours = census_of(&a.out)?;
    let theirs = a.against.as_ref().map(census_of).transpose()?;
    if a.json {
        let rows: Vec<serde_json::Value> = ours
            .iter()
            .map(|(key, k)| {
                let mut row = serde_json::to_value(k).expect("serialises");
                row["against"] = serde_json::to_value(theirs.as_ref().and_then(|t| t.get(key)))
                    .expect("serialises");
                row
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("serialises")
        );
        return Ok(());
    }
    // The main loop's census (one iteration); outside: the rest of the kernel, each
    // instruction once; local: LDL/STL in the main loop / in the whole kernel (spills and
    // their reloads). Against another build: the change of the loop and of the outside.
    println!(
        "{:>6} {:>6} {:>5} {:>5} {:>7} {:>7}  {}kernel (main loop, one iteration)",
        "instr",
        "tensor",
        "mufu",
        "r2ur",
        "local",
        "outside",
        if theirs.is_some() { "   against  " } else { "" }
    );
    let mut changed = 0;
    for (key, k) in &ours {
        let id = &k.kernel;
        let Some(c) = &k.main_loop else {
            println!(
                "{:>34} {:>7}  {id} (no loop with tensor-core instructions)",
                "-", k.instructions
            );
            continue;
        };
        let against = match theirs.as_ref().map(|t| t.get(key)) {
            None => String::new(),
            Some(Some(
                o @ KernelSass {
                    main_loop: Some(ol),
                    ..
                },
            )) => {
                let (dl, dout) = (
                    c.instructions as i64 - ol.instructions as i64,
                    k.outside_loop() as i64 - o.outside_loop() as i64,
                );
                if dl == 0 && dout == 0 {
                    format!("{:>10}  ", "same")
                } else {
                    changed += usize::from(dl != 0);
                    format!("{:>10}  ", format!("{dl:+}/{dout:+}"))
                }
            }
            Some(_) => format!("{:>10}  ", "new"),
        };
        let local = format!("{}/{}", c.local, k.local_accesses);
        println!(
            "{:>6} {:>6} {:>5} {:>5} {local:>7} {:>7}  {against}{id}",
            c.instructions,
            c.tensor,
            c.mufu,
            c.r2ur,
            k.outside_loop()
        );
    }
    if let Some(t) = &theirs {
        println!(
            "{} kernels, {} matched in {}, {changed} with a main loop of another length",
            ours.len(),
            ours.keys().filter(|k| t.contains_key(*k)).count(),
            a.against
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        );
    }
    Ok(())
}

fn print_build_summary(
    s: &BuildSummary,
    dir: &BuildDir,
    verbose: bool,
    quiet: bool,
    jobs: usize,
    nvrtc: &Nvrtc,
) {
    if quiet {
        return;
    }
    if verbose {
        for o in &s.outcomes {
            match o {
                Outcome::Built { kernel, reused } => println!(
                    "built    {:<70} {:>3} regs {:>4}K smem{}",
                    kernel.id.0,
                    kernel.resources.registers,
                    kernel.footprint.smem_bytes.div_ceil(1024),
                    if *reused { " (cached)" } else { "" }
                ),
                Outcome::Rejected(r) => println!("rejected {:<70} {}", r.id.0, r.rejection.reason),
            }
        }
    }
    // One line per spec: counts, and the default's resources.
    let mut per_spec: BTreeMap<(Template, KernelSpec), (usize, usize, Option<&BuiltKernel>)> =
        BTreeMap::new();
    for o in &s.outcomes {
        let c = o.candidate();
        let e = per_spec.entry((c.template, c.spec)).or_default();
        match o {
            Outcome::Built { kernel, .. } => {
                e.0 += 1;
                if kernel.is_default {
                    e.2 = Some(kernel);
                }
            }
            Outcome::Rejected(_) => e.1 += 1,
        }
    }
    println!(
        "{:<9} {:<26} {:>5} {:>8}  default (regs, smem)",
        "template", "spec", "built", "rejected"
    );
    for ((t, spec), (built, rejected, default)) in &per_spec {
        let d = default.map_or("-".to_string(), |k| {
            format!(
                "{} ({} regs, {}K)",
                k.candidate.config.tag(),
                k.resources.registers,
                k.footprint.smem_bytes.div_ceil(1024)
            )
        });
        println!(
            "{:<9} {:<26} {:>5} {:>8}  {d}",
            t.name(),
            spec.tag(),
            built,
            rejected
        );
    }
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for r in s.rejected() {
        *reasons
            .entry(match r.rejection.kind {
                RejectKind::Shape => "shape",
                RejectKind::SharedMemory => "shared memory",
                RejectKind::Registers => "register estimate",
                RejectKind::Spills => "spills",
                RejectKind::Compile => "compile error",
            })
            .or_default() += 1;
    }
    let reasons: Vec<String> = reasons.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let built = s.built().count();
    let reused = s
        .outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Built { reused: true, .. }))
        .count();
    println!(
        "{built} kernels ready ({reused} cached), {} rejected ({}); compiled {} in {:.1} s, {:.2} kernels/s per job ({jobs} jobs), NVRTC {} from {}",
        s.rejected().count(),
        if reasons.is_empty() { "none".to_string() } else { reasons.join(", ") },
        s.compiled,
        s.wall_seconds,
        if s.wall_seconds > 0.0 { s.compiled as f64 / s.wall_seconds / jobs as f64 } else { 0.0 },
        s.nvrtc_version,
        nvrtc.path(),
    );
    println!("cubins and report under {}", dir.root().display());
}

/// A build fails when NVRTC refused a source or a spec's default did not survive: both
/// are bugs in a template or the config space, never a tuning outcome.
fn check_build(s: &BuildSummary) -> CliResult {
    for (path, failure) in &s.failures {
        eprintln!(
            "error: NVRTC could not compile {}:\n{}",
            path.display(),
            failure.log.trim_end()
        );
    }
    let bad_defaults: Vec<String> = s
        .rejected()
        .filter(|r| r.is_default)
        .map(|r| format!("{} ({})", r.id, r.rejection.reason))
        .collect();
    if !s.failures.is_empty() {
        return Err(CliError::Failed(format!(
            "{} kernels failed to compile (logs above)",
            s.failures.len()
        )));
    }
    if !bad_defaults.is_empty() {
        return Err(CliError::Failed(format!(
            "heuristic default configs were rejected: {}",
            bad_defaults.join("; ")
        )));
    }
    Ok(())
}

// ---- verify --------------------------------------------------------------------------------

fn verify_cmd(a: VerifyArgs, quiet: bool) -> CliResult {
    // Validate the selection before touching the GPU, so a typo fails fast anywhere.
    let requested: Vec<Arch> = parse_list(&a.spec.arch)?;
    let _ = a.spec.specs(&Arch::ALL)?;
    let cases: Vec<verify::Case> = verify::standard_cases()
        .into_iter()
        .filter(|c| a.cases.is_empty() || a.cases.contains(&c.name))
        .collect();
    if cases.is_empty() {
        let names: Vec<String> = verify::standard_cases()
            .into_iter()
            .map(|c| c.name)
            .collect();
        return Err(CliError::Usage(format!(
            "no case matches --cases; cases are {}",
            names.join(", ")
        )));
    }
    let (gpu, arch) = open_gpu(a.device, &requested)?;
    let specs = a.spec.specs(&[arch])?;
    let dir = BuildDir::new(&a.build_dir);
    let configs = a.configs.choice();
    let (kernels, support) = device_kernels(&gpu, arch, &specs, configs, &[], &dir, quiet)?;
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    println!(
        "verify on {} ({arch}, {} SMs, driver CUDA {}), {} kernels x {} cases, seed {seed}",
        gpu.info.name,
        gpu.info.sm_count,
        gpu.info.driver,
        kernels.len(),
        cases.len()
    );
    println!(
        "{:<34} {:<28} {:<26} {:>9} {:>9} {:>8}  result",
        "spec", "config", "case", "O rel L2", "LSE err", "TFLOP/s"
    );
    let mut results = Vec::new();
    for (built, cubin) in &kernels {
        let kernel = FwdKernel::load(&gpu, cubin, built.candidate.spec, built.footprint)?;
        for case in &cases {
            let case_seed = fnv1a64(format!("{seed}/{}/{}", built.id, case.name).as_bytes());
            let r = verify::run_case(&gpu, &support, &kernel, built, case, case_seed)?;
            println!(
                "{:<34} {:<28} {:<26} {:>9.2e} {:>9.1e} {:>8}  {}",
                built.candidate.spec.tag(),
                built.candidate.config.tag(),
                case.name,
                r.o_rel_l2,
                r.lse_max_abs,
                r.tflops.map_or("-".to_string(), |t| format!("{t:.1}")),
                r.failure
                    .as_deref()
                    .map_or("ok".to_string(), |f| format!("FAIL: {f}"))
            );
            results.push(r);
        }
    }
    let failed = results.iter().filter(|r| !r.passed).count();
    let worst = |d: Dtype| {
        results
            .iter()
            .filter(|r| r.spec.dtype == d)
            .map(|r| r.o_rel_l2)
            .fold(0.0f64, f64::max)
    };
    println!(
        "{} of {} checks passed; worst O relative L2: bf16 {:.2e}, fp16 {:.2e} (bounds {:.0e}, {:.0e})",
        results.len() - failed,
        results.len(),
        worst(Dtype::Bf16),
        worst(Dtype::Fp16),
        verify::o_tolerance(Dtype::Bf16),
        verify::o_tolerance(Dtype::Fp16),
    );
    if let Some(path) = &a.json {
        let report = verify::VerifyReport {
            date: crate::timestamp::utc_now(),
            commit: env!("FA4_GEN_COMMIT").to_string(),
            device: gpu.info.clone(),
            results,
        };
        verify::write_json(path, &report)?;
    }
    if failed > 0 {
        return Err(CliError::Failed(format!("{failed} checks failed")));
    }
    Ok(())
}

/// Opens the GPU and checks it is one fa4-gen has kernels for (and the one asked for).
fn open_gpu(device: usize, requested: &[Arch]) -> Result<(Gpu, Arch), CliError> {
    let gpu = Gpu::open(device)?;
    let Some(arch) = gpu.info.arch else {
        let (ma, mi) = gpu.info.compute_capability;
        return Err(CliError::Failed(format!(
            "{} (compute capability {ma}.{mi}) is not a GPU fa4-gen has kernels for (sm80 and newer)",
            gpu.info.name
        )));
    };
    if let Some(other) = requested.iter().find(|r| **r != arch) {
        return Err(CliError::Usage(format!(
            "--arch {other} kernels cannot run on the visible GPU, {} ({arch}): GPU commands work on the GPU they run on",
            gpu.info.name
        )));
    }
    Ok((gpu, arch))
}

/// `bench --host`: the runtime's host cost per call here, then the Python module's and
/// FA4's from `python -m fa4gen.overhead` when python3 can run it.
fn bench_host(a: &BenchArgs) -> CliResult {
    let (gpu, arch) = open_gpu(a.device, &[])?;
    let cost = crate::measure::bench::host_cost(&gpu, &a.cache).map_err(CliError::Failed)?;
    println!(
        "host cost on {} ({arch}, driver CUDA {}): {}",
        gpu.info.name, gpu.info.driver, cost.problem
    );
    println!("  kernel            {}", cost.kernel);
    println!("  open cache        {:.2} ms", cost.open_ms);
    println!(
        "  first call        {:.2} ms (bind, read + check + load the cubin, launch)",
        cost.first_call_ms
    );
    println!(
        "  per call          {:.2} us median, {:.2} us p90 over {} calls (lookup, checks, cuLaunchKernel)",
        cost.per_call_us, cost.per_call_p90_us, cost.calls
    );
    println!("  lookup alone      {:.0} ns", cost.select_ns);
    println!(
        "  preload           {:.1} ms for all {} {arch} kernels",
        cost.preload_ms, cost.preloaded
    );
    drop(gpu);
    let python = python_overhead(&a.cache);
    match &python {
        Ok(v) => println!("python (fa4gen, FA4, FA2 per call): {v}"),
        Err(why) => println!("python overhead skipped: {why}"),
    }
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "backend": "fa4-gen",
            "runtime": cost,
            "python": python.as_ref().ok(),
            "python_skipped": python.as_ref().err(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap() + "\n")
            .map_err(|e| CliError::Failed(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

/// Runs `python3 -m fa4gen.overhead --json` from the repository's `python/` folder.
fn python_overhead(cache: &std::path::Path) -> Result<serde_json::Value, String> {
    let python_dir = std::path::Path::new("python");
    if !python_dir.join("fa4gen/overhead.py").is_file() {
        return Err("no python/fa4gen here (run from the repository root)".into());
    }
    let lib = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("libfa4_runtime.so")))
        .filter(|l| l.is_file());
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-m", "fa4gen.overhead", "--json", "--cache"])
        .arg(cache)
        .env("PYTHONPATH", {
            let mut path = std::ffi::OsString::from(python_dir);
            if let Some(rest) = std::env::var_os("PYTHONPATH") {
                path.push(":");
                path.push(rest);
            }
            path
        });
    if let Some(lib) = lib {
        cmd.env("FA4GEN_LIB", lib);
    }
    let out = cmd.output().map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").to_string();
        return Err(format!("python3 -m fa4gen.overhead failed: {last}"));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("fa4gen.overhead printed no JSON: {e}"))
}

/// The kernels of `specs` (defaults, or every config that passes the static checks)
/// and the checking kernels, loaded from the build folder; whatever is missing there is
/// compiled into it first (NVRTC is on the GPU hosts' loader path).
fn device_kernels(
    gpu: &Gpu,
    arch: Arch,
    specs: &[(Template, KernelSpec)],
    configs: Option<&str>,
    extra: &[Candidate],
    dir: &BuildDir,
    quiet: bool,
) -> Result<(Vec<ReadyKernel>, crate::measure::support::Support), CliError> {
    let renderer = Renderer::embedded()?;
    let planned: Vec<Planned> = plan_all(specs, false)
        .into_iter()
        .filter(|p| p.verdict.is_ok())
        .filter(|p| match configs {
            Some(f) => p.candidate.config.tag().contains(f),
            None => p.is_default || extra.contains(&p.candidate),
        })
        .collect();
    let mut kernels = ready_kernels(&renderer, dir, arch, &planned)?;
    let mut support = dir.path(&crate::measure::support::support_cubin_rel(
        renderer.templates(),
        arch,
    ));
    let missing_kernels = kernels.len() < planned.len();
    if missing_kernels || !support.is_file() {
        let nvrtc = load_nvrtc(quiet).map_err(|e| match e {
            CliError::Failed(m) | CliError::Usage(m) => CliError::Failed(format!(
                "kernels are missing from {} and NVRTC cannot build them: {m}",
                dir.root().display()
            )),
        })?;
        if missing_kernels {
            let summary =
                compile::build(&nvrtc, &renderer, dir, &planned, &BarReporter::new(quiet))?;
            check_build(&summary)?;
            kernels = ready_kernels(&renderer, dir, arch, &planned)?;
            let built = summary.built().count();
            if kernels.len() < built {
                eprintln!(
                    "warning: {built} kernels built in {}, {} of them usable",
                    dir.root().display(),
                    kernels.len()
                );
            }
        }
        support = crate::measure::support::build_support(&nvrtc, renderer.templates(), dir, arch)
            .map_err(CliError::Failed)?;
    }
    let support = crate::measure::support::Support::load(gpu, &std::fs::read(&support)?)?;
    Ok((kernels, support))
}

// ---- bench ---------------------------------------------------------------------------------

/// `--window LEFT,RIGHT` (bench, explain): FlashAttention's `window_size`, -1 unbounded.
fn window_arg(w: &[i32]) -> Result<(i32, i32), CliError> {
    match *w {
        [left, right] if left >= -1 && right >= -1 => Ok((left, right)),
        _ => Err(CliError::Usage(
            "--window takes LEFT,RIGHT, each -1 (unbounded) or more".into(),
        )),
    }
}

fn bench_cmd(a: BenchArgs, quiet: bool) -> CliResult {
    if a.host {
        return bench_host(&a);
    }
    let dtype: Dtype = a
        .dtype
        .parse()
        .map_err(|e: ParseError| CliError::Usage(e.to_string()))?;
    let masks: Vec<MaskKind> = parse_list(&a.mask)?;
    if let Some(s) = a.seqlen.iter().find(|s| **s < 1) {
        return Err(CliError::Usage(format!(
            "--seqlen {s} is not a positive length"
        )));
    }
    let features: Vec<Features> = parse_list(&a.features)?;
    let window = window_arg(&a.window)?;
    if !(a.softcap.is_finite() && a.softcap > 0.0) {
        return Err(CliError::Usage(format!(
            "--softcap {} is not a positive number",
            a.softcap
        )));
    }
    if a.page_size < 1 {
        return Err(CliError::Usage(format!(
            "--page-size {} is not a positive number of keys",
            a.page_size
        )));
    }
    let moved = match &a.move_buffer {
        None => None,
        Some(name) => {
            let buffer = crate::measure::bench::Buffer::parse(name).ok_or_else(|| {
                CliError::Usage(format!("--move-buffer {name}: expected q, k, v or o"))
            })?;
            if a.placements < 2 {
                return Err(CliError::Usage(format!(
                    "--move-buffer {name} moves a buffer between buffer sets: add --placements 2 or more"
                )));
            }
            Some(buffer)
        }
    };
    // Cells, each with the feature sets it is timed with.
    let cells: Vec<(crate::measure::bench::Cell, Vec<Features>)> = if a.layers.is_empty() {
        crate::measure::bench::paper_grid(&a.head_dim, &a.seqlen, &masks, a.total_tokens, a.hidden)
            .into_iter()
            .map(|mut cell| {
                cell.window = window;
                cell.softcap = a.softcap;
                cell.varlen = a.varlen;
                (cell, features.clone())
            })
            .collect()
    } else {
        crate::measure::bench::model_layers(&a.layers)
            .map_err(CliError::Usage)?
            .into_iter()
            .map(|cell| {
                let f = cell.features.unwrap_or_default();
                (cell, vec![f])
            })
            .collect()
    };
    let templates: Vec<Template> = if a.template.is_empty() {
        Template::ALL.to_vec()
    } else {
        parse_list(&a.template)?
    };
    let wanted = |arch: Arch| -> Vec<(Template, KernelSpec)> {
        let mut specs: Vec<(Template, KernelSpec)> = cells
            .iter()
            .flat_map(|(cell, fs)| {
                fs.iter().map(move |&features| KernelSpec {
                    features,
                    head_dim_v: cell.head_dim_v,
                    ..KernelSpec::new(arch, dtype, cell.head_dim, cell.mask)
                })
            })
            .flat_map(|spec| {
                templates
                    .iter()
                    .copied()
                    .filter(move |t| t.supports(&spec))
                    .map(move |t| (t, spec))
            })
            .collect();
        specs.sort();
        specs.dedup();
        specs
    };
    // Validate the head dims before touching the GPU.
    let spec_args = SpecArgs {
        arch: Vec::new(),
        head_dim: cells
            .iter()
            .map(|(c, _)| fa4_spec::head_dims_name(c.head_dim, Some(c.head_dim_v)))
            .collect(),
        dtype: vec![dtype.name().to_string()],
        mask: Vec::new(),
        features: Vec::new(),
        template: Vec::new(),
    };
    // (a head dim some arch offers: DeepSeek's 192/128 is the Hopper template's alone)
    let checked: Vec<_> = Arch::ALL
        .iter()
        .map(|&arch| spec_args.specs(&[arch]))
        .collect();
    if !checked.iter().any(Result::is_ok) {
        checked.into_iter().next().expect("some arch")?;
    }
    let (gpu, arch) = open_gpu(a.device, &[])?;
    let specs = wanted(arch);
    let dir = BuildDir::new(&a.build_dir);
    let configs = a.configs.choice();
    // The tuned winner per (template, spec, bucket) measured on this GPU with these
    // templates.
    let tuned: BTreeMap<(Template, KernelSpec, u32), fa4_spec::TileConfig> = match &a.db {
        None => BTreeMap::new(),
        Some(path) => {
            let renderer = Renderer::embedded()?;
            let (current, stale): (Vec<_>, Vec<_>) = crate::db::TuningDb::open(path)?
                .records()?
                .into_iter()
                .filter(|r| {
                    r.device.name == gpu.info.name && r.device.sm_count == gpu.info.sm_count
                })
                .filter(|r| templates.contains(&r.template))
                .partition(|r| !r.is_stale(|t| renderer.template_hash(t).to_string()));
            // A stale record's cell is timed with the default as its "tuned" row, which
            // reads as a regression unless said (always, -q or not).
            if !stale.is_empty() {
                eprintln!(
                    "warning: {} records in {} are of other template versions: their cells time the default; \
                     re-tune those specs (`fa4-gen tune`, which keeps the timings of kernels whose code is unchanged)",
                    stale.len(),
                    path.display()
                );
            }
            current
                .into_iter()
                .filter_map(|r| {
                    let choice = r.choice()?.config.clone();
                    Some(((r.template, r.spec, r.bucket.seqlen), choice))
                })
                .collect()
        }
    };
    let extra: Vec<Candidate> = tuned
        .iter()
        .map(|((template, spec, _), config)| Candidate {
            template: *template,
            spec: *spec,
            config: config.clone(),
        })
        .collect();
    let (kernels, support) = device_kernels(&gpu, arch, &specs, configs, &extra, &dir, quiet)?;
    let mut flush = crate::measure::bench::L2Flush::new(&gpu)?;
    println!(
        "bench on {} ({arch}, {} SMs, driver CUDA {}), {} kernels, {} tokens, hidden {}",
        gpu.info.name,
        gpu.info.sm_count,
        gpu.info.driver,
        kernels.len(),
        a.total_tokens,
        a.hidden
    );
    println!(
        "{:>7} {:>6} {:<7} {:<14} {:>5} {:>5} {:<20} {:>9} {:>8}",
        "hdim", "seqlen", "mask", "features", "batch", "heads", "config", "ms", "TFLOP/s"
    );
    let mut rows = Vec::new();
    for (cell, features) in cells {
        for feature_set in features {
            let bucket =
                fa4_spec::Bucket::of_call(cell.mask, cell.window, cell.seqlen.max(1) as u32).seqlen;
            let winner = |k: &BuiltKernel| {
                tuned.get(&(k.candidate.template, k.candidate.spec, bucket))
                    == Some(&k.candidate.config)
            };
            let mut cell_kernels: Vec<&ReadyKernel> = kernels
                .iter()
                .filter(|(k, _)| {
                    let s = &k.candidate.spec;
                    s.head_dim == cell.head_dim
                        && s.head_dim_v == cell.head_dim_v
                        && s.mask == cell.mask
                        && s.features == feature_set
                })
                .filter(|(k, _)| configs.is_some() || k.is_default || winner(k))
                .collect();
            cell_kernels.sort_by_key(|(k, _)| !k.is_default);
            let Some((first, _)) = cell_kernels.first() else {
                continue;
            };
            let spec = first.candidate.spec;
            let case = crate::measure::problems::Case {
                page_size: a.page_size,
                ..cell.case()
            };
            // "fa4-gen" is the plain default ("fa4-gen-hopper" the Hopper template's);
            // "+local", "+sinks", ... name the variants so compare.py can set each against
            // it, and ":config" the non-default configs.
            let mut variant = String::new();
            if cell.mask == MaskKind::Local {
                variant.push_str("+local");
            }
            if feature_set != Features::default() {
                variant.push('+');
                variant.push_str(&feature_set.name());
            }
            if cell.varlen && cell.layer.is_none() {
                variant.push_str("+varlen");
            }
            let mut best: Option<crate::measure::bench::Row> = None;
            // With --move-buffer, one problem whose named buffer is copied behind each
            // set's spacer; else a whole problem per set.
            let shared = match moved {
                Some(_) => Some(crate::measure::problems::Problem::new(
                    &gpu, &support, &spec, &case, 0x5eed,
                )?),
                None => None,
            };
            for placement in 0..a.placements {
                // What the set's parameters point at lives as long as its timings.
                let (mut _moved, mut _own) = (None, None);
                let (params, split) = match (&shared, moved) {
                    (Some(problem), Some(buffer)) if placement > 0 => {
                        let m = crate::measure::bench::move_buffer(
                            &gpu,
                            problem,
                            buffer,
                            placement as usize,
                        )?;
                        (_moved.insert(m).params, problem.split)
                    }
                    (Some(problem), _) => (problem.params, problem.split),
                    (None, _) => {
                        let spacer =
                            crate::measure::bench::placement_spacer(&gpu, placement as usize)?;
                        let problem = crate::measure::problems::Problem::new(
                            &gpu, &support, &spec, &case, 0x5eed,
                        )?;
                        let problem = &_own.insert((spacer, problem)).1;
                        (problem.params, problem.split)
                    }
                };
                let split = split.filter(|_| !a.no_split_tail);
                let placement = (a.placements > 1).then_some(placement);
                for (built, cubin) in &cell_kernels {
                    let base = match built.candidate.template {
                        Template::Portable => format!("fa4-gen{variant}"),
                        t => format!("fa4-gen-{t}{variant}"),
                    };
                    let kernel =
                        FwdKernel::load(&gpu, cubin, built.candidate.spec, built.footprint)?;
                    let times = crate::measure::bench::time_kernel(
                        &gpu,
                        &kernel,
                        &params,
                        split,
                        &mut flush,
                        a.budget_ms,
                        a.warmup_ms,
                    )?;
                    let config = built.candidate.config.tag();
                    let backend = if built.is_default {
                        base.clone()
                    } else {
                        format!("{base}:{config}")
                    };
                    let row = crate::measure::bench::row(
                        &spec,
                        &cell,
                        &times,
                        &built.id.0,
                        &config,
                        built.is_default,
                        &backend,
                    );
                    let row = crate::measure::bench::Row { placement, ..row };
                    println!(
                        "{:>7} {:>6} {:<7} {:<14} {:>5} {:>5} {:<20} {:>9.3} {:>8.1}{}{}",
                        fa4_spec::head_dims_name(row.hdim, row.hdim_v),
                        row.seqlen,
                        cell.mask.name(),
                        feature_set.name(),
                        row.batch,
                        row.heads,
                        config,
                        row.ms,
                        row.tflops,
                        match (built.is_default, winner(built)) {
                            (true, true) => "  (default, tuned)",
                            (true, false) => "  (default)",
                            (false, true) => "  (tuned)",
                            (false, false) => "",
                        },
                        match placement {
                            Some(n) => format!(
                                "  placement {n}: q {:#x} k {:#x} v {:#x} o {:#x}",
                                params.q, params.k, params.v, params.o
                            ),
                            None => String::new(),
                        }
                    );
                    if best.as_ref().is_none_or(|b| row.ms < b.ms) {
                        best = Some(row.clone());
                    }
                    let untuned = !tuned.contains_key(&(
                        built.candidate.template,
                        built.candidate.spec,
                        bucket,
                    ));
                    if winner(built) || (a.db.is_some() && built.is_default && untuned) {
                        rows.push(crate::measure::bench::Row {
                            backend: format!("{base}-tuned"),
                            ..row.clone()
                        });
                    }
                    rows.push(row);
                }
            }
            if configs.is_some() {
                if let Some(mut b) = best {
                    println!(
                        "{:>4} {:>6} {:<7} {:<14} best: {} at {:.1} TFLOP/s",
                        b.hdim,
                        b.seqlen,
                        cell.mask.name(),
                        feature_set.name(),
                        b.config,
                        b.tflops
                    );
                    b.backend = format!("fa4-gen{variant}-best");
                    rows.push(b);
                }
            }
        }
    }
    if let Some(path) = &a.json {
        crate::fsutil::write_atomic(
            path,
            (serde_json::to_string_pretty(&rows).expect("serialises") + "\n").as_bytes(),
        )?;
    }
    Ok(())
}

/// A built kernel with its cubin, read and checked against the build report.
type ReadyKernel = (BuiltKernel, Vec<u8>);

/// Kernels of `planned` whose cubins are in the build folder and match its report.
fn ready_kernels(
    renderer: &Renderer,
    dir: &BuildDir,
    arch: Arch,
    planned: &[Planned],
) -> Result<Vec<ReadyKernel>, CliError> {
    let Some(report) = dir.load_report(arch)? else {
        return Ok(Vec::new());
    };
    let wanted: BTreeMap<String, &Candidate> = planned
        .iter()
        .map(|p| (renderer.kernel_id(&p.candidate).0, &p.candidate))
        .collect();
    let mut out = Vec::new();
    let mut unreadable = Vec::new();
    for k in report.kernels {
        if wanted.contains_key(&k.id.0) {
            match dir.read_cubin(&k) {
                Ok(cubin) => out.push((k, cubin)),
                Err(e) => unreadable.push(e),
            }
        }
    }
    if let Some(first) = unreadable.first() {
        eprintln!(
            "warning: {} built kernels cannot be used ({first}{})",
            unreadable.len(),
            if unreadable.len() > 1 { ", ..." } else { "" }
        );
    }
    out.sort_by(|a, b| a.0.candidate.cmp(&b.0.candidate));
    Ok(out)
}

// ---- db ------------------------------------------------------------------------------------

fn db_cmd(a: DbArgs) -> CliResult {
    use crate::db::{export_json, parse_export, TuningDb};
    let db = TuningDb::open(&a.db)?;
    match a.action {
        DbAction::Show => {
            let records = db.records()?;
            println!(
                "{:<34} {:>6} {:<16} {:<28} {:>9} {:>9}",
                "spec", "bucket", "device", "winner", "ms", "default"
            );
            for r in &records {
                // Both in the metric the winner is chosen by (settled once the finals ran).
                let default_ms = r.default_ms().map_or("-".into(), |ms| format!("{ms:.3}"));
                let (winner, ms) = r.winner().map_or(
                    ("(none measured)".to_string(), "-".to_string()),
                    |(c, ms)| (c.config.tag(), format!("{ms:.3}")),
                );
                println!(
                    "{:<34} {:>6} {:<16} {:<28} {:>9} {:>9}",
                    r.spec.tag(),
                    r.bucket.seqlen,
                    r.device.name,
                    winner,
                    ms,
                    default_ms
                );
            }
            println!("{} records in {}", records.len(), a.db.display());
        }
        DbAction::Export { out } => {
            let records = db.records()?;
            crate::fsutil::write_atomic(&out, export_json(&records).as_bytes())?;
            println!("{} records written to {}", records.len(), out.display());
        }
        DbAction::Import { file } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| CliError::Failed(format!("{}: {e}", file.display())))?;
            report_merge(&a.db, db.merge_records(parse_export(&file, &text)?)?);
        }
        DbAction::Merge { other } => {
            if other == a.db {
                return Err(CliError::Usage(
                    "merge needs another database than --db".into(),
                ));
            }
            let incoming = TuningDb::open(&other)?.records()?;
            report_merge(&a.db, db.merge_records(incoming)?);
        }
        DbAction::Carry { build } => {
            let renderer = Renderer::embedded()?;
            let current = |t: Template| renderer.template_hash(t).to_string();
            // (template, spec, config tag) -> (kernel id, code hash), of the current
            // template versions only.
            let mut kernels: BTreeMap<(Template, String, String), (String, String)> =
                BTreeMap::new();
            for k in built_kernels(&build)? {
                let c = &k.candidate;
                if k.template_hash == current(c.template) {
                    kernels.insert(
                        (c.template, c.spec.tag(), c.config.tag()),
                        (k.id.0, k.code_hash),
                    );
                }
            }
            if kernels.is_empty() {
                return Err(CliError::Usage(format!(
                    "{}: no build of the current templates; run `fa4-gen compile --out {}` first",
                    build.display(),
                    build.display()
                )));
            }
            let summary = db.carry_unchanged(current, |r, config| {
                kernels
                    .get(&(r.template, r.spec.tag(), config.tag()))
                    .cloned()
            })?;
            println!(
                "{} records carried to the current templates (their kernels' machine code is unchanged in {}); {} stale records left for `fa4-gen tune`",
                summary.carried,
                build.display(),
                summary.left.len()
            );
            // Grouped by template and spec (the key's first two parts).
            let mut specs: BTreeMap<String, usize> = BTreeMap::new();
            for key in &summary.left {
                let spec: Vec<&str> = key.splitn(3, '/').take(2).collect();
                *specs.entry(spec.join("/")).or_default() += 1;
            }
            for (spec, n) in specs {
                println!("  stale: {spec} ({n} records)");
            }
        }
        DbAction::StampCode { build } => {
            let code: BTreeMap<String, String> = built_kernels(&build)?
                .into_iter()
                .map(|k| (k.id.0, k.code_hash))
                .collect();
            if code.is_empty() {
                return Err(CliError::Usage(format!(
                    "{}: no build report; run `fa4-gen compile --out {}` first",
                    build.display(),
                    build.display()
                )));
            }
            let (stamped, rewritten) = db.stamp_code_hashes(|id| code.get(id).cloned())?;
            println!(
                "{stamped} timings in {rewritten} records given their kernel's code hash from {} ({} kernels built there)",
                build.display(),
                code.len()
            );
        }
        DbAction::Gc => {
            let renderer = Renderer::embedded()?;
            let removed = db.gc(|t| renderer.template_hash(t).to_string())?;
            for key in &removed {
                println!("removed stale {key}");
            }
            println!("{} stale records removed", removed.len());
        }
    }
    Ok(())
}

/// Every kernel a build folder's reports name, over all archs (none without reports).
fn built_kernels(build: &std::path::Path) -> Result<Vec<compile::BuiltKernel>, CliError> {
    let dir = BuildDir::new(build);
    let mut out = Vec::new();
    for arch in Arch::ALL {
        out.extend(
            dir.load_report(arch)?
                .map(|r| r.kernels)
                .unwrap_or_default(),
        );
    }
    Ok(out)
}

fn report_merge(db: &std::path::Path, s: crate::db::MergeSummary) {
    println!(
        "{}: {} added, {} replaced by faster winners, {} kept",
        db.display(),
        s.added,
        s.replaced,
        s.kept
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_choice_defaults_unless_asked() {
        let c = |all_configs, filter: Option<&str>| ConfigArgs {
            all_configs,
            config_filter: filter.map(str::to_string),
        };
        assert_eq!(c(false, None).choice(), None);
        assert_eq!(c(true, None).choice(), Some(""));
        assert_eq!(c(false, Some("packgqa1")).choice(), Some("packgqa1"));
        assert_eq!(
            c(true, Some("pad1")).choice(),
            Some("pad1"),
            "the filter narrows"
        );
    }
}
