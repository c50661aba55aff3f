//! The host-side checks name each bad argument before a launch.

mod common;

use common::good;
use fa4_runtime::{check_problem, check_problem_for, ProblemError};
use fa4_spec::{FwdParams, KernelSpec};

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
    use fa4_spec::{Arch, Dtype, Features, MaskKind};
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
    use fa4_spec::{Arch, Dtype, MaskKind};
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
