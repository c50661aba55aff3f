//! The export: every record by key, sorted, pretty JSON with a trailing newline, so the
//! committed file changes only where a measurement did and reads well in a diff.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::record::Record;
use super::{DbError, FORMAT};

/// The export: every record by key, sorted, pretty JSON with a trailing newline.
/// Deterministic, so the committed file changes only where a measurement did.
pub fn export_json(records: &[Record]) -> String {
    let sorted: BTreeMap<String, &Record> = records.iter().map(|r| (r.key(), r)).collect();
    let wrapper = serde_json::json!({ "format": FORMAT, "records": sorted });
    serde_json::to_string_pretty(&wrapper).expect("records serialise") + "\n"
}

/// Reads an export written by [`export_json`].
pub fn parse_export(path: &Path, text: &str) -> Result<Vec<Record>, DbError> {
    #[derive(Deserialize)]
    struct Export {
        format: String,
        records: BTreeMap<String, Record>,
    }
    let bad = |why: String| DbError::BadExport {
        path: path.into(),
        why,
    };
    let export: Export = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    if export.format != FORMAT {
        return Err(bad(format!(
            "format `{}`, expected `{FORMAT}`",
            export.format
        )));
    }
    for (key, record) in &export.records {
        if *key != record.key() && *key != record.legacy_key() {
            return Err(bad(format!(
                "record under `{key}` belongs under `{}`",
                record.key()
            )));
        }
    }
    Ok(export.records.into_values().collect())
}
