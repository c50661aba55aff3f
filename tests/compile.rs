//! The compile pipeline end to end through NVRTC: every arch and head dim, resource
//! reports, caching, rejection of spilling configs, and compile errors.

use std::collections::BTreeMap;

use fa4_gen::compile::resources::SPILL_TOLERANCE;
use fa4_gen::compile::{self, BuildDir, Outcome, Report, Silent};
use fa4_gen::render::templates::TemplateSet;
use fa4_gen::render::Renderer;
use fa4_gen::space::{self, Candidate, RejectKind, Template, TemplateSpace};
use fa4_gen::spec::{Arch, Dtype, KernelSpec, MaskKind, TileConfig};

use crate::common::{fa4_gen, nvrtc, stderr, stdout};

/// Every template's default, for every arch it supports and every head dim it offers,
/// compiled through the CLI; then the reports are read back and checked.
#[test]
fn defaults_compile_for_every_arch_and_head_dim() {
    let dir = tempfile::tempdir().unwrap();
    let archs = Arch::ALL.map(|a| a.name()).join(",");
    let args = [
        "compile",
        "--arch",
        &archs,
        "--default-only",
        "--dtype",
        "bf16",
        "-q",
    ];
    let out = fa4_gen(dir.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));

    let build = BuildDir::new(dir.path().join("build"));
    let mut seen = 0;
    for arch in Arch::ALL {
        let report: Report = build.load_report(arch).unwrap().expect("a report per arch");
        assert!(report.rejected.is_empty(), "{arch}: {:?}", report.rejected);
        for t in Template::ALL
            .into_iter()
            .filter(|t| t.archs().contains(&arch))
        {
            for (&(d, dv), mask) in t
                .head_dims()
                .iter()
                .flat_map(|d| MaskKind::ALL.map(|m| (d, m)))
            {
                let k = report
                    .kernels
                    .iter()
                    .find(|k| {
                        let s = &k.candidate.spec;
                        k.candidate.template == t
                            && s.head_dim == d
                            && s.head_dim_v == dv
                            && s.mask == mask
                    })
                    .unwrap_or_else(|| panic!("{arch} d{d} {mask}: not built"));
                let r = &k.resources;
                assert!(k.is_default);
                assert!(
                    (32..=255).contains(&r.registers),
                    "{}: {} registers",
                    k.id,
                    r.registers
                );
                assert_eq!(r.disqualification(), None, "{}", k.id);
                assert!(r.spill_stores <= SPILL_TOLERANCE.0, "{}", k.id);
                assert!(r.barriers >= 1, "{}: the kernel synchronises", k.id);
                assert!(k.footprint.smem_bytes <= arch.max_smem_per_block());
                assert_eq!(k.footprint.threads, k.candidate.config.warps * 32);
                let cubin = build.read_cubin(k).unwrap();
                assert_eq!(&cubin[..4], b"\x7fELF", "{}: a cubin is an ELF image", k.id);
                // The runtime's arch check reads the SM from the header NVRTC writes.
                let (major, minor) = arch.compute_capability();
                assert_eq!(
                    fa4_gen::runtime::cubin_sm(&cubin),
                    Some(major * 10 + minor),
                    "{}",
                    k.id
                );
                assert!(build.path(&k.source).is_file());
                seen += 1;
            }
        }
        // The checking kernels of `verify` are built beside them.
        let support: Vec<_> = std::fs::read_dir(build.path(&format!("cubin/{arch}")))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("fa4_verify_"))
            .collect();
        assert_eq!(support.len(), 1, "{arch}");
    }
    // Portable: 6 archs x 5 head dims x 3 masks; Hopper: sm90 x 6 head dims x 3 masks;
    // Blackwell: sm100 x 6 head dims x 3 masks.
    assert_eq!(seen, 90 + 18 + 18);

    // A second run finds everything in place and compiles nothing.
    let again = fa4_gen(dir.path(), &args[..args.len() - 1]);
    assert!(again.status.success());
    assert!(
        stdout(&again).contains("126 kernels ready (126 cached)"),
        "{}",
        stdout(&again)
    );
}

