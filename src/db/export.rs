//! The export: every record by key, sorted, pretty JSON with a trailing newline, so the
//! committed file changes only where a measurement did and reads well in a diff.
//! `fa4-gen db export` writes it slim (each record's deciding candidates, the rest
//! summarised: [`Entry::slim`]), `--full` with every candidate; both read back, and
//! so do exports written before the slim one.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::record::Record;
use super::slim::Entry;
use super::{DbError, FORMAT};

/// Which candidates an export writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Those that decide what each record serves (the default, the finalists, the
    /// winner), the others summarised as `screened`: the committed export.
    Slim,
    /// Every candidate the store holds (`db export --full`).
    Full,
}

/// The export of `entries` with the candidates `detail` says. Deterministic: the order
/// of `entries` does not matter, and a record's slim form is a function of the record.
pub fn export(entries: &[Entry], detail: Detail) -> String {
    let sorted: BTreeMap<String, Entry> = entries
        .iter()
        .map(|e| {
            let e = match detail {
                Detail::Slim => e.slim(),
                Detail::Full => e.clone(),
            };
            (e.record.key(), e)
        })
        .collect();
    let wrapper = serde_json::json!({ "format": FORMAT, "records": sorted });
    serde_json::to_string_pretty(&wrapper).expect("records serialise") + "\n"
}

/// The full export of `records`, every candidate of each as it holds them.
pub fn export_json(records: &[Record]) -> String {
    let entries: Vec<Entry> = records.iter().cloned().map(Entry::from).collect();
    export(&entries, Detail::Full)
}

/// Reads an export's records (slim or full, [`export`]); a slim record holds its
/// deciding candidates and serves what its full original did.
pub fn parse_export(path: &Path, text: &str) -> Result<Vec<Record>, DbError> {
    Ok(parse_export_entries(path, text)?
        .into_iter()
        .map(|e| e.record)
        .collect())
}

/// Reads an export's entries: its records, and the summary of what each slim one left
/// out.
pub fn parse_export_entries(path: &Path, text: &str) -> Result<Vec<Entry>, DbError> {
    #[derive(Deserialize)]
    struct Export {
        format: String,
        records: BTreeMap<String, Entry>,
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
    for (key, entry) in &export.records {
        let record = &entry.record;
        if *key != record.key() && *key != record.legacy_key() {
            return Err(bad(format!(
                "record under `{key}` belongs under `{}`",
                record.key()
            )));
        }
    }
    Ok(export.records.into_values().collect())
}
