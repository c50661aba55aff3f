//! NVRTC, loaded at run time: the binary builds and runs without CUDA, and finds
//! `libnvrtc.so.13` only when it has something to compile.
//!
//! We call the handful of NVRTC functions we need through our own symbol table rather
//! than cudarc's NVRTC module: cudarc searches the loader path only and panics when the
//! library or a symbol is missing, while fa4-gen must find a pip-installed NVRTC and
//! answer a missing one with an error that says how to install it.

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The soname fa4-gen loads. Cubins that ship are built with 13.0.x: the GPU hosts
/// run driver 580 (CUDA 13.0).
pub const NVRTC_SONAME: &str = "libnvrtc.so.13";
/// Environment variable naming libnvrtc.so.13 or the folder holding it.
pub const NVRTC_ENV: &str = "FA4_GEN_NVRTC";
const INSTALL_HINT: &str = "install it with `python3 -m pip install nvidia-cuda-nvrtc==13.0.88`, \
or set FA4_GEN_NVRTC to the path of libnvrtc.so.13";

#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error("NVRTC ({NVRTC_SONAME}) was not found (searched {searched}): {INSTALL_HINT}")]
    NotFound { searched: String },
    #[error(
        "{NVRTC_ENV}={given} does not name {NVRTC_SONAME} or a folder holding it: {INSTALL_HINT}"
    )]
    BadEnv { given: String },
    #[error("cannot load NVRTC from {path}: {message}")]
    Load { path: String, message: String },
    #[error("NVRTC call {call} failed: {message}")]
    Call { call: &'static str, message: String },
}

type Program = *mut c_void;
type Status = c_int;

/// NVRTC's C entry points (signatures from nvrtc.h).
struct Api {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    create_program: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    destroy_program: unsafe extern "C" fn(*mut Program) -> Status,
    compile_program: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status,
    get_program_log_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    get_program_log: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    get_cubin_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    get_cubin: unsafe extern "C" fn(Program, *mut c_char) -> Status,
}

/// A loaded NVRTC.
pub struct Nvrtc {
    api: Api,
    path: String,
    version: (i32, i32),
    // Never unloaded: `api`'s pointers must stay valid, and NVRTC may leave helper
    // threads behind its calls. `fa4-gen compile` once died in the test suite with a
    // jump to an unmapped address, the mark of code unloaded under a running thread.
    _lib: ManuallyDrop<libloading::Library>,
    _builtins: ManuallyDrop<Option<libloading::Library>>,
}

/// What one successful compilation produced.
#[derive(Debug, Clone)]
pub struct CompileOutput {
    pub cubin: Vec<u8>,
    /// NVRTC's log: warnings and the ptxas resource report.
    pub log: String,
}

/// NVRTC refused a source.
#[derive(Debug, Clone, thiserror::Error)]
#[error("NVRTC could not compile {name}:\n{log}")]
pub struct CompileFailure {
    pub name: String,
    pub log: String,
}

/// The CUDA variable that turns the driver's and NVRTC's compute cache off.
pub const CACHE_DISABLE_ENV: &str = "CUDA_CACHE_DISABLE";

/// Turns the CUDA compute cache off for this process unless the caller chose otherwise.
/// The driver reads the variable when it initialises, so a process that opens a GPU
/// and compiles must call this first (`fa4-gen`'s `main` does); [`Nvrtc::load`] calls
/// it too, which covers processes that only compile.
pub fn disable_compute_cache() {
    if std::env::var_os(CACHE_DISABLE_ENV).is_none() {
        std::env::set_var(CACHE_DISABLE_ENV, "1");
    }
}