/// Every feature variant's default compiles on sm90 (spills within the tolerance), for
/// every head dim and mask.
#[test]
fn feature_defaults_compile_on_sm90() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "compile",
        "--arch",
        "sm90",
        "--default-only",
        "--dtype",
        "fp16",
        "--features",
        "sinks,softcap,sinks+softcap,paged",
        "-q",
    ];
    let out = fa4_gen(dir.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = BuildDir::new(dir.path().join("build"))
        .load_report(Arch::Sm90)
        .unwrap()
        .unwrap();
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(
        report.kernels.len(),
        (5 + 6) * 3 * 4,
        "head dims (portable, Hopper with 192/128) x masks x feature sets"
    );
    assert!(report
        .kernels
        .iter()
        .all(|k| k.candidate.spec.features != Default::default()));
    assert!(report
        .kernels
        .iter()
        .all(|k| k.resources.disqualification().is_none()));
}

/// FP8's defaults compile on sm90 for every head dim and mask it offers, without spills
/// or serialised wgmmas; FP8 asked for where it is not offered is one clear error.
#[test]
fn fp8_defaults_compile_on_sm90_and_fp8_elsewhere_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "compile",
        "--arch",
        "sm90",
        "--default-only",
        "--dtype",
        "e4m3",
        "-q",
    ];
    let out = fa4_gen(dir.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = BuildDir::new(dir.path().join("build"))
        .load_report(Arch::Sm90)
        .unwrap()
        .unwrap();
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    // d64, d128, d256 and 192/128 x causal, unmasked and local, the Hopper template alone.
    assert_eq!(report.kernels.len(), 12);
    for k in &report.kernels {
        assert_eq!(k.candidate.template, Template::Hopper);
        assert_eq!(k.candidate.spec.dtype, Dtype::E4m3);
        assert_eq!(k.resources.disqualification(), None, "{}", k.id);
        assert!(k.footprint.tma_rows > 0, "{}: FP8 loads by TMA", k.id);
    }
    // Softcap over e4m3: its causal d128 default compiles spill-free like the rest.
    let args = [
        "compile",
        "--arch",
        "sm90",
        "--default-only",
        "--dtype",
        "e4m3",
        "--head-dim",
        "128",
        "--mask",
        "causal",
        "--features",
        "softcap",
        "--out",
        "softcap",
        "-q",
    ];
    let out = fa4_gen(dir.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = BuildDir::new(dir.path().join("softcap"))
        .load_report(Arch::Sm90)
        .unwrap()
        .unwrap();
    assert_eq!(report.kernels.len(), 1, "{:?}", report.rejected);
    let k = &report.kernels[0];
    assert!(k.candidate.spec.features.softcap && k.candidate.spec.dtype == Dtype::E4m3);
    assert_eq!(k.resources.disqualification(), None, "{}", k.id);
    for bad in [
        &["--arch", "sm80"][..],
        &["--arch", "sm90", "--head-dim", "96"],
    ] {
        let mut args = vec!["compile", "--dtype", "e4m3", "--default-only", "-q"];
        args.extend_from_slice(bad);
        let out = fa4_gen(dir.path(), &args);
        assert!(!out.status.success(), "{bad:?}");
        assert!(
            stderr(&out).contains("e4m3 is offered for none of the selected specs"),
            "{bad:?}: {}",
            stderr(&out)
        );
    }
}

/// Every FP8 candidate of d128 causal that passes the static checks compiles: its
/// rendered shared-memory size agrees with the config space's model (the entry point's
/// static_assert), and none spills past the tolerance or serialises its wgmmas.
#[test]
fn fp8_candidates_compile_where_the_space_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "compile",
        "--arch",
        "sm90",
        "--template",
        "hopper",
        "--dtype",
        "e4m3",
        "--head-dim",
        "128",
        "--mask",
        "causal",
        "-q",
    ];
    let out = fa4_gen(dir.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = BuildDir::new(dir.path().join("build"))
        .load_report(Arch::Sm90)
        .unwrap()
        .unwrap();
    // The static checks and ptxas may set configs aside; NVRTC refusing a source (a
    // static_assert of the traits against the space's model) may not.
    assert!(
        report
            .rejected
            .iter()
            .all(|r| r.rejection.kind != RejectKind::Compile),
        "{:?}",
        report.rejected
    );
    assert!(report.kernels.len() >= 40, "{}", report.kernels.len());
    for k in &report.kernels {
        assert_eq!(k.resources.disqualification(), None, "{}", k.id);
        assert_eq!(k.candidate.config.block_n % 32, 0, "{}", k.id);
    }
}

