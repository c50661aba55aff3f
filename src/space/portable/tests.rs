use super::*;

#[test]
fn smem_matches_hand_computation() {
    // d=128 (swizzled), 128x64 tile, 2 stages: Q 128*128 + 2 * (64*128 + 64*128)
    // elements, and 16 bytes of per-block scalars.
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    assert_eq!(smem_bytes(&spec, &config(128, 8, 64, 2, 0)), 98_304 + 16);
    let spec = KernelSpec {
        head_dim_v: 64,
        ..spec
    };
    // O (128*64) is smaller than Q (128*128): the larger wins.
    assert_eq!(
        smem_bytes(&spec, &config(128, 8, 64, 1, 0)),
        (128 * 128 + 64 * 128 + 64 * 64) * 2 + 16
    );
    // d=96 rows are padded: 104 elements, no scalars after the tiles.
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 96, MaskKind::None);
    assert_eq!(
        smem_bytes(&spec, &config(64, 4, 64, 1, 0)),
        (64 * 104 + 64 * 104 * 2) * 2
    );
}

#[test]
fn shapes_are_checked() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
    let bad = config(64, 8, 64, 2, 0); // 8 rows per warp
    assert_eq!(check(&spec, &bad).unwrap_err().kind, RejectKind::Shape);
    let bad = config(128, 4, 40, 2, 0);
    assert_eq!(check(&spec, &bad).unwrap_err().kind, RejectKind::Shape);
    let ok = check(&spec, &config(128, 4, 64, 2, 0)).unwrap();
    assert_eq!(ok.threads, 128);
    assert_eq!(ok.block_m, 128);
}

#[test]
fn warp_skipping_is_offered_only_where_blocks_are_masked() {
    let skips = |mask| {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, mask);
        candidates(&spec)
            .iter()
            .filter(|c| c.switch(WARP_SKIP, 0) == 1)
            .count()
    };
    assert_eq!(skips(MaskKind::None), 0);
    assert_eq!(skips(MaskKind::Causal), 12);
    assert_eq!(skips(MaskKind::Local), 12);
    // The measured d128 window pick skips, and the rendered kernel is told so.
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Local);
    let c = default_config(&spec);
    assert_eq!(c.switch(WARP_SKIP, 0), 1);
    let fp = check(&spec, &c).unwrap();
    let values = render_values(&spec, &c, &fp);
    assert!(values.contains(&("warp_skip", json!(true))));
    // d64 loses with it: its default does not skip.
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
    assert_eq!(default_config(&spec).switch(WARP_SKIP, 0), 0);
}

#[test]
fn lazy_rescaling_is_a_twin_of_the_plain_tiles() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
    let all = candidates(&spec);
    let lazy: Vec<_> = all
        .iter()
        .filter(|c| c.switch(LAZY_RESCALE, 0) == 1)
        .collect();
    assert_eq!(lazy.len(), 46);
    // Every lazy config is a plain one with the switch on: no lazy-only shape.
    for c in &lazy {
        let mut plain = (*c).clone();
        plain.switches.remove(LAZY_RESCALE);
        assert!(all.contains(&plain), "{c:?} has no plain twin");
    }
    // Padded lazy twins only where rows could be swizzled instead.
    let d96 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 96, MaskKind::None);
    assert!(candidates(&d96)
        .iter()
        .all(|c| c.switch(LAZY_RESCALE, 0) == 0 || c.switch(PADDED, 0) == 0));
    // d128's default rescales lazily, and the rendered kernel is told so; plain
    // configs render `lazy = false`, so their source (and machine code) is unchanged.
    for mask in [MaskKind::None, MaskKind::Causal] {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, mask);
        let c = default_config(&spec);
        assert_eq!(c.switch(LAZY_RESCALE, 0), 1, "{mask:?}");
        let values = render_values(&spec, &c, &check(&spec, &c).unwrap());
        assert!(values.contains(&("lazy", json!(true))));
    }
    let plain = config(128, 4, 64, 1, 0);
    let values = render_values(&spec, &plain, &check(&spec, &plain).unwrap());
    assert!(values.contains(&("lazy", json!(false))));
}

