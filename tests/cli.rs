//! The command line as a user meets it: listings, and one clear line for bad input.

use std::collections::BTreeMap;

use crate::common::{fa4_gen, fa4_gen_env, fa4_gen_ok, stderr, stdout};

#[test]
fn list_shows_every_spec_with_a_default() {
    let dir = tempfile::tempdir().unwrap();
    let out = fa4_gen(dir.path(), &["list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // 6 archs x 5 head dims x 2 dtypes x 3 masks, plus header and the untested-arch note.
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("portable")).collect();
    assert_eq!(rows.len(), 180, "{text}");
    assert!(
        rows.iter().all(|r| r.contains("_qregs")),
        "every row names a default config"
    );
    assert!(
        text.contains("note: sm80, sm86, sm89, sm100, sm120 kernels are compile-checked only"),
        "{text}"
    );
}

#[test]
fn a_template_alone_lists_the_archs_it_compiles_for() {
    let dir = tempfile::tempdir().unwrap();
    let out = fa4_gen(
        dir.path(),
        &["list", "--template", "hopper", "--dtype", "bf16"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("hopper")).collect();
    // 6 head dims (192/128 too) x 3 masks, every one on sm90.
    assert_eq!(rows.len(), 18, "{text}");
    assert!(
        rows.iter()
            .all(|r| r.split_whitespace().nth(1) == Some("sm90")),
        "{text}"
    );
}

#[test]
fn list_json_is_the_whole_space() {
    let dir = tempfile::tempdir().unwrap();
    let out = fa4_gen(
        dir.path(),
        &["list", "--arch", "sm90", "--head-dim", "128", "--json"],
    );
    assert!(out.status.success());
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    // Portable: causal and local specs add 12 warp-skipping candidates to the 134 every
    // spec has (72, 46 of them again with lazy rescaling, and at d128 16 twins capped
    // for two to four blocks per SM); Hopper: 20 stage-1, 12 warp-specialised, 6 persistent, 2 persistent
    // single-consumer, 1 three-stage and 1 unoverlapped 256-key candidates per spec (the
    // last rejected at d128 for shared memory, still listed), and the 17 of those with
    // overlap and pingpong (or a persistent block of their own) again with lazy rescaling;
    // on causal and local specs the 31 pingpong ones (16 + 15 lazy) again with turns at
    // the MUFU, and 4 persistent pairs without turns (over 64 and 128 keys, plain and
    // lazy); on unmasked specs the 14 non-persistent pingpong tiles with overlap and
    // without pack-GQA (7 + 7 lazy) again in clusters of two blocks.
    assert_eq!(
        rows.len(),
        2 * 134 + 4 * 146 + 6 * (20 + 12 + 6 + 2 + 1 + 1 + 17) + 4 * (31 + 4) + 2 * 14,
        "6 specs (dtype x mask) per template"
    );
    assert!(
        rows.iter()
            .filter(|r| r["config"]["switches"]["cluster"] == 2)
            .all(|r| r["spec"]["mask"] == "none"),
        "clusters pair unmasked tiles only"
    );
    assert_eq!(
        rows.iter()
            .filter(|r| r["config"]["switches"]["warpskip"] == 1)
            .filter(|r| r["spec"]["mask"] == "none")
            .count(),
        0,
        "without a mask there is nothing to skip"
    );
    assert_eq!(
        rows.iter()
            .filter(|r| r["config"]["switches"]["mufuturn"] == 1)
            .filter(|r| r["spec"]["mask"] == "none")
            .filter(|r| r["config"]["block_n"] != 256)
            .count(),
        0,
        "turns at the MUFU are enumerated on masked specs only (and on the 256-key tile)"
    );
    assert_eq!(
        rows.iter().filter(|r| r["is_default"] == true).count(),
        12,
        "one default per (template, spec)"
    );
    let pruned: Vec<_> = rows
        .iter()
        .filter(|r| r["verdict"].get("rejected").is_some())
        .collect();
    assert!(!pruned.is_empty());
    assert!(pruned
        .iter()
        .all(|r| r["verdict"]["rejected"]["reason"].as_str().unwrap().len() > 10));
    assert!(rows
        .iter()
        .all(|r| r["spec"]["head_dim"] == 128 && r["spec"]["arch"] == "sm90"));
}

/// Bad input: exit 2, one line on stderr that names the problem and the fix.
fn assert_usage_error(args: &[&str], expected: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = fa4_gen(dir.path(), args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line, got {err:?}");
    assert!(
        err.starts_with("error: ") && err.contains(expected),
        "{args:?}: {err:?}"
    );
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "{args:?} wrote files"
    );
}

#[test]
fn tune_arguments_are_checked_before_any_work() {
    assert_usage_error(
        &["tune", "--head-dim", "64"],
        "tune needs --arch with one architecture, e.g. --arch sm90",
    );
    assert_usage_error(
        &["tune", "--arch", "sm90,sm100", "--head-dim", "64"],
        "tune needs --arch with one architecture",
    );
    assert_usage_error(
        &["tune", "--arch", "sm90", "--causal", "maybe"],
        "--causal maybe: expected both, yes or no",
    );
    assert_usage_error(
        &["tune", "--arch", "sm90", "--buckets", "1000"],
        "--buckets 1000 is not a bucket; buckets are 128, 256,",
    );
    assert_usage_error(
        &["tune", "--arch", "sm90", "--shard", "4/4"],
        "--shard 4/4: expected i/n with 0 <= i < n",
    );
    assert_usage_error(
        &["tune", "--arch", "sm90", "--budget", "ten"],
        "--budget ten: expected a positive time such as 90s, 10m or 1h",
    );
    assert_usage_error(
        &["tune", "--arch", "sm90", "--head-dim", "80"],
        "head dim 80 is not offered for sm90",
    );
}

/// `--compile-only` works anywhere NVRTC does: sm100 has no GPU here, and none is needed.
#[test]
fn tune_compile_only_builds_and_prunes_without_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let out = fa4_gen(
        dir.path(),
        &[
            "tune",
            "--arch",
            "sm100",
            "--head-dim",
            "64",
            "--dtype",
            "bf16",
            "--causal",
            "yes",
            "--compile-only",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["arch"], "sm100");
    // The spec on the portable template and on the Blackwell (tcgen05) one.
    assert_eq!(summary["specs"], 2);
    let built = summary["built"].as_u64().unwrap();
    assert!(built > 40 + 24, "{summary}");
    assert!(summary["kernels_per_second_per_core"].as_f64().unwrap() > 0.0);
    let cubins: Vec<String> = std::fs::read_dir(dir.path().join("build/cubin/sm100"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(cubins.len() as u64, built);
    let tcgen05 = cubins
        .iter()
        .filter(|c| c.starts_with("blackwell_"))
        .count();
    assert!(tcgen05 >= 24, "{tcgen05} Blackwell kernels of {built}");
    assert!(
        !dir.path().join("tuning-db").exists(),
        "nothing timed, nothing recorded"
    );
}

#[test]
fn bad_input_gets_one_clear_line() {
    assert_usage_error(
        &["compile", "--arch", "sm91"],
        "unknown arch `sm91`: expected one of sm80, sm86, sm89, sm90, sm100, sm120",
    );
    assert_usage_error(
        &["compile", "--arch", "sm90", "--head-dim", "65"],
        "head dim 65 is not offered for sm90: offered head dims are 64, 96, 128, 192/128, 192, 256",
    );
    assert_usage_error(
        &["list", "--head-dim", "512"],
        "head dim 512 is not offered",
    );
    assert_usage_error(
        &["list", "--head-dim", "big"],
        "head dim `big` is not a number or a QK/V pair",
    );
    assert_usage_error(
        &["list", "--head-dim", "192/64"],
        "head dim 192/64 is not offered for sm80",
    );
    assert_usage_error(
        &["compile", "--arch", "sm90", "--dtype", "fp4"],
        "unknown dtype `fp4`: expected one of bf16, fp16, e4m3",
    );
    assert_usage_error(&["list", "--mask", "diagonal"], "unknown mask `diagonal`");
    assert_usage_error(
        &["list", "--features", "alibi"],
        "unknown feature set `alibi`: expected one of none, sinks, softcap, paged (joined with +",
    );
    assert_usage_error(
        &["render", "--template", "nope"],
        "unknown template `nope`: expected one of portable",
    );
    assert_usage_error(&["compile"], "compile needs --arch");
    assert_usage_error(
        &[
            "compile",
            "--arch",
            "sm90",
            "--head-dim",
            "64",
            "--config-filter",
            "nosuch1",
        ],
        "no config of the selected specs has a tag containing \"nosuch1\"",
    );
    assert_usage_error(&["verify", "--arch", "sm91"], "unknown arch `sm91`");
    // A template named without --arch means the archs it compiles for; named with one it
    // cannot, the error says which it can.
    assert_usage_error(
        &["verify", "--template", "hopper", "--cases", "nope"],
        "no case matches --cases",
    );
    assert_usage_error(
        &["list", "--arch", "sm80", "--template", "hopper"],
        "no selected template compiles for sm80: hopper compiles for sm90; pick another --arch or --template",
    );
    // The serving options of bench are checked before any GPU is looked for.
    assert_usage_error(
        &["bench", "--layers", "gpt-5"],
        "unknown model layer `gpt-5` (expected all, gpt-oss-20b",
    );
    assert_usage_error(
        &["bench", "--page-size", "0"],
        "--page-size 0 is not a positive number of keys",
    );
    assert_usage_error(&["bench", "--window", "128"], "--window takes LEFT,RIGHT");
    assert_usage_error(
        &["bench", "--placements", "3", "--move-buffer", "lse"],
        "--move-buffer lse: expected q, k, v or o",
    );
    assert_usage_error(
        &["bench", "--move-buffer", "k"],
        "--move-buffer k moves a buffer between buffer sets: add --placements 2 or more",
    );
}

#[test]
fn unwritable_output_folder_is_named_and_left_clean() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), b"x").unwrap();
    let target = dir.path().join("file/out");
    let out = fa4_gen(
        dir.path(),
        &[
            "compile",
            "--arch",
            "sm90",
            "--head-dim",
            "64",
            "--default-only",
            "--out",
            target.to_str().unwrap(),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot write") && err.contains("file/out"),
        "{err}"
    );
}

#[test]
fn missing_nvrtc_says_how_to_install_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = fa4_gen_env(
        dir.path(),
        &[
            "compile",
            "--arch",
            "sm90",
            "--head-dim",
            "64",
            "--default-only",
            "--out",
            "b",
        ],
        &[("FA4_GEN_NVRTC", "/nonexistent/libnvrtc.so.13")],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("FA4_GEN_NVRTC=/nonexistent/libnvrtc.so.13 does not name libnvrtc.so.13"),
        "{err}"
    );
    assert!(
        err.contains("pip install nvidia-cuda-nvrtc==13.0.88"),
        "{err}"
    );
    // Nothing that looks like a finished build was left behind.
    assert!(!dir.path().join("b/report").exists());
    assert!(!dir.path().join("b/cubin").exists());
}

#[test]
fn render_writes_sources_that_name_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let out = fa4_gen(
        dir.path(),
        &[
            "render",
            "--arch",
            "sm90",
            "--head-dim",
            "96",
            "--default-only",
            "-q",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let src_dir = dir.path().join("build/src/sm90");
    let files: Vec<_> = std::fs::read_dir(&src_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // d96 is offered by both templates (Hopper's in d128's tiles, not yet served).
    assert_eq!(files.len(), 12, "one per template x dtype x mask");
    let mut per_template = BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let id = f.file_stem().unwrap().to_str().unwrap();
        assert!(
            text.lines().nth(1).unwrap().ends_with(id),
            "{}",
            f.display()
        );
        assert!(text.contains("head_dim=96"));
        let template = id.split('_').next().unwrap().to_string();
        let header = format!("#include \"fa4/{template}/kernel.cuh\"");
        assert!(text.contains(&header), "{}: {header}", f.display());
        *per_template.entry(template).or_insert(0) += 1;
    }
    assert_eq!(
        per_template,
        BTreeMap::from([("hopper".to_string(), 6), ("portable".to_string(), 6)])
    );
    // The headers are written beside the sources, so each source compiles on its own.
    assert!(dir
        .path()
        .join("build/include/fa4/portable/kernel.cuh")
        .is_file());
}

/// The tuning database from the command line: a record imported from an export shows
/// and exports back byte for byte; a folder that is not a database is refused untouched.
/// One hand-made record: the portable template's d64 causal key at 4096 tokens, one
/// candidate timed at 1.25 ms as `kernel`, whose machine code is `code_hash`.
fn hand_record(kernel: &str, code_hash: &str) -> fa4_gen::db::Record {
    use fa4_gen::db::{Candidate, Device, Outcome, Record, TimingPolicy};
    use fa4_gen::spec::Bucket;
    use fa4_gen::spec::{Arch, Dtype, KernelSpec, MaskKind, TileConfig};
    Record {
        template: fa4_gen::space::Template::Portable,
        spec: KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal),
        bucket: Bucket::of(4096),
        device: Device {
            name: "NVIDIA H200".into(),
            sm_count: 132,
            driver: "13.0".into(),
            nvrtc: "13.0".into(),
        },
        template_hash: "0123456789abcdef".into(),
        timing: TimingPolicy {
            warmup: 3,
            runs: 50,
            l2_flush: true,
            budget_ms: 25.0,
            finalists: 0,
            settle_ms: 0.0,
            key_warmup_ms: 0.0,
            final_passes: 0,
            final_placements: 0,
            short_key_passes: 0,
            short_key_ms: 0.0,
        },
        date: "2026-11-30T11:00:00Z".into(),
        candidates: vec![Candidate {
            config: TileConfig {
                block_m: 128,
                block_n: 64,
                warps: 4,
                stages: 1,
                switches: Default::default(),
            },
            kernel: kernel.into(),
            outcome: Outcome::Measured {
                ms: 1.25,
                spread: 0.02,
                tflops: 300.0,
                registers: 240,
                settled_ms: None,
                settled_passes: Vec::new(),
                code_hash: code_hash.into(),
            },
        }],
    }
}

/// `compile --config-filter` builds the matching configs of each spec and nothing else.
#[test]
fn compile_builds_only_the_filtered_configs() {
    let dir = tempfile::tempdir().unwrap();
    let build = dir.path().join("build");
    let report = build_d64_causal(
        dir.path(),
        build.to_str().unwrap(),
        &["--config-filter", "m64n32w4s1_"],
    );
    let mut built: Vec<String> = report["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            // portable_sm90_bf16_d64_causal_<config tag>_<hash>
            let id = k["id"].as_str().unwrap();
            let tag = id.strip_prefix("portable_sm90_bf16_d64_causal_").unwrap();
            tag.rsplit_once('_').unwrap().0.to_string()
        })
        .collect();
    built.sort_unstable();
    // What the space offers (and static pruning keeps) with that text in its tag.
    let listed = fa4_gen_ok(
        dir.path(),
        &[&["list"], D64_CAUSAL_PORTABLE, &["--configs", "-q"]].concat(),
    );
    let mut expected: Vec<String> = listed
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let kept = matches!(cols.last(), Some(&"ok") | Some(&"default"));
            (kept && cols.get(2)?.contains("m64n32w4s1_")).then(|| cols[2].to_string())
        })
        .collect();
    expected.sort_unstable();
    assert!(expected.len() >= 2, "{listed}");
    assert_eq!(built, expected);
}