impl Nvrtc {
    /// Finds and loads NVRTC, in this order: `FA4_GEN_NVRTC`; the dynamic loader's path
    /// (`LD_LIBRARY_PATH`, ldconfig); `CUDA_HOME`, `CUDA_PATH` and `/usr/local/cuda`; a
    /// pip-installed `nvidia-cuda-nvrtc` in any site-packages `python3` knows.
    ///
    /// Turns the CUDA compute cache off for this process first ([`disable_compute_cache`]):
    /// with a driver installed, NVRTC answers a PTX it has compiled before from
    /// `~/.nv/ComputeCache` without running ptxas, so the log has no resource report and
    /// the kernel could not be judged.
    pub fn load() -> Result<Self, NvrtcError> {
        disable_compute_cache();
        if let Some(given) = std::env::var_os(NVRTC_ENV) {
            let path = resolve_env(&given).ok_or_else(|| NvrtcError::BadEnv {
                given: given.to_string_lossy().into_owned(),
            })?;
            return Self::open_path(&path);
        }
        let mut searched = vec!["the loader path".to_string()];
        // SAFETY: loading NVRTC runs its initialisers, which have no preconditions.
        if let Ok(lib) = unsafe { open_global(OsStr::new(NVRTC_SONAME)) } {
            return Self::from_library(lib, None, NVRTC_SONAME.to_string());
        }
        for dir in search_dirs() {
            let candidate = dir.join(NVRTC_SONAME);
            searched.push(dir.display().to_string());
            if candidate.is_file() {
                return Self::open_path(&candidate);
            }
        }
        Err(NvrtcError::NotFound {
            searched: searched.join(", "),
        })
    }

    /// Loads NVRTC from an explicit file, together with the `libnvrtc-builtins` beside it.
    pub fn open_path(path: &Path) -> Result<Self, NvrtcError> {
        let load_err = |e: libloading::Error| NvrtcError::Load {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        // NVRTC dlopens its builtins by bare name. Outside the loader path (a pip wheel)
        // that lookup fails unless the builtins library is already loaded: load it first.
        let builtins = match path.parent().and_then(find_builtins) {
            // SAFETY: as above.
            Some(b) => Some(unsafe { open_global(b.as_os_str()) }.map_err(load_err)?),
            None => None,
        };
        // SAFETY: as above.
        let lib = unsafe { open_global(path.as_os_str()) }.map_err(load_err)?;
        Self::from_library(lib, builtins, path.display().to_string())
    }

    fn from_library(
        lib: libloading::Library,
        builtins: Option<libloading::Library>,
        path: String,
    ) -> Result<Self, NvrtcError> {
        fn sym<T: Copy>(
            lib: &libloading::Library,
            name: &str,
            path: &str,
        ) -> Result<T, NvrtcError> {
            // SAFETY: the type T of each symbol below is its signature in nvrtc.h.
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| NvrtcError::Load {
                    path: path.to_string(),
                    message: format!("missing symbol {name}: {e}"),
                })
        }
        let api = Api {
            version: sym(&lib, "nvrtcVersion", &path)?,
            error_string: sym(&lib, "nvrtcGetErrorString", &path)?,
            create_program: sym(&lib, "nvrtcCreateProgram", &path)?,
            destroy_program: sym(&lib, "nvrtcDestroyProgram", &path)?,
            compile_program: sym(&lib, "nvrtcCompileProgram", &path)?,
            get_program_log_size: sym(&lib, "nvrtcGetProgramLogSize", &path)?,
            get_program_log: sym(&lib, "nvrtcGetProgramLog", &path)?,
            get_cubin_size: sym(&lib, "nvrtcGetCUBINSize", &path)?,
            get_cubin: sym(&lib, "nvrtcGetCUBIN", &path)?,
        };
        let mut nvrtc = Nvrtc {
            api,
            path,
            version: (0, 0),
            _lib: ManuallyDrop::new(lib),
            _builtins: ManuallyDrop::new(builtins),
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        nvrtc.check("nvrtcVersion", unsafe {
            (nvrtc.api.version)(&mut major, &mut minor)
        })?;
        nvrtc.version = (major, minor);
        Ok(nvrtc)
    }

    /// (major, minor) as NVRTC reports it.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    pub fn version_string(&self) -> String {
        format!("{}.{}", self.version.0, self.version.1)
    }

