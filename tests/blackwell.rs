//! Blackwell's tcgen05 building blocks (`templates/include/fa4/blackwell/tcgen05.cuh`),
//! checked by ptxas without a GPU: a probe kernel that calls every wrapper with
//! descriptors from `fa4_gen::render::tcgen05` compiles for sm_100a and is refused for
//! sm_90a and plain sm_100; with nvdisasm, its SASS holds the instruction each wrapper
//! lowers to. Nothing here runs on a device.
//!
//! The probe is `tests/cuda/tcgen05_probe.cu`, a file rather than a string so that it
//! reads (and is edited) as CUDA; this file prepends the rendered descriptors, as the
//! `.cu.tera` entry points put rendered constants before hand-written code.

use std::collections::BTreeMap;

use fa4_gen::compile::nvrtc::{CompileFailure, CompileOutput};
use fa4_gen::compile::{resources, sass, Nvrtc};
use fa4_gen::render::nvrtc_options;
use fa4_gen::render::tcgen05::{
    cuda_u32, cuda_u64, AccumFormat, InstrDescriptor, Leading, Major, OperandFormat,
    SmemDescriptor, Swizzle,
};
use fa4_gen::render::templates::TemplateSet;
use fa4_gen::spec::Arch;

const PROBE: &str = include_str!("cuda/tcgen05_probe.cu");
const ENTRY: &str = "tcgen05_probe";

