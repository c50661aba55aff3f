//! The fa4-gen runtime: what a serving process links to run the shipped prefill
//! kernels. It opens a kernel cache (`generated/`: a manifest and cubins), picks the
//! kernel that serves a call (a pure lookup by spec and sequence-length bucket), checks
//! the call's arguments on the host, and launches the cubin on the caller's stream. No
//! JIT, no compiler, no tuning database: only the vocabulary crate, the CUDA driver
//! (loaded at run time) and serde_json for the manifest.
//!
//! ```text
//! select ──▶ checks ──▶ grid (+ tma maps) ──▶ launch (cuLaunchKernel)
//! ```
//!
//! The same library is the C ABI (`capi`, `include/fa4gen.h`) that the Python module
//! (`python/fa4gen`) calls through ctypes.

pub mod capi;
mod checks;
mod grid;
mod launch;
mod select;
mod tma;

pub use checks::{
    check_descales, check_problem, check_problem_as, check_problem_for, kernel_params,
    ProblemError, MAX_ROW_STRIDE,
};
pub use grid::{
    causal_section_pairs, check_split_workspace, launch_footprint, launch_grid,
    max_split_workspace_bytes, split_tail, split_workspace_bytes, SplitWorkspace,
    SPLIT_COUNTER_BYTES, SPLIT_MIN_KEYS,
};
pub use launch::{cubin_sm, driver_message, PrefillArgs, PrefillError, Runtime};
pub use select::{
    gpu_name, mask_of, CacheError, KernelCache, Query, Reason, SelectError, Selected,
};
pub use tma::{Descales, Fp8TmaFwdParams, TmaFwdParams};

#[cfg(test)]
mod test_manifest;
