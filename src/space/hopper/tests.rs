use super::super::TemplateSpace;
use super::*;
use crate::space::Template;
use fa4_spec::Features;

#[test]
fn smem_and_shapes_follow_the_traits() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    // Q 128x128, two stages of K and V 128x128: (16384 + 2 * 32768) * 2 + 16.
    let c = config(2, 128, 2);
    assert_eq!(smem_bytes(&spec, &c), 163_856);
    let fp = check(&spec, &c).unwrap();
    assert_eq!((fp.threads, fp.block_m), (256, 128));
    // Not on other archs; not 32 rows per warp.
    let sm80 = KernelSpec {
        arch: Arch::Sm80,
        ..spec
    };
    assert_eq!(check(&sm80, &c).unwrap_err().kind, RejectKind::Shape);
    let bad = TileConfig {
        block_m: 128,
        warps: 4,
        ..c.clone()
    };
    assert_eq!(check(&spec, &bad).unwrap_err().kind, RejectKind::Shape);
    // Three warpgroups at d128 with 176 keys: more registers than 384 threads get.
    assert_eq!(
        check(&spec, &config(3, 176, 1)).unwrap_err().kind,
        RejectKind::Registers
    );
    // At d256 they do not even fit in shared memory.
    let d256 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::None);
    assert_eq!(
        check(&d256, &config(3, 176, 1)).unwrap_err().kind,
        RejectKind::SharedMemory
    );
    assert!(check(&d256, &default_config(&d256)).is_ok());
}

/// What `render_values` hands the template under `key` for a kept config.
fn value(spec: &KernelSpec, c: &TileConfig, key: &str) -> Value {
    let fp = check(spec, c).unwrap();
    let values = render_values(spec, c, &fp);
    values.iter().find(|(k, _)| *k == key).unwrap().1.clone()
}

#[test]
fn warp_specialized_configs_add_a_producer_and_move_its_registers() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    let c = ws_config(2, 128, 1, 1, 0);
    let fp = check(&spec, &c).unwrap();
    // Two consumers of 64 rows and the producer: 384 threads; TMA boxes of 128 keys.
    assert_eq!((fp.threads, fp.block_m, fp.tma_rows), (384, 128, 128));
    // Q, two stages of K and V, and mbarriers instead of block scalars: 4 per stage
    // for the ring, 2 per consumer for its Q slot.
    assert_eq!(
        fp.smem_bytes,
        (128 * 128 + 2 * 2 * 128 * 128) * 2 + 2 * 32 + 2 * 16
    );
    let split = register_split(&spec, &c);
    assert_eq!(
        split,
        RegisterSplit {
            blocks_per_sm: 1,
            launch: 168,
            producer: 40,
            consumer: 232
        }
    );
    assert!(split.producer * 128 + split.consumer * 256 <= split.launch * 384);
    // Paged K/V: whole tiles by TMA through the pages where they fit a box, the rest by
    // the producer's cp.async, for which it keeps more registers.
    let mut paged = spec;
    paged.features.paged_kv = true;
    assert_eq!(check(&paged, &c).unwrap().tma_rows, c.block_n);
    assert_eq!(value(&paged, &c, "tma"), json!(false));
    assert_eq!(value(&paged, &c, "tma_args"), json!(true));
    assert_eq!(register_split(&paged, &c).producer, 56);
    // Three consumers: 512 threads at 128 registers, 32 + 3 x 160 after the move.
    let d64 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
    assert_eq!(
        register_split(&d64, &ws_config(3, 128, 1, 1, 0)),
        RegisterSplit {
            blocks_per_sm: 1,
            launch: 128,
            producer: 32,
            consumer: 160
        }
    );
    // One consumer: two blocks per SM where their shared memory fits, else one block
    // whose 256 threads keep 248 registers each (no move).
    assert_eq!(
        register_split(&spec, &ws_config(1, 64, 0, 1, 0)).blocks_per_sm,
        2
    );
    let big = register_split(&spec, &ws_config(1, 128, 0, 1, 0));
    assert_eq!((big.blocks_per_sm, big.producer, big.consumer), (1, 0, 0));
    // Pingpong takes two consumers; its switches belong to the warp-specialised schedule.
    let kind = |c: &TileConfig| check(&spec, c).unwrap_err().kind;
    assert_eq!(kind(&ws_config(1, 64, 1, 1, 0)), RejectKind::Shape);
    let mut stage1 = config(2, 128, 2);
    stage1.switches.insert(PINGPONG.to_string(), 1);
    assert_eq!(kind(&stage1), RejectKind::Shape);
    // A persistent grid, one block per SM here, any mask; O gets a slot per consumer
    // where shared memory allows, and then each consumer a second Q slot where that
    // fits too (d128 over 128 keys: 2 x 32 KiB of Q, 32 of O, 128 of K/V), not at d256.
    let mut persistent = ws_config(2, 128, 1, 1, 0);
    persistent.switches.insert(PERSISTENT.to_string(), 1);
    let fp = check(&spec, &persistent).unwrap();
    assert_eq!(fp.persistent_per_sm, 1);
    assert_eq!(o_slots(&spec, &persistent), 2);
    assert_eq!(q_buffers(&spec, &persistent), 2);
    assert_eq!(
        fp.smem_bytes,
        (2 * 2 * 64 * 128 + 2 * 64 * 128 + 2 * 128 * 256) * 2 + 64 + 2 * 32
    );
    assert!(fp.smem_bytes <= Arch::Sm90.max_smem_per_block());
    // Over 176 keys a second Q would not fit beside O's slot.
    let mut long = ws_config(2, 176, 1, 1, 0);
    long.switches.insert(PERSISTENT.to_string(), 1);
    assert_eq!((o_slots(&spec, &long), q_buffers(&spec, &long)), (0, 1));
    assert_eq!(check(&spec, &c).unwrap().persistent_per_sm, 0);
    assert_eq!(o_slots(&spec, &c), 0);
    let d256 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::Causal);
    let mut wide = ws_config(2, 80, 1, 1, 0);
    wide.switches.insert(PERSISTENT.to_string(), 1);
    assert!(check(&d256, &wide).is_ok());
    assert_eq!(o_slots(&d256, &wide), 0);
    assert_eq!(q_buffers(&d256, &wide), 1);
    // Over 64 keys d256 has room for one O slot, which its two consumers take in turn
    // (and its mbarrier): 64 KiB of Q, 32 of O, 128 of K/V.
    let mut narrow = ws_config(2, 64, 1, 1, 0);
    narrow.switches.insert(PERSISTENT.to_string(), 1);
    assert_eq!((o_slots(&d256, &narrow), q_buffers(&d256, &narrow)), (1, 1));
    assert_eq!(
        check(&d256, &narrow).unwrap().smem_bytes,
        (2 * 64 * 256 + 64 * 256 + 2 * 64 * 512) * 2 + 64 + 32 + 8
    );
    // The consumers' registers bound the tiles: 176 keys at d128 fit 232, not 160.
    assert!(check(&spec, &ws_config(2, 176, 1, 1, 0)).is_ok());
    assert_eq!(kind(&ws_config(3, 176, 1, 1, 0)), RejectKind::Registers);
    // Lazy rescaling is a switch of the warp-specialised schedule, rendered as such.
    let mut lazy = ws_config(2, 128, 1, 1, 0);
    lazy.switches.insert(LAZY_RESCALE.to_string(), 1);
    let fp = check(&spec, &lazy).unwrap();
    let values = render_values(&spec, &lazy, &fp);
    let value = |k: &str| values.iter().find(|(n, _)| *n == k).unwrap().1.clone();
    assert_eq!(value("lazy_rescale"), json!(true));
    let mut stage1_lazy = config(2, 128, 2);
    stage1_lazy.switches.insert(LAZY_RESCALE.to_string(), 1);
    assert_eq!(kind(&stage1_lazy), RejectKind::Shape);
    // Exp2 emulation likewise: offered by check() and rendered, never enumerated (it
    // ran 0.86 to 1.01x its twin on the H200).
    let mut emulated = ws_config(2, 128, 1, 1, 0);
    emulated.switches.insert(EXP2_EMU.to_string(), 4);
    let fp = check(&spec, &emulated).unwrap();
    let values = render_values(&spec, &emulated, &fp);
    let rendered = values.iter().find(|(k, _)| *k == "exp2_emu_every").unwrap();
    assert_eq!(rendered.1, json!(4));
    assert!(candidates(&spec).iter().all(|c| c.switch(EXP2_EMU, 0) == 0));
    let mut stage1_emulated = config(2, 128, 2);
    stage1_emulated.switches.insert(EXP2_EMU.to_string(), 2);
    assert_eq!(kind(&stage1_emulated), RejectKind::Shape);
    // The producer's ring takes a third stage where shared memory holds it (d128 over
    // 80 keys: 32 + 3 x 40 KiB), the stage-1 schedule does not; d256 over 80 keys
    // would need 264 KiB.
    let mut three = ws_config(2, 80, 1, 1, 0);
    three.stages = 3;
    assert!(check(&spec, &three).is_ok());
    assert_eq!(kind(&config(2, 80, 3)), RejectKind::Shape);
    assert_eq!(
        check(&d256, &three).unwrap_err().kind,
        RejectKind::SharedMemory
    );
}

