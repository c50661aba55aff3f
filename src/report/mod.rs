//! Pictures of the tuning: one self-contained HTML page (inline CSS and SVG, no script,
//! nothing fetched) from a tuning-db export, bench rows beside the peers', and the
//! tuner's own summaries.
//!
//! - per GPU and head dim, a heatmap of each key's served pick: its TFLOP/s (colour and
//!   figure) and its gain over the heuristic default, a row per template, dtype, mask,
//!   features and batch kind, a column per sequence-length bucket;
//! - the grid beside the peers: per cell our TFLOP/s over the best peer's, red below
//!   1.0 and green from it, every cell's figures in a table (a geomean hides a losing
//!   cell);
//! - the tuner's wall time and GPU busy share where `fa4-gen tune --json` summaries are
//!   given: the export does not record them, and the page says so.
//!
//! [`load`] reads the files, [`render`] is a pure function of what they hold.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::PathBuf;

use fa4_spec::{Bucket, Template};

use crate::db::{served_gpu, Entry};

mod grid;
mod inputs;
mod svg;
mod tuning;

#[cfg(test)]
mod tests;

pub use grid::{default_ours, grid, is_ours, Grid, GridCell};
pub use inputs::{
    parse_export, parse_rows, parse_tune_run, read, BenchRow, Named, ReportError, TuneKey, TuneRun,
};
pub use svg::esc;
pub use tuning::{maps, pick, GpuMaps, HeadDimMap, Pick, RowKey};

/// Everything a page is made of.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub export: Named<Vec<Entry>>,
    /// Rows of ours (`fa4-gen bench --json`) and of the peers.
    pub bench: Vec<Named<Vec<BenchRow>>>,
    pub peers: Vec<Named<Vec<BenchRow>>>,
    pub tune_runs: Vec<Named<TuneRun>>,
    /// Our backends to picture beside the peers; empty: [`default_ours`].
    pub ours: Vec<String>,
    /// The grid's dtype (rows without one count as it).
    pub dtype: String,
    /// The current template hashes: records of others are marked stale. Empty: not
    /// checked.
    pub current: BTreeMap<Template, String>,
}

/// Which files make a page.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub export: PathBuf,
    pub bench: Vec<PathBuf>,
    pub peers: Vec<PathBuf>,
    pub tune_runs: Vec<PathBuf>,
    pub ours: Vec<String>,
    pub dtype: String,
    pub current: BTreeMap<Template, String>,
}

/// Reads and checks every file `req` names.
pub fn load(req: &Request) -> Result<Inputs, ReportError> {
    let rows = |paths: &[PathBuf]| -> Result<Vec<Named<Vec<BenchRow>>>, ReportError> {
        paths
            .iter()
            .map(|p| {
                Ok(Named {
                    path: p.clone(),
                    value: parse_rows(p, &read(p)?)?,
                })
            })
            .collect()
    };
    let inputs = Inputs {
        export: Named {
            path: req.export.clone(),
            value: parse_export(&req.export, &read(&req.export)?)?,
        },
        bench: rows(&req.bench)?,
        peers: rows(&req.peers)?,
        tune_runs: req
            .tune_runs
            .iter()
            .map(|p| {
                Ok(Named {
                    path: p.clone(),
                    value: parse_tune_run(p, &read(p)?)?,
                })
            })
            .collect::<Result<_, ReportError>>()?,
        ours: req.ours.clone(),
        dtype: req.dtype.clone(),
        current: req.current.clone(),
    };
    // A backend asked for by name must be there: a typo would draw an empty grid.
    for ours in &inputs.ours {
        let found = inputs
            .bench
            .iter()
            .flat_map(|f| &f.value)
            .any(|r| r.backend == *ours);
        if !found {
            let names: BTreeSet<&str> = inputs
                .bench
                .iter()
                .flat_map(|f| &f.value)
                .map(|r| r.backend.as_str())
                .filter(|b| !b.contains(':'))
                .collect();
            return Err(ReportError::Usage(format!(
                "--ours {ours}: no such backend in the --bench files (they have {})",
                if names.is_empty() {
                    "no rows".to_string()
                } else {
                    names.into_iter().collect::<Vec<_>>().join(", ")
                }
            )));
        }
    }
    Ok(inputs)
}

