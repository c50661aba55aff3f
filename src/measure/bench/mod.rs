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

use crate::measure::gpu::{driver, FwdKernel, Gpu, GpuError, LaunchArgs};
use crate::measure::problems::{attention_flops, Case};

/// One cell of a benchmark grid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cell {
    pub head_dim: u32,
    /// V's head dim: the QK head dim but for layers such as DeepSeek's (192/128).
    pub head_dim_v: u32,
    pub seqlen: i32,
    pub batch: i32,
    pub heads: i32,
    /// KV heads (GQA); the grid's cells have as many as query heads.
    pub heads_kv: i32,
    /// Hand the batch over packed with `cu_seqlens` (the way engines call prefill).
    pub varlen: bool,
    /// The model layer this cell stands for, if any.
    pub layer: Option<&'static str>,
    /// The serving batch this cell packs (`bench --serving`): its sequences' lengths;
    /// `seqlen` and `batch` are then its longest prompt and its sequence count.
    #[serde(skip)]
    pub mix: Option<&'static Mix>,
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
        let name = format!(
            "d{}_s{}",
            fa4_spec::head_dims_name(self.head_dim, Some(self.head_dim_v)),
            self.seqlen
        );
        let case = if let Some(mix) = self.mix {
            let name = format!("{name}_{}", mix.name);
            Case::varlen(&name, &mix.seqlens, self.heads, self.heads_kv)
        } else if self.varlen {
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
            head_dim_v: head_dim,
            seqlen,
            batch,
            heads,
            heads_kv: heads,
            varlen: false,
            layer: None,
            mix: None,
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
/// - `deepseek-v3`: its prefill's attention as SGLang runs it (MLA's keys expanded, one
///   GPU's 16 heads of 128 under 8-way tensor parallelism), head dims 192 for Q and K
///   and 128 for V, causal.
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
        Cell {
            head_dim_v: 128,
            ..layer(
                "deepseek-v3",
                192,
                16,
                16,
                MaskKind::Causal,
                (-1, -1),
                fa4_spec::Features::default(),
            )
        },
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

/// A cell's FLOPs: FlashAttention's convention on the grid and the layers; on a serving
/// mix the pairs the causal mask leaves, counted exactly (a chunk of queries behind a
/// long cached prefix sees nearly all its keys, not half).
pub fn cell_flops(spec: &KernelSpec, cell: &Cell) -> f64 {
    let case = cell.case();
    match cell.mix {
        Some(_) => {
            case.visible_pairs(spec.mask)
                * 2.0
                * f64::from(spec.head_dim + spec.head_dim_v)
                * f64::from(case.heads_q)
        }
        None => attention_flops(spec, &case),
    }
}

/// One measured (kernel, cell), in the row format of `shared/bench/peers.py`.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub backend: String,
    pub dtype: Dtype,
    pub hdim: u32,
    /// V's head dim, where it differs from `hdim`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hdim_v: Option<u32>,
    pub seqlen: i32,
    pub batch: i32,
    pub heads: i32,
    pub heads_kv: i32,
    /// The model layer timed, for `--layers` rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<&'static str>,
    /// The serving mix timed, for `--serving` rows, and its (queries, keys) per sequence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mix: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seqlens: Option<Vec<(i32, i32)>>,
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
    /// The commit the binary (and so its kernels) was built from, `-dirty` with changes.
    pub commit: &'static str,
    /// Which of `bench --placements`' buffer sets the row was timed on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<u32>,
}

/// The spacer allocated before the `placement`-th buffer set of a timed problem (none for
/// the 0th): placement n sits behind n x (37 MiB + 68 KiB), odd sizes, so both the pages
/// and the offsets within them move. Tuned picks ran 5 to 12% slower than the default
/// on one such set and faster on the others (`bench --placements`), so the tuner's
/// finals spread their passes over sets and the bench can too.
pub fn placement_spacer(gpu: &Gpu, placement: usize) -> Result<Option<CudaSlice<u8>>, GpuError> {
    match placement {
        0 => Ok(None),
        n => gpu.alloc::<u8>(n * ((37 << 20) + 68 * 1024)).map(Some),
    }
}