#[test]
fn the_three_consumer_tile_takes_a_third_stage_where_it_fits() {
    // Whether each enumerated three-stage, three-consumer candidate passes the checks.
    let fits = |hd| {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, MaskKind::None);
        candidates(&spec)
            .into_iter()
            .filter(|c| warp_specialized(c) && c.stages == 3 && c.block_m == 192)
            .map(|c| check(&spec, &c).is_ok())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        fits(64),
        vec![true, true, true, true],
        "plain and lazy, at d64, and their clusters"
    );
    assert_eq!(
        fits(128),
        vec![false, false, false, false],
        "d128's K/V stages do not fit three, with a cluster or without"
    );
}

#[test]
fn clusters_pair_unmasked_pingpong_tiles_with_one_block_per_tile() {
    let clustered = |spec: &KernelSpec| {
        candidates(spec)
            .into_iter()
            .filter(|c| c.switch(CLUSTER, 0) == 2)
            .collect::<Vec<_>>()
    };
    let unmasked = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
    let pairs = clustered(&unmasked);
    assert!(!pairs.is_empty());
    for c in &pairs {
        assert!(
            warp_specialized(c) && !persistent(c) && c.switch(PINGPONG, 0) == 1,
            "{c:?}"
        );
        assert!(
            c.switch(OVERLAP, 0) == 1 && c.switch(PACK_GQA, 0) == 0,
            "{c:?}"
        );
    }
    // FA3's d128 tile (two consumers over 176 keys) has its pair, which launches in
    // pairs of blocks and renders the cluster's size.
    let fa3 = pairs
        .iter()
        .find(|c| c.block_n == 176 && c.switch(LAZY_RESCALE, 0) == 0)
        .expect("the 128x176 tile's cluster twin");
    let fp = check(&unmasked, fa3).unwrap();
    assert_eq!(fp.cluster_m, 2);
    let values = render_values(&unmasked, fa3, &fp);
    let value = |key| values.iter().find(|(k, _)| *k == key).unwrap().1.clone();
    assert_eq!(value("cluster_m"), json!(2));
    let mut single = fa3.clone();
    single.switches.remove(CLUSTER);
    assert_eq!(check(&unmasked, &single).unwrap().cluster_m, 0);
    let single_values = render_values(&unmasked, &single, &check(&unmasked, &single).unwrap());
    assert!(single_values.contains(&("cluster_m", json!(1))));
    // Masked tiles walk different key tiles per m-block, persistent ones other
    // tiles altogether, pages go by cp.async: none of them pairs.
    for mask in [MaskKind::Causal, MaskKind::Local] {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, mask);
        assert!(clustered(&spec).is_empty(), "{mask:?}");
        assert_eq!(check(&spec, fa3).unwrap_err().kind, RejectKind::Shape);
    }
    let mut persistent_pair = fa3.clone();
    persistent_pair.switches.insert(PERSISTENT.to_string(), 1);
    assert_eq!(
        check(&unmasked, &persistent_pair).unwrap_err().kind,
        RejectKind::Shape
    );
    let mut paged = unmasked;
    paged.features.paged_kv = true;
    assert!(clustered(&paged).is_empty());
    assert_eq!(check(&paged, fa3).unwrap_err().kind, RejectKind::Shape);
    let mut four = fa3.clone();
    four.switches.insert(CLUSTER.to_string(), 4);
    assert_eq!(check(&unmasked, &four).unwrap_err().kind, RejectKind::Shape);
}

