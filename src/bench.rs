//! Timing kernels the way the peers are timed, so the figures compare cell by cell.
//!
//! The grid is the FlashAttention-3 paper's (`shared/anchors`): a fixed number of tokens
//! per batch and a fixed hidden size, so `batch = tokens / seqlen` and
//! `heads = hidden / head_dim`. Each run is timed alone with CUDA events after the L2
//! cache has been overwritten (as `triton.testing.do_bench` does for the peers), and the
//! median is reported. Rows carry the keys `shared/bench/compare.py` reads.

use cudarc::driver::CudaSlice;
use fa4_spec::{Dtype, FwdParams, KernelSpec, MaskKind};
use serde::Serialize;

use crate::gpu::{driver, FwdKernel, Gpu, GpuError};
use crate::problem::{attention_flops, Case};

/// One cell of a benchmark grid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cell {
    pub head_dim: u32,
    pub seqlen: i32,
    pub batch: i32,
    pub heads: i32,
    /// KV heads (GQA); the grid's cells have as many as query heads.
    pub heads_kv: i32,
    /// Hand the batch over packed with `cu_seqlens` (the way engines call prefill).
    pub varlen: bool,
    /// The model layer this cell stands for, if any.
    pub layer: Option<&'static str>,
    /// Score features the layer uses (grid cells: the ones asked for on the command line).
    pub features: Option<fa4_spec::Features>,
    pub mask: MaskKind,
    /// Sliding window, for local masks.
    pub window: (i32, i32),
    /// Soft-capping value, for softcap kernels.
    pub softcap: f32,
}

impl Cell {
    /// The cell as a self-attention problem: a dense batch, or the same sequences packed.
    pub fn case(&self) -> Case {
        let name = format!("d{}_s{}", self.head_dim, self.seqlen);
        let case = if self.varlen {
            let seqs = vec![(self.seqlen, self.seqlen); self.batch as usize];
            Case::varlen(&name, &seqs, self.heads, self.heads_kv)
        } else {
            Case::new(
                &name,
                self.batch,
                self.seqlen,
                self.seqlen,
                self.heads,
                self.heads_kv,
            )
        };
        Case {
            window: self.window,
            softcap: self.softcap,
            timed: true,
            ..case
        }
    }

    fn grid(head_dim: u32, seqlen: i32, batch: i32, heads: i32, mask: MaskKind) -> Self {
        Cell {
            head_dim,
            seqlen,
            batch,
            heads,
            heads_kv: heads,
            varlen: false,
            layer: None,
            features: None,
            mask,
            window: (-1, -1),
            softcap: 0.0,
        }
    }
}

/// The model layers `bench --layers` times: a prefill of 4 prompts of 4096 tokens,
/// packed with cu_seqlens as an engine passes them.
/// - `gpt-oss-20b`: 64 query heads on 8 KV heads, head dim 64, attention sinks; its
///   sliding-window layers (window 128) and its full (causal) layers.
/// - `llama-3-8b`: 32 query heads on 8 KV heads, head dim 128, causal.
pub fn model_layers(names: &[String]) -> Result<Vec<Cell>, String> {
    let sinks = fa4_spec::Features {
        sinks: true,
        ..Default::default()
    };
    let layer = |name, head_dim, heads, heads_kv, mask, window, features| Cell {
        heads_kv,
        varlen: true,
        layer: Some(name),
        features: Some(features),
        window,
        ..Cell::grid(head_dim, 4096, 4, heads, mask)
    };
    let all = [
        layer(
            "gpt-oss-20b-sliding",
            64,
            64,
            8,
            MaskKind::Local,
            (128, 0),
            sinks,
        ),
        layer(
            "gpt-oss-20b-full",
            64,
            64,
            8,
            MaskKind::Causal,
            (-1, -1),
            sinks,
        ),
        layer(
            "llama-3-8b",
            128,
            32,
            8,
            MaskKind::Causal,
            (-1, -1),
            fa4_spec::Features::default(),
        ),
    ];
    let mut out = Vec::new();
    for name in names {
        let found: Vec<Cell> = all
            .iter()
            .filter(|c| {
                c.layer
                    .is_some_and(|l| name == "all" || l.starts_with(name.as_str()))
            })
            .copied()
            .collect();
        if found.is_empty() {
            return Err(format!(
                "unknown model layer `{name}` (expected all, gpt-oss-20b, gpt-oss-20b-sliding, gpt-oss-20b-full, llama-3-8b)"
            ));
        }
        out.extend(found);
    }
    out.dedup_by(|a, b| a.layer == b.layer);
    Ok(out)
}

