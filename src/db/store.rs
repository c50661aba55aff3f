//! The live store: records in sled, one folder, safe against a killed writer (a record
//! is written whole or not at all). Opening refuses folders that are not a fa4-gen
//! database; merging keeps the faster winner per key; `gc`, `carry_unchanged` and
//! `stamp_code_hashes` maintain records across template versions.

use std::path::{Path, PathBuf};

use fa4_spec::TileConfig;

use super::record::{Outcome, Record};
use super::slim::Entry;
use super::{DbError, FORMAT};
use crate::space::Template;

/// Marks a folder as a fa4-gen tuning database; its value is [`FORMAT`].
const FORMAT_KEY: &[u8] = b"__fa4-gen-tuning-db__";

/// An open tuning database.
pub struct TuningDb {
    path: PathBuf,
    pub(super) tree: sled::Db,
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
    /// Slim records given back the candidates they left out: the incoming record is
    /// the one they were cut from, whole (same template version, date and winner).
    pub restored: usize,
}

/// What [`TuningDb::carry_unchanged`] did: records moved to the current template
/// versions, and the keys of the stale records it left (some kernel of theirs changed).
#[derive(Debug, Default, PartialEq)]
pub struct CarrySummary {
    pub carried: usize,
    pub left: Vec<String>,
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

    fn io(&self, e: sled::Error) -> DbError {
        DbError::Io {
            path: self.path.clone(),
            why: e.to_string(),
        }
    }

