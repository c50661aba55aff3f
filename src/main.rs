use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Exit quietly when stdout is closed early (`fa4-gen list | head`), as Unix tools do,
    // instead of panicking on the failed write.
    // SAFETY: called before any thread exists; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = fa4_gen::cli::Cli::parse();
    fa4_gen::cli::run(cli)
}
