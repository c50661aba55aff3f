//! fa4-gen: an ahead-of-time generator, compiler and autotuner for FlashAttention-style
//! prefill kernels.
//!
//! Data flows one way through one module per stage:
//!
//! ```text
//! space ──▶ render ──▶ compile (NVRTC) ──▶ measure (verify, bench) ──▶ tune ──▶ db ──▶ cache
//! (which     (CUDA      (cubins, ptxas     (on the GPU, against an    (per     (records,  (generated/:
//!  kernels)   source)    reports, code      f32 reference; timed as    bucket)  export)    manifest +
//!                        hashes, SASS)      the peers are)                                 cubins)
//! ```
//!
//! The runtime that serves the cache is its own crate (`fa4_runtime`, re-exported as
//! [`runtime`]); the generator measures kernels through the runtime's checks and grid,
//! so a kernel is timed as it is served. [`report`] draws the export and the bench rows
//! as one self-contained HTML page. The `fa4-gen` binary (`src/main.rs`,
//! `src/cli/`) parses commands and calls these modules.

pub mod cache;
pub mod compile;
pub mod db;
pub mod fsutil;
pub mod measure;
pub mod render;
pub mod report;
pub mod space;
pub mod timestamp;
pub mod tune;

pub use fa4_runtime as runtime;
pub use fa4_spec as spec;