/// The spec arguments of sm90 bf16 d64 causal on the portable template.
const D64_CAUSAL_PORTABLE: &[&str] = &[
    "--arch",
    "sm90",
    "--head-dim",
    "64",
    "--dtype",
    "bf16",
    "--mask",
    "causal",
    "--template",
    "portable",
];

/// Builds bf16 d64 causal's default portable kernel into `build` (`fa4-gen compile`)
/// and returns the build's report.
fn build_d64_causal_default(dir: &std::path::Path, build: &str) -> serde_json::Value {
    build_d64_causal(dir, build, &["--default-only"])
}

/// Builds bf16 d64 causal's portable kernels that `which` selects (`--default-only`,
/// `--config-filter ..`) into `build` and returns the build's report.
fn build_d64_causal(dir: &std::path::Path, build: &str, which: &[&str]) -> serde_json::Value {
    let args = [
        &["compile"],
        D64_CAUSAL_PORTABLE,
        &["--out", build, "-q"],
        which,
    ]
    .concat();
    fa4_gen_ok(dir, &args);
    let report = std::path::Path::new(build).join("report/sm90.json");
    serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap()
}

/// Timings recorded without a code hash take their kernel's from a build of the same
/// templates; a folder with no build report is a usage error that says what to run.
#[test]
fn db_stamps_code_hashes_from_a_build() {
    use fa4_gen::db::export_json;

    let dir = tempfile::tempdir().unwrap();
    let build = dir.path().join("build");
    let build_arg = build.to_str().unwrap();
    let run = |args: &[&str]| fa4_gen_ok(dir.path(), args);
    let report = build_d64_causal_default(dir.path(), build_arg);
    let built = &report["kernels"][0];
    let (id, code) = (
        built["id"].as_str().unwrap(),
        built["code_hash"].as_str().unwrap(),
    );
    assert_eq!(code.len(), 16, "{built}");
    // Two records timed before code hashes were kept: one of the built kernel, one of a
    // kernel the build does not have.
    let mut other = hand_record("portable_elsewhere", "");
    other.bucket = fa4_gen::spec::Bucket::of(8192);
    let export = dir.path().join("in.json");
    std::fs::write(&export, export_json(&[hand_record(id, ""), other])).unwrap();
    let db = dir.path().join("db");
    let db_arg = db.to_str().unwrap();
    run(&["db", "import", export.to_str().unwrap(), "--db", db_arg]);
    let said = run(&["db", "stamp-code", "--build", build_arg, "--db", db_arg]);
    assert!(said.starts_with("1 timings in 1 records"), "{said}");
    let back = dir.path().join("out.json");
    run(&[
        "db",
        "export",
        "--out",
        back.to_str().unwrap(),
        "--db",
        db_arg,
    ]);
    let back = std::fs::read_to_string(&back).unwrap();
    assert_eq!(back.matches("\"code_hash\"").count(), 1, "{back}");
    assert!(
        back.contains(&format!("\"code_hash\": \"{code}\"")),
        "{back}"
    );

    let out = fa4_gen(
        dir.path(),
        &[
            "db",
            "stamp-code",
            "--build",
            dir.path().to_str().unwrap(),
            "--db",
            db_arg,
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no build report"), "{}", stderr(&out));
}

/// After a template edit, `db carry` moves a stale record to the current template version
/// where a local build repeats the machine code it timed, and leaves one whose code
/// differs for `tune`.
#[test]
fn db_carries_records_whose_machine_code_a_build_repeats() {
    use fa4_gen::db::export_json;

    let dir = tempfile::tempdir().unwrap();
    let build = dir.path().join("build");
    let build_arg = build.to_str().unwrap();
    let run = |args: &[&str]| fa4_gen_ok(dir.path(), args);
    let report = build_d64_causal_default(dir.path(), build_arg);
    let built = &report["kernels"][0];
    let id = built["id"].as_str().unwrap();
    let code = built["code_hash"].as_str().unwrap();
    let hash = built["template_hash"].as_str().unwrap();
    let config: fa4_gen::spec::TileConfig =
        serde_json::from_value(built["config"].clone()).unwrap();
    // Both timed under an older template version ("0123456789abcdef"), with the built
    // kernel's config: one of the same machine code, one of other code.
    let stale = |kernel: &str, code_hash: &str, seqlen: u32| {
        let mut r = hand_record(kernel, code_hash);
        r.bucket = fa4_gen::spec::Bucket::of(seqlen);
        r.candidates[0].config = config.clone();
        r
    };
    let export = dir.path().join("in.json");
    std::fs::write(
        &export,
        export_json(&[
            stale("portable_old_a", code, 4096),
            stale("portable_old_b", "ffff000011112222", 8192),
        ]),
    )
    .unwrap();
    let db = dir.path().join("db");
    let db_arg = db.to_str().unwrap();
    run(&["db", "import", export.to_str().unwrap(), "--db", db_arg]);
    let said = run(&["db", "carry", "--build", build_arg, "--db", db_arg]);
    assert!(said.starts_with("1 records carried"), "{said}");
    assert!(said.contains("1 stale records left"), "{said}");
    assert!(
        said.contains("stale: portable/sm90_bf16_d64_causal (1 records)"),
        "{said}"
    );
    let back = dir.path().join("out.json");
    run(&[
        "db",
        "export",
        "--out",
        back.to_str().unwrap(),
        "--db",
        db_arg,
    ]);
    let back: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&back).unwrap()).unwrap();
    let records = back["records"].as_object().unwrap();
    let by_bucket = |seqlen: u64| {
        records
            .values()
            .find(|r| r["bucket"]["seqlen"] == seqlen)
            .unwrap()
    };
    let moved = by_bucket(4096);
    assert_eq!(moved["template_hash"], hash);
    assert_eq!(moved["candidates"][0]["kernel"], id);
    assert_eq!(moved["candidates"][0]["outcome"]["measured"]["ms"], 1.25);
    let left = by_bucket(8192);
    assert_eq!(left["template_hash"], "0123456789abcdef");
    assert_eq!(left["candidates"][0]["kernel"], "portable_old_b");

    // Into a build folder without the kernel, carry compiles it first (the stale
    // record's one candidate); its code still differs, so the record stays.
    let fresh = dir.path().join("fresh");
    let said = run(&[
        "db",
        "carry",
        "--build",
        fresh.to_str().unwrap(),
        "--db",
        db_arg,
    ]);
    assert!(said.starts_with("0 records carried"), "{said}");
    assert!(said.contains("1 stale records left"), "{said}");
    let report = std::fs::read_to_string(fresh.join("report/sm90.json"))
        .expect("carry wrote the build's report");
    assert!(
        report.contains(id),
        "the compiled kernel is the build's: {report}"
    );
}

