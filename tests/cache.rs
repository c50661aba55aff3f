//! The shipped kernel cache: reproducible builds, and the committed cache agreeing with
//! the committed tuning-db export and templates.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fa4_gen::cache;
use fa4_gen::db::parse_export;
use fa4_gen::render::Renderer;
use fa4_gen::runtime::{KernelCache, Query, Reason};
use fa4_gen::space::{Template, TemplateSpace};
use fa4_gen::spec::manifest::{Manifest, MANIFEST_FILE};
use fa4_gen::spec::{Arch, Bucket, Dtype, Features, KernelSpec, MaskKind};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn export() -> Vec<fa4_gen::db::Record> {
    let path = repo().join("tuning-db/sm90.json");
    parse_export(&path, &std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The export's current records of the H200 (the arch's most-tuned GPU) alone: the
/// tests that add another GPU's records start from them.
fn h200_export(renderer: &Renderer) -> Vec<fa4_gen::db::Record> {
    let mut records = export();
    records.retain(|r| {
        r.device.name == "NVIDIA H200" && !r.is_stale(|t| renderer.template_hash(t).to_string())
    });
    records
}

fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

/// Building twice from the same export and templates gives the same bytes, and the
/// dispatcher serves the tuned choices from it.
#[test]
fn a_cache_builds_reproducibly_and_serves_the_tuned_choices() {
    let nvrtc = crate::common::nvrtc();
    let renderer = Renderer::embedded().unwrap();
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
    let specs = [(Template::Portable, spec)];
    let records = export();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let default = cache::Untuned::Default;
    let request = cache::BuildRequest {
        specs: &specs,
        records: &records,
        export_hash: "h",
        untuned: default,
        previous: None,
    };
    let silent = fa4_gen::compile::Silent;
    let m1 = cache::build(&nvrtc, &renderer, &request, &silent, a.path()).unwrap();
    let m2 = cache::build(&nvrtc, &renderer, &request, &silent, b.path()).unwrap();
    assert!(m1.dropped.is_empty());
    let (m1, m2) = (m1.manifest, m2.manifest);
    assert_eq!(m1, m2);
    // Each kernel's machine code is named, and a rebuild finds it unchanged; a kernel
    // whose code moved is named by its old and new id.
    assert!(m1.kernels.values().all(|k| k.code_hash.len() == 16));
    let same = cache::code_changes(&m1, &m2.kernels);
    assert_eq!(
        (same.unchanged, same.changed.len(), same.new),
        (m1.kernels.len(), 0, 0)
    );
    let mut moved = m1.clone();
    let (first, entry) = moved.kernels.iter_mut().next().unwrap();
    entry.code_hash = "0000000000000000".into();
    let first = first.clone();
    let c = cache::code_changes(&moved, &m2.kernels);
    assert_eq!(c.changed, vec![(first.clone(), first)]);
    assert_eq!(c.unchanged, m1.kernels.len() - 1);
    let (fa, fb) = (files(a.path()), files(b.path()));
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    assert!(fa == fb, "the two builds differ");
    assert!(fa
        .keys()
        .any(|p| p.extension().is_some_and(|e| e == "cubin")));

    // Every bucket of the spec was tuned: each query is served its bucket's choice.
    let cache = KernelCache::open(a.path()).unwrap();
    assert_eq!(cache.tuned_on(Arch::Sm90), Some("NVIDIA H200 (132 SMs)"));
    let key = |b: u32| {
        let r = records
            .iter()
            .find(|r| r.template == Template::Portable && r.spec == spec && r.bucket.seqlen == b)
            .unwrap();
        r.choice().unwrap().config.clone()
    };
    for seqlen in [1u32, 300, 4096, 100_000] {
        let q = Query {
            arch: Arch::Sm90,
            dtype: Dtype::Bf16,
            head_dim: 64,
            head_dim_v: 64,
            mask: MaskKind::Causal,
            features: Features::default(),
            max_seqlen_q: seqlen,
            window: (-1, -1),
            ragged: false,
        };
        let s = cache.select(&q).unwrap();
        let bucket = fa4_gen::spec::Bucket::of(seqlen).seqlen;
        assert_eq!(s.reason, Reason::Tuned { bucket });
        assert_eq!(s.kernel.config, key(bucket), "seqlen {seqlen}");
        let cubin = std::fs::read(a.path().join(&s.kernel.cubin)).unwrap();
        assert_eq!(
            format!("{:016x}", fa4_gen::spec::fnv1a64(&cubin)),
            s.kernel.cubin_hash
        );
    }
}

/// With borrowing on, a spec that was never tuned serves, where the same spec without
/// sinks was, that spec's choice per bucket, built for it; a spec with records of its
/// own does not, nor does a soft-capped spec whose plain twin alone was tuned (softcap
/// changes what bounds a tile). Off, every untuned spec keeps its default.
#[test]
fn an_untuned_sinks_spec_serves_its_plain_twins_choices() {
    let renderer = Renderer::embedded().unwrap();
    let mut records = export();
    records.retain(|r| !r.is_stale(|t| renderer.template_hash(t).to_string()));
    let with = |spec: KernelSpec, sinks: bool, softcap: bool| KernelSpec {
        features: Features {
            sinks,
            softcap,
            ..Features::default()
        },
        ..spec
    };
    let plain = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    let sinks = with(plain, true, false);
    let tuned_sinks = with(
        KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal),
        true,
        false,
    );
    let capped = with(
        KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None),
        false,
        true,
    );
    let has_records = |s: &KernelSpec| {
        records
            .iter()
            .any(|r| r.template == Template::Hopper && r.spec == *s)
    };
    assert!(has_records(&plain) && !has_records(&sinks) && has_records(&tuned_sinks));
    assert!(!has_records(&capped) && has_records(&with(capped, false, false)));

    let specs: Vec<(Template, KernelSpec)> = [plain, sinks, tuned_sinks, capped]
        .iter()
        .map(|s| (Template::Hopper, *s))
        .collect();
    // The shipped cache's rule: the default.
    let shipped = cache::plan(&specs, &records, cache::Untuned::Default);
    assert!(shipped.borrowed.is_empty());
    assert!(shipped
        .wanted
        .iter()
        .all(|(c, b)| c.spec != sinks || b.is_none()));
    let plan = cache::plan(&specs, &records, cache::Untuned::Borrow);
    assert_eq!(plan.borrowed, BTreeMap::from([(sinks, plain)]));
    let buckets = |spec: KernelSpec| -> BTreeMap<fa4_gen::spec::Bucket, fa4_gen::spec::TileConfig> {
        plan.wanted
            .iter()
            .filter(|(c, b)| c.spec == spec && b.is_some())
            .map(|(c, b)| (b.unwrap(), c.config.clone()))
            .collect()
    };
    let plain_choices = buckets(plain);
    assert!(plain_choices.len() >= 5, "{plain_choices:?}");
    assert_eq!(buckets(sinks), plain_choices);
    assert!(buckets(capped).is_empty());
    let entries = cache::arch_entries(&renderer, &plan);
    let served = &entries[&Arch::Sm90].specs;
    assert_eq!(served[&sinks.tag()].borrowed_from, Some(plain.tag()));
    assert_eq!(served[&plain.tag()].borrowed_from, None);
    assert_eq!(served[&tuned_sinks.tag()].borrowed_from, None);
    assert!(served[&capped.tag()].tuned.is_empty());
}

