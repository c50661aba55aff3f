//! A key's finals: which candidates are its finalists, whether their finals are
//! complete, and whether finals carried from another template version stand.

use std::collections::BTreeMap;

use super::{FINALISTS, FINAL_PASSES};
use crate::db::{Candidate, Record};

/// Whether `record`'s finals stand as they were taken under the last template version:
/// every finalist is a carried kernel (same machine code) whose finals of the same timing
/// policy are in `kept` (passes by kernel id; carried candidates enter the record without
/// them, and no finals are taken before this is asked). A template edit
/// that left the finalists' machine code alone leaves their side-by-side comparison
/// valid; a new or changed kernel that screened among them has them all taken again.
pub(super) fn finals_stand(record: &Record, kept: &BTreeMap<String, Vec<f64>>) -> bool {
    let chosen = finalists(record);
    !chosen.is_empty()
        && chosen.iter().all(|&i| {
            kept.get(&record.candidates[i].kernel)
                .is_some_and(|p| p.len() >= FINAL_PASSES)
        })
}

/// Whether every finalist of `record` has its FINAL_PASSES passes.
pub(super) fn finals_complete(record: &Record) -> bool {
    finalists(record)
        .iter()
        .all(|&i| record.candidates[i].settled_passes().len() >= FINAL_PASSES)
}

/// The indices of `record`'s finalists: candidate 0 (the default) if it was measured,
/// then the fastest other measured candidates by screening time, [`FINALISTS`] in all
/// (fewer when fewer were measured). Screening times do not change once measured, so a
/// resumed run picks the same finalists.
pub(super) fn finalists(record: &Record) -> Vec<usize> {
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