#[test]
fn db_round_trips_an_export_and_refuses_foreign_folders() {
    use fa4_gen::db::export_json;

    let dir = tempfile::tempdir().unwrap();
    let record = hand_record("portable_x", "0123456789abcdef");
    let export = dir.path().join("in.json");
    std::fs::write(&export, export_json(std::slice::from_ref(&record))).unwrap();
    let db = dir.path().join("db");
    let db_arg = db.to_str().unwrap();
    let run = |args: &[&str]| fa4_gen_ok(dir.path(), args);
    assert!(run(&["db", "import", export.to_str().unwrap(), "--db", db_arg]).contains("1 added"));
    let shown = run(&["db", "show", "--db", db_arg]);
    assert!(
        shown.contains("sm90_bf16_d64_causal") && shown.contains("1.250"),
        "{shown}"
    );
    let back = dir.path().join("out.json");
    run(&[
        "db",
        "export",
        "--out",
        back.to_str().unwrap(),
        "--db",
        db_arg,
    ]);
    assert_eq!(
        std::fs::read_to_string(&back).unwrap(),
        std::fs::read_to_string(&export).unwrap()
    );
    // Importing the same record again keeps it (no faster winner).
    assert!(run(&["db", "import", export.to_str().unwrap(), "--db", db_arg]).contains("1 kept"));
    // The record's template hash is not the current templates': gc removes it.
    assert!(run(&["db", "gc", "--db", db_arg]).contains("1 stale records removed"));

    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"keep me").unwrap();
    let out = fa4_gen(dir.path(), &["db", "show", "--db", other.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not a fa4-gen tuning database"), "{err}");
    assert_eq!(std::fs::read(other.join("notes.txt")).unwrap(), b"keep me");
}

/// `db export` writes each key's deciding candidates (the default and the winner here)
/// and a summary of the rest; `--full` writes them all. Both import; the slim record
/// serves what the full one does, and gives way to it when the full one is imported.
#[test]
fn db_exports_slim_records_and_full_ones_on_request() {
    use fa4_gen::db::{export_json, parse_export, Outcome};

    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| fa4_gen_ok(dir.path(), args);
    // The default at 1.25 ms, then candidates at 1.0 (the winner), 1.5 and a failure.
    let mut record = hand_record("portable_x0", "0123456789abcdef");
    for (i, ms) in [Some(1.0), Some(1.5), None].into_iter().enumerate() {
        let mut c = record.candidates[0].clone();
        c.kernel = format!("portable_x{}", i + 1);
        c.config.block_n = 64 << (i + 1);
        c.outcome = match ms {
            Some(ms) => Outcome::Measured {
                ms,
                spread: 0.02,
                tflops: 300.0,
                registers: 240,
                settled_ms: None,
                settled_passes: Vec::new(),
                code_hash: String::new(),
            },
            None => Outcome::Failed {
                error: "wrong output".into(),
            },
        };
        record.candidates.push(c);
    }
    let full = dir.path().join("full.json");
    std::fs::write(&full, export_json(std::slice::from_ref(&record))).unwrap();
    let db = dir.path().join("db");
    let db_arg = db.to_str().unwrap();
    run(&["db", "import", full.to_str().unwrap(), "--db", db_arg]);
    let export = |name: &str, db: &str, more: &[&str]| {
        let out = dir.path().join(name);
        let args = [
            &["db", "export", "--out", out.to_str().unwrap(), "--db", db],
            more,
        ]
        .concat();
        run(&args);
        (out.clone(), std::fs::read_to_string(out).unwrap())
    };
    let (_, again) = export("again.json", db_arg, &["--full"]);
    assert_eq!(again, std::fs::read_to_string(&full).unwrap());
    let (slim_path, slim) = export("slim.json", db_arg, &[]);
    let json: serde_json::Value = serde_json::from_str(&slim).unwrap();
    let r = &json["records"][record.key()];
    let kernels: Vec<&str> = r["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kernel"].as_str().unwrap())
        .collect();
    assert_eq!(kernels, ["portable_x0", "portable_x1"]);
    assert_eq!(
        r["screened"],
        serde_json::json!({"measured": 1, "failed": 1, "fastest_ms": 1.5, "slowest_ms": 1.5})
    );
    let back = parse_export(&slim_path, &slim).unwrap();
    assert_eq!(back[0].choice(), record.choice());
    // A store seeded from the slim export exports it again as it was, and takes the
    // full record back.
    let other = dir.path().join("other");
    let other_arg = other.to_str().unwrap();
    run(&[
        "db",
        "import",
        slim_path.to_str().unwrap(),
        "--db",
        other_arg,
    ]);
    assert_eq!(export("slim2.json", other_arg, &[]).1, slim);
    let said = run(&["db", "import", full.to_str().unwrap(), "--db", other_arg]);
    assert!(said.contains("1 slim records restored whole"), "{said}");
    assert_eq!(export("full2.json", other_arg, &["--full"]).1, again);
}

