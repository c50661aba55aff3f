//! The C ABI over the runtime (`include/fa4gen.h`): an opaque cache handle,
//! create/destroy, kernel selection, prefill on the caller's stream, and error codes
//! with a per-thread message. No panic crosses the boundary: each entry point catches
//! it and returns `FA4GEN_ERR_INTERNAL`.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use cudarc::driver::sys::CUstream;
use fa4_spec::{Arch, Dtype, Features, FwdParams, MaskKind};

use crate::{
    Descales, KernelCache, PrefillArgs, PrefillError, Query, Reason, Runtime, SplitWorkspace,
};

pub const FA4GEN_OK: i32 = 0;
/// A null pointer, an unknown enum value, a path that is not UTF-8.
pub const FA4GEN_ERR_INVALID_ARGUMENT: i32 = 1;
/// The cache is missing, corrupt or from another version.
pub const FA4GEN_ERR_CACHE: i32 = 2;
/// No cached kernel covers the problem (head dim, arch, feature set).
pub const FA4GEN_ERR_UNSUPPORTED: i32 = 3;
/// A bug in fa4-gen: the message says where.
pub const FA4GEN_ERR_INTERNAL: i32 = 4;
/// No driver, no current context, another device's context, or a failed CUDA call.
pub const FA4GEN_ERR_CUDA: i32 = 5;

/// An open kernel cache and the kernels it has loaded (opaque to C).
pub struct Fa4genCache(Runtime);

/// One prefill call. Mirrors `fa4gen_prefill_args` in `fa4gen.h`; `params` is
/// [`FwdParams`], byte for byte (`fa4gen_params`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Fa4genPrefillArgs {
    /// 0 bf16, 1 fp16, 2 e4m3 (FP8 Q, K and V; O in bf16).
    pub dtype: u32,
    pub head_dim: u32,
    pub head_dim_v: u32,
    /// FlashAttention's `causal`.
    pub causal: u32,
    pub params: FwdParams,
    /// A split workspace (`fa4gen_split_workspace_bytes`, zeroed when allocated), or 0.
    pub split_workspace: u64,
    pub split_workspace_bytes: u64,
    /// e4m3 calls only (read for dtype 2): f32 descales of Q, K and V per (sequence, KV
    /// head), device pointers or 0 (1.0), at `b * batch_stride + h_kv * head_stride`.
    pub q_descale: u64,
    pub k_descale: u64,
    pub v_descale: u64,
    pub descale_batch_stride: i64,
    pub descale_head_stride: i64,
}

/// Bytes of `Fa4genPrefillArgs` before the descales: the whole struct of the headers
/// before e4m3, all that a bf16 or fp16 call is read for.
const PREFILL_ARGS_16BIT_BYTES: usize = std::mem::offset_of!(Fa4genPrefillArgs, q_descale);

const _: () = assert!(PREFILL_ARGS_16BIT_BYTES == 272);
const _: () = assert!(std::mem::size_of::<Fa4genPrefillArgs>() == 312);

/// The dtype code of e4m3 (`Fa4genPrefillArgs::dtype`, `Fa4genQuery::dtype`).
const DTYPE_E4M3: u32 = 2;

/// The problem, as the dispatcher sees it. Mirrors `fa4gen_query` in `fa4gen.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Fa4genQuery {
    /// Compute capability times ten: 80, 86, 89, 90, 100, 120.
    pub arch: u32,
    /// 0 bf16, 1 fp16, 2 e4m3.
    pub dtype: u32,
    pub head_dim: u32,
    pub head_dim_v: u32,
    /// 0 none, 1 causal, 2 local (sliding window).
    pub mask: u32,
    /// Bit 0 sinks, bit 1 softcap, bit 2 paged K/V; bit 3 a varlen batch of several
    /// sequences (`Query::ragged`).
    pub features: u32,
    /// The longest query sequence of the batch.
    pub max_seqlen_q: u32,
    /// FlashAttention's `window_size` (-1: unbounded); read for local masks.
    pub window_left: i32,
    pub window_right: i32,
    /// The longest key sequence of the batch (0: `max_seqlen_q`): a window wider than
    /// the keys is looked up as the causal or unmasked kernel a prefill launches.
    pub max_seqlen_k: u32,
}

