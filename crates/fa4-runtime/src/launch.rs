//! Launching the selected kernel on the caller's stream: the call a serving engine makes
//! per prefill.
//!
//! A [`Runtime`] owns an open [`KernelCache`]. It binds to the CUDA context current on the
//! thread of its first call (in PyTorch, the device's primary context), so it shares the
//! engine's context and streams instead of making its own. Each kernel's cubin is read,
//! checked (the manifest's hash, the ELF header's SM against the device) and loaded once,
//! on first use or by [`Runtime::preload`]. A call then costs the lookup, the host-side
//! argument checks and one `cuLaunchKernel`: no allocation, no synchronisation.

use std::ffi::{c_void, CStr};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::{
    self, CUcontext, CUdevice_attribute, CUfunction, CUfunction_attribute, CUmodule, CUresult,
    CUstream,
};
use fa4_spec::manifest::KernelEntry;
use fa4_spec::{fnv1a64, Arch, Bucket, Dtype, Features, FwdParams};

/// The cubins' entries (`fa4_spec::KERNEL_ENTRY`, `VARLEN_KERNEL_ENTRY`), NUL-terminated.
const KERNEL_ENTRY_C: &CStr = c"fa4_fwd";
const VARLEN_ENTRY_C: &CStr = c"fa4_fwd_varlen";
const _: () = assert!(KERNEL_ENTRY_C.count_bytes() == fa4_spec::KERNEL_ENTRY.len());
const _: () = assert!(VARLEN_ENTRY_C.count_bytes() == fa4_spec::VARLEN_KERNEL_ENTRY.len());

use crate::checks::{check_descales, check_problem_for, kernel_params, ProblemError};
use crate::grid::{check_split_workspace, launch_footprint, launch_grid, SplitWorkspace};
use crate::select::{mask_of, KernelCache, Query, Reason, SelectError};
use crate::tma::{Descales, Fp8TmaFwdParams, TmaFwdParams};

/// One prefill call: what the kernel computes and the tensors it reads and writes.
#[derive(Debug, Clone, Copy)]
pub struct PrefillArgs {
    pub dtype: Dtype,
    pub head_dim: u32,
    pub head_dim_v: u32,
    /// FlashAttention's `causal` (bottom-right aligned when seqlen_q != seqlen_k): with
    /// a window it sets the window's right side to 0.
    pub causal: bool,
    /// Pointers, shapes, strides and the score arguments, laid out as [`FwdParams`]
    /// documents. The window is FlashAttention's `window_size` (-1: unbounded), sinks a
    /// device pointer or 0, softcap 0 for none, page_table 0 for dense K/V; the mask and
    /// the features follow from them. `scale_log2` is derived from `softmax_scale`.
    /// Strides count elements of every dtype (e4m3 bytes too: `kernel_params` converts
    /// them for the kernel).
    pub params: FwdParams,
    /// The descales of e4m3 Q, K and V (null pointers: 1.0); all zero for bf16 and fp16.
    pub descale: Descales,
    /// A split workspace (`gpu::SplitWorkspace`), or None: with one, an unmasked
    /// persistent kernel on a dense batch shares out its last tiles by keys.
    pub split: Option<SplitWorkspace>,
}

