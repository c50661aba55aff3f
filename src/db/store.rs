//! The live store: records in sled, one folder, safe against a killed writer (a record
//! is written whole or not at all). Opening refuses folders that are not a fa4-gen
//! database; merging keeps the faster winner per key; `gc`, `carry_unchanged` and
//! `stamp_code_hashes` maintain records across template versions.

use std::path::{Path, PathBuf};

use fa4_spec::TileConfig;

use super::record::{Outcome, Record};
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
        current: impl Fn(Template) -> String,
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
    pub fn gc(&self, current: impl Fn(Template) -> String) -> Result<Vec<String>, DbError> {
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
