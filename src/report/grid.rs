//! The grid beside the peers: per cell (head dim, mask, sequence length) our TFLOP/s and
//! its ratio to the best peer's, as `shared/bench/compare.py` pairs rows (a cell given
//! twice for one backend takes the last row read).

use std::collections::{BTreeMap, BTreeSet};

use super::inputs::{BenchRow, Named};

/// A cell of the grid: head dims (QK, V), causal, sequence length.
pub type CellKey = (u32, u32, bool, u32);

/// Our backend's cells beside the peers'.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    pub ours: String,
    /// Every cell ours has, with the peers' TFLOP/s there (maybe none).
    pub cells: BTreeMap<CellKey, GridCell>,
    /// The peers met anywhere in the grid, by name.
    pub peers: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GridCell {
    pub ours: f64,
    pub peers: BTreeMap<String, f64>,
}

impl GridCell {
    /// The fastest peer here and its TFLOP/s.
    pub fn best_peer(&self) -> Option<(&str, f64)> {
        self.peers
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(name, t)| (name.as_str(), *t))
    }

    /// Ours over the best peer's TFLOP/s, where a peer ran the cell.
    pub fn ratio(&self) -> Option<f64> {
        self.best_peer().map(|(_, t)| self.ours / t)
    }
}

/// The geometric mean, the least value, and how many fall below 1.0, of `ratios`.
pub fn summary(ratios: &[f64]) -> Option<(f64, f64, usize)> {
    if ratios.is_empty() {
        return None;
    }
    let geomean = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    Some((geomean, min, ratios.iter().filter(|r| **r < 1.0).count()))
}

impl Grid {
    /// Ratios to the best peer, over the cells a peer ran.
    pub fn ratios(&self) -> Vec<f64> {
        self.cells.values().filter_map(GridCell::ratio).collect()
    }

    /// Ratios to one peer, over the cells it ran.
    pub fn ratios_to(&self, peer: &str) -> Vec<f64> {
        self.cells
            .values()
            .filter_map(|c| c.peers.get(peer).map(|t| c.ours / t))
            .collect()
    }
}

/// Whether a backend is one of fa4-gen's own (the CLI's `fa4-gen*` rows, the Python
/// module's `fa4gen`): never a peer.
pub fn is_ours(backend: &str) -> bool {
    backend.starts_with("fa4-gen") || backend.starts_with("fa4gen")
}

/// The backends the grid pictures when none is named: our tuned picks (`*-tuned`), else
/// our rows without a config of their own (`fa4-gen-hopper`, not
/// `fa4-gen-hopper:m128...`).
pub fn default_ours(bench: &[Named<Vec<BenchRow>>]) -> Vec<String> {
    let backends: BTreeSet<&str> = bench
        .iter()
        .flat_map(|f| &f.value)
        .filter(|r| r.not_grid.is_none() && r.tflops.is_some())
        .map(|r| r.backend.as_str())
        .collect();
    let tuned: Vec<String> = backends
        .iter()
        .filter(|b| b.ends_with("-tuned"))
        .map(|b| b.to_string())
        .collect();
    if !tuned.is_empty() {
        return tuned;
    }
    backends
        .iter()
        .filter(|b| is_ours(b) && !b.contains(':'))
        .map(|b| b.to_string())
        .collect()
}

/// The grid of `ours` from the rows of `bench` beside every peer of `peers` (rows of
/// fa4-gen's own backends there are left out), keeping rows of `dtype` (rows without a
/// dtype count as it) that are plain grid cells with a time.
pub fn grid(
    ours: &str,
    bench: &[Named<Vec<BenchRow>>],
    peers: &[Named<Vec<BenchRow>>],
    dtype: &str,
) -> Grid {
    let usable = |r: &&BenchRow| {
        r.not_grid.is_none()
            && r.tflops.is_some()
            && r.dtype
                .as_deref()
                .is_none_or(|d| d.eq_ignore_ascii_case(dtype))
    };
    let key = |r: &BenchRow| (r.hdim, r.hdim_v, r.causal, r.seqlen);
    let mut cells: BTreeMap<CellKey, GridCell> = BTreeMap::new();
    for r in bench
        .iter()
        .flat_map(|f| &f.value)
        .filter(usable)
        .filter(|r| r.backend == ours)
    {
        cells.insert(
            key(r),
            GridCell {
                ours: r.tflops.unwrap_or_default(),
                peers: BTreeMap::new(),
            },
        );
    }
    let mut names = BTreeSet::new();
    for r in peers
        .iter()
        .flat_map(|f| &f.value)
        .filter(usable)
        .filter(|r| !is_ours(&r.backend))
    {
        if let Some(cell) = cells.get_mut(&key(r)) {
            cell.peers
                .insert(r.backend.clone(), r.tflops.unwrap_or_default());
            names.insert(r.backend.clone());
        }
    }
    Grid {
        ours: ours.to_string(),
        cells,
        peers: names,
    }
}

/// How the peers' backends are written for a reader.
pub fn peer_name(backend: &str) -> String {
    match backend {
        "flash" | "fa2" => "FA2".into(),
        "fa3" => "FA3".into(),
        "fa4" => "FA4".into(),
        "cudnn" => "cuDNN".into(),
        "flex" => "FlexAttention".into(),
        "sdpa" => "SDPA".into(),
        other => other.into(),
    }
}
