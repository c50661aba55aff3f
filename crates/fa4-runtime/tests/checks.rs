//! The host-side checks name each bad argument before a launch.

mod common;

use common::good;
use fa4_runtime::{
    check_descales, check_problem, check_problem_as, check_problem_for, kernel_params, Descales,
    ProblemError,
};
use fa4_spec::{Arch, Dtype, FwdParams, KernelSpec, MaskKind};

#[test]
fn accepts_a_well_formed_problem() {
    assert_eq!(check_problem(&good()), Ok(()));
}

#[test]
fn names_each_bad_argument() {
    let cases: Vec<(FwdParams, &str)> = vec![
        (
            FwdParams {
                heads_kv: 3,
                ..good()
            },
            "heads_q (8) is not a multiple of heads_kv (3)",
        ),
        (
            FwdParams {
                k: 0x2008,
                ..good()
            },
            "k at 0x2008 is not 16-byte aligned",
        ),
        (FwdParams { o: 0, ..good() }, "o is a null pointer"),
        (
            FwdParams {
                q_row_stride: 1020,
                ..good()
            },
            "q_row_stride = 1020 elements is not a multiple of 8",
        ),
        (
            FwdParams {
                seqlen_k: -1,
                ..good()
            },
            "seqlen_k is -1: it must be at least 0",
        ),
        (
            FwdParams {
                softmax_scale: f32::NAN,
                ..good()
            },
            "softmax_scale NaN",
        ),
        (
            FwdParams {
                heads_q: 0,
                ..good()
            },
            "heads_q is 0",
        ),
        (
            FwdParams {
                k_row_stride: (1 << 24) + 8,
                ..good()
            },
            "k_row_stride = 16777224 elements is over 16777216",
        ),
        (
            FwdParams {
                batch: 70000,
                ..good()
            },
            "batch is 70000: a launch takes at most 65535 (split the batch)",
        ),
    ];
    for (p, expected) in cases {
        let msg = check_problem(&p).unwrap_err().to_string();
        assert!(msg.contains(expected), "{msg:?} lacks {expected:?}");
    }
}

#[test]
fn feature_arguments_are_checked_against_the_spec() {
    use fa4_spec::Features;
    let plain = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
    // A plain kernel ignores the feature fields.
    let junk = FwdParams {
        window_left: -7,
        softcap: f32::NAN,
        ..good()
    };
    assert_eq!(check_problem_for(&plain, &junk), Ok(()));

    let local = KernelSpec {
        mask: MaskKind::Local,
        ..plain
    };
    let p = FwdParams {
        window_left: 128,
        window_right: 0,
        ..good()
    };
    assert_eq!(check_problem_for(&local, &p), Ok(()));
    let msg = check_problem_for(
        &local,
        &FwdParams {
            window_right: -2,
            ..p
        },
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("window (128, -2)"), "{msg}");

    let softcap = KernelSpec {
        features: Features {
            sinks: false,
            softcap: true,
            ..Default::default()
        },
        ..plain
    };
    assert!(check_problem_for(
        &softcap,
        &FwdParams {
            softcap: 50.0,
            ..good()
        }
    )
    .is_ok());
    let msg = check_problem_for(&softcap, &good())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("softcap 0 is not a finite positive number"),
        "{msg}"
    );

    let sinks = KernelSpec {
        features: Features {
            sinks: true,
            softcap: false,
            ..Default::default()
        },
        ..plain
    };
    assert_eq!(
        check_problem_for(&sinks, &good()),
        Err(ProblemError::Null { tensor: "sinks" })
    );
    let msg = check_problem_for(
        &sinks,
        &FwdParams {
            sinks: 0x6002,
            ..good()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("sinks at 0x6002 is not 4-byte aligned"),
        "{msg}"
    );
    assert!(check_problem_for(
        &sinks,
        &FwdParams {
            sinks: 0x6000,
            ..good()
        }
    )
    .is_ok());
}

#[test]
fn varlen_and_paged_arguments_are_checked() {
    // Varlen index arrays are optional, but aligned when given.
    let varlen = FwdParams {
        cu_seqlens_q: 0x7000,
        cu_seqlens_k: 0x7100,
        seqused_k: 0x7200,
        ..good()
    };
    assert_eq!(check_problem(&varlen), Ok(()));
    let msg = check_problem(&FwdParams {
        cu_seqlens_q: 0x7002,
        ..varlen
    })
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("cu_seqlens_q at 0x7002 is not 4-byte aligned"),
        "{msg}"
    );

    let dense = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    let paged = KernelSpec {
        features: "paged".parse().unwrap(),
        ..dense
    };
    // seqlen_k 100 in pages of 16 keys: 7 pages per sequence at least.
    let p = FwdParams {
        page_table: 0x8000,
        page_table_batch_stride: 7,
        page_size: 16,
        seqused_k: 0x7200,
        ..good()
    };
    assert_eq!(check_problem_for(&paged, &p), Ok(()));
    let msg = check_problem_for(
        &paged,
        &FwdParams {
            page_table_batch_stride: 6,
            ..p
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("page_table_batch_stride must be at least"),
        "{msg}"
    );
    assert_eq!(
        check_problem_for(&paged, &FwdParams { page_size: 0, ..p }),
        Err(ProblemError::PageSize(0))
    );
    assert_eq!(
        check_problem_for(&paged, &FwdParams { page_table: 0, ..p }),
        Err(ProblemError::Null {
            tensor: "page_table"
        })
    );
    let msg = check_problem_for(
        &paged,
        &FwdParams {
            cu_seqlens_k: 0x7100,
            ..p
        },
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("seqused_k"), "{msg}");
    // A page table handed to a kernel that would ignore it is an error, not a
    // silent dense read.
    let msg = check_problem_for(&dense, &p).unwrap_err().to_string();
    assert!(msg.contains("paged feature"), "{msg}");
}

