//! `fa4-gen report`: the tuning-db export and bench rows as one self-contained HTML page.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;

use fa4_gen::render::Renderer;
use fa4_gen::report::{self, ReportError, Request};
use fa4_gen::space::Template;

use super::{CliError, CliResult};

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The tuning-db export to draw (`fa4-gen db export`).
    #[arg(long = "tuning-db", default_value = "tuning-db/sm90.json")]
    pub tuning_db: PathBuf,
    /// Our bench rows (`fa4-gen bench --json`): the grid beside the peers. Several files
    /// may follow one flag, or the flag may repeat.
    #[arg(long, num_args = 1..)]
    pub bench: Vec<PathBuf>,
    /// The peers' rows on the same grid (`shared/bench/peers.py --json`: FA2, cuDNN,
    /// FA4, ...); per cell, ours is set beside the fastest of them.
    #[arg(long, num_args = 1..)]
    pub peers: Vec<PathBuf>,
    /// Summaries `fa4-gen tune --json` printed: the tuner's wall time and GPU busy share,
    /// which the export does not record.
    #[arg(long = "tune-summary", num_args = 1..)]
    pub tune_summary: Vec<PathBuf>,
    /// Our backends in the bench rows to draw [default: the tuned picks' rows, `*-tuned`,
    /// else those without a config of their own].
    #[arg(long, value_delimiter = ',')]
    pub ours: Vec<String>,
    /// The grid's element type (peers' rows carry none and count as it).
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// The page to write.
    #[arg(long, default_value = "report.html")]
    pub out: PathBuf,
}

pub(super) fn run(a: ReportArgs) -> CliResult {
    // The current templates' hashes mark records measured with other versions (stale).
    let current: BTreeMap<Template, String> = Renderer::embedded()
        .map(|r| {
            Template::ALL
                .into_iter()
                .map(|t| (t, r.template_hash(t).to_string()))
                .collect()
        })
        .unwrap_or_default();
    let request = Request {
        export: a.tuning_db,
        bench: a.bench,
        peers: a.peers,
        tune_runs: a.tune_summary,
        ours: a.ours,
        dtype: a.dtype,
        current,
    };
    let inputs = report::load(&request).map_err(|e| match e {
        ReportError::Usage(m) => CliError::Usage(m),
        other => CliError::Failed(other.to_string()),
    })?;
    let page = report::render(&inputs);
    fa4_gen::fsutil::write_atomic(&a.out, page.html.as_bytes())?;
    println!(
        "{} written: {} tuned keys over {} GPUs, {} grid cells beside the peers",
        a.out.display(),
        page.tuning_cells,
        page.gpus,
        page.grid_cells
    );
    Ok(())
}