/// The chosen kernel. Mirrors `fa4gen_selection` in `fa4gen.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Fa4genSelection {
    /// NUL-terminated.
    pub kernel_id: [c_char; 128],
    /// NUL-terminated, relative to the cache folder.
    pub cubin: [c_char; 256],
    pub threads: u32,
    pub block_m: u32,
    pub block_n: u32,
    pub smem_bytes: u32,
    pub pack_gqa: u32,
    pub registers: u32,
    /// 0: the bucket's tuned choice; 1: the nearest tuned bucket's; 2: the default.
    pub reason: u32,
    /// The tuned bucket used (0 for the default).
    pub bucket: u32,
    pub is_default: u32,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(code: i32, message: String) -> i32 {
    let c = CString::new(message.replace('\0', " ")).expect("no NUL left");
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
    code
}

/// Runs `f`, turning a panic into FA4GEN_ERR_INTERNAL.
fn guarded(f: impl FnOnce() -> i32) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            fail(
                FA4GEN_ERR_INTERNAL,
                format!("internal error in fa4-gen: {what}; please report it"),
            )
        }
    }
}

fn copy_str<const N: usize>(dst: &mut [c_char; N], s: &str) -> bool {
    if s.len() >= N {
        return false;
    }
    for (d, b) in dst.iter_mut().zip(s.bytes()) {
        *d = b as c_char;
    }
    dst[s.len()] = 0;
    true
}

/// The message of the calling thread's last failed call ("" if none). Valid until the
/// thread's next failing call.
#[no_mangle]
pub extern "C" fn fa4gen_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// fa4-gen's version, NUL-terminated, static.
#[no_mangle]
pub extern "C" fn fa4gen_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Opens the kernel cache in `dir` (NUL-terminated UTF-8 path) into `*out`.
///
/// # Safety
/// `dir` is null or a NUL-terminated string; `out` is null or points to writable
/// storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn fa4gen_cache_open(dir: *const c_char, out: *mut *mut Fa4genCache) -> i32 {
    guarded(|| {
        if dir.is_null() || out.is_null() {
            return fail(
                FA4GEN_ERR_INVALID_ARGUMENT,
                "fa4gen_cache_open: dir and out must not be null".into(),
            );
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let Ok(dir) = unsafe { CStr::from_ptr(dir) }.to_str() else {
            return fail(
                FA4GEN_ERR_INVALID_ARGUMENT,
                "fa4gen_cache_open: dir is not UTF-8".into(),
            );
        };
        match KernelCache::open(Path::new(dir)) {
            Ok(cache) => {
                let handle = Box::new(Fa4genCache(Runtime::new(cache)));
                // SAFETY: `out` is non-null and writable by the caller's contract.
                unsafe { *out = Box::into_raw(handle) };
                FA4GEN_OK
            }
            Err(e) => fail(FA4GEN_ERR_CACHE, e.to_string()),
        }
    })
}

/// Closes a cache from `fa4gen_cache_open` (null is ignored).
///
/// # Safety
/// `cache` is null or a handle from `fa4gen_cache_open` not closed before.
#[no_mangle]
pub unsafe extern "C" fn fa4gen_cache_close(cache: *mut Fa4genCache) {
    if !cache.is_null() {
        // SAFETY: a live handle from Box::into_raw, closed once.
        drop(unsafe { Box::from_raw(cache) });
    }
}

fn dtype(d: u32) -> Result<Dtype, String> {
    match d {
        0 => Ok(Dtype::Bf16),
        1 => Ok(Dtype::Fp16),
        DTYPE_E4M3 => Ok(Dtype::E4m3),
        d => Err(format!("dtype {d} is not 0 (bf16), 1 (fp16) or 2 (e4m3)")),
    }
}

/// The caller's arguments: the whole struct for an e4m3 call, only the bytes before the
/// descales otherwise (the descales then zero), so that a bf16 or fp16 caller that packs
/// the struct of earlier headers (272 bytes, as the Python module does) is read exactly
/// as before and never past its end.
///
/// # Safety
/// `args` is valid for reads of 272 bytes, and of the whole struct when its dtype is 2;
/// it need not be aligned.
unsafe fn read_prefill_args(args: *const Fa4genPrefillArgs) -> Fa4genPrefillArgs {
    // SAFETY: the dtype is the struct's first 4 bytes, which every caller passes.
    let code = unsafe { std::ptr::read_unaligned(args.cast::<u32>()) };
    let len = if code == DTYPE_E4M3 {
        std::mem::size_of::<Fa4genPrefillArgs>()
    } else {
        PREFILL_ARGS_16BIT_BYTES
    };
    let mut out = std::mem::MaybeUninit::<Fa4genPrefillArgs>::zeroed();
    // SAFETY: `len` bytes are readable at `args` (this function's contract) and fit
    // `out`; every field is an integer or a float, for which any bytes (and zero) are a
    // value.
    unsafe {
        std::ptr::copy_nonoverlapping(args.cast::<u8>(), out.as_mut_ptr().cast::<u8>(), len);
        out.assume_init()
    }
}

