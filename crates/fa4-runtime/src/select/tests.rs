use std::collections::BTreeMap;

use fa4_spec::manifest::{SpecEntry, MANIFEST_FILE};
use fa4_spec::{Arch, Dtype, Features, KernelSpec, MaskKind};

use super::*;
use crate::test_manifest::{entry, manifest, open, query, spec, tile};

#[test]
fn a_problem_gets_its_bucket_or_the_nearest_tuned_one_or_the_default() {
    let (_dir, cache) = open(&manifest());
    let cache = cache.unwrap();
    let s = cache.select(&query(128, 3000)).unwrap();
    assert_eq!(
        (s.id, s.reason, s.is_default),
        ("b_d128_tuned", Reason::Tuned { bucket: 4096 }, false)
    );
    let s = cache.select(&query(128, 1000)).unwrap();
    assert_eq!((s.id, s.is_default), ("a_d128_default", true));
    // 64k: nearest tuned bucket is 4096; 100: nearest is 1024.
    let s = cache.select(&query(128, 65536)).unwrap();
    assert_eq!(
        s.reason,
        Reason::NearestTuned {
            bucket: 4096,
            wanted: 32768
        }
    );
    let s = cache.select(&query(128, 100)).unwrap();
    assert_eq!(
        s.reason,
        Reason::NearestTuned {
            bucket: 1024,
            wanted: 128
        }
    );
    // An untuned spec serves its default, never an error; seqlen 0 is fine.
    let s = cache.select(&query(64, 0)).unwrap();
    assert_eq!((s.id, s.reason), ("c_d64_default", Reason::Default));
}

#[test]
fn a_device_with_its_own_tuned_choices_is_served_them_and_any_other_the_archs() {
    let (_dir, cache) = open(&manifest());
    let cache = cache.unwrap();
    let h100 = gpu_name("NVIDIA H100 80GB HBM3", 132);
    // The H100's own choice at 4096 (the default), named as the H100's.
    let s = cache.select_on(&query(128, 3000), Some(&h100)).unwrap();
    assert_eq!(
        (s.id, s.reason, s.tuned_on),
        (
            "a_d128_default",
            Reason::Tuned { bucket: 4096 },
            Some(h100.as_str())
        )
    );
    // Where it has no record of the problem's bucket, the arch's choice for it (not its
    // own nearest bucket's): the arch's GPU measured that bucket.
    let s = cache.select_on(&query(128, 1000), Some(&h100)).unwrap();
    assert_eq!(
        (s.id, s.reason, s.tuned_on),
        ("a_d128_default", Reason::Tuned { bucket: 1024 }, None)
    );
    // Another device, or none, or an SM count that differs: the arch's choices.
    for gpu in [
        None,
        Some("NVIDIA H200 (132 SMs)"),
        Some("NVIDIA H100 80GB HBM3 (114 SMs)"),
    ] {
        let s = cache.select_on(&query(128, 3000), gpu).unwrap();
        assert_eq!((s.id, s.tuned_on), ("b_d128_tuned", None), "{gpu:?}");
    }
    // A spec the H100 has no choices for serves the arch's (here its default).
    let s = cache.select_on(&query(64, 3000), Some(&h100)).unwrap();
    assert_eq!(
        (s.id, s.reason, s.tuned_on),
        ("c_d64_default", Reason::Default, None)
    );
}

#[test]
fn a_spec_the_archs_gpu_never_tuned_is_served_another_gpus_choices() {
    // d64 causal: no choice of the arch's GPU, the H100's at 4096 (as FP8 today).
    let mut m = manifest();
    let d64 = spec(64, MaskKind::Causal);
    m.kernels
        .insert("d_d64_h100".to_string(), entry(d64, tile(128, 64)));
    let h100 = gpu_name("NVIDIA H100 80GB HBM3", 132);
    m.archs.get_mut(&Arch::Sm90).unwrap().specs.insert(
        d64.tag(),
        SpecEntry {
            default: "c_d64_default".into(),
            tuned_by_gpu: BTreeMap::from([(
                h100.clone(),
                BTreeMap::from([(4096, "d_d64_h100".into())]),
            )]),
            ..Default::default()
        },
    );
    let (_dir, cache) = open(&m);
    let cache = cache.unwrap();
    // Any device, the H100 too, is served the H100's choice, named as the H100's.
    for gpu in [None, Some("NVIDIA H200 (132 SMs)"), Some(h100.as_str())] {
        let s = cache.select_on(&query(64, 3000), gpu).unwrap();
        assert_eq!(
            (s.id, s.reason, s.tuned_on),
            (
                "d_d64_h100",
                Reason::Tuned { bucket: 4096 },
                Some(h100.as_str())
            ),
            "{gpu:?}"
        );
    }
    // A spec the arch's GPU tuned keeps the arch's choices on other devices.
    let s = cache
        .select_on(&query(128, 3000), Some("NVIDIA H200 (132 SMs)"))
        .unwrap();
    assert_eq!((s.id, s.tuned_on), ("b_d128_tuned", None));
}