/// The real ptxas verdict: a config that passes the static checks but spills on sm90 is
/// rejected with the reason and leaves no cubin; the default beside it is built.
#[test]
fn spilling_configs_are_rejected_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let renderer = Renderer::embedded().unwrap();
    let build = BuildDir::new(dir.path());
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
    // 32 rows per warp with 128-wide key blocks at head dim 128: 192 accumulator
    // registers per thread plus Q fragments; ptxas spills.
    let heavy = TileConfig {
        block_m: 128,
        block_n: 128,
        warps: 4,
        stages: 1,
        switches: BTreeMap::from([("qregs".to_string(), 0)]),
    };
    let mut planned: Vec<_> = space::plan(Template::Portable, &spec)
        .into_iter()
        .filter(|p| p.is_default)
        .collect();
    planned.push(space::Planned {
        candidate: Candidate {
            template: Template::Portable,
            spec,
            config: heavy.clone(),
        },
        is_default: false,
        verdict: Ok(space::Footprint {
            threads: 128,
            block_m: 128,
            // Q and one stage of K and V, 128 x 128 each (swizzled), bf16, and 16 bytes
            // of per-block scalars.
            smem_bytes: (128 * 128 * 3) * 2 + 16,
            est_registers: 250,
            pack_gqa: false,
            tma_rows: 0,
            persistent_per_sm: 0,
            section_key_bytes: 0,
            causal_m_blocks_in_y: false,
            split_head_dim_v: 0,
            cluster_m: 0,
            varlen_tiles: false,
        }),
    });
    let summary = compile::build(&nvrtc(), &renderer, &build, &planned, &Silent).unwrap();
    assert!(summary.failures.is_empty());
    let rejected: Vec<_> = summary.rejected().collect();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].candidate.config, heavy);
    assert_eq!(rejected[0].rejection.kind, RejectKind::Spills);
    assert!(
        rejected[0].rejection.reason.contains("spills registers"),
        "{}",
        rejected[0].rejection.reason
    );
    let cubin = build.path(&BuildDir::cubin_rel(Arch::Sm90, &rejected[0].id));
    assert!(!cubin.exists(), "no cubin for a rejected kernel");
    assert_eq!(summary.built().count(), 1);

    let report = build.load_report(Arch::Sm90).unwrap().unwrap();
    assert_eq!(report.kernels.len(), 1);
    assert_eq!(report.rejected.len(), 1);
}

/// A template that does not compile: the error names the rendered file and carries
/// NVRTC's log; nothing is reported as built.
/// A cubin is the same bytes whatever folder it is compiled in or written to (its line
/// table would otherwise name both), so a cache built in any checkout matches the
/// committed manifest's hashes.
#[test]
fn cubins_do_not_depend_on_the_folder() {
    if !compile::nvrtc::folder_independent() {
        eprintln!("skipped: this sandbox refuses unshare(CLONE_FS), so cubins name their folder");
        return;
    }
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let out_b = b.path().join("elsewhere/out");
    crate::common::compile_default(a.path(), "build", "hopper", "64", "none", "none");
    crate::common::compile_default(
        b.path(),
        &out_b.display().to_string(),
        "hopper",
        "64",
        "none",
        "none",
    );
    let cubins = |root: std::path::PathBuf| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(root.join("cubin/sm90"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&p).unwrap())
            })
            .collect()
    };
    let (one, two) = (cubins(a.path().join("build")), cubins(out_b));
    assert_eq!(one.len(), 2, "the kernel and verify's support kernel");
    assert!(one == two, "cubins differ between folders");
}