/// A sliding window is served by the bucket of its width, whatever the sequence's length;
/// a malformed window is a usage error that says what it takes.
#[test]
fn explain_serves_a_window_by_its_width() {
    let dir = tempfile::tempdir().unwrap();
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("generated");
    let cache = cache.to_str().unwrap();
    let why = |window: &str| {
        let out = fa4_gen(
            dir.path(),
            &[
                "explain",
                "--cache",
                cache,
                "--head-dim",
                "64",
                "--seqlen",
                "16384",
                "--mask",
                "local",
                "--features",
                "sinks",
                "--window",
                window,
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        text.lines()
            .find_map(|l| l.strip_prefix("why"))
            .unwrap_or_else(|| panic!("no why line: {text}"))
            .to_string()
    };
    assert!(why("128,0").contains("bucket 128"));
    assert!(why("1000,0").contains("bucket 1024"));
    assert!(why("512,512").contains("bucket 1024"));
    // Unbounded on the left: as long as the sequence.
    assert!(why("-1,0").contains("bucket 16384"));
    // A window wider than the keys is causal's, as a prefill launches it.
    let out = fa4_gen(
        dir.path(),
        &[
            "explain",
            "--cache",
            cache,
            "--head-dim",
            "64",
            "--seqlen",
            "300",
            "--mask",
            "local",
            "--features",
            "sinks",
            "--window",
            "1000,0",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("kernel    hopper_sm90_bf16_d64_causal_sinks_"),
        "{}",
        stdout(&out)
    );
    let out = fa4_gen(
        dir.path(),
        &[
            "explain",
            "--cache",
            cache,
            "--head-dim",
            "64",
            "--seqlen",
            "16384",
            "--mask",
            "local",
            "--window",
            "128",
        ],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--window takes LEFT,RIGHT"),
        "{}",
        stderr(&out)
    );
}

/// An untuned sinks spec whose twin without sinks is tuned is served its default, and
/// `explain` names the build that would serve the twin's tiles; a tuned one says nothing
/// of it.
#[test]
fn explain_names_the_borrowing_build_for_an_untuned_sinks_spec() {
    let dir = tempfile::tempdir().unwrap();
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("generated");
    let why = |head_dim: &str| {
        let out = fa4_gen(
            dir.path(),
            &[
                "explain",
                "--cache",
                cache.to_str().unwrap(),
                "--head-dim",
                head_dim,
                "--seqlen",
                "2048",
                "--mask",
                "causal",
                "--features",
                "sinks",
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
            .lines()
            .find_map(|l| l.strip_prefix("why"))
            .unwrap()
            .to_string()
    };
    let untuned = why("128");
    assert!(
        untuned.contains("heuristic default")
            && untuned.contains("sm90_bf16_d128_causal is tuned")
            && untuned.contains("--borrow-sinks"),
        "{untuned}"
    );
    let tuned = why("64");
    assert!(
        tuned.contains("bucket 2048") && !tuned.contains("borrow"),
        "{tuned}"
    );
}

/// `explain` says how the kernel it picks runs, and says it of that kernel: the schedule
/// line follows the config the cache serves (whatever a re-tune picked).
#[test]
fn explain_describes_the_schedule_of_the_kernel_it_picks() {
    let dir = tempfile::tempdir().unwrap();
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("generated");
    let cache = cache.to_str().unwrap();
    let mut seen_ws = false;
    let mut seen_sections = false;
    let mut seen_capped = false;
    for args in [
        &["--head-dim", "128", "--seqlen", "1024"][..],
        &["--head-dim", "128", "--seqlen", "16384", "--mask", "none"],
        &["--head-dim", "64", "--seqlen", "512"],
        &["--head-dim", "64", "--seqlen", "16384", "--mask", "none"],
        &[
            "--head-dim",
            "128",
            "--seqlen",
            "4096",
            "--features",
            "paged",
        ],
        &["--head-dim", "96", "--seqlen", "2048"],
        &["--head-dim", "96", "--seqlen", "200"],
        &["--head-dim", "192/128", "--seqlen", "4096"],
    ] {
        let mut all = vec!["explain", "--cache", cache];
        all.extend_from_slice(args);
        let out = fa4_gen(dir.path(), &all);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        let line = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("no {key} line: {text}"))
                .trim()
                .to_string()
        };
        let (config, schedule) = (line("config"), line("schedule"));
        let ws = config.contains("ws1");
        seen_ws |= ws;
        assert_eq!(ws, schedule.starts_with("warp-specialised"), "{text}");
        // The producer's ring depth, as the config's `s<stages>` says (d64 at 16k takes
        // the three-stage tile where the tuner picked it).
        let stages = config
            .split('_')
            .next()
            .and_then(|tile| tile.rsplit('s').next())
            .unwrap();
        assert_eq!(
            ws,
            schedule.contains(&format!("a {stages}-stage K/V ring")),
            "{text}"
        );
        assert_eq!(
            config.contains("lazy1"),
            schedule.contains("O rescaled lazily"),
            "{text}"
        );
        assert_eq!(
            config.contains("persistent1"),
            schedule.contains("persistent grid"),
            "{text}"
        );
        assert_eq!(
            !config.contains("persistent1"),
            schedule.contains("one block per work tile"),
            "{text}"
        );
        // A varlen batch takes a persistent Hopper kernel's varlen build, which lies
        // beside its cubin; everything else the dense grid.
        let varlen_build = config.contains("persistent1") && line("kernel").starts_with("hopper_");
        let varlen = line("varlen");
        assert_eq!(
            varlen_build,
            varlen.starts_with("its varlen build"),
            "{text}"
        );
        if varlen_build {
            // (named beside the kernel's cubin; a fresh clone has the manifest, not cubins)
            let path = varlen
                .trim_start_matches("its varlen build, ")
                .split(": ")
                .next()
                .unwrap();
            let cubin = line("cubin");
            assert_eq!(
                path,
                format!("{}.varlen.cubin", cubin.trim_end_matches(".cubin")),
                "{text}"
            );
        } else {
            assert!(varlen.starts_with("the dense grid"), "{text}");
        }
        // Causal Hopper grids of one block per tile go in L2 sections (the default mask
        // is causal).
        let sections = !args.contains(&"none")
            && !config.contains("persistent1")
            && line("kernel").starts_with("hopper_");
        seen_sections |= sections;
        assert_eq!(sections, schedule.contains("L2 sections"), "{text}");
        // A minblocks tile says how many blocks its registers leave room for.
        let capped = config
            .split('_')
            .find_map(|s| s.strip_prefix("minblocks"))
            .map(|k| format!("registers capped for {k} blocks per SM"));
        seen_capped |= capped.is_some();
        assert_eq!(
            capped.is_some(),
            schedule.contains("blocks per SM"),
            "{text}"
        );
        if let Some(words) = capped {
            assert!(schedule.contains(&words), "{text}");
        }
        // Paged K/V: the warp-specialised producer's boxes over the page pools, else
        // gathered row by row; Q never by TMA.
        if args.contains(&"paged") {
            assert!(!schedule.contains("Q/K/V by TMA"), "{text}");
            assert_eq!(
                schedule.contains("K/V by TMA through the pages"),
                schedule.starts_with("warp-specialised"),
                "{text}"
            );
        }
        // DeepSeek's pair is the Hopper template's, tuned on the H200.
        if args.contains(&"192/128") {
            assert!(
                line("kernel").starts_with("hopper_sm90_bf16_d192v128_causal_")
                    && line("why").starts_with("tuned on NVIDIA H200"),
                "{text}"
            );
        }
        // A head dim the Hopper template builds but the portable one serves says so.
        let held_back = line("kernel").starts_with("portable_");
        assert_eq!(held_back, args.contains(&"96"), "{text}");
        assert_eq!(
            held_back,
            text.contains("note      the hopper template builds this head dim"),
            "{text}"
        );
    }
    assert!(seen_ws, "the Hopper template serves sm90 d128");
    assert!(
        seen_capped,
        "d96 causal at 256 tokens is served a minblocks tile"
    );
    assert!(
        seen_sections,
        "paged d128 causal is served by the one-block-per-tile Hopper kernel"
    );
}

/// `sass` reads a built kernel's main loop from its SASS, and against another build of
/// the same templates finds every loop the same length.
#[test]
fn sass_counts_the_main_loop_of_built_kernels() {
    if fa4_gen::compile::sass::find_nvdisasm().is_none() {
        eprintln!("skipped: no nvdisasm (python3 -m pip install nvidia-cuda-nvdisasm)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let build = dir.path().join("build");
    let build = build.to_str().unwrap();
    let out = fa4_gen(
        dir.path(),
        &[
            "compile",
            "--arch",
            "sm90",
            "--head-dim",
            "128",
            "--dtype",
            "bf16",
            "--mask",
            "causal",
            "--default-only",
            "--template",
            "hopper",
            "--out",
            build,
            "-q",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = fa4_gen(dir.path(), &["sass", "--out", build, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let main = &rows[0]["main_loop"];
    // d128 over 128 keys: at least QK (8 k-steps) and PV (8) of wgmma per iteration and
    // 64 exp2 per thread, among several hundred instructions.
    let count = |k: &str| main[k].as_u64().unwrap();
    assert!(count("tensor") >= 16 && count("mufu") >= 64, "{main}");
    assert!(
        count("instructions") > count("tensor") + count("mufu") + 100,
        "{main}"
    );
    // The default compiles without spills: no local-memory access in the loop or outside.
    assert_eq!(count("local"), 0, "{main}");
    assert_eq!(rows[0]["local_accesses"].as_u64(), Some(0), "{rows:?}");
    // The whole kernel holds the loop and a prologue and epilogue beside it.
    let total = rows[0]["instructions"].as_u64().unwrap();
    assert!(total > count("instructions") + 100, "{rows:?}");
    let out = fa4_gen(dir.path(), &["sass", "--out", build, "--against", build]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("1 kernels, 1 matched in")
            && stdout(&out).contains(", 0 with a main loop of another length"),
        "{}",
        stdout(&out)
    );
    // The row shows what lies outside the loop, and the same build matches it too.
    // (`instructions` leaves NOPs out, the loop's census counts them.)
    let loop_nops = main["opcodes"]["NOP"].as_u64().unwrap_or(0);
    let outside = (total - (count("instructions") - loop_nops)).to_string();
    let row = stdout(&out)
        .lines()
        .find(|l| l.contains("hopper_sm90"))
        .unwrap_or_default()
        .to_string();
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(fields.get(6), Some(&outside.as_str()), "{row}");
    assert_eq!(fields.get(7), Some(&"same"), "{row}");
    let out = fa4_gen(
        dir.path(),
        &["sass", "--out", dir.path().join("none").to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("nothing built for sm90"),
        "{}",
        stderr(&out)
    );
}

/// A list option's default is shown in `--help` as it is typed (comma-separated), and
/// typing it gives what leaving the option out gives.
#[test]
fn list_defaults_are_shown_as_they_are_typed() {
    let dir = tempfile::tempdir().unwrap();
    let help = stdout(&fa4_gen(dir.path(), &["bench", "--help"]));
    for shown in [
        "[default: 64,128,256]",
        "[default: 512,1024,2048,4096,8192,16384]",
        "[default: none,causal]",
        "[default: 128,0]",
    ] {
        assert!(help.contains(shown), "bench --help lacks {shown}: {help}");
    }
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("generated");
    let explain = |extra: &[&str]| {
        let mut args = vec![
            "explain",
            "--cache",
            cache.to_str().unwrap(),
            "--head-dim",
            "128",
            "--seqlen",
            "2048",
            "--mask",
            "local",
        ];
        args.extend_from_slice(extra);
        let out = fa4_gen(dir.path(), &args);
        assert!(out.status.success(), "{}", stderr(&out));
        // The pick and why, not the lookup's timing.
        stdout(&out)
            .lines()
            .filter(|l| !l.starts_with("lookup"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let help = stdout(&fa4_gen(dir.path(), &["explain", "--help"]));
    assert!(help.contains("[default: -1,-1]"), "{help}");
    assert_eq!(explain(&[]), explain(&["--window", "-1,-1"]));
}

/// A ragged varlen batch on the H100 is served the H100's ragged choice from the
/// committed cache; the same longest prompt in a dense batch its dense choice, and a
/// ragged batch on a GPU without ragged choices the dense choice too.
#[test]
fn explain_serves_a_ragged_batch_its_gpus_ragged_choice() {
    let dir = tempfile::tempdir().unwrap();
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("generated");
    let explain = |extra: &[&str]| {
        let mut args = vec![
            "explain",
            "--cache",
            cache.to_str().unwrap(),
            "--head-dim",
            "128",
            "--seqlen",
            "1000",
        ];
        args.extend_from_slice(extra);
        let out = fa4_gen(dir.path(), &args);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let h100 = ["--gpu", "NVIDIA H100 80GB HBM3 (132 SMs)"];
    let ragged = explain(&[&h100[..], &["--ragged"]].concat());
    assert!(
        ragged.contains("tuned on NVIDIA H100 80GB HBM3 (132 SMs) for ragged batches, bucket 1024"),
        "{ragged}"
    );
    let dense = explain(&h100);
    assert!(
        dense.contains("bucket 1024") && !dense.contains("ragged"),
        "{dense}"
    );
    // The H200's own ragged choice where it has one; a ragged bucket no GPU tuned (512:
    // the ragged tunes start at 1024) is served the dense bucket's choice.
    let h200 = explain(&["--ragged"]);
    assert!(
        h200.contains("tuned on NVIDIA H200 (132 SMs) for ragged batches, bucket 1024"),
        "{h200}"
    );
    let kernel = |out: &str| out.lines().next().unwrap_or("").to_string();
    let short = |extra: &[&str]| {
        let mut args = vec![
            "explain",
            "--cache",
            cache.to_str().unwrap(),
            "--head-dim",
            "128",
            "--seqlen",
            "300",
        ];
        args.extend_from_slice(extra);
        let out = fa4_gen(dir.path(), &args);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let untuned = short(&["--ragged"]);
    assert!(!untuned.contains("for ragged batches"), "{untuned}");
    assert_eq!(kernel(&untuned), kernel(&short(&[])));
}