#[test]
fn a_ragged_batch_is_served_its_buckets_ragged_choice_where_tuned() {
    let (_dir, cache) = open(&manifest());
    let cache = cache.unwrap();
    let ragged = |seqlen| Query {
        ragged: true,
        ..query(128, seqlen)
    };
    let s = cache.select(&ragged(3000)).unwrap();
    assert_eq!(
        (s.id, s.reason, s.is_default),
        ("b_d128_ragged", Reason::TunedRagged { bucket: 4096 }, false)
    );
    // The same longest sequence in a dense batch: the dense choice.
    assert_eq!(cache.select(&query(128, 3000)).unwrap().id, "b_d128_tuned");
    // A ragged bucket not tuned is served as a dense batch of its longest sequence (no
    // nearest ragged bucket: 1024's dense choice, not 4096's ragged one).
    let s = cache.select(&ragged(1000)).unwrap();
    assert_eq!(
        (s.id, s.reason),
        ("a_d128_default", Reason::Tuned { bucket: 1024 })
    );
    // A device with tuned choices of its own but no ragged ones: the arch's ragged choice.
    let h100 = gpu_name("NVIDIA H100 80GB HBM3", 132);
    let s = cache.select_on(&ragged(3000), Some(&h100)).unwrap();
    assert_eq!((s.id, s.tuned_on), ("b_d128_ragged", None));
    // Local masks have no ragged buckets: a ragged gpt-oss window is served by its width.
    let local = Query {
        mask: MaskKind::Local,
        window: (128, 0),
        ..ragged(16384)
    };
    assert_eq!(
        Bucket::of_batch(local.mask, local.window, local.max_seqlen_q, local.ragged),
        Bucket::of(128)
    );
}

#[test]
fn a_lookup_resolves_the_mask_as_a_launch_does() {
    let local = |window, max_q| Query {
        mask: MaskKind::Local,
        window,
        ..query(128, max_q)
    };
    // Narrower than the keys: the window stays.
    let q = local((1000, 0), 512).as_launched(4096);
    assert_eq!((q.mask, q.window), (MaskKind::Local, (1000, 0)));
    // Wider than the keys (0: as many keys as queries): causal, as prefill launches it.
    let q = local((1000, 0), 512).as_launched(0);
    assert_eq!((q.mask, q.window), (MaskKind::Causal, (-1, -1)));
    let q = local((1000, 1000), 512).as_launched(512);
    assert_eq!((q.mask, q.window), (MaskKind::None, (-1, -1)));
    let q = local((-1, -1), 4096).as_launched(4096);
    assert_eq!(q.mask, MaskKind::None);
    // Causal and unmasked queries ignore the window they carry.
    let q = Query {
        window: (128, 0),
        ..query(128, 4096)
    }
    .as_launched(4096);
    assert_eq!((q.mask, q.window), (MaskKind::Causal, (-1, -1)));
    let q = Query {
        mask: MaskKind::None,
        window: (128, 0),
        ..query(128, 4096)
    }
    .as_launched(0);
    assert_eq!((q.mask, q.window), (MaskKind::None, (-1, -1)));
}

#[test]
fn an_untuned_spec_serving_a_related_specs_choices_says_so() {
    // d128 causal with sinks, never tuned, serves d128 causal's tuned tile at 4096.
    let mut m = manifest();
    let plain = spec(128, MaskKind::Causal);
    let sinks = KernelSpec {
        features: Features {
            sinks: true,
            ..Features::default()
        },
        ..plain
    };
    let default = tile(128, 64);
    let tuned = m.kernels["b_d128_tuned"].config.clone();
    m.kernels
        .insert("f_sinks_default".into(), entry(sinks, default));
    m.kernels
        .insert("g_sinks_borrowed".into(), entry(sinks, tuned));
    m.archs.get_mut(&Arch::Sm90).unwrap().specs.insert(
        sinks.tag(),
        SpecEntry {
            default: "f_sinks_default".into(),
            tuned: BTreeMap::from([(4096, "g_sinks_borrowed".into())]),
            borrowed_from: Some(plain.tag()),
            ..Default::default()
        },
    );
    let (_dir, cache) = open(&m);
    let cache = cache.unwrap();
    let with_sinks = |seqlen| Query {
        features: sinks.features,
        ..query(128, seqlen)
    };
    let s = cache.select(&with_sinks(3000)).unwrap();
    assert_eq!(
        (s.id, s.reason, s.is_default),
        (
            "g_sinks_borrowed",
            Reason::Borrowed {
                bucket: 4096,
                wanted: 4096
            },
            false
        )
    );
    let s = cache.select(&with_sinks(100)).unwrap();
    assert_eq!(
        s.reason,
        Reason::Borrowed {
            bucket: 4096,
            wanted: 128
        }
    );
    assert_eq!(cache.borrowed_from(&sinks), Some(plain.tag().as_str()));
    assert!(!cache.is_tuned(&sinks) && cache.is_tuned(&plain));
    // The plain spec's own lookups are unchanged.
    let s = cache.select(&query(128, 3000)).unwrap();
    assert_eq!(s.reason, Reason::Tuned { bucket: 4096 });
    assert_eq!(cache.borrowed_from(&plain), None);
}

