//! The closing table: each key's winner against its heuristic default, from the
//! database.

use super::Key;
use crate::db::{DbError, Device, Outcome, TuningDb};
use crate::space::Template;

/// One line of the closing table: a key's winner against its heuristic default.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WinnerRow {
    pub spec: String,
    pub bucket: u32,
    /// A ragged bucket's key (timed on a ragged varlen batch).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ragged: bool,
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
            ragged: key.bucket.ragged,
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