#[test]
fn e4m3_strides_are_whole_16_byte_steps_and_o_is_bf16() {
    let bf16 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    let fp8 = KernelSpec {
        dtype: Dtype::E4m3,
        ..bf16
    };
    assert_eq!(check_problem_for(&fp8, &good()), Ok(()));
    // 8 elements are 16 bytes of bf16 but 8 of e4m3.
    let p = FwdParams {
        k_row_stride: 2 * 128 + 8,
        k_batch_stride: 100 * (2 * 128 + 8),
        ..good()
    };
    assert_eq!(check_problem_for(&bf16, &p), Ok(()));
    let msg = check_problem_for(&fp8, &p).unwrap_err().to_string();
    assert!(
        msg.contains("k_row_stride = 264 elements is not a multiple of 16 (16 bytes)"),
        "{msg}"
    );
    assert_eq!(
        check_problem_as(Dtype::E4m3, &p),
        check_problem_for(&fp8, &p)
    );
    // O is bf16: its strides step 8 elements at a time.
    let p = FwdParams {
        o_row_stride: 8 * 128 + 8,
        o_batch_stride: 100 * (8 * 128 + 8),
        ..good()
    };
    assert_eq!(check_problem_for(&fp8, &p), Ok(()));
    // Base pointers as for bf16: 16-byte aligned.
    let msg = check_problem_for(
        &fp8,
        &FwdParams {
            v: 0x3008,
            ..good()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("v at 0x3008 is not 16-byte aligned"), "{msg}");
}

#[test]
fn e4m3_kernels_read_q_k_and_v_strides_in_pairs() {
    let caller = good();
    for dtype in [Dtype::Bf16, Dtype::Fp16] {
        assert_eq!(kernel_params(dtype, &caller), Ok(caller));
    }
    let kernel = kernel_params(Dtype::E4m3, &caller).unwrap();
    let strides = |p: &FwdParams| {
        [
            p.q_batch_stride,
            p.q_row_stride,
            p.q_head_stride,
            p.k_batch_stride,
            p.k_row_stride,
            p.k_head_stride,
            p.v_batch_stride,
            p.v_row_stride,
            p.v_head_stride,
        ]
    };
    assert_eq!(strides(&kernel), strides(&caller).map(|s| s / 2));
    assert_eq!(
        strides(&kernel),
        [51200, 512, 64, 12800, 128, 64, 12800, 128, 64]
    );
    // O (bf16) and LSE keep theirs, and so does everything else.
    assert_eq!(
        FwdParams {
            q_batch_stride: caller.q_batch_stride,
            q_row_stride: caller.q_row_stride,
            q_head_stride: caller.q_head_stride,
            k_batch_stride: caller.k_batch_stride,
            k_row_stride: caller.k_row_stride,
            k_head_stride: caller.k_head_stride,
            v_batch_stride: caller.v_batch_stride,
            v_row_stride: caller.v_row_stride,
            v_head_stride: caller.v_head_stride,
            ..kernel
        },
        caller
    );
    // An odd stride has no pair count: refused, named, with the fix.
    let odd = FwdParams {
        v_head_stride: 129,
        ..caller
    };
    let e = kernel_params(Dtype::E4m3, &odd).unwrap_err();
    assert_eq!(
        e,
        ProblemError::OddStride {
            what: "v_head_stride",
            value: 129
        }
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with("v_head_stride = 129 elements is odd")
            && msg.contains("lay the tensor out with even strides"),
        "{msg}"
    );
    // Only Q, K and V are counted in pairs.
    let odd_o = FwdParams {
        o_row_stride: 1025,
        ..caller
    };
    assert_eq!(
        kernel_params(Dtype::E4m3, &odd_o).map(|p| p.o_row_stride),
        Ok(1025)
    );
    // A stride that is a multiple of 16 is even: every checked e4m3 problem converts.
    let fp8 = KernelSpec::new(Arch::Sm90, Dtype::E4m3, 128, MaskKind::None);
    assert!(check_problem_for(&fp8, &odd).is_err());
}

#[test]
fn descales_are_aligned_floats_for_e4m3_kernels_only() {
    let d = Descales {
        q: 0x9000,
        k: 0x9100,
        v: 0,
        batch_stride: 2,
        head_stride: 1,
    };
    assert_eq!(check_descales(Dtype::E4m3, &d), Ok(()));
    assert_eq!(check_descales(Dtype::E4m3, &Descales::default()), Ok(()));
    let msg = check_descales(Dtype::E4m3, &Descales { k: 0x9102, ..d })
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("k_descale at 0x9102 is not 4-byte aligned"),
        "{msg}"
    );
    assert_eq!(
        check_descales(
            Dtype::E4m3,
            &Descales {
                head_stride: -1,
                ..d
            }
        ),
        Err(ProblemError::TooSmall {
            what: "descale_head_stride",
            value: -1,
            min: 0
        })
    );
    // A 16-bit kernel would ignore them: an error, not a silent unscaled result.
    assert_eq!(check_descales(Dtype::Bf16, &Descales::default()), Ok(()));
    let msg = check_descales(Dtype::Fp16, &Descales { q: 0, ..d })
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("k_descale is set, but this kernel was not built for it"),
        "{msg}"
    );
}