#[test]
fn a_persistent_single_consumer_runs_two_blocks_per_sm_or_not_at_all() {
    // (block_n, lazy) of each enumerated persistent single-consumer candidate that
    // passes the checks, and how many of its blocks the launch puts on an SM.
    let fits = |hd| {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, MaskKind::Causal);
        candidates(&spec)
            .into_iter()
            .filter(|c| persistent(c) && consumers(c) == 1)
            .filter_map(|c| {
                let fp = check(&spec, &c).ok()?;
                Some((c.block_n, c.switch(LAZY_RESCALE, 0), fp.persistent_per_sm))
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        fits(64),
        vec![(64, 0, 2), (128, 0, 2), (64, 1, 2), (128, 1, 2)]
    );
    assert_eq!(
        fits(128),
        vec![(64, 0, 2), (64, 1, 2)],
        "two blocks over 128 keys need 354 KiB"
    );
    assert_eq!(fits(256), vec![], "no d256 tile fits twice");
}

#[test]
fn the_hidden_first_block_is_a_twin_of_masked_mufu_turn_tiles_past_d128() {
    let hidden = |hd, mask| {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, mask);
        let all = candidates(&spec);
        let twins: Vec<&TileConfig> = all
            .iter()
            .filter(|c| c.switch(HIDDEN_FIRST, 0) == 1)
            .collect();
        for c in &twins {
            // Each is a twin of a tile with turns at the MUFU that the space also offers.
            let mut plain = (*c).clone();
            plain.switches.remove(HIDDEN_FIRST);
            assert!(
                all.contains(&plain) && plain.switch(MUFU_TURNS, 0) == 1,
                "{c:?}"
            );
            assert!(!half_first_block(&spec, c));
        }
        twins.len()
    };
    for mask in [MaskKind::Causal, MaskKind::Local] {
        assert!(hidden(256, mask) > 0 && hidden(192, mask) > 0, "{mask:?}");
        // Up to d128 the half path covers a hidden block.
        assert_eq!((hidden(64, mask), hidden(128, mask)), (0, 0), "{mask:?}");
    }
    assert_eq!(
        hidden(256, MaskKind::None),
        0,
        "nothing is hidden without a mask"
    );
    // check() holds the switch to where it is defined.
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::Causal);
    let mut c = ws_config(2, 64, 1, 1, 0);
    c.switches.insert(HIDDEN_FIRST.to_string(), 1);
    assert_eq!(
        check(&spec, &c).unwrap_err().kind,
        RejectKind::Shape,
        "GEMM turns"
    );
    c.switches.insert(MUFU_TURNS.to_string(), 1);
    assert!(check(&spec, &c).is_ok());
    let d128 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    assert_eq!(
        check(&d128, &c).unwrap_err().kind,
        RejectKind::Shape,
        "the half path's"
    );
}

#[test]
fn persistent_pairs_without_turns_are_offered_to_masked_specs_alone() {
    // Two persistent consumers without pingpong (and their lazy twins) over 64 and
    // 128 keys where shared memory holds them; never unmasked.
    let pairs = |hd, mask| {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, mask);
        let mut found: Vec<(u32, u32)> = candidates(&spec)
            .into_iter()
            .filter(|c| persistent(c) && consumers(c) == 2 && c.switch(PINGPONG, 1) == 0)
            .filter(|c| check(&spec, c).is_ok())
            .map(|c| (c.block_n, c.switch(LAZY_RESCALE, 0)))
            .collect();
        found.sort();
        found
    };
    let both = vec![(64, 0), (64, 1), (128, 0), (128, 1)];
    for mask in [MaskKind::Causal, MaskKind::Local] {
        assert_eq!(pairs(64, mask), both, "d64 {mask:?}");
        assert_eq!(pairs(128, mask), both, "d128 {mask:?}");
        // 128 keys of K and V in two stages do not fit beside d256's Q and O.
        assert_eq!(pairs(256, mask), vec![(64, 0), (64, 1)], "d256 {mask:?}");
    }
    for hd in [64, 128, 256] {
        assert!(pairs(hd, MaskKind::None).is_empty(), "d{hd} unmasked");
    }
}

