//! fa4-gen: an ahead-of-time generator, compiler and autotuner for FlashAttention-style
//! prefill kernels.
//!
//! Data flows one way through one module per stage:
//!
//! ```text
//! space ──▶ render ──▶ compile (NVRTC) ──▶ gpu (load, launch) ──▶ verify, bench
//! (which kernels)  (CUDA source)  (cubin + ptxas report)     (checked and timed on
//!                                                              the device's problems)
//! ```
//!
//! `tune` checks and times every candidate per sequence-length bucket and keeps what it
//! finds in `db`, the tuning database; `cache` builds the shipped kernel cache
//! (`generated/`) from its export, and `runtime` is the dispatcher that reads it. The CLI (`src/main.rs`, `cli`) is a thin layer over these.

pub mod cache;
pub mod compile;
pub mod db;
pub mod fsutil;
pub mod measure;
pub mod render;
pub mod space;
pub mod timestamp;
pub mod tune;

pub use fa4_runtime as runtime;
pub use fa4_spec as spec;