#[test]
fn exp2_emulation_is_rendered_but_not_enumerated() {
    let mut capped = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
    capped.features.softcap = true;
    // It measured no faster than its twins: the tuner does not spend time on it.
    assert!(candidates(&capped)
        .iter()
        .all(|c| c.switch(EXP2_EMU, 0) == 0));
    // Offered to a probe: the d64 soft-capped plain tile's twins check and render k.
    let base = config(128, 4, 64, 2, 1);
    for k in [2, 4, 8] {
        let mut c = base.clone();
        c.switches.insert(EXP2_EMU.to_string(), k);
        let fp = check(&capped, &c).unwrap();
        let values = render_values(&capped, &c, &fp);
        assert!(values.contains(&("exp2_emu_every", json!(k))), "{values:?}");
    }
    // Every other config renders 0.
    let values = render_values(&capped, &base, &check(&capped, &base).unwrap());
    assert!(values.contains(&("exp2_emu_every", json!(0))));
    // A share past the block's fragments would emulate nothing.
    let mut c = config(128, 4, 32, 1, 0);
    c.switches.insert(EXP2_EMU.to_string(), 8);
    assert_eq!(check(&capped, &c).unwrap_err().kind, RejectKind::Shape);
}

#[test]
fn staggered_twins_are_ringed_soft_capped_tiles_of_two_m_tiles_a_warp() {
    let mut spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
    // Plain specs lost with it: not offered.
    assert!(candidates(&spec).iter().all(|c| c.switch(STAGGER, 0) == 0));
    spec.features.softcap = true;
    let all = candidates(&spec);
    let twins: Vec<_> = all
        .iter()
        .filter(|c| c.switch(STAGGER, 0) == 1 && c.switch(CAP_OFFSET, 0) == 0)
        .collect();
    assert!(!twins.is_empty());
    for c in &twins {
        assert!(c.stages >= 2 && c.block_m / c.warps == 32, "{c:?}");
        let mut base = (*c).clone();
        base.switches.remove(STAGGER);
        assert!(
            base.switches
                .keys()
                .all(|k| k == Q_IN_REGS || k == LAZY_RESCALE),
            "{c:?}"
        );
        assert!(all.contains(&base), "{c:?} has no twin without the switch");
        // The same registers: the m-tiles take turns, nothing more is held.
        assert_eq!(payload_registers(&spec, c), payload_registers(&spec, &base));
    }
    // d64's soft-capped winner (128x64 over 4 warps, two stages) has one.
    let mut winner = config(128, 4, 64, 2, 1);
    winner.switches.insert(STAGGER.to_string(), 1);
    assert!(all.contains(&winner));
    // The kernel is told; other configs render false.
    let values = render_values(&spec, &winner, &check(&spec, &winner).unwrap());
    assert!(values.contains(&("stagger", json!(true))));
    let plain = config(128, 4, 64, 2, 1);
    let values = render_values(&spec, &plain, &check(&spec, &plain).unwrap());
    assert!(values.contains(&("stagger", json!(false))));
    // check() refuses a one-stage tile (V cannot be waited for with K) and warp skipping.
    let mut c = config(128, 4, 64, 1, 0);
    c.switches.insert(STAGGER.to_string(), 1);
    assert_eq!(check(&spec, &c).unwrap_err().kind, RejectKind::Shape);
    let mut c = config(128, 4, 64, 2, SKIPPING);
    c.switches.insert(STAGGER.to_string(), 1);
    assert_eq!(check(&spec, &c).unwrap_err().kind, RejectKind::Shape);
}

#[test]
fn cap_offset_twins_are_bf16_soft_capped_plain_lazy_and_staggered_tiles() {
    let mut spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
    assert!(candidates(&spec)
        .iter()
        .all(|c| c.switch(CAP_OFFSET, 0) == 0));
    spec.features.softcap = true;
    let all = candidates(&spec);
    let fixed: Vec<_> = all
        .iter()
        .filter(|c| c.switch(CAP_OFFSET, 0) == 1)
        .collect();
    let bases = all
        .iter()
        .filter(|c| {
            c.switch(CAP_OFFSET, 0) == 0
                && c.switches
                    .keys()
                    .all(|k| k == Q_IN_REGS || k == LAZY_RESCALE || k == STAGGER)
        })
        .count();
    // One twin per such tile (every one passes check), none of other switches.
    assert_eq!(fixed.len(), bases);
    assert!(fixed.iter().any(|c| c.switch(STAGGER, 0) == 1));
    assert!(fixed.iter().any(|c| c.switch(LAZY_RESCALE, 0) == 1));
    for c in &fixed {
        let mut base = (*c).clone();
        base.switches.remove(CAP_OFFSET);
        assert!(all.contains(&base), "{c:?}");
        let values = render_values(&spec, c, &check(&spec, c).unwrap());
        assert!(values.contains(&("cap_offset", json!(true))));
    }
    let mut winner = config(128, 4, 64, 2, 1);
    winner.switches.insert(STAGGER.to_string(), 1);
    let values = render_values(&spec, &winner, &check(&spec, &winner).unwrap());
    assert!(values.contains(&("cap_offset", json!(false))));
    // fp16 (P up to 2^48), caps absent, and the plain loop are refused with the reason.
    winner.switches.insert(CAP_OFFSET.to_string(), 1);
    assert!(check(&spec, &winner).is_ok());
    let mut fp16 = spec;
    fp16.dtype = Dtype::Fp16;
    assert!(candidates(&fp16)
        .iter()
        .all(|c| c.switch(CAP_OFFSET, 0) == 0));
    let err = check(&fp16, &winner).unwrap_err();
    assert!(err.reason.contains("fp16"), "{}", err.reason);
    let mut plain_spec = spec;
    plain_spec.features.softcap = false;
    assert!(check(&plain_spec, &winner).is_err());
    winner.switches.insert(EXP2_EMU.to_string(), 8);
    let err = check(&spec, &winner).unwrap_err();
    assert!(err.reason.contains("exp2emu"), "{}", err.reason);
}