#[test]
fn the_256_key_tile_without_overlap_is_d64s_alone() {
    // cuDNN's loop over 256 keys, enumerated once per spec (turns at the MUFU on every
    // mask), kept where S of 256 columns and its K/V stages fit: d64 only.
    let wide = |hd, mask| {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, mask);
        let found: Vec<_> = candidates(&spec)
            .into_iter()
            .filter(|c| c.block_n == 256)
            .collect();
        assert_eq!(found.len(), 1, "d{hd} {mask:?}: {found:?}");
        let c = &found[0];
        assert!(persistent(c) && c.switch(OVERLAP, 1) == 0 && c.switch(MUFU_TURNS, 0) == 1);
        check(&spec, c).map(|fp| fp.est_registers)
    };
    for mask in [MaskKind::None, MaskKind::Causal, MaskKind::Local] {
        // S 128 + O 32 + P packed as S dies (32) + 24: within the consumers' 224.
        assert_eq!(wide(64, mask), Ok(216));
        assert_eq!(wide(128, mask).unwrap_err().kind, RejectKind::SharedMemory);
        assert_eq!(wide(256, mask).unwrap_err().kind, RejectKind::SharedMemory);
    }
    // With overlap, P(j - 1) lives beside S(j): the same tile would need 248.
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
    let mut overlapped = ws_config(2, 256, 1, 1, 0);
    overlapped.switches.insert(PERSISTENT.to_string(), 1);
    assert_eq!(
        check(&spec, &overlapped).unwrap_err().kind,
        RejectKind::Registers
    );
}

#[test]
fn mufu_turns_take_pingpong_tiles_of_masked_specs() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
    let with = |mut c: TileConfig, switch: &str| {
        c.switches.insert(switch.to_string(), 1);
        c
    };
    let mut persistent_tile = ws_config(2, 128, 1, 1, 0);
    persistent_tile.switches.insert(PERSISTENT.to_string(), 1);
    // Pingpong's, and one word of shared memory more.
    let mufu = with(persistent_tile.clone(), MUFU_TURNS);
    assert_eq!(value(&spec, &mufu, "mufu_turns"), json!(true));
    assert_eq!(value(&spec, &persistent_tile, "mufu_turns"), json!(false));
    assert_eq!(
        smem_bytes(&spec, &mufu),
        smem_bytes(&spec, &persistent_tile) + 8
    );
    let free_running = with(ws_config(2, 128, 0, 1, 0), MUFU_TURNS);
    assert_eq!(
        check(&spec, &free_running).unwrap_err().kind,
        RejectKind::Shape
    );
    let stage1 = with(config(2, 128, 2), MUFU_TURNS);
    assert_eq!(check(&spec, &stage1).unwrap_err().kind, RejectKind::Shape);
    // Enumerated as a twin of every pingpong tile of a masked spec, of none unmasked
    // (the 256-key tile without overlap comes with its turns alone, on every mask:
    // the_256_key_tile_without_overlap_is_d64s_alone).
    let turns = |spec: &KernelSpec| {
        let all = candidates(spec);
        let pingpong = all
            .iter()
            .filter(|c| c.switch(PINGPONG, 0) == 1 && c.block_n != 256);
        let (with, without): (Vec<_>, Vec<_>) =
            pingpong.partition(|c| c.switch(MUFU_TURNS, 0) == 1);
        for c in &with {
            let mut twin = (*c).clone();
            twin.switches.remove(MUFU_TURNS);
            assert!(without.contains(&&twin), "{c:?} has no twin");
        }
        (with.len(), without.len())
    };
    let (with_turns, pingpong) = turns(&spec);
    assert!(pingpong > 0);
    assert_eq!(with_turns, pingpong);
    let local = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Local);
    assert_eq!(turns(&local).0, turns(&local).1);
    let unmasked = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
    assert_eq!(turns(&unmasked).0, 0);
}

#[test]
fn defaults_take_the_warp_specialized_schedule_where_it_led() {
    let ws = |hd, mask, paged| {
        let mut spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, mask);
        spec.features.paged_kv = paged;
        let c = default_config(&spec);
        assert!(check(&spec, &c).is_ok(), "{spec}: {c}");
        (warp_specialized(&c), c.block_m, c.block_n)
    };
    assert_eq!(ws(64, MaskKind::Causal, false), (true, 192, 128));
    assert_eq!(ws(128, MaskKind::None, false), (true, 128, 128));
    assert_eq!(ws(256, MaskKind::Causal, false), (true, 128, 80));
    assert_eq!(ws(128, MaskKind::Local, false), (true, 64, 64));
    let local = default_config(&KernelSpec::new(
        Arch::Sm90,
        Dtype::Bf16,
        128,
        MaskKind::Local,
    ));
    assert!(
        persistent(&local),
        "d128 windows: a persistent single consumer, two blocks per SM"
    );
    // Pages take three consumers over 64 keys at d64 and d128, the tuner's pick over
    // pages, and the packed tile at the other head dims (the tuner's winners over pages
    // there are that tile or its twins); windows over pages stay with stage 1.
    assert_eq!(ws(128, MaskKind::Causal, true), (true, 192, 64));
    assert_eq!(ws(64, MaskKind::None, true), (true, 192, 64));
    for (hd, mask) in [
        (96, MaskKind::Causal),
        (256, MaskKind::Causal),
        (256, MaskKind::None),
    ] {
        assert_eq!(ws(hd, mask, true), ws(hd, mask, false), "d{hd} {mask}");
    }
    let deepseek = |paged| {
        let mut spec = KernelSpec {
            head_dim_v: 128,
            ..KernelSpec::new(Arch::Sm90, Dtype::Fp16, 192, MaskKind::Causal)
        };
        spec.features.paged_kv = paged;
        default_config(&spec)
    };
    assert_eq!(deepseek(true), deepseek(false));
    assert!(warp_specialized(&deepseek(true)));
    assert!(!ws(128, MaskKind::Local, true).0);
    assert!(!ws(256, MaskKind::Local, true).0);
    assert!(
        !ws(192, MaskKind::Causal, true).0,
        "192/192 over pages: unverified"
    );
    assert!(!ws(64, MaskKind::Local, false).0);
}

