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

use crate::measure::gpu::{driver, FwdKernel, Gpu, GpuError};
use crate::measure::problems::{attention_flops, Case};
use fa4_runtime::SplitWorkspace;

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
            head_dim_v: head_dim,
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
    _copy: CudaSlice<u16>,
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
    let mut copy = gpu.alloc::<u16>(src.len())?;
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
    params: &FwdParams,
    split: Option<SplitWorkspace>,
    flush: &mut L2Flush,
    budget_ms: f64,
    warmup_ms: f64,
) -> Result<Vec<f64>, GpuError> {
    // Warm-up and a first estimate.
    let first = gpu.time_ms(2, 3, || kernel.launch(gpu, params, split))?;
    let estimate = first[1].max(1e-3);
    let settle = (warmup_ms / estimate).ceil() as usize;
    if settle > 0 {
        gpu.time_ms(settle.min(10_000), 0, || kernel.launch(gpu, params, split))?;
    }
    let runs = ((budget_ms / estimate) as usize).clamp(10, 200);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        flush.flush(gpu)?;
        let t = gpu.time_ms(0, 1, || kernel.launch(gpu, params, split))?;
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
        commit: env!("FA4_GEN_COMMIT"),
        placement: None,
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

    /// A row carries compare.py's keys, the median of the sorted times with their
    /// spread, and the commit its kernels were built from.
    #[test]
    fn a_row_is_the_median_with_its_spread_and_provenance() {
        let cell = &paper_grid(&[128], &[16384], &[MaskKind::Causal], 16384, 2048)[0];
        let spec = KernelSpec::new(fa4_spec::Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        let r = row(
            &spec,
            cell,
            &[1.0, 2.0, 4.0],
            "k",
            "c",
            true,
            "fa4-gen-hopper",
        );
        assert_eq!((r.ms, r.ms_min, r.ms_max, r.runs), (2.0, 1.0, 4.0, 3));
        // 4 b h s^2 d, halved for causal: 16 heads, one sequence of 16384 tokens.
        let flops = 4.0 * 16.0 * 16384f64.powi(2) * 128.0 / 2.0;
        assert!(
            (r.tflops - flops / 2e-3 / 1e12).abs() < 1e-6,
            "{}",
            r.tflops
        );
        let json = serde_json::to_value(&r).unwrap();
        for key in [
            "backend", "hdim", "seqlen", "causal", "ms", "tflops", "commit",
        ] {
            assert!(json.get(key).is_some(), "no {key} in {json}");
        }
        assert_eq!(json["causal"], 1);
        assert!(!r.commit.is_empty());
        assert_eq!(r.commit, env!("FA4_GEN_COMMIT"));
        assert!(json.get("hdim_v").is_none(), "{json}");
    }

    /// DeepSeek-V3's layer: Q and K at 192, V at 128, counted as 2 h s^2 (d + d_v),
    /// its rows naming V's head dim.
    #[test]
    fn the_deepseek_layer_has_its_own_v_head_dim() {
        let cells = model_layers(&["deepseek".to_string()]).unwrap();
        let [cell] = cells[..] else {
            panic!("{cells:?}")
        };
        assert_eq!(
            (cell.head_dim, cell.head_dim_v, cell.heads, cell.heads_kv),
            (192, 128, 16, 16)
        );
        assert!(cell.varlen && cell.mask == MaskKind::Causal);
        let spec = KernelSpec {
            head_dim_v: 128,
            ..KernelSpec::new(fa4_spec::Arch::Sm90, Dtype::Bf16, 192, MaskKind::Causal)
        };
        let r = row(&spec, &cell, &[1.0], "k", "c", true, "fa4-gen-hopper");
        let flops = 2.0 * 4.0 * 16.0 * 4096f64.powi(2) * (192.0 + 128.0) / 2.0;
        assert!(
            (r.tflops - flops / 1e-3 / 1e12).abs() < 1e-6,
            "{}",
            r.tflops
        );
        assert_eq!(serde_json::to_value(&r).unwrap()["hdim_v"], 128);
        // `all` takes it beside the others.
        assert_eq!(model_layers(&["all".to_string()]).unwrap().len(), 4);
    }
}

/// What one prefill call costs the host through the runtime ([`crate::runtime::Runtime`]),
/// and what its first call costs (cubin load).
#[derive(Debug, Clone, Serialize)]
pub struct HostCost {
    pub gpu: String,
    pub driver: String,
    pub problem: String,
    pub kernel: String,
    /// Opening the cache (reading and indexing the manifest).
    pub open_ms: f64,
    /// The first call of a fresh runtime: bind to the context, read, check and load the
    /// cubin, launch.
    pub first_call_ms: f64,
    /// Host time per later call (lookup, checks, `cuLaunchKernel`): median and 90th
    /// percentile over `calls`.
    pub per_call_us: f64,
    pub per_call_p90_us: f64,
    pub calls: usize,
    /// The lookup alone.
    pub select_ns: f64,
    /// Loading every kernel of the device's arch up front (`Runtime::preload`).
    pub preload_ms: f64,
    pub preloaded: usize,
}

/// Measures [`HostCost`] on a small prefill (one sequence of 128 tokens, 16 heads,
/// head dim 128, bf16, causal) whose kernel takes a few microseconds, so the host, not
/// the GPU, is what a call waits on. The stream is synchronised every 64 calls, outside
/// the timed calls, so the launch queue never fills.
pub fn host_cost(gpu: &Gpu, cache_dir: &std::path::Path) -> Result<HostCost, String> {
    use crate::runtime::{KernelCache, PrefillArgs, Runtime};
    use std::time::Instant;

    let err = |e: &dyn std::fmt::Display| e.to_string();
    let (s, h, d) = (128i64, 16i64, 128i64);
    let elems = (s * h * d) as usize;
    let ones = vec![0x3f80u16; elems]; // 1.0 in bf16
    let bufs: Vec<CudaSlice<u16>> = (0..4)
        .map(|_| gpu.to_device(&ones))
        .collect::<Result<_, _>>()
        .map_err(|e| err(&e))?;
    let lse = gpu.alloc::<f32>((h * s) as usize).map_err(|e| err(&e))?;
    let row = h * d;
    let params = FwdParams {
        q: gpu.ptr(&bufs[0]),
        k: gpu.ptr(&bufs[1]),
        v: gpu.ptr(&bufs[2]),
        o: gpu.ptr(&bufs[3]),
        lse: gpu.ptr(&lse),
        q_batch_stride: s * row,
        q_row_stride: row,
        q_head_stride: d,
        k_batch_stride: s * row,
        k_row_stride: row,
        k_head_stride: d,
        v_batch_stride: s * row,
        v_row_stride: row,
        v_head_stride: d,
        o_batch_stride: s * row,
        o_row_stride: row,
        o_head_stride: d,
        batch: 1,
        seqlen_q: s as i32,
        seqlen_k: s as i32,
        heads_q: h as i32,
        heads_kv: h as i32,
        softmax_scale: 1.0 / (d as f32).sqrt(),
        window_left: -1,
        window_right: -1,
        lse_batch_stride: h * s,
        lse_head_stride: s,
        ..FwdParams::default()
    };
    let args = PrefillArgs {
        dtype: Dtype::Bf16,
        head_dim: d as u32,
        head_dim_v: d as u32,
        causal: true,
        params,
        split: None,
    };
    let stream = gpu.stream().cu_stream();

    let t = Instant::now();
    let cache = KernelCache::open(cache_dir).map_err(|e| err(&e))?;
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let runtime = Runtime::new(cache);
    let t = Instant::now();
    // SAFETY (both calls): the buffers above hold the problem and outlive the launches
    // (the stream is synchronised before they are freed); the stream is the context's.
    let launched = unsafe { runtime.prefill(&args, stream) }.map_err(|e| err(&e))?;
    let first_call_ms = t.elapsed().as_secs_f64() * 1e3;
    let kernel = launched.kernel.to_string();
    gpu.synchronize().map_err(|e| err(&e))?;

    let calls = 5000;
    let mut times = Vec::with_capacity(calls);
    for i in 0..calls {
        let t = Instant::now();
        unsafe { runtime.prefill(&args, stream) }.map_err(|e| err(&e))?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
        if i % 64 == 63 {
            gpu.synchronize().map_err(|e| err(&e))?;
        }
    }
    gpu.synchronize().map_err(|e| err(&e))?;
    times.sort_by(|a, b| a.total_cmp(b));

    let device = runtime.device().map_err(|e| err(&e))?;
    let (query, _) = args.resolve(device.arch);
    let n = 100_000;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(runtime.cache().select(std::hint::black_box(&query)).is_ok());
    }
    let select_ns = t.elapsed().as_secs_f64() * 1e9 / n as f64;

    let fresh = Runtime::new(KernelCache::open(cache_dir).map_err(|e| err(&e))?);
    let t = Instant::now();
    let preloaded = fresh.preload().map_err(|e| err(&e))?;
    let preload_ms = t.elapsed().as_secs_f64() * 1e3;

    Ok(HostCost {
        gpu: gpu.info.name.clone(),
        driver: gpu.info.driver.clone(),
        problem: format!("bf16 d{d} causal, 1 x {s} tokens, {h} heads"),
        kernel,
        open_ms,
        first_call_ms,
        per_call_us: times[calls / 2],
        per_call_p90_us: times[calls * 9 / 10],
        calls,
        select_ns,
        preload_ms,
        preloaded,
    })
}
