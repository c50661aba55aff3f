//! The report's inputs read from their files: the tuning-db export, bench rows (ours and
//! the peers', in the row format `fa4-gen bench --json` and `shared/bench/peers.py` write)
//! and the tuner's own summaries (`fa4-gen tune --json`). Every failure names its file.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::db::{self, Entry};

/// An input the report cannot use.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: cannot be read ({why})")]
    Read { path: PathBuf, why: String },
    #[error("{path}: {why}")]
    Bad { path: PathBuf, why: String },
    #[error("{0}")]
    Usage(String),
}

impl ReportError {
    fn bad(path: &Path, why: impl Into<String>) -> ReportError {
        ReportError::Bad {
            path: path.into(),
            why: why.into(),
        }
    }
}

/// A file's contents, its name kept for the page and for errors.
#[derive(Debug, Clone)]
pub struct Named<T> {
    pub path: PathBuf,
    pub value: T,
}

/// One bench row: a backend's TFLOP/s on one cell. Only what the report uses is kept.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    pub backend: String,
    /// Rows of the peers carry none (compare.py counts them as the dtype asked for).
    pub dtype: Option<String>,
    pub hdim: u32,
    /// V's head dim where it differs from QK's.
    pub hdim_v: u32,
    pub seqlen: u32,
    pub causal: bool,
    /// None for a row that failed (it carries an `error` instead).
    pub tflops: Option<f64>,
    /// Why the row is not a cell of the plain grid (a model layer, a serving mix, a
    /// varlen batch, a window, sinks or softcap), if it is not.
    pub not_grid: Option<&'static str>,
}

/// What one `fa4-gen tune --json` run reported about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneRun {
    pub device: String,
    pub wall_seconds: f64,
    pub gpu_busy_share: f64,
    pub stopped_by_budget: bool,
    /// (name, count) as the summary lists them: compiled, checked, timed, finals, ...
    pub counts: Vec<(String, u64)>,
    pub keys: Vec<TuneKey>,
}

/// One key of a tune run, as its closing table names it.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneKey {
    pub spec: String,
    pub bucket: u32,
    pub ragged: bool,
    pub speedup: Option<f64>,
}

/// Reads `path` whole, naming it on failure.
pub fn read(path: &Path) -> Result<String, ReportError> {
    std::fs::read_to_string(path).map_err(|e| ReportError::Read {
        path: path.into(),
        why: e.to_string(),
    })
}

/// The entries of a tuning-db export (slim or full).
pub fn parse_export(path: &Path, text: &str) -> Result<Vec<Entry>, ReportError> {
    db::parse_export_entries(path, text).map_err(|e| match e {
        db::DbError::BadExport { path, why } => ReportError::Bad {
            path,
            why: format!("not a tuning-db export ({why})"),
        },
        other => ReportError::bad(path, other.to_string()),
    })
}

/// The rows of a bench or peers file: a JSON list of objects with at least `backend`,
/// `hdim`, `seqlen` and `causal`; `tflops` may be missing or null on a row that failed.
pub fn parse_rows(path: &Path, text: &str) -> Result<Vec<BenchRow>, ReportError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ReportError::bad(path, format!("not JSON ({e})")))?;
    let Value::Array(rows) = value else {
        return Err(ReportError::bad(
            path,
            "not a list of bench rows (expected a JSON list of objects with backend, hdim, seqlen, causal, tflops)",
        ));
    };
    rows.iter()
        .enumerate()
        .map(|(i, row)| {
            let Value::Object(row) = row else {
                return Err(ReportError::bad(path, format!("row {i} is not an object")));
            };
            parse_row(row).map_err(|why| ReportError::bad(path, format!("row {i}: {why}")))
        })
        .collect()
}

