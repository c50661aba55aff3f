//! Records as a run finds them: a current record resumes, a stale one (another
//! template version) starts afresh but hands over the timings of unchanged machine
//! code, a missing one starts empty; and what a spec still has to build for its keys.

use std::collections::BTreeMap;

use fa4_spec::TileConfig;

use super::finals::{finalists, finals_complete};
use super::session::{Counts, Session};
use super::{timing_policy, Key, Progress, TuneError, TuneKernel, FINAL_PASSES, KEY_WARMUP_MS};
use crate::db::{Candidate, Device, Outcome, Record, TuningDb};
use crate::space::Template;

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
pub(super) fn resumed(
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
pub(super) fn carry(
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
pub(super) fn add_screened(
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
