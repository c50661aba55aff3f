//! The tuner: every built candidate of a spec is checked against the f32 reference,
//! then timed on one problem per sequence-length bucket; every outcome, and so the
//! winner per (spec, bucket, device), goes into the tuning database as it is measured.
//!
//! The loop here is resumable by construction: a record is written after each
//! candidate, and a candidate whose kernel already has an outcome in the record is not
//! measured again, so a killed tune loses at most the candidate in flight. A record of
//! another template version is stale and measured afresh (the whole record is replaced,
//! never mixed). Measuring is behind [`Measurer`]: [`GpuMeasurer`] on a GPU, a scripted
//! one in the tests of this loop.
//!
//! Screening times each candidate once without settling time; then, per key, the
//! finals re-time [`FINALISTS`] of them (the default and the fastest screened) after
//! [`SETTLE_MS`] of back-to-back runs, as the benchmark does, and the winner is chosen
//! by those settled times. Finals resume like screening: a finalist with a settled time
//! is not timed again (one whose finals timing failed is tried again on the next run).
//!
//! The parts, one job each:
//!
//! - `policy`: how a candidate is timed and checked (the problem per bucket, the
//!   timing budget, the finals' settling and passes), as recorded with every record;
//! - `scope`: which keys a run covers (buckets, shards) and how long it may take;
//! - `session`: where a spec's records go ([`Session`]) and what its run did ([`Counts`]);
//! - `spec`: the loop over one spec's keys, screening then finals ([`tune_spec`]);
//! - `resume`: the records as a run finds them, current, stale or missing, and the
//!   timings carried over from another template version;
//! - `finals`: which candidates are a key's finalists and whether their finals stand;
//! - `winners`: the closing table, each key's winner against its default;
//! - `gpu`: [`GpuMeasurer`], the [`Measurer`] that checks and times on a GPU;
//! - `pipeline`: a whole run ([`run`]): the specs compiled on a background thread while
//!   the GPU tunes the spec before, and the run's summary.

mod finals;
mod gpu;
mod pipeline;
mod policy;
mod resume;
mod scope;
mod session;
mod spec;
mod winners;

#[cfg(test)]
mod tests;

use crate::compile::{BuildSummary, BuiltKernel, Nvrtc};
use crate::db::{DbError, Outcome, Record};
use crate::measure::gpu::GpuError;
use crate::space::Template;
use fa4_spec::{Bucket, KernelSpec};

pub use gpu::GpuMeasurer;
pub use pipeline::{run, RunError, TimingSummary, TuneRequest, TuneSummary};
pub use policy::{
    bucket_cell, ragged_cell, timing_policy, CHECK_CASES, FINALISTS, FINAL_PASSES, HIDDEN,
    KEY_WARMUP_MS, PAGE_SIZE, SETTLE_MS, SOFTCAP, TIME_BUDGET_MS, TOKENS,
};
pub use resume::configs_to_time;
pub use scope::{
    default_features, default_masks, parse_buckets, parse_budget, parse_shard, shard_keys,
    stale_outside, with_ragged,
};
pub use session::{Counts, Session};
pub use spec::tune_spec;
pub use winners::{winners, WinnerRow};

/// A tuning key without the device (the device is the one measuring).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub template: Template,
    pub spec: KernelSpec,
    pub bucket: Bucket,
}

impl Key {
    /// The key `record` is measured under.
    pub fn of(record: &Record) -> Key {
        Key {
            template: record.template,
            spec: record.spec,
            bucket: record.bucket,
        }
    }
}

/// A candidate ready to measure: what the build recorded, its cubin, and its varlen
/// build's where it has one (ragged buckets and the varlen checks launch it, as the
/// runtime does).
pub struct TuneKernel {
    pub built: BuiltKernel,
    pub cubin: Vec<u8>,
    pub varlen_cubin: Option<Vec<u8>>,
}

/// One timing: the median and the spread of the runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub ms: f64,
    /// (slowest - fastest) / median.
    pub spread: f64,
    pub tflops: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Db(#[from] DbError),
    /// The GPU failed in a way that ends the run (the context may be lost); what was
    /// measured before is in the database.
    #[error("{0}; the outcomes measured so far are kept in the tuning database")]
    Gpu(#[from] GpuError),
}

/// Checks and times kernels. `Ok(Err(why))` is the candidate's failure (kept as data);
/// `Err` ends the tune.
pub trait Measurer {
    fn check(&mut self, kernel: &TuneKernel) -> Result<Result<(), String>, TuneError>;
    /// Times `kernel` on `bucket`'s problem after running it back to back for
    /// `settle_ms` (0 when screening, [`SETTLE_MS`] in the finals, [`KEY_WARMUP_MS`] for
    /// a key's first finalist), on the `placement`-th buffer set (0 when screening, the
    /// pass in the finals).
    fn time(
        &mut self,
        kernel: &TuneKernel,
        bucket: Bucket,
        settle_ms: f64,
        placement: usize,
    ) -> Result<Result<Timing, String>, TuneError>;
}

/// What a tune tells whoever watches it: the stages of a [`run`], then every check and
/// measurement of [`tune_spec`] (which calls only those). Every method does nothing
/// unless implemented.
pub trait Progress {
    /// NVRTC was loaded to build the run's kernels (cubins meant to ship are built with
    /// 13.0.x).
    fn nvrtc_loaded(&self, _nvrtc: &Nvrtc) {}
    /// `keys` outside the run have records of another template version
    /// ([`stale_outside`]): `build-cache` and `bench --db` serve their defaults until they
    /// are tuned too. Told before the GPU time goes in.
    fn stale_outside(&self, _keys: &[Key]) {}
    /// One spec's candidates were built (compiled now or found built), all of them
    /// sound; with a GPU, its keys are tuned next.
    fn built(&self, _template: Template, _spec: &KernelSpec, _summary: &BuildSummary) {}
    /// One spec's keys were tuned (or stopped by the budget): what that did.
    fn tuned(&self, _template: Template, _spec: &KernelSpec, _counts: &Counts) {}
    /// `planned` more (candidate, bucket) measurements are coming, finals included (an
    /// upper bound: [`FINALISTS`] per key whose finals are not done).
    fn planned(&self, _count: usize) {}
    /// A candidate was checked against the reference: `passed` or not.
    fn checked(&self, _kernel: &TuneKernel, _passed: bool) {}
    /// One measurement ended; `best` is the key's winner so far (config tag, ms).
    fn measured(
        &self,
        _key: &Key,
        _kernel: &TuneKernel,
        _outcome: &Outcome,
        _best: Option<(String, f64)>,
    ) {
    }
    /// A finalist of `key` was re-timed after settling: its settled ms, None if the
    /// timing failed.
    fn finalist(&self, _key: &Key, _kernel: &TuneKernel, _settled_ms: Option<f64>) {}
    /// `key`'s finals were kept from the last template version: `planned` finals
    /// timings announced for it will not come.
    fn finals_kept(&self, _key: &Key, _planned: usize) {}
}

/// A progress watcher that watches nothing.
pub struct Silent;
impl Progress for Silent {}
