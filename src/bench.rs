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
use crate::verify::{attention_flops, Case, Support, TensorPtrs};

/// One cell of a benchmark grid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cell {
    pub head_dim: u32,
    pub seqlen: i32,
    pub batch: i32,
    pub heads: i32,
    pub mask: MaskKind,
    /// Sliding window, for local masks.
    pub window: (i32, i32),
    /// Soft-capping value, for softcap kernels.
    pub softcap: f32,
}

impl Cell {
    /// The cell as a (self-attention, dense-layout) problem.
    pub fn case(&self) -> Case {
        Case {
            name: format!("d{}_s{}", self.head_dim, self.seqlen),
            batch: self.batch,
            seqlen_q: self.seqlen,
            seqlen_k: self.seqlen,
            heads_q: self.heads,
            heads_kv: self.heads,
            row_pad: 0,
            window: self.window,
            softcap: self.softcap,
            timed: true,
        }
    }
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
                cells.push(Cell {
                    head_dim: d,
                    seqlen: s,
                    batch: (total_tokens / s).max(1),
                    heads: hidden / d as i32,
                    mask,
                    window: (-1, -1),
                    softcap: 0.0,
                });
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

/// Device buffers of one cell, filled with random normal inputs. `params` points into
/// them, so it is valid for as long as this value lives.
pub struct CellBuffers {
    _q: CudaSlice<u16>,
    _k: CudaSlice<u16>,
    _v: CudaSlice<u16>,
    _o: CudaSlice<u16>,
    _lse: CudaSlice<f32>,
    _sinks: CudaSlice<f32>,
    pub params: FwdParams,
}

impl CellBuffers {
    pub fn new(
        gpu: &Gpu,
        support: &Support,
        spec: &KernelSpec,
        cell: &Cell,
        seed: u64,
    ) -> Result<Self, GpuError> {
        let (b, s, h) = (cell.batch as i64, cell.seqlen as i64, cell.heads as i64);
        let (d, dv) = (spec.head_dim as i64, spec.head_dim_v as i64);
        let q = gpu.alloc::<u16>((b * s * h * d) as usize)?;
        let k = gpu.alloc::<u16>((b * s * h * d) as usize)?;
        let v = gpu.alloc::<u16>((b * s * h * dv) as usize)?;
        let o = gpu.alloc::<u16>((b * s * h * dv) as usize)?;
        let lse = gpu.alloc::<f32>((b * h * s) as usize)?;
        let is_bf16 = spec.dtype == Dtype::Bf16;
        for (i, buf) in [&q, &k, &v].into_iter().enumerate() {
            support.fill_normal(gpu, buf, seed.wrapping_add(i as u64), is_bf16)?;
        }
        let sinks = gpu.to_device(&vec![1.0f32; h as usize])?;
        let params = cell.case().params(
            spec,
            TensorPtrs::of(
                gpu,
                [&q, &k, &v, &o],
                &lse,
                spec.features.sinks.then_some(&sinks),
            ),
        );
        Ok(CellBuffers {
            _q: q,
            _k: k,
            _v: v,
            _o: o,
            _lse: lse,
            _sinks: sinks,
            params,
        })
    }
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
