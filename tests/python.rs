//! The Python module's calls on the host: `tests/python/host_calls.py` runs them over a
//! stand-in for torch (shapes, strides and addresses, no values) and checks what each
//! packs for the C ABI and what it refuses, without torch or a GPU.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn python_calls_pack_and_refuse_on_the_host() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3 on this machine");
        return;
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg("tests/python/host_calls.py")
        .current_dir(&repo)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    // unittest's summary: every test ran, none skipped.
    assert!(report.contains("\nOK"), "{report}");
    assert!(!report.contains("skipped"), "{report}");
}
