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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fa4_spec::{Features, KernelSpec, MaskKind, TileConfig};

use crate::compile::BuiltKernel;
use crate::db::{Candidate, DbError, Device, Outcome, Record, TimingPolicy, TuningDb};
use crate::measure::bench::{self, Cell, L2Flush};
use crate::measure::gpu::{FwdKernel, Gpu, GpuError};
use crate::measure::problems::{attention_flops, Case, Problem};
use crate::measure::support::Support;
use crate::measure::verify;
use crate::space::Template;
use fa4_spec::Bucket;

/// The problem timed for a bucket: the FlashAttention-3 paper's shapes (16384 tokens,
/// hidden 2048), so `batch = tokens / seqlen` and `heads = hidden / head_dim`.
pub const TOKENS: i32 = 16384;
pub const HIDDEN: i32 = 2048;
/// Softcap kernels are timed with Gemma-2's cap; paged kernels with pages of 16 keys.
/// (Local masks: see [`bucket_cell`].)
pub const SOFTCAP: f32 = 50.0;
pub const PAGE_SIZE: i32 = 16;
/// Kernel time spent per (candidate, bucket): runs are timed one by one after an L2
/// flush until this is spent, at least 10 and at most 200 of them.
pub const TIME_BUDGET_MS: f64 = 25.0;
/// Candidates per key re-timed in the finals, the default included. Screening times
/// with two warm-up runs and no settling time, so its readings run 0 to 13% above the
/// benchmark's (which settles the clocks first) and can rank two close candidates the
/// wrong way round; settling every candidate of every key would cost too much device
/// time, so only the few that can win are re-timed.
pub const FINALISTS: usize = 4;
/// How long a finalist runs back to back before its finals timing, so the GPU clocks
/// reach their sustained level: the benchmark's warm-up (`bench::time_kernel`, as
/// triton's do_bench does for the peers).
pub const SETTLE_MS: f64 = 50.0;
/// How long the first finalist timed for a key runs back to back instead: it follows
/// the set-up of the key's problem, during which the GPU idled, and 50 ms did not bring
/// the clocks back down to where the next finalists were timed (the default, always
/// first, read 1% faster against its screening than the others did, and d128 at 1024
/// keys kept it on a 0.5% lead over a tile that runs 11% faster held at the power cap:
/// `bench/NOTES.md`).
pub const KEY_WARMUP_MS: f64 = 250.0;
/// Finals passes of every key, each on its own buffer set (pass p on placement p, behind
/// a spacer of its own size: [`GpuMeasurer`]). Each pass times every finalist once, in
/// an order rotated by one per pass; the mean of a finalist's passes ranks it.
/// Passes first came to short keys, where one settled timing decided between tiles
/// within 5% of each other on a reading that another call put 10% off (d256 at 512
/// keys: `bench/NOTES.md`). They spread over placements since picks were found 5 to 12%
/// slower than the default on one buffer set of three to eight and 1 to 5% faster on
/// the others, the same set in two passes (a persistent tile at d128 causal 4k and 32k,
/// a non-persistent one at d64 causal 16k; `bench --placements`): a pick timed on one
/// set can win or lose by where its buffers landed, and an engine's buffers land
/// anywhere. The mean, not the median: the median let a tile faster on two sets of three
/// but slower on average win (d64 at 1024 keys), and a slow set is what that tile costs
/// an engine whose buffers land there (`bench/NOTES.md`).
pub const FINAL_PASSES: usize = 3;
/// The standard verify cases every candidate passes before it is timed: odd lengths,
/// more keys than queries, GQA, ragged varlen batches with empty sequences, prefixes,
/// and a grid whose unmasked persistent kernels split their last tiles by keys.
pub const CHECK_CASES: &[&str] = &[
    "s17",
    "q77_k513",
    "gqa8to2_s257",
    "varlen_ragged",
    "varlen_prefix",
    "split_q2200_k4100",
];

/// How the tuner times, as recorded with every record.
pub fn timing_policy() -> TimingPolicy {
    TimingPolicy {
        warmup: 2,
        runs: 10,
        l2_flush: true,
        budget_ms: TIME_BUDGET_MS,
        finalists: FINALISTS as u32,
        settle_ms: SETTLE_MS,
        key_warmup_ms: KEY_WARMUP_MS,
        final_passes: FINAL_PASSES as u32,
        final_placements: FINAL_PASSES as u32,
        short_key_passes: 0,
        short_key_ms: 0.0,
    }
}

/// The problem a bucket is timed on. A local mask's bucket is the width of its window
/// ([`Bucket::of_call`]): window `(bucket, 0)` over sequences four times as long, at
/// least 4096 (gpt-oss's prompts in `bench --layers`), so nearly every tile sees the
/// whole window.
pub fn bucket_cell(spec: &KernelSpec, bucket: Bucket) -> Cell {
    let (seqlen, window) = if spec.mask == MaskKind::Local {
        let width = bucket.seqlen as i32;
        ((4 * width).clamp(4096, Bucket::MAX as i32), (width, 0))
    } else {
        (bucket.seqlen as i32, (-1, -1))
    };
    let heads = (HIDDEN / spec.head_dim as i32).max(1);
    Cell {
        head_dim: spec.head_dim,
        head_dim_v: spec.head_dim_v,
        seqlen,
        batch: (TOKENS / seqlen).max(1),
        heads,
        heads_kv: heads,
        varlen: false,
        layer: None,
        features: Some(spec.features),
        mask: spec.mask,
        window,
        softcap: SOFTCAP,
    }
}

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