#[test]
fn a_sliding_window_is_served_by_its_width_not_its_sequence() {
    // d128 local: the default at width 128, another tile tuned at width 1024.
    let mut m = manifest();
    let local = spec(128, MaskKind::Local);
    let d128 = m.kernels["a_d128_default"].config.clone();
    let wide = m.kernels["b_d128_tuned"].config.clone();
    m.kernels
        .insert("d_local_default".into(), entry(local, d128));
    m.kernels.insert("e_local_wide".into(), entry(local, wide));
    m.archs.get_mut(&Arch::Sm90).unwrap().specs.insert(
        local.tag(),
        SpecEntry {
            default: "d_local_default".into(),
            tuned: BTreeMap::from([
                (128, "d_local_default".into()),
                (1024, "e_local_wide".into()),
            ]),
            borrowed_from: None,
            ..Default::default()
        },
    );
    let (_dir, cache) = open(&m);
    let cache = cache.unwrap();
    let at = |seqlen, window| {
        let s = cache
            .select(&Query {
                mask: MaskKind::Local,
                window,
                ..query(128, seqlen)
            })
            .unwrap();
        (s.id, s.reason)
    };
    // gpt-oss's window over long prompts: width 128, whatever the length.
    assert_eq!(
        at(16384, (128, 0)),
        ("d_local_default", Reason::Tuned { bucket: 128 })
    );
    assert_eq!(
        at(300, (1000, 0)),
        ("e_local_wide", Reason::Tuned { bucket: 1024 })
    );
    assert_eq!(
        at(100_000, (500, 500)),
        ("e_local_wide", Reason::Tuned { bucket: 1024 })
    );
    // Unbounded on one side: the sequence's length, as for causal (4096 -> nearest 1024).
    assert_eq!(
        at(3000, (-1, 64)),
        (
            "e_local_wide",
            Reason::NearestTuned {
                bucket: 1024,
                wanted: 4096
            }
        )
    );
}

#[test]
fn unsupported_problems_are_named() {
    let (_dir, cache) = open(&manifest());
    let cache = cache.unwrap();
    let e = cache.select(&query(80, 512)).unwrap_err();
    assert!(
        e.to_string()
            .contains("head dim 80 (V 80) is not offered on sm90: offered head dims are 64, 128"),
        "{e}"
    );
    let e = cache
        .select(&Query {
            arch: Arch::Sm100,
            ..query(64, 512)
        })
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("no kernels for sm100 in this cache (it has sm90)"),
        "{e}"
    );
    let e = cache
        .select(&Query {
            mask: MaskKind::Local,
            ..query(64, 512)
        })
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("bf16 local mask with features none is not in this cache"),
        "{e}"
    );
}