fn query(q: &Fa4genQuery) -> Result<Query, String> {
    let Some(arch) = Arch::from_compute_capability(q.arch / 10, q.arch % 10) else {
        return Err(format!(
            "arch {} is not one of 80, 86, 89, 90, 100, 120",
            q.arch
        ));
    };
    let dtype = dtype(q.dtype)?;
    let mask = match q.mask {
        0 => MaskKind::None,
        1 => MaskKind::Causal,
        2 => MaskKind::Local,
        m => return Err(format!("mask {m} is not 0 (none), 1 (causal) or 2 (local)")),
    };
    if q.features > 15 {
        return Err(format!(
            "features {:#x} has bits beyond sinks|softcap|paged|ragged (0xf)",
            q.features
        ));
    }
    Ok(Query {
        arch,
        dtype,
        head_dim: q.head_dim,
        head_dim_v: q.head_dim_v,
        mask,
        features: Features {
            sinks: q.features & 1 != 0,
            softcap: q.features & 2 != 0,
            paged_kv: q.features & 4 != 0,
        },
        max_seqlen_q: q.max_seqlen_q,
        window: (q.window_left, q.window_right),
        ragged: q.features & 8 != 0,
    }
    .as_launched(q.max_seqlen_k))
}

/// Picks the kernel for `*q` into `*out`. A pure lookup: no GPU, no allocation.
///
/// # Safety
/// `cache` is a live handle; `q` and `out` are null or valid for reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fa4gen_select(
    cache: *const Fa4genCache,
    q: *const Fa4genQuery,
    out: *mut Fa4genSelection,
) -> i32 {
    guarded(|| {
        if cache.is_null() || q.is_null() || out.is_null() {
            return fail(
                FA4GEN_ERR_INVALID_ARGUMENT,
                "fa4gen_select: cache, q and out must not be null".into(),
            );
        }
        // SAFETY: non-null and valid by the caller's contract.
        let (cache, q) = unsafe { ((*cache).0.cache(), &*q) };
        let q = match query(q) {
            Ok(q) => q,
            Err(e) => return fail(FA4GEN_ERR_INVALID_ARGUMENT, format!("fa4gen_select: {e}")),
        };
        let s = match cache.select(&q) {
            Ok(s) => s,
            Err(e) => return fail(FA4GEN_ERR_UNSUPPORTED, e.to_string()),
        };
        let (reason, bucket) = match s.reason {
            Reason::Tuned { bucket } => (0, bucket),
            Reason::NearestTuned { bucket, .. } => (1, bucket),
            Reason::Default => (2, 0),
            Reason::Borrowed { bucket, .. } => (3, bucket),
            Reason::TunedRagged { bucket } => (4, bucket),
        };
        let k = s.kernel;
        let mut sel = Fa4genSelection {
            kernel_id: [0; 128],
            cubin: [0; 256],
            threads: k.footprint.threads,
            block_m: k.footprint.block_m,
            block_n: k.config.block_n,
            smem_bytes: k.footprint.smem_bytes,
            pack_gqa: k.footprint.pack_gqa as u32,
            registers: k.registers,
            reason,
            bucket,
            is_default: s.is_default as u32,
        };
        if !copy_str(&mut sel.kernel_id, s.id) || !copy_str(&mut sel.cubin, &k.cubin) {
            return fail(
                FA4GEN_ERR_INTERNAL,
                format!("kernel name {} does not fit the selection struct", s.id),
            );
        }
        // SAFETY: `out` is non-null and writable by the caller's contract.
        unsafe { *out = sel };
        FA4GEN_OK
    })
}