/// What a page holds, for the command's closing line and for tests.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub html: String,
    /// Heatmap cells: the export's keys, and the grids' cells.
    pub tuning_cells: usize,
    pub grid_cells: usize,
    pub gpus: usize,
}

const STYLE: &str = r#"
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #111; margin: 24px auto; max-width: 1280px; padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 36px; border-bottom: 1px solid #ddd; } h3 { font-size: 15px; margin: 22px 0 4px; }
p.note, p.missing { color: #444; max-width: 60em; } p.missing { border-left: 4px solid #c01b1d; padding-left: 8px; }
code { font-size: 13px; } table { border-collapse: collapse; font-size: 13px; } td, th { padding: 2px 8px; text-align: right; border-bottom: 1px solid #eee; white-space: nowrap; } th { background: #f6f6f6; }
td.l, th.l { text-align: left; } td.below { color: #c01b1d; font-weight: 600; }
svg.heatmap { display: block; margin: 6px 0 10px; overflow: visible; } svg text { pointer-events: none; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
svg text.axis { font-size: 12px; fill: #555; } svg text.col, svg text.row { font-size: 12px; fill: #222; }
svg text.v1 { font-size: 13px; font-weight: 600; } svg text.v2 { font-size: 10px; }
rect.cell:hover { stroke: #000; stroke-width: 2; }
.legend { display: flex; gap: 6px; align-items: center; font-size: 12px; color: #444; margin: 4px 0; }
.legend .bar { width: 220px; height: 12px; border: 1px solid #ccc; }
.legend .sw { width: 38px; height: 14px; display: inline-block; border: 1px solid #ccc; text-align: center; font-size: 10px; }
.scroll { overflow-x: auto; }
"#;

/// The page for `inputs`.
pub fn render(inputs: &Inputs) -> Page {
    let mut body = String::new();
    let maps = maps(&inputs.export.value, &inputs.current);
    let ours = if inputs.ours.is_empty() {
        default_ours(&inputs.bench)
    } else {
        inputs.ours.clone()
    };
    let grids: Vec<Grid> = ours
        .iter()
        .map(|o| grid(o, &inputs.bench, &inputs.peers, &inputs.dtype))
        .collect();

    let _ = write!(
        body,
        "<h1>fa4-gen: pictures of the tuning</h1>\n<p class=\"note\">From {} ({} keys){}{}. Hover a cell for its figures.</p>\n",
        code_path(&inputs.export.path),
        inputs.export.value.len(),
        files_note("bench rows", &inputs.bench),
        files_note("the peers' rows", &inputs.peers),
    );
    body.push_str("<ul>\n<li><a href=\"#grid\">The grid beside the peers</a></li>\n<li><a href=\"#tuning\">The tuned picks per head dim</a></li>\n<li><a href=\"#tuner\">The tuner's time and GPU busy share</a></li>\n</ul>\n");

    let grid_cells = grid_section(&mut body, inputs, &grids);
    let tuning_cells = tuning_section(&mut body, inputs, &maps);
    tuner_section(&mut body, inputs);

    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>fa4-gen: pictures of the tuning</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    );
    Page {
        html,
        tuning_cells,
        grid_cells,
        gpus: maps.len(),
    }
}

fn code_path(p: &std::path::Path) -> String {
    format!("<code>{}</code>", esc(&p.display().to_string()))
}

fn files_note(what: &str, files: &[Named<Vec<BenchRow>>]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let names: Vec<String> = files
        .iter()
        .map(|f| format!("{} ({} rows)", code_path(&f.path), f.value.len()))
        .collect();
    format!(", {what} from {}", names.join(", "))
}

fn fmt_gain(g: f64) -> String {
    format!("\u{d7}{g:.2}")
}

// ---- the grid ------------------------------------------------------------------------------

fn grid_section(body: &mut String, inputs: &Inputs, grids: &[Grid]) -> usize {
    body.push_str("<h2 id=\"grid\">The grid beside the peers</h2>\n");
    if inputs.bench.is_empty() {
        body.push_str("<p class=\"missing\">No bench rows given: pass <code>fa4-gen bench --json</code> output with <code>--bench</code> and the peers' rows (<code>shared/bench/peers.py --json</code>) with <code>--peers</code>.</p>\n");
        return 0;
    }
    let left_out: usize = inputs
        .bench
        .iter()
        .chain(&inputs.peers)
        .flat_map(|f| &f.value)
        .filter(|r| r.not_grid.is_some())
        .count();
    let failed: usize = inputs
        .bench
        .iter()
        .chain(&inputs.peers)
        .flat_map(|f| &f.value)
        .filter(|r| r.not_grid.is_none() && r.tflops.is_none())
        .count();
    let _ = writeln!(
        body,
        "<p class=\"note\">Per cell, our TFLOP/s over the best peer's (the fastest of the peers that ran the cell), {} rows; ratios below 1.0 are red, from 1.0 green. A cell given twice takes the last row read.{}{}</p>",
        esc(&inputs.dtype),
        if left_out > 0 {
            format!(" {left_out} rows are no plain grid cell (model layers, serving mixes, varlen batches, windows, score features) and are left out.")
        } else {
            String::new()
        },
        if failed > 0 {
            format!(" {failed} rows have no time (the backend failed the cell).")
        } else {
            String::new()
        },
    );
    body.push_str("<div class=\"legend\">ours / best peer: ");
    for r in [0.80, 0.90, 0.95, 0.99, 1.00, 1.05, 1.10, 1.20] {
        let p = svg::diverging(r);
        let _ = write!(
            body,
            "<span class=\"sw\" style=\"background:{};color:{}\">{r:.2}</span>",
            p.fill, p.ink
        );
    }
    body.push_str("</div>\n");
    if grids.is_empty() {
        body.push_str("<p class=\"missing\">No rows of ours in the bench files: name our backend with <code>--ours</code>.</p>\n");
    }
    let mut cells = 0;
    for (n, g) in grids.iter().enumerate() {
        cells += one_grid(body, g, n);
    }
    cells
}

fn one_grid(body: &mut String, g: &Grid, n: usize) -> usize {
    let _ = writeln!(body, "<h3>{}</h3>", esc(&g.ours));
    if g.cells.is_empty() {
        body.push_str("<p class=\"missing\">No plain grid cell of this dtype has a time.</p>\n");
        return 0;
    }
    let ratios = g.ratios();
    let mut line = format!("{} cells", g.cells.len());
    if let Some((geo, min, below)) = grid::summary(&ratios) {
        let worst = g
            .cells
            .iter()
            .filter_map(|(k, c)| c.ratio().map(|r| (k, r)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(k, _)| cell_name(k))
            .unwrap_or_default();
        let _ = write!(
            line,
            "; \u{d7} best peer: geomean {geo:.3}, min {min:.3} ({}); <b>{below} of {} cells below the best peer</b>",
            esc(&worst),
            ratios.len()
        );
        for p in &g.peers {
            if let Some((geo, min, below)) = grid::summary(&g.ratios_to(p)) {
                let _ = write!(
                    line,
                    "; \u{d7} {}: {geo:.3} (min {min:.3}, {below} below)",
                    esc(&grid::peer_name(p))
                );
            }
        }
    } else {
        line.push_str("; no peer ran any of them");
    }
    let _ = writeln!(body, "<p class=\"note\">{line}.</p>");

    let seqlens: BTreeSet<u32> = g.cells.keys().map(|k| k.3).collect();
    let seqlens: Vec<u32> = seqlens.into_iter().collect();
    let rows: BTreeSet<(u32, u32, bool)> = g.cells.keys().map(|k| (k.0, k.1, k.2)).collect();
    let heat = svg::Heatmap {
        id: format!("grid-{n}"),
        label: format!("{} over the best peer per cell", g.ours),
        axis: "sequence length (tokens)".into(),
        columns: seqlens.iter().map(u32::to_string).collect(),
        rows: rows
            .iter()
            .map(|&(qk, v, causal)| {
                let label = format!(
                    "d{} {}",
                    fa4_spec::head_dims_name(qk, Some(v)),
                    if causal { "causal" } else { "none" }
                );
                let cells = seqlens
                    .iter()
                    .map(|&s| {
                        let key = (qk, v, causal, s);
                        g.cells.get(&key).map(|c| grid_cell(&g.ours, &key, c))
                    })
                    .collect();
                (label, cells)
            })
            .collect(),
        cell_w: 92,
        cell_h: 50,
    };
    let _ = writeln!(body, "<div class=\"scroll\">{}</div>", heat.svg());

    // Every cell in figures.
    let peers: Vec<&String> = g.peers.iter().collect();
    body.push_str("<details><summary>Every cell in figures</summary>\n<table>\n<tr><th class=\"l\">head dim</th><th class=\"l\">mask</th><th>seqlen</th><th>ours TFLOP/s</th>");
    for p in &peers {
        let _ = write!(body, "<th>{}</th>", esc(&grid::peer_name(p)));
    }
    body.push_str("<th class=\"l\">best peer</th><th>\u{d7} best peer</th></tr>\n");
    for (k, c) in &g.cells {
        let _ = write!(
            body,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{:.1}</td>",
            fa4_spec::head_dims_name(k.0, Some(k.1)),
            if k.2 { "causal" } else { "none" },
            k.3,
            c.ours
        );
        for p in &peers {
            match c.peers.get(*p) {
                Some(t) => {
                    let _ = write!(body, "<td>{t:.1}</td>");
                }
                None => body.push_str("<td>-</td>"),
            }
        }
        match (c.best_peer(), c.ratio()) {
            (Some((name, _)), Some(r)) => {
                let _ = writeln!(
                    body,
                    "<td class=\"l\">{}</td><td{}>{r:.3}</td></tr>",
                    esc(&grid::peer_name(name)),
                    if r < 1.0 { " class=\"below\"" } else { "" }
                );
            }
            _ => body.push_str("<td class=\"l\">-</td><td>-</td></tr>\n"),
        }
    }
    body.push_str("</table>\n</details>\n");
    heat.cells()
}

fn cell_name(k: &grid::CellKey) -> String {
    format!(
        "d{} {} {}",
        fa4_spec::head_dims_name(k.0, Some(k.1)),
        if k.2 { "causal" } else { "none" },
        k.3
    )
}

fn grid_cell(ours: &str, k: &grid::CellKey, c: &GridCell) -> svg::Cell {
    let key = format!(
        "{}/d{}/{}/{}",
        ours,
        fa4_spec::head_dims_name(k.0, Some(k.1)),
        if k.2 { "causal" } else { "none" },
        k.3
    );
    let mut data = vec![("ours", format!("{:.1}", c.ours))];
    let peers: Vec<String> = c
        .peers
        .iter()
        .map(|(p, t)| format!("{} {t:.1}", grid::peer_name(p)))
        .collect();
    match (c.best_peer(), c.ratio()) {
        (Some((best, t)), Some(r)) => {
            data.push(("best-peer", best.to_string()));
            data.push(("ratio", format!("{r:.3}")));
            svg::Cell {
                class: if r < 1.0 { "below" } else { "above" }.into(),
                key,
                data,
                paint: svg::diverging(r),
                flagged: false,
                lines: vec![
                    format!("{r:.3}"),
                    format!("{:.0} vs {t:.0}", c.ours),
                    grid::peer_name(best),
                ],
                title: format!(
                    "{}: ours {:.1} TFLOP/s, {r:.3}\u{d7} the best peer ({} {t:.1}); peers: {}",
                    cell_name(k),
                    c.ours,
                    grid::peer_name(best),
                    peers.join(", ")
                ),
            }
        }
        _ => svg::Cell {
            class: "nopeer".into(),
            key,
            data,
            paint: svg::Paint {
                fill: "#eeeeee".into(),
                ink: "#111111",
            },
            flagged: false,
            lines: vec![format!("{:.0}", c.ours), "no peer".into()],
            title: format!(
                "{}: ours {:.1} TFLOP/s; no peer ran this cell",
                cell_name(k),
                c.ours
            ),
        },
    }
}

// ---- the tuned picks -----------------------------------------------------------------------

fn tuning_section(body: &mut String, inputs: &Inputs, maps: &[GpuMaps]) -> usize {
    body.push_str("<h2 id=\"tuning\">The tuned picks per head dim</h2>\n");
    if maps.is_empty() {
        body.push_str("<p class=\"missing\">The export holds no records.</p>\n");
        return 0;
    }
    let scale = maps
        .iter()
        .flat_map(|g| g.maps.iter().flat_map(|m| m.picks()))
        .filter_map(|p| p.tflops)
        .fold(0.0f64, f64::max);
    let scale = ((scale / 100.0).ceil() * 100.0).max(100.0);
    let _ = writeln!(
        body,
        "<p class=\"note\">Each key's served pick (the fastest candidate, or the heuristic default where the fastest beat it by less than the margin a winner needs): its TFLOP/s in the time it was chosen by (settled in the finals, else screened), and under it its gain over the default, \u{d7}1.00 where the default is served. A row per template, dtype, mask, features and batch kind (ragged: varlen batches of several sequences), a column per sequence-length bucket (for a sliding window, the window's width).{}</p>",
        if inputs.current.is_empty() {
            ""
        } else {
            " Keys measured with another version of their template (stale: not served until tuned again or carried) have a dashed red border."
        }
    );
    let p0 = svg::sequential(0.0);
    let p1 = svg::sequential(0.5);
    let p2 = svg::sequential(1.0);
    let _ = writeln!(
        body,
        "<div class=\"legend\">TFLOP/s: 0 <span class=\"bar\" style=\"background:linear-gradient(to right,{},{},{})\"></span> {scale:.0}</div>",
        p0.fill, p1.fill, p2.fill
    );
    let records: Vec<&crate::db::Record> = inputs.export.value.iter().map(|e| &e.record).collect();
    let mut cells = 0;
    for (gi, g) in maps.iter().enumerate() {
        let served = served_gpu(records.iter().copied(), g.arch, None);
        let _ = writeln!(
            body,
            "<h3 style=\"font-size:17px\">{} ({}), {} keys</h3>",
            esc(&g.gpu.to_string()),
            g.arch,
            g.records()
        );
        if served.as_ref() == Some(&g.gpu) {
            let _ = writeln!(
                body,
                "<p class=\"note\">The {} GPU with the most records: its picks serve every GPU of the arch where that GPU has none of its own.</p>",
                g.arch
            );
        } else {
            let _ = writeln!(
                body,
                "<p class=\"note\">Its picks serve GPUs of its kind for the keys tuned on it; their other keys are served {}'s picks.</p>",
                served.map_or("the most-tuned GPU".to_string(), |s| esc(&s.name))
            );
        }
        for m in &g.maps {
            cells += head_dim_map(body, g, m, scale, gi);
        }
    }
    cells
}

fn head_dim_map(body: &mut String, g: &GpuMaps, m: &HeadDimMap, scale: f64, gi: usize) -> usize {
    let picks: Vec<&Pick> = m.picks().collect();
    let tuned: Vec<f64> = picks
        .iter()
        .filter(|p| p.config.is_some() && p.config.as_deref() != Some(p.default_config.as_str()))
        .filter_map(|p| p.gain)
        .collect();
    let held = picks.iter().filter(|p| p.held_back.is_some()).count();
    let stale = picks.iter().filter(|p| p.stale).count();
    let mut line = format!(
        "{} keys; a tuned pick serves {} of them",
        picks.len(),
        tuned.len()
    );
    if let Some((geo, _, _)) = grid::summary(&tuned) {
        let max = tuned.iter().copied().fold(0.0, f64::max);
        let _ = write!(
            line,
            " (gain {} geomean, up to {})",
            fmt_gain(geo),
            fmt_gain(max)
        );
    }
    if held > 0 {
        let _ = write!(
            line,
            "; on {held} the default stays, its fastest rival ahead by less than the margin"
        );
    }
    if stale > 0 {
        let _ = write!(line, "; {stale} stale");
    }
    let _ = write!(
        body,
        "<h3>head dim {}</h3>\n<p class=\"note\">{line}.</p>\n",
        esc(&m.name())
    );
    let heat = svg::Heatmap {
        id: format!("tuning-{gi}-d{}", m.name().replace('/', "v")),
        label: format!(
            "tuned picks' TFLOP/s and gain over the default, head dim {}, {}",
            m.name(),
            g.gpu
        ),
        axis: "sequence-length bucket (tokens)".into(),
        columns: m.buckets.iter().map(u32::to_string).collect(),
        rows: m
            .rows
            .iter()
            .map(|(row, picks)| {
                let cells = m
                    .buckets
                    .iter()
                    .map(|b| picks.get(b).map(|p| tuning_cell(row, *b, p, scale)))
                    .collect();
                (row.label(), cells)
            })
            .collect(),
        cell_w: 74,
        cell_h: 38,
    };
    let _ = writeln!(body, "<div class=\"scroll\">{}</div>", heat.svg());
    heat.cells()
}

fn tuning_cell(row: &RowKey, bucket: u32, p: &Pick, scale: f64) -> svg::Cell {
    let kind = if row.ragged { "ragged " } else { "" };
    let metric = if p.settled { "settled" } else { "screened" };
    let Some(tflops) = p.tflops else {
        return svg::Cell {
            class: "untimed".into(),
            key: p.key.clone(),
            data: vec![],
            paint: svg::Paint {
                fill: "#dddddd".into(),
                ink: "#111111",
            },
            flagged: p.stale,
            lines: vec!["-".into(), "no time".into()],
            title: format!(
                "{}, {kind}bucket {bucket}: nothing timed ({} failed){}",
                row.label(),
                p.failed,
                if p.stale { "; stale" } else { "" }
            ),
        };
    };
    let gain = p.gain.unwrap_or(1.0);
    let default_served = p.config.as_deref() == Some(p.default_config.as_str());
    let mut title = format!(
        "{}, {kind}bucket {bucket}: {} {tflops:.1} TFLOP/s ({metric})",
        row.label(),
        p.config.as_deref().unwrap_or("-"),
    );
    if default_served {
        title.push_str(", the heuristic default");
        if let Some(h) = p.held_back {
            let _ = write!(
                title,
                " (its fastest rival ran {}, under the margin)",
                fmt_gain(h)
            );
        }
    } else {
        let _ = write!(
            title,
            ", {} the default {}",
            fmt_gain(gain),
            p.default_config
        );
    }
    let _ = write!(
        title,
        "; {} candidates timed, {} failed; {}{}",
        p.measured,
        p.failed,
        p.date,
        if p.stale {
            "; stale: measured with another version of the template"
        } else {
            ""
        }
    );
    let mut class = String::from(if default_served { "default" } else { "tuned" });
    if p.stale {
        class.push_str(" stale");
    }
    svg::Cell {
        class,
        key: p.key.clone(),
        data: vec![
            ("tflops", format!("{tflops:.1}")),
            ("gain", format!("{gain:.3}")),
        ],
        paint: svg::sequential(tflops / scale),
        flagged: p.stale,
        lines: vec![
            format!("{tflops:.0}"),
            if default_served {
                "default".into()
            } else {
                fmt_gain(gain)
            },
        ],
        title,
    }
}

// ---- the tuner -----------------------------------------------------------------------------

fn tuner_section(body: &mut String, inputs: &Inputs) {
    body.push_str("<h2 id=\"tuner\">The tuner's time and GPU busy share</h2>\n");
    let missing = "The export does not record them: it keeps what each key measured and when, not how long the tuner ran or how much of that time the GPU was busy. <code>fa4-gen tune --json</code> prints both for its run; pass such summaries with <code>--tune-summary</code>.";
    if inputs.tune_runs.is_empty() {
        let _ = writeln!(body, "<p class=\"missing\">Not recorded. {missing}</p>");
        return;
    }
    // The export's keys as the runs' closing tables name them.
    let exported: BTreeSet<(String, String, String)> = inputs
        .export
        .value
        .iter()
        .map(|e| {
            let r = &e.record;
            (r.device.name.clone(), r.spec.tag(), r.bucket.key())
        })
        .collect();
    let covered: usize = inputs
        .tune_runs
        .iter()
        .map(|run| {
            run.value
                .keys
                .iter()
                .filter(|k| exported.contains(&run_key(&run.value, k)))
                .count()
        })
        .sum();
    let _ = writeln!(
        body,
        "<p class=\"note\">{missing} The {} runs given cover {covered} of the export's {} keys; the rest were tuned in runs whose summaries are not here.</p>",
        inputs.tune_runs.len(),
        inputs.export.value.len()
    );
    body.push_str("<table>\n<tr><th class=\"l\">summary</th><th class=\"l\">GPU</th><th>keys</th><th>in the export</th><th>wall</th><th class=\"l\">GPU busy</th><th>checked</th><th>timed</th><th>finals</th><th>compiled</th><th>fastest \u{d7} default (geomean)</th></tr>\n");
    for run in &inputs.tune_runs {
        let r = &run.value;
        let count = |name: &str| {
            r.counts
                .iter()
                .find(|(k, _)| k == name)
                .map_or("-".to_string(), |(_, n)| n.to_string())
        };
        let in_export = r
            .keys
            .iter()
            .filter(|k| exported.contains(&run_key(r, k)))
            .count();
        let speedups: Vec<f64> = r.keys.iter().filter_map(|k| k.speedup).collect();
        let share = r.gpu_busy_share.clamp(0.0, 1.0);
        let bar = format!(
            "<svg class=\"bar\" width=\"120\" height=\"12\" role=\"img\" aria-label=\"GPU busy {pct:.0}%\"><rect x=\"0\" y=\"0\" width=\"120\" height=\"12\" fill=\"#eeeeee\"/><rect class=\"busy\" x=\"0\" y=\"0\" width=\"{w:.1}\" height=\"12\" fill=\"#2171b5\"/></svg> {pct:.0}%",
            pct = share * 100.0,
            w = share * 120.0
        );
        let _ = writeln!(
            body,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{in_export}</td><td>{:.1} s{}</td><td class=\"l\">{bar}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            code_path(&run.path),
            esc(&r.device),
            r.keys.len(),
            r.wall_seconds,
            if r.stopped_by_budget { " (budget)" } else { "" },
            count("checked"),
            count("timed"),
            count("finals"),
            count("compiled"),
            grid::summary(&speedups).map_or("-".into(), |(g, _, _)| fmt_gain(g)),
        );
    }
    body.push_str("</table>\n");
}

fn run_key(run: &TuneRun, k: &TuneKey) -> (String, String, String) {
    let bucket = Bucket {
        seqlen: k.bucket,
        ragged: k.ragged,
    };
    (run.device.clone(), k.spec.clone(), bucket.key())
}
