//! Checking kernels on the GPU against a plain f32 reference.
//!
//! For every kernel and every case: fresh random inputs (a seed per case, printed, so a
//! failure can be replayed with `--seed`), the output poisoned with NaN where the kernel
//! must write and a guard pattern everywhere else (padding between rows, a tail), the
//! kernel run, then on the device: relative L2 error of O, max error of LSE, NaN and
//! unwritten cells, and any guard cell changed (a stray write). NaN never passes.

use std::path::Path;

use cudarc::driver::{CudaSlice, PushKernelArg};
use fa4_spec::{fnv1a64, Arch, Dtype, FwdParams, KernelSpec, MaskKind};
use serde::Serialize;

use crate::compile::{BuildDir, BuiltKernel};
use crate::fsutil::write_atomic;
use crate::gpu::{driver, FwdKernel, Gpu, GpuError, ParamsArg};
use crate::render::nvrtc_options;
use crate::templates::TemplateSet;

/// Source of the checking kernels, under `templates/`.
pub const SUPPORT_SOURCE: &str = "reference/verify.cu";

const O_POISON: u32 = 0xffff; // NaN in bf16 and in fp16
const O_GUARD: u32 = 0x5a5a;
const LSE_POISON: u32 = 0x7fc0_0000; // f32 NaN
const LSE_GUARD: u32 = 0x5a5a_5a5a;
const TAIL_GUARD: usize = 4096;

/// Error bounds. bf16 peers land at 2-3e-3 relative L2 on random inputs; fp16 carries
/// three more mantissa bits.
pub fn o_tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Bf16 => 4e-3,
        Dtype::Fp16 => 1e-3,
    }
}
/// LSE is computed from f32 scores on both sides; only summation order differs.
pub const LSE_TOLERANCE: f64 = 1e-3;

/// One problem shape to check.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    pub name: String,
    pub batch: i32,
    pub seqlen_q: i32,
    pub seqlen_k: i32,
    pub heads_q: i32,
    pub heads_kv: i32,
    /// Extra elements at the end of every token row of Q, K, V and O (a strided layout).
    pub row_pad: i64,
    /// Sliding window (left, right) for local-mask kernels (-1: unbounded).
    pub window: (i32, i32),
    /// Soft-capping value for softcap kernels.
    pub softcap: f32,
    /// Also time this case.
    pub timed: bool,
}

impl Case {
    fn new(
        name: &str,
        batch: i32,
        seqlen_q: i32,
        seqlen_k: i32,
        heads_q: i32,
        heads_kv: i32,
    ) -> Self {
        Case {
            name: name.to_string(),
            batch,
            seqlen_q,
            seqlen_k,
            heads_q,
            heads_kv,
            row_pad: 0,
            window: (-1, -1),
            softcap: VERIFY_SOFTCAP,
            timed: false,
        }
    }

    fn window(self, left: i32, right: i32) -> Self {
        Case {
            window: (left, right),
            ..self
        }
    }
}

/// A small cap, so that tanh bends most scores of random inputs.
const VERIFY_SOFTCAP: f32 = 1.5;

/// Device addresses of one problem's tensors (`sinks` is 0 for kernels without sinks).
#[derive(Debug, Clone, Copy)]
pub struct TensorPtrs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,
    pub sinks: u64,
}

impl TensorPtrs {
    /// The addresses of a problem's buffers; `sinks` only when the kernel reads them.
    pub fn of(
        gpu: &Gpu,
        [q, k, v, o]: [&CudaSlice<u16>; 4],
        lse: &CudaSlice<f32>,
        sinks: Option<&CudaSlice<f32>>,
    ) -> Self {
        TensorPtrs {
            q: gpu.ptr(q),
            k: gpu.ptr(k),
            v: gpu.ptr(v),
            o: gpu.ptr(o),
            lse: gpu.ptr(lse),
            sinks: sinks.map_or(0, |s| gpu.ptr(s)),
        }
    }
}