fn prefill_code(e: &PrefillError) -> i32 {
    match e {
        PrefillError::Select(_) => FA4GEN_ERR_UNSUPPORTED,
        PrefillError::Problem(_) => FA4GEN_ERR_INVALID_ARGUMENT,
        PrefillError::Cubin { .. } => FA4GEN_ERR_CACHE,
        PrefillError::NoDriver
        | PrefillError::NoContext(_)
        | PrefillError::OtherContext { .. }
        | PrefillError::Device { .. }
        | PrefillError::Driver { .. } => FA4GEN_ERR_CUDA,
    }
}

/// The size of `fa4gen_params` this library was built with (240), for callers that
/// mirror the struct (ctypes) to check their layout against.
#[no_mangle]
pub extern "C" fn fa4gen_params_size() -> u32 {
    std::mem::size_of::<FwdParams>() as u32
}

/// Bytes of a split workspace (`split_workspace` in `fa4gen_params`) that serves every
/// kernel on a GPU of `sm_count` SMs. Allocate it once per stream, zeroed; each launch
/// leaves it fit for the next.
#[no_mangle]
pub extern "C" fn fa4gen_split_workspace_bytes(sm_count: u32) -> u64 {
    crate::max_split_workspace_bytes(sm_count)
}

/// Launches the kernel for `*args` on `stream` (a `CUstream`; null: the legacy default
/// stream), asynchronously. On first use the handle binds to the CUDA context current on
/// the calling thread; each kernel's cubin is checked and loaded on its first call.
///
/// # Safety
/// `cache` is a live handle; `args` is null or valid for reads (of the bytes before the
/// descales unless its dtype is 2: `read_prefill_args`); its pointers are device memory
/// of the bound device that outlives the kernel; `stream` belongs to the bound context.
#[no_mangle]
pub unsafe extern "C" fn fa4gen_prefill(
    cache: *const Fa4genCache,
    args: *const Fa4genPrefillArgs,
    stream: *mut std::ffi::c_void,
) -> i32 {
    guarded(|| {
        if cache.is_null() || args.is_null() {
            return fail(
                FA4GEN_ERR_INVALID_ARGUMENT,
                "fa4gen_prefill: cache and args must not be null".into(),
            );
        }
        // SAFETY: non-null and valid by the caller's contract; read unaligned, as a
        // caller may pack the struct into any buffer (Python's struct module does).
        let (runtime, a) = unsafe { (&(*cache).0, read_prefill_args(args)) };
        let dtype = match dtype(a.dtype) {
            Ok(d) => d,
            Err(e) => return fail(FA4GEN_ERR_INVALID_ARGUMENT, format!("fa4gen_prefill: {e}")),
        };
        let args = PrefillArgs {
            dtype,
            head_dim: a.head_dim,
            head_dim_v: a.head_dim_v,
            causal: a.causal != 0,
            params: a.params,
            descale: Descales {
                q: a.q_descale,
                k: a.k_descale,
                v: a.v_descale,
                batch_stride: a.descale_batch_stride,
                head_stride: a.descale_head_stride,
            },
            split: (a.split_workspace != 0).then_some(SplitWorkspace {
                ptr: a.split_workspace,
                bytes: a.split_workspace_bytes,
            }),
        };
        // SAFETY: the pointers and the stream are the caller's, under this function's
        // contract.
        match unsafe { runtime.prefill(&args, stream as CUstream) } {
            Ok(_) => FA4GEN_OK,
            Err(e) => fail(prefill_code(&e), e.to_string()),
        }
    })
}

/// Loads every kernel of the bound device's arch now (binding to the current context
/// if not bound yet), so that no later call pays for a cubin load. `*loaded` (if not
/// null) receives how many kernels that was.
///
/// # Safety
/// `cache` is a live handle; `loaded` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn fa4gen_preload(cache: *const Fa4genCache, loaded: *mut u32) -> i32 {
    guarded(|| {
        if cache.is_null() {
            return fail(
                FA4GEN_ERR_INVALID_ARGUMENT,
                "fa4gen_preload: cache must not be null".into(),
            );
        }
        // SAFETY: a live handle by the caller's contract.
        match unsafe { &(*cache).0 }.preload() {
            Ok(n) => {
                if !loaded.is_null() {
                    // SAFETY: non-null and writable by the caller's contract.
                    unsafe { *loaded = n as u32 };
                }
                FA4GEN_OK
            }
            Err(e) => fail(prefill_code(&e), e.to_string()),
        }
    })
}

#[cfg(test)]
mod tests;