fn parse_row(row: &Map<String, Value>) -> Result<BenchRow, String> {
    let uint = |name: &str| -> Result<u32, String> {
        match row.get(name) {
            None => Err(format!("no `{name}`")),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("`{name}` is {v}, not a whole number")),
        }
    };
    let backend = match row.get("backend") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(v) => return Err(format!("`backend` is {v}, not a name")),
        None => return Err("no `backend`".into()),
    };
    let hdim = uint("hdim")?;
    let hdim_v = match row.get("hdim_v") {
        None | Some(Value::Null) => hdim,
        Some(_) => uint("hdim_v")?,
    };
    let seqlen = uint("seqlen")?;
    let causal = match row.get("causal") {
        Some(Value::Bool(b)) => *b,
        Some(v) if v.as_u64() == Some(0) => false,
        Some(v) if v.as_u64() == Some(1) => true,
        Some(v) => return Err(format!("`causal` is {v}, not 0, 1, true or false")),
        None => return Err("no `causal`".into()),
    };
    let tflops = match row.get("tflops") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(t) if t.is_finite() && t > 0.0 => Some(t),
            _ => return Err(format!("`tflops` is {v}, not a positive number")),
        },
    };
    let dtype = match row.get("dtype") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(format!("`dtype` is {v}, not a name")),
    };
    Ok(BenchRow {
        backend,
        dtype,
        hdim,
        hdim_v,
        seqlen,
        causal,
        tflops,
        not_grid: not_grid(row),
    })
}

/// Why a row is no cell of the plain grid (dense batches, no window, no score
/// features), if it is not: the peers' grid rows are timed so, and a cell compares
/// like with like.
fn not_grid(row: &Map<String, Value>) -> Option<&'static str> {
    let set = |name: &str| match row.get(name) {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty() && s != "none",
        Some(_) => true,
    };
    let flag = |v: Option<&Value>| v.and_then(Value::as_bool).unwrap_or(false);
    if set("layer") {
        return Some("a model layer");
    }
    if set("mix") {
        return Some("a serving mix");
    }
    if flag(row.get("varlen")) {
        return Some("a varlen batch");
    }
    if row.get("mask").and_then(Value::as_str) == Some("local") {
        return Some("a sliding window");
    }
    // The peers write a window as one number of keys (-1: none); ours as a pair that
    // only a local mask reads.
    if row
        .get("window")
        .and_then(Value::as_i64)
        .is_some_and(|w| w >= 0)
    {
        return Some("a sliding window");
    }
    if set("feature") {
        return Some("a score feature");
    }
    match row.get("features") {
        Some(Value::Object(f)) if f.values().any(|v| flag(Some(v))) => {
            return Some("a score feature")
        }
        Some(Value::String(s)) if !s.is_empty() && s != "none" => return Some("a score feature"),
        _ => {}
    }
    None
}

/// A `fa4-gen tune --json` summary of a run that timed on a GPU.
pub fn parse_tune_run(path: &Path, text: &str) -> Result<TuneRun, ReportError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ReportError::bad(path, format!("not JSON ({e})")))?;
    let bad = |why: String| {
        ReportError::bad(
            path,
            format!("not a `fa4-gen tune --json` summary of a run on a GPU ({why})"),
        )
    };
    let Value::Object(o) = &value else {
        return Err(bad("not an object".into()));
    };
    let number = |name: &str| -> Result<f64, ReportError> {
        o.get(name)
            .and_then(Value::as_f64)
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| bad(format!("no `{name}`")))
    };
    let wall_seconds = number("wall_seconds")?;
    let gpu_busy_share = number("gpu_busy_share")?;
    let device = o
        .get("device")
        .and_then(|d| d.get("name"))
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no `device.name`".into()))?
        .to_string();
    let counts = match o.get("counts") {
        Some(Value::Object(c)) => c
            .iter()
            .filter_map(|(k, v)| v.as_u64().map(|n| (k.clone(), n)))
            .collect(),
        _ => Vec::new(),
    };
    let keys = match o.get("keys") {
        Some(Value::Array(keys)) => keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let spec = k.get("spec").and_then(Value::as_str);
                let bucket = k.get("bucket").and_then(Value::as_u64);
                match (spec, bucket) {
                    (Some(spec), Some(bucket)) => Ok(TuneKey {
                        spec: spec.to_string(),
                        bucket: bucket as u32,
                        ragged: k.get("ragged").and_then(Value::as_bool).unwrap_or(false),
                        speedup: k.get("speedup").and_then(Value::as_f64),
                    }),
                    _ => Err(bad(format!("key {i} has no `spec` or `bucket`"))),
                }
            })
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    Ok(TuneRun {
        device,
        wall_seconds,
        gpu_busy_share,
        stopped_by_budget: o
            .get("stopped_by_budget")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        counts,
        keys,
    })
}