impl Case {
    /// Kernel arguments for this case's tensors, laid out `[batch, seqlen, heads,
    /// head_dim]` with `row_pad` extra elements after every token row; softmax scale
    /// 1/sqrt(head_dim); the window and the cap where the spec uses them.
    pub fn params(&self, spec: &KernelSpec, t: TensorPtrs) -> FwdParams {
        let (d, dv) = (i64::from(spec.head_dim), i64::from(spec.head_dim_v));
        let (sq, sk) = (i64::from(self.seqlen_q), i64::from(self.seqlen_k));
        let (hq, hkv) = (i64::from(self.heads_q), i64::from(self.heads_kv));
        let q_row = hq * d + self.row_pad;
        let k_row = hkv * d + self.row_pad;
        let v_row = hkv * dv + self.row_pad;
        let o_row = hq * dv + self.row_pad;
        let scale = 1.0 / (d as f32).sqrt();
        FwdParams {
            q: t.q,
            k: t.k,
            v: t.v,
            o: t.o,
            lse: t.lse,
            q_batch_stride: sq * q_row,
            q_row_stride: q_row,
            q_head_stride: d,
            k_batch_stride: sk * k_row,
            k_row_stride: k_row,
            k_head_stride: d,
            v_batch_stride: sk * v_row,
            v_row_stride: v_row,
            v_head_stride: dv,
            o_batch_stride: sq * o_row,
            o_row_stride: o_row,
            o_head_stride: dv,
            batch: self.batch,
            seqlen_q: self.seqlen_q,
            seqlen_k: self.seqlen_k,
            heads_q: self.heads_q,
            heads_kv: self.heads_kv,
            softmax_scale: scale,
            scale_log2: scale * std::f32::consts::LOG2_E,
            window_left: if spec.mask == MaskKind::Local {
                self.window.0
            } else {
                -1
            },
            window_right: if spec.mask == MaskKind::Local {
                self.window.1
            } else {
                -1
            },
            softcap: if spec.features.softcap {
                self.softcap
            } else {
                0.0
            },
            sinks: t.sinks,
        }
    }

    /// (query, key) pairs the mask leaves visible, summed over rows.
    pub fn visible_pairs(&self, mask: MaskKind) -> f64 {
        let (sq, sk) = (i64::from(self.seqlen_q), i64::from(self.seqlen_k));
        let (left, right) = (i64::from(self.window.0), i64::from(self.window.1));
        let per_row = |i: i64| -> i64 {
            let diag = i + sk - sq;
            let (lo, hi) = match mask {
                MaskKind::None => (0, sk),
                MaskKind::Causal => (0, (diag + 1).clamp(0, sk)),
                MaskKind::Local => (
                    if left < 0 {
                        0
                    } else {
                        (diag - left).clamp(0, sk)
                    },
                    if right < 0 {
                        sk
                    } else {
                        (diag + right + 1).clamp(0, sk)
                    },
                ),
            };
            (hi - lo).max(0)
        };
        (0..sq).map(per_row).sum::<i64>() as f64
    }
}

/// The standard cases: lengths 1, 17, 128, 1000, 4096; seqlen_q != seqlen_k both ways
/// (a cached prefix, and more queries than keys, which leaves causal rows with nothing to
/// see); a query without keys; GQA and MQA; a strided layout. Local-mask kernels see a
/// different window in each (both sides, one side, none, and empty rows).
pub fn standard_cases() -> Vec<Case> {
    let mut cases = vec![
        Case::new("s1", 2, 1, 1, 4, 4).window(0, 0),
        Case::new("s17", 2, 17, 17, 4, 4).window(3, 2),
        Case::new("s128", 2, 128, 128, 4, 4).window(16, 0),
        Case::new("s1000", 1, 1000, 1000, 4, 4).window(100, 50),
        Case {
            timed: true,
            ..Case::new("s4096", 2, 4096, 4096, 8, 8).window(128, 0)
        },
        Case::new("q77_k513", 2, 77, 513, 4, 4).window(64, 8),
        Case::new("q300_k64", 2, 300, 64, 4, 4).window(10, 10),
        Case::new("q1_k1000", 3, 1, 1000, 4, 4).window(200, -1),
        Case::new("q5_k0", 1, 5, 0, 2, 2).window(4, 4),
        Case::new("gqa8to2_s257", 1, 257, 257, 8, 2).window(-1, 0),
    ];
    cases.push(Case {
        row_pad: 24,
        ..Case::new("mqa4to1_q200_k333_strided", 2, 200, 333, 4, 1).window(50, -1)
    });
    cases
}

/// The verdict on one (kernel, case).
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub kernel: String,
    pub spec: KernelSpec,
    pub case: Case,
    pub seed: u64,
    pub o_rel_l2: f64,
    pub o_max_abs: f64,
    pub lse_max_abs: f64,
    pub o_nan_or_unwritten: u64,
    pub o_guard_changed: u64,
    pub lse_nan: u64,
    pub lse_inf_mismatch: u64,
    pub lse_guard_changed: u64,
    /// Median milliseconds, for timed cases.
    pub ms: Option<f64>,
    pub tflops: Option<f64>,
    pub passed: bool,
    pub failure: Option<String>,
}

