//! What the tuning-db export says per key: the pick it serves, its TFLOP/s in the time it
//! was chosen by, and its gain over the heuristic default; grouped per GPU and head dim,
//! a row per template, dtype, mask, features and batch kind, a column per bucket.

use std::collections::{BTreeMap, BTreeSet};

use fa4_spec::{Arch, Dtype, Features, MaskKind, Template};

use crate::db::{Entry, GpuId, Record};

/// One key: what its record serves and how fast.
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    /// The store key (`hopper/sm90_bf16_d128_causal/s04096/NVIDIA_H200-132sm`).
    pub key: String,
    /// The served config's tag; None when nothing was measured.
    pub config: Option<String>,
    pub default_config: String,
    /// The pick's TFLOP/s in the time it ranked by (settled once the finals ran).
    pub tflops: Option<f64>,
    /// The default's time over the pick's, both in that metric (1.0 where the default
    /// is served).
    pub gain: Option<f64>,
    /// The fastest candidate's gain where the pick is the default all the same (it
    /// beat the default by less than the margin a winner needs).
    pub held_back: Option<f64>,
    /// Whether the finals ran: the times are settled ones, else screening times.
    pub settled: bool,
    /// Candidates timed and failed, with those a slim export summarises.
    pub measured: u32,
    pub failed: u32,
    pub date: String,
    /// Measured with another version of its template than the current one: not served.
    pub stale: bool,
}

/// A heatmap's row: everything of a key but the head dims and the bucket length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RowKey {
    /// Hopper first: it serves most.
    pub hopper_first: bool,
    pub template: Template,
    pub dtype: Dtype,
    pub mask: MaskKind,
    pub features: Features,
    pub ragged: bool,
}

impl RowKey {
    pub fn label(&self) -> String {
        let mut l = format!("{} {} {}", self.template, self.dtype, self.mask);
        if self.features != Features::default() {
            l.push(' ');
            l.push_str(&self.features.name());
        }
        if self.ragged {
            l.push_str(" ragged");
        }
        l
    }
}

/// One head dim's picks on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadDimMap {
    pub head_dims: (u32, u32),
    /// Bucket lengths, shortest first.
    pub buckets: Vec<u32>,
    pub rows: BTreeMap<RowKey, BTreeMap<u32, Pick>>,
}

impl HeadDimMap {
    pub fn name(&self) -> String {
        let (qk, v) = self.head_dims;
        fa4_spec::head_dims_name(qk, Some(v))
    }

    pub fn picks(&self) -> impl Iterator<Item = &Pick> {
        self.rows.values().flat_map(|r| r.values())
    }
}

/// One GPU's picks, per head dim.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuMaps {
    pub arch: Arch,
    pub gpu: GpuId,
    pub maps: Vec<HeadDimMap>,
}

impl GpuMaps {
    pub fn records(&self) -> usize {
        self.maps.iter().map(|m| m.picks().count()).sum()
    }
}

/// The pick of one record. `current` names the current template hashes (stale records
/// differ); empty when unknown.
pub fn pick(entry: &Entry, current: &BTreeMap<Template, String>) -> Pick {
    let r: &Record = &entry.record;
    let settled = r.finals_done();
    let default_ms = r.default_ms();
    let choice = r.choice();
    let chosen_ms = choice.and_then(|c| r.ranking_ms(c));
    // The FLOPs of the timed problem, from the screening timing (TFLOP/s x ms), in the
    // time the pick ranked by.
    let tflops = choice.and_then(|c| match &c.outcome {
        crate::db::Outcome::Measured { ms, tflops, .. } if *ms > 0.0 && *tflops > 0.0 => {
            chosen_ms.map(|chosen| tflops * ms / chosen)
        }
        _ => None,
    });
    let gain = match (default_ms, chosen_ms) {
        (Some(d), Some(c)) => Some(d / c),
        _ => None,
    };
    let default_served = choice.is_some_and(|c| r.candidates.first() == Some(c));
    let held_back = match (default_served, r.winner(), default_ms) {
        (true, Some((w, ms)), Some(d)) if r.candidates.first() != Some(w) => Some(d / ms),
        _ => None,
    };
    let timed = r
        .candidates
        .iter()
        .filter(|c| matches!(c.outcome, crate::db::Outcome::Measured { .. }))
        .count() as u32;
    let failed = r.candidates.len() as u32 - timed;
    let (more_measured, more_failed) = entry.screened.map_or((0, 0), |s| (s.measured, s.failed));
    Pick {
        key: r.key(),
        config: choice.map(|c| c.config.tag()),
        default_config: r
            .candidates
            .first()
            .map_or_else(String::new, |c| c.config.tag()),
        tflops,
        gain,
        held_back,
        settled,
        measured: timed + more_measured,
        failed: failed + more_failed,
        date: r.date.clone(),
        stale: current
            .get(&r.template)
            .is_some_and(|h| *h != r.template_hash),
    }
}

/// The export's picks per GPU (most records first) and head dim.
pub fn maps(entries: &[Entry], current: &BTreeMap<Template, String>) -> Vec<GpuMaps> {
    type PerGpu = BTreeMap<(u32, u32), BTreeMap<RowKey, BTreeMap<u32, Pick>>>;
    let mut by_gpu: BTreeMap<(Arch, GpuId), PerGpu> = BTreeMap::new();
    for e in entries {
        let r = &e.record;
        let row = RowKey {
            hopper_first: r.template != Template::Hopper,
            template: r.template,
            dtype: r.spec.dtype,
            mask: r.spec.mask,
            features: r.spec.features,
            ragged: r.bucket.ragged,
        };
        by_gpu
            .entry((r.spec.arch, GpuId::of(r)))
            .or_default()
            .entry((r.spec.head_dim, r.spec.head_dim_v))
            .or_default()
            .entry(row)
            .or_default()
            .insert(r.bucket.seqlen, pick(e, current));
    }
    let mut out: Vec<GpuMaps> = by_gpu
        .into_iter()
        .map(|((arch, gpu), dims)| GpuMaps {
            arch,
            gpu,
            maps: dims
                .into_iter()
                .map(|(head_dims, rows)| {
                    let buckets: BTreeSet<u32> =
                        rows.values().flat_map(|r| r.keys().copied()).collect();
                    HeadDimMap {
                        head_dims,
                        buckets: buckets.into_iter().collect(),
                        rows,
                    }
                })
                .collect(),
        })
        .collect();
    out.sort_by_key(|g| (g.arch, std::cmp::Reverse(g.records()), g.gpu.clone()));
    out
}