    /// Moves records stored under the key scheme without the template to their key now
    /// (written first and flushed, then the old key removed: a crash in between leaves
    /// a duplicate that the next open removes, never a loss).
    fn rekey_legacy(&self) -> Result<(), DbError> {
        let mut moved = Vec::new();
        for item in self.tree.iter() {
            let (k, v) = item.map_err(|e| self.io(e))?;
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
            let entry = self.decode(&key, &v)?;
            if key != entry.record.key() && key == entry.record.legacy_key() {
                moved.push((key, entry));
            }
        }
        for (old, entry) in moved {
            let new = entry.record.key();
            if self
                .tree
                .get(new.as_bytes())
                .map_err(|e| self.io(e))?
                .is_none()
            {
                self.put_entry(&entry)?;
            }
            self.tree.remove(old.as_bytes()).map_err(|e| self.io(e))?;
        }
        self.tree.flush().map_err(|e| self.io(e))?;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores a record whole (replacing the one with the same key, and with it any
    /// summary of candidates left out that a slim import stored: what is written now
    /// is what the key holds, as a tune writes it while it screens those candidates
    /// again) and flushes it to disk.
    pub fn put(&self, record: &Record) -> Result<(), DbError> {
        self.write(&record.key(), serde_json::to_vec(record))
    }

    /// Stores an entry (a record, and the summary of what a slim one leaves out),
    /// replacing the one with the same key, and flushes it to disk.
    pub fn put_entry(&self, entry: &Entry) -> Result<(), DbError> {
        self.write(&entry.record.key(), serde_json::to_vec(entry))
    }

    fn write(&self, key: &str, bytes: serde_json::Result<Vec<u8>>) -> Result<(), DbError> {
        self.tree
            .insert(key.as_bytes(), bytes.expect("records serialise"))
            .and_then(|_| self.tree.flush())
            .map(|_| ())
            .map_err(|e| self.io(e))
    }

    pub fn get(&self, key: &str) -> Result<Option<Record>, DbError> {
        Ok(self.get_entry(key)?.map(|e| e.record))
    }

    pub fn get_entry(&self, key: &str) -> Result<Option<Entry>, DbError> {
        let value = self.tree.get(key.as_bytes()).map_err(|e| self.io(e))?;
        value.map(|v| self.decode(key, &v)).transpose()
    }

    fn decode(&self, key: &str, bytes: &[u8]) -> Result<Entry, DbError> {
        serde_json::from_slice(bytes).map_err(|e| DbError::BadRecord {
            path: self.path.clone(),
            key: key.to_string(),
            why: e.to_string(),
        })
    }

    /// Every record, sorted by key.
    pub fn records(&self) -> Result<Vec<Record>, DbError> {
        Ok(self.entries()?.into_iter().map(|e| e.record).collect())
    }

    /// Every entry (record and summary of what it leaves out), sorted by key.
    pub fn entries(&self) -> Result<Vec<Entry>, DbError> {
        let mut out = Vec::new();
        for item in self.tree.iter() {
            let (k, v) = item.map_err(|e| self.io(e))?;
            if k.as_ref() == FORMAT_KEY {
                continue;
            }
            out.push(self.decode(&String::from_utf8_lossy(&k), &v)?);
        }
        Ok(out)
    }

    /// Adds `incoming` records, each holding every candidate it was measured with
    /// ([`TuningDb::merge_entries`]).
    pub fn merge_records(&self, incoming: Vec<Record>) -> Result<MergeSummary, DbError> {
        self.merge_entries(incoming.into_iter().map(Entry::from).collect())
    }

    /// Adds `incoming` entries: new keys are added; on a shared key the record with the
    /// faster winner stays (a record with a winner beats one without), and a slim record
    /// gives way to the whole record it was cut from.
    pub fn merge_entries(&self, incoming: Vec<Entry>) -> Result<MergeSummary, DbError> {
        let mut summary = MergeSummary::default();
        for entry in incoming {
            match self.get_entry(&entry.record.key())? {
                None => {
                    summary.added += 1;
                    self.put_entry(&entry)?;
                }
                Some(current) => {
                    let ms = |r: &Record| r.winner().map_or(f64::INFINITY, |w| w.1);
                    if ms(&entry.record) < ms(&current.record) {
                        summary.replaced += 1;
                        self.put_entry(&entry)?;
                    } else if restores(&current, &entry) {
                        summary.restored += 1;
                        self.put_entry(&entry)?;
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
        for mut entry in self.entries()? {
            let mut changed = false;
            for c in &mut entry.record.candidates {
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
                self.put_entry(&entry)?;
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
    /// for `fa4-gen tune` (which keeps the timings of the unchanged kernels). A slim
    /// record is judged by the candidates it holds and moves with its summary of the
    /// others.
    pub fn carry_unchanged(
        &self,
        current: impl Fn(Template) -> String,
        built: impl Fn(&Record, &TileConfig) -> Option<(String, String)>,
    ) -> Result<CarrySummary, DbError> {
        let mut summary = CarrySummary::default();
        for mut entry in self.entries()? {
            let record = &mut entry.record;
            if !record.is_stale(&current) {
                continue;
            }
            let renamed: Option<Vec<String>> = record
                .candidates
                .iter()
                .map(|c| {
                    let (id, code) = built(record, &c.config)?;
                    c.timed_code(&code).then_some(id)
                })
                .collect();
            match renamed {
                Some(ids) => {
                    for (c, id) in record.candidates.iter_mut().zip(ids) {
                        c.kernel = id;
                    }
                    record.template_hash = current(record.template);
                    self.put_entry(&entry)?;
                    summary.carried += 1;
                }
                None => summary.left.push(record.key()),
            }
        }
        Ok(summary)
    }

    /// Removes the records measured with other template versions than the current ones
    /// (`current(template)` gives a template's hash); returns their keys.
    pub fn gc(&self, current: impl Fn(Template) -> String) -> Result<Vec<String>, DbError> {
        let stale: Vec<String> = self
            .records()?
            .into_iter()
            .filter(|r| r.is_stale(&current))
            .map(|r| r.key())
            .collect();
        for key in &stale {
            self.tree.remove(key.as_bytes()).map_err(|e| self.io(e))?;
        }
        self.tree.flush().map_err(|e| self.io(e))?;
        Ok(stale)
    }
}

/// Whether `incoming` is the whole record that the slim `current` was cut from: the same
/// template version, date and winner, and more candidates.
fn restores(current: &Entry, incoming: &Entry) -> bool {
    let (c, i) = (&current.record, &incoming.record);
    current.is_slim()
        && !incoming.is_slim()
        && i.candidates.len() > c.candidates.len()
        && i.template_hash == c.template_hash
        && i.date == c.date
        && i.winner().map(|w| w.1) == c.winner().map(|w| w.1)
}
