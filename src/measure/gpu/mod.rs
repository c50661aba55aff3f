//! The device side: open a GPU, load cubins, launch and time kernels.
//!
//! CUDA's driver library is loaded at run time (cudarc's dynamic loading): the binary
//! builds and runs its CPU commands on machines without CUDA, and a GPU command there
//! answers with [`GpuError::NoDriver`] instead of failing to start.
//!
//! Everything runs on the context's default stream, in order; kernel arguments carry raw
//! device pointers, so cudarc's per-buffer event tracking (for multi-stream use) is
//! never engaged.

mod launch;

use std::sync::Arc;

use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags, CUfunction_attribute};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    DriverError,
};
use fa4_spec::Arch;

pub(crate) use launch::{DescalesArg, ParamsArg};
pub use launch::{FwdKernel, LaunchArgs};

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "no CUDA driver (libcuda.so.1) on this machine: GPU commands need an NVIDIA GPU host; \
         `compile` and `list` work without one"
    )]
    NoDriver,
    #[error("no CUDA device {ordinal} is visible (CUDA_VISIBLE_DEVICES?)")]
    NoDevice { ordinal: usize },
    #[error("CUDA {call} failed: {message}")]
    Driver { call: &'static str, message: String },
    #[error(transparent)]
    Problem(#[from] fa4_runtime::ProblemError),
}

pub(crate) fn driver(call: &'static str) -> impl Fn(DriverError) -> GpuError {
    move |e| GpuError::Driver {
        call,
        message: fa4_runtime::driver_message(&e),
    }
}

/// What the device is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (u32, u32),
    /// `None` for a device fa4-gen has no kernels for.
    pub arch: Option<Arch>,
    pub sm_count: u32,
    pub l2_bytes: u32,
    /// CUDA version the driver supports, e.g. "13.0".
    pub driver: String,
}

/// An open GPU with one stream.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    pub info: DeviceInfo,
}

impl Gpu {
    /// Opens device `ordinal`.
    pub fn open(ordinal: usize) -> Result<Self, GpuError> {
        // SAFETY: only probes whether the library can be loaded.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        let count = CudaContext::device_count().map_err(driver("cuDeviceGetCount"))?;
        if ordinal >= count.max(0) as usize {
            return Err(GpuError::NoDevice { ordinal });
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("cuCtxCreate"))?;
        let stream = ctx.default_stream();
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver("cuDeviceGetAttribute"))?;
        let attr = |a| ctx.attribute(a).map_err(driver("cuDeviceGetAttribute"));
        let sm_count = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let l2_bytes = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u32;
        let mut version = 0;
        // SAFETY: valid out-pointer; the driver library is loaded (checked above).
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) }
            .result()
            .map_err(driver("cuDriverGetVersion"))?;
        let info = DeviceInfo {
            name: ctx.name().map_err(driver("cuDeviceGetName"))?,
            compute_capability: (major as u32, minor as u32),
            arch: Arch::from_compute_capability(major as u32, minor as u32),
            sm_count,
            l2_bytes,
            driver: format!("{}.{}", version / 1000, (version % 1000) / 10),
        };
        Ok(Gpu { ctx, stream, info })
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Loads a cubin (no JIT: the driver only links the machine code).
    pub fn load_module(&self, cubin: &[u8]) -> Result<Arc<CudaModule>, GpuError> {
        self.ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.to_vec()))
            .map_err(driver("cuModuleLoadData"))
    }

    /// Loads `entry` from a module and lets it use `dynamic_smem` bytes of shared memory.
    pub fn function(
        &self,
        module: &Arc<CudaModule>,
        entry: &str,
        dynamic_smem: u32,
    ) -> Result<CudaFunction, GpuError> {
        let f = module
            .load_function(entry)
            .map_err(driver("cuModuleGetFunction"))?;
        if dynamic_smem > 48 * 1024 {
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dynamic_smem as i32,
            )
            .map_err(driver("cuFuncSetAttribute"))?;
        }
        Ok(f)
    }

    /// A device buffer of `len` elements, contents undefined.
    pub fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<CudaSlice<T>, GpuError> {
        // SAFETY: every caller fills the buffer before reading it.
        unsafe { self.stream.alloc::<T>(len.max(1)) }.map_err(driver("cuMemAlloc"))
    }

    /// A device buffer of `len` elements, zeroed.
    pub fn zeros<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, GpuError> {
        self.stream
            .alloc_zeros::<T>(len.max(1))
            .map_err(driver("cuMemAlloc"))
    }

    /// Device address of a buffer.
    pub fn ptr<T>(&self, buf: &CudaSlice<T>) -> u64 {
        buf.device_ptr(&self.stream).0
    }

    pub fn to_host<T: DeviceRepr + Default + Clone>(
        &self,
        buf: &CudaSlice<T>,
    ) -> Result<Vec<T>, GpuError> {
        self.stream.clone_dtoh(buf).map_err(driver("cuMemcpyDtoH"))
    }

    pub fn to_device<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>, GpuError> {
        self.stream.clone_htod(data).map_err(driver("cuMemcpyHtoD"))
    }

    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))
    }

    /// Runs `work` `warmup` times, then times `reps` runs one by one with CUDA events and
    /// returns every run's milliseconds, sorted.
    pub fn time_ms(
        &self,
        warmup: usize,
        reps: usize,
        mut work: impl FnMut() -> Result<(), GpuError>,
    ) -> Result<Vec<f64>, GpuError> {
        for _ in 0..warmup {
            work()?;
        }
        let event = || {
            self.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(driver("cuEventCreate"))
        };
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let (start, end) = (event()?, event()?);
            start
                .record(&self.stream)
                .map_err(driver("cuEventRecord"))?;
            work()?;
            end.record(&self.stream).map_err(driver("cuEventRecord"))?;
            times.push(
                start
                    .elapsed_ms(&end)
                    .map_err(driver("cuEventElapsedTime"))? as f64,
            );
        }
        times.sort_by(|a, b| a.total_cmp(b));
        Ok(times)
    }
}
