//! Tuning one spec: every pending (candidate, key) pair is checked and screened, then
//! each key's finalists are timed side by side in the finals; every outcome is written
//! as it is measured.

use std::collections::BTreeMap;
use std::time::Instant;

use super::finals::{finalists, finals_complete, finals_stand};
use super::resume::{add_screened, carry, resumed};
use super::session::{Counts, Session};
use super::{
    timing_policy, Key, Measurer, Progress, TuneError, TuneKernel, FINALISTS, FINAL_PASSES,
    KEY_WARMUP_MS, SETTLE_MS,
};
use crate::db::{Candidate, Outcome, Record};

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
    // taken on another day or GPU (1 to 3% apart between two H200s) meets
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