#[test]
fn e4m3_problems_without_e4m3_kernels_are_named() {
    let e4m3 = |q: Query| Query {
        dtype: Dtype::E4m3,
        ..q
    };
    let mut m = manifest();
    let (_dir, cache) = open(&m);
    let e = cache.unwrap().select(&e4m3(query(128, 512))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no e4m3 kernels for sm90 in this cache (it has bf16): a cache built before e4m3 was \
         served, or without sm90's head dims; rebuild it with `fa4-gen build-cache` (e4m3 at \
         d64, d128 and d256)"
    );
    // A cache with an e4m3 kernel serves it; a paged e4m3 problem is named as one no
    // e4m3 kernel computes.
    let fp8 = KernelSpec {
        dtype: Dtype::E4m3,
        ..spec(128, MaskKind::Causal)
    };
    m.kernels
        .insert("e_d128_e4m3".into(), entry(fp8, tile(128, 128)));
    m.archs.get_mut(&Arch::Sm90).unwrap().specs.insert(
        fp8.tag(),
        SpecEntry {
            default: "e_d128_e4m3".into(),
            ..Default::default()
        },
    );
    let (_dir, cache) = open(&m);
    let cache = cache.unwrap();
    assert_eq!(
        cache.select(&e4m3(query(128, 512))).unwrap().id,
        "e_d128_e4m3"
    );
    let e = cache
        .select(&Query {
            features: "paged".parse().unwrap(),
            ..e4m3(query(128, 512))
        })
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "e4m3 causal mask with features paged is not in this cache for sm90 d128; this cache \
             was built without e4m3 over paged K/V: `fa4-gen build-cache --features paged` \
             builds it"
        ),
        "{e}"
    );
    let e = cache
        .select(&Query {
            features: "softcap+paged".parse().unwrap(),
            ..e4m3(query(128, 512))
        })
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("this cache was built without e4m3 over paged K/V"),
        "{e}"
    );
    let e = cache
        .select(&Query {
            mask: MaskKind::Local,
            window: (128, 0),
            ..e4m3(query(128, 512))
        })
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "e4m3 local mask with features none is not in this cache for sm90 d128; build it \
             with `fa4-gen build-cache --features all`"
        ),
        "{e}"
    );
    // A head dim the cache has in bf16 only: named as e4m3's, with where e4m3 is served.
    let e = cache.select(&e4m3(query(64, 512))).unwrap_err();
    assert!(
        e.to_string().contains(
            "e4m3 causal mask with features none is not in this cache for sm90 d64; this cache \
             has no e4m3 kernel at this head dim: fa4-gen serves e4m3 at d64, d128, d256 and \
             192/128"
        ),
        "{e}"
    );
    // Elsewhere than sm90: none are built.
    let sm100 = KernelSpec {
        arch: Arch::Sm100,
        ..spec(128, MaskKind::Causal)
    };
    m.kernels
        .insert("f_sm100".into(), entry(sm100, tile(128, 128)));
    m.archs.insert(
        Arch::Sm100,
        fa4_spec::manifest::ArchEntry {
            tuned_on: None,
            specs: BTreeMap::from([(
                sm100.tag(),
                SpecEntry {
                    default: "f_sm100".into(),
                    ..Default::default()
                },
            )]),
        },
    );
    let (_dir, cache) = open(&m);
    let e = cache
        .unwrap()
        .select(&Query {
            arch: Arch::Sm100,
            ..e4m3(query(128, 512))
        })
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "no e4m3 kernels for sm100 in this cache (it has bf16): e4m3 kernels are built for \
         sm90 (Hopper) only"
    );
}

#[test]
fn broken_caches_are_refused_with_the_fix() {
    let missing = KernelCache::open(std::path::Path::new("/nonexistent/cache"))
        .err()
        .unwrap();
    assert!(
        missing.to_string().contains("fa4-gen build-cache"),
        "{missing}"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(MANIFEST_FILE), "{ not json").unwrap();
    let corrupt = KernelCache::open(dir.path()).err().unwrap();
    assert!(matches!(corrupt, CacheError::Corrupt { .. }), "{corrupt}");
    let mut m = manifest();
    m.format = "fa4-gen kernel cache 0".into();
    let (_d, old) = open(&m);
    assert!(matches!(old, Err(CacheError::Format { .. })));
    let mut m = manifest();
    m.kernels.remove("b_d128_tuned");
    let (_d, dangling) = open(&m);
    let e = dangling.err().unwrap();
    assert!(e.to_string().contains("b_d128_tuned"), "{e}");
}

#[test]
fn flash_attention_windows_map_to_masks() {
    let m = |causal, w| mask_of(causal, w, 1000, 2000);
    assert_eq!(m(false, (-1, -1)), (MaskKind::None, (-1, -1)));
    assert_eq!(m(true, (-1, -1)), (MaskKind::Causal, (-1, -1)));
    // causal caps the right side; (-1, 0) is causal.
    assert_eq!(m(true, (128, 7)), (MaskKind::Local, (128, 0)));
    assert_eq!(m(false, (-1, 0)), (MaskKind::Causal, (-1, -1)));
    assert_eq!(m(false, (128, 0)), (MaskKind::Local, (128, 0)));
    assert_eq!(m(false, (-1, 5)), (MaskKind::Local, (-1, 5)));
    // Negative sides are unbounded, as in FlashAttention.
    assert_eq!(m(false, (-7, -3)), (MaskKind::None, (-1, -1)));
    // A side past every key is unbounded: left >= max_seqlen_k, right >=
    // max_seqlen_q - 1 (the first query then sees the last key).
    assert_eq!(m(false, (2000, 0)), (MaskKind::Causal, (-1, -1)));
    assert_eq!(m(false, (1999, 0)), (MaskKind::Local, (1999, 0)));
    assert_eq!(m(false, (5, 999)), (MaskKind::Local, (5, -1)));
    assert_eq!(m(false, (5, 998)), (MaskKind::Local, (5, 998)));
    assert_eq!(m(false, (4096, 4096)), (MaskKind::None, (-1, -1)));
}