#[test]
fn compile_errors_name_the_file_and_show_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut templates = TemplateSet::embedded();
    let body = templates
        .get("include/fa4/portable/kernel.cuh")
        .unwrap()
        .to_string();
    templates.insert(
        "include/fa4/portable/kernel.cuh",
        body.replace(
            "softmax.init();",
            "softmax.init(); undeclared_identifier_here = 1;",
        ),
    );
    let renderer = Renderer::new(templates).unwrap();
    let build = BuildDir::new(dir.path());
    let spec = KernelSpec::new(Arch::Sm80, Dtype::Fp16, 64, MaskKind::Causal);
    let planned: Vec<_> = space::plan(Template::Portable, &spec)
        .into_iter()
        .filter(|p| p.is_default)
        .collect();
    let summary = compile::build(&nvrtc(), &renderer, &build, &planned, &Silent).unwrap();
    assert_eq!(summary.failures.len(), 1);
    let (path, failure) = &summary.failures[0];
    assert!(
        path.starts_with(dir.path().join("src/sm80")) && path.extension().unwrap() == "cu",
        "{}",
        path.display()
    );
    assert!(path.is_file(), "the rendered source is kept for reading");
    assert!(
        failure.log.contains("undeclared_identifier_here"),
        "{}",
        failure.log
    );
    assert!(failure.to_string().contains(&path.display().to_string()));
    assert!(
        matches!(&summary.outcomes[0], Outcome::Rejected(r) if r.rejection.kind == RejectKind::Compile)
    );
    assert!(build
        .load_report(Arch::Sm80)
        .unwrap()
        .unwrap()
        .kernels
        .is_empty());
}

/// Editing a header gives new ids; the next build drops the old version's entries and
/// files instead of mixing two versions of a template in one report.
#[test]
fn an_edited_header_replaces_stale_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let build = BuildDir::new(dir.path());
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
    let planned: Vec<_> = space::plan(Template::Portable, &spec)
        .into_iter()
        .filter(|p| p.is_default)
        .collect();
    let nvrtc = nvrtc();
    let old = Renderer::embedded().unwrap();
    let first = compile::build(&nvrtc, &old, &build, &planned, &Silent).unwrap();
    let old_kernel = first.built().next().unwrap().clone();

    let mut templates = TemplateSet::embedded();
    let mask = templates
        .get("include/fa4/common/mask.cuh")
        .unwrap()
        .to_string();
    templates.insert("include/fa4/common/mask.cuh", mask + "\n// an edit\n");
    let new = Renderer::new(templates).unwrap();
    let second = compile::build(&nvrtc, &new, &build, &planned, &Silent).unwrap();
    let new_kernel = second.built().next().unwrap().clone();
    assert_ne!(new_kernel.id, old_kernel.id);
    assert_eq!(
        second.compiled, 1,
        "a changed header is never served from cache"
    );
    // A comment renames the kernel but leaves its machine code: the code hash holds,
    // though the cubins differ (their line tables and embedded PTX follow the source).
    assert_eq!(new_kernel.code_hash.len(), 16, "{new_kernel:?}");
    assert_eq!(new_kernel.code_hash, old_kernel.code_hash);
    // Another kernel (another head dim) has other code.
    let other_spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
    let other: Vec<_> = space::plan(Template::Portable, &other_spec)
        .into_iter()
        .filter(|p| p.is_default)
        .collect();
    let other_dir = tempfile::tempdir().unwrap();
    let other = compile::build(
        &nvrtc,
        &new,
        &BuildDir::new(other_dir.path()),
        &other,
        &Silent,
    )
    .unwrap();
    assert_ne!(
        other.built().next().unwrap().code_hash,
        new_kernel.code_hash
    );

    let report = build.load_report(Arch::Sm90).unwrap().unwrap();
    assert_eq!(report.kernels.len(), 1);
    assert_eq!(report.kernels[0].id, new_kernel.id);
    assert!(
        !build.path(&old_kernel.cubin).exists(),
        "stale cubin removed"
    );

    // A report written before code hashes were kept: the kernel is reused as it is, and
    // its code hash read from its cubin.
    let path = build.root().join("report/sm90.json");
    let mut report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    report["kernels"][0]
        .as_object_mut()
        .unwrap()
        .remove("code_hash")
        .unwrap();
    std::fs::write(&path, report.to_string()).unwrap();
    let third = compile::build(&nvrtc, &new, &build, &planned, &Silent).unwrap();
    assert_eq!(third.compiled, 0, "reused, not compiled");
    assert_eq!(
        third.built().next().unwrap().code_hash,
        new_kernel.code_hash
    );
}