/// Records of two GPUs of one arch: the GPU with the most serves every device
/// (`tuned_on`), the other's choices serve devices of its name (`tuned_by_gpu`), and the
/// cache builds both's kernels.
#[test]
fn a_second_gpus_records_are_served_to_devices_of_its_name() {
    let renderer = Renderer::embedded().unwrap();
    let mut records = h200_export(&renderer);
    let d128 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    let d64 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
    // The H100 measured d128 causal only, and kept the default where it was tuned.
    let h100: Vec<fa4_gen::db::Record> = records
        .iter()
        .filter(|r| r.template == Template::Hopper && r.spec == d128 && !r.bucket.ragged)
        .map(|r| {
            let mut r = r.clone();
            r.device.name = "NVIDIA H100 80GB HBM3".into();
            r.candidates.truncate(1);
            r
        })
        .collect();
    assert!(h100.len() >= 5);
    records.extend(h100.iter().cloned());
    let specs = vec![(Template::Hopper, d128), (Template::Hopper, d64)];
    let plan = cache::plan(&specs, &records, cache::Untuned::Default);
    let h200 = plan.tuned_on[&Arch::Sm90].clone().unwrap();
    assert!(h200.starts_with("NVIDIA H200"), "{h200}");
    let h100_name = fa4_gen::runtime::gpu_name("NVIDIA H100 80GB HBM3", 132);
    assert!(plan
        .by_gpu
        .iter()
        .all(|(g, c, _)| *g == h100_name && c.spec == d128));
    assert_eq!(plan.by_gpu.len(), h100.len());
    let entries = cache::arch_entries(&renderer, &plan);
    let served = &entries[&Arch::Sm90].specs;
    let default = &served[&d128.tag()].default;
    let own = &served[&d128.tag()].tuned_by_gpu[&h100_name];
    assert_eq!(own.len(), h100.len());
    assert!(own.values().all(|id| id == default), "{own:?}");
    // The arch's choices stay the H200's (some bucket other than the default), and the
    // spec the H100 did not measure has no choices of its own.
    assert!(served[&d128.tag()].tuned.values().any(|id| id != default));
    assert!(served[&d64.tag()].tuned_by_gpu.is_empty());
}

