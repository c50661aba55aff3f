//! The host's cost of a prefill call through the runtime.

use cudarc::driver::CudaSlice;
use fa4_spec::{Dtype, FwdParams};
use serde::Serialize;

use crate::measure::gpu::Gpu;

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
        descale: Default::default(),
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
