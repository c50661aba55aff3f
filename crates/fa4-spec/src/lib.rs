//! The shared vocabulary of fa4-gen.
//!
//! Everything both sides of the tool need to agree on lives here, with no dependency
//! beyond serde: the generator and tuner write these types, the runtime library reads
//! them. A [`KernelSpec`] says *what* a caller needs (arch, dtype, head dims, mask);
//! a [`TileConfig`] says *how* one kernel computes it; [`FwdParams`] is the
//! `#[repr(C)]` argument block every forward kernel receives, mirrored field for field
//! by `templates/include/fa4/common/params.cuh`.
//!
//! It also holds the kernel cache's contract: the [`manifest`] that `build-cache` writes
//! and the runtime reads, each kernel's [`Footprint`] (how to launch it), the
//! sequence-length [`Bucket`] a tuned choice serves, and the [`Template`] names.

mod arch;
mod bucket;
mod footprint;
mod hash;
pub mod manifest;
mod params;
mod spec;
mod template;

pub use arch::Arch;
pub use bucket::Bucket;
pub use footprint::{varlen_cubin_path, Footprint, KERNEL_ENTRY, VARLEN_KERNEL_ENTRY};
pub use hash::{fnv1a64, Fnv1a64};
pub use params::FwdParams;
pub use spec::{head_dims_name, Dtype, Features, KernelSpec, MaskKind, TileConfig};
pub use template::Template;

/// A value given on the command line or in a file that names no offered choice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{given}`: expected one of {expected}")]
pub struct ParseError {
    /// What kind of value it was ("arch", "dtype", ...).
    pub what: &'static str,
    /// The text as given.
    pub given: String,
    /// The accepted spellings, comma separated.
    pub expected: String,
}