/// Ragged records are served to ragged batches: the most-tuned GPU's in `tuned_ragged`,
/// another GPU's in `tuned_ragged_by_gpu`, each beside the dense choices of its bucket.
#[test]
fn ragged_records_are_served_to_ragged_batches() {
    let renderer = Renderer::embedded().unwrap();
    let mut records = h200_export(&renderer);
    // The export's own ragged records aside: this test places its own.
    records.retain(|r| !r.bucket.ragged);
    let d128 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    let dense = |seqlen: u32| {
        records
            .iter()
            .find(|r| {
                r.template == Template::Hopper && r.spec == d128 && r.bucket == Bucket::of(seqlen)
            })
            .unwrap()
            .clone()
    };
    // The H200 measured ragged 4096 (its default served there), the H100 ragged 2048.
    let mut h200 = dense(4096);
    h200.bucket = h200.bucket.ragged();
    h200.candidates.truncate(1);
    let mut h100 = dense(2048);
    h100.bucket = h100.bucket.ragged();
    h100.device.name = "NVIDIA H100 80GB HBM3".into();
    h100.candidates.truncate(1);
    records.extend([h200, h100]);
    let specs = vec![(Template::Hopper, d128)];
    let plan = cache::plan(&specs, &records, cache::Untuned::Default);
    let entries = cache::arch_entries(&renderer, &plan);
    let entry = &entries[&Arch::Sm90].specs[&d128.tag()];
    assert_eq!(
        entry.tuned_ragged,
        BTreeMap::from([(4096, entry.default.clone())])
    );
    let h100_name = fa4_gen::runtime::gpu_name("NVIDIA H100 80GB HBM3", 132);
    assert_eq!(
        entry.tuned_ragged_by_gpu[&h100_name],
        BTreeMap::from([(2048, entry.default.clone())])
    );
    // The dense choices are the H200's, as before.
    assert_eq!(entry.tuned.len(), 9);
    assert!(entry.tuned_by_gpu.is_empty());
}

