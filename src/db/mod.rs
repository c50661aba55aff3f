//! The tuning database: for every tuning key, what each candidate config measured and
//! which one won.
//!
//! A key is a kernel spec, a problem-size bucket and the device it was measured on, so
//! databases tuned on different GPUs merge without mixing. The live store is sled (one
//! folder, safe against a killed writer: a record is written whole or not at all); its
//! export is sorted, pretty JSON that is committed and reads well in a diff. Records carry
//! the template hash they were measured with: a record whose hash differs from the
//! templates in hand is stale, never served, and `gc` removes it.
//!
//! - `record`: a record, its candidates and outcomes, and the choice of what it serves;
//! - `slim`: a record cut down to the candidates that decide that, the rest summarised;
//! - `store`: the sled store (open, put, merge, gc, carry, stamp-code);
//! - `export`: the JSON export, slim or full, and reading it back;
//! - `serving`: which GPU's records an arch serves, and their choices.

use std::path::PathBuf;

mod export;
mod record;
mod serving;
mod slim;
mod store;

#[cfg(test)]
mod tests;

pub use export::{export, export_json, parse_export, parse_export_entries, Detail};
pub use record::{
    record_key, Candidate, Device, Outcome, Record, TimingPolicy, MIN_GAIN, MIN_GAIN_PLACED,
    MIN_GAIN_SCREENED,
};
pub use serving::{served_gpu, tuned_choices, GpuId, TunedPicks};
pub use slim::{Entry, Screened};
pub use store::{CarrySummary, MergeSummary, TuningDb};

/// The format of the store (its mark) and of the export. A slim export reads under it
/// too: its records are records with fewer candidates, and the summary beside them is a
/// field that older readers skip.
const FORMAT: &str = "fa4-gen tuning-db 1";

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("{path}: not a fa4-gen tuning database ({why}); point --db at one, or at a new folder to start one")]
    Foreign { path: PathBuf, why: String },
    #[error("{path}: the tuning database cannot be opened ({why}); restore it from its export with `fa4-gen db import`")]
    Corrupt { path: PathBuf, why: String },
    #[error("{path}: the tuning database is open in another process (a tune or a db command still running?); wait for it to finish, or point --db at another folder")]
    InUse { path: PathBuf },
    #[error("{path}: record {key} cannot be read ({why}); remove it with `fa4-gen db gc` or restore from the export")]
    BadRecord {
        path: PathBuf,
        key: String,
        why: String,
    },
    #[error("{path}: {why}")]
    Io { path: PathBuf, why: String },
    #[error("{path}: not a tuning-db export ({why})")]
    BadExport { path: PathBuf, why: String },
}