#[test]
fn corrupt_report_is_an_error_not_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let build = BuildDir::new(dir.path());
    std::fs::create_dir_all(dir.path().join("report")).unwrap();
    std::fs::write(build.report_path(Arch::Sm90), b"{ not json").unwrap();
    let err = build.load_report(Arch::Sm90).unwrap_err().to_string();
    assert!(
        err.contains("sm90.json") && err.contains("delete it or choose another --out"),
        "{err}"
    );
}

/// Pack-GQA configs (a template switch the space enumerates) compile like the others:
/// rows are (query, head) pairs, so the launch grid runs over KV heads.
#[test]
fn pack_gqa_configs_compile() {
    let dir = tempfile::tempdir().unwrap();
    let mut planned = Vec::new();
    for (d, mask) in [(64, MaskKind::Local), (128, MaskKind::Causal)] {
        let spec = KernelSpec {
            features: "sinks".parse().unwrap(),
            ..KernelSpec::new(Arch::Sm90, Dtype::Bf16, d, mask)
        };
        let packed: Vec<_> = space::plan(Template::Portable, &spec)
            .into_iter()
            .filter(|p| p.candidate.config.switch("packgqa", 0) == 1)
            .collect();
        assert_eq!(packed.len(), 12, "pack-GQA variants of d{d}");
        let p = packed
            .into_iter()
            .find(|p| p.candidate.config.block_m == 128 && p.candidate.config.warps == 8)
            .unwrap();
        assert!(p.verdict.as_ref().unwrap().pack_gqa);
        planned.push(p);
    }
    let report = compile_all_cleanly(dir.path(), &planned);
    for k in &report.kernels {
        assert!(k.id.0.contains("packgqa1"), "{}", k.id.0);
        assert!(k.footprint.pack_gqa);
    }
}

/// Lazy rescaling (a portable switch the space enumerates) compiles on the tiles it was
/// measured on: d128's 128x64 over 4 warps (the default, whose accumulators take the
/// per-tile K/V addresses) and d256's 64x64 over 4 warps, without spills.
#[test]
fn lazy_rescaling_configs_compile() {
    let dir = tempfile::tempdir().unwrap();
    let mut planned = Vec::new();
    for (d, block_m, warps) in [(128, 128, 4), (256, 64, 4)] {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, d, MaskKind::None);
        let p = space::plan(Template::Portable, &spec)
            .into_iter()
            .find(|p| {
                let c = &p.candidate.config;
                c.switch("lazy", 0) == 1
                    && c.switch("qregs", 0) == 0
                    && c.switch("pad", 0) == 0
                    && (c.block_m, c.warps, c.block_n, c.stages) == (block_m, warps, 64, 1)
            })
            .unwrap();
        planned.push(p);
    }
    let report = compile_all_cleanly(dir.path(), &planned);
    for k in &report.kernels {
        assert!(k.id.0.contains("lazy1"), "{}", k.id.0);
        assert_eq!(k.resources.spill_stores, 0, "{}", k.id.0);
        let src = std::fs::read_to_string(dir.path().join(&k.source)).unwrap();
        assert!(src.contains("kLazy = true"), "{}", k.id.0);
    }
}