/// The FA3 paper's grid: every (head dim, seqlen, mask) with `total_tokens` tokens and
/// `hidden` = heads x head_dim.
pub fn paper_grid(
    head_dims: &[u32],
    seqlens: &[i32],
    masks: &[MaskKind],
    total_tokens: i32,
    hidden: i32,
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for &d in head_dims {
        for &s in seqlens {
            for &mask in masks {
                cells.push(Cell::grid(
                    d,
                    s,
                    (total_tokens / s).max(1),
                    hidden / d as i32,
                    mask,
                ));
            }
        }
    }
    cells
}

/// One measured (kernel, cell), in the row format of `shared/bench/peers.py`.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub backend: String,
    pub dtype: Dtype,
    pub hdim: u32,
    pub seqlen: i32,
    pub batch: i32,
    pub heads: i32,
    pub heads_kv: i32,
    /// The model layer timed, for `--layers` rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<&'static str>,
    pub varlen: bool,
    /// 1 for causal and local masks (compare.py's cell key); `mask` says which.
    pub causal: u8,
    pub mask: MaskKind,
    pub window: (i32, i32),
    pub features: fa4_spec::Features,
    /// Median milliseconds.
    pub ms: f64,
    pub tflops: f64,
    pub ms_min: f64,
    pub ms_max: f64,
    pub runs: usize,
    pub kernel: String,
    pub config: String,
    pub is_default: bool,
}

/// A buffer larger than the L2 cache, overwritten before every timed run.
pub struct L2Flush(CudaSlice<u8>);

impl L2Flush {
    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let bytes = (gpu.info.l2_bytes as usize * 4).max(256 << 20);
        Ok(L2Flush(gpu.alloc::<u8>(bytes)?))
    }

    pub fn flush(&mut self, gpu: &Gpu) -> Result<(), GpuError> {
        gpu.stream()
            .memset_zeros(&mut self.0)
            .map_err(driver("cuMemsetD8Async"))
    }
}

/// Times one kernel on one cell: warm-up, then each run alone after an L2 flush, for
/// about `budget_ms` of kernel time (at least 10 runs). Returns sorted milliseconds.
pub fn time_kernel(
    gpu: &Gpu,
    kernel: &FwdKernel,
    params: &FwdParams,
    flush: &mut L2Flush,
    budget_ms: f64,
) -> Result<Vec<f64>, GpuError> {
    // Warm-up and a first estimate.
    let first = gpu.time_ms(2, 3, || kernel.launch(gpu, params))?;
    let estimate = first[1].max(1e-3);
    let runs = ((budget_ms / estimate) as usize).clamp(10, 200);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        flush.flush(gpu)?;
        let t = gpu.time_ms(0, 1, || kernel.launch(gpu, params))?;
        times.push(t[0]);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times)
}

/// The row for a timed (kernel, cell).
pub fn row(
    spec: &KernelSpec,
    cell: &Cell,
    times: &[f64],
    kernel: &str,
    config: &str,
    is_default: bool,
    backend: &str,
) -> Row {
    let ms = times[times.len() / 2];
    Row {
        backend: backend.to_string(),
        dtype: spec.dtype,
        hdim: spec.head_dim,
        seqlen: cell.seqlen,
        batch: cell.batch,
        heads: cell.heads,
        heads_kv: cell.heads_kv,
        layer: cell.layer,
        varlen: cell.varlen,
        causal: (spec.mask != MaskKind::None) as u8,
        mask: spec.mask,
        window: cell.window,
        features: spec.features,
        ms,
        tflops: attention_flops(spec, &cell.case()) / (ms * 1e-3) / 1e12,
        ms_min: times[0],
        ms_max: times[times.len() - 1],
        runs: times.len(),
        kernel: kernel.to_string(),
        config: config.to_string(),
        is_default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_grid_matches_the_anchor_shapes() {
        let grid = paper_grid(
            &[64, 128, 256],
            &[512, 1024, 2048, 4096, 8192, 16384],
            &[MaskKind::None, MaskKind::Causal],
            16384,
            2048,
        );
        assert_eq!(grid.len(), 36);
        let c = grid
            .iter()
            .find(|c| c.head_dim == 128 && c.seqlen == 512)
            .unwrap();
        assert_eq!((c.batch, c.heads), (32, 16));
        let c = grid
            .iter()
            .find(|c| c.head_dim == 64 && c.seqlen == 16384)
            .unwrap();
        assert_eq!((c.batch, c.heads), (1, 32));
    }
}