impl PrefillArgs {
    /// The dispatcher's view of the call (for the device's `arch`) and the kernel
    /// arguments with the window normalised and `scale_log2` filled in.
    pub fn resolve(&self, arch: Arch) -> (Query, FwdParams) {
        let mut p = self.params;
        let (mask, window) = mask_of(
            self.causal,
            (p.window_left, p.window_right),
            p.seqlen_q,
            p.seqlen_k,
        );
        (p.window_left, p.window_right) = window;
        p.scale_log2 = p.softmax_scale * std::f32::consts::LOG2_E;
        let features = Features {
            sinks: p.sinks != 0,
            softcap: p.softcap != 0.0,
            paged_kv: p.page_table != 0,
        };
        if !features.softcap {
            p.softcap = 0.0;
        }
        let query = Query {
            arch,
            dtype: self.dtype,
            head_dim: self.head_dim,
            head_dim_v: self.head_dim_v,
            mask,
            features,
            max_seqlen_q: p.seqlen_q.max(0) as u32,
            window,
            ragged: Bucket::is_ragged_batch((p.cu_seqlens_q != 0).then_some(p.batch.max(0) as u32)),
        };
        (query, p)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PrefillError {
    #[error("no CUDA driver (libcuda.so.1) on this machine: fa4-gen launches need an NVIDIA GPU and its driver")]
    NoDriver,
    #[error("no CUDA context is current on this thread ({0}): initialise CUDA on the device first (in PyTorch: any CUDA tensor, or torch.cuda.set_device)")]
    NoContext(&'static str),
    #[error("this fa4-gen runtime serves {bound}, but another CUDA context is current on this thread: open one runtime per device")]
    OtherContext { bound: String },
    #[error("{name} (compute capability {major}.{minor}) is not a GPU fa4-gen builds kernels for: it offers sm80, sm86, sm89, sm90, sm100 and sm120")]
    Device {
        name: String,
        major: u32,
        minor: u32,
    },
    #[error(transparent)]
    Select(#[from] SelectError),
    #[error(transparent)]
    Problem(#[from] ProblemError),
    #[error("{path}: {why}")]
    Cubin { path: PathBuf, why: String },
    #[error("CUDA {call} failed: {message}")]
    Driver { call: &'static str, message: String },
}

/// The device a runtime serves: the context it bound to, and what that GPU is.
#[derive(Debug, Clone)]
pub struct Device {
    ctx: usize,
    pub ordinal: i32,
    pub name: String,
    pub compute_capability: (u32, u32),
    pub arch: Arch,
    /// Persistent kernels' grids are sized by it.
    pub sm_count: u32,
    /// The device as the cache names tuned GPUs (`gpu_name`): its own tuned choices.
    pub gpu: String,
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "device {} ({}, {})", self.ordinal, self.name, self.arch)
    }
}

/// A kernel loaded into the bound context.
struct Loaded {
    module: CUmodule,
    func: CUfunction,
    /// The varlen build (`KernelEntry::varlen_cubin_hash`), where the kernel has one.
    varlen: Option<(CUmodule, CUfunction)>,
}
// SAFETY: CUDA module and function handles may be used from any thread of the process;
// the runtime only launches them in the context they were loaded in.
unsafe impl Send for Loaded {}
unsafe impl Sync for Loaded {}

/// What a launch ran.
#[derive(Debug, Clone, Copy)]
pub struct Launched<'a> {
    pub kernel: &'a str,
    pub reason: Reason,
    /// False when the problem had nothing to compute (no queries): nothing was launched.
    pub launched: bool,
}

/// An open kernel cache that launches its kernels.
pub struct Runtime {
    cache: KernelCache,
    device: OnceLock<Device>,
    loaded: Vec<OnceLock<Loaded>>,
    /// Serialises binding and cubin loading (the slow, rare paths).
    slow_path: Mutex<()>,
}

fn cuda(call: &'static str, r: CUresult) -> Result<(), PrefillError> {
    r.result().map_err(|e| PrefillError::Driver {
        call,
        message: driver_message(&e),
    })
}

fn driver_failure(call: &'static str, r: CUresult) -> PrefillError {
    PrefillError::Driver {
        call,
        message: driver_message(&cudarc::driver::DriverError(r)),
    }
}

/// The context current on this thread.
fn current_context() -> Result<CUcontext, PrefillError> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only probes whether the driver library loads.
    if !*PRESENT.get_or_init(|| unsafe { sys::is_culib_present() }) {
        return Err(PrefillError::NoDriver);
    }
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    match unsafe { sys::cuCtxGetCurrent(&mut ctx) } {
        CUresult::CUDA_SUCCESS if !ctx.is_null() => Ok(ctx),
        CUresult::CUDA_SUCCESS => Err(PrefillError::NoContext("none is set")),
        CUresult::CUDA_ERROR_NOT_INITIALIZED => {
            Err(PrefillError::NoContext("CUDA is not initialised"))
        }
        CUresult::CUDA_ERROR_DEINITIALIZED => Err(PrefillError::NoContext("CUDA was shut down")),
        r => cuda("cuCtxGetCurrent", r).map(|_| std::ptr::null_mut()),
    }
}

/// The SM a cubin was built for (e.g. 90 for `sm_90`), from its ELF header: NVRTC 13
/// writes CUDA's ELF ABI version 8, with the SM in bits 8 to 15 of `e_flags`; older
/// ABI versions keep it in the low byte. `None` for a file that is not a CUDA ELF.
pub fn cubin_sm(cubin: &[u8]) -> Option<u32> {
    const EM_CUDA: u16 = 190;
    if cubin.len() < 52 || &cubin[..4] != b"\x7fELF" || cubin[4] != 2 {
        return None; // not a 64-bit ELF
    }
    let machine = u16::from_le_bytes([cubin[18], cubin[19]]);
    if machine != EM_CUDA {
        return None;
    }
    let flags = u32::from_le_bytes([cubin[48], cubin[49], cubin[50], cubin[51]]);
    let (os_abi, abi_version) = (cubin[7], cubin[8]);
    Some(if os_abi == 0x41 && abi_version >= 8 {
        (flags >> 8) & 0xff
    } else {
        flags & 0xff
    })
}

/// Why a cubin must not be loaded on `device`, if it must not.
fn check_cubin(bytes: &[u8], hash: &str, device: &Device) -> Result<(), String> {
    let found = format!("{:016x}", fnv1a64(bytes));
    if found != hash {
        return Err(format!(
            "does not match the manifest (hash {found}, the manifest says {hash}): it changed \
             after the cache was built; rebuild the cache with `fa4-gen build-cache`"
        ));
    }
    let Some(sm) = cubin_sm(bytes) else {
        return Err("is not a CUDA cubin (no CUDA ELF header); rebuild the cache".into());
    };
    let (major, minor) = device.compute_capability;
    // Machine code runs on its own major version, at its minor version or above.
    if sm / 10 != major || sm % 10 > minor {
        return Err(format!(
            "is machine code for sm_{sm}, and this device is sm_{major}{minor} ({}): the \
             cache's {} entry holds another GPU's cubin; rebuild it with `fa4-gen build-cache`",
            device.name, device.arch
        ));
    }
    Ok(())
}

impl Runtime {
    /// A runtime over an open cache. No GPU is touched until the first call.
    pub fn new(cache: KernelCache) -> Runtime {
        let loaded = (0..cache.kernels().len())
            .map(|_| OnceLock::new())
            .collect();
        Runtime {
            cache,
            device: OnceLock::new(),
            loaded,
            slow_path: Mutex::new(()),
        }
    }

    pub fn cache(&self) -> &KernelCache {
        &self.cache
    }

    /// The device this runtime serves, once bound.
    pub fn bound(&self) -> Option<&Device> {
        self.device.get()
    }

    /// The bound device, binding to the current context on first use; an error when
    /// another context is current.
    pub fn device(&self) -> Result<&Device, PrefillError> {
        let ctx = current_context()?;
        let device = match self.device.get() {
            Some(d) => d,
            None => self.bind(ctx)?,
        };
        if device.ctx != ctx as usize {
            return Err(PrefillError::OtherContext {
                bound: device.to_string(),
            });
        }
        Ok(device)
    }

    fn bind(&self, ctx: CUcontext) -> Result<&Device, PrefillError> {
        let _slow = self.slow_path.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = self.device.get() {
            return Ok(d);
        }
        let mut dev = 0;
        // SAFETY: valid out-pointers; `ctx` is current on this thread.
        cuda("cuCtxGetDevice", unsafe { sys::cuCtxGetDevice(&mut dev) })?;
        let attr = |a| -> Result<u32, PrefillError> {
            let mut v = 0;
            // SAFETY: valid out-pointer and device.
            cuda("cuDeviceGetAttribute", unsafe {
                sys::cuDeviceGetAttribute(&mut v, a, dev)
            })?;
            Ok(v as u32)
        };
        let major = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let sm_count = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let mut name = [0 as std::ffi::c_char; 256];
        // SAFETY: the buffer holds 256 bytes and the driver NUL-terminates.
        cuda("cuDeviceGetName", unsafe {
            sys::cuDeviceGetName(name.as_mut_ptr(), 256, dev)
        })?;
        // SAFETY: NUL-terminated by the driver.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let Some(arch) = Arch::from_compute_capability(major, minor) else {
            return Err(PrefillError::Device { name, major, minor });
        };
        let device = Device {
            ctx: ctx as usize,
            ordinal: dev,
            gpu: crate::select::gpu_name(&name, sm_count),
            name,
            compute_capability: (major, minor),
            arch,
            sm_count,
        };
        Ok(self.device.get_or_init(|| device))
    }

    /// The kernel at `position`, loaded into the bound context on first use.
    fn kernel(&self, position: usize, device: &Device) -> Result<&Loaded, PrefillError> {
        if let Some(k) = self.loaded[position].get() {
            return Ok(k);
        }
        let _slow = self.slow_path.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = self.loaded[position].get() {
            return Ok(k);
        }
        let entry = &self.cache.kernels()[position].1;
        let (module, func) = self.load_cubin(
            &entry.cubin,
            &entry.cubin_hash,
            KERNEL_ENTRY_C,
            entry,
            device,
        )?;
        let varlen = match &entry.varlen_cubin_hash {
            None => None,
            Some(hash) => {
                let cubin = fa4_spec::varlen_cubin_path(&entry.cubin);
                match self.load_cubin(&cubin, hash, VARLEN_ENTRY_C, entry, device) {
                    Ok(loaded) => Some(loaded),
                    Err(e) => {
                        // SAFETY: loaded above, held by nothing else.
                        unsafe { sys::cuModuleUnload(module) };
                        return Err(e);
                    }
                }
            }
        };
        Ok(self.loaded[position].get_or_init(|| Loaded {
            module,
            func,
            varlen,
        }))
    }

    /// Reads, checks and loads one cubin of `entry` and gets its function `name`.
    fn load_cubin(
        &self,
        cubin: &str,
        hash: &str,
        name: &CStr,
        entry: &KernelEntry,
        device: &Device,
    ) -> Result<(CUmodule, CUfunction), PrefillError> {
        let path = self.cache.dir().join(cubin);
        let bytes = std::fs::read(&path).map_err(|e| PrefillError::Cubin {
            path: path.clone(),
            why: format!(
                "cannot be read ({e}); a cache's cubins are built by `fa4-gen build-cache` \
                 (git holds only its sources and manifest)"
            ),
        })?;
        check_cubin(&bytes, hash, device).map_err(|why| PrefillError::Cubin { path, why })?;
        let mut module: CUmodule = std::ptr::null_mut();
        // SAFETY: `bytes` is a whole cubin that outlives the call; the bound context is
        // current (checked by the caller).
        cuda("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut module, bytes.as_ptr().cast())
        })?;
        let mut func: CUfunction = std::ptr::null_mut();
        let loaded = (|| {
            // SAFETY: a live module and a NUL-terminated name.
            cuda("cuModuleGetFunction", unsafe {
                sys::cuModuleGetFunction(&mut func, module, name.as_ptr())
            })?;
            if entry.footprint.smem_bytes > 48 * 1024 {
                // SAFETY: a live function handle.
                cuda("cuFuncSetAttribute", unsafe {
                    sys::cuFuncSetAttribute(
                        func,
                        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        entry.footprint.smem_bytes as i32,
                    )
                })?;
            }
            Ok(())
        })();
        if let Err(e) = loaded {
            // SAFETY: the module was loaded above and nothing else holds it.
            unsafe { sys::cuModuleUnload(module) };
            return Err(e);
        }
        Ok((module, func))
    }