#[test]
fn bf16_soft_capped_defaults_fix_the_offset() {
    for arch in [Arch::Sm80, Arch::Sm86, Arch::Sm89, Arch::Sm90, Arch::Sm120] {
        for head_dim in [64, 128, 256] {
            for mask in [MaskKind::None, MaskKind::Causal, MaskKind::Local] {
                let mut spec = KernelSpec::new(arch, Dtype::Bf16, head_dim, mask);
                spec.features.softcap = true;
                let c = default_config(&spec);
                let measured = arch == Arch::Sm90
                    && mask != MaskKind::Local
                    && (head_dim == 64 || head_dim == 128);
                let fixed = measured || c.block_m / c.warps == 32;
                assert_eq!(c.switch(CAP_OFFSET, 0) == 1, fixed, "{spec:?}: {c:?}");
                assert!(check(&spec, &c).is_ok());
                spec.dtype = Dtype::Fp16;
                assert_eq!(default_config(&spec).switch(CAP_OFFSET, 0), 0);
                spec.dtype = Dtype::Bf16;
                spec.features.softcap = false;
                assert_eq!(default_config(&spec).switch(CAP_OFFSET, 0), 0);
            }
        }
    }
    // Off the H200: d64's 128x64x4 tile takes it, d128's 128x64 over 8 warps does not.
    let mut a100 = KernelSpec::new(Arch::Sm80, Dtype::Bf16, 64, MaskKind::Causal);
    a100.features.softcap = true;
    assert_eq!(default_config(&a100).switch(CAP_OFFSET, 0), 1);
    a100.head_dim = 128;
    a100.head_dim_v = 128;
    assert_eq!(default_config(&a100).switch(CAP_OFFSET, 0), 0);
    // The H200's measured picks: d64 staggered, d128 unpadded.
    let mut spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
    spec.features.softcap = true;
    assert_eq!(default_config(&spec).switch(STAGGER, 0), 1);
    spec.head_dim = 128;
    spec.head_dim_v = 128;
    assert_eq!(default_config(&spec).switch(PADDED, 0), 0);
}

#[test]
fn cap_offset_bounds_keep_p_normal_and_finite() {
    // The constants the kernels use, read from the templates: the portable softmax and
    // the Hopper fragments keep their own copies, which must agree.
    let templates = crate::render::templates::TemplateSet::embedded();
    let constant = |header: &str, name: &str| -> f64 {
        let (_, text) = templates
            .headers()
            .find(|(h, _)| *h == header)
            .unwrap_or_else(|| panic!("{header} not embedded"));
        let line = text
            .lines()
            .find(|l| l.contains(&format!("constexpr float {name} =")))
            .unwrap_or_else(|| panic!("{name} not in {header}"));
        let value = line.split('=').nth(1).unwrap();
        value
            .trim()
            .trim_end_matches(';')
            .trim_end_matches('f')
            .parse()
            .unwrap()
    };
    let portable = "fa4/portable/softmax.cuh";
    let hopper = "fa4/hopper/fragments.cuh";
    let headroom = constant(portable, "kCapOffsetHeadroomLog2");
    let max_cap_log2 = constant(portable, "kCapOffsetMaxCapLog2");
    assert_eq!(constant(hopper, "kCapOffsetHeadroomLog2"), headroom);
    assert_eq!(constant(hopper, "kCapOffsetMaxCapLog2"), max_cap_log2);
    // The smallest p (a score at -cap, 2C below the bound) is a normal f32 and bf16
    // with 24 binades below it, so that the row's mantissa survives.
    assert!(headroom - 2.0 * max_cap_log2 >= -126.0 + 24.0);
    // The largest, times 2^20 keys and values up to 2^59, stays finite in f32.
    assert!(headroom + 20.0 + 59.0 < 128.0);
    // Gemma-2's cap (50) takes the fixed offset; fp16's P (at most 65504) could not.
    assert!(50.0 * std::f64::consts::LOG2_E <= max_cap_log2);
    assert!(2f64.powf(headroom) > 65504.0);
}