#[test]
fn exp2_emulation_twins_the_fixed_offset_tiles_of_d64_alone() {
    for hd in [64, 128] {
        for softcap in [false, true] {
            let mut spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, hd, MaskKind::Causal);
            spec.features.softcap = softcap;
            let all = candidates(&spec);
            let emulated: Vec<_> = all.iter().filter(|c| c.switch(EXP2_EMU, 0) != 0).collect();
            let fixed = all.iter().filter(|c| c.switch(CAP_OFFSET, 0) == 1).count();
            if hd == 64 && softcap {
                // One k = 4 twin per fixed-offset tile, of which every one has a base.
                assert!(fixed > 0);
                assert_eq!(emulated.len() * 2, fixed);
                for c in &emulated {
                    assert_eq!((c.switch(EXP2_EMU, 0), c.switch(CAP_OFFSET, 0)), (4, 1));
                    let mut base = (*c).clone();
                    base.switches.remove(EXP2_EMU);
                    assert!(all.contains(&base), "{c:?} has no base");
                    assert!(check(&spec, c).is_ok(), "{c:?}");
                }
            } else {
                assert!(emulated.is_empty(), "{spec}");
            }
        }
    }
}

#[test]
fn soft_capped_bf16_defaults_fix_the_offset_on_warp_specialized_tiles_alone_and_emulate_at_d64() {
    for hd in [64, 128, 192, 256] {
        for mask in [MaskKind::None, MaskKind::Causal, MaskKind::Local] {
            for dtype in [Dtype::Bf16, Dtype::Fp16] {
                for (sinks, paged) in [(false, false), (true, false), (false, true)] {
                    let mut spec = KernelSpec::new(Arch::Sm90, dtype, hd, mask);
                    spec.features.sinks = sinks;
                    spec.features.paged_kv = paged;
                    let plain = default_config(&spec);
                    spec.features.softcap = true;
                    let capped = default_config(&spec);
                    assert!(check(&spec, &capped).is_ok(), "{spec}: {capped}");
                    let fixed = capped.switch(CAP_OFFSET, 0) == 1;
                    let expect = dtype == Dtype::Bf16 && warp_specialized(&capped);
                    assert_eq!(fixed, expect, "{spec}: {capped}");
                    // At d64 with exp2 emulation on every 4th fragment.
                    let emulated = if fixed && hd <= 64 { 4 } else { 0 };
                    assert_eq!(capped.switch(EXP2_EMU, 0), emulated, "{spec}: {capped}");
                    // The switches come on top of the tile the spec would take anyway.
                    let mut base = capped.clone();
                    base.switches.remove(CAP_OFFSET);
                    base.switches.remove(EXP2_EMU);
                    if check(&spec, &plain).is_ok() {
                        assert_eq!(base, plain, "{spec}");
                    }
                }
            }
        }
    }
}

/// DeepSeek's prefill head dims: Q and K at 192, V and O at 128. d128's tile by
/// default; the space prices Q and K at 192 columns and V and O at 128. Served by the
/// Hopper template since its H200 check (every default and bf16 candidate, 2,500 checks).
#[test]
fn d192v128_takes_d128s_tile() {
    let spec = |dv| KernelSpec {
        head_dim_v: dv,
        ..KernelSpec::new(Arch::Sm90, Dtype::Bf16, 192, MaskKind::Causal)
    };
    let (narrow, wide) = (spec(128), spec(192));
    assert!(super::super::Template::Hopper.supports(&narrow));
    assert_eq!(super::super::held_back_template(&narrow), None);
    assert_eq!(
        super::super::serving_template(&narrow),
        super::super::Template::Hopper
    );
    assert!(!super::super::Template::Portable.supports(&narrow));
    let default = default_config(&narrow);
    assert_eq!(
        (
            default.block_m,
            default.block_n,
            default.switch(PINGPONG, 0)
        ),
        (128, 128, 1)
    );
    // Every candidate both build with the same buffers (V at 128 leaves persistent
    // tiles room for a second Q buffer or O slots of their own): V's and O's 64
    // columns fewer per row cost less shared memory (each K/V stage's V, and O where
    // it has its own slot) and 32 fewer accumulator registers.
    let mut both = 0;
    for c in candidates(&narrow) {
        let buffers = |s: &KernelSpec| (o_slots(s, &c), q_buffers(s, &c));
        if buffers(&narrow) != buffers(&wide) {
            continue;
        }
        if let (Ok(a), Ok(b)) = (check(&narrow, &c), check(&wide, &c)) {
            // At least each stage's V: stages x block_n rows x 64 columns x 2 bytes.
            assert!(
                b.smem_bytes >= a.smem_bytes + c.stages * c.block_n * 64 * 2,
                "{c:?}: {} against {}",
                a.smem_bytes,
                b.smem_bytes
            );
            assert_eq!(a.est_registers + 32, b.est_registers, "{c:?}");
            both += 1;
        }
    }
    assert!(both > 15, "{both}");
    // 128-key tiles fit only with V at 128.
    assert!(check(&wide, &default).is_err());
}

