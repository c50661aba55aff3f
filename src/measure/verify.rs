//! Checking kernels on the GPU against a plain f32 reference.
//!
//! For every kernel and every case: fresh random inputs (a seed per case, printed, so a
//! failure can be replayed with `--seed`), the output poisoned with NaN where the kernel
//! must write and a guard pattern everywhere else (padding between rows, a tail), the
//! kernel run, then on the device: relative L2 error of O, max error of LSE, NaN and
//! unwritten cells, and any guard cell changed (a stray write). NaN never passes.

use std::path::Path;

use cudarc::driver::PushKernelArg;
use fa4_spec::{Dtype, KernelSpec, MaskKind};
use serde::Serialize;

use crate::compile::BuiltKernel;
use crate::fsutil::write_atomic;
use crate::measure::gpu::{driver, DescalesArg, FwdKernel, Gpu, GpuError, ParamsArg};
use crate::measure::problems::Problem;
pub use crate::measure::problems::{attention_flops, Case, Fp8Inputs};
use crate::measure::support::{grid_for, Support};
use fa4_runtime::{launch_grid, split_tail, SPLIT_COUNTER_BYTES};

const O_POISON: u32 = 0xffff; // NaN in bf16 and in fp16 (O of e4m3 kernels is bf16)
const O_GUARD: u32 = 0x5a5a;
const LSE_POISON: u32 = 0x7fc0_0000; // f32 NaN
const LSE_GUARD: u32 = 0x5a5a_5a5a;

/// Error bounds. bf16 peers land at 2-3e-3 relative L2 on random inputs; fp16 carries
/// three more mantissa bits. e4m3 inputs carry three mantissa bits and the kernels'
/// P goes to the PV product in e4m3 too: the bar on N(0,1) inputs.
pub fn o_tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Bf16 => 4e-3,
        Dtype::Fp16 => 1e-3,
        Dtype::E4m3 => 3e-2,
    }
}

/// The reference kernel's code for Q, K and V's dtype (`reference_attention`'s `dtype`).
fn reference_dtype(dtype: Dtype) -> i32 {
    match dtype {
        Dtype::Fp16 => 0,
        Dtype::Bf16 => 1,
        Dtype::E4m3 => 2,
    }
}
/// LSE is computed from f32 scores on both sides; only summation order differs.
pub const LSE_TOLERANCE: f64 = 1e-3;

/// How far a kernel's LSE may sit from the reference's: `abs`, plus, with `fp8_slack`,
/// each row's FP8 accumulation slack (the reference kernel's: 2^-8 x scale x the largest
/// sum over k32 steps of max|q| x max|k|).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LseBound {
    pub abs: f64,
    pub fp8_slack: bool,
}

/// The LSE bound per dtype. FP8's scores come from the tensor cores' FP8 products, which
/// Hopper sums per k32 step at about 13 bits below the step's largest product and
/// truncates the rest: a row's scores, and so its LSE, move together by up to 2^-8 of
/// the steps' largest products (1e-5 to 2.5e-3 on N(0,1) inputs with descales up to 2;
/// up to 7e-2 on verify's outlier cases, one channel x 20 in each k32 step; 0.39 and 0.64
/// on fa4gen.check's, four channels x 20 anywhere; H100). So e4m3 rows get that slack
/// beside 3e-2, as in fa4gen.check; a descale or mask gone wrong moves the LSE by whole
/// units.
pub fn lse_bound(dtype: Dtype) -> LseBound {
    match dtype {
        Dtype::Bf16 | Dtype::Fp16 => LseBound {
            abs: LSE_TOLERANCE,
            fp8_slack: false,
        },
        Dtype::E4m3 => LseBound {
            abs: 3e-2,
            fp8_slack: true,
        },
    }
}

