use std::path::Path;
use std::process::{Command, Output};

/// Runs the fa4-gen binary with `args` in `cwd`.
pub fn fa4_gen(cwd: &Path, args: &[&str]) -> Output {
    fa4_gen_env(cwd, args, &[])
}

pub fn fa4_gen_env(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fa4-gen"));
    cmd.args(args).current_dir(cwd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("fa4-gen runs")
}

/// Runs fa4-gen, asserts that it succeeded (naming the arguments and its stderr), and
/// returns its stdout.
pub fn fa4_gen_ok(cwd: &Path, args: &[&str]) -> String {
    let out = fa4_gen(cwd, args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// NVRTC, or a panic that says how to get it.
pub fn nvrtc() -> fa4_gen::compile::Nvrtc {
    fa4_gen::compile::Nvrtc::load().unwrap_or_else(|e| {
        panic!("these tests compile kernels and need NVRTC ({e}); the README's test command installs it")
    })
}

/// The folder of `libfa4_runtime.so`, the runtime's C library (built here: a no-op once
/// built).
pub fn cdylib_dir() -> std::path::PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "fa4-runtime", "--lib", "--quiet"])
        .current_dir(repo)
        .status()
        .unwrap();
    assert!(status.success());
    repo.join("target/debug")
}

/// False, saying the test is skipped, where this machine has no python3.
pub fn has_python3() -> bool {
    let found = Command::new("python3").arg("--version").output().is_ok();
    if !found {
        eprintln!("skipped: no python3 on this machine");
    }
    found
}

/// Compiles one spec's default kernel (sm90, bf16) into `out` (relative to `cwd`).
pub fn compile_default(
    cwd: &Path,
    out: &str,
    template: &str,
    head_dim: &str,
    mask: &str,
    features: &str,
) {
    fa4_gen_ok(
        cwd,
        &[
            "compile",
            "--arch",
            "sm90",
            "--template",
            template,
            "--dtype",
            "bf16",
            "--head-dim",
            head_dim,
            "--mask",
            mask,
            "--features",
            features,
            "--default-only",
            "--out",
            out,
            "-q",
        ],
    );
}
