use fa4_spec::{Arch, Dtype, Features, KernelSpec, MaskKind};

use super::*;

fn spec(head_dim: u32, head_dim_v: u32) -> KernelSpec {
    KernelSpec {
        head_dim_v,
        ..KernelSpec::new(Arch::Sm100, Dtype::Bf16, head_dim, MaskKind::Causal)
    }
}

#[test]
fn every_default_passes_the_static_check() {
    for &(d, dv) in HEAD_DIMS {
        for dtype in [Dtype::Bf16, Dtype::Fp16] {
            for mask in MaskKind::ALL {
                for features in Features::ALL.into_iter().filter(|f| !f.paged_kv) {
                    let s = KernelSpec {
                        dtype,
                        mask,
                        features,
                        ..spec(d, dv)
                    };
                    let c = default_config(&s);
                    let fp = check(&s, &c).unwrap_or_else(|e| panic!("{s:?} {c}: {e}"));
                    assert_eq!(fp.threads, 32 * c.warps);
                    assert!(fp.smem_bytes <= Arch::Sm100.max_smem_per_block());
                    assert!(tmem_columns_used(&s, &c) <= TMEM_COLUMNS);
                }
            }
        }
    }
}

/// Two Q stages wherever both stages' S and O fit the 512 TMEM columns; d256 (256 columns
/// of O a stage) takes one.
#[test]
fn defaults_take_two_q_stages_where_tensor_memory_holds_them() {
    for (d, dv, stages) in [
        (64, 64, 2),
        (128, 128, 2),
        (192, 128, 2),
        (192, 192, 2),
        (256, 256, 1),
    ] {
        let c = default_config(&spec(d, dv));
        assert_eq!(q_stages(&c), stages, "d{d}/{dv}: {c}");
        assert_eq!(c.switch(LAZY_RESCALE, 0), 1, "FA4's conditional rescaling");
    }
    // Two stages at d256 would need 2 x (64 + 256) columns.
    let two = config(2, 64, 2, true);
    let why = check(&spec(256, 256), &two).unwrap_err();
    assert_eq!(why.kind, RejectKind::SharedMemory);
    assert!(why.reason.contains("640 tensor-memory columns"), "{why}");
}

#[test]
fn only_sm100_and_16_bit_types_without_pages() {
    let c = default_config(&spec(128, 128));
    let on = |arch, dtype, paged_kv| KernelSpec {
        arch,
        dtype,
        features: Features {
            paged_kv,
            ..Features::default()
        },
        ..spec(128, 128)
    };
    assert!(check(&on(Arch::Sm100, Dtype::Fp16, false), &c).is_ok());
    for (s, says) in [
        (on(Arch::Sm90, Dtype::Bf16, false), "tcgen05 is sm100's"),
        (on(Arch::Sm100, Dtype::E4m3, false), "no FP8"),
        (on(Arch::Sm100, Dtype::Bf16, true), "no pages"),
    ] {
        let why = check(&s, &c).unwrap_err();
        assert!(why.reason.contains(says), "{s}: {why}");
    }
    let mut stray = c.clone();
    stray.switches.insert(PINGPONG.to_string(), 1);
    assert!(check(&spec(128, 128), &stray)
        .unwrap_err()
        .reason
        .contains("no switch pingpong"));
}

/// The rendered descriptors carry the layouts the kernel's loads build: Q and K K-major,
/// V MN-major with its 64-column groups a key block's column block apart, 128-byte
/// swizzle, 8-row groups 1024 bytes apart; QK's N the key block, PV's the padded V dim.
#[test]
fn rendered_descriptors_follow_the_tiles() {
    let field = |v: u64, lsb: u32, width: u32| (v >> lsb) & ((1 << width) - 1);
    let s = spec(96, 96);
    let c = config(2, 64, 2, true);
    let fp = check(&s, &c).unwrap();
    let values: std::collections::BTreeMap<_, _> = render_values(&s, &c, &fp).into_iter().collect();
    let literal = |name: &str| {
        let text = values[name].as_str().unwrap();
        let hex = text.trim_end_matches("ull").trim_end_matches('u');
        u64::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap()
    };
    let (qk, pv) = (literal("idesc_qk"), literal("idesc_pv"));
    assert_eq!(field(qk, 17, 6) << 3, 64, "QK's N: the key block");
    assert_eq!(
        field(pv, 17, 6) << 3,
        128,
        "PV's N: d96 padded to whole 64-column blocks"
    );
    assert_eq!(field(qk, 24, 5) << 4, 128);
    assert_eq!(
        (field(qk, 15, 1), field(qk, 16, 1)),
        (0, 0),
        "Q and K K-major"
    );
    assert_eq!(
        (field(pv, 15, 1), field(pv, 16, 1)),
        (0, 1),
        "P K-major, V MN-major"
    );
    assert_eq!(field(qk, 4, 2), 1, "f32 accumulators");
    assert_eq!(field(qk, 7, 3), 1, "bf16 operands");
    let (k, v) = (literal("desc_k_major"), literal("desc_v"));
    for d in [k, v] {
        assert_eq!(
            field(d, 0, 14),
            0,
            "the start address is added on the device"
        );
        assert_eq!(field(d, 32, 14) << 4, 1024, "8-row groups");
        assert_eq!(field(d, 46, 3), 1);
        assert_eq!(field(d, 61, 3), 2, "128-byte swizzle");
    }
    assert_eq!(
        field(v, 16, 14) << 4,
        64 * 128,
        "V's column blocks: 64 keys of 128 bytes"
    );
    assert_eq!(values["tmem_columns"], 512);
    assert_eq!(values["q_stages"], 2);
}

/// `list --configs` shows what ptxas cannot: each warp role's registers after setmaxnreg
/// (traits.cuh's split, which the kernel asserts hands out no more than the launch holds)
/// and the tensor-memory columns, a power of two.
#[test]
fn resource_notes_give_the_register_split_and_tmem() {
    let d128 = spec(128, 128);
    let note = resource_note(&d128, &default_config(&d128));
    assert!(
        note.contains("TMEM 512 of 512 columns (512 used)"),
        "{note}"
    );
    assert!(
        note.contains("softmax 192, correction 72, load/MMA 56"),
        "{note}"
    );
    let d256 = spec(256, 256);
    let note = resource_note(&d256, &default_config(&d256));
    assert!(
        note.contains("TMEM 512 of 512 columns (320 used)"),
        "{note}"
    );
    assert!(
        note.contains("softmax 248, correction 160, load/MMA 96"),
        "{note}"
    );
    let d64 = spec(64, 64);
    let small = config(1, 64, 2, true);
    assert!(resource_note(&d64, &small).contains("TMEM 128 of 512 columns (128 used)"));
}
