//! `fa4-gen render` and `fa4-gen compile`: kernel sources, cubins and the resource report.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use fa4_spec::{Arch, KernelSpec};

use fa4_gen::compile::{self, BuildDir, BuildSummary, BuiltKernel, Nvrtc, Outcome};
use fa4_gen::render::Renderer;
use fa4_gen::space::{RejectKind, Template};

use super::{
    check_build, compile_pool, load_nvrtc, plan_all, untested_note, BarReporter, CliError,
    CliResult, SpecArgs,
};

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

// ---- render --------------------------------------------------------------------------------

pub(super) fn render(a: RenderArgs, quiet: bool) -> CliResult {
    let specs = a.spec.specs(&Arch::ALL)?;
    let planned = plan_all(&specs, a.default_only);
    let renderer = Renderer::embedded()?;
    let dir = BuildDir::new(&a.out);
    dir.prepare(&renderer)?;
    let mut rendered = 0;
    for p in &planned {
        let Ok(fp) = &p.verdict else { continue };
        let k = renderer.render(&p.candidate, fp)?;
        fa4_gen::fsutil::write_if_changed(
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

pub(super) fn run(a: CompileArgs, quiet: bool) -> CliResult {
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
    fa4_gen::fsutil::ensure_writable_dir(dir.root())?;
    let nvrtc = load_nvrtc(quiet)?;
    let pool = compile_pool(a.jobs)?;
    let reporter = BarReporter::new(quiet);
    let summary = pool.install(|| compile::build(&nvrtc, &renderer, &dir, &planned, &reporter))?;
    let mut archs: Vec<Arch> = specs.iter().map(|(_, s)| s.arch).collect();
    archs.dedup();
    for arch in &archs {
        fa4_gen::measure::support::build_support(&nvrtc, renderer.templates(), &dir, *arch)
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

pub(super) fn print_build_summary(
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
