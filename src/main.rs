mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Exit quietly when stdout is closed early (`fa4-gen list | head`), as Unix tools do,
    // instead of panicking on the failed write.
    // SAFETY: called before any thread exists; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Before any thread and before the CUDA driver starts: every compile must run ptxas
    // and print its resource report: the driver's compute cache would answer a recompiled
    // PTX without ptxas, with an empty log.
    fa4_gen::compile::nvrtc::disable_compute_cache();
    let cli = cli::Cli::parse();
    cli::run(cli)
}
