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
    // "N of N checks passed": every template's kernels for the GPU's arch.
    let summary = text
        .lines()
        .find(|l| l.contains("checks passed"))
        .unwrap_or_else(|| panic!("no summary: {text}"));
    let words: Vec<&str> = summary.split_whitespace().collect();
    assert!(words.len() > 2 && words[0] == words[2], "{summary}");
}

/// On a GPU host with the cache's cubins built (`fa4-gen build-cache`): prefill calls
/// through the runtime library, timed on the host. Elsewhere the reason it cannot run.
#[test]
fn the_runtime_launches_from_the_shipped_cache() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let cache = repo.join("generated");
    let out = fa4_gen(
        dir.path(),
        &["bench", "--host", "--cache", cache.to_str().unwrap()],
    );
    if !has_cuda_driver() {
        eprintln!(
            "skipped: no CUDA driver on this machine; `fa4-gen bench --host` runs on a GPU host"
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains("no CUDA driver"), "{}", stderr(&out));
        return;
    }
    if stderr(&out).contains("fa4-gen build-cache") {
        eprintln!("skipped: the cache's cubins are not built here (`fa4-gen build-cache`)");
        return;
    }
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("per call") && text.contains("first call"),
        "{text}"
    );
}

#[test]
fn tune_times_into_the_database_or_offers_compile_only() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "tune",
        "--arch",
        "sm90",
        "--head-dim",
        "64",
        "--dtype",
        "bf16",
        "--causal",
        "yes",
        "--buckets",
        "512",
        "--budget",
        "20s",
        "--db",
        "db.sled",
    ];
    let out = fa4_gen(dir.path(), &args);
    if !has_cuda_driver() {
        eprintln!("skipped: no CUDA driver on this machine; `fa4-gen tune` times on a GPU host");
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert!(
            err.contains("--compile-only") && err.lines().count() == 1,
            "{err}"
        );
        assert!(
            !dir.path().join("db.sled").exists(),
            "no database without a GPU"
        );
        return;
    }
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("sm90_bf16_d64_causal") && text.contains("GPU busy"),
        "{text}"
    );
    // The same command again finds everything measured and measures nothing new.
    let again = stdout(&fa4_gen(dir.path(), &args));
    assert!(
        again.contains(" 0 timed") || again.contains("stopped by --budget"),
        "{again}"
    );
}