/// A borrowed choice whose kernel did not build is left out of the plan (its spec serves
/// the other borrowed buckets, or its default once none is left); a kernel the plan needs
/// otherwise is never left out, so its failure stays an error.
#[test]
fn a_borrowed_kernel_that_did_not_build_is_left_out() {
    let renderer = Renderer::embedded().unwrap();
    let mut records = export();
    records.retain(|r| !r.is_stale(|t| renderer.template_hash(t).to_string()));
    let plain = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    let sinks = KernelSpec {
        features: Features {
            sinks: true,
            ..Features::default()
        },
        ..plain
    };
    let specs = [(Template::Hopper, plain), (Template::Hopper, sinks)];
    let plan = cache::plan(&specs, &records, cache::Untuned::Borrow);
    let id = |c: &fa4_gen::space::Candidate| renderer.kernel_id(c).0;
    let borrowed: std::collections::BTreeSet<String> = plan
        .wanted
        .iter()
        .filter(|(c, b)| c.spec == sinks && b.is_some())
        .map(|(c, _)| id(c))
        .collect();
    assert!(borrowed.len() >= 2, "{borrowed:?}");
    let plain_default = plan
        .wanted
        .iter()
        .find(|(c, b)| c.spec == plain && b.is_none())
        .map(|(c, _)| id(c))
        .unwrap();

    // One borrowed kernel and the plain default fail: only the borrowed one goes.
    let first = borrowed.iter().next().unwrap().clone();
    let mut one = plan.clone();
    let failed = [first.clone(), plain_default.clone()].into_iter().collect();
    assert_eq!(
        cache::drop_unbuilt_borrowed(&renderer, &mut one, &failed),
        vec![first.clone()]
    );
    assert!(one.wanted.iter().all(|(c, _)| id(c) != first));
    assert!(one.wanted.iter().any(|(c, _)| id(c) == plain_default));
    assert_eq!(one.borrowed.get(&sinks), Some(&plain));

    // Every borrowed kernel fails: the spec serves its default, borrowing nothing.
    let mut all = plan.clone();
    assert_eq!(
        cache::drop_unbuilt_borrowed(&renderer, &mut all, &borrowed),
        borrowed.iter().cloned().collect::<Vec<_>>()
    );
    assert!(all.borrowed.is_empty());
    let served = cache::arch_entries(&renderer, &all);
    let entry = &served[&Arch::Sm90].specs[&sinks.tag()];
    assert!(entry.tuned.is_empty() && entry.borrowed_from.is_none());
    assert!(!entry.default.is_empty());
}

/// The committed `generated/manifest.json` is what `fa4-gen build-cache` makes from the
/// committed `tuning-db/` export and the templates: the same kernels serve the same
/// (spec, bucket) keys, and the committed sources are the current renders. (Cubins are
/// not committed; their hashes are pinned in the manifest.)
#[test]
fn the_committed_cache_matches_the_tuning_db_and_templates() {
    let dir = repo().join("generated");
    let text = std::fs::read_to_string(dir.join(MANIFEST_FILE)).unwrap();
    let committed: Manifest = serde_json::from_str(&text).unwrap();
    let renderer = Renderer::embedded().unwrap();
    let archs: Vec<Arch> = committed.archs.keys().copied().collect();
    // A build for one arch (`build-cache --arch sm90`) writes a manifest of that arch
    // alone: the shipped cache would stop serving every other GPU.
    assert_eq!(
        archs,
        Arch::ALL.to_vec(),
        "generated/ must serve every arch: run `fa4-gen build-cache` without --arch"
    );
    let specs = cache::specs(&archs, &[], &Features::ALL, false).unwrap();
    let mut records = export();
    records.retain(|r| !r.is_stale(|t| renderer.template_hash(t).to_string()));
    let plan = cache::plan(&specs, &records, cache::Untuned::Default);
    let expected = cache::arch_entries(&renderer, &plan);
    assert!(
        expected == committed.archs,
        "generated/ is out of date: run `fa4-gen build-cache` and commit generated/"
    );
    let export_hash =
        cache::export_hash(&[std::fs::read_to_string(repo().join("tuning-db/sm90.json")).unwrap()]);
    assert_eq!(
        committed.tuning_db_hash, export_hash,
        "built from another export"
    );
    for (id, k) in &committed.kernels {
        let fp = k.template.check(&k.spec, &k.config).unwrap();
        let c = fa4_gen::space::Candidate {
            template: k.template,
            spec: k.spec,
            config: k.config.clone(),
        };
        let rendered = renderer.render(&c, &fp).unwrap();
        assert_eq!(&rendered.id.0, id);
        let src =
            std::fs::read_to_string(dir.join(format!("{}/src/{id}.cu", k.spec.arch))).unwrap();
        assert!(
            src == rendered.source,
            "{id}: committed source differs from the template's render"
        );
    }
}