/// The checking kernels, loaded.
pub struct Support {
    _module: std::sync::Arc<cudarc::driver::CudaModule>,
    fill_normal: cudarc::driver::CudaFunction,
    fill_output: cudarc::driver::CudaFunction,
    fill_u32: cudarc::driver::CudaFunction,
    reference: cudarc::driver::CudaFunction,
    compare_output: cudarc::driver::CudaFunction,
    compare_lse: cudarc::driver::CudaFunction,
}

/// Build-folder path of the checking kernels' cubin; its name carries the hash of the
/// source, headers and flags, so a stale one is never picked up.
pub fn support_cubin_rel(templates: &TemplateSet, arch: Arch) -> String {
    let hash = templates.template_hash(SUPPORT_SOURCE).unwrap_or_default();
    let tag = fnv1a64(format!("{hash}{}", nvrtc_options(arch).join(" ")).as_bytes());
    format!("cubin/{arch}/fa4_verify_{:010x}.cubin", tag >> 24)
}

/// Compiles the checking kernels for `arch` into the build folder (if not already there).
pub fn build_support(
    nvrtc: &crate::compile::Nvrtc,
    templates: &TemplateSet,
    dir: &BuildDir,
    arch: Arch,
) -> Result<std::path::PathBuf, String> {
    let path = dir.path(&support_cubin_rel(templates, arch));
    if path.is_file() {
        return Ok(path);
    }
    let source = templates
        .get(SUPPORT_SOURCE)
        .ok_or("verify.cu missing from the templates")?;
    let headers: Vec<(&str, &str)> = templates.headers().collect();
    let out = nvrtc
        .compile(SUPPORT_SOURCE, source, &headers, &nvrtc_options(arch))
        .map_err(|e| e.to_string())?
        .map_err(|f| f.to_string())?;
    write_atomic(&path, &out.cubin).map_err(|e| e.to_string())?;
    Ok(path)
}

impl Support {
    /// Fills `buf` with standard normal samples in the dtype (bf16 or fp16).
    pub fn fill_normal(
        &self,
        gpu: &Gpu,
        buf: &CudaSlice<u16>,
        seed: u64,
        bf16: bool,
    ) -> Result<(), GpuError> {
        let n = buf.len() as u64;
        let is_bf16 = bf16 as i32;
        // SAFETY: fill_normal(u16*, u64, u64, int) over a buffer of n elements.
        unsafe {
            gpu.stream()
                .launch_builder(&self.fill_normal)
                .arg(buf)
                .arg(&n)
                .arg(&seed)
                .arg(&is_bf16)
                .launch(grid_for(buf.len()))
        }
        .map(|_| ())
        .map_err(driver("cuLaunchKernel(fill_normal)"))
    }

    pub fn load(gpu: &Gpu, cubin: &[u8]) -> Result<Self, GpuError> {
        let module = gpu.load_module(cubin)?;
        let f = |name: &str| gpu.function(&module, name, 0);
        Ok(Support {
            fill_normal: f("fill_normal")?,
            fill_output: f("fill_output_pattern")?,
            fill_u32: f("fill_u32")?,
            reference: f("reference_attention")?,
            compare_output: f("compare_output")?,
            compare_lse: f("compare_lse")?,
            _module: module,
        })
    }
}

