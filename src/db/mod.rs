//! The tuning database: for every tuning key, what each candidate config measured and
//! which one won.
//!
//! A key is a kernel spec, a problem-size bucket and the device it was measured on, so
//! databases tuned on different GPUs merge without mixing. The live store is sled (one
//! folder, safe against a killed writer: a record is written whole or not at all); its
//! export is sorted, pretty JSON that is committed and reads well in a diff. Records carry
//! the template hash they were measured with: a record whose hash differs from the
//! templates in hand is stale, never served, and `gc` removes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fa4_spec::{Bucket, KernelSpec, TileConfig};
use serde::{Deserialize, Serialize};

use crate::space::Template;

/// How much faster than the heuristic default a candidate must measure to be served
/// instead of it ([`Record::choice`]), once the key's finals ran.
pub const MIN_GAIN: f64 = 1.02;

/// The same where the finals' passes ran on buffer sets of their own
/// ([`TimingPolicy::final_placements`]): the default and the winner then met side by side
/// on three placements, not once, and of 33 winners re-timed so, every one ran 1.013 to
/// 1.36x the default in the bench after, including the three whose finals margin was
/// 0.3 to 2.1% (`bench/NOTES.md`); 2% had held two of those back.
pub const MIN_GAIN_PLACED: f64 = 1.01;

/// The same before the finals ran, on screening times alone. A screening time is one
/// short timing among a hundred candidates: a soft-capped d64 key whose tune stopped
/// before its finals served a tile screened 1.027x the default that then ran 0.93x it
/// (`bench/NOTES.md`), and its finals kept the default. So a screened record serves
/// only a clear win; `tune` resumes into the finals.
pub const MIN_GAIN_SCREENED: f64 = 1.10;

/// Marks a folder as a fa4-gen tuning database, with its format version.
const FORMAT_KEY: &[u8] = b"__fa4-gen-tuning-db__";
const FORMAT: &str = "fa4-gen tuning-db 1";

/// The GPU a record was measured on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Device {
    pub name: String,
    pub sm_count: u32,
    /// CUDA version the driver supports.
    pub driver: String,
    pub nvrtc: String,
}

/// How candidates were timed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimingPolicy {
    pub warmup: u32,
    pub runs: u32,
    /// Whether the L2 cache was overwritten before every timed run.
    pub l2_flush: bool,
    /// Kernel time spent per measurement; `runs` is the least number of runs.
    #[serde(default)]
    pub budget_ms: f64,
    /// How many candidates (the default among them) were re-timed in the finals, and
    /// how long each ran back to back before its finals timing so the clocks settled;
    /// 0 for records written before the finals.
    #[serde(default)]
    pub finalists: u32,
    #[serde(default)]
    pub settle_ms: f64,
    /// How long a key's first finalist ran back to back before its finals timing; 0
    /// for records whose finals had no such warm-up (they are taken again).
    #[serde(default)]
    pub key_warmup_ms: f64,
    /// Passes of the finals (every finalist timed once per pass, the mean of its passes
    /// ranks it), and over how many buffer sets they were spread (pass p on the p-th);
    /// 0 for records written before every key had passes on buffer sets of their own.
    #[serde(default)]
    pub final_passes: u32,
    #[serde(default)]
    pub final_placements: u32,
    /// The policy before that: passes of the finals on short keys only, and the
    /// screening time under which a key was short (long ones had one pass, every pass on
    /// one buffer set); 0 in later records.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub short_key_passes: u32,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub short_key_ms: f64,
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

/// What happened to one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Measured {
        /// Median milliseconds, and the spread of the runs (max - min) / median, of the
        /// screening timing (no settling time).
        ms: f64,
        spread: f64,
        tflops: f64,
        registers: u32,
        /// Milliseconds of the finals timing, after the clocks settled: the mean of its
        /// passes (records written before 2026-12-04 stored their median here; where the
        /// passes are stored, they decide: [`Candidate::settled_ms`]); None when the
        /// candidate was no finalist or the finals have not run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        settled_ms: Option<f64>,
        /// Every pass's finals timing, in order, where there were several (settled_ms
        /// is their mean); empty with one pass.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        settled_passes: Vec<f64>,
        /// The timed kernel's machine-code identity (`compile::code::code_hash`): a
        /// template edit that leaves it unchanged leaves this timing valid. Empty in
        /// records written before it was kept.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        code_hash: String,
    },
    /// Wrong output, a compile failure, a launch error: kept as data, never a winner.
    Failed { error: String },
}

/// One candidate config and its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub config: TileConfig,
    pub kernel: String,
    pub outcome: Outcome,
}

impl Candidate {
    /// Whether it is a timing of the machine code `code` (a build's code hash): what lets
    /// a timing outlive a template edit that left its kernel alone.
    pub fn timed_code(&self, code: &str) -> bool {
        !code.is_empty()
            && matches!(&self.outcome, Outcome::Measured { code_hash, .. } if code_hash == code)
    }