    /// Where NVRTC was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn check(&self, call: &'static str, status: Status) -> Result<(), NvrtcError> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string.
        let message = unsafe { CStr::from_ptr((self.api.error_string)(status)) }
            .to_string_lossy()
            .into_owned();
        Err(NvrtcError::Call { call, message })
    }

    /// Compiles one translation unit to a cubin. `headers` are (include name, text)
    /// pairs NVRTC resolves `#include "name"` against; `options` are NVRTC flags; `name`
    /// is the source's path, named in failures.
    ///
    /// The same inputs give the same cubin in any folder: `-lineinfo` writes the working
    /// directory and the program's path into the line table, so NVRTC compiles on a
    /// thread of its own whose working directory is `/` (Linux's per-thread `unshare`),
    /// with the file name alone as the program's. Where `unshare` is refused (some
    /// sandboxes) it compiles in place, and the cubin names that folder.
    pub fn compile(
        &self,
        name: &str,
        source: &str,
        headers: &[(&str, &str)],
        options: &[String],
    ) -> Result<Result<CompileOutput, CompileFailure>, NvrtcError> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    own_working_directory();
                    self.compile_here(name, source, headers, options)
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    fn compile_here(
        &self,
        name: &str,
        source: &str,
        headers: &[(&str, &str)],
        options: &[String],
    ) -> Result<Result<CompileOutput, CompileFailure>, NvrtcError> {
        let c = |s: &str| CString::new(s).expect("no NUL in sources or options");
        let src = c(source);
        let file_name = std::path::Path::new(name)
            .file_name()
            .map_or(name.into(), |f| f.to_string_lossy());
        let cname = c(&file_name);
        let header_texts: Vec<CString> = headers.iter().map(|h| c(h.1)).collect();
        let header_names: Vec<CString> = headers.iter().map(|h| c(h.0)).collect();
        let text_ptrs: Vec<*const c_char> = header_texts.iter().map(|s| s.as_ptr()).collect();
        let name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();
        let opts: Vec<CString> = options.iter().map(|o| c(o)).collect();
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|s| s.as_ptr()).collect();

        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: every pointer refers to a live NUL-terminated string owned above, and
        // the two header arrays have the length passed.
        self.check("nvrtcCreateProgram", unsafe {
            (self.api.create_program)(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                headers.len() as c_int,
                text_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            )
        })?;
        let guard = ProgramGuard {
            api: &self.api,
            prog,
        };
        // SAFETY: `prog` is a live program; the option array has the length passed.
        let status =
            unsafe { (self.api.compile_program)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
        let log = self.log(guard.prog)?;
        if status != 0 {
            return Ok(Err(CompileFailure {
                name: name.to_string(),
                log,
            }));
        }
        let mut size = 0usize;
        // SAFETY: live program, valid out-pointer.
        self.check("nvrtcGetCUBINSize", unsafe {
            (self.api.get_cubin_size)(prog, &mut size)
        })?;
        let mut cubin = vec![0u8; size];
        // SAFETY: `cubin` has the size NVRTC just reported.
        self.check("nvrtcGetCUBIN", unsafe {
            (self.api.get_cubin)(prog, cubin.as_mut_ptr().cast())
        })?;
        Ok(Ok(CompileOutput { cubin, log }))
    }

    fn log(&self, prog: Program) -> Result<String, NvrtcError> {
        let mut size = 0usize;
        // SAFETY: live program, valid out-pointer.
        self.check("nvrtcGetProgramLogSize", unsafe {
            (self.api.get_program_log_size)(prog, &mut size)
        })?;
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: `buf` holds the size NVRTC reported (including the NUL).
        self.check("nvrtcGetProgramLog", unsafe {
            (self.api.get_program_log)(prog, buf.as_mut_ptr().cast())
        })?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }
}

/// Gives the calling thread a working directory of its own, `/`, where Linux allows it
/// (`unshare(CLONE_FS)`; the rest of the process keeps its own); whether it did.
#[cfg(target_os = "linux")]
fn own_working_directory() -> bool {
    // SAFETY: CLONE_FS gives this thread alone its own filesystem context, so the chdir
    // leaves the rest of the process where it was; a NUL-terminated path.
    unsafe { libc::unshare(libc::CLONE_FS) == 0 && libc::chdir(c"/".as_ptr()) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn own_working_directory() -> bool {
    false
}

/// Whether this process can compile on a thread with a working directory of its own,
/// which makes cubins independent of the folder ([`Nvrtc::compile`]).
pub fn folder_independent() -> bool {
    std::thread::spawn(own_working_directory)
        .join()
        .unwrap_or(false)
}

struct ProgramGuard<'a> {
    api: &'a Api,
    prog: Program,
}

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: `prog` was created by nvrtcCreateProgram and is destroyed once.
        unsafe { (self.api.destroy_program)(&mut self.prog) };
    }
}

