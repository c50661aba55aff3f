//! Slim records: a record cut down to the candidates that decide what it serves, with a
//! summary of the screening timings it leaves out. The committed export holds these
//! (a few MB where every candidate of every key is tens); `db export --full` writes
//! every candidate the store holds.

use serde::{Deserialize, Serialize};

use super::record::{Candidate, Outcome, Record};

/// The candidates a slim record leaves out: screened, never finalists nor the winner.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Screened {
    /// How many were timed, and how many failed (wrong output, a compile or launch
    /// error).
    pub measured: u32,
    pub failed: u32,
    /// The fastest and the slowest screening time among those timed: how close the
    /// best of the rest came to the finalists, and how wide the space ran. None when
    /// none was timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fastest_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowest_ms: Option<f64>,
}

impl Screened {
    /// The summary of `left_out`.
    pub fn of<'a>(left_out: impl IntoIterator<Item = &'a Candidate>) -> Screened {
        let mut s = Screened {
            measured: 0,
            failed: 0,
            fastest_ms: None,
            slowest_ms: None,
        };
        for c in left_out {
            match (&c.outcome, c.screened_ms()) {
                (Outcome::Failed { .. }, _) => s.failed += 1,
                (Outcome::Measured { .. }, Some(ms)) => {
                    s.measured += 1;
                    s.fastest_ms = Some(s.fastest_ms.map_or(ms, |f| f.min(ms)));
                    s.slowest_ms = Some(s.slowest_ms.map_or(ms, |f| f.max(ms)));
                }
                // A timing that read zero or not a number: timed, but no time to show.
                (Outcome::Measured { .. }, None) => s.measured += 1,
            }
        }
        s
    }

    /// Both summaries as one: the candidates either leaves out.
    pub fn and(self, other: Screened) -> Screened {
        let pick = |a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64| match (a, b) {
            (Some(a), Some(b)) => Some(f(a, b)),
            (a, b) => a.or(b),
        };
        Screened {
            measured: self.measured + other.measured,
            failed: self.failed + other.failed,
            fastest_ms: pick(self.fastest_ms, other.fastest_ms, f64::min),
            slowest_ms: pick(self.slowest_ms, other.slowest_ms, f64::max),
        }
    }
}

/// A record as the store and the exports hold it: the candidates it holds, and where it
/// came from a slim export, the summary of those it left out (`screened`, beside the
/// record's own fields in JSON, which readers that do not know it skip).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(flatten)]
    pub record: Record,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screened: Option<Screened>,
}

impl From<Record> for Entry {
    /// A record holding every candidate it was measured with.
    fn from(record: Record) -> Entry {
        Entry {
            record,
            screened: None,
        }
    }
}

impl Entry {
    /// Whether candidates measured for the key were left out of it.
    pub fn is_slim(&self) -> bool {
        self.screened.is_some()
    }

    /// The entry cut down to the candidates that decide what it serves
    /// ([`Record::deciding`]: the default, the finalists, the winner), in their order,
    /// with the others summarised (added to what an earlier cut left out). Serves the
    /// same [`Record::choice`]. A record with nothing to leave out stays as it is, so
    /// its slim and full exports read alike.
    pub fn slim(&self) -> Entry {
        let keep = self.record.deciding();
        if keep.len() == self.record.candidates.len() {
            return self.clone();
        }
        let (held, left): (Vec<_>, Vec<_>) = self
            .record
            .candidates
            .iter()
            .enumerate()
            .partition(|(i, _)| keep.contains(i));
        let left = Screened::of(left.into_iter().map(|(_, c)| c));
        Entry {
            record: Record {
                candidates: held.into_iter().map(|(_, c)| c.clone()).collect(),
                ..self.record.clone()
            },
            screened: Some(self.screened.map_or(left, |s| s.and(left))),
        }
    }
}
