//! Integration tests, one binary: the CLI as a user meets it, the compile pipeline end
//! to end through NVRTC, Blackwell's tcgen05 wrappers through ptxas, and (on a GPU host)
//! the kernels on the device.
//!
//! NVRTC is required: the README's test command installs it. GPU tests skip, saying
//! so, where no CUDA driver is present; the report's browser test skips without Chromium
//! unless FA4GEN_REQUIRE_BROWSER=1 (CI).

mod blackwell;
mod cache;
mod cli;
mod common;
mod compile;
mod gpu;
mod python;
mod report;