#[test]
fn d96_runs_in_d128s_tiles_and_is_not_yet_served() {
    let d96 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 96, MaskKind::None);
    let d128 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
    assert!(super::super::Template::Hopper.supports(&d96));
    assert_eq!(
        super::super::serving_template(&d96),
        super::super::Template::Portable
    );
    // ... and `explain` names the template held back; nothing is held back elsewhere.
    assert_eq!(
        super::super::held_back_template(&d96),
        Some(super::super::Template::Hopper)
    );
    assert_eq!(super::super::held_back_template(&d128), None);
    let sm80 = KernelSpec::new(Arch::Sm80, Dtype::Bf16, 96, MaskKind::None);
    assert_eq!(super::super::held_back_template(&sm80), None);
    // Shared memory, registers and the split workspace are d128's (padded columns),
    // for every candidate both build.
    let mut both = 0;
    for c in candidates(&d96) {
        match (check(&d96, &c), check(&d128, &c)) {
            (Ok(a), Ok(b)) => {
                assert_eq!(
                    (a.smem_bytes, a.est_registers, a.split_head_dim_v),
                    (b.smem_bytes, b.est_registers, b.split_head_dim_v),
                    "{c:?}"
                );
                both += 1;
            }
            (a, b) => assert_eq!(a.is_ok(), b.is_ok(), "{c:?}"),
        }
    }
    assert!(both > 40, "{both}");
    let persistent = {
        let mut c = ws_config(2, 128, 1, 1, 0);
        c.switches.insert(PERSISTENT.to_string(), 1);
        c
    };
    assert_eq!(check(&d96, &persistent).unwrap().split_head_dim_v, 128);
    // The PV GEMM's N is the padded 128 (an MN-major operand ends on a swizzle atom),
    // QK's N the key block.
    let c = ws_config(2, 64, 1, 1, 0);
    let fp = check(&d96, &c).unwrap();
    let values = render_values(&d96, &c, &fp);
    let shapes = &values.iter().find(|(k, _)| *k == "wgmma").unwrap().1;
    let ns: Vec<_> = shapes
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["n"].clone())
        .collect();
    assert_eq!(ns, vec![json!(64), json!(128)]);
    assert_eq!(
        values.iter().find(|(k, _)| *k == "head_dim").unwrap().1,
        json!(96)
    );
    // Soft-capped bf16 specs take the fixed-offset tile as d128's do.
    let capped = KernelSpec {
        features: "softcap".parse().unwrap(),
        ..d96
    };
    assert_eq!(default_config(&capped).switch(CAP_OFFSET, 0), 1);
    // Head dims that are not whole k-steps are refused.
    let d72 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 72, MaskKind::None);
    assert_eq!(check(&d72, &c).unwrap_err().kind, RejectKind::Shape);
}

#[test]
fn the_entry_point_gets_each_wgmma_shape_once() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Fp16, 128, MaskKind::None);
    let c = config(2, 128, 1);
    let fp = check(&spec, &c).unwrap();
    let values = render_values(&spec, &c, &fp);
    let shapes = &values.iter().find(|(k, _)| *k == "wgmma").unwrap().1;
    assert_eq!(shapes.as_array().unwrap().len(), 1);
    assert_eq!(shapes[0]["regs"], json!(64));
    assert_eq!(shapes[0]["ab"], json!("f16"));
    assert!(shapes[0]["d"].as_str().unwrap().ends_with("%63"));
    let c = config(2, 64, 1);
    let fp = check(&spec, &c).unwrap();
    let values = render_values(&spec, &c, &fp);
    let shapes = &values.iter().find(|(k, _)| *k == "wgmma").unwrap().1;
    assert_eq!(shapes.as_array().unwrap().len(), 2);
}

#[test]
fn masked_warp_specialized_kernels_get_the_half_block_shape() {
    let ns = |spec: &KernelSpec, c: &TileConfig| -> Vec<u64> {
        let fp = check(spec, c).unwrap();
        let values = render_values(spec, c, &fp);
        let shapes = &values.iter().find(|(k, _)| *k == "wgmma").unwrap().1;
        shapes
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["n"].as_u64().unwrap())
            .collect()
    };
    let causal = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    assert_eq!(ns(&causal, &ws_config(2, 128, 1, 1, 0)), vec![64, 128]);
    // The stage-1 schedule has no half path.
    assert_eq!(ns(&causal, &config(2, 128, 1)), vec![128]);
    // d64: the half (64) is the PV's N already.
    let causal64 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
    assert_eq!(ns(&causal64, &ws_config(2, 128, 1, 1, 0)), vec![64, 128]);
    let unmasked = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
    assert_eq!(ns(&unmasked, &ws_config(2, 176, 1, 1, 0)), vec![128, 176]);
    let local = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Local);
    assert_eq!(ns(&local, &ws_config(2, 80, 1, 1, 0)), vec![40, 80, 128]);
    // Over head dim 128 the first block keeps one path.
    let causal256 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::Causal);
    assert_eq!(ns(&causal256, &ws_config(2, 80, 1, 1, 0)), vec![80, 256]);
}

#[test]
fn the_half_first_block_is_rendered_where_it_pays() {
    let half_first = |spec: &KernelSpec, c: &TileConfig| -> bool {
        let fp = check(spec, c).unwrap();
        let values = render_values(spec, c, &fp);
        values
            .iter()
            .find(|(k, _)| *k == "half_first")
            .unwrap()
            .1
            .as_bool()
            .unwrap()
    };
    let three = ws_config(3, 128, 1, 1, 0);
    let mut causal64 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal);
    assert!(half_first(&causal64, &three));
    assert!(
        !half_first(&causal64, &config(2, 128, 1)),
        "stage 1 has no half path"
    );
    causal64.features.softcap = true;
    assert!(
        !half_first(&causal64, &three),
        "softcap at d64 keeps one path"
    );
    let mut causal128 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    causal128.features.softcap = true;
    assert!(half_first(&causal128, &ws_config(2, 128, 1, 1, 0)));
    let unmasked = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::None);
    assert!(!half_first(&unmasked, &three));
}