/// The warp-specialised producer over pages (the tiles of paged e4m3, and candidates of
/// paged bf16) compiles without spills: its page rows, a pair of words per key of the
/// tile in shared memory, are where the config space's model puts them (the rendered
/// layout asserts its size against the model's).
#[test]
fn paged_producer_tiles_compile() {
    let dir = tempfile::tempdir().unwrap();
    let mut planned = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::E4m3] {
        let spec = KernelSpec {
            features: "paged".parse().unwrap(),
            ..KernelSpec::new(Arch::Sm90, dtype, 128, MaskKind::Causal)
        };
        let p = space::plan(Template::Hopper, &spec)
            .into_iter()
            .find(|p| {
                p.verdict.is_ok()
                    && p.candidate
                        .config
                        .tag()
                        .ends_with("w12s2_overlap1_pingpong1_ws1")
                    && p.candidate.config.block_m == 128
            })
            .unwrap();
        planned.push(p);
    }
    let report = compile_all_cleanly(dir.path(), &planned);
    for k in &report.kernels {
        assert_eq!(k.resources.disqualification(), None, "{}", k.id.0);
        // the same tile over strided K/V has no page rows
        let strided = KernelSpec {
            features: "none".parse().unwrap(),
            ..k.candidate.spec
        };
        let twin = Template::Hopper
            .check(&strided, &k.candidate.config)
            .unwrap();
        assert_eq!(
            k.footprint.smem_bytes,
            twin.smem_bytes + 8 * k.candidate.config.block_n,
            "{}",
            k.id.0
        );
    }
}

/// Compiles `planned` (sm90) into `dir` and returns the report, asserting that every
/// kernel built and none was set aside.
fn compile_all_cleanly(dir: &std::path::Path, planned: &[space::Planned]) -> compile::Report {
    let renderer = Renderer::embedded().unwrap();
    let build = BuildDir::new(dir);
    let summary = compile::build(&nvrtc(), &renderer, &build, planned, &Silent).unwrap();
    assert!(summary.failures.is_empty());
    let report = build.load_report(Arch::Sm90).unwrap().unwrap();
    assert_eq!(report.kernels.len(), planned.len(), "{:?}", report.rejected);
    report
}

/// Clusters of two blocks along m (TMA multicast of K/V) compile without spills at every
/// head dim, declare their cluster size to the launch, and keep the register count of
/// the same tile without a cluster.
#[test]
fn cluster_configs_compile() {
    let dir = tempfile::tempdir().unwrap();
    let mut planned = Vec::new();
    for (d, block_m, block_n) in [(64, 192, 128), (128, 128, 176), (256, 128, 80)] {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, d, MaskKind::None);
        for cluster in [0, 2] {
            let p = space::plan(Template::Hopper, &spec)
                .into_iter()
                .find(|p| {
                    let c = &p.candidate.config;
                    c.switch("cluster", 0) == cluster
                        && c.switch("lazy", 0) == 0
                        && c.switch("persistent", 0) == 0
                        && c.switch("pingpong", 0) == 1
                        && (c.block_m, c.block_n, c.stages) == (block_m, block_n, 2)
                })
                .unwrap();
            planned.push(p);
        }
    }
    let report = compile_all_cleanly(dir.path(), &planned);
    assert_eq!(report.kernels.len(), 6);
    for cluster in report
        .kernels
        .iter()
        .filter(|k| k.candidate.config.switch("cluster", 0) == 2)
    {
        let mut config = cluster.candidate.config.clone();
        config.switches.remove("cluster");
        let single = report
            .kernels
            .iter()
            .find(|k| k.candidate.spec == cluster.candidate.spec && k.candidate.config == config)
            .unwrap();
        assert!(cluster.id.0.contains("cluster2"), "{}", cluster.id.0);
        assert_eq!(cluster.resources.spill_stores, 0, "{}", cluster.id.0);
        assert_eq!(
            cluster.resources.registers, single.resources.registers,
            "{}",
            cluster.id.0
        );
        let src = std::fs::read_to_string(dir.path().join(&cluster.source)).unwrap();
        assert!(
            src.contains("__cluster_dims__(2, 1, 1)"),
            "{}",
            cluster.id.0
        );
        assert!(src.contains("kClusterM = 2"), "{}", cluster.id.0);
        let src = std::fs::read_to_string(dir.path().join(&single.source)).unwrap();
        assert!(!src.contains("__cluster_dims__"), "{}", single.id.0);
    }
}

