use super::*;
use fa4_spec::Arch;

fn result(spec: KernelSpec) -> CaseResult {
    CaseResult {
        kernel: "k".into(),
        spec,
        case: Case::new("c", 1, 1, 1, 1, 1),
        seed: 0,
        o_rel_l2: 2.5e-3,
        o_max_abs: 0.01,
        lse_max_abs: 1e-6,
        lse_max_excess: 1e-6,
        o_nan_or_unwritten: 0,
        o_guard_changed: 0,
        lse_nan: 0,
        lse_inf_mismatch: 0,
        lse_guard_changed: 0,
        split_tiles: 0,
        split_counters_left: 0,
        ms: None,
        tflops: None,
        passed: false,
        failure: None,
    }
}

#[test]
fn judge_applies_the_bounds() {
    let bf16 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
    assert_eq!(judge(&result(bf16)), None);
    let fp16 = KernelSpec {
        dtype: Dtype::Fp16,
        ..bf16
    };
    assert!(judge(&result(fp16))
        .unwrap()
        .contains("O relative L2 error 2.50e-3 > 1e-3"));
    // e4m3: three mantissa bits in, P in e4m3 too; LSE from FP8 products, 3e-2.
    let e4m3 = KernelSpec {
        dtype: Dtype::E4m3,
        ..bf16
    };
    let mut r = result(e4m3);
    r.o_rel_l2 = 2.5e-2;
    assert_eq!(judge(&r), None);
    r.o_rel_l2 = 3.5e-2;
    assert!(judge(&r)
        .unwrap()
        .contains("O relative L2 error 3.50e-2 > 3e-2"));
    // e4m3's LSE: 3e-2 plus the row's FP8 accumulation slack (compare_lse reports the
    // excess over the slack): 0.6 on a row whose slack is 0.9 passes, 6e-2 on a row whose
    // slack is 1e-2 does not.
    let mut r = result(e4m3);
    r.lse_max_abs = 0.6;
    r.lse_max_excess = 0.0;
    assert_eq!(judge(&r), None);
    r.lse_max_abs = 6e-2;
    r.lse_max_excess = 6e-2 - 1e-2;
    assert!(judge(&r)
        .unwrap()
        .contains("LSE max error 6.00e-2 > 3e-2 + the row's FP8 accumulation slack"));
    let mut r = result(bf16);
    r.lse_max_abs = 2e-3;
    r.lse_max_excess = 2e-3;
    assert!(judge(&r).unwrap().contains("LSE max error 2.00e-3 > 1e-3"));
    r.lse_max_excess = f64::NAN;
    assert!(judge(&r).is_some(), "NaN never passes");
    let mut r = result(bf16);
    r.o_rel_l2 = f64::NAN;
    assert!(judge(&r).is_some(), "NaN never passes");
    let mut r = result(bf16);
    r.o_guard_changed = 3;
    r.o_nan_or_unwritten = 1;
    let why = judge(&r).unwrap();
    assert!(
        why.contains("3 cells outside O written") && why.contains("1 O cells NaN"),
        "{why}"
    );
    // A split tail's counter left set would make the next launch merge wrongly.
    let mut r = result(bf16);
    r.split_tiles = 200;
    assert_eq!(judge(&r), None);
    r.split_counters_left = 2;
    assert!(judge(&r)
        .unwrap()
        .contains("2 split-tail counters left non-zero"));
}

#[test]
fn standard_cases_cover_the_issue_list() {
    let cases = standard_cases();
    for s in [1, 17, 128, 1000, 4096] {
        assert!(
            cases.iter().any(|c| c.seqlen_q == s && c.seqlen_k == s),
            "seqlen {s}"
        );
    }
    assert!(cases.iter().any(|c| c.seqlen_q < c.seqlen_k));
    assert!(cases.iter().any(|c| c.seqlen_q > c.seqlen_k));
    assert!(cases.iter().any(|c| c.heads_q != c.heads_kv));
    assert!(cases.iter().any(|c| c.row_pad > 0));
    assert!(cases.iter().any(|c| c.timed));
    // Caps on both sides of the fixed offset's limit (51.9), and the small default.
    assert!(cases.iter().any(|c| c.softcap == 50.0));
    assert!(cases.iter().any(|c| c.softcap > 52.0));
    assert!(cases.iter().any(|c| c.softcap < 2.0));
    assert!(cases.iter().any(|c| c.window.0 >= 0 && c.window.1 >= 0));
    assert!(cases.iter().any(|c| c.window.0 < 0 || c.window.1 < 0));
    // Varlen batches with empty sequences, queries without keys and cached prefixes.
    let seqs: Vec<(i32, i32)> = cases.iter().flat_map(|c| c.seqlens.clone()).collect();
    assert!(seqs.contains(&(0, 0)) && seqs.iter().any(|s| s.0 > 0 && s.1 == 0));
    for len in [1, 77, 513, 2048] {
        assert!(seqs.contains(&(len, len)), "varlen length {len}");
    }
    assert!(seqs.iter().any(|s| s.0 < s.1 && s.0 > 1));
    // The model layers of the issue: 64:8 (gpt-oss-20b), 32:8 (Llama-3-8B), and 8:1.
    for (hq, hkv) in [(64, 8), (32, 8), (8, 1)] {
        assert!(
            cases
                .iter()
                .any(|c| c.heads_q == hq && c.heads_kv == hkv && c.is_varlen()),
            "{hq}:{hkv}"
        );
    }
    // e4m3 kernels see outlier channels and null descales, in the tuner's checks too.
    for fp8 in [Fp8Inputs::Outliers, Fp8Inputs::NullDescales] {
        assert!(
            cases
                .iter()
                .any(|c| c.fp8 == fp8 && crate::tune::CHECK_CASES.contains(&c.name.as_str())),
            "{fp8:?}"
        );
    }
    assert!(cases.iter().any(|c| c.fp8 == Fp8Inputs::Normal && c.timed));
    // Page sizes from 1 to 256, one that is not a multiple of any key tile.
    let pages: Vec<i32> = cases.iter().map(|c| c.page_size).collect();
    for size in [1, 16, 48, 64, 256] {
        assert!(pages.contains(&size), "page size {size}");
    }
}