#[test]
fn fp8_tiles_are_warp_specialized_by_tma_with_a_transposed_v_ring() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::E4m3, 128, MaskKind::Causal);
    // FA3's FP8 tile at d128: two consumers over 224 keys.
    let c = default_config(&spec);
    assert_eq!((c.block_m, c.block_n), (128, 224));
    let fp = check(&spec, &c).unwrap();
    assert_eq!(fp.tma_rows, 224);
    // In 16-bit units: Q slots of 64 x 128 (O, bf16, is staged there), two stages of K
    // (224 x 64 units), loaded V (the same) and Vt (128 rows of 224 keys: 112 units in two
    // 64-unit blocks), then the ring's and Q's barriers and two loaded-V barriers.
    let units = 2 * 64 * 128 + 2 * (224 * 64 + 224 * 64 + 128 * 128);
    assert_eq!(fp.smem_bytes, units * 2 + 2 * 32 + 2 * 16 + 2 * 8);
    // Keys in whole k32 steps, two stages at least, no pack-GQA.
    for bad in [
        ws_config(2, 80, 1, 1, 0),
        ws_config(2, 128, 1, 1, 1),
        config(2, 128, 2),
    ] {
        assert_eq!(
            check(&spec, &bad).unwrap_err().kind,
            RejectKind::Shape,
            "{bad:?}"
        );
    }
    // Every candidate is FP8's own list: whole k32 steps and no switches FP8 lacks.
    let candidates = candidates(&spec);
    assert!(candidates.len() >= 12);
    for c in &candidates {
        assert_eq!(c.block_n % 32, 0);
        assert_eq!(c.switch(PACK_GQA, 0), 0);
        assert_eq!(c.switch(HIDDEN_FIRST, 0), 0);
    }
    // Masked specs add turns at the MUFU; unmasked ones do not.
    let unmasked = KernelSpec::new(Arch::Sm90, Dtype::E4m3, 128, MaskKind::None);
    assert!(candidates.iter().any(|c| c.switch(MUFU_TURNS, 0) == 1));
    assert!(super::candidates(&unmasked)
        .iter()
        .all(|c| c.switch(MUFU_TURNS, 0) == 0));
    // The entry point renders FP8's k32 wgmma and takes the FP8 argument block.
    let values = render_values(&spec, &c, &fp);
    let get = |k: &str| values.iter().find(|(n, _)| *n == k).unwrap().1.clone();
    assert_eq!(get("fp8"), serde_json::json!(true));
    assert_eq!(get("dtype"), serde_json::json!("e4m3"));
    assert!(get("wgmma")
        .as_array()
        .unwrap()
        .iter()
        .all(|w| w["ab"] == "e4m3" && w["fp8"] == true));
    assert_eq!(get("half_first"), serde_json::json!(false));
}

#[test]
fn fp8_d256_stages_o_in_the_v_ring_only_where_q_slots_with_o_would_not_fit() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::E4m3, 256, MaskKind::None);
    let limit = Arch::Sm90.max_smem_per_block();
    // 128 keys without the overlap: Q slots of 64 x 128 units (Q alone), two stages of K
    // and loaded V (128 x 128 units each) and Vt (256 rows of 64 units), O in V slots 0, 1.
    let wide = ws_config(2, 128, 1, 0, 0);
    assert!(o_in_v_ring(&spec, &wide));
    let fp = check(&spec, &wide).unwrap();
    let units = 2 * 64 * 128 + 2 * (128 * 128 + 128 * 128 + 256 * 64);
    assert_eq!(fp.smem_bytes, units * 2 + 2 * 32 + 2 * 16 + 2 * 8);
    assert!(fp.smem_bytes <= limit);
    // Q slots sized for O would not fit: that is what sends O to the V ring.
    assert!(smem_bytes_with(&spec, &wide, 0, 1, false) > limit);
    assert_eq!(
        render_values(&spec, &wide, &fp)
            .iter()
            .find(|(n, _)| *n == "o_in_v_ring")
            .unwrap()
            .1,
        serde_json::json!(true)
    );
    // Tiles whose Q slots hold O keep it there (96 keys, the default; 64 keys), and so do
    // persistent grids (the next tile's V lands in the ring under this one's epilogue)
    // and every 16-bit spec.
    let default = default_config(&spec);
    assert_eq!(default.block_n, 96);
    for c in [default, ws_config(2, 64, 1, 1, 0)] {
        assert!(!o_in_v_ring(&spec, &c), "{c:?}");
        assert!(check(&spec, &c).is_ok(), "{c:?}");
    }
    let mut persistent = wide.clone();
    persistent.switches.insert(PERSISTENT.to_string(), 1);
    assert!(!o_in_v_ring(&spec, &persistent));
    let bf16 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 256, MaskKind::None);
    assert!(!o_in_v_ring(&bf16, &wide));
    // d256's candidates: 96 keys beside 64 and 128, and 128 without the overlap too.
    let candidates = candidates(&spec);
    assert!(candidates.iter().any(|c| c.block_n == 96));
    assert!(candidates
        .iter()
        .any(|c| c.block_n == 128 && c.switch(OVERLAP, 1) == 0));
}

#[test]
fn fp8_is_offered_where_its_kernels_are_written_and_by_the_hopper_template_alone() {
    for (d, mask, features, offered) in [
        (64, MaskKind::Causal, Features::default(), true),
        (256, MaskKind::None, Features::default(), true),
        (96, MaskKind::Causal, Features::default(), false),
        (128, MaskKind::Local, Features::default(), true),
        (
            128,
            MaskKind::Causal,
            Features {
                sinks: true,
                ..Features::default()
            },
            true,
        ),
        (
            128,
            MaskKind::Causal,
            Features {
                softcap: true,
                ..Features::default()
            },
            true,
        ),
        (
            64,
            MaskKind::None,
            Features {
                paged_kv: true,
                ..Features::default()
            },
            true,
        ),
    ] {
        let spec = KernelSpec {
            features,
            ..KernelSpec::new(Arch::Sm90, Dtype::E4m3, d, mask)
        };
        assert_eq!(Template::Hopper.supports(&spec), offered, "{spec:?}");
        assert!(!Template::Portable.supports(&spec));
        if !offered {
            let c = ws_config(2, 128, 1, 1, 0);
            assert_eq!(check(&spec, &c).unwrap_err().kind, RejectKind::Shape);
        }
    }
    // The 16-bit specs stay as they were.
    let bf16 = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 96, MaskKind::Local);
    assert!(Template::Hopper.supports(&bf16) && Template::Portable.supports(&bf16));
}

