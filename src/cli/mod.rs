//! The command line: argument parsing (clap), turning arguments into validated
//! selections, and printing. The work itself is done by the library modules.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use fa4_spec::{Arch, Dtype, Features, KernelSpec, MaskKind, ParseError};
use indicatif::{ProgressBar, ProgressStyle};

use fa4_gen::compile::{BuildDir, BuildSummary, Nvrtc, Outcome, Reporter};
use fa4_gen::measure::gpu::Gpu;
use fa4_gen::measure::kernels::ReadyKernel;
use fa4_gen::render::Renderer;
use fa4_gen::space::{self, Candidate, Planned, Selection, Template, TemplateSpace};

mod bench;
mod cache;
mod compile;
mod db;
mod list;
mod report;
mod sass;
mod tune;
mod verify;

use bench::BenchArgs;
use compile::{CompileArgs, RenderArgs};
use db::DbArgs;
use list::ListArgs;
use report::ReportArgs;
use sass::SassArgs;
use verify::VerifyArgs;

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
    /// Draw the tuning-db export and bench rows beside the peers' as one self-contained
    /// HTML page (inline SVG, nothing fetched; no GPU).
    Report(ReportArgs),
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
    /// Element types: bf16, fp16, e4m3 (FP8: the Hopper template, d64, d128, d256 and
    /// 192/128, any mask, sinks, softcap, pages) [default: bf16 and fp16].
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

type CliResult = Result<(), CliError>;

/// Runs a parsed command line; prints errors as one `error:` line.
pub fn run(cli: Cli) -> ExitCode {
    let quiet = cli.quiet;
    let result = match cli.command {
        Command::List(a) => list::run(a),
        Command::Render(a) => compile::render(a, quiet),
        Command::Compile(a) => compile::run(a, quiet),
        Command::Verify(a) => verify::run(a, quiet),
        Command::Bench(a) => bench::run(a, quiet),
        Command::Tune(a) => tune::run(a, quiet),
        Command::Db(a) => db::run(a, quiet),
        Command::BuildCache(a) => cache::build_cache(a, quiet),
        Command::Explain(a) => cache::explain(a),
        Command::Sass(a) => sass::run(a),
        Command::Report(a) => report::run(a),
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

// ---- compile -------------------------------------------------------------------------------

/// Compile progress: a bar on a terminal; elsewhere (CI, a device call's log) a line
/// every twentieth of the work, so a long build never looks hung.
struct BarReporter {
    bar: ProgressBar,
    lines: Option<LineProgress>,
}

struct LineProgress {
    total: AtomicUsize,
    done: AtomicUsize,
    started: Instant,
}

impl BarReporter {
    fn new(quiet: bool) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = if quiet || !terminal {
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
        let lines = (!quiet && !terminal).then(|| LineProgress {
            total: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            started: Instant::now(),
        });
        BarReporter { bar, lines }
    }
}

impl Reporter for BarReporter {
    fn start(&self, to_compile: usize) {
        self.bar.set_length(to_compile as u64);
        if let Some(l) = &self.lines {
            l.total.store(to_compile, Ordering::Relaxed);
            if to_compile > 0 {
                eprintln!("compiling {to_compile} kernels");
            }
        }
    }
    fn finished(&self, outcome: &Outcome) {
        self.compiled();
        if let Outcome::Rejected(r) = outcome {
            self.bar
                .set_message(format!("last rejected: {}", r.candidate.config.tag()));
        }
    }
    fn compiled(&self) {
        self.bar.inc(1);
        if let Some(l) = &self.lines {
            let done = l.done.fetch_add(1, Ordering::Relaxed) + 1;
            let total = l.total.load(Ordering::Relaxed);
            let every = (total / 20).max(1);
            if done % every == 0 || done == total {
                eprintln!(
                    "compiled {done}/{total} ({:.0} s)",
                    l.started.elapsed().as_secs_f64()
                );
            }
        }
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
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
) -> Result<(Vec<ReadyKernel>, fa4_gen::measure::support::Support), CliError> {
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
    let mut support = dir.path(&fa4_gen::measure::support::support_cubin_rel(
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
            let summary = fa4_gen::compile::build(
                &nvrtc,
                &renderer,
                dir,
                &planned,
                &BarReporter::new(quiet),
            )?;
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
        support = fa4_gen::measure::support::build_support(&nvrtc, renderer.templates(), dir, arch)
            .map_err(CliError::Failed)?;
    }
    let support = fa4_gen::measure::support::Support::load(gpu, &std::fs::read(&support)?)?;
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

/// The built kernels of `planned` in the build folder, saying which cannot be read.
fn ready_kernels(
    renderer: &Renderer,
    dir: &BuildDir,
    arch: Arch,
    planned: &[Planned],
) -> Result<Vec<ReadyKernel>, CliError> {
    let (kernels, unreadable) =
        fa4_gen::measure::kernels::ready_kernels(renderer, dir, arch, planned)?;
    if let Some(first) = unreadable.first() {
        eprintln!(
            "warning: {} built kernels cannot be used ({first}{})",
            unreadable.len(),
            if unreadable.len() > 1 { ", ..." } else { "" }
        );
    }
    Ok(kernels)
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
