//! A spec's run: where its records go and what they are stamped with ([`Session`]), and
//! what it did ([`Counts`]); `spec` runs it, `resume` reads and carries its records.

use std::time::Instant;

use crate::db::{Device, TuningDb};
use crate::space::Template;

/// What one spec's tuning did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Candidates checked against the reference (and how many failed the check).
    pub checked: usize,
    pub check_failed: usize,
    /// (candidate, bucket) pairs timed, failed while timing, or found already measured.
    pub timed: usize,
    pub time_failed: usize,
    pub skipped: usize,
    /// Screening timings kept from a record of another template version, where this
    /// build's kernel has the same machine code as the one timed there.
    pub carried: usize,
    /// Finalists re-timed after settling (a failed one counts in `time_failed`).
    pub finals: usize,
    /// Keys whose finals were kept from a record of another template version: every
    /// finalist there has the same machine code and finals of the same policy.
    pub finals_carried: usize,
    /// Keys whose finals were due but left as they were, a finalist not being among the
    /// kernels of this run; the next run that builds it takes them.
    pub finals_unbuilt: usize,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        self.checked += o.checked;
        self.check_failed += o.check_failed;
        self.timed += o.timed;
        self.time_failed += o.time_failed;
        self.skipped += o.skipped;
        self.carried += o.carried;
        self.finals += o.finals;
        self.finals_carried += o.finals_carried;
        self.finals_unbuilt += o.finals_unbuilt;
    }
}

/// Where the records go and what they are stamped with.
pub struct Session<'a> {
    pub db: &'a TuningDb,
    pub device: Device,
    /// The current hash of each template.
    pub template_hash: &'a dyn Fn(Template) -> String,
    /// No new measurement starts after this.
    pub deadline: Option<Instant>,
    /// Take every key's finals again, side by side in this run, even where they are
    /// complete (`tune --retake-finals`: after a GPU, driver or clock change).
    pub retake_finals: bool,
}
