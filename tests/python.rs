//! The Python module's calls on the host: `tests/python/host_calls.py` runs them over a
//! stand-in for torch (shapes, strides and addresses, no values) and checks what each
//! packs for the C ABI and what it refuses, without torch or a GPU.

use std::path::PathBuf;
use std::process::Command;

/// Runs the unittest script `script` (under the repository) with `python`; asserts it
/// passed and returns unittest's report.
fn unittest(python: &str, script: &str) -> String {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python)
        .arg(script)
        .current_dir(&repo)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{report}");
    assert!(report.contains("\nOK"), "{report}");
    report
}

#[test]
fn python_calls_pack_and_refuse_on_the_host() {
    if !crate::common::has_python3() {
        return;
    }
    let report = unittest("python3", "tests/python/host_calls.py");
    // every test ran, none skipped
    assert!(!report.contains("skipped"), "{report}");
}

/// `fa4gen.sglang`: the calls it routes in each layout SGLang's FlashAttention backend
/// module has had, and `python -m fa4gen.sglang` routing them in the scheduler process a
/// stand-in `sglang.launch_server` spawns, as SGLang's does (`tests/python/sglang_route.py`).
#[test]
fn sglang_prefill_is_routed_in_the_processes_sglang_spawns() {
    if !crate::common::has_python3() {
        return;
    }
    let report = unittest("python3", "tests/python/sglang_route.py");
    assert!(!report.contains("skipped"), "{report}");
}

/// `fa4gen.transformers`, the Hugging Face transformers backend, on the host:
/// `tests/python/transformers_backend.py` checks its mask, window and unpadding logic
/// against transformers' own mask code, and runs small Llama, Qwen2 and gpt-oss models
/// end to end over a reference of the kernels against transformers' eager attention.
/// Those need torch and transformers in the interpreter that FA4GEN_TEST_PYTHON names
/// (else python3); without them only the import and window tests run, the others are
/// skipped and say so.
#[test]
fn transformers_backend_on_the_host() {
    if !crate::common::has_python3() {
        return;
    }
    let python = std::env::var("FA4GEN_TEST_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let report = unittest(&python, "tests/python/transformers_backend.py");
    if let Some(line) = report.lines().find(|l| l.contains("are skipped")) {
        eprintln!("{line}");
    }
}

/// The wheel `scripts/build_wheel.py` makes installs with pip alone and serves from what
/// it carries: the module finds its bundled library and kernel cache with no repository,
/// no FA4GEN_* variable and no CUDA. The cache is cut down to one spec whose kernel is
/// compiled here (the committed cache's cubins are built by `fa4-gen build-cache`).
#[test]
fn a_wheel_carries_its_library_and_cache() {
    if !crate::common::has_python3() {
        return;
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    // The spec's one kernel, compiled, and a manifest of that spec alone (an untuned spec,
    // so its default is all it serves).
    crate::common::compile_default(tmp, "build", "hopper", "128", "causal", "softcap+paged");
    let cut = r#"
import json, shutil, sys
from pathlib import Path
repo, tmp = Path(sys.argv[1]), Path(sys.argv[2])
m = json.load(open(repo / "generated/manifest.json"))
tag = "sm90_bf16_d128_causal_softcap_paged"
entry = m["archs"]["sm90"]["specs"][tag]
assert not any(k.startswith("tuned") and v for k, v in entry.items()), entry
m["archs"] = {"sm90": dict(m["archs"]["sm90"], specs={tag: entry})}
m["kernels"] = {entry["default"]: m["kernels"][entry["default"]]}
k = m["kernels"][entry["default"]]
(tmp / "cache/sm90").mkdir(parents=True)
shutil.copyfile(tmp / "build/cubin" / k["cubin"], tmp / "cache" / k["cubin"])
# The cubin compiled here is the committed manifest's, byte for byte (FNV-1a 64, the
# hash the runtime checks before loading), unless this sandbox makes cubins name their
# folder (then the manifest takes this build's hash).
h = 0xcbf29ce484222325
for b in (tmp / "cache" / k["cubin"]).read_bytes():
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
if sys.argv[3] == "strict":
    assert "%016x" % h == k["cubin_hash"], ("%016x" % h, k["cubin_hash"])
k["cubin_hash"] = "%016x" % h
(tmp / "cache/manifest.json").write_text(json.dumps(m))
print(entry["default"])
"#;
    let run = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let kernel = run(Command::new("python3")
        .args(["-c", cut])
        .arg(&repo)
        .arg(tmp)
        .arg(if fa4_gen::compile::nvrtc::folder_independent() {
            "strict"
        } else {
            "lax"
        }));
    let lib = crate::common::cdylib_dir().join("libfa4_runtime.so");
    run(Command::new("python3")
        .arg(repo.join("scripts/build_wheel.py"))
        .args(["--arch", "sm90", "--cache"])
        .arg(tmp.join("cache"))
        .arg("--lib")
        .arg(&lib)
        .arg("--out")
        .arg(tmp.join("dist")));
    let wheel = std::fs::read_dir(tmp.join("dist"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a wheel");
    run(Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
        ])
        .arg(tmp.join("site"))
        .arg(&wheel));
    let use_it = r#"
import json, os
import fa4gen
here = os.path.dirname(fa4gen.__file__)
assert here.startswith(os.environ["PYTHONPATH"]), here  # the wheel's, not the repository's
assert fa4gen._default_cache_dir() == os.path.join(here, "cache"), fa4gen._default_cache_dir()
# The cubin arrived as the manifest describes it.
for k in json.load(open(os.path.join(here, "cache/manifest.json")))["kernels"].values():
    h = 0xcbf29ce484222325
    for b in open(os.path.join(here, "cache", k["cubin"]), "rb").read():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    assert "%016x" % h == k["cubin_hash"], k
with fa4gen.KernelCache() as c:
    s = c.select(head_dim=128, max_seqlen_q=4096, causal=True, softcap=30.0, paged=True)
    print(s["kernel"], s["reason"])
    try:
        c.select(head_dim=128, max_seqlen_q=4096, causal=True)
    except fa4gen.Fa4genError as e:
        print("error", e)
"#;
    let mut python = Command::new("python3");
    python
        .args(["-c", use_it])
        .current_dir(tmp)
        .env("PYTHONPATH", tmp.join("site"))
        .env_remove("FA4GEN_LIB")
        .env_remove("FA4GEN_CACHE");
    let text = run(&mut python);
    assert!(text.contains(&format!("{kernel} default")), "{text}");
    assert!(
        text.contains("error bf16 causal mask with features none is not in this cache"),
        "{text}"
    );
}