fn grid_for(n: usize) -> cudarc::driver::LaunchConfig {
    cudarc::driver::LaunchConfig {
        grid_dim: ((n.div_ceil(256)).clamp(1, 4096) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Checks one kernel on one case.
pub fn run_case(
    gpu: &Gpu,
    support: &Support,
    kernel: &FwdKernel,
    built: &BuiltKernel,
    case: &Case,
    seed: u64,
) -> Result<CaseResult, GpuError> {
    let spec = built.candidate.spec;
    let (d, dv) = (spec.head_dim as i64, spec.head_dim_v as i64);
    let (b, sq, sk) = (
        case.batch as i64,
        case.seqlen_q as i64,
        case.seqlen_k as i64,
    );
    let (hq, hkv) = (case.heads_q as i64, case.heads_kv as i64);
    let is_bf16 = (spec.dtype == Dtype::Bf16) as i32;
    let mask_kind = match spec.mask {
        MaskKind::None => 0i32,
        MaskKind::Causal => 1,
        MaskKind::Local => 2,
    };

    let q_row = hq * d + case.row_pad;
    let k_row = hkv * d + case.row_pad;
    let v_row = hkv * dv + case.row_pad;
    let o_row = hq * dv + case.row_pad;
    let q_len = (b * sq * q_row) as usize;
    let k_len = (b * sk * k_row) as usize;
    let v_len = (b * sk * v_row) as usize;
    let o_len = (b * sq * o_row) as usize + TAIL_GUARD;
    let lse_n = (b * hq * sq) as usize;
    let lse_len = lse_n + TAIL_GUARD;

    let q = gpu.alloc::<u16>(q_len)?;
    let k = gpu.alloc::<u16>(k_len)?;
    let v = gpu.alloc::<u16>(v_len)?;
    let o = gpu.alloc::<u16>(o_len)?;
    let lse = gpu.alloc::<f32>(lse_len)?;
    let o_ref = gpu.alloc::<f32>((b * sq * hq * dv) as usize)?;
    let lse_ref = gpu.alloc::<f32>(lse_n)?;
    let sums = gpu.to_device(&[0f64; 2])?;
    let counts = gpu.to_device(&[0u64; 5])?;
    let maxima = gpu.to_device(&[0u32; 2])?;
    let stream = gpu.stream();

    // Inputs: a different stream of samples per tensor.
    for (i, buf) in [&q, &k, &v].into_iter().enumerate() {
        let tensor_seed = seed ^ (0x1234_5678_9abc_def1u64.wrapping_mul(i as u64 + 1));
        support.fill_normal(gpu, buf, tensor_seed, is_bf16 == 1)?;
    }
    let (o_alloc, o_rows, o_stride, o_elems) = (
        o_len as u64,
        (b * sq) as u64,
        o_row as u64,
        (hq * dv) as u64,
    );
    // SAFETY: argument list matches fill_output_pattern's signature; the buffer holds o_alloc elements.
    unsafe {
        stream
            .launch_builder(&support.fill_output)
            .arg(&o)
            .arg(&o_alloc)
            .arg(&o_rows)
            .arg(&o_stride)
            .arg(&o_elems)
            .arg(&O_POISON)
            .arg(&O_GUARD)
            .launch(grid_for(o_len))
    }
    .map_err(driver("cuLaunchKernel(fill_output_pattern)"))?;
    let (lse_alloc, lse_logical) = (lse_len as u64, lse_n as u64);
    // SAFETY: fill_u32(u32*, u64, u64, u32, u32) over lse_alloc elements.
    unsafe {
        stream
            .launch_builder(&support.fill_u32)
            .arg(&lse)
            .arg(&lse_alloc)
            .arg(&lse_logical)
            .arg(&LSE_POISON)
            .arg(&LSE_GUARD)
            .launch(grid_for(lse_len))
    }
    .map_err(driver("cuLaunchKernel(fill_u32)"))?;

    // Sink logits in [-2, 6]: from below to well above the typical row max, so they
    // take anything from nothing to most of the denominator.
    let sink_values: Vec<f32> = (0..hq as u64)
        .map(|h| {
            -2.0 + 8.0
                * ((fnv1a64(format!("{seed}/sink/{h}").as_bytes()) >> 40) as f32
                    / (1u64 << 24) as f32)
        })
        .collect();
    let sinks = gpu.to_device(&sink_values)?;
    let params = case.params(
        &spec,
        TensorPtrs::of(
            gpu,
            [&q, &k, &v, &o],
            &lse,
            spec.features.sinks.then_some(&sinks),
        ),
    );

    // Reference.
    if b > 0 && sq > 0 {
        let smem = ((32 + d + sk) * 4) as u32;
        let reference = &support.reference;
        if smem > 48 * 1024 {
            reference
                .set_attribute(
                    cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )
                .map_err(driver("cuFuncSetAttribute"))?;
        }
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (sq as u32, hq as u32, b as u32),
            block_dim: (128, 1, 1),
            shared_mem_bytes: smem,
        };
        let arg = ParamsArg(params);
        let (hd, hdv) = (d as i32, dv as i32);
        // SAFETY: reference_attention(FwdParams, int is_bf16, int mask_kind, int, int,
        // float*, float*);
        // o_ref and lse_ref hold b*sq*hq*dv and b*hq*sq floats.
        unsafe {
            stream
                .launch_builder(reference)
                .arg(&arg)
                .arg(&is_bf16)
                .arg(&mask_kind)
                .arg(&hd)
                .arg(&hdv)
                .arg(&o_ref)
                .arg(&lse_ref)
                .launch(cfg)
        }
        .map_err(driver("cuLaunchKernel(reference_attention)"))?;
    }

    // The kernel under test.
    kernel.launch(gpu, &params)?;
    gpu.synchronize()?;

    // Compare.
    let arg = ParamsArg(params);
    let hdv = dv as i32;
    // SAFETY: compare_output's signature; buffers sized as above.
    unsafe {
        stream
            .launch_builder(&support.compare_output)
            .arg(&arg)
            .arg(&is_bf16)
            .arg(&hdv)
            .arg(&o_ref)
            .arg(&o_alloc)
            .arg(&O_GUARD)
            .arg(&sums)
            .arg(&counts)
            .arg(&maxima)
            .launch(grid_for(o_len))
    }
    .map_err(driver("cuLaunchKernel(compare_output)"))?;
    // SAFETY: compare_lse's signature; buffers sized as above.
    unsafe {
        stream
            .launch_builder(&support.compare_lse)
            .arg(&lse)
            .arg(&lse_ref)
            .arg(&lse_logical)
            .arg(&lse_alloc)
            .arg(&LSE_GUARD)
            .arg(&counts)
            .arg(&maxima)
            .launch(grid_for(lse_len))
    }
    .map_err(driver("cuLaunchKernel(compare_lse)"))?;
    let sums = gpu.to_host(&sums)?;
    let counts = gpu.to_host(&counts)?;
    let maxima = gpu.to_host(&maxima)?;

    let o_rel_l2 = if sums[1] > 0.0 {
        (sums[0] / sums[1]).sqrt()
    } else {
        sums[0].sqrt()
    };
    let mut result = CaseResult {
        kernel: built.id.0.clone(),
        spec,
        case: case.clone(),
        seed,
        o_rel_l2,
        o_max_abs: f32::from_bits(maxima[0]) as f64,
        lse_max_abs: f32::from_bits(maxima[1]) as f64,
        o_nan_or_unwritten: counts[0],
        o_guard_changed: counts[1],
        lse_nan: counts[2],
        lse_inf_mismatch: counts[3],
        lse_guard_changed: counts[4],
        ms: None,
        tflops: None,
        passed: false,
        failure: None,
    };
    result.failure = judge(&result);
    result.passed = result.failure.is_none();

    if case.timed && result.passed {
        let times = gpu.time_ms(3, 20, || kernel.launch(gpu, &params))?;
        let ms = times[times.len() / 2];
        let flops = attention_flops(&spec, case);
        result.ms = Some(ms);
        result.tflops = Some(flops / (ms * 1e-3) / 1e12);
    }
    Ok(result)
}

/// FLOPs by FlashAttention's convention: 2·b·h·s_q·s_k·(d + d_v), halved when causal
/// (the exact count of visible pairs differs slightly for s_q != s_k; the convention
/// keeps figures comparable with every peer's). A sliding window counts the pairs it
/// leaves: the work a kernel must do, not the square it skips.
pub fn attention_flops(spec: &KernelSpec, case: &Case) -> f64 {
    let heads = case.batch as f64 * case.heads_q as f64;
    let per_pair = 2.0 * (spec.head_dim + spec.head_dim_v) as f64;
    match spec.mask {
        MaskKind::None => heads * case.seqlen_q as f64 * case.seqlen_k as f64 * per_pair,
        MaskKind::Causal => heads * case.seqlen_q as f64 * case.seqlen_k as f64 * per_pair / 2.0,
        MaskKind::Local => heads * case.visible_pairs(MaskKind::Local) * per_pair,
    }
}

fn judge(r: &CaseResult) -> Option<String> {
    let tol = o_tolerance(r.spec.dtype);
    let mut why = Vec::new();
    if r.o_nan_or_unwritten > 0 {
        why.push(format!("{} O cells NaN or unwritten", r.o_nan_or_unwritten));
    }
    if r.o_guard_changed > 0 {
        why.push(format!("{} cells outside O written", r.o_guard_changed));
    }
    if r.lse_nan > 0 {
        why.push(format!("{} LSE NaN or unwritten", r.lse_nan));
    }
    if r.lse_inf_mismatch > 0 {
        why.push(format!("{} LSE -inf mismatches", r.lse_inf_mismatch));
    }
    if r.lse_guard_changed > 0 {
        why.push(format!("{} cells outside LSE written", r.lse_guard_changed));
    }
    if r.o_rel_l2.is_nan() || r.o_rel_l2 > tol {
        why.push(format!(
            "O relative L2 error {:.2e} > {tol:.0e}",
            r.o_rel_l2
        ));
    }
    if r.lse_max_abs.is_nan() || r.lse_max_abs > LSE_TOLERANCE {
        why.push(format!(
            "LSE max error {:.2e} > {LSE_TOLERANCE:.0e}",
            r.lse_max_abs
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Everything a verify run produced, as written with `--json`.
#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub date: String,
    pub commit: String,
    pub device: crate::gpu::DeviceInfo,
    pub results: Vec<CaseResult>,
}

pub fn write_json(path: &Path, report: &VerifyReport) -> Result<(), crate::fsutil::WriteError> {
    write_atomic(
        path,
        (serde_json::to_string_pretty(report).expect("serialises") + "\n").as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(spec: KernelSpec) -> CaseResult {
        CaseResult {
            kernel: "k".into(),
            spec,
            case: Case::new("c", 1, 1, 1, 1, 1),
            seed: 0,
            o_rel_l2: 2.5e-3,
            o_max_abs: 0.01,
            lse_max_abs: 1e-6,
            o_nan_or_unwritten: 0,
            o_guard_changed: 0,
            lse_nan: 0,
            lse_inf_mismatch: 0,
            lse_guard_changed: 0,
            ms: None,
            tflops: None,
            passed: false,
            failure: None,
        }
    }

    #[test]
    fn judge_applies_the_bounds() {
        let bf16 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
        assert_eq!(judge(&result(bf16)), None);
        let fp16 = KernelSpec {
            dtype: Dtype::Fp16,
            ..bf16
        };
        assert!(judge(&result(fp16))
            .unwrap()
            .contains("O relative L2 error 2.50e-3 > 1e-3"));
        let mut r = result(bf16);
        r.o_rel_l2 = f64::NAN;
        assert!(judge(&r).is_some(), "NaN never passes");
        let mut r = result(bf16);
        r.o_guard_changed = 3;
        r.o_nan_or_unwritten = 1;
        let why = judge(&r).unwrap();
        assert!(
            why.contains("3 cells outside O written") && why.contains("1 O cells NaN"),
            "{why}"
        );
    }

    #[test]
    fn flops_follow_the_convention() {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
        let case = Case::new("x", 2, 1024, 1024, 16, 16);
        assert_eq!(
            attention_flops(&spec, &case),
            4.0 * 2.0 * 16.0 * 1024.0 * 1024.0 * 128.0
        );
        let causal = KernelSpec {
            mask: MaskKind::Causal,
            ..spec
        };
        assert_eq!(
            attention_flops(&causal, &case),
            attention_flops(&spec, &case) / 2.0
        );
    }

    #[test]
    fn visible_pairs_follow_the_masks() {
        // 4 queries, 6 keys: the diagonal of query i is key i + 2.
        let case = Case::new("x", 1, 4, 6, 1, 1).window(1, 0);
        assert_eq!(case.visible_pairs(MaskKind::None), 24.0);
        assert_eq!(case.visible_pairs(MaskKind::Causal), (3 + 4 + 5 + 6) as f64);
        // Keys diag-1 ..= diag: two each.
        assert_eq!(case.visible_pairs(MaskKind::Local), 8.0);
        // More queries than keys with a window: early rows see nothing.
        let case = Case::new("y", 1, 6, 2, 1, 1).window(0, 0);
        assert_eq!(case.visible_pairs(MaskKind::Local), 2.0);
        let unbounded = Case::new("z", 1, 4, 6, 1, 1).window(-1, -1);
        assert_eq!(unbounded.visible_pairs(MaskKind::Local), 24.0);
    }

    #[test]
    fn standard_cases_cover_the_issue_list() {
        let cases = standard_cases();
        for s in [1, 17, 128, 1000, 4096] {
            assert!(
                cases.iter().any(|c| c.seqlen_q == s && c.seqlen_k == s),
                "seqlen {s}"
            );
        }
        assert!(cases.iter().any(|c| c.seqlen_q < c.seqlen_k));
        assert!(cases.iter().any(|c| c.seqlen_q > c.seqlen_k));
        assert!(cases.iter().any(|c| c.heads_q != c.heads_kv));
        assert!(cases.iter().any(|c| c.row_pad > 0));
        assert!(cases.iter().any(|c| c.timed));
        assert!(cases.iter().any(|c| c.window.0 >= 0 && c.window.1 >= 0));
        assert!(cases.iter().any(|c| c.window.0 < 0 || c.window.1 < 0));
    }
}