#[test]
fn fp8_local_windows_and_sinks_are_built_and_served_once_verified() {
    let sinks = Features {
        sinks: true,
        ..Features::default()
    };
    for d in [64, 128, 256] {
        let local = KernelSpec::new(Arch::Sm90, Dtype::E4m3, d, MaskKind::Local);
        let causal = KernelSpec::new(Arch::Sm90, Dtype::E4m3, d, MaskKind::Causal);
        let causal_sinks = KernelSpec {
            features: sinks,
            ..causal
        };
        let local_sinks = KernelSpec {
            features: sinks,
            ..local
        };
        for spec in [local, causal_sinks, local_sinks] {
            assert!(Template::Hopper.supports(&spec));
            assert!(!super::super::awaits_verify(&spec), "d{d} {spec:?}");
            assert!(Template::Hopper.serves(&spec) && !Template::Portable.serves(&spec));
            assert_eq!(super::super::held_back_template(&spec), None);
            // The plain causal spec's tiles, kept and set aside alike (neither the window
            // nor the sinks change a footprint), the default among those kept.
            let all = candidates(&spec);
            assert_eq!(all, candidates(&causal));
            assert!(check(&spec, &default_config(&spec)).is_ok());
            for c in &all {
                let (h, k) = (check(&spec, c), check(&causal, c));
                assert_eq!(h.is_ok(), k.is_ok(), "d{d} {}", c.tag());
                assert_eq!(h.err().map(|r| r.kind), k.err().map(|r| r.kind));
            }
        }
    }
}

#[test]
fn fp8_softcap_is_built_on_the_causal_tiles_and_served() {
    for d in [64, 128, 256] {
        for mask in MaskKind::ALL {
            for features in ["softcap", "sinks+softcap"] {
                let spec = KernelSpec {
                    features: features.parse().unwrap(),
                    ..KernelSpec::new(Arch::Sm90, Dtype::E4m3, d, mask)
                };
                let plain = KernelSpec::new(Arch::Sm90, Dtype::E4m3, d, mask);
                assert!(Template::Hopper.supports(&spec), "d{d} {features}");
                // verified on a GPU: served
                assert!(!super::super::awaits_verify(&spec));
                assert!(Template::Hopper.serves(&spec) && !Template::Portable.serves(&spec));
                assert_eq!(super::super::held_back_template(&spec), None);
                // The unfeatured spec's tiles, kept and set aside alike; no fixed offset
                // by the cap (P in e4m3 keeps the row max's offset).
                let default = default_config(&spec);
                assert_eq!(default, default_config(&plain), "d{d} {mask} {features}");
                assert_eq!(default.switch(CAP_OFFSET, 0), 0);
                for c in &candidates(&spec) {
                    assert_eq!(
                        check(&spec, c).is_ok(),
                        check(&plain, c).is_ok(),
                        "{}",
                        c.tag()
                    );
                }
            }
        }
    }
}

#[test]
fn fp8_over_pages_is_built_by_page_boxes_and_served() {
    for (d, dv) in [(64, 64), (128, 128), (256, 256), (192, 128)] {
        for features in ["paged", "sinks+paged", "softcap+paged"] {
            let spec = KernelSpec {
                features: features.parse().unwrap(),
                head_dim_v: dv,
                ..KernelSpec::new(Arch::Sm90, Dtype::E4m3, d, MaskKind::Causal)
            };
            assert!(Template::Hopper.supports(&spec), "d{d} {features}");
            // Served: every page-box default passed `verify` on a GPU (1,008 of 1,008).
            assert!(!super::super::awaits_verify(&spec), "d{d} {features}");
            assert!(Template::Hopper.serves(&spec), "d{d} {features}");
            assert!(!Template::Portable.serves(&spec));
            assert_eq!(super::super::held_back_template(&spec), None);
            // Every kept tile is warp-specialised, loads by boxes over the page pools (the
            // launcher's maps, not the strided tensors'), and keeps FP8's rules: whole
            // k32 steps, two or more stages.
            let kept: Vec<_> = candidates(&spec)
                .into_iter()
                .filter(|c| check(&spec, c).is_ok())
                .collect();
            assert!(!kept.is_empty(), "d{d} {features}");
            for c in &kept {
                assert!(warp_specialized(c) && !tma(&spec, c), "{}", c.tag());
                assert_eq!(check(&spec, c).unwrap().tma_rows, c.block_n, "{}", c.tag());
                assert!(c.block_n % 32 == 0 && c.stages >= 2, "{}", c.tag());
            }
            assert!(check(&spec, &default_config(&spec)).is_ok());
            // Without warp specialisation there is no producer to transpose V.
            let plain = config(2, 128, 2);
            assert!(!warp_specialized(&plain));
            assert_eq!(check(&spec, &plain).unwrap_err().kind, RejectKind::Shape);
        }
    }
}

#[test]
fn fp8_at_192_128_is_built_and_served() {
    for mask in MaskKind::ALL {
        let spec = KernelSpec {
            head_dim_v: 128,
            ..KernelSpec::new(Arch::Sm90, Dtype::E4m3, 192, mask)
        };
        assert!(Template::Hopper.supports(&spec), "{mask}");
        // verified on a GPU: served
        assert!(!super::super::awaits_verify(&spec));
        assert!(Template::Hopper.serves(&spec) && !Template::Portable.serves(&spec));
        assert_eq!(super::super::held_back_template(&spec), None);
        // V, O and P are d128's, so the default takes more keys than d256's 96; every
        // kept tile keeps FP8's rules.
        let default = default_config(&spec);
        assert!(check(&spec, &default).is_ok(), "{}", default.tag());
        assert!(default.block_n > 96, "{}", default.tag());
        for c in candidates(&spec).iter().filter(|c| check(&spec, c).is_ok()) {
            assert!(warp_specialized(c) && c.block_n % 32 == 0, "{}", c.tag());
        }
    }
    // Other unequal pairs stay bf16/fp16's.
    let other = KernelSpec {
        head_dim_v: 64,
        ..KernelSpec::new(Arch::Sm90, Dtype::E4m3, 128, MaskKind::Causal)
    };
    assert!(!Template::Hopper.supports(&other));
}
