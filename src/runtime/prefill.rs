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
use fa4_spec::{fnv1a64, Arch, Dtype, Features, FwdParams, MaskKind};

use super::{KernelCache, Query, Reason, SelectError};
use crate::gpu::{
    check_problem_for, check_split_workspace, driver_message, launch_grid, ProblemError,
    SplitWorkspace, TmaFwdParams,
};

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
    pub params: FwdParams,
    /// A split workspace (`gpu::SplitWorkspace`), or None: with one, an unmasked
    /// persistent kernel on a dense batch shares out its last tiles by keys.
    pub split: Option<SplitWorkspace>,
}

/// The mask FlashAttention's `(causal, window_size)` stands for, with the window it
/// keeps: a causal call caps the right side at 0; a side that reaches past every key
/// (left >= max_seqlen_k, right >= max_seqlen_q - 1) is unbounded, so `(-1, 0)` serves the
/// causal kernel and `(-1, -1)` the unmasked one.
pub fn mask_of(
    causal: bool,
    window: (i32, i32),
    max_seqlen_q: i32,
    max_seqlen_k: i32,
) -> (MaskKind, (i32, i32)) {
    let (mut left, mut right) = window;
    if causal {
        right = 0;
    }
    if left < 0 || left >= max_seqlen_k {
        left = -1;
    }
    if right < 0 || (right > 0 && right >= max_seqlen_q - 1) {
        right = -1;
    }
    match (left, right) {
        (-1, -1) => (MaskKind::None, (-1, -1)),
        (-1, 0) => (MaskKind::Causal, (-1, -1)),
        w => (MaskKind::Local, w),
    }
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
        let path = self.cache.dir().join(&entry.cubin);
        let bytes = std::fs::read(&path).map_err(|e| PrefillError::Cubin {
            path: path.clone(),
            why: format!(
                "cannot be read ({e}); a cache's cubins are built by `fa4-gen build-cache` \
                 (git holds only its sources and manifest)"
            ),
        })?;
        check_cubin(&bytes, &entry.cubin_hash, device)
            .map_err(|why| PrefillError::Cubin { path, why })?;
        let mut module: CUmodule = std::ptr::null_mut();
        // SAFETY: `bytes` is a whole cubin that outlives the call; the bound context is
        // current (checked by the caller).
        cuda("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut module, bytes.as_ptr().cast())
        })?;
        let mut func: CUfunction = std::ptr::null_mut();
        let entry_name = c"fa4_fwd";
        debug_assert_eq!(entry_name.to_str(), Ok(fa4_spec::KERNEL_ENTRY));
        let loaded = (|| {
            // SAFETY: a live module and a NUL-terminated name.
            cuda("cuModuleGetFunction", unsafe {
                sys::cuModuleGetFunction(&mut func, module, entry_name.as_ptr())
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
        Ok(self.loaded[position].get_or_init(|| Loaded { module, func }))
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
        let selected = self.cache.select(&query)?;
        check_problem_for(&selected.kernel.spec, &params)?;
        let args_split = check_split_workspace(args.split, device.sm_count)?;
        let launched = |launched| Launched {
            kernel: selected.id,
            reason: selected.reason,
            launched,
        };
        let Some((gx, gy, gz)) = launch_grid(
            selected.kernel.spec.mask,
            &selected.kernel.footprint,
            &params,
            device.sm_count,
        )?
        else {
            return Ok(launched(false));
        };
        let kernel = self.kernel(selected.position, device)?;
        let fp = &selected.kernel.footprint;
        // TMA kernels take the tensor maps over Q, K and V after the parameters.
        let mut arg = params;
        let mut tma_arg;
        let mut args = [(&mut arg as *mut FwdParams).cast::<c_void>()];
        if fp.tma_rows > 0 {
            tma_arg = TmaFwdParams::encode(&selected.kernel.spec, &params, fp.tma_rows)
                .map_err(|e| driver_failure("cuTensorMapEncodeTiled", e))?;
            tma_arg.set_split_tail(fp, gx, args_split);
            args = [(&mut tma_arg as *mut TmaFwdParams).cast::<c_void>()];
        }
        // SAFETY: the kernel takes one FwdParams (TMA kernels: TmaFwdParams) by value,
        // read during the call; check_problem_for vetted its shapes, pointers' alignment
        // and strides, and the grid fits the launch limits (launch_grid).
        cuda("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                kernel.func,
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
            }
            let mut popped = std::ptr::null_mut();
            sys::cuCtxPopCurrent_v2(&mut popped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flash_attention_windows_map_to_masks() {
        let m = |causal, w| mask_of(causal, w, 1000, 2000);
        assert_eq!(m(false, (-1, -1)), (MaskKind::None, (-1, -1)));
        assert_eq!(m(true, (-1, -1)), (MaskKind::Causal, (-1, -1)));
        // causal caps the right side; (-1, 0) is causal.
        assert_eq!(m(true, (128, 7)), (MaskKind::Local, (128, 0)));
        assert_eq!(m(false, (-1, 0)), (MaskKind::Causal, (-1, -1)));
        assert_eq!(m(false, (128, 0)), (MaskKind::Local, (128, 0)));
        assert_eq!(m(false, (-1, 5)), (MaskKind::Local, (-1, 5)));
        // Negative sides are unbounded, as in FlashAttention.
        assert_eq!(m(false, (-7, -3)), (MaskKind::None, (-1, -1)));
        // A side past every key is unbounded: left >= max_seqlen_k, right >=
        // max_seqlen_q - 1 (the first query then sees the last key).
        assert_eq!(m(false, (2000, 0)), (MaskKind::Causal, (-1, -1)));
        assert_eq!(m(false, (1999, 0)), (MaskKind::Local, (1999, 0)));
        assert_eq!(m(false, (5, 999)), (MaskKind::Local, (5, -1)));
        assert_eq!(m(false, (5, 998)), (MaskKind::Local, (5, 998)));
        assert_eq!(m(false, (4096, 4096)), (MaskKind::None, (-1, -1)));
    }

    #[test]
    fn arguments_resolve_to_the_spec_they_need() {
        let args = PrefillArgs {
            dtype: Dtype::Fp16,
            head_dim: 64,
            head_dim_v: 64,
            causal: true,
            params: FwdParams {
                seqlen_q: 300,
                seqlen_k: 500,
                softmax_scale: 0.125,
                window_left: 128,
                window_right: -1,
                sinks: 0x1000,
                softcap: 0.0,
                ..FwdParams::default()
            },
            split: None,
        };
        let (q, p) = args.resolve(Arch::Sm90);
        assert_eq!(
            (q.mask, q.max_seqlen_q, q.dtype),
            (MaskKind::Local, 300, Dtype::Fp16)
        );
        assert_eq!(q.features, "sinks".parse().unwrap());
        assert_eq!((p.window_left, p.window_right), (128, 0));
        assert_eq!(p.scale_log2, 0.125 * std::f32::consts::LOG2_E);
        let paged = PrefillArgs {
            causal: false,
            params: FwdParams {
                softcap: 30.0,
                page_table: 0x2000,
                sinks: 0,
                window_left: -1,
                ..args.params
            },
            ..args
        };
        let (q, p) = paged.resolve(Arch::Sm80);
        assert_eq!((q.mask, q.arch), (MaskKind::None, Arch::Sm80));
        assert_eq!(q.features, "softcap+paged".parse().unwrap());
        assert_eq!(p.softcap, 30.0);
    }

    #[test]
    fn cubin_headers_name_their_sm() {
        // The ELF header fields cubin_sm reads, as NVRTC 13 writes them for sm_90.
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        (elf[7], elf[8]) = (0x41, 8);
        elf[18..20].copy_from_slice(&190u16.to_le_bytes());
        elf[48..52].copy_from_slice(&0x0a00_5a04u32.to_le_bytes());
        assert_eq!(cubin_sm(&elf), Some(90));
        elf[48..52].copy_from_slice(&0x0a00_6402u32.to_le_bytes());
        assert_eq!(cubin_sm(&elf), Some(100));
        // The older ABI: SM in the low byte.
        elf[8] = 7;
        elf[48..52].copy_from_slice(&0x0050_0550u32.to_le_bytes());
        assert_eq!(cubin_sm(&elf), Some(0x50));
        elf[18] = 62; // x86-64
        assert_eq!(cubin_sm(&elf), None);
        assert_eq!(cubin_sm(b"not an elf"), None);
    }

    #[test]
    fn cubins_for_another_gpu_or_changed_since_the_build_are_refused() {
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        (elf[7], elf[8]) = (0x41, 8);
        elf[18..20].copy_from_slice(&190u16.to_le_bytes());
        let with_sm = |sm: u32| {
            let mut e = elf.clone();
            e[48..52].copy_from_slice(&(0x0a00_0004 | (sm << 8)).to_le_bytes());
            let hash = format!("{:016x}", fnv1a64(&e));
            (e, hash)
        };
        let h200 = Device {
            ctx: 1,
            ordinal: 0,
            name: "NVIDIA H200".into(),
            compute_capability: (9, 0),
            arch: Arch::Sm90,
            sm_count: 132,
        };
        let (sm90, hash) = with_sm(90);
        assert_eq!(check_cubin(&sm90, &hash, &h200), Ok(()));
        let (sm100, hash) = with_sm(100);
        let why = check_cubin(&sm100, &hash, &h200).unwrap_err();
        assert!(
            why.contains("machine code for sm_100, and this device is sm_90"),
            "{why}"
        );
        // sm_80 code runs on sm_86, not the other way round.
        let a6000 = Device {
            compute_capability: (8, 6),
            arch: Arch::Sm86,
            ..h200.clone()
        };
        let (sm80, hash80) = with_sm(80);
        assert_eq!(check_cubin(&sm80, &hash80, &a6000), Ok(()));
        let (sm89, hash89) = with_sm(89);
        assert!(check_cubin(&sm89, &hash89, &a6000).is_err());
        let why = check_cubin(&sm90, "0000000000000000", &h200).unwrap_err();
        assert!(why.contains("does not match the manifest"), "{why}");
    }

    #[test]
    fn without_a_driver_a_call_is_an_error_not_a_crash() {
        // SAFETY: only probes for the library.
        if unsafe { sys::is_culib_present() } {
            eprintln!("skipped: this machine has a CUDA driver (tests/gpu.rs covers it)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(fa4_spec::manifest::MANIFEST_FILE),
            serde_json::to_string(&super::super::tests::manifest()).unwrap(),
        )
        .unwrap();
        let runtime = Runtime::new(KernelCache::open(dir.path()).unwrap());
        let args = PrefillArgs {
            dtype: Dtype::Bf16,
            head_dim: 128,
            head_dim_v: 128,
            causal: true,
            params: FwdParams::default(),
            split: None,
        };
        // SAFETY: no driver: the call fails before anything is launched.
        let e = unsafe { runtime.prefill(&args, std::ptr::null_mut()) }.unwrap_err();
        assert!(matches!(e, PrefillError::NoDriver), "{e}");
        assert!(e.to_string().contains("libcuda.so.1"));
        assert!(runtime.preload().is_err());
    }
}