/// The hidden first block (`hidden`, d192/d256 masked tiles with turns at the MUFU)
/// compiles without spills beside its twin, with the same registers, and renders the
/// switch into the kernel's config (only there).
#[test]
fn hidden_first_block_configs_compile() {
    let dir = tempfile::tempdir().unwrap();
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::Causal);
    let planned: Vec<space::Planned> = [0, 1]
        .into_iter()
        .map(|hidden| {
            space::plan(Template::Hopper, &spec)
                .into_iter()
                .find(|p| {
                    let c = &p.candidate.config;
                    c.switch("hidden", 0) == hidden
                        && c.switch("mufuturn", 0) == 1
                        && c.switch("lazy", 0) == 1
                        && c.switch("persistent", 0) == 1
                        && (c.block_m, c.block_n) == (128, 64)
                })
                .unwrap()
        })
        .collect();
    let report = compile_all_cleanly(dir.path(), &planned);
    let [plain, hidden] = [0, 1].map(|h| {
        report
            .kernels
            .iter()
            .find(|k| k.candidate.config.switch("hidden", 0) == h)
            .unwrap()
    });
    assert!(hidden.id.0.contains("hidden1"), "{}", hidden.id.0);
    for k in [plain, hidden] {
        assert_eq!(k.resources.spill_stores, 0, "{}", k.id.0);
    }
    assert_eq!(hidden.resources.registers, plain.resources.registers);
    let src =
        |k: &compile::BuiltKernel| std::fs::read_to_string(dir.path().join(&k.source)).unwrap();
    assert!(src(hidden).contains("kHiddenFirst = true"));
    assert!(src(plain).contains("kHiddenFirst = false"));
}

/// A persistent warp-specialised Hopper kernel gets its varlen build beside its cubin
/// (the entry varlen batches launch, built apart so the dense entry's code stays as
/// timed); one block per tile, cluster kernels and the kernel without warp
/// specialisation have none.
#[test]
fn varlen_builds_sit_beside_the_dense_cubin() {
    let dir = tempfile::tempdir().unwrap();
    let pick = |mask, want: &dyn Fn(&TileConfig) -> bool| {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, mask);
        space::plan(Template::Hopper, &spec)
            .into_iter()
            .find(|p| want(&p.candidate.config))
            .unwrap()
    };
    let planned = vec![
        pick(MaskKind::Causal, &|c| {
            c.switch("ws", 0) == 1 && c.switch("persistent", 0) == 1 && c.block_n == 128
        }),
        pick(MaskKind::Causal, &|c| {
            c.switch("ws", 0) == 1 && c.switch("persistent", 0) == 0 && c.block_n == 128
        }),
        pick(MaskKind::None, &|c| c.switch("cluster", 0) == 2),
        pick(MaskKind::Causal, &|c| c.switch("ws", 0) == 0),
    ];
    let report = compile_all_cleanly(dir.path(), &planned);
    for k in &report.kernels {
        let c = &k.candidate.config;
        let expected =
            c.switch("ws", 0) == 1 && c.switch("persistent", 0) == 1 && c.switch("cluster", 0) < 2;
        assert_eq!(k.footprint.varlen_tiles, expected, "{}", k.id.0);
        assert_eq!(k.varlen_cubin_hash.is_some(), expected, "{}", k.id.0);
        let dense = std::fs::read(dir.path().join(&k.cubin)).unwrap();
        let has = |bytes: &[u8], name: &[u8]| bytes.windows(name.len()).any(|w| w == name);
        assert!(!has(&dense, b"fa4_fwd_varlen"), "{}", k.id.0);
        let varlen = dir.path().join(fa4_gen::spec::varlen_cubin_path(&k.cubin));
        assert_eq!(varlen.exists(), expected, "{}", k.id.0);
        if expected {
            let bytes = std::fs::read(&varlen).unwrap();
            assert!(has(&bytes, b".text.fa4_fwd_varlen"), "{}", k.id.0);
            assert!(!has(&bytes, b".text.fa4_fwd\0"), "{}", k.id.0);
            assert!(k.varlen_registers.is_some_and(|r| r > 0), "{}", k.id.0);
            let src = std::fs::read_to_string(dir.path().join(&k.source)).unwrap();
            assert!(src.contains("#ifndef FA4_VARLEN_ENTRY"), "{}", k.id.0);
        }
    }
}
