//! On a GPU host: the kernels on the device against the f32 reference. Elsewhere the
//! test checks that `verify` says plainly why it cannot run, and skips the rest.

use crate::common::{fa4_gen, stderr, stdout};

fn has_cuda_driver() -> bool {
    // SAFETY: only probes whether the library can be loaded.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

#[test]
fn verify_checks_kernels_on_the_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "verify",
        "--head-dim",
        "64,128",
        "--dtype",
        "bf16",
        "--cases",
        "s17,q77_k513,q300_k64,gqa8to2_s257",
    ];
    let out = fa4_gen(dir.path(), &args);
    if !has_cuda_driver() {
        eprintln!("skipped: no CUDA driver on this machine; `fa4-gen verify` runs the GPU checks on a GPU host");
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert!(
            err.contains("no CUDA driver") && err.lines().count() == 1,
            "{err}"
        );
        return;
    }
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("16 of 16 checks passed"), "{text}");
}