/// A C program built against `include/fa4gen.h` and the cdylib picks kernels from the
/// committed cache and gets error codes with messages.
#[test]
fn a_c_caller_selects_through_the_header_and_library() {
    if std::process::Command::new("cc")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no C compiler (cc) on this machine");
        return;
    }
    let lib_dir = crate::common::cdylib_dir();
    let out = tempfile::tempdir().unwrap();
    let exe = out.path().join("select");
    let cc = std::process::Command::new("cc")
        .arg(repo().join("tests/c/select.c"))
        .arg("-I")
        .arg(repo().join("include"))
        .arg("-L")
        .arg(&lib_dir)
        .args(["-lfa4_runtime", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = std::process::Command::new(&exe)
        .arg(repo().join("generated"))
        .env("LD_LIBRARY_PATH", &lib_dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // sm90 d128 is served by the Hopper template, tuned (reason 0: the bucket's choice).
    assert!(
        text.contains("d128 causal 4096: hopper_sm90_bf16_d128_causal_")
            && text.contains(" reason 0 bucket 4096 "),
        "{text}"
    );
    assert!(text.contains("params layout: ok"), "{text}");
    // No GPU here (or no context on a GPU host): refused with the reason.
    assert!(
        text.contains("prefill without a current context: code 5: no CUDA"),
        "{text}"
    );
    assert!(
        text.contains("d80: code 3: head dim 80 (V 80) is not offered on sm90"),
        "{text}"
    );
}

/// Eight serving processes open the same cache at once, again and again, while the
/// cache's manifest is replaced under them (as `build-cache` does, by atomic rename) and
/// a tuning database is written: every one of them gets its answer.
#[test]
fn many_processes_read_the_cache_while_it_and_the_tuning_data_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let manifest = std::fs::read(repo().join("generated").join(MANIFEST_FILE)).unwrap();
    std::fs::write(cache.join(MANIFEST_FILE), &manifest).unwrap();
    let cache_arg = cache.to_str().unwrap().to_string();
    let readers: Vec<std::process::Child> = (0..8)
        .map(|i| {
            let script = format!(
                "for n in $(seq 1 6); do {bin} explain --head-dim {hd} --seqlen {sl} --cache {c} > /dev/null || exit 1; done",
                bin = env!("CARGO_BIN_EXE_fa4-gen"),
                hd = [64, 96, 128, 192, 256][i % 5],
                sl = 256 << i,
                c = cache_arg
            );
            std::process::Command::new("sh").args(["-c", &script]).spawn().unwrap()
        })
        .collect();
    // The writers: the manifest replaced whole, over and over; a tuning db imported.
    let tuner = std::process::Command::new(env!("CARGO_BIN_EXE_fa4-gen"))
        .args([
            "db",
            "import",
            repo().join("tuning-db/sm90.json").to_str().unwrap(),
            "--db",
        ])
        .arg(dir.path().join("live.sled"))
        .spawn()
        .unwrap();
    let mut readers = readers;
    let mut rewrites = 0;
    let mut statuses = Vec::new();
    while !readers.is_empty() {
        fa4_gen::fsutil::write_atomic(&cache.join(MANIFEST_FILE), &manifest).unwrap();
        rewrites += 1;
        readers.retain_mut(|r| match r.try_wait().unwrap() {
            Some(status) => {
                statuses.push(status);
                false
            }
            None => true,
        });
    }
    let mut tuner = tuner;
    assert!(tuner.wait().unwrap().success());
    assert!(
        rewrites > 2,
        "the manifest was rewritten while the readers ran"
    );
    assert!(
        statuses.iter().all(|s| s.success()),
        "a reader failed while the cache was rewritten"
    );
}

/// The Python module (ctypes over the C ABI) picks kernels and raises named errors.
#[test]
fn python_selects_through_the_c_abi() {
    if !crate::common::has_python3() {
        return;
    }
    let lib_dir = crate::common::cdylib_dir();
    let script = r#"
import sys
sys.path.insert(0, "python")
import fa4gen
with fa4gen.KernelCache("generated") as c:
    s = c.select(head_dim=96, max_seqlen_q=4096, causal=True)
    print(s["kernel"], s["reason"], s["bucket"], s["threads"])
    w = c.select(head_dim=64, max_seqlen_q=300, window_size=(128, 0), sinks=True)
    print(w["kernel"], w["reason"], w["bucket"], w["is_default"])
    w = c.select(head_dim=64, max_seqlen_q=300, max_seqlen_k=4096, window_size=(1000, 0), causal=True,
                 sinks=True)
    print(w["kernel"], w["reason"], w["bucket"], w["is_default"])
    w = c.select(head_dim=64, max_seqlen_q=300, window_size=(1000, 0), causal=True, sinks=True)
    print("wider than the keys:", w["kernel"], w["bucket"])
    try:
        c.select(head_dim=80, max_seqlen_q=10)
    except fa4gen.Fa4genError as e:
        print("error", e.code, e)
try:
    fa4gen.KernelCache("/nonexistent/cache")
except fa4gen.Fa4genError as e:
    print("error", e.code, e)
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .current_dir(repo())
        .env("FA4GEN_LIB", lib_dir.join("libfa4_runtime.so"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // d96 is the portable template's, tuned; d64 with sinks over a window the Hopper
    // template's, by the window's width (128: its default kept; 1000 over 4096 keys: the
    // width-1024 pick), whatever max_seqlen_q; a window of 1000 over 300 keys is causal's,
    // the kernel a prefill launches for it.
    assert!(
        text.contains("portable_sm90_bf16_d96_causal_") && text.contains(" tuned 4096 "),
        "{text}"
    );
    assert!(
        text.contains("hopper_sm90_bf16_d64_local_sinks_m64n64w4s2_")
            && text.contains(" tuned 128 True"),
        "{text}"
    );
    assert!(
        text.contains("hopper_sm90_bf16_d64_local_sinks_m128n128w12s2_")
            && text.contains(" tuned 1024 False"),
        "{text}"
    );
    assert!(
        text.contains("wider than the keys: hopper_sm90_bf16_d64_causal_sinks_")
            && text
                .lines()
                .any(|l| l.starts_with("wider than the keys:") && l.ends_with(" 512")),
        "{text}"
    );
    assert!(
        text.contains("error 3 head dim 80 (V 80) is not offered on sm90"),
        "{text}"
    );
    assert!(
        text.contains("error 2 /nonexistent/cache/manifest.json: no kernel cache here"),
        "{text}"
    );
}

/// A build of some specs over an existing cache keeps the other specs' entries and
/// kernels (a GPU host's `build-cache --arch sm90 --head-dim 128` leaves the shipped
/// manifest as committed), and refuses to mix a manifest of another export.
#[test]
fn a_partial_build_keeps_the_other_entries_of_the_manifest() {
    let nvrtc = crate::common::nvrtc();
    let renderer = Renderer::embedded().unwrap();
    let d64 = KernelSpec::new(Arch::Sm80, Dtype::Bf16, 64, MaskKind::Causal);
    let d128 = KernelSpec::new(Arch::Sm80, Dtype::Bf16, 128, MaskKind::Causal);
    let records = Vec::new();
    let silent = fa4_gen::compile::Silent;
    let dir = tempfile::tempdir().unwrap();
    let request = |specs, previous| cache::BuildRequest {
        specs,
        records: &records,
        export_hash: "h",
        untuned: cache::Untuned::Default,
        previous,
    };
    let both = [(Template::Portable, d64), (Template::Portable, d128)];
    let full = cache::build(
        &nvrtc,
        &renderer,
        &request(&both, None),
        &silent,
        dir.path(),
    )
    .unwrap()
    .manifest;
    assert_eq!(full.kernels.len(), 2);
    let one = [(Template::Portable, d128)];
    let partial = cache::build(
        &nvrtc,
        &renderer,
        &request(&one, Some(&full)),
        &silent,
        dir.path(),
    )
    .unwrap()
    .manifest;
    assert_eq!(partial, full, "the d64 entry and its kernel are kept");
    let cubins = files(dir.path())
        .keys()
        .filter(|p| p.extension().is_some_and(|e| e == "cubin"))
        .count();
    assert_eq!(cubins, 2, "the kept kernel's cubin stays");
    let mut other = full.clone();
    other.tuning_db_hash = "another export".into();
    let e = cache::build(
        &nvrtc,
        &renderer,
        &request(&one, Some(&other)),
        &silent,
        dir.path(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("without --arch"), "{e}");
}

/// FP8 is in the shipped cache (its holds lifted once its defaults passed `verify` on a
/// GPU): sm90's Hopper template alone, whatever the arch list; d64, d128, d256 and
/// DeepSeek's 192/128, every mask, with and without sinks and softcap; over pages at d64
/// and d128 without softcap, the page boxes that passed `verify` (the rest of FP8 over
/// pages is built by `--held-back` alone).
#[test]
fn fp8_kernels_are_shipped_for_sm90_alone() {
    let archs = [Arch::Sm80, Arch::Sm90];
    let shipped = cache::specs(&archs, &[], &Features::ALL, false).unwrap();
    let fp8: Vec<_> = shipped
        .iter()
        .filter(|(_, s)| s.dtype == Dtype::E4m3)
        .collect();
    // 4 head dims x causal, local and unmasked x sinks, softcap and pages each on or off.
    assert_eq!(fp8.len(), 4 * 3 * 8, "{fp8:?}");
    assert!(fp8.iter().all(|(t, s)| *t == Template::Hopper
        && s.arch == Arch::Sm90
        && fa4_gen::space::held_back_template(s).is_none()));
    for on in [
        |s: &KernelSpec| s.features.sinks,
        |s: &KernelSpec| s.features.softcap,
        |s: &KernelSpec| s.features.paged_kv,
    ] {
        assert_eq!(fp8.iter().filter(|(_, s)| on(s)).count(), 48);
    }
    assert_eq!(
        fp8.iter()
            .filter(|(_, s)| (s.head_dim, s.head_dim_v) == (192, 128))
            .count(),
        24
    );
    assert_eq!(
        fp8.iter()
            .filter(|(_, s)| s.mask == MaskKind::Local)
            .count(),
        32
    );
    // Nothing of FP8 is held back: a `--held-back` build adds none.
    let with_held_back = cache::specs(&archs, &[], &Features::ALL, true).unwrap();
    assert!(!with_held_back
        .iter()
        .any(|x| !shipped.contains(x) && x.1.dtype == Dtype::E4m3));
}