/// The standard cases: lengths 1, 17, 128, 1000, 4096; seqlen_q != seqlen_k both ways
/// (a cached prefix, and more queries than keys, which leaves causal rows with nothing to
/// see); a query without keys; GQA and MQA; a strided layout; varlen batches with empty
/// sequences, ragged lengths and prefixes; a gpt-oss-20b layer (64 query heads on 8 KV
/// heads, window 128) and a Llama-3-8B layer (32 on 8); two shapes whose unmasked
/// persistent grids split their last tiles by keys; Gemma-2's cap (50) and one past
/// the 51.9 up to which soft-capped kernels may fix their exponent offset by the cap
/// (`capoffset`; past it they take the max-offset path). Local-mask kernels see a
/// different window in each (both sides, one side, none, and empty rows); paged kernels a
/// different page size (1 key per page, SGLang's default, to 256, and sizes that are
/// and are not multiples of the key tile); e4m3 kernels outlier channels in two cases
/// and null descales in one (all of them among the tuner's checks).
pub fn standard_cases() -> Vec<Case> {
    vec![
        Case::new("s1", 2, 1, 1, 4, 4).window(0, 0).page_size(1),
        Case::new("s17", 2, 17, 17, 4, 4).window(3, 2).page_size(1),
        Case::new("s128", 2, 128, 128, 4, 4)
            .window(16, 0)
            .page_size(256),
        Case::new("s1000", 1, 1000, 1000, 4, 4)
            .window(100, 50)
            .page_size(64),
        Case {
            timed: true,
            ..Case::new("s4096", 2, 4096, 4096, 8, 8)
                .window(128, 0)
                .page_size(128)
        },
        Case::new("q77_k513", 2, 77, 513, 4, 4)
            .window(64, 8)
            .page_size(1)
            .fp8(Fp8Inputs::Outliers),
        Case::new("q300_k64", 2, 300, 64, 4, 4)
            .window(10, 10)
            .page_size(32),
        Case::new("q1_k1000", 3, 1, 1000, 4, 4)
            .window(200, -1)
            .page_size(256),
        Case::new("q5_k0", 1, 5, 0, 2, 2).window(4, 4),
        Case::new("cap50_s700_gqa2to1", 2, 700, 700, 4, 2)
            .window(256, 0)
            .page_size(64)
            .softcap(50.0),
        Case::new("cap100_q96_k400", 2, 96, 400, 4, 4)
            .window(100, 10)
            .page_size(1)
            .softcap(100.0),
        // Many short sequences over few heads: causal grids of more z than x.
        Case::new("b9_s200_gqa2to1", 9, 200, 200, 2, 1)
            .window(40, 0)
            .page_size(16),
        Case::new("gqa8to2_s257", 1, 257, 257, 8, 2)
            .window(-1, 0)
            .fp8(Fp8Inputs::NullDescales),
        // More tiles than a persistent grid's blocks, the last round part-full, 4096 keys
        // or more: unmasked persistent kernels split the tail by keys (a partial last key
        // block in both; pack-GQA rows in the second).
        Case::new("split_q2200_k4100", 1, 2200, 4100, 16, 16)
            .window(300, 0)
            .page_size(64),
        Case::new("split_gqa4to1_q2600_k4400", 1, 2600, 4400, 8, 2)
            .window(500, 20)
            .page_size(16),
        Case {
            row_pad: 24,
            ..Case::new("mqa4to1_q200_k333_strided", 2, 200, 333, 4, 1)
                .window(50, -1)
                .page_size(48)
        },
        Case::varlen(
            "varlen_ragged",
            &[(0, 0), (1, 1), (77, 77), (513, 513), (2048, 2048), (3, 0)],
            4,
            2,
        )
        .window(32, 0)
        .page_size(1),
        Case::varlen(
            "varlen_prefix",
            &[(16, 1040), (1, 300), (200, 200), (0, 64), (128, 2100)],
            8,
            1,
        )
        .window(300, 0)
        .page_size(16)
        .fp8(Fp8Inputs::Outliers),
        // More sequences than a warp scans at once (VarlenTiles), of every shape a
        // serving batch has: empty, one token, a chunk behind a cached prefix.
        Case::varlen(
            "varlen_40seqs_gqa4to1",
            &(0..40)
                .map(|i| {
                    let q = [0, 1, 37, 129, 300, 64, 700, 5][i % 8];
                    (q, q + [0, 0, 500, 17][i % 4])
                })
                .collect::<Vec<_>>(),
            8,
            2,
        )
        .window(100, 0)
        .page_size(16),
        Case::varlen(
            "gptoss20b_layer",
            &[(1024, 1024), (77, 77), (513, 513), (60, 700)],
            64,
            8,
        )
        .window(128, 0)
        .page_size(64),
        Case {
            row_pad: 8,
            ..Case::varlen("llama3_8b_layer", &[(2048, 2048), (300, 1324)], 32, 8)
                .window(-1, 0)
                .page_size(256)
        },
    ]
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
    /// The largest LSE error beyond the row's FP8 slack (`lse_bound`); equal to
    /// `lse_max_abs` for 16-bit inputs.
    #[serde(default)]
    pub lse_max_excess: f64,
    pub o_nan_or_unwritten: u64,
    pub o_guard_changed: u64,
    pub lse_nan: u64,
    pub lse_inf_mismatch: u64,
    pub lse_guard_changed: u64,
    /// Tiles of the launch's split tail (`gpu::split_tail`; 0: none), and the counters
    /// of its workspace left non-zero after the run (each launch must clear them).
    #[serde(default)]
    pub split_tiles: i32,
    #[serde(default)]
    pub split_counters_left: u64,
    /// Median milliseconds, for timed cases.
    pub ms: Option<f64>,
    pub tflops: Option<f64>,
    pub passed: bool,
    pub failure: Option<String>,
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
    let (hq, sk) = (case.heads_q as i64, case.seqlen_k as i64);
    let input_dtype = reference_dtype(spec.dtype);
    // O is compared in the kernel's output dtype (bf16 for e4m3 inputs).
    let o_is_bf16 = (spec.dtype.output() == Dtype::Bf16) as i32;
    let mask_kind = match spec.mask {
        MaskKind::None => 0i32,
        MaskKind::Causal => 1,
        MaskKind::Local => 2,
    };

    let problem = Problem::new(gpu, support, &spec, case, seed)?;
    let layout = problem.layout;
    let params = problem.params;
    let launch_args = problem.launch_args();
    let o_ref = gpu.alloc::<f32>((layout.rows * layout.row_elems) as usize)?;
    let lse_ref = gpu.alloc::<f32>(layout.lse_logical as usize)?;
    // Each row's FP8 accumulation slack, which the reference writes for e4m3 inputs (zeros
    // stay for 16-bit ones and for rows it does not write).
    let lse_slack = gpu.to_device(&vec![0f32; layout.lse_logical as usize])?;
    let sums = gpu.to_device(&[0f64; 2])?;
    let counts = gpu.to_device(&[0u64; 5])?;
    let maxima = gpu.to_device(&[0u32; 3])?;
    let stream = gpu.stream();

    // O: NaN where the kernel must write, a guard pattern elsewhere; LSE likewise.
    // SAFETY: argument list matches fill_output_pattern's signature; the buffer holds o_alloc elements.
    unsafe {
        stream
            .launch_builder(&support.fill_output)
            .arg(&problem.o)
            .arg(&layout.o_alloc)
            .arg(&layout.rows)
            .arg(&layout.row_stride)
            .arg(&layout.row_elems)
            .arg(&O_POISON)
            .arg(&O_GUARD)
            .launch(grid_for(layout.o_alloc as usize))
    }
    .map_err(driver("cuLaunchKernel(fill_output_pattern)"))?;
    // SAFETY: fill_u32(u32*, u64, u64, u32, u32) over lse_alloc elements.
    unsafe {
        stream
            .launch_builder(&support.fill_u32)
            .arg(&problem.lse)
            .arg(&layout.lse_alloc)
            .arg(&layout.lse_logical)
            .arg(&LSE_POISON)
            .arg(&LSE_GUARD)
            .launch(grid_for(layout.lse_alloc as usize))
    }
    .map_err(driver("cuLaunchKernel(fill_u32)"))?;

    // Reference: a block per (query row of the longest sequence, head, sequence).
    if case.batch > 0 && case.seqlen_q > 0 {
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
            grid_dim: (case.seqlen_q as u32, hq as u32, case.batch as u32),
            block_dim: (128, 1, 1),
            shared_mem_bytes: smem,
        };
        let arg = ParamsArg(params);
        let descale = DescalesArg(problem.descale);
        let (hd, hdv, paged) = (d as i32, dv as i32, spec.features.paged_kv as i32);
        // SAFETY: reference_attention(FwdParams, int dtype, int mask_kind, int paged,
        // int, int, Descales, float*, float*, float*); o_ref holds rows*heads*dv floats,
        // lse_ref and lse_slack heads*rows; the descales [batch, heads_kv] floats where set.
        unsafe {
            stream
                .launch_builder(reference)
                .arg(&arg)
                .arg(&input_dtype)
                .arg(&mask_kind)
                .arg(&paged)
                .arg(&hd)
                .arg(&hdv)
                .arg(&descale)
                .arg(&o_ref)
                .arg(&lse_ref)
                .arg(&lse_slack)
                .launch(cfg)
        }
        .map_err(driver("cuLaunchKernel(reference_attention)"))?;
    }

    // The kernel under test.
    kernel.launch(gpu, &launch_args)?;
    gpu.synchronize()?;
    let split_tiles = launch_grid(
        spec.mask,
        &kernel.launch_footprint(&params),
        &params,
        gpu.info.sm_count,
    )?
    .map_or(0, |(blocks, _, _)| {
        split_tail(&kernel.footprint, &params, blocks, problem.split)
    });
    let split_counters_left = match &problem.split_workspace {
        Some(ws) => {
            let n = SPLIT_COUNTER_BYTES as usize;
            let bytes = stream
                .clone_dtoh(&ws.slice(0..n))
                .map_err(driver("cuMemcpyDtoH"))?;
            bytes
                .chunks(4)
                .filter(|c| c.iter().any(|&b| b != 0))
                .count() as u64
        }
        None => 0,
    };

    // Compare.
    // SAFETY: compare_output's signature; buffers sized as above.
    unsafe {
        stream
            .launch_builder(&support.compare_output)
            .arg(&problem.o)
            .arg(&o_is_bf16)
            .arg(&layout.rows)
            .arg(&layout.row_stride)
            .arg(&layout.row_elems)
            .arg(&o_ref)
            .arg(&layout.o_alloc)
            .arg(&O_GUARD)
            .arg(&sums)
            .arg(&counts)
            .arg(&maxima)
            .launch(grid_for(layout.o_alloc as usize))
    }
    .map_err(driver("cuLaunchKernel(compare_output)"))?;
    // SAFETY: compare_lse's signature; buffers sized as above.
    unsafe {
        stream
            .launch_builder(&support.compare_lse)
            .arg(&problem.lse)
            .arg(&lse_ref)
            .arg(&lse_slack)
            .arg(&layout.lse_logical)
            .arg(&layout.lse_alloc)
            .arg(&LSE_GUARD)
            .arg(&counts)
            .arg(&maxima)
            .launch(grid_for(layout.lse_alloc as usize))
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
        lse_max_excess: f32::from_bits(maxima[2]) as f64,
        o_nan_or_unwritten: counts[0],
        o_guard_changed: counts[1],
        lse_nan: counts[2],
        lse_inf_mismatch: counts[3],
        lse_guard_changed: counts[4],
        split_tiles,
        split_counters_left,
        ms: None,
        tflops: None,
        passed: false,
        failure: None,
    };
    result.failure = judge(&result);
    result.passed = result.failure.is_none();

    if case.timed && result.passed {
        let times = gpu.time_ms(3, 20, || kernel.launch(gpu, &launch_args))?;
        let ms = times[times.len() / 2];
        let flops = attention_flops(&spec, case);
        result.ms = Some(ms);
        result.tflops = Some(flops / (ms * 1e-3) / 1e12);
    }
    Ok(result)
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
    if r.split_counters_left > 0 {
        why.push(format!(
            "{} split-tail counters left non-zero (the next launch would merge wrongly)",
            r.split_counters_left
        ));
    }
    if r.o_rel_l2.is_nan() || r.o_rel_l2 > tol {
        why.push(format!(
            "O relative L2 error {:.2e} > {tol:.0e}",
            r.o_rel_l2
        ));
    }
    let lse = lse_bound(r.spec.dtype);
    if r.lse_max_abs.is_nan() || r.lse_max_excess.is_nan() || r.lse_max_excess > lse.abs {
        let bound = if lse.fp8_slack {
            format!("{:.0e} + the row's FP8 accumulation slack", lse.abs)
        } else {
            format!("{:.0e}", lse.abs)
        };
        why.push(format!("LSE max error {:.2e} > {bound}", r.lse_max_abs));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Everything a verify run produced, as written with `--json`.
#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub date: String,
    pub commit: String,
    pub device: crate::measure::gpu::DeviceInfo,
    pub results: Vec<CaseResult>,
    /// Kernels their launch's checks refused, each with why: failures too, reported
    /// without stopping the others.
    pub refused: Vec<RefusedKernel>,
}

/// A kernel `verify` could not run, and why.
#[derive(Debug, Clone, Serialize)]
pub struct RefusedKernel {
    pub kernel: String,
    pub spec: KernelSpec,
    pub why: String,
}

pub fn write_json(path: &Path, report: &VerifyReport) -> Result<(), crate::fsutil::WriteError> {
    write_atomic(
        path,
        (serde_json::to_string_pretty(report).expect("serialises") + "\n").as_bytes(),
    )
}

#[cfg(test)]
mod tests;