    /// Loads every kernel of the bound device's arch now, so that no serving call pays
    /// for a cubin load. Returns how many were loaded.
    pub fn preload(&self) -> Result<usize, PrefillError> {
        let device = self.device()?;
        let mut n = 0;
        for (position, (_, entry)) in self.cache.kernels().iter().enumerate() {
            if entry.spec.arch == device.arch {
                self.kernel(position, device)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Checks the call and launches its kernel on `stream` (asynchronously).
    ///
    /// # Safety
    /// The pointers in `args.params` are device memory of the bound device, as large as
    /// the shapes and strides say, and stay alive until the kernel has run; `stream` is
    /// null or a stream of the bound context. The host checks catch shapes, strides,
    /// alignment and null pointers, not a pointer into the wrong allocation.
    pub unsafe fn prefill(
        &self,
        args: &PrefillArgs,
        stream: CUstream,
    ) -> Result<Launched<'_>, PrefillError> {
        let device = self.device()?;
        let (query, params) = args.resolve(device.arch);
        // The device's own tuned choices where the cache has them.
        let selected = self.cache.select_on(&query, Some(&device.gpu))?;
        let spec = &selected.kernel.spec;
        check_problem_for(spec, &params)?;
        check_descales(spec.dtype, &args.descale)?;
        let kernel_params = kernel_params(spec.dtype, &params)?;
        let args_split = check_split_workspace(args.split, device.sm_count)?;
        let launched = |launched| Launched {
            kernel: selected.id,
            reason: selected.reason,
            launched,
        };
        // A varlen batch runs the kernel's varlen build where it has one.
        let fp = &launch_footprint(
            &selected.kernel.footprint,
            &params,
            selected.kernel.varlen_cubin_hash.is_some(),
        );
        let Some((gx, gy, gz)) =
            launch_grid(selected.kernel.spec.mask, fp, &params, device.sm_count)?
        else {
            return Ok(launched(false));
        };
        let kernel = self.kernel(selected.position, device)?;
        let func = match kernel.varlen {
            Some((_, varlen)) if fp.varlen_tiles => varlen,
            _ => kernel.func,
        };
        // TMA kernels take the tensor maps over Q, K and V after the parameters, e4m3
        // kernels (TMA or paged) the maps' block and the descales after it.
        let descale = args.descale;
        let mut arg = kernel_params;
        let (mut tma_arg, mut fp8_arg);
        let mut args = [(&mut arg as *mut FwdParams).cast::<c_void>()];
        if spec.dtype.is_fp8() {
            fp8_arg = Fp8TmaFwdParams::encode(spec, &kernel_params, fp.tma_rows, descale)
                .map_err(|e| driver_failure("cuTensorMapEncodeTiled", e))?;
            fp8_arg.tma.set_split_tail(fp, gx, args_split);
            args = [(&mut fp8_arg as *mut Fp8TmaFwdParams).cast::<c_void>()];
        } else if fp.tma_rows > 0 {
            tma_arg = TmaFwdParams::encode(spec, &kernel_params, fp.tma_rows)
                .map_err(|e| driver_failure("cuTensorMapEncodeTiled", e))?;
            tma_arg.set_split_tail(fp, gx, args_split);
            args = [(&mut tma_arg as *mut TmaFwdParams).cast::<c_void>()];
        }
        // SAFETY: the kernel takes one FwdParams (TMA kernels: TmaFwdParams, e4m3 ones
        // Fp8TmaFwdParams) by value, read during the call; check_problem_for vetted its
        // shapes, pointers' alignment and strides, and the grid fits the launch limits
        // (launch_grid).
        cuda("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                func,
                gx,
                gy,
                gz,
                fp.threads,
                1,
                1,
                fp.smem_bytes,
                stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })?;
        Ok(launched(true))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let Some(device) = self.device.get() else {
            return;
        };
        // Unload in the bound context; if it is gone (process teardown), so are the
        // modules.
        // SAFETY: the context handle came from the driver; pushing a destroyed one fails
        // and then nothing is unloaded.
        unsafe {
            if sys::cuCtxPushCurrent_v2(device.ctx as CUcontext) != CUresult::CUDA_SUCCESS {
                return;
            }
            for k in self.loaded.iter_mut().filter_map(|k| k.take()) {
                sys::cuModuleUnload(k.module);
                if let Some((varlen, _)) = k.varlen {
                    sys::cuModuleUnload(varlen);
                }
            }
            let mut popped = std::ptr::null_mut();
            sys::cuCtxPopCurrent_v2(&mut popped);
        }
    }
}

/// The driver's own words for an error, or its code when it has none.
pub fn driver_message(e: &cudarc::driver::DriverError) -> String {
    e.error_string()
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{e:?}"))
}

#[cfg(test)]
mod tests;
