//! The checking kernels (`templates/reference/verify.cu`): random fills, the output's
//! poison and guard patterns, the f32 reference attention and the comparisons, which
//! the problems are filled with and the checks run.

use cudarc::driver::{CudaSlice, PushKernelArg};
use fa4_spec::{fnv1a64, Arch};

use crate::compile::BuildDir;
use crate::fsutil::write_atomic;
use crate::measure::gpu::{driver, Gpu, GpuError};
use crate::render::nvrtc_options;
use crate::render::templates::TemplateSet;

/// Source of the checking kernels, under `templates/`.
pub const SUPPORT_SOURCE: &str = "reference/verify.cu";

/// The checking kernels, loaded.
pub struct Support {
    _module: std::sync::Arc<cudarc::driver::CudaModule>,
    pub(super) fill_normal: cudarc::driver::CudaFunction,
    pub(super) fill_normal_e4m3: cudarc::driver::CudaFunction,
    pub(super) fill_output: cudarc::driver::CudaFunction,
    pub(super) fill_u32: cudarc::driver::CudaFunction,
    pub(super) reference: cudarc::driver::CudaFunction,
    pub(super) compare_output: cudarc::driver::CudaFunction,
    pub(super) compare_lse: cudarc::driver::CudaFunction,
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

/// The channels of e4m3 inputs made outliers (`Support::fill_e4m3`): those that
/// `fill_normal_e4m3` picks (c % 32 == 7 of every head: 4 of 128) are this much larger.
pub const OUTLIER_SCALE: f32 = 20.0;

/// Where a token row's channels are, for `Support::fill_e4m3`'s outliers.
#[derive(Debug, Clone, Copy)]
pub struct Channels {
    /// Elements from one token row to the next.
    pub row_stride: u64,
    pub head_dim: u32,
}

impl Support {
    /// Fills `buf` (bytes) with standard normal samples in a 16-bit dtype (bf16 or fp16).
    pub fn fill_normal(
        &self,
        gpu: &Gpu,
        buf: &CudaSlice<u8>,
        seed: u64,
        bf16: bool,
    ) -> Result<(), GpuError> {
        let n = (buf.len() / 2) as u64;
        let is_bf16 = bf16 as i32;
        // SAFETY: fill_normal(u16*, u64, u64, int) over a buffer of n 2-byte elements.
        unsafe {
            gpu.stream()
                .launch_builder(&self.fill_normal)
                .arg(buf)
                .arg(&n)
                .arg(&seed)
                .arg(&is_bf16)
                .launch(grid_for(n as usize))
        }
        .map(|_| ())
        .map_err(driver("cuLaunchKernel(fill_normal)"))
    }

    /// Fills `buf` with standard normal samples quantised to e4m3 on the device (to
    /// nearest even, saturating at ±448); with `outliers`, a few channels of every head
    /// ([`OUTLIER_SCALE`] times larger before quantising), as the channels of activations
    /// that FP8 inference has to survive.
    pub fn fill_e4m3(
        &self,
        gpu: &Gpu,
        buf: &CudaSlice<u8>,
        seed: u64,
        channels: Channels,
        outliers: bool,
    ) -> Result<(), GpuError> {
        let n = buf.len() as u64;
        let row_stride = channels.row_stride.max(1);
        let head_dim = channels.head_dim.max(1);
        let scale = if outliers { OUTLIER_SCALE } else { 1.0 };
        // SAFETY: fill_normal_e4m3(u8*, u64, u64, u64, u32, float) over a buffer of n
        // elements.
        unsafe {
            gpu.stream()
                .launch_builder(&self.fill_normal_e4m3)
                .arg(buf)
                .arg(&n)
                .arg(&seed)
                .arg(&row_stride)
                .arg(&head_dim)
                .arg(&scale)
                .launch(grid_for(buf.len()))
        }
        .map(|_| ())
        .map_err(driver("cuLaunchKernel(fill_normal_e4m3)"))
    }

    pub fn load(gpu: &Gpu, cubin: &[u8]) -> Result<Self, GpuError> {
        let module = gpu.load_module(cubin)?;
        let f = |name: &str| gpu.function(&module, name, 0);
        Ok(Support {
            fill_normal: f("fill_normal")?,
            fill_normal_e4m3: f("fill_normal_e4m3")?,
            fill_output: f("fill_output_pattern")?,
            fill_u32: f("fill_u32")?,
            reference: f("reference_attention")?,
            compare_output: f("compare_output")?,
            compare_lse: f("compare_lse")?,
            _module: module,
        })
    }
}

pub(super) fn grid_for(n: usize) -> cudarc::driver::LaunchConfig {
    cudarc::driver::LaunchConfig {
        grid_dim: ((n.div_ceil(256)).clamp(1, 4096) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}
