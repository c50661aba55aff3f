//! Launching a forward kernel on the tuner's and checker's GPU, through the runtime's
//! checks and grid, so a kernel is measured as it is served.

use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaModule, DeviceRepr, DriverError, LaunchConfig, PushKernelArg,
};
use fa4_runtime::{
    check_descales, check_problem_for, check_split_workspace, kernel_params, launch_footprint,
    launch_grid, Descales, Fp8TmaFwdParams, SplitWorkspace, TmaFwdParams,
};
use fa4_spec::{Footprint, FwdParams, KernelSpec, KERNEL_ENTRY, VARLEN_KERNEL_ENTRY};

use super::{driver, Gpu, GpuError};

/// `FwdParams` as a kernel argument: passed by value, bit for bit.
#[repr(transparent)]
pub(crate) struct ParamsArg(pub(crate) FwdParams);
// SAFETY: FwdParams is #[repr(C)], plain old data, and laid out exactly like the
// device-side struct (both sides assert its size; a test checks its offsets).
unsafe impl DeviceRepr for ParamsArg {}

#[allow(dead_code)] // read by the driver, as raw bytes
struct TmaParamsArg(TmaFwdParams);
// SAFETY: #[repr(C)] plain old data laid out as the device-side TmaFwdParams (sizes and
// the maps' offset asserted on both sides).
unsafe impl DeviceRepr for TmaParamsArg {}

#[allow(dead_code)] // read by the driver, as raw bytes
struct Fp8TmaParamsArg(Fp8TmaFwdParams);
// SAFETY: #[repr(C)] plain old data laid out as the device-side Fp8TmaFwdParams (size and
// the descales' offset asserted on both sides).
unsafe impl DeviceRepr for Fp8TmaParamsArg {}

/// `Descales` as an argument of the reference kernel, by value.
#[repr(transparent)]
pub(crate) struct DescalesArg(pub(crate) Descales);
// SAFETY: #[repr(C)] plain old data, laid out as verify.cu's Descales (both sides assert
// its size).
unsafe impl DeviceRepr for DescalesArg {}

/// What a launch of a forward kernel reads besides the kernel: the arguments as a caller
/// lays them out (element strides, e4m3 bytes too: `kernel_params` converts them per
/// kernel), the descales of e4m3 inputs (all zero for 16-bit kernels) and a split
/// workspace.
#[derive(Debug, Clone, Copy)]
pub struct LaunchArgs {
    pub params: FwdParams,
    pub descale: Descales,
    pub split: Option<SplitWorkspace>,
}

/// A forward kernel loaded on a device.
pub struct FwdKernel {
    func: CudaFunction,
    /// The varlen build's entry, where the kernel has one: varlen batches launch it.
    varlen: Option<(CudaFunction, Arc<CudaModule>)>,
    pub spec: KernelSpec,
    pub footprint: Footprint,
    _module: Arc<CudaModule>,
}

impl FwdKernel {
    /// The kernel of `cubin`, and of `varlen_cubin` for varlen batches where given.
    pub fn load(
        gpu: &Gpu,
        cubin: &[u8],
        varlen_cubin: Option<&[u8]>,
        spec: KernelSpec,
        footprint: Footprint,
    ) -> Result<Self, GpuError> {
        let module = gpu.load_module(cubin)?;
        let func = gpu.function(&module, KERNEL_ENTRY, footprint.smem_bytes)?;
        let varlen = match varlen_cubin {
            None => None,
            Some(bytes) => {
                let module = gpu.load_module(bytes)?;
                let func = gpu.function(&module, VARLEN_KERNEL_ENTRY, footprint.smem_bytes)?;
                Some((func, module))
            }
        };
        Ok(FwdKernel {
            func,
            varlen,
            spec,
            footprint,
            _module: module,
        })
    }

    /// The footprint a launch on `params` runs with (`launch_footprint`).
    pub fn launch_footprint(&self, params: &FwdParams) -> Footprint {
        launch_footprint(&self.footprint, params, self.varlen.is_some())
    }

    /// Checks the problem, then launches on the GPU's stream (asynchronously); with a
    /// split workspace, an unmasked persistent kernel may share out its last tiles.
    pub fn launch(&self, gpu: &Gpu, args: &LaunchArgs) -> Result<(), GpuError> {
        check_problem_for(&self.spec, &args.params)?;
        check_descales(self.spec.dtype, &args.descale)?;
        let params = &kernel_params(self.spec.dtype, &args.params)?;
        let split = check_split_workspace(args.split, gpu.info.sm_count)?;
        let footprint = self.launch_footprint(params);
        let Some(grid_dim) = launch_grid(self.spec.mask, &footprint, params, gpu.info.sm_count)?
        else {
            return Ok(()); // nothing to compute
        };
        let func = match &self.varlen {
            Some((varlen, _)) if footprint.varlen_tiles => varlen,
            _ => &self.func,
        };
        let cfg = LaunchConfig {
            grid_dim,
            block_dim: (self.footprint.threads, 1, 1),
            shared_mem_bytes: self.footprint.smem_bytes,
        };
        // TMA kernels take the tensor maps over Q, K and V after the parameters, e4m3
        // kernels (TMA or paged: no maps) that block and the descales after it.
        let (fp8_arg, tma_arg, plain_arg);
        let mut launch = gpu.stream().launch_builder(func);
        if self.spec.dtype.is_fp8() {
            let mut arg =
                Fp8TmaFwdParams::encode(&self.spec, params, self.footprint.tma_rows, args.descale)
                    .map_err(|e| driver("cuTensorMapEncodeTiled")(DriverError(e)))?;
            arg.tma.set_split_tail(&self.footprint, grid_dim.0, split);
            fp8_arg = Fp8TmaParamsArg(arg);
            launch.arg(&fp8_arg);
        } else if self.footprint.tma_rows > 0 {
            let mut arg = TmaFwdParams::encode(&self.spec, params, self.footprint.tma_rows)
                .map_err(|e| driver("cuTensorMapEncodeTiled")(DriverError(e)))?;
            arg.set_split_tail(&self.footprint, grid_dim.0, split);
            tma_arg = TmaParamsArg(arg);
            launch.arg(&tma_arg);
        } else {
            plain_arg = ParamsArg(*params);
            launch.arg(&plain_arg);
        }
        // SAFETY: the kernel takes one FwdParams (TMA kernels: TmaFwdParams, e4m3 ones
        // Fp8TmaFwdParams) by value; check_problem_for and check_descales vetted its
        // pointers and strides, and the buffers outlive the launch (the caller
        // synchronises before freeing them).
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(driver("cuLaunchKernel"))
    }
}