#[test]
fn occupancy_twins_cap_registers_where_the_cap_binds() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
    let all = candidates(&spec);
    let twins: Vec<_> = all.iter().filter(|c| c.switch(MIN_BLOCKS, 1) > 1).collect();
    assert!(!twins.is_empty());
    for c in &twins {
        // A twin of a plain tile (Q in registers or not, nothing else switched).
        let mut plain = (*c).clone();
        plain.switches.remove(MIN_BLOCKS);
        assert!(plain.switches.keys().all(|k| k == Q_IN_REGS), "{c:?}");
        assert!(all.contains(&plain), "{c:?} has no plain twin");
        // Its cap binds (below ptxas's own 255) and still holds the accumulators.
        let blocks = c.switch(MIN_BLOCKS, 1);
        let cap = register_cap(c.warps * 32, blocks);
        assert!(
            cap < 255 && cap >= payload_registers(&spec, c) + 32,
            "{c:?}"
        );
        assert_eq!(
            check(&spec, c).unwrap().est_registers,
            cap.min(payload_registers(&spec, c) + 48)
        );
    }
    // 8 warps: two blocks at 128 registers; 4 warps: three at 168 or four at 128.
    assert_eq!(register_cap(256, 2), 128);
    assert_eq!(register_cap(128, 3), 168);
    assert_eq!(register_cap(128, 4), 128);
    assert_eq!(register_cap(128, 1), 255);
    assert!(twins
        .iter()
        .any(|c| c.warps == 8 && c.switch(MIN_BLOCKS, 1) == 2));
    assert!(twins
        .iter()
        .any(|c| c.warps == 4 && c.switch(MIN_BLOCKS, 1) == 4));
    // Two 4-warp blocks always fit under 255 registers: no twin would change anything.
    assert!(!twins
        .iter()
        .any(|c| c.warps == 4 && c.switch(MIN_BLOCKS, 1) == 2));
    // d256's O alone (128 registers at 16 rows per warp) leaves no room under a cap.
    let d256 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::Causal);
    assert!(candidates(&d256)
        .iter()
        .all(|c| c.switch(MIN_BLOCKS, 1) == 1));

    // The kernel is told, and plain configs render 1 (ptxas's own choice).
    let twin = twins[0];
    let values = render_values(&spec, twin, &check(&spec, twin).unwrap());
    assert!(values.contains(&("min_blocks", json!(twin.switch(MIN_BLOCKS, 1)))));
    let plain = config(128, 4, 64, 1, 1);
    let values = render_values(&spec, &plain, &check(&spec, &plain).unwrap());
    assert!(values.contains(&("min_blocks", json!(1))));

    // check() refuses counts the SM cannot hold: shared memory, the accumulators, range.
    // (d128 128x64, three stages: 128 KiB, one block fits an sm90 SM, two do not.)
    let mut c = config(128, 8, 64, 3, 0);
    let d128 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
    assert!(check(&d128, &c).is_ok());
    c.switches.insert(MIN_BLOCKS.to_string(), 2);
    let r = check(&d128, &c).unwrap_err();
    assert_eq!(r.kind, RejectKind::SharedMemory, "{r:?}");
    assert!(r.reason.contains("minblocks 2"), "{}", r.reason);
    let mut c = config(128, 4, 128, 1, 1);
    c.switches.insert(MIN_BLOCKS.to_string(), 4);
    assert_eq!(check(&spec, &c).unwrap_err().kind, RejectKind::Registers);
    let mut c = config(64, 4, 64, 1, 0);
    c.switches.insert(MIN_BLOCKS.to_string(), 5);
    assert_eq!(check(&spec, &c).unwrap_err().kind, RejectKind::Shape);
}

#[test]
fn register_estimate_prunes_the_hopeless() {
    // 32 rows per warp at head dim 256: O alone is 256 f32 registers per thread.
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Fp16, 256, MaskKind::None);
    let r = check(&spec, &config(128, 4, 32, 1, 0)).unwrap_err();
    assert_eq!(r.kind, RejectKind::Registers);
    assert!(r.reason.contains("registers"));
}