/// The keys measured on `device` (same GPU name and SM count) whose records name another
/// template version than `current` and that `run` does not cover: after a template edit,
/// a tune of some specs leaves the others' records stale, and `build-cache` and `bench
/// --db` serve those keys' defaults until they are tuned too. Sorted, without repeats.
pub fn stale_outside(
    records: &[Record],
    device: &Device,
    current: &dyn Fn(Template) -> String,
    run: &[Key],
) -> Vec<Key> {
    let mut out: Vec<Key> = records
        .iter()
        .filter(|r| r.device.name == device.name && r.device.sm_count == device.sm_count)
        .filter(|r| r.is_stale(current))
        .map(Key::of)
        .filter(|k| !run.contains(k))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Every key of `specs` x `buckets`, sorted, and the `index`-th of `count` shards of
/// them (round robin, so every shard gets short and long buckets).
pub fn shard_keys(
    specs: &[(Template, KernelSpec)],
    buckets: &[Bucket],
    index: usize,
    count: usize,
) -> Vec<Key> {
    let mut keys: Vec<Key> = specs
        .iter()
        .flat_map(|&(template, spec)| {
            buckets.iter().map(move |&bucket| Key {
                template,
                spec,
                bucket,
            })
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .enumerate()
        .filter(|(i, _)| i % count.max(1) == index)
        .map(|(_, k)| k)
        .collect()
}

/// Parses `--shard i/n` (0 <= i < n).
pub fn parse_shard(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--shard {text}: expected i/n with 0 <= i < n, e.g. 0/4");
    let (i, n) = text.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// Parses a wall-time budget: `90s`, `10m`, `1h`, or plain seconds.
pub fn parse_budget(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => t.split_at(i),
        None => (t, "s"),
    };
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
        .ok_or_else(|| {
            format!("--budget {text}: expected a positive time such as 90s, 10m or 1h")
        })?;
    let seconds = match unit {
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("--budget {text}: the unit is s, m or h")),
    };
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses `--buckets`: sequence lengths that are bucket bounds (powers of two from 128
/// to 32768).
pub fn parse_buckets(values: &[u32]) -> Result<Vec<Bucket>, String> {
    if values.is_empty() {
        return Ok(Bucket::all().collect());
    }
    let mut out = Vec::new();
    for &v in values {
        let b = Bucket::of(v);
        if b.seqlen != v {
            let all: Vec<String> = Bucket::all().map(|b| b.seqlen.to_string()).collect();
            return Err(format!(
                "--buckets {v} is not a bucket; buckets are {}",
                all.join(", ")
            ));
        }
        out.push(b);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A candidate ready to measure: what the build recorded, and its cubin.
pub struct TuneKernel {
    pub built: BuiltKernel,
    pub cubin: Vec<u8>,
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

/// What the loop tells whoever watches it.
pub trait Progress {
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

/// Tunes the `keys` of one spec with its built `kernels` (the heuristic default first,
/// so it is candidate 0 of every new record): screens every pending (candidate, key)
/// pair, then runs the finals of every key whose finalists are not all settled.
/// Returns the counts and whether the deadline stopped it early.
pub fn tune_spec(
    session: &Session,
    keys: &[Key],
    kernels: &[TuneKernel],
    measurer: &mut dyn Measurer,
    progress: &dyn Progress,
) -> Result<(Counts, bool), TuneError> {
    let mut counts = Counts::default();
    // The records of this spec's keys: current ones resume, stale or missing ones
    // start empty.
    let mut records: Vec<Record> = Vec::new();
    let mut carried: Vec<Vec<Candidate>> = Vec::new();
    for key in keys {
        let (record, stale) = resumed(session.db, &session.device, session.template_hash, key)?;
        records.push(record);
        carried.push(stale);
    }
    // Per record, the finals passes of the candidates whose screening was carried (by
    // kernel id): they stand where the key's finalists are all carried (below).
    let mut carried_finals: Vec<BTreeMap<String, Vec<f64>>> = vec![BTreeMap::new(); records.len()];
    let measured =
        |r: &Record, k: &TuneKernel| r.candidates.iter().any(|c| c.kernel == k.built.id.0);
    let pending: usize = kernels
        .iter()
        .map(|k| records.iter().filter(|r| !measured(r, k)).count())
        .sum();
    counts.skipped = kernels.len() * records.len() - pending;
    // Finals timings a key still takes: none where they were taken side by side in an
    // earlier run (and are not to be taken again), else every finalist's FINAL_PASSES,
    // since a key's finals are taken whole (below); keys whose finalists the screening
    // changes are planned again once it is done.
    let finals_to_take = |r: &Record| -> usize {
        if !session.retake_finals && !r.candidates.is_empty() && finals_complete(r) {
            0
        } else {
            FINALISTS.min(kernels.len().max(r.candidates.len())) * FINAL_PASSES
        }
    };
    let finals_planned: Vec<usize> = records.iter().map(finals_to_take).collect();
    progress.planned(pending + finals_planned.iter().sum::<usize>());

    for (n, kernel) in kernels.iter().enumerate() {
        // Timings carried from another template version go in at once, once the default
        // (candidate 0) has its place: the first write replaces the stale record they
        // come from, so a run stopped by its budget must not leave any behind.
        if n == 1 {
            for later in &kernels[1..] {
                carry(
                    session,
                    &mut records,
                    &carried,
                    &mut carried_finals,
                    later,
                    &mut counts,
                    progress,
                )?;
            }
        }
        let todo = carry(
            session,
            &mut records,
            &carried,
            &mut carried_finals,
            kernel,
            &mut counts,
            progress,
        )?;
        if todo.is_empty() {
            continue;
        }
        if session.deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok((counts, true));
        }
        counts.checked += 1;
        let checked = measurer.check(kernel)?;
        if checked.is_err() {
            counts.check_failed += 1;
        }
        progress.checked(kernel, checked.is_ok());
        for i in todo {
            if session.deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok((counts, true));
            }
            let outcome = match &checked {
                Err(why) => Outcome::Failed {
                    error: format!("wrong output: {why}"),
                },
                Ok(()) => match measurer.time(kernel, records[i].bucket, 0.0, 0)? {
                    Ok(t) => {
                        counts.timed += 1;
                        Outcome::Measured {
                            ms: t.ms,
                            spread: t.spread,
                            tflops: t.tflops,
                            registers: kernel.built.resources.registers,
                            settled_ms: None,
                            settled_passes: Vec::new(),
                            code_hash: kernel.built.code_hash.clone(),
                        }
                    }
                    Err(why) => {
                        counts.time_failed += 1;
                        Outcome::Failed { error: why }
                    }
                },
            };
            add_screened(session, &mut records[i], kernel, outcome, progress)?;
        }
    }

    // Keys whose finals stand (every finalist carried with its finals) take none; the
    // others may have more finalists than planned before their screening was known.
    let standing: Vec<bool> = records
        .iter()
        .zip(&carried_finals)
        .map(|(r, kept)| !session.retake_finals && finals_stand(r, kept))
        .collect();
    progress.planned(
        records
            .iter()
            .zip(&finals_planned)
            .zip(&standing)
            .filter(|(_, &stands)| !stands)
            .map(|((r, &planned), _)| finals_to_take(r).saturating_sub(planned))
            .sum(),
    );

    // The finals: every key's finalists re-timed after settling, in FINAL_PASSES passes,
    // each on its own buffer set and written as it is taken, like the screening above.
    // They are compared side by side: a key whose finalists are not all settled (one new
    // to the key, or a run stopped among its finals) takes every finalist's passes again
    // in this run, and candidates that are no longer finalists lose theirs, so no pass
    // taken on another day or GPU (1 to 3% apart between two H200s: bench/NOTES.md) meets
    // one of this run. One whose timing fails sits out the rest of this run.
    for (n, record) in records.iter_mut().enumerate() {
        let key = Key::of(record);
        let chosen = finalists(record);
        if standing[n] {
            let kept = &carried_finals[n];
            for &i in &chosen {
                for &ms in kept[&record.candidates[i].kernel].iter().take(FINAL_PASSES) {
                    record.candidates[i].push_settled_pass(ms);
                }
            }
            record.date = crate::timestamp::utc_now();
            session.db.put(record)?;
            counts.finals_carried += 1;
            progress.finals_kept(&key, finals_planned[n]);
            continue;
        }
        if !session.retake_finals && finals_complete(record) {
            continue; // taken side by side in an earlier run
        }
        // Finals are taken whole or not at all: clearing passes that this run cannot take
        // again (a finalist not built) would lose them and leave the rest to decide.
        let Some(finalist_kernels) = chosen
            .iter()
            .map(|&i| {
                kernels
                    .iter()
                    .find(|k| k.built.id.0 == record.candidates[i].kernel)
            })
            .collect::<Option<Vec<&TuneKernel>>>()
        else {
            counts.finals_unbuilt += 1;
            continue;
        };
        record
            .candidates
            .iter_mut()
            .for_each(|c| c.set_settled_ms(None));
        let mut warm = false; // this key's first finals timing of the run warms up longer
        let mut failed: Vec<usize> = Vec::new();
        for pass in 0..FINAL_PASSES {
            for j in 0..chosen.len() {
                let (i, kernel) = (
                    chosen[(j + pass) % chosen.len()],
                    finalist_kernels[(j + pass) % chosen.len()],
                );
                if failed.contains(&i) {
                    continue;
                }
                if session.deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok((counts, true));
                }
                let settle_ms = if warm { SETTLE_MS } else { KEY_WARMUP_MS };
                warm = true;
                let settled = match measurer.time(kernel, record.bucket, settle_ms, pass)? {
                    Ok(t) => {
                        counts.finals += 1;
                        record.candidates[i].push_settled_pass(t.ms);
                        record.candidates[i].settled_ms()
                    }
                    Err(_) => {
                        counts.time_failed += 1;
                        failed.push(i);
                        None
                    }
                };
                let policy = timing_policy();
                record.timing.finalists = policy.finalists;
                record.timing.settle_ms = policy.settle_ms;
                record.timing.key_warmup_ms = policy.key_warmup_ms;
                record.timing.final_passes = policy.final_passes;
                record.timing.final_placements = policy.final_placements;
                record.timing.short_key_passes = policy.short_key_passes;
                record.timing.short_key_ms = policy.short_key_ms;
                record.date = crate::timestamp::utc_now();
                session.db.put(record)?;
                progress.finalist(&key, kernel, settled);
            }
        }
    }
    Ok((counts, false))
}

/// Whether `record`'s finals stand as they were taken under the last template version:
/// every finalist is a carried kernel (same machine code) whose finals of the same timing
/// policy are in `kept` (passes by kernel id; carried candidates enter the record without
/// them, and no finals are taken before this is asked). A template edit
/// that left the finalists' machine code alone leaves their side-by-side comparison
/// valid; a new or changed kernel that screened among them has them all taken again.
fn finals_stand(record: &Record, kept: &BTreeMap<String, Vec<f64>>) -> bool {
    let chosen = finalists(record);
    !chosen.is_empty()
        && chosen.iter().all(|&i| {
            kept.get(&record.candidates[i].kernel)
                .is_some_and(|p| p.len() >= FINAL_PASSES)
        })
}

/// `key`'s record as a tune resumes it: the stored one if it was measured with the
/// current template (finals taken before the key warm-up, or all on one buffer set,
/// dropped: they are taken again; the settled times go in memory only, the store keeps them until the first new
/// one is written), else an empty one.
fn current_record(
    db: &TuningDb,
    device: &Device,
    template_hash: &dyn Fn(Template) -> String,
    key: &Key,
) -> Result<Record, TuneError> {
    Ok(resumed(db, device, template_hash, key)?.0)
}

/// [`current_record`], and the screening timings of a stored record of another template
/// version that name the machine code they timed (for [`carried_outcome`]; none where the
/// stored record is current or missing).
fn resumed(
    db: &TuningDb,
    device: &Device,
    template_hash: &dyn Fn(Template) -> String,
    key: &Key,
) -> Result<(Record, Vec<Candidate>), TuneError> {
    let hash = template_hash(key.template);
    let stored = db.get(&crate::db::record_key(
        key.template,
        &key.spec,
        key.bucket,
        device,
    ))?;
    let fresh = || Record {
        template: key.template,
        spec: key.spec,
        bucket: key.bucket,
        device: device.clone(),
        template_hash: hash.clone(),
        timing: timing_policy(),
        date: crate::timestamp::utc_now(),
        candidates: Vec::new(),
    };
    Ok(match stored {
        Some(mut r) if r.template_hash == hash => {
            // Finals taken before the key warm-up, or all on one buffer set, are taken again.
            if r.timing.key_warmup_ms < KEY_WARMUP_MS
                || (r.timing.final_placements as usize) < FINAL_PASSES
            {
                r.candidates.iter_mut().for_each(|c| c.set_settled_ms(None));
            }
            (r, Vec::new())
        }
        Some(stale) => {
            let same_policy = stale.timing == timing_policy();
            let timed = stale
                .candidates
                .into_iter()
                .filter(|c| matches!(&c.outcome, Outcome::Measured { code_hash, .. } if !code_hash.is_empty()))
                .map(|mut c| {
                    if !same_policy {
                        c.set_settled_ms(None);
                    }
                    c
                })
                .collect();
            (fresh(), timed)
        }
        None => (fresh(), Vec::new()),
    })
}

/// Writes `kernel`'s timings carried from another template version ([`carried_outcome`])
/// into the records that lack it; returns the indices of those still to measure.
fn carry(
    session: &Session,
    records: &mut [Record],
    carried: &[Vec<Candidate>],
    carried_finals: &mut [BTreeMap<String, Vec<f64>>],
    kernel: &TuneKernel,
    counts: &mut Counts,
    progress: &dyn Progress,
) -> Result<Vec<usize>, TuneError> {
    let mut todo = Vec::new();
    for (i, record) in records.iter_mut().enumerate() {
        if record
            .candidates
            .iter()
            .any(|c| c.kernel == kernel.built.id.0)
        {
            continue;
        }
        let Some((outcome, finals)) = carried_outcome(&carried[i], kernel) else {
            todo.push(i);
            continue;
        };
        if !finals.is_empty() {
            carried_finals[i].insert(kernel.built.id.0.clone(), finals);
        }
        counts.carried += 1;
        add_screened(session, record, kernel, outcome, progress)?;
    }
    Ok(todo)
}

/// Adds `kernel`'s screening outcome to `record` and writes the record before the next
/// measurement starts (a kill loses at most that one).
fn add_screened(
    session: &Session,
    record: &mut Record,
    kernel: &TuneKernel,
    outcome: Outcome,
    progress: &dyn Progress,
) -> Result<(), TuneError> {
    record.candidates.push(Candidate {
        config: kernel.built.candidate.config.clone(),
        kernel: kernel.built.id.0.clone(),
        outcome,
    });
    record.date = crate::timestamp::utc_now();
    session.db.put(record)?;
    let best = record.winner().map(|(c, ms)| (c.config.tag(), ms));
    let outcome = &record.candidates.last().expect("just added").outcome;
    progress.measured(&Key::of(record), kernel, outcome, best);
    Ok(())
}

/// `kernel`'s screening outcome carried from `stale` (a record of another template
/// version): the timing of the same config whose machine code `kernel` repeats, without
/// its finals, which come back separately (their passes; none where the stale record's
/// finals were of another timing policy): they stand only if the key's finalists are all
/// carried, else the finalists are re-timed side by side in this run.
fn carried_outcome(stale: &[Candidate], kernel: &TuneKernel) -> Option<(Outcome, Vec<f64>)> {
    let code = &kernel.built.code_hash;
    let mut c = stale
        .iter()
        .find(|c| c.config == kernel.built.candidate.config && c.timed_code(code))?
        .clone();
    let finals = c.settled_passes();
    c.set_settled_ms(None);
    Some((c.outcome, finals))
}

/// The configs a tune of `keys` (one spec's) still has to build and time: those some
/// current record lacks, and every finalist of a key whose finals are to be taken (some
/// finalist short of its passes, or `retake_finals`); None when some key has no current
/// record (every candidate is screened there). A run that only takes finals so compiles
/// the finalists alone, not the spec's whole space.
pub fn configs_to_time(
    db: &TuningDb,
    device: &Device,
    template_hash: &dyn Fn(Template) -> String,
    keys: &[Key],
    planned: &[TileConfig],
    retake_finals: bool,
) -> Result<Option<Vec<TileConfig>>, TuneError> {
    let mut needed: Vec<TileConfig> = Vec::new();
    for key in keys {
        let record = current_record(db, device, template_hash, key)?;
        if record.candidates.is_empty() {
            return Ok(None);
        }
        let mut new_to_key = false;
        for config in planned {
            if !record.candidates.iter().any(|c| c.config == *config) {
                new_to_key = true;
                if !needed.contains(config) {
                    needed.push(config.clone());
                }
            }
        }
        // A key whose finals are to be taken times all its finalists again (tune_spec),
        // and so may a key with a candidate new to it: if that one screens among the
        // finalists, the others are timed again beside it.
        if retake_finals || new_to_key || !finals_complete(&record) {
            for i in finalists(&record) {
                let c = &record.candidates[i];
                if !needed.contains(&c.config) {
                    needed.push(c.config.clone());
                }
            }
        }
    }
    Ok(Some(needed))
}

/// Whether every finalist of `record` has its FINAL_PASSES passes.
fn finals_complete(record: &Record) -> bool {
    finalists(record)
        .iter()
        .all(|&i| record.candidates[i].settled_passes().len() >= FINAL_PASSES)
}

/// The indices of `record`'s finalists: candidate 0 (the default) if it was measured,
/// then the fastest other measured candidates by screening time, [`FINALISTS`] in all
/// (fewer when fewer were measured). Screening times do not change once measured, so a
/// resumed run picks the same finalists.
fn finalists(record: &Record) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(FINALISTS);
    if record
        .candidates
        .first()
        .and_then(Candidate::screened_ms)
        .is_some()
    {
        out.push(0);
    }
    let mut others: Vec<(usize, f64)> = record
        .candidates
        .iter()
        .enumerate()
        .skip(1)
        .filter_map(|(i, c)| c.screened_ms().map(|ms| (i, ms)))
        .collect();
    others.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let room = FINALISTS - out.len();
    out.extend(others.into_iter().take(room).map(|(i, _)| i));
    out
}

/// One line of the closing table: a key's winner against its heuristic default.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WinnerRow {
    pub spec: String,
    pub bucket: u32,
    pub default_config: String,
    /// The default's and the winner's ms in the metric the winner is chosen by: settled
    /// times once the key's finals ran (`settled`), screening times before.
    pub default_ms: Option<f64>,
    pub winner_config: Option<String>,
    pub winner_ms: Option<f64>,
    /// Whether the key's finals ran (the ms above are settled times).
    pub settled: bool,
    /// What a dispatcher serves: the winner, or the default when the winner is within
    /// [`crate::db::MIN_GAIN`] of it ([`crate::db::MIN_GAIN_SCREENED`] before the finals).
    pub served_config: Option<String>,
    /// default_ms / winner_ms.
    pub speedup: Option<f64>,
    pub candidates: usize,
    pub failed: usize,
}

/// The closing table for `keys` on `device`, from the database.
pub fn winners(
    db: &TuningDb,
    device: &Device,
    keys: &[Key],
    template_hash: &dyn Fn(Template) -> String,
) -> Result<Vec<WinnerRow>, DbError> {
    let mut rows = Vec::new();
    for key in keys {
        let Some(r) = db.get(&crate::db::record_key(
            key.template,
            &key.spec,
            key.bucket,
            device,
        ))?
        else {
            continue;
        };
        if r.template_hash != template_hash(key.template) {
            continue;
        }
        let default = r.candidates.first();
        let default_ms = r.default_ms();
        let winner = r.winner();
        rows.push(WinnerRow {
            spec: key.spec.tag(),
            bucket: key.bucket.seqlen,
            default_config: default.map_or("-".into(), |c| c.config.tag()),
            default_ms,
            winner_config: winner.map(|(c, _)| c.config.tag()),
            winner_ms: winner.map(|(_, ms)| ms),
            settled: r.finals_done(),
            served_config: r.choice().map(|c| c.config.tag()),
            speedup: default_ms.zip(winner.map(|w| w.1)).map(|(d, w)| d / w),
            candidates: r.candidates.len(),
            failed: r
                .candidates
                .iter()
                .filter(|c| matches!(c.outcome, Outcome::Failed { .. }))
                .count(),
        });
    }
    Ok(rows)
}

// ---- measuring on the GPU -------------------------------------------------------------

/// Checks with the standard verify cases and times with CUDA events on one GPU. The
/// problems of the spec in hand are kept per bucket; the kernel in hand stays loaded.
/// A timed problem and the spacer allocated before it ([`bench::placement_spacer`]).
struct Placed {
    case: Case,
    problem: Problem,
    _spacer: Option<cudarc::driver::CudaSlice<u8>>,
}

pub struct GpuMeasurer<'g> {
    gpu: &'g Gpu,
    support: &'g Support,
    flush: L2Flush,
    cases: Vec<Case>,
    /// Per (bucket, placement): the problem, behind its spacer (kept while it is).
    problems: BTreeMap<(Bucket, usize), Placed>,
    problems_spec: Option<KernelSpec>,
    loaded: Option<(String, FwdKernel)>,
    /// Time spent in GPU work (checking, timing, making problems).
    pub busy: Duration,
}

impl<'g> GpuMeasurer<'g> {
    pub fn new(gpu: &'g Gpu, support: &'g Support) -> Result<Self, GpuError> {
        let cases = verify::standard_cases()
            .into_iter()
            .filter(|c| CHECK_CASES.contains(&c.name.as_str()))
            .collect();
        Ok(GpuMeasurer {
            gpu,
            support,
            flush: L2Flush::new(gpu)?,
            cases,
            problems: BTreeMap::new(),
            problems_spec: None,
            loaded: None,
            busy: Duration::ZERO,
        })
    }

    fn kernel(&mut self, k: &TuneKernel) -> Result<(), GpuError> {
        if self
            .loaded
            .as_ref()
            .is_none_or(|(id, _)| *id != k.built.id.0)
        {
            self.loaded = None; // unload the previous module first
            let f = FwdKernel::load(
                self.gpu,
                &k.cubin,
                k.built.candidate.spec,
                k.built.footprint,
            )?;
            self.loaded = Some((k.built.id.0.clone(), f));
        }
        Ok(())
    }
}

impl Measurer for GpuMeasurer<'_> {
    fn check(&mut self, k: &TuneKernel) -> Result<Result<(), String>, TuneError> {
        let started = Instant::now();
        self.kernel(k)?;
        let kernel = &self.loaded.as_ref().expect("loaded").1;
        let mut verdict = Ok(());
        for case in &self.cases {
            let seed = fa4_spec::fnv1a64(format!("tune/{}/{}", k.built.id.0, case.name).as_bytes());
            let r = verify::run_case(self.gpu, self.support, kernel, &k.built, case, seed)?;
            if !r.passed {
                verdict = Err(format!("{}: {}", case.name, r.failure.unwrap_or_default()));
                break;
            }
        }
        self.busy += started.elapsed();
        Ok(verdict)
    }

    fn time(
        &mut self,
        k: &TuneKernel,
        bucket: Bucket,
        settle_ms: f64,
        placement: usize,
    ) -> Result<Result<Timing, String>, TuneError> {
        let started = Instant::now();
        let spec = k.built.candidate.spec;
        if self.problems_spec != Some(spec) {
            self.problems.clear();
            self.problems_spec = Some(spec);
        }
        if !self.problems.contains_key(&(bucket, placement)) {
            let case = Case {
                page_size: PAGE_SIZE,
                ..bucket_cell(&spec, bucket).case()
            };
            let spacer = bench::placement_spacer(self.gpu, placement)?;
            let problem = Problem::new(self.gpu, self.support, &spec, &case, 0x7e57)?;
            self.problems.insert(
                (bucket, placement),
                Placed {
                    case,
                    problem,
                    _spacer: spacer,
                },
            );
        }
        self.kernel(k)?;
        let kernel = &self.loaded.as_ref().expect("loaded").1;
        let Placed { case, problem, .. } = &self.problems[&(bucket, placement)];
        let times = bench::time_kernel(
            self.gpu,
            kernel,
            &problem.params,
            problem.split,
            &mut self.flush,
            TIME_BUDGET_MS,
            settle_ms, // the recorded policy (timing_policy): 0 screening, else the finals'
        )?;
        let ms = times[times.len() / 2];
        let spread = (times[times.len() - 1] - times[0]) / ms;
        let tflops = attention_flops(&spec, case) / (ms * 1e-3) / 1e12;
        self.busy += started.elapsed();
        Ok(Ok(Timing { ms, spread, tflops }))
    }
}

/// The specs `tune` covers for a head dim when not told otherwise: both dtypes, causal
/// and not, no features.
pub fn default_masks() -> Vec<MaskKind> {
    vec![MaskKind::None, MaskKind::Causal]
}

/// Features tuned when not told otherwise.
pub fn default_features() -> Vec<Features> {
    vec![Features::default()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::resources::Resources;
    use crate::render::KernelId;
    use fa4_spec::{Arch, Dtype};
    use std::cell::Cell as Counter;
    use std::io::{BufRead, Write};

    fn spec() -> KernelSpec {
        KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal)
    }

    /// `n` kernels of real candidates of `spec()` (the default first), as a build
    /// would hand them over; no cubins, the scripted measurer needs none.
    fn kernels(n: usize) -> Vec<TuneKernel> {
        let mut planned = crate::space::plan(Template::Portable, &spec());
        planned.sort_by_key(|p| !p.is_default);
        planned
            .into_iter()
            .filter_map(|p| p.verdict.clone().ok().map(|fp| (p, fp)))
            .take(n)
            .map(|(p, footprint)| {
                let tag = p.candidate.config.tag();
                TuneKernel {
                    built: BuiltKernel {
                        id: KernelId(format!("k_{tag}")),
                        is_default: p.is_default,
                        candidate: p.candidate,
                        template_hash: "h1".into(),
                        footprint,
                        resources: Resources::default(),
                        source: String::new(),
                        cubin: String::new(),
                        cubin_hash: String::new(),
                        code_hash: format!("code_{}", tag),
                        nvrtc_version: "13.0".into(),
                        compile_ms: 0,
                    },
                    cubin: Vec::new(),
                }
            })
            .collect()
    }

    /// Kernel i takes 1 + i/10 ms, except kernel 2, the fastest; `wrong` fails its check.
    /// Settled (in the finals) kernel i takes its screening time times `settled[i]`
    /// (1 when not given). `timings` counts screening timings, `finals` the kernels
    /// timed in the finals, in order.
    struct Scripted {
        wrong: Option<usize>,
        delay: Duration,
        checks: Counter<usize>,
        timings: Counter<usize>,
        ids: Vec<String>,
        settled: BTreeMap<usize, f64>,
        /// Screening times (at 1024 tokens) other than the above, by kernel.
        screened: BTreeMap<usize, f64>,
        finals: std::cell::RefCell<Vec<usize>>,
        /// The buffer set of each finals timing, in order (screening asserts set 0).
        placements: std::cell::RefCell<Vec<usize>>,
        /// Whether each finals timing (in order) had the key's warm-up.
        warmups: std::cell::RefCell<Vec<bool>>,
        /// Every finals timing sleeps until then (past a deadline).
        finals_until: Option<Instant>,
        /// The finals timing with this index (0-based) ends the run with a GPU error.
        finals_crash: Option<usize>,
        /// The finals timing of this kernel fails (kept as data).
        finals_fail: Option<usize>,
        /// (kernel, its n-th finals timing of the run): a factor on that one reading.
        outliers: BTreeMap<(usize, usize), f64>,
    }

    impl Scripted {
        fn new(kernels: &[TuneKernel], wrong: Option<usize>, delay: Duration) -> Self {
            Scripted {
                wrong,
                delay,
                checks: Counter::new(0),
                timings: Counter::new(0),
                ids: kernels.iter().map(|k| k.built.id.0.clone()).collect(),
                settled: BTreeMap::new(),
                screened: BTreeMap::new(),
                finals: Default::default(),
                placements: Default::default(),
                warmups: Default::default(),
                finals_until: None,
                finals_crash: None,
                finals_fail: None,
                outliers: BTreeMap::new(),
            }
        }
        fn finals(&self) -> usize {
            self.finals.borrow().len()
        }
        fn index(&self, k: &TuneKernel) -> usize {
            self.ids.iter().position(|id| *id == k.built.id.0).unwrap()
        }
    }

    impl Measurer for Scripted {
        fn check(&mut self, k: &TuneKernel) -> Result<Result<(), String>, TuneError> {
            self.checks.set(self.checks.get() + 1);
            Ok(if Some(self.index(k)) == self.wrong {
                Err("O rel. L2 0.5 above 4e-3".into())
            } else {
                Ok(())
            })
        }
        fn time(
            &mut self,
            k: &TuneKernel,
            bucket: Bucket,
            settle_ms: f64,
            placement: usize,
        ) -> Result<Result<Timing, String>, TuneError> {
            std::thread::sleep(self.delay);
            let i = self.index(k);
            let base = match self.screened.get(&i) {
                Some(&ms) => ms,
                None if i == 2 => 0.5,
                None => 1.0 + i as f64 / 10.0,
            };
            let mut ms = base * bucket.seqlen as f64 / 1024.0;
            if settle_ms > 0.0 {
                assert!(
                    settle_ms == SETTLE_MS || settle_ms == KEY_WARMUP_MS,
                    "{settle_ms}"
                );
                self.warmups.borrow_mut().push(settle_ms == KEY_WARMUP_MS);
                if self.finals_crash == Some(self.finals()) {
                    return Err(TuneError::Gpu(GpuError::Driver {
                        call: "cuLaunchKernel",
                        message: "CUDA_ERROR_LAUNCH_FAILED".into(),
                    }));
                }
                if let Some(t) = self.finals_until {
                    std::thread::sleep(t.saturating_duration_since(Instant::now()));
                }
                let nth = self.finals.borrow().iter().filter(|&&k| k == i).count();
                self.finals.borrow_mut().push(i);
                self.placements.borrow_mut().push(placement);
                if self.finals_fail == Some(i) {
                    return Ok(Err("launch timed out".into()));
                }
                ms *= self.settled.get(&i).copied().unwrap_or(1.0);
                ms *= self.outliers.get(&(i, nth)).copied().unwrap_or(1.0);
            } else {
                assert_eq!(placement, 0, "screening times on the first buffer set");
                self.timings.set(self.timings.get() + 1);
            }
            Ok(Ok(Timing {
                ms,
                spread: 0.01,
                tflops: 1.0 / ms,
            }))
        }
    }

    fn device() -> Device {
        Device {
            name: "Test GPU".into(),
            sm_count: 8,
            driver: "13.0".into(),
            nvrtc: "13.0".into(),
        }
    }

    /// Finals timings of a whole tune of `keys(buckets)` with every finalist right.
    fn finals_for(buckets: &[u32]) -> usize {
        buckets.len() * FINALISTS * FINAL_PASSES
    }

    fn keys(buckets: &[u32]) -> Vec<Key> {
        let buckets: Vec<Bucket> = buckets.iter().map(|&b| Bucket::of(b)).collect();
        shard_keys(&[(Template::Portable, spec())], &buckets, 0, 1)
    }

    fn run(
        db: &TuningDb,
        hash: &str,
        keys: &[Key],
        ks: &[TuneKernel],
        m: &mut Scripted,
        progress: &dyn Progress,
    ) -> (Counts, bool) {
        let hash = hash.to_string();
        let current = move |_: Template| hash.clone();
        let session = Session {
            db,
            device: device(),
            template_hash: &current,
            deadline: None,
            retake_finals: false,
        };
        tune_spec(&session, keys, ks, m, progress).unwrap()
    }

    #[test]
    fn every_candidate_is_kept_and_the_fastest_correct_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let ks = kernels(5);
        let keys = keys(&[512, 4096]);
        // Kernel 2 is the fastest but computes wrong output: never a winner.
        let mut m = Scripted::new(&ks, Some(2), Duration::ZERO);
        let (counts, stopped) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
        assert!(!stopped);
        assert_eq!((counts.checked, counts.check_failed), (5, 1));
        assert_eq!(m.timings.get(), 4 * 2, "the wrong kernel is not timed");
        assert_eq!(
            (m.finals(), counts.finals),
            (2 * 4 * FINAL_PASSES, 2 * 4 * FINAL_PASSES),
            "every right one is a finalist, in three passes at each key"
        );
        let records = db.records().unwrap();
        assert_eq!(records.len(), 2);
        for r in &records {
            assert_eq!(r.candidates.len(), 5);
            assert_eq!(
                r.candidates[0].kernel, ks[0].built.id.0,
                "the default is candidate 0"
            );
            assert!(
                matches!(&r.candidates[2].outcome, Outcome::Failed { error } if error.contains("wrong output"))
            );
            // Each timing names the machine code it timed.
            for (c, k) in r.candidates.iter().zip(&ks) {
                if let Outcome::Measured { code_hash, .. } = &c.outcome {
                    assert_eq!(code_hash, &k.built.code_hash);
                }
            }
            let (winner, _) = r.winner().unwrap();
            assert_eq!(
                winner.kernel, ks[0].built.id.0,
                "kernel 0 is the fastest correct one"
            );
        }
        // The closing table sets each winner against the default.
        let current = |_: Template| "h1".to_string();
        let rows = winners(&db, &device(), &keys, &current).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].speedup, Some(1.0));
        assert_eq!(rows[0].failed, 1);
        assert!(rows.iter().all(|r| r.settled));
    }

    #[test]
    fn a_second_run_measures_nothing_and_a_new_template_measures_everything() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let ks = kernels(3);
        let keys = keys(&[1024]);
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        run(&db, "h1", &keys, &ks, &mut m, &Silent);
        let mut again = Scripted::new(&ks, None, Duration::ZERO);
        let (counts, _) = run(&db, "h1", &keys, &ks, &mut again, &Silent);
        assert_eq!(m.finals(), 3 * FINAL_PASSES);
        assert_eq!(
            (
                again.checks.get(),
                again.timings.get(),
                again.finals(),
                counts.finals,
                counts.skipped
            ),
            (0, 0, 0, 0, 3),
            "nothing at all is measured again, finals included"
        );
        // Another template version that changed every kernel's code: the stale record is
        // replaced whole, not extended.
        let recoded = renamed(&ks, "h2", &[0, 1, 2]);
        let mut fresh = Scripted::new(&recoded, None, Duration::ZERO);
        let (counts, _) = run(&db, "h2", &keys, &recoded, &mut fresh, &Silent);
        assert_eq!(
            (fresh.timings.get(), fresh.finals(), counts.carried),
            (3, 3 * FINAL_PASSES, 0)
        );
        let r = &db.records().unwrap()[0];
        assert_eq!((r.template_hash.as_str(), r.candidates.len()), ("h2", 3));
    }

    /// `ks` as another template version builds them: new ids, and new machine code for
    /// the kernels at `recoded`.
    fn renamed(ks: &[TuneKernel], version: &str, recoded: &[usize]) -> Vec<TuneKernel> {
        ks.iter()
            .enumerate()
            .map(|(i, k)| {
                let mut built = k.built.clone();
                built.id = KernelId(format!("{}_{version}", built.id.0));
                if recoded.contains(&i) {
                    built.code_hash = format!("{}_{version}", built.code_hash);
                }
                TuneKernel {
                    built,
                    cubin: k.cubin.clone(),
                }
            })
            .collect()
    }

    #[test]
    fn stale_records_outside_the_run_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let ks = kernels(3);
        let all = keys(&[512, 1024, 4096]);
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        run(&db, "v1", &all, &ks, &mut m, &Silent);
        let records = db.records().unwrap();
        let v = |h: &'static str| move |_: Template| h.to_string();
        // The same template version: nothing is stale.
        assert_eq!(
            stale_outside(&records, &device(), &v("v1"), &all[..1]),
            vec![]
        );
        // A new version, a run over the first key: the other two are left stale.
        assert_eq!(
            stale_outside(&records, &device(), &v("v2"), &all[..1]),
            all[1..].to_vec()
        );
        assert_eq!(stale_outside(&records, &device(), &v("v2"), &all), vec![]);
        // Another GPU's records are not this run's business.
        let other = Device {
            name: "Other GPU".into(),
            ..device()
        };
        assert_eq!(stale_outside(&records, &other, &v("v2"), &[]), vec![]);
    }

    #[test]
    fn a_run_stopped_early_leaves_no_carried_timing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let ks = kernels(4);
        let keys = keys(&[1024, 8192]);
        run(
            &db,
            "h1",
            &keys,
            &ks,
            &mut Scripted::new(&ks, None, Duration::ZERO),
            &Silent,
        );
        // A new version changes kernel 1 only, and its first run has no time at all:
        // it measures nothing, but every timing that stands is carried before it stops.
        let next = renamed(&ks, "h2", &[1]);
        let h2 = |_: Template| "h2".to_string();
        let session = Session {
            db: &db,
            device: device(),
            template_hash: &h2,
            deadline: Some(Instant::now()),
            retake_finals: false,
        };
        let mut m = Scripted::new(&next, None, Duration::ZERO);
        let (counts, stopped) = tune_spec(&session, &keys, &next, &mut m, &Silent).unwrap();
        assert!(stopped);
        assert_eq!((counts.carried, m.timings.get()), (3 * 2, 0));
        // The next run times kernel 1 alone.
        let mut rest = Scripted::new(&next, None, Duration::ZERO);
        let (counts, _) = run(&db, "h2", &keys, &next, &mut rest, &Silent);
        assert_eq!((counts.carried, rest.timings.get()), (0, 2));
        assert!(db
            .records()
            .unwrap()
            .iter()
            .all(|r| r.candidates.len() == 4));
    }

    #[test]
    fn a_new_template_keeps_the_screening_of_unchanged_machine_code() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let ks = kernels(4);
        let keys = keys(&[1024, 8192]);
        let mut m = Scripted::new(&ks, Some(3), Duration::ZERO);
        run(&db, "h1", &keys, &ks, &mut m, &Silent);
        // The next version renames every kernel and changes kernel 1's code only.
        let next = renamed(&ks, "h2", &[1]);
        let mut again = Scripted::new(&next, Some(3), Duration::ZERO);
        let (counts, _) = run(&db, "h2", &keys, &next, &mut again, &Silent);
        assert_eq!(counts.carried, 2 * 2, "kernels 0 and 2 at both keys");
        assert_eq!(
            (again.checks.get(), again.timings.get()),
            (2, 2),
            "kernel 1 is checked and timed at both keys, kernel 3 (wrong before) checked again"
        );
        assert_eq!(
            again.finals(),
            2 * 3 * FINAL_PASSES,
            "the finals are taken again, side by side"
        );
        for r in db.records().unwrap() {
            assert_eq!(r.template_hash, "h2");
            // The default first; the carried timings next, then the ones taken now.
            let ids: Vec<&str> = r.candidates.iter().map(|c| c.kernel.as_str()).collect();
            let id = |i: usize| next[i].built.id.0.as_str();
            assert_eq!(ids, [id(0), id(2), id(1), id(3)]);
            // A carried timing keeps its screening time and names the code it timed.
            let old = 0.5 * r.bucket.seqlen as f64 / 1024.0; // kernel 2's, in the first run
            assert!(matches!(
                &r.candidates[1].outcome,
                Outcome::Measured { ms, code_hash, settled_ms: Some(_), .. }
                    if *ms == old && code_hash == &ks[2].built.code_hash
            ));
            assert!(matches!(&r.candidates[3].outcome, Outcome::Failed { .. }));
        }
    }

    #[test]
    fn finals_stand_where_every_finalist_keeps_its_machine_code() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        // Six kernels: the default (0) and the fastest three by screening (2, 1, 3) are
        // the finalists; 4 and 5 screen slower.
        let ks = kernels(6);
        let keys = keys(&[1024, 8192]);
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        run(&db, "h1", &keys, &ks, &mut m, &Silent);
        let settled = |db: &TuningDb| -> Vec<Vec<Option<f64>>> {
            db.records()
                .unwrap()
                .iter()
                .map(|r| r.candidates.iter().map(Candidate::settled_ms).collect())
                .collect()
        };
        let first = settled(&db);

        // A template edit that changes no machine code: nothing is timed, the finals of
        // both keys stand as they were.
        let same = renamed(&ks, "h2", &[]);
        let mut m2 = Scripted::new(&same, None, Duration::ZERO);
        let tally = Tally::default();
        let (counts, _) = run(&db, "h2", &keys, &same, &mut m2, &tally);
        assert_eq!(tally.planned.get(), tally.done.get(), "the bar ends full");
        assert_eq!((m2.checks.get(), m2.timings.get(), m2.finals()), (0, 0, 0));
        assert_eq!((counts.carried, counts.finals_carried), (6 * 2, 2));
        assert_eq!(settled(&db), first, "the same settled times, now under h2");
        assert!(db
            .records()
            .unwrap()
            .iter()
            .all(|r| r.template_hash == "h2"));

        // A changed kernel that still screens outside the finals: it alone is timed.
        let slow = renamed(&same, "h3", &[5]);
        let mut m3 = Scripted::new(&slow, None, Duration::ZERO);
        let tally = Tally::default();
        let (counts, _) = run(&db, "h3", &keys, &slow, &mut m3, &tally);
        assert_eq!(tally.planned.get(), tally.done.get());
        assert_eq!((m3.checks.get(), m3.timings.get(), m3.finals()), (1, 2, 0));
        assert_eq!(counts.finals_carried, 2);

        // A changed kernel that screens fastest joins the finals: at both keys all four
        // finalists are timed again, side by side.
        let fast = renamed(&slow, "h4", &[4]);
        let mut m4 = Scripted::new(&fast, None, Duration::ZERO);
        m4.screened.insert(4, 0.1);
        let tally = Tally::default();
        let (counts, _) = run(&db, "h4", &keys, &fast, &mut m4, &tally);
        assert_eq!(tally.planned.get(), tally.done.get());
        assert_eq!(m4.timings.get(), 2);
        assert_eq!(counts.finals_carried, 0);
        assert_eq!(m4.finals(), 2 * FINALISTS * FINAL_PASSES);
        for r in db.records().unwrap() {
            let (winner, _) = r.winner().unwrap();
            assert_eq!(winner.kernel, fast[4].built.id.0);
        }
    }

    #[test]
    fn finals_of_another_timing_policy_are_taken_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let ks = kernels(3);
        let keys = keys(&[8192]);
        run(
            &db,
            "h1",
            &keys,
            &ks,
            &mut Scripted::new(&ks, None, Duration::ZERO),
            &Silent,
        );
        // The stored record's finals were settled for another length.
        let mut r = db.records().unwrap().remove(0);
        r.timing.settle_ms *= 2.0;
        db.put(&r).unwrap();
        let same = renamed(&ks, "h2", &[]);
        let mut m = Scripted::new(&same, None, Duration::ZERO);
        let (counts, _) = run(&db, "h2", &keys, &same, &mut m, &Silent);
        assert_eq!(
            (m.timings.get(), counts.carried),
            (0, 3),
            "the screening carries"
        );
        assert_eq!(
            (m.finals(), counts.finals_carried),
            (3 * FINAL_PASSES, 0),
            "the finals do not"
        );
    }

    #[test]
    fn a_deadline_stops_between_measurements_and_the_next_run_finishes() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let ks = kernels(4);
        let keys = keys(&[256, 2048]);
        let current = |_: Template| "h1".to_string();
        let session = Session {
            db: &db,
            device: device(),
            template_hash: &current,
            deadline: Some(Instant::now() + Duration::from_millis(50)),
            retake_finals: false,
        };
        let mut m = Scripted::new(&ks, None, Duration::from_millis(20));
        let (_, stopped) = tune_spec(&session, &keys, &ks, &mut m, &Silent).unwrap();
        assert!(stopped);
        let done = m.timings.get();
        assert!((1..8).contains(&done), "{done}");
        assert_eq!(m.finals(), 0, "the finals come after the screening");
        let mut rest = Scripted::new(&ks, None, Duration::ZERO);
        run(&db, "h1", &keys, &ks, &mut rest, &Silent);
        assert_eq!(rest.timings.get(), 8 - done);
        assert_eq!(rest.finals(), finals_for(&[256, 2048]));
    }

    /// Prints a line per measurement, for the parent of `tune_child` to count.
    struct Lines;
    impl Progress for Lines {
        fn measured(&self, _: &Key, _: &TuneKernel, _: &Outcome, _: Option<(String, f64)>) {
            println!("measured");
            std::io::stdout().flush().unwrap();
        }
    }

    const CHILD_DB: &str = "FA4_GEN_TUNE_CHILD_DB";

    /// The tune `a_killed_tune_loses_at_most_the_candidate_in_flight` kills: slow
    /// measurements into the database named by the environment. Does nothing alone.
    #[test]
    #[ignore = "run by a_killed_tune_loses_at_most_the_candidate_in_flight"]
    fn tune_child() {
        let Some(path) = std::env::var_os(CHILD_DB) else {
            return;
        };
        let db = TuningDb::open(std::path::Path::new(&path)).unwrap();
        let ks = kernels(6);
        let mut m = Scripted::new(&ks, None, Duration::from_millis(40));
        run(&db, "h1", &keys(&[512, 8192]), &ks, &mut m, &Lines);
    }

    #[test]
    fn a_killed_tune_loses_at_most_the_candidate_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tune::tests::tune_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DB, &path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = 0;
        while seen < 5 {
            if lines.next().unwrap().unwrap() == "measured" {
                seen += 1;
            }
        }
        child.kill().unwrap(); // SIGKILL: no destructor, no flush runs
        child.wait().unwrap();

        let db = TuningDb::open(&path).unwrap();
        let kept: usize = db
            .records()
            .unwrap()
            .iter()
            .map(|r| r.candidates.len())
            .sum();
        assert!((5..12).contains(&kept), "{kept} outcomes survived the kill");
        let ks = kernels(6);
        let mut rest = Scripted::new(&ks, None, Duration::ZERO);
        run(&db, "h1", &keys(&[512, 8192]), &ks, &mut rest, &Silent);
        assert_eq!(
            rest.timings.get(),
            12 - kept,
            "only what the kill lost is measured again"
        );
        assert_eq!(
            rest.finals(),
            finals_for(&[512, 8192]),
            "then the finals of both keys"
        );
        for r in db.records().unwrap() {
            let ids: Vec<&str> = r.candidates.iter().map(|c| c.kernel.as_str()).collect();
            let want: Vec<&str> = ks.iter().map(|k| k.built.id.0.as_str()).collect();
            assert_eq!(ids, want, "each candidate once, the default first");
        }
    }

    /// `(kernel index, settled ms)` of each candidate of `r` with a settled time.
    fn settled_of(r: &Record, ks: &[TuneKernel]) -> Vec<(usize, f64)> {
        r.candidates
            .iter()
            .filter_map(|c| match c.outcome {
                Outcome::Measured {
                    settled_ms: Some(s),
                    ..
                } => Some((ks.iter().position(|k| k.built.id.0 == c.kernel).unwrap(), s)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_finals_can_reverse_the_screening_order() {
        let ks = kernels(5);
        let keys = keys(&[1024]);
        // Screening: k2 0.5 (fastest), k0 1.0, k1 1.1, k3 1.3, k4 1.4 ms. Settled, k2
        // is the slowest finalist (2.5) and k1 the fastest (0.88).
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        m.settled = BTreeMap::from([(2, 5.0), (1, 0.8)]);
        let (counts, stopped) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
        assert!(!stopped);
        assert_eq!(counts.finals, FINALISTS * FINAL_PASSES);
        let r = &db.records().unwrap()[0];
        assert_eq!((r.timing.finalists, r.timing.settle_ms), (4, SETTLE_MS));
        assert_eq!(
            (r.timing.final_passes, r.timing.final_placements),
            (FINAL_PASSES as u32, FINAL_PASSES as u32)
        );
        let by_screening = Record {
            candidates: r
                .candidates
                .iter()
                .map(|c| {
                    let mut c = c.clone();
                    c.set_settled_ms(None);
                    c
                })
                .collect(),
            ..r.clone()
        };
        assert_eq!(by_screening.choice().unwrap().kernel, ks[2].built.id.0);
        let (winner, ms) = r.winner().unwrap();
        assert_eq!(winner.kernel, ks[1].built.id.0, "settled, k1 wins");
        assert!((ms - 0.88).abs() < 1e-9, "{ms}");
        assert_eq!(r.choice().unwrap().kernel, ks[1].built.id.0);
        let current = |_: Template| "h1".to_string();
        let row = &winners(&db, &device(), &keys, &current).unwrap()[0];
        assert!(row.settled);
        assert_eq!(row.default_ms, Some(1.0));
        assert_eq!(row.winner_ms, Some(ms));
        assert_eq!(
            row.served_config.as_deref(),
            Some(ks[1].built.candidate.config.tag().as_str())
        );

        // Settled, the screening winner is no faster than the default: the default is
        // served. A finalist whose finals timing fails cannot win, and is counted.
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        m.settled = BTreeMap::from([(2, 2.0)]);
        m.finals_fail = Some(1);
        let (counts, _) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
        assert_eq!(
            (counts.finals, counts.time_failed),
            ((FINALISTS - 1) * FINAL_PASSES, 1),
            "a finalist whose timing fails sits out the other passes"
        );
        let r = &db.records().unwrap()[0];
        assert_eq!(settled_of(r, &ks), vec![(0, 1.0), (2, 1.0), (3, 1.3)]);
        assert_eq!(r.winner().unwrap().0.kernel, ks[0].built.id.0);
        assert_eq!(r.choice().unwrap().kernel, ks[0].built.id.0);
    }

    #[test]
    fn only_the_finalists_are_timed_again_the_default_always_among_them() {
        let ks = kernels(6);
        let keys = keys(&[512, 4096]);
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        // The default screens slowest: a finalist all the same, with the three fastest.
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        m.screened = BTreeMap::from([(0, 3.0)]);
        let (counts, _) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
        assert_eq!(counts.timed, 6 * 2);
        let all = finals_for(&[512, 4096]);
        assert_eq!((counts.finals, m.finals()), (all, all));
        let mut timed = m.finals.borrow().clone();
        timed.sort();
        let each = 2 * FINAL_PASSES;
        let by_kernel: Vec<usize> = (0..4).flat_map(|k| vec![k; each]).collect();
        assert_eq!(timed, by_kernel);
        for r in db.records().unwrap() {
            let settled: Vec<usize> = settled_of(&r, &ks).into_iter().map(|s| s.0).collect();
            assert_eq!(settled, vec![0, 1, 2, 3], "k4 and k5 are not re-timed");
        }
        // A default that fails its check is no finalist: the four fastest others are.
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let mut m = Scripted::new(&ks, Some(0), Duration::ZERO);
        run(&db, "h1", &keys, &ks, &mut m, &Silent);
        for r in db.records().unwrap() {
            let settled: Vec<usize> = settled_of(&r, &ks).into_iter().map(|s| s.0).collect();
            assert_eq!(settled, vec![1, 2, 3, 4]);
        }
    }

    #[test]
    fn a_keys_first_finalist_warms_up_longer_and_finals_without_it_are_taken_again() {
        let ks = kernels(6);
        let keys = keys(&[512, 4096]);
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        run(&db, "h1", &keys, &ks, &mut m, &Silent);
        let per_key = |passes: usize| {
            let mut w = vec![false; FINALISTS * passes];
            w[0] = true;
            w
        };
        let warmups = [per_key(FINAL_PASSES), per_key(FINAL_PASSES)].concat();
        assert_eq!(*m.warmups.borrow(), warmups);
        for r in db.records().unwrap() {
            assert_eq!(r.timing.key_warmup_ms, KEY_WARMUP_MS);
            assert_eq!(r.choice().unwrap().kernel, ks[2].built.id.0);
        }

        // Records whose finals had no key warm-up (an older fa4-gen): the finals run
        // again, nothing is screened again, and the new settled times decide.
        for mut r in db.records().unwrap() {
            r.timing.key_warmup_ms = 0.0;
            db.put(&r).unwrap();
        }
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        m.settled = BTreeMap::from([(2, 3.0)]);
        let (counts, _) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
        assert_eq!(
            (m.timings.get(), counts.finals),
            (0, finals_for(&[512, 4096]))
        );
        assert_eq!(*m.warmups.borrow(), warmups);
        for r in db.records().unwrap() {
            assert_eq!(r.timing.key_warmup_ms, KEY_WARMUP_MS);
            assert_eq!(
                r.winner().unwrap().0.kernel,
                ks[0].built.id.0,
                "k2 settles at 1.5 ms"
            );
        }
        // Then nothing is left to time.
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        let (counts, _) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
        assert_eq!((m.timings.get(), counts.finals), (0, 0));
    }

    #[test]
    fn a_key_stopped_among_its_finals_takes_them_all_again_side_by_side() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let ks = kernels(6);
        let keys = keys(&[512, 4096]);
        let current = |_: Template| "h1".to_string();
        let settled = |db: &TuningDb| -> usize {
            db.records()
                .unwrap()
                .iter()
                .flat_map(|r| r.candidates.iter().map(|c| c.settled_passes().len()))
                .sum()
        };
        // The deadline passes while the first finalist is timed: the screening is
        // whole, one finalist has one pass.
        let deadline = Instant::now() + Duration::from_millis(1500);
        let session = Session {
            db: &db,
            device: device(),
            template_hash: &current,
            deadline: Some(deadline),
            retake_finals: false,
        };
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        m.finals_until = Some(deadline);
        let (counts, stopped) = tune_spec(&session, &keys, &ks, &mut m, &Silent).unwrap();
        assert!(stopped);
        assert_eq!((m.timings.get(), m.finals(), counts.finals), (12, 1, 1));
        assert_eq!(settled(&db), 1);
        // The next run takes that key's finals again from the start (the pass from the
        // last run goes: it would meet this run's); the GPU fails at its third timing.
        let session = Session {
            deadline: None,
            retake_finals: false,
            ..session
        };
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        m.finals_crash = Some(2);
        assert!(matches!(
            tune_spec(&session, &keys, &ks, &mut m, &Silent),
            Err(TuneError::Gpu(_))
        ));
        assert_eq!((m.checks.get(), m.timings.get(), m.finals()), (0, 0, 2));
        assert_eq!(settled(&db), 2, "this run's two passes alone");
        // The next run takes every finalist of both keys in one run; then nothing is left.
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        let (counts, stopped) = tune_spec(&session, &keys, &ks, &mut m, &Silent).unwrap();
        assert!(!stopped);
        assert_eq!(
            (m.timings.get(), counts.finals),
            (0, finals_for(&[512, 4096]))
        );
        for r in db.records().unwrap() {
            let settled: Vec<usize> = settled_of(&r, &ks).into_iter().map(|s| s.0).collect();
            assert_eq!(settled, vec![0, 1, 2, 3]);
        }
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        let (counts, _) = tune_spec(&session, &keys, &ks, &mut m, &Silent).unwrap();
        assert_eq!((m.timings.get(), m.finals(), counts.finals), (0, 0, 0));
        // --retake-finals takes them all again, and screens nothing.
        let session = Session {
            retake_finals: true,
            ..session
        };
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        let (counts, _) = tune_spec(&session, &keys, &ks, &mut m, &Silent).unwrap();
        assert_eq!(
            (m.timings.get(), counts.finals),
            (0, finals_for(&[512, 4096]))
        );
        assert_eq!(settled(&db), finals_for(&[512, 4096]));
    }

    #[test]
    fn a_new_finalist_has_the_keys_finals_taken_again_side_by_side() {
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let current = |_: Template| "h1".to_string();
        let session = Session {
            db: &db,
            device: device(),
            template_hash: &current,
            deadline: None,
            retake_finals: false,
        };
        // Four candidates, all finalists, their finals taken.
        let ks = kernels(5);
        let mut m = Scripted::new(&ks[..4], None, Duration::ZERO);
        tune_spec(&session, &keys(&[512]), &ks[..4], &mut m, &Silent).unwrap();
        let old: Vec<Vec<f64>> = db.records().unwrap()[0]
            .candidates
            .iter()
            .map(|c| c.settled_passes())
            .collect();
        assert!(old.iter().all(|p| p.len() == FINAL_PASSES));
        // A fifth, new to the space, screens faster than k3 on a GPU that runs 10%
        // slower: every finalist is timed again in this run, not the new one alone
        // beside passes of the last run, and k3, no longer a finalist, loses its passes.
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        m.screened = BTreeMap::from([(4, 0.8)]);
        m.settled = BTreeMap::from([(0, 1.1), (1, 1.1), (2, 1.1), (3, 1.1), (4, 1.1)]);
        // A run that built the new kernel alone (what `fa4-gen tune` built before
        // configs_to_time added the finalists: the old ones lost their passes and the new
        // one, timed alone, won) leaves the key's finals as they were.
        let new_alone: Vec<TuneKernel> = kernels(5).into_iter().skip(4).collect();
        let (counts, _) = tune_spec(&session, &keys(&[512]), &new_alone, &mut m, &Silent).unwrap();
        assert_eq!(
            (m.timings.get(), counts.finals, counts.finals_unbuilt),
            (1, 0, 1)
        );
        let r = &db.records().unwrap()[0];
        let kept: Vec<Vec<f64>> = r.candidates[..4]
            .iter()
            .map(|c| c.settled_passes())
            .collect();
        assert_eq!(kept, old, "no finalist's passes lost");
        assert_eq!(
            r.winner().unwrap().0.kernel,
            ks[2].built.id.0,
            "the new one unsettled"
        );
        // What `fa4-gen tune` builds for that key: the new candidate and its finalists.
        let configs: Vec<TileConfig> = ks
            .iter()
            .map(|k| k.built.candidate.config.clone())
            .collect();
        db.records().unwrap().into_iter().for_each(|mut r| {
            r.candidates.truncate(4);
            db.put(&r).unwrap();
        });
        let needed = configs_to_time(&db, &device(), &current, &keys(&[512]), &configs, false)
            .unwrap()
            .unwrap();
        assert_eq!(needed, [4, 0, 2, 1, 3].map(|i| configs[i].clone()));
        let tally = Tally::default();
        let (counts, _) = tune_spec(&session, &keys(&[512]), &ks, &mut m, &tally).unwrap();
        assert_eq!(
            (m.timings.get(), counts.finals),
            (2, FINALISTS * FINAL_PASSES)
        );
        assert_eq!(tally.planned.get(), tally.done.get(), "the bar ends full");
        let r = &db.records().unwrap()[0];
        let k3 = r
            .candidates
            .iter()
            .find(|c| c.kernel == ks[3].built.id.0)
            .unwrap();
        assert!(k3.settled_passes().is_empty(), "no longer a finalist");
        assert!(finals_complete(r));
    }

    #[test]
    fn every_key_settles_on_the_mean_of_passes_over_buffer_sets() {
        let ks = kernels(5);
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        // At 512 keys: k2 0.25 ms, k0 0.5, k1 0.55, k3 0.65 (finalists), k4 0.7; at 4096
        // eight times that. At 512, one of k2's three readings is 5x (a buffer set its
        // tile is slow on) and one of k0's 0.5x: k2 leads by the median (0.25 against
        // 0.5 ms) and trails over all three sets (0.583 against 0.417). At 4096 its 3x
        // set leaves it ahead (3.33 against 4 ms).
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        m.outliers = BTreeMap::from([((2, 1), 5.0), ((0, 2), 0.5), ((2, 3), 3.0)]);
        run(&db, "h1", &keys(&[512, 4096]), &ks, &mut m, &Silent);
        let timed = m.finals.borrow().clone();
        // Pass p starts at the p-th finalist (default, then by screening time) and runs
        // on the p-th buffer set.
        let order = [0, 2, 1, 3, 2, 1, 3, 0, 1, 3, 0, 2];
        assert_eq!(timed, [order, order].concat(), "{timed:?}");
        let sets: Vec<usize> = (0..2 * FINAL_PASSES)
            .flat_map(|p| vec![p % FINAL_PASSES; FINALISTS])
            .collect();
        assert_eq!(*m.placements.borrow(), sets);
        let records = db.records().unwrap();
        let short = records.iter().find(|r| r.bucket.seqlen == 512).unwrap();
        let passes = |r: &Record, k: usize| {
            r.candidates
                .iter()
                .find(|c| c.kernel == ks[k].built.id.0)
                .unwrap()
                .settled_passes()
        };
        assert_eq!(passes(short, 2), vec![0.25, 1.25, 0.25]);
        assert_eq!(passes(short, 0), vec![0.5, 0.5, 0.25]);
        assert_eq!(
            short.winner().unwrap().0.kernel,
            ks[0].built.id.0,
            "the slow set counts"
        );
        assert!((short.default_ms().unwrap() - 1.25 / 3.0).abs() < 1e-12);
        let long = records.iter().find(|r| r.bucket.seqlen == 4096).unwrap();
        assert_eq!(passes(long, 2), vec![6.0, 2.0, 2.0]);
        assert_eq!(long.winner().unwrap().0.kernel, ks[2].built.id.0);
        assert_eq!(long.timing.final_placements, FINAL_PASSES as u32);

        // Records whose finals all ran on one buffer set (an older fa4-gen) take them
        // again, every key; nothing is screened again.
        for mut r in db.records().unwrap() {
            r.timing.final_passes = 0;
            r.timing.final_placements = 0;
            r.timing.short_key_passes = 3;
            r.timing.short_key_ms = 1.0;
            db.put(&r).unwrap();
        }
        // Only the finalists are built again for that.
        let current = |_: Template| "h1".to_string();
        let configs: Vec<TileConfig> = ks
            .iter()
            .map(|k| k.built.candidate.config.clone())
            .collect();
        let to_time = |keys: &[Key]| {
            configs_to_time(&db, &device(), &current, keys, &configs, false).unwrap()
        };
        let finalists: Vec<TileConfig> = [0, 2, 1, 3].iter().map(|&i| configs[i].clone()).collect();
        assert_eq!(to_time(&keys(&[512, 4096])), Some(finalists));
        assert_eq!(
            to_time(&keys(&[512, 4096, 8192])),
            None,
            "a new key: everything"
        );
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        m.settled = BTreeMap::from([(2, 3.0)]);
        let (counts, _) = run(&db, "h1", &keys(&[512, 4096]), &ks, &mut m, &Silent);
        assert_eq!(
            (m.timings.get(), counts.finals),
            (0, finals_for(&[512, 4096]))
        );
        assert_eq!(to_time(&keys(&[512, 4096])), Some(vec![]), "nothing left");
        for r in db.records().unwrap() {
            assert_eq!(
                r.winner().unwrap().0.kernel,
                ks[0].built.id.0,
                "the new passes decide"
            );
            assert_eq!(
                (r.timing.final_placements, r.timing.short_key_passes),
                (FINAL_PASSES as u32, 0)
            );
        }
        // A candidate the records lack (new to the space) is built, and with it the
        // finalists it may join.
        for mut r in db.records().unwrap() {
            r.candidates.retain(|c| c.kernel != ks[4].built.id.0);
            db.put(&r).unwrap();
        }
        let with_finalists: Vec<TileConfig> = [4, 0, 2, 1, 3]
            .iter()
            .map(|&i| configs[i].clone())
            .collect();
        assert_eq!(to_time(&keys(&[512, 4096])), Some(with_finalists));
    }

    /// Sums what a tune plans and counts what it then measures.
    #[derive(Default)]
    struct Tally {
        planned: Counter<usize>,
        done: Counter<usize>,
    }
    impl Progress for Tally {
        fn planned(&self, count: usize) {
            self.planned.set(self.planned.get() + count);
        }
        fn measured(&self, _: &Key, _: &TuneKernel, _: &Outcome, _: Option<(String, f64)>) {
            self.done.set(self.done.get() + 1);
        }
        fn finalist(&self, _: &Key, _: &TuneKernel, _: Option<f64>) {
            self.done.set(self.done.get() + 1);
        }
        fn finals_kept(&self, _: &Key, planned: usize) {
            self.done.set(self.done.get() + planned);
        }
    }

    #[test]
    fn the_progress_plan_covers_every_pass_of_new_keys() {
        let ks = kernels(5);
        let dir = tempfile::tempdir().unwrap();
        let db = TuningDb::open(&dir.path().join("db")).unwrap();
        let mut m = Scripted::new(&ks, None, Duration::ZERO);
        let tally = Tally::default();
        run(&db, "h1", &keys(&[512, 4096]), &ks, &mut m, &tally);
        assert_eq!(tally.done.get(), 5 * 2 + finals_for(&[512, 4096]));
        assert_eq!(tally.planned.get(), tally.done.get());
    }

    #[test]
    fn bucket_cells_follow_the_paper_grid() {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        let c = bucket_cell(&spec, Bucket::of(512));
        assert_eq!((c.seqlen, c.batch, c.heads, c.heads_kv), (512, 32, 16, 16));
        // Longer than the token count: one sequence.
        let c = bucket_cell(&spec, Bucket::of(32768));
        assert_eq!((c.seqlen, c.batch), (32768, 1));
        // A local key: a window as wide as its bucket, which the dispatcher maps back to it.
        let local = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Local);
        for (bucket, seqlen, batch) in [
            (128, 4096, 4),
            (1024, 4096, 4),
            (2048, 8192, 2),
            (16384, 32768, 1),
        ] {
            let c = bucket_cell(&local, Bucket::of(bucket));
            assert_eq!(
                (c.seqlen, c.batch, c.window),
                (seqlen, batch, (bucket as i32, 0))
            );
            assert_eq!(
                Bucket::of_call(MaskKind::Local, c.window, c.seqlen as u32).seqlen,
                bucket
            );
        }
    }

    #[test]
    fn shards_split_the_keys_without_overlap() {
        let specs: Vec<(Template, KernelSpec)> = [MaskKind::None, MaskKind::Causal]
            .iter()
            .map(|&m| {
                (
                    Template::Portable,
                    KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, m),
                )
            })
            .collect();
        let buckets: Vec<Bucket> = Bucket::all().collect();
        let all = shard_keys(&specs, &buckets, 0, 1);
        assert_eq!(all.len(), 2 * 9);
        let mut union: Vec<Key> = (0..4)
            .flat_map(|i| shard_keys(&specs, &buckets, i, 4))
            .collect();
        union.sort();
        assert_eq!(union, all);
        // Round robin: each shard holds short and long buckets.
        let first = shard_keys(&specs, &buckets, 0, 4);
        assert!(
            first.iter().any(|k| k.bucket.seqlen <= 512)
                && first.iter().any(|k| k.bucket.seqlen >= 4096)
        );
    }

    #[test]
    fn arguments_parse_or_say_what_is_expected() {
        assert_eq!(parse_shard("1/4"), Ok((1, 4)));
        assert!(parse_shard("4/4").unwrap_err().contains("0 <= i < n"));
        assert!(parse_shard("x").is_err());
        assert_eq!(parse_budget("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_budget("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_budget("45"), Ok(Duration::from_secs(45)));
        assert!(parse_budget("10d").unwrap_err().contains("unit"));
        assert!(parse_budget("-1m").is_err());
        assert_eq!(parse_buckets(&[]).unwrap().len(), 9);
        assert_eq!(
            parse_buckets(&[4096, 512, 4096]).unwrap(),
            vec![Bucket::of(512), Bucket::of(4096)]
        );
        assert!(parse_buckets(&[1000]).unwrap_err().contains("128, 256"));
    }
}
