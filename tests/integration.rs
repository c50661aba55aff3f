//! Integration tests, one binary: the CLI as a user meets it, the compile pipeline end
//! to end through NVRTC, and (on a GPU host) the kernels on the device.
//!
//! NVRTC is required: the README's test command installs it. GPU tests skip, saying
//! so, where no CUDA driver is present.

mod cache;
mod cli;
mod common;
mod compile;
mod gpu;
mod python;