/// One of a timed problem's tensors, for `bench --move-buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    Q,
    K,
    V,
    O,
}

impl Buffer {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "q" => Some(Buffer::Q),
            "k" => Some(Buffer::K),
            "v" => Some(Buffer::V),
            "o" => Some(Buffer::O),
            _ => None,
        }
    }
}

/// A copy of one of `problem`'s buffers behind the `placement`-th spacer, and the
/// problem's parameters pointing at it (at the same offset into it); the other buffers
/// stay where they are. Held while the kernel runs on `params`.
pub struct MovedBuffer {
    _spacer: Option<CudaSlice<u8>>,
    _copy: CudaSlice<u8>,
    pub params: FwdParams,
}

pub fn move_buffer(
    gpu: &Gpu,
    problem: &crate::measure::problems::Problem,
    buffer: Buffer,
    placement: usize,
) -> Result<MovedBuffer, GpuError> {
    let spacer = placement_spacer(gpu, placement)?;
    let src = match buffer {
        Buffer::Q => &problem.q,
        Buffer::K => &problem.k,
        Buffer::V => &problem.v,
        Buffer::O => &problem.o,
    };
    let mut copy = gpu.alloc::<u8>(src.len())?;
    gpu.stream()
        .memcpy_dtod(src, &mut copy)
        .map_err(driver("cuMemcpyDtoD"))?;
    let mut params = problem.params;
    let (from, to) = (gpu.ptr(src), gpu.ptr(&copy));
    let field = match buffer {
        Buffer::Q => &mut params.q,
        Buffer::K => &mut params.k,
        Buffer::V => &mut params.v,
        Buffer::O => &mut params.o,
    };
    *field = to + (*field - from);
    Ok(MovedBuffer {
        _spacer: spacer,
        _copy: copy,
        params,
    })
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
///
/// The warm-up is 5 runs and then, with `warmup_ms`, back-to-back runs until that much
/// kernel time has passed (triton's `do_bench`, which times the peers, warms up for
/// 50 ms). Without it the first kernel timed after the GPU idled (a new cell's set-up)
/// read up to 18% faster than the same kernel in a later call: the clocks had not yet
/// settled to their sustained level.
pub fn time_kernel(
    gpu: &Gpu,
    kernel: &FwdKernel,
    args: &LaunchArgs,
    flush: &mut L2Flush,
    budget_ms: f64,
    warmup_ms: f64,
) -> Result<Vec<f64>, GpuError> {
    // Warm-up and a first estimate.
    let first = gpu.time_ms(2, 3, || kernel.launch(gpu, args))?;
    let estimate = first[1].max(1e-3);
    let settle = (warmup_ms / estimate).ceil() as usize;
    if settle > 0 {
        gpu.time_ms(settle.min(10_000), 0, || kernel.launch(gpu, args))?;
    }
    let runs = ((budget_ms / estimate) as usize).clamp(10, 200);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        flush.flush(gpu)?;
        let t = gpu.time_ms(0, 1, || kernel.launch(gpu, args))?;
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
        hdim_v: (spec.head_dim_v != spec.head_dim).then_some(spec.head_dim_v),
        seqlen: cell.seqlen,
        batch: cell.batch,
        heads: cell.heads,
        heads_kv: cell.heads_kv,
        layer: cell.layer,
        mix: cell.mix.map(|m| m.name),
        seqlens: cell.mix.map(|m| m.seqlens.clone()),
        varlen: cell.varlen,
        causal: (spec.mask != MaskKind::None) as u8,
        mask: spec.mask,
        window: cell.window,
        features: spec.features,
        ms,
        tflops: cell_flops(spec, cell) / (ms * 1e-3) / 1e12,
        ms_min: times[0],
        ms_max: times[times.len() - 1],
        runs: times.len(),
        kernel: kernel.to_string(),
        config: config.to_string(),
        is_default,
        commit: env!("FA4_GEN_COMMIT"),
        placement: None,
    }
}

mod host;
mod run;
mod serving;

pub use host::{host_cost, HostCost};
pub use run::{run, BenchPlan, Event, TunedChoices};
pub use serving::{ragged_mix, serving_cells, serving_mixes, Mix, SERVING_MODELS};

#[cfg(test)]
mod tests;
