//! `fa4-gen db`: reading and maintaining the tuning database and its export.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use fa4_spec::Arch;

use fa4_gen::compile::{self, BuildDir};
use fa4_gen::render::Renderer;
use fa4_gen::space::{self, Candidate, Template};

use super::{compile_pool, load_nvrtc, BarReporter, CliError, CliResult};

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
    /// Write the sorted JSON export (the file committed under tuning-db/): per key, the
    /// candidates that decide what it serves (the default, the finalists, the winner),
    /// the others summarised.
    Export {
        #[arg(long, default_value = "tuning-db/sm90.json")]
        out: PathBuf,
        /// Every candidate with its outcome, not the summary.
        #[arg(long)]
        full: bool,
    },
    /// Add the records of an export (slim or full); on a shared key the faster winner
    /// stays, and a slim record gives way to the whole one it was cut from.
    Import { file: PathBuf },
    /// Add the records of another database; the faster winner per key and device stays.
    Merge { other: PathBuf },
    /// Remove the records measured with other template versions than these.
    Gc,
    /// Move the records of older template versions to the current ones where the
    /// current templates repeat the machine code of every kernel they timed: a template
    /// edit that changes none of a spec's kernels then costs its records no GPU time.
    /// Compiles the kernels the build folder lacks (only the stale records' candidates);
    /// the others stay for `fa4-gen tune`.
    Carry {
        /// Build folder of the current templates; the stale records' kernels are compiled
        /// into it where missing.
        #[arg(long, default_value = "build", env = "FA4_GEN_OUT")]
        build: PathBuf,
        /// Parallel NVRTC compilations [default: one per core].
        #[arg(short, long)]
        jobs: Option<usize>,
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

// ---- db ------------------------------------------------------------------------------------

pub(super) fn run(a: DbArgs, quiet: bool) -> CliResult {
    use fa4_gen::db::{export, parse_export_entries, Detail, TuningDb};
    let db = TuningDb::open(&a.db)?;
    match a.action {
        DbAction::Show => {
            let records = db.records()?;
            println!(
                "{:<34} {:>11} {:<16} {:<28} {:>9} {:>9}",
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
                    "{:<34} {:>11} {:<16} {:<28} {:>9} {:>9}",
                    r.spec.tag(),
                    r.bucket.to_string(),
                    r.device.name,
                    winner,
                    ms,
                    default_ms
                );
            }
            println!("{} records in {}", records.len(), a.db.display());
        }
        DbAction::Export { out, full } => {
            let entries = db.entries()?;
            let detail = if full { Detail::Full } else { Detail::Slim };
            fa4_gen::fsutil::write_atomic(&out, export(&entries, detail).as_bytes())?;
            println!("{} records written to {}", entries.len(), out.display());
        }
        DbAction::Import { file } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| CliError::Failed(format!("{}: {e}", file.display())))?;
            report_merge(
                &a.db,
                db.merge_entries(parse_export_entries(&file, &text)?)?,
            );
        }
        DbAction::Merge { other } => {
            if other == a.db {
                return Err(CliError::Usage(
                    "merge needs another database than --db".into(),
                ));
            }
            let incoming = TuningDb::open(&other)?.entries()?;
            report_merge(&a.db, db.merge_entries(incoming)?);
        }
        DbAction::Carry { build, jobs } => {
            let renderer = Renderer::embedded()?;
            let current = |t: Template| renderer.template_hash(t).to_string();
            // The stale records' kernels, compiled from the current templates (those the
            // build folder holds are reused).
            let mut wanted: Vec<Candidate> = db
                .records()?
                .into_iter()
                .filter(|r| r.is_stale(current))
                .flat_map(|r| {
                    r.candidates.into_iter().map(move |c| Candidate {
                        template: r.template,
                        spec: r.spec,
                        config: c.config,
                    })
                })
                .collect();
            wanted.sort_by_key(|c| (c.template, c.spec.tag(), c.config.tag()));
            wanted.dedup_by_key(|c| (c.template, c.spec.tag(), c.config.tag()));
            if wanted.is_empty() {
                println!("no stale records: every record is of the current templates");
                return Ok(());
            }
            {
                let planned: Vec<_> = wanted.into_iter().map(space::planned).collect();
                let dir = BuildDir::new(&build);
                fa4_gen::fsutil::ensure_writable_dir(dir.root())?;
                let nvrtc = load_nvrtc(quiet)?;
                let pool = compile_pool(jobs)?;
                let reporter = BarReporter::new(quiet);
                pool.install(|| compile::build(&nvrtc, &renderer, &dir, &planned, &reporter))?;
            }
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
pub(super) fn built_kernels(
    build: &std::path::Path,
) -> Result<Vec<compile::BuiltKernel>, CliError> {
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

pub(super) fn report_merge(db: &std::path::Path, s: fa4_gen::db::MergeSummary) {
    let restored = if s.restored > 0 {
        format!(", {} slim records restored whole", s.restored)
    } else {
        String::new()
    };
    println!(
        "{}: {} added, {} replaced by faster winners, {} kept{restored}",
        db.display(),
        s.added,
        s.replaced,
        s.kept
    );
}
