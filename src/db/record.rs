//! A record: everything measured for one tuning key (template, spec, bucket, device),
//! its candidates and their outcomes, and the rule that picks the candidate it serves.

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
/// 0.3 to 2.1%; 2% had held two of those back.
pub const MIN_GAIN_PLACED: f64 = 1.01;

/// The same before the finals ran, on screening times alone. A screening time is one
/// short timing among a hundred candidates: a soft-capped d64 key whose tune stopped
/// before its finals served a tile screened 1.027x the default that then ran 0.93x it,
/// and its finals kept the default. So a screened record serves
/// only a clear win; `tune` resumes into the finals.
pub const MIN_GAIN_SCREENED: f64 = 1.10;

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

    /// Whether it holds finals timings (a settled time or passes), whatever they read.
    pub fn has_finals(&self) -> bool {
        matches!(&self.outcome, Outcome::Measured { settled_ms, settled_passes, .. }
            if settled_ms.is_some() || !settled_passes.is_empty())
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

/// Everything measured for one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub template: Template,
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
        "{}/{}/{}-{}sm",
        spec.tag(),
        bucket.key(),
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

    pub(super) fn legacy_key(&self) -> String {
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
        self.winner_index().map(|(i, ms)| (&self.candidates[i], ms))
    }

    /// [`Record::winner`] by index: the first of the fastest.
    fn winner_index(&self) -> Option<(usize, f64)> {
        let settled = self.finals_done();
        self.candidates
            .iter()
            .enumerate()
            .filter_map(|(i, c)| ranking_ms(c, settled).map(|ms| (i, ms)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The candidates that decide what the record serves, by index, in order: candidate
    /// 0 (the heuristic default), every finalist (a candidate with finals timings) and
    /// the winner. A record of these alone has the same winner, default time and so
    /// [`Record::choice`]: once the finals ran only the finalists rank, all of them
    /// here; before, the winner is the first of the fastest and stays so among fewer
    /// candidates in the same order. The slim export keeps these
    /// ([`crate::db::Entry::slim`]).
    pub fn deciding(&self) -> Vec<usize> {
        let winner = self.winner_index().map(|(i, _)| i);
        (0..self.candidates.len())
            .filter(|&i| i == 0 || Some(i) == winner || self.candidates[i].has_finals())
            .collect()
    }

    /// The candidate to serve: the winner, unless it beats candidate 0 (the heuristic
    /// default) by less than [`MIN_GAIN`] in the same metric (both settled once the
    /// finals ran), which is within the run-to-run spread of a timing (2 to 3% between
    /// device calls), [`MIN_GAIN_PLACED`] where the finals' passes
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
    pub fn is_stale(&self, current: impl Fn(Template) -> String) -> bool {
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