/// dlopen with RTLD_NOW | RTLD_GLOBAL, so a later dlopen by soname finds this copy.
///
/// # Safety
/// Runs the library's initialisers.
unsafe fn open_global(name: &OsStr) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    Library::open(Some(name), RTLD_NOW | RTLD_GLOBAL).map(Into::into)
}

fn resolve_env(given: &OsStr) -> Option<PathBuf> {
    let p = PathBuf::from(given);
    if p.is_file() {
        Some(p)
    } else if p.join(NVRTC_SONAME).is_file() {
        Some(p.join(NVRTC_SONAME))
    } else {
        None
    }
}

/// `libnvrtc-builtins.so.13.*` in `dir` (not the `.alt` variant).
fn find_builtins(dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvrtc-builtins.so.13") && !n.contains(".alt."))
        })
        .collect();
    found.sort();
    found.pop()
}

/// Folders that may hold libnvrtc.so.13, in search order (after the loader path).
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var) {
            let root = PathBuf::from(root);
            dirs.push(root.join("lib64"));
            dirs.push(root.join("lib"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for site in python_site_dirs() {
        dirs.push(site.join("nvidia/cu13/lib"));
        dirs.push(site.join("nvidia/cuda_nvrtc/lib"));
    }
    dirs.dedup();
    dirs
}

/// site-packages folders of the active virtualenv and of `python3` (asked, once).
pub(crate) fn python_site_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        if let Ok(entries) = std::fs::read_dir(Path::new(&venv).join("lib")) {
            for e in entries.flatten() {
                dirs.push(e.path().join("site-packages"));
            }
        }
    }
    let script = "import site, sys\n\
                  paths = list(getattr(site, 'getsitepackages', lambda: [])())\n\
                  paths.append(site.getusersitepackages())\n\
                  paths += [p for p in sys.path if p.endswith('-packages')]\n\
                  print('\\n'.join(paths))";
    for python in ["python3", "python"] {
        if let Ok(out) = Command::new(python).args(["-c", script]).output() {
            if out.status.success() {
                dirs.extend(
                    String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .filter(|l| !l.trim().is_empty())
                        .map(PathBuf::from),
                );
                break;
            }
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_var_must_name_a_real_library() {
        assert!(resolve_env(OsStr::new("/nonexistent/libnvrtc.so.13")).is_none());
        let dir = tempfile::tempdir().unwrap();
        assert!(resolve_env(dir.path().as_os_str()).is_none());
        std::fs::write(dir.path().join(NVRTC_SONAME), b"").unwrap();
        assert_eq!(
            resolve_env(dir.path().as_os_str()).unwrap(),
            dir.path().join(NVRTC_SONAME)
        );
    }

    #[test]
    fn builtins_are_found_beside_nvrtc_but_not_the_alt_build() {
        let dir = tempfile::tempdir().unwrap();
        assert!(find_builtins(dir.path()).is_none());
        std::fs::write(dir.path().join("libnvrtc-builtins.alt.so.13.0"), b"").unwrap();
        assert!(find_builtins(dir.path()).is_none());
        std::fs::write(dir.path().join("libnvrtc-builtins.so.13.0"), b"").unwrap();
        assert_eq!(
            find_builtins(dir.path()).unwrap(),
            dir.path().join("libnvrtc-builtins.so.13.0")
        );
    }

    #[test]
    fn not_found_error_says_how_to_install() {
        let e = NvrtcError::NotFound {
            searched: "the loader path".into(),
        };
        let msg = e.to_string();
        assert!(
            msg.contains("pip install nvidia-cuda-nvrtc==13.0.88"),
            "{msg}"
        );
        assert!(msg.contains(NVRTC_ENV));
    }
}