    /// Its screening time, if it was measured.
    pub fn screened_ms(&self) -> Option<f64> {
        match self.outcome {
            Outcome::Measured { ms, .. } => Some(ms),
            Outcome::Failed { .. } => None,
        }
        .filter(|ms| ms.is_finite() && *ms > 0.0)
    }

    /// Its settled time from the finals, if it has one: the mean of its passes where
    /// there were several (each pass ran on a buffer set of its own, and an engine's
    /// buffers land anywhere, so a set a kernel runs slow on is part of what it costs,
    /// not noise to outvote), else the one settled time.
    pub fn settled_ms(&self) -> Option<f64> {
        match &self.outcome {
            Outcome::Measured { settled_passes, .. } if !settled_passes.is_empty() => {
                Some(mean(settled_passes))
            }
            Outcome::Measured { settled_ms, .. } => *settled_ms,
            Outcome::Failed { .. } => None,
        }
        .filter(|ms| ms.is_finite() && *ms > 0.0)
    }

    /// Records (or, with None, drops) its settled time, as one pass; a failed candidate
    /// has none.
    pub fn set_settled_ms(&mut self, settled: Option<f64>) {
        if let Outcome::Measured {
            settled_ms,
            settled_passes,
            ..
        } = &mut self.outcome
        {
            *settled_ms = settled;
            settled_passes.clear();
        }
    }

    /// Its finals timings, one per pass (a single settled time is one pass).
    pub fn settled_passes(&self) -> Vec<f64> {
        match &self.outcome {
            Outcome::Measured { settled_passes, .. } if !settled_passes.is_empty() => {
                settled_passes.clone()
            }
            _ => self.settled_ms().into_iter().collect(),
        }
    }

    /// Adds one pass's finals timing; its settled time becomes the mean of its passes.
    /// A failed candidate takes none.
    pub fn push_settled_pass(&mut self, ms: f64) {
        let mut passes = self.settled_passes();
        passes.push(ms);
        if let Outcome::Measured {
            settled_ms,
            settled_passes,
            ..
        } = &mut self.outcome
        {
            *settled_ms = Some(mean(&passes));
            *settled_passes = if passes.len() > 1 { passes } else { Vec::new() };
        }
    }
}

/// The mean of `values` (not empty).
fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// What [`TuningDb::carry_unchanged`] did: records moved to the current template
/// versions, and the keys of the stale records it left (some kernel of theirs changed).
#[derive(Debug, Default, PartialEq)]
pub struct CarrySummary {
    pub carried: usize,
    pub left: Vec<String>,
}

/// Everything measured for one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub template: crate::space::Template,
    pub spec: KernelSpec,
    pub bucket: Bucket,
    pub device: Device,
    pub template_hash: String,
    pub timing: TimingPolicy,
    /// UTC, ISO 8601.
    pub date: String,
    /// Candidate 0 is the heuristic default, so every key has a usable answer.
    pub candidates: Vec<Candidate>,
}

/// The store key of the record for `template`, `spec`, `bucket` and `device`. Each
/// template's candidates are measured in their own record: the template is part of the
/// key, so tuning one template never replaces another's results.
pub fn record_key(
    template: Template,
    spec: &KernelSpec,
    bucket: Bucket,
    device: &Device,
) -> String {
    format!("{}/{}", template.name(), legacy_key(spec, bucket, device))
}

/// The key before templates were part of it (stores and exports written then hold it;
/// they were all the portable template's).
fn legacy_key(spec: &KernelSpec, bucket: Bucket, device: &Device) -> String {
    format!(
        "{}/s{:05}/{}-{}sm",
        spec.tag(),
        bucket.seqlen,
        device.name.replace([' ', '/'], "_"),
        device.sm_count
    )
}

impl Record {
    /// The store key: template, spec, bucket, device. Sorting by it groups a spec's
    /// buckets.
    pub fn key(&self) -> String {
        record_key(self.template, &self.spec, self.bucket, &self.device)
    }

    fn legacy_key(&self) -> String {
        legacy_key(&self.spec, self.bucket, &self.device)
    }

    /// Whether the finals ran for this record: some candidate has a settled time.
    pub fn finals_done(&self) -> bool {
        self.candidates.iter().any(|c| c.settled_ms().is_some())
    }

    /// The time `candidate` ranks by in this record: its settled time once the finals
    /// ran (None for a candidate without one: it cannot win), its screening time
    /// before; None for a failed candidate.
    pub fn ranking_ms(&self, candidate: &Candidate) -> Option<f64> {
        ranking_ms(candidate, self.finals_done())
    }

    /// Candidate 0 (the heuristic default) in the metric the winner is chosen by.
    pub fn default_ms(&self) -> Option<f64> {
        self.candidates.first().and_then(|c| self.ranking_ms(c))
    }