/// The instruction descriptors the probe issues: bf16 QK (A and B K-major), bf16 PV (B
/// MN-major: V with keys along K), and e4m3 with both K-major; M 128, N 128, f32 D.
fn idescs() -> [(&'static str, u32); 3] {
    use OperandFormat::{Bf16, E4m3};
    let encode = |a, (am, bm)| {
        InstrDescriptor::dense(a, a, AccumFormat::F32, (am, bm), 128, 128)
            .encode()
            .unwrap()
    };
    [
        ("kQkIdesc", encode(Bf16, (Major::K, Major::K))),
        ("kPvIdesc", encode(Bf16, (Major::K, Major::Mn))),
        ("kFp8Idesc", encode(E4m3, (Major::K, Major::K))),
    ]
}

/// The probe's source: the descriptors, rendered as the sm100 template will render them
/// (start address 0; the device adds the tile's), then the kernel.
fn probe_source() -> String {
    // 128-byte-swizzled tiles: 8-row groups 1024 bytes apart; V's 64-element column
    // blocks of 128 keys 16384 bytes apart (render/tcgen05.rs's tests spell these out).
    let k_major = SmemDescriptor {
        start_address: 0,
        major: Major::K,
        swizzle: Swizzle::Bytes128,
        leading: Leading::Unused,
        stride_byte_offset: 1024,
        base_offset: 0,
    };
    let mn_major = SmemDescriptor {
        major: Major::Mn,
        leading: Leading::Offset(16384),
        ..k_major
    };
    let mut source = String::from("#include \"fa4/common/types.cuh\"\n");
    for (name, value) in idescs() {
        source += &format!("constexpr fa4::u32 {name} = {};\n", cuda_u32(value));
    }
    for (name, desc) in [("kKMajorDesc", k_major), ("kMnMajorDesc", mn_major)] {
        let value = desc.encode().unwrap();
        source += &format!("constexpr fa4::u64 {name} = {};\n", cuda_u64(value));
    }
    source + PROBE
}

/// The probe compiled with `options`.
fn compile(nvrtc: &Nvrtc, options: &[String]) -> Result<CompileOutput, CompileFailure> {
    let templates = TemplateSet::embedded();
    let headers: Vec<(&str, &str)> = templates.headers().collect();
    nvrtc
        .compile("tcgen05_probe.cu", &probe_source(), &headers, options)
        .expect("NVRTC runs")
}

/// `options` for another target: the arch flag replaced.
fn retarget(options: &[String], from: &str, to: &str) -> Vec<String> {
    let from = format!("--gpu-architecture={from}");
    assert!(options.contains(&from), "{options:?}");
    options
        .iter()
        .map(|o| {
            if *o == from {
                format!("--gpu-architecture={to}")
            } else {
                o.clone()
            }
        })
        .collect()
}

/// The probe compiles for sm_100a (the flags sm100 kernels get), and ptxas refuses it for
/// sm_90a and for sm_100 without the `a`, naming the tcgen05 instructions.
#[test]
fn tcgen05_probe_compiles_for_sm100a_only() {
    let nvrtc = crate::common::nvrtc();
    let sm100a = nvrtc_options(Arch::Sm100);
    let built = compile(&nvrtc, &sm100a).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(&built.cubin[..4], b"\x7fELF");
    let report = resources::parse(&built.log, ENTRY)
        .unwrap_or_else(|| panic!("ptxas reported nothing for {ENTRY}:\n{}", built.log));
    assert_eq!(
        (report.spill_stores, report.spill_loads),
        (0, 0),
        "{}",
        built.log
    );

    // Hopper has no tensor memory: every instruction is refused.
    let sm90a = compile(&nvrtc, &nvrtc_options(Arch::Sm90)).expect_err("sm_90a refuses tcgen05");
    for op in [
        "alloc",
        "dealloc",
        "relinquish_alloc_permit",
        "mma",
        "commit",
        "ld",
        "st",
        "wait",
        "fence",
    ] {
        let refusal = format!("Instruction 'tcgen05.{op}' not supported on .target 'sm_90a'");
        assert!(sm90a.log.contains(&refusal), "{refusal}:\n{}", sm90a.log);
    }
    // Plain sm_100 (forward-compatible PTX) refuses all but allocation, which ptxas 13.0
    // lets through there.
    let sm100 = compile(&nvrtc, &retarget(&sm100a, "sm_100a", "sm_100"))
        .expect_err("sm_100 refuses tcgen05.mma");
    for op in ["mma", "commit", "ld", "st", "wait", "fence"] {
        let refusal = format!("Instruction 'tcgen05.{op}' not supported on .target 'sm_100'");
        assert!(sm100.log.contains(&refusal), "{refusal}:\n{}", sm100.log);
    }
}

/// One SASS instruction: its mnemonic (with modifiers) and operands.
struct Instruction {
    op: String,
    operands: String,
}

/// The instructions of `nvdisasm -c` output, predicates dropped.
fn instructions(sass: &str) -> Vec<Instruction> {
    sass.lines()
        .filter_map(|line| {
            let (_, text) = line.trim().strip_prefix("/*")?.split_once("*/")?;
            let text = text.split("/*").next()?.trim().trim_end_matches(';').trim();
            let text = match text.split_once(' ') {
                Some((pred, rest)) if pred.starts_with('@') => rest.trim(),
                _ => text,
            };
            let (op, operands) = text.split_once(' ').unwrap_or((text, ""));
            (!op.is_empty()).then(|| Instruction {
                op: op.to_string(),
                operands: operands.trim().to_string(),
            })
        })
        .collect()
}

/// The SASS of the sm_100a probe holds what each wrapper lowers to (mnemonics as
/// nvdisasm 13.x prints them): the MMA of each kind in both operand forms, the commit,
/// the loads and stores of each width, the store wait, and allocation, its permit and
/// deallocation. (The load wait and the fences lower to no instruction of their own.)
#[test]
fn tcgen05_probe_sass_has_every_instruction() {
    let nvrtc = crate::common::nvrtc();
    let Some(nvdisasm) = sass::find_nvdisasm() else {
        eprintln!("skipped: no nvdisasm (python3 -m pip install nvidia-cuda-nvdisasm)");
        return;
    };
    let built = compile(&nvrtc, &nvrtc_options(Arch::Sm100)).unwrap_or_else(|f| panic!("{f}"));
    let dir = tempfile::tempdir().unwrap();
    let cubin = dir.path().join("tcgen05_probe.cubin");
    std::fs::write(&cubin, &built.cubin).unwrap();
    let text = sass::disassemble(&nvdisasm, &cubin).unwrap();
    let code = instructions(&text);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for i in &code {
        *counts.entry(i.op.as_str()).or_default() += 1;
    }
    let count = |op: &str| counts.get(op).copied().unwrap_or(0);

    // tcgen05.mma: kind::f16 is UTCHMMA, kind::f8f6f4 UTCQMMA. A from shared memory is a
    // descriptor operand (gdesc[..]) ahead of B's; A from TMEM comes first as tmem[..].
    for mnemonic in ["UTCHMMA", "UTCQMMA"] {
        let forms: Vec<&str> = code
            .iter()
            .filter(|i| i.op == mnemonic)
            .map(|i| i.operands.as_str())
            .collect();
        assert_eq!(forms.len(), 2, "{mnemonic}: {forms:?}");
        assert!(
            forms.iter().any(|o| o.starts_with("gdesc[")),
            "{mnemonic} with A from shared memory: {forms:?}"
        );
        assert!(
            forms.iter().any(|o| o.starts_with("tmem[")),
            "{mnemonic} with A from TMEM: {forms:?}"
        );
    }
    // The rendered instruction descriptors reach the MMAs as uniform immediates.
    for (name, idesc) in idescs() {
        let literal = format!("{idesc:#x}");
        assert!(
            code.iter()
                .any(|i| i.op == "UMOV" && i.operands.ends_with(&literal)),
            "{name} = {literal} is not loaded:\n{text}"
        );
    }
    for (op, n) in [
        ("UTCBAR", 1),                    // tcgen05.commit
        ("LDTM.x32", 1),                  // tcgen05.ld.32x32b.x32
        ("LDTM.x16", 1),                  // .x16
        ("LDTM.x8", 1),                   // .x8
        ("STTM.x32", 1),                  // tcgen05.st.32x32b.x32
        ("STTM.x16", 1),                  // .x16
        ("STTM.x8", 1),                   // .x8
        ("FENCE.VIEW.ASYNC.T", 1),        // tcgen05.wait::st
        ("UTCATOMSWS.AND", 1),            // tcgen05.dealloc
        ("UVIRTCOUNT.DEALLOC.SMPOOL", 1), // tcgen05.relinquish_alloc_permit
    ] {
        assert_eq!(count(op), n, "{op}:\n{text}");
    }
    // tcgen05.alloc: a claim retried until columns are free (so issued at least once).
    assert!(
        count("UTCATOMSWS.FIND_AND_SET.ALIGN") >= 1,
        "tcgen05.alloc:\n{text}"
    );
}

// ---- the attention template (templates/blackwell_fwd.cu.tera) ----------------------------

/// `fa4-gen tune --arch sm100 --head-dim 64 --compile-only` on the Blackwell template:
/// every candidate the config space keeps compiles for sm_100a without spills (ptxas
/// honours the warp roles' register split), every rejected one is rejected statically,
/// for the reason the space gives, and nothing is timed.
#[test]
fn the_d64_space_compiles_without_spills() {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::common::fa4_gen(
        dir.path(),
        &[
            "tune",
            "--arch",
            "sm100",
            "--template",
            "blackwell",
            "--head-dim",
            "64",
            "--dtype",
            "bf16",
            "--mask",
            "causal",
            "--compile-only",
            "--build-dir",
            "build",
            "-q",
        ],
    );
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    assert!(crate::common::stdout(&out).contains("nothing timed (--compile-only)"));
    let report = fa4_gen::compile::BuildDir::new(dir.path().join("build"))
        .load_report(Arch::Sm100)
        .unwrap()
        .unwrap();
    let spec = fa4_gen::spec::KernelSpec::new(
        Arch::Sm100,
        fa4_gen::spec::Dtype::Bf16,
        64,
        fa4_gen::spec::MaskKind::Causal,
    );
    let planned = fa4_gen::space::plan(fa4_gen::space::Template::Blackwell, &spec);
    let kept = planned.iter().filter(|p| p.verdict.is_ok()).count();
    assert!(kept >= 24, "{kept} candidates kept");
    assert_eq!(report.kernels.len(), kept, "every kept candidate is built");
    for k in &report.kernels {
        assert_eq!(k.candidate.template, fa4_gen::space::Template::Blackwell);
        assert_eq!(k.resources.disqualification(), None, "{}", k.id);
        assert_eq!(k.resources.spill_stores, 0, "{}", k.id);
    }
    // The statically rejected ones: rings that do not fit shared memory; none reached
    // the compiler.
    for p in planned.iter().filter(|p| p.verdict.is_err()) {
        let r = p.verdict.as_ref().unwrap_err();
        assert!(
            matches!(
                r.kind,
                fa4_gen::space::RejectKind::Registers | fa4_gen::space::RejectKind::SharedMemory
            ),
            "{}: {r}",
            p.candidate.config
        );
    }
    assert!(
        report.rejected.iter().all(|r| !matches!(
            r.rejection.kind,
            fa4_gen::space::RejectKind::Spills | fa4_gen::space::RejectKind::Compile
        )),
        "{:?}",
        report.rejected
    );
}

/// Every Blackwell default of every feature set it offers (sinks, softcap, both; fp16)
/// compiles for sm_100a without spills, and the rendered kernel's own checks of the
/// config space's model (shared memory, threads, TMEM columns) hold.
#[test]
fn feature_defaults_compile_for_sm100a() {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::common::fa4_gen(
        dir.path(),
        &[
            "compile",
            "--arch",
            "sm100",
            "--template",
            "blackwell",
            "--default-only",
            "--dtype",
            "fp16",
            "--features",
            "sinks,softcap,sinks+softcap",
            "-q",
        ],
    );
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    let report = fa4_gen::compile::BuildDir::new(dir.path().join("build"))
        .load_report(Arch::Sm100)
        .unwrap()
        .unwrap();
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(
        report.kernels.len(),
        6 * 3 * 3,
        "head dims x masks x feature sets"
    );
    for k in &report.kernels {
        assert_eq!(k.resources.spill_stores, 0, "{}", k.id);
        assert_eq!(k.resources.disqualification(), None, "{}", k.id);
    }
}

/// The Blackwell template is held back: no sm100 spec is served by it (the shipped cache
/// keeps the portable kernels), and `explain` says why and what lifts it.
#[test]
fn nothing_unrun_is_served() {
    use fa4_gen::space::{held_back_template, serving_template, Template, TemplateSpace};
    for &(d, dv) in Template::Blackwell.head_dims() {
        let spec = fa4_gen::spec::KernelSpec {
            head_dim_v: dv,
            ..fa4_gen::spec::KernelSpec::new(
                Arch::Sm100,
                fa4_gen::spec::Dtype::Bf16,
                d,
                fa4_gen::spec::MaskKind::Causal,
            )
        };
        assert!(Template::Blackwell.supports(&spec), "{spec}");
        assert!(!Template::Blackwell.serves(&spec), "{spec}");
        assert_ne!(serving_template(&spec), Template::Blackwell);
        assert_eq!(held_back_template(&spec), Some(Template::Blackwell));
        let why = fa4_gen::space::held_back_reason(Template::Blackwell, &spec);
        assert!(
            why.contains("no sm100 GPU has run it")
                && why.contains("fa4-gen verify --arch sm100 --template blackwell"),
            "{why}"
        );
    }
}

/// `fa4-gen sass --arch sm100` reads a Blackwell kernel's two loops: the MMA warp's (two
/// Q stages of QK and PV per key block: 4 x 8 UTCHMMA at d128 over 128 keys, no TMEM
/// traffic of its own) and the softmax warps' (S in by LDTM, P out by STTM, an exp2 per
/// key and one for O's rescale), without local memory in either.
#[test]
fn sass_reads_the_mma_and_softmax_loops() {
    if sass::find_nvdisasm().is_none() {
        eprintln!("skipped: no nvdisasm (python3 -m pip install nvidia-cuda-nvdisasm)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "compile",
        "--arch",
        "sm100",
        "--template",
        "blackwell",
        "--head-dim",
        "128",
        "--dtype",
        "bf16",
        "--mask",
        "causal",
        "--default-only",
        "-q",
    ];
    let out = crate::common::fa4_gen(dir.path(), &args);
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    let out = crate::common::fa4_gen(dir.path(), &["sass", "--arch", "sm100", "--json"]);
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &rows.as_array().unwrap()[0];
    let count = |which: &str, k: &str| row[which][k].as_u64().unwrap();
    assert_eq!(count("main_loop", "tensor"), 32, "{row}");
    assert_eq!(count("main_loop", "tmem"), 0, "{row}");
    assert_eq!(count("main_loop", "local"), 0, "{row}");
    assert_eq!(count("softmax_loop", "tensor"), 0, "{row}");
    assert!(count("softmax_loop", "mufu") >= 129, "{row}");
    // S: four 32-column loads; P: two 32-column stores
    assert_eq!(row["softmax_loop"]["opcodes"]["LDTM"], 4, "{row}");
    assert_eq!(row["softmax_loop"]["opcodes"]["STTM"], 2, "{row}");
    assert_eq!(count("softmax_loop", "local"), 0, "{row}");
    assert_eq!(row["local_accesses"], 0, "{row}");

    // A cubin built elsewhere (FA4's, by bench/fa4_sm100_sass.py) is read the same way,
    // without a build folder.
    let cubin = std::fs::read_dir(dir.path().join("build/cubin/sm100"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("blackwell_")
        })
        .unwrap();
    let out = crate::common::fa4_gen(
        dir.path(),
        &[
            "sass",
            "--arch",
            "sm100",
            "--out",
            "absent",
            "--json",
            "--cubin",
            cubin.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["main_loop"], row["main_loop"]);
    assert_eq!(rows[0]["kernel"], cubin.display().to_string());
}