    /// The fastest measured candidate and the ms it ranked by: once the finals ran,
    /// only the finalists with a settled time compete, by that time; before, every
    /// measured candidate by its screening time. None if nothing was measured.
    pub fn winner(&self) -> Option<(&Candidate, f64)> {
        let settled = self.finals_done();
        self.candidates
            .iter()
            .filter_map(|c| ranking_ms(c, settled).map(|ms| (c, ms)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The candidate to serve: the winner, unless it beats candidate 0 (the heuristic
    /// default) by less than [`MIN_GAIN`] in the same metric (both settled once the
    /// finals ran), which is within the run-to-run spread of a timing (2 to 3% between
    /// device calls, `bench/NOTES.md`), [`MIN_GAIN_PLACED`] where the finals' passes
    /// ran on buffer sets of their own, or [`MIN_GAIN_SCREENED`] before the finals;
    /// then the default. None when nothing was measured.
    pub fn choice(&self) -> Option<&Candidate> {
        let (winner, ms) = self.winner()?;
        let min_gain = if !self.finals_done() {
            MIN_GAIN_SCREENED
        } else if self.timing.final_placements > 1 {
            MIN_GAIN_PLACED
        } else {
            MIN_GAIN
        };
        match self.default_ms() {
            Some(default_ms) if ms * min_gain > default_ms => self.candidates.first(),
            _ => Some(winner),
        }
    }

    /// Whether the record was measured with another version of its template than
    /// `current(template)`.
    pub fn is_stale(&self, current: impl Fn(crate::space::Template) -> String) -> bool {
        self.template_hash != current(self.template)
    }
}

/// A candidate's settled time (`settled`) or screening time, if measured.
fn ranking_ms(candidate: &Candidate, settled: bool) -> Option<f64> {
    if settled {
        candidate.settled_ms()
    } else {
        candidate.screened_ms()
    }
}

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

/// An open tuning database.
pub struct TuningDb {
    path: PathBuf,
    tree: sled::Db,
}

/// What a merge or import did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MergeSummary {
    /// Keys new to this database.
    pub added: usize,
    /// Keys whose incoming record won (a faster winner, or this one had none).
    pub replaced: usize,
    /// Keys where this database's record was kept.
    pub kept: usize,
}

/// sled's file lock outlives the last handle by a moment (its flusher thread lets go
/// of it): a reopen right after a close waits for it, briefly. A lock held longer is
/// another process's.
fn open_sled(path: &Path) -> Result<sled::Db, DbError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match sled::open(path) {
            Ok(tree) => return Ok(tree),
            // sled words it "could not acquire lock on ...", the OS's WouldBlock inside.
            Err(sled::Error::Io(e))
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.to_string().contains("could not acquire lock") =>
            {
                if std::time::Instant::now() >= deadline {
                    return Err(DbError::InUse { path: path.into() });
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => {
                return Err(DbError::Corrupt {
                    path: path.into(),
                    why: e.to_string(),
                })
            }
        }
    }
}

impl TuningDb {
    /// Opens the database in `path`, creating it if the folder does not exist or is
    /// empty. A folder holding anything else is refused, never overwritten.
    pub fn open(path: &Path) -> Result<TuningDb, DbError> {
        let fresh = match std::fs::read_dir(path) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                return Err(DbError::Foreign {
                    path: path.into(),
                    why: "it is a file, not a folder".into(),
                })
            }
            Err(e) => {
                return Err(DbError::Io {
                    path: path.into(),
                    why: e.to_string(),
                })
            }
        };
        if !fresh && !path.join("conf").is_file() {
            return Err(DbError::Foreign {
                path: path.into(),
                why: "the folder holds other files".into(),
            });
        }
        let tree = open_sled(path)?;
        let corrupt = |why: String| DbError::Corrupt {
            path: path.into(),
            why,
        };
        match tree.get(FORMAT_KEY).map_err(|e| corrupt(e.to_string()))? {
            Some(v) if v.as_ref() == FORMAT.as_bytes() => {}
            Some(v) => {
                return Err(DbError::Foreign {
                    path: path.into(),
                    why: format!(
                        "format `{}`, expected `{FORMAT}`",
                        String::from_utf8_lossy(&v)
                    ),
                })
            }
            None if tree.is_empty() => {
                tree.insert(FORMAT_KEY, FORMAT.as_bytes())
                    .map_err(|e| corrupt(e.to_string()))?;
                tree.flush().map_err(|e| corrupt(e.to_string()))?;
            }
            None => {
                return Err(DbError::Foreign {
                    path: path.into(),
                    why: "a sled store without fa4-gen's format mark".into(),
                })
            }
        }
        let db = TuningDb {
            path: path.into(),
            tree,
        };
        db.rekey_legacy()?;
        Ok(db)
    }

    /// Moves records stored under the key scheme without the template to their key now
    /// (written first and flushed, then the old key removed: a crash in between leaves
    /// a duplicate that the next open removes, never a loss).
    fn rekey_legacy(&self) -> Result<(), DbError> {
        let io = |e: sled::Error| DbError::Io {
            path: self.path.clone(),
            why: e.to_string(),
        };
        let mut moved = Vec::new();
        for item in self.tree.iter() {
            let (k, v) = item.map_err(io)?;
            if k.as_ref() == FORMAT_KEY {
                continue;
            }
            let key = String::from_utf8_lossy(&k).into_owned();
            // Keys of the current scheme start with their template: nothing to decode.
            if Template::ALL
                .iter()
                .any(|t| key.starts_with(&format!("{}/", t.name())))
            {
                continue;
            }
            let record = self.decode(&key, &v)?;
            if key != record.key() && key == record.legacy_key() {
                moved.push((key, record));
            }
        }
        for (old, record) in moved {
            if self
                .tree
                .get(record.key().as_bytes())
                .map_err(io)?
                .is_none()
            {
                self.put(&record)?;
            }
            self.tree.remove(old.as_bytes()).map_err(io)?;
        }
        self.tree.flush().map_err(io)?;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores a record (replacing the one with the same key) and flushes it to disk.
    pub fn put(&self, record: &Record) -> Result<(), DbError> {
        let bytes = serde_json::to_vec(record).expect("records serialise");
        self.tree
            .insert(record.key().as_bytes(), bytes)
            .and_then(|_| self.tree.flush())
            .map(|_| ())
            .map_err(|e| DbError::Io {
                path: self.path.clone(),
                why: e.to_string(),
            })
    }

    pub fn get(&self, key: &str) -> Result<Option<Record>, DbError> {
        let value = self.tree.get(key.as_bytes()).map_err(|e| DbError::Io {
            path: self.path.clone(),
            why: e.to_string(),
        })?;
        value.map(|v| self.decode(key, &v)).transpose()
    }

    fn decode(&self, key: &str, bytes: &[u8]) -> Result<Record, DbError> {
        serde_json::from_slice(bytes).map_err(|e| DbError::BadRecord {
            path: self.path.clone(),
            key: key.to_string(),
            why: e.to_string(),
        })
    }

    /// Every record, sorted by key.
    pub fn records(&self) -> Result<Vec<Record>, DbError> {
        let mut out = Vec::new();
        for item in self.tree.iter() {
            let (k, v) = item.map_err(|e| DbError::Io {
                path: self.path.clone(),
                why: e.to_string(),
            })?;
            if k.as_ref() == FORMAT_KEY {
                continue;
            }
            out.push(self.decode(&String::from_utf8_lossy(&k), &v)?);
        }
        Ok(out)
    }

    /// Adds `incoming` records: new keys are added; on a shared key the record with the
    /// faster winner stays (a record with a winner beats one without).
    pub fn merge_records(&self, incoming: Vec<Record>) -> Result<MergeSummary, DbError> {
        let mut summary = MergeSummary::default();
        for record in incoming {
            match self.get(&record.key())? {
                None => {
                    summary.added += 1;
                    self.put(&record)?;
                }
                Some(current) => {
                    let ms = |r: &Record| r.winner().map_or(f64::INFINITY, |w| w.1);
                    if ms(&record) < ms(&current) {
                        summary.replaced += 1;
                        self.put(&record)?;
                    } else {
                        summary.kept += 1;
                    }
                }
            }
        }
        Ok(summary)
    }

    /// Fills in the code hash of timings recorded without one, from `code_of(kernel id)`
    /// (a build of the same templates: kernel ids name their template version, so only
    /// the timings of that version match). Returns (timings stamped, records rewritten).
    pub fn stamp_code_hashes(
        &self,
        code_of: impl Fn(&str) -> Option<String>,
    ) -> Result<(usize, usize), DbError> {
        let (mut stamped, mut rewritten) = (0, 0);
        for mut record in self.records()? {
            let mut changed = false;
            for c in &mut record.candidates {
                if let Outcome::Measured { code_hash, .. } = &mut c.outcome {
                    if code_hash.is_empty() {
                        if let Some(h) = code_of(&c.kernel).filter(|h| !h.is_empty()) {
                            *code_hash = h;
                            stamped += 1;
                            changed = true;
                        }
                    }
                }
            }
            if changed {
                self.put(&record)?;
                rewritten += 1;
            }
        }
        Ok((stamped, rewritten))
    }

    /// Moves the records of other template versions than the current ones
    /// (`current(template)`) to the current version where that changes no timing:
    /// `built(record, config)` gives the current build's kernel of each candidate (its
    /// id and code hash), and every candidate must be a timing of that kernel's machine
    /// code. A template edit that leaves a spec's kernels alone (a comment, a switch its
    /// configs do not use) so costs it no GPU time; a record with any candidate not built
    /// now, failed, timed without a code hash or of other machine code stays as it is,
    /// for `fa4-gen tune` (which keeps the timings of the unchanged kernels).
    pub fn carry_unchanged(
        &self,
        current: impl Fn(crate::space::Template) -> String,
        built: impl Fn(&Record, &TileConfig) -> Option<(String, String)>,
    ) -> Result<CarrySummary, DbError> {
        let mut summary = CarrySummary::default();
        for mut record in self.records()? {
            if !record.is_stale(&current) {
                continue;
            }
            let renamed: Option<Vec<String>> = record
                .candidates
                .iter()
                .map(|c| {
                    let (id, code) = built(&record, &c.config)?;
                    c.timed_code(&code).then_some(id)
                })
                .collect();
            match renamed {
                Some(ids) => {
                    for (c, id) in record.candidates.iter_mut().zip(ids) {
                        c.kernel = id;
                    }
                    record.template_hash = current(record.template);
                    self.put(&record)?;
                    summary.carried += 1;
                }
                None => summary.left.push(record.key()),
            }
        }
        Ok(summary)
    }

    /// Removes the records measured with other template versions than the current ones
    /// (`current(template)` gives a template's hash); returns their keys.
    pub fn gc(
        &self,
        current: impl Fn(crate::space::Template) -> String,
    ) -> Result<Vec<String>, DbError> {
        let stale: Vec<String> = self
            .records()?
            .into_iter()
            .filter(|r| r.is_stale(&current))
            .map(|r| r.key())
            .collect();
        for key in &stale {
            self.tree.remove(key.as_bytes()).map_err(|e| DbError::Io {
                path: self.path.clone(),
                why: e.to_string(),
            })?;
        }
        self.tree.flush().map_err(|e| DbError::Io {
            path: self.path.clone(),
            why: e.to_string(),
        })?;
        Ok(stale)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use fa4_spec::{Arch, Dtype, MaskKind};

    fn record(ms: &[Option<f64>], seqlen: u32, gpu: &str) -> Record {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        Record {
            template: crate::space::Template::Portable,
            spec,
            bucket: Bucket::of(seqlen),
            device: Device {
                name: gpu.into(),
                sm_count: 132,
                driver: "13.0".into(),
                nvrtc: "13.0".into(),
            },
            template_hash: "abc".into(),
            timing: TimingPolicy {
                warmup: 3,
                runs: 50,
                l2_flush: true,
                budget_ms: 25.0,
                finalists: 0,
                settle_ms: 0.0,
                key_warmup_ms: 0.0,
                final_passes: 0,
                final_placements: 0,
                short_key_passes: 0,
                short_key_ms: 0.0,
            },
            date: "2026-11-30T10:00:00Z".into(),
            candidates: ms
                .iter()
                .enumerate()
                .map(|(i, m)| Candidate {
                    config: TileConfig {
                        block_m: 128,
                        block_n: 32 << i,
                        warps: 4,
                        stages: 1,
                        switches: Default::default(),
                    },
                    kernel: format!("k{i}"),
                    outcome: match m {
                        Some(ms) => Outcome::Measured {
                            ms: *ms,
                            spread: 0.01,
                            tflops: 100.0 / ms,
                            registers: 200,
                            settled_ms: None,
                            settled_passes: Vec::new(),
                            code_hash: format!("c{i}"),
                        },
                        None => Outcome::Failed {
                            error: "O relative L2 error 1e-1".into(),
                        },
                    },
                })
                .collect(),
        }
    }

    #[test]
    fn the_default_is_served_unless_beaten_by_more_than_the_noise() {
        let r = record(&[Some(1.00), Some(0.99)], 1024, "H200");
        assert_eq!(r.winner().unwrap().0.kernel, "k1");
        assert_eq!(r.choice().unwrap().kernel, "k0", "1% is noise");
        // Before the finals a screening win must be clear: 5% is not, 12% is.
        let r = record(&[Some(1.00), Some(0.95)], 1024, "H200");
        assert_eq!(
            r.choice().unwrap().kernel,
            "k0",
            "screened 5% is not served"
        );
        assert_eq!(
            settle(r, &[Some(1.00), Some(0.95)])
                .choice()
                .unwrap()
                .kernel,
            "k1",
            "settled 5% is"
        );
        let r = record(&[Some(1.00), Some(0.88)], 1024, "H200");
        assert_eq!(r.choice().unwrap().kernel, "k1");
        // A default that failed is never served; nothing measured, nothing served.
        let r = record(&[None, Some(1.5)], 1024, "H200");
        assert_eq!(r.choice().unwrap().kernel, "k1");
        assert!(record(&[None], 1024, "H200").choice().is_none());
    }

    /// `record(ms)` with the finals' settled times `settled` (by candidate).
    fn settle(mut r: Record, settled: &[Option<f64>]) -> Record {
        for (c, s) in r.candidates.iter_mut().zip(settled) {
            c.set_settled_ms(*s);
        }
        r
    }

    #[test]
    fn several_passes_settle_at_their_mean_and_one_pass_is_stored_as_before() {
        let mut r = record(&[Some(1.0), Some(0.9)], 512, "H200");
        let c = &mut r.candidates[1];
        c.push_settled_pass(1.0);
        assert_eq!((c.settled_ms(), c.settled_passes()), (Some(1.0), vec![1.0]));
        let one = serde_json::to_string(&*c).unwrap();
        assert!(!one.contains("settled_passes"), "{one}");
        // A pass on a buffer set the kernel runs slow on counts for a third.
        c.push_settled_pass(1.3);
        assert_eq!(c.settled_ms(), Some(1.15), "two passes: their mean");
        c.push_settled_pass(0.98);
        assert!((c.settled_ms().unwrap() - 3.28 / 3.0).abs() < 1e-12);
        assert_eq!(c.settled_passes(), vec![1.0, 1.3, 0.98]);
        let text = serde_json::to_string(&*c).unwrap();
        assert_eq!(serde_json::from_str::<Candidate>(&text).unwrap(), *c);
        // A record that stored its passes' median ranks by their mean all the same.
        if let Outcome::Measured { settled_ms, .. } = &mut c.outcome {
            *settled_ms = Some(1.0);
        }
        assert!((c.settled_ms().unwrap() - 3.28 / 3.0).abs() < 1e-12);
        // Dropping the settled time drops the passes; a failed candidate takes none.
        c.set_settled_ms(None);
        assert!(c.settled_passes().is_empty());
        let mut failed = record(&[None], 512, "H200").candidates.remove(0);
        failed.push_settled_pass(1.0);
        assert_eq!(
            (failed.settled_ms(), failed.settled_passes()),
            (None, vec![])
        );
    }

    #[test]
    fn once_the_finals_ran_only_settled_times_rank() {
        // Screening: k2 fastest. Settled: k2 slowest of the finalists, k3 (0.6 in
        // screening) not a finalist.
        let screened = record(&[Some(1.0), Some(0.9), Some(0.5), Some(0.6)], 1024, "H200");
        assert!(!screened.finals_done());
        assert_eq!(screened.winner().unwrap().0.kernel, "k2");
        let r = settle(screened, &[Some(0.95), Some(0.8), Some(1.2), None]);
        assert!(r.finals_done());
        assert_eq!(
            r.winner().map(|(c, ms)| (c.kernel.as_str(), ms)),
            Some(("k1", 0.8))
        );
        assert_eq!(r.default_ms(), Some(0.95));
        assert_eq!(r.ranking_ms(&r.candidates[3]), None, "no finalist, no rank");
        assert_eq!(r.choice().unwrap().kernel, "k1");
        // The default is compared settled too: within MIN_GAIN of it, it is served.
        let r = settle(
            record(&[Some(1.0), Some(0.5)], 1024, "H200"),
            &[Some(0.80), Some(0.79)],
        );
        assert_eq!(r.winner().unwrap().0.kernel, "k1");
        assert_eq!(r.choice().unwrap().kernel, "k0", "1% settled is noise");
        // ... unless the finals' passes ran on buffer sets of their own: then 1.5% is
        // served, 0.5% is not.
        let placed = |settled_ms: f64| {
            let mut r = settle(
                record(&[Some(1.0), Some(0.5)], 1024, "H200"),
                &[Some(0.80), Some(settled_ms)],
            );
            r.timing.final_placements = 3;
            r.choice().unwrap().kernel.clone()
        };
        assert_eq!(placed(0.80 / 1.015), "k1");
        assert_eq!(placed(0.80 / 1.005), "k0");
        // A default whose finals timing failed is not compared: the winner is served.
        let r = settle(
            record(&[Some(1.0), Some(1.1), Some(1.2)], 1024, "H200"),
            &[None, Some(1.0), Some(0.9)],
        );
        assert_eq!(r.default_ms(), None);
        assert_eq!(r.choice().unwrap().kernel, "k2");
    }

    #[test]
    fn records_written_before_the_finals_parse_and_rank_by_screening_time() {
        let r = record(&[Some(2.0), Some(1.5), None], 4096, "H200");
        let mut json = serde_json::to_value(&r).unwrap();
        // What an older fa4-gen wrote: no finals fields anywhere.
        let timing = json["timing"].as_object_mut().unwrap();
        timing.remove("finalists").unwrap();
        timing.remove("settle_ms").unwrap();
        timing.remove("key_warmup_ms").unwrap();
        let text = json.to_string();
        assert!(
            !text.contains("settled_ms") && !text.contains("finalists"),
            "{text}"
        );
        let old: Record = serde_json::from_str(&text).unwrap();
        assert_eq!((old.timing.finalists, old.timing.settle_ms), (0, 0.0));
        assert!(!old.finals_done());
        assert_eq!(
            old.winner().map(|(c, ms)| (c.kernel.as_str(), ms)),
            Some(("k1", 1.5))
        );
        assert_eq!(old.choice().unwrap().kernel, "k1");
        assert_eq!(old, r);
        let outcome: Outcome = serde_json::from_str(
            r#"{"measured":{"ms":1.25,"spread":0.02,"tflops":300.0,"registers":240}}"#,
        )
        .unwrap();
        assert!(
            matches!(&outcome, Outcome::Measured { ms, settled_ms: None, code_hash, .. } if *ms == 1.25 && code_hash.is_empty())
        );
        // The timed kernel's code hash is written where known, and read back.
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(text.matches("\"code_hash\":\"c").count(), 2, "{text}");
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), r);
        let unknown = serde_json::to_string(&Outcome::Measured {
            ms: 1.0,
            spread: 0.0,
            tflops: 1.0,
            registers: 1,
            settled_ms: None,
            settled_passes: Vec::new(),
            code_hash: String::new(),
        })
        .unwrap();
        assert!(!unknown.contains("code_hash"), "{unknown}");
        // A settled time is written, and read back.
        let settled = settle(r, &[Some(1.9), Some(1.4), None]);
        let text = serde_json::to_string(&settled).unwrap();
        assert_eq!(text.matches("\"settled_ms\"").count(), 2, "{text}");
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), settled);
    }

    #[test]
    fn the_winner_is_the_fastest_measured_candidate() {
        let r = record(&[Some(2.0), None, Some(1.5)], 4096, "H200");
        assert_eq!(r.winner().unwrap().0.kernel, "k2");
        let failed = record(&[None, None], 4096, "H200");
        assert!(failed.winner().is_none(), "a failed candidate never wins");
    }

    #[test]
    fn timings_without_a_code_hash_are_stamped_from_a_build() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let mut r = record(&[Some(2.0), Some(1.0), None, Some(3.0)], 4096, "H200");
        // Timed before code hashes were kept, but for candidate 3.
        for c in &mut r.candidates[..3] {
            if let Outcome::Measured { code_hash, .. } = &mut c.outcome {
                code_hash.clear();
            }
        }
        db.put(&r).unwrap();
        let build: BTreeMap<&str, &str> = [("k0", "aaaa"), ("k2", "cccc"), ("k3", "dddd")].into();
        let code_of = |id: &str| build.get(id).map(|h| h.to_string());
        assert_eq!(db.stamp_code_hashes(code_of).unwrap(), (1, 1));
        let codes: Vec<Option<String>> = db
            .get(&r.key())
            .unwrap()
            .unwrap()
            .candidates
            .iter()
            .map(|c| match &c.outcome {
                Outcome::Measured { code_hash, .. } => Some(code_hash.clone()),
                Outcome::Failed { .. } => None,
            })
            .collect();
        // k1 is not in the build, k2 failed (no timing), k3 keeps the hash it had.
        assert_eq!(
            codes,
            [
                Some("aaaa".into()),
                Some(String::new()),
                None,
                Some("c3".into())
            ]
        );
        assert_eq!(db.stamp_code_hashes(code_of).unwrap(), (0, 0), "idempotent");
    }

    #[test]
    fn stale_records_move_to_the_current_template_only_where_no_kernel_changed() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        // Timed under template version "abc": k0, k1 and k2 with code hashes c0, c1, c2.
        let same = record(&[Some(2.0), Some(1.0), Some(3.0)], 4096, "H200");
        let changed = record(&[Some(2.0), Some(1.0), Some(3.0)], 8192, "H200");
        let failed = record(&[Some(2.0), None], 16384, "H200");
        let current = record(&[Some(2.0)], 1024, "H200");
        for r in [&same, &changed, &failed] {
            db.put(r).unwrap();
        }
        db.put(&Record {
            template_hash: "new".into(),
            ..current.clone()
        })
        .unwrap();
        // The build of version "new": block_n picks the candidate; at 8192 tokens (a
        // spec's record stands in for its own build here) the third kernel's code changed.
        let built = |r: &Record, c: &TileConfig| {
            let i = (c.block_n / 32).trailing_zeros();
            let code = if r.bucket.seqlen == 8192 && i == 2 {
                "other".to_string()
            } else {
                format!("c{i}")
            };
            Some((format!("new{i}"), code))
        };
        let summary = db.carry_unchanged(|_| "new".to_string(), built).unwrap();
        assert_eq!(summary.carried, 1);
        assert_eq!(summary.left, vec![changed.key(), failed.key()]);
        let moved = db.get(&same.key()).unwrap().unwrap();
        assert_eq!(moved.template_hash, "new");
        let ids: Vec<&str> = moved.candidates.iter().map(|c| c.kernel.as_str()).collect();
        assert_eq!(ids, ["new0", "new1", "new2"]);
        // The timings and the winner are the record's own.
        assert_eq!(
            moved
                .candidates
                .iter()
                .map(|c| &c.outcome)
                .collect::<Vec<_>>(),
            same.candidates
                .iter()
                .map(|c| &c.outcome)
                .collect::<Vec<_>>()
        );
        assert_eq!(db.get(&changed.key()).unwrap().unwrap(), changed);
        assert_eq!(db.get(&failed.key()).unwrap().unwrap(), failed);
        // A candidate the current build lacks keeps the record stale too.
        let summary = db
            .carry_unchanged(|_| "newer".to_string(), |_, _| None)
            .unwrap();
        assert_eq!(summary.carried, 0);
        assert_eq!(summary.left.len(), 4);
    }

    #[test]
    fn each_template_keeps_its_own_record_of_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let portable = record(&[Some(2.0), Some(1.0)], 4096, "H200");
        let hopper = Record {
            template: Template::Hopper,
            ..record(&[Some(1.5)], 4096, "H200")
        };
        db.put(&portable).unwrap();
        db.put(&hopper).unwrap();
        assert_ne!(portable.key(), hopper.key());
        assert_eq!(db.records().unwrap().len(), 2, "neither replaced the other");
        let back = db.get(&portable.key()).unwrap().unwrap();
        assert_eq!(back.winner().unwrap().1, 1.0);
        assert_eq!(
            db.get(&hopper.key()).unwrap().unwrap().template,
            Template::Hopper
        );
    }

    #[test]
    fn stores_and_exports_keyed_without_the_template_are_read_and_rekeyed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let r = record(&[Some(2.0), Some(1.0)], 4096, "H200");
        let legacy = r.legacy_key();
        {
            // A store written before templates joined the key.
            let db = TuningDb::open(&path).unwrap();
            db.tree
                .insert(legacy.as_bytes(), serde_json::to_vec(&r).unwrap())
                .unwrap();
            db.tree.flush().unwrap();
        }
        let db = TuningDb::open(&path).unwrap();
        assert!(db.get(&legacy).unwrap().is_none(), "the old key is gone");
        assert_eq!(db.get(&r.key()).unwrap().unwrap().winner().unwrap().1, 1.0);
        assert_eq!(db.records().unwrap().len(), 1, "moved, not copied");
        drop(db);
        // An export written then: read, and written back under the new keys.
        let old_export = export_json(std::slice::from_ref(&r)).replace(&r.key(), &legacy);
        assert!(old_export.contains(&format!("\"{legacy}\"")));
        let back = parse_export(Path::new("old.json"), &old_export).unwrap();
        assert_eq!(back.len(), 1);
        assert!(export_json(&back).contains(&format!("\"{}\"", r.key())));
    }

    #[test]
    fn a_database_held_open_elsewhere_is_named_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let held = TuningDb::open(&path).unwrap();
        let err = TuningDb::open(&path)
            .err()
            .expect("a second open must fail");
        assert!(matches!(err, DbError::InUse { .. }), "{err}");
        assert!(err.to_string().contains("open in another process"), "{err}");
        drop(held);
        // Closed, it opens again (the reopen waits out sled's lock release).
        TuningDb::open(&path).unwrap();
    }

    #[test]
    fn records_survive_a_reopen_and_export_is_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = TuningDb::open(&path).unwrap();
        db.put(&record(&[Some(2.0)], 8192, "H200")).unwrap();
        db.put(&record(&[Some(1.0)], 512, "H200")).unwrap();
        drop(db);
        let db = TuningDb::open(&path).unwrap();
        let records = db.records().unwrap();
        assert_eq!(records.len(), 2);
        let text = export_json(&records);
        let mut reversed = records.clone();
        reversed.reverse();
        assert_eq!(
            text,
            export_json(&reversed),
            "order of records does not matter"
        );
        assert!(text.find("s00512").unwrap() < text.find("s08192").unwrap());
        let back = parse_export(Path::new("x.json"), &text).unwrap();
        assert_eq!(export_json(&back), text);
    }

    #[test]
    fn merge_keeps_the_fastest_per_key_and_device() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        db.put(&record(&[Some(2.0)], 4096, "H200")).unwrap();
        let summary = db
            .merge_records(vec![
                record(&[Some(1.0)], 4096, "H200"), // faster: replaces
                record(&[Some(3.0)], 4096, "H200"), // slower: kept out
                record(&[Some(9.0)], 4096, "H100"), // another device: added
                record(&[None], 2048, "H200"),      // new key, no winner: added
            ])
            .unwrap();
        assert_eq!(
            summary,
            MergeSummary {
                added: 2,
                replaced: 1,
                kept: 1
            }
        );
        let best = db.get(&record(&[], 4096, "H200").key()).unwrap().unwrap();
        assert_eq!(best.winner().unwrap().1, 1.0);
        assert_eq!(db.records().unwrap().len(), 3);
    }

    #[test]
    fn gc_removes_only_stale_records() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let mut old = record(&[Some(1.0)], 1024, "H200");
        old.template_hash = "old".into();
        db.put(&old).unwrap();
        db.put(&record(&[Some(1.0)], 2048, "H200")).unwrap();
        let current = |_| "abc".to_string();
        let removed = db.gc(current).unwrap();
        assert_eq!(removed, vec![old.key()]);
        let left = db.records().unwrap();
        assert_eq!(left.len(), 1);
        assert!(!left[0].is_stale(current));
    }

    #[test]
    fn foreign_and_corrupt_stores_are_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        // A folder with other files in it.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), b"hello").unwrap();
        let e = TuningDb::open(&other).err().unwrap().to_string();
        assert!(e.contains("not a fa4-gen tuning database"), "{e}");
        assert_eq!(std::fs::read(other.join("notes.txt")).unwrap(), b"hello");
        // A file where the folder should be.
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let e = TuningDb::open(&file).err().unwrap().to_string();
        assert!(e.contains("it is a file"), "{e}");
        // A sled store written by something else.
        let foreign = dir.path().join("foreign");
        {
            let s = sled::open(&foreign).unwrap();
            s.insert(b"k", b"v").unwrap();
            s.flush().unwrap();
        }
        let e = TuningDb::open(&foreign).err().unwrap().to_string();
        assert!(e.contains("without fa4-gen's format mark"), "{e}");
        // An export with a wrong format or a record under the wrong key.
        let e = parse_export(Path::new("t.json"), r#"{"format":"x","records":{}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a tuning-db export"), "{e}");
        let r = record(&[Some(1.0)], 4096, "H200");
        let text = serde_json::json!({"format": FORMAT, "records": {"wrong": r}}).to_string();
        let e = parse_export(Path::new("t.json"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("belongs under"), "{e}");
    }
}
