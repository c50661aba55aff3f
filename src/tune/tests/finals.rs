//! The finals: a key's finalists re-timed side by side after settling, over passes on
//! separate buffer sets, and taken again whole wherever they are incomplete.

use super::*;

#[test]
fn the_finals_can_reverse_the_screening_order() {
    let ks = kernels(5);
    let keys = keys(&[1024]);
    // Screening: k2 0.5 (fastest), k0 1.0, k1 1.1, k3 1.3, k4 1.4 ms. Settled, k2
    // is the slowest finalist (2.5) and k1 the fastest (0.88).
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    m.settled = BTreeMap::from([(2, 5.0), (1, 0.8)]);
    let (counts, stopped) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
    assert!(!stopped);
    assert_eq!(counts.finals, FINALISTS * FINAL_PASSES);
    let r = &db.records().unwrap()[0];
    assert_eq!((r.timing.finalists, r.timing.settle_ms), (4, SETTLE_MS));
    assert_eq!(
        (r.timing.final_passes, r.timing.final_placements),
        (FINAL_PASSES as u32, FINAL_PASSES as u32)
    );
    let by_screening = Record {
        candidates: r
            .candidates
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.set_settled_ms(None);
                c
            })
            .collect(),
        ..r.clone()
    };
    assert_eq!(by_screening.choice().unwrap().kernel, ks[2].built.id.0);
    let (winner, ms) = r.winner().unwrap();
    assert_eq!(winner.kernel, ks[1].built.id.0, "settled, k1 wins");
    assert!((ms - 0.88).abs() < 1e-9, "{ms}");
    assert_eq!(r.choice().unwrap().kernel, ks[1].built.id.0);
    let current = |_: Template| "h1".to_string();
    let row = &winners(&db, &device(), &keys, &current).unwrap()[0];
    assert!(row.settled);
    assert_eq!(row.default_ms, Some(1.0));
    assert_eq!(row.winner_ms, Some(ms));
    assert_eq!(
        row.served_config.as_deref(),
        Some(ks[1].built.candidate.config.tag().as_str())
    );

    // Settled, the screening winner is no faster than the default: the default is
    // served. A finalist whose finals timing fails cannot win, and is counted.
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    m.settled = BTreeMap::from([(2, 2.0)]);
    m.finals_fail = Some(1);
    let (counts, _) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
    assert_eq!(
        (counts.finals, counts.time_failed),
        ((FINALISTS - 1) * FINAL_PASSES, 1),
        "a finalist whose timing fails sits out the other passes"
    );
    let r = &db.records().unwrap()[0];
    assert_eq!(settled_of(r, &ks), vec![(0, 1.0), (2, 1.0), (3, 1.3)]);
    assert_eq!(r.winner().unwrap().0.kernel, ks[0].built.id.0);
    assert_eq!(r.choice().unwrap().kernel, ks[0].built.id.0);
}

#[test]
fn only_the_finalists_are_timed_again_the_default_always_among_them() {
    let ks = kernels(6);
    let keys = keys(&[512, 4096]);
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    // The default screens slowest: a finalist all the same, with the three fastest.
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    m.screened = BTreeMap::from([(0, 3.0)]);
    let (counts, _) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
    assert_eq!(counts.timed, 6 * 2);
    let all = finals_for(&[512, 4096]);
    assert_eq!((counts.finals, m.finals()), (all, all));
    let mut timed = m.finals.borrow().clone();
    timed.sort();
    let each = 2 * FINAL_PASSES;
    let by_kernel: Vec<usize> = (0..4).flat_map(|k| vec![k; each]).collect();
    assert_eq!(timed, by_kernel);
    for r in db.records().unwrap() {
        let settled: Vec<usize> = settled_of(&r, &ks).into_iter().map(|s| s.0).collect();
        assert_eq!(settled, vec![0, 1, 2, 3], "k4 and k5 are not re-timed");
    }
    // A default that fails its check is no finalist: the four fastest others are.
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let mut m = Scripted::new(&ks, Some(0), Duration::ZERO);
    run(&db, "h1", &keys, &ks, &mut m, &Silent);
    for r in db.records().unwrap() {
        let settled: Vec<usize> = settled_of(&r, &ks).into_iter().map(|s| s.0).collect();
        assert_eq!(settled, vec![1, 2, 3, 4]);
    }
}

#[test]
fn a_keys_first_finalist_warms_up_longer_and_finals_without_it_are_taken_again() {
    let ks = kernels(6);
    let keys = keys(&[512, 4096]);
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    run(&db, "h1", &keys, &ks, &mut m, &Silent);
    let per_key = |passes: usize| {
        let mut w = vec![false; FINALISTS * passes];
        w[0] = true;
        w
    };
    let warmups = [per_key(FINAL_PASSES), per_key(FINAL_PASSES)].concat();
    assert_eq!(*m.warmups.borrow(), warmups);
    for r in db.records().unwrap() {
        assert_eq!(r.timing.key_warmup_ms, KEY_WARMUP_MS);
        assert_eq!(r.choice().unwrap().kernel, ks[2].built.id.0);
    }

    // Records whose finals had no key warm-up (an older fa4-gen): the finals run
    // again, nothing is screened again, and the new settled times decide.
    for mut r in db.records().unwrap() {
        r.timing.key_warmup_ms = 0.0;
        db.put(&r).unwrap();
    }
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    m.settled = BTreeMap::from([(2, 3.0)]);
    let (counts, _) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
    assert_eq!(
        (m.timings.get(), counts.finals),
        (0, finals_for(&[512, 4096]))
    );
    assert_eq!(*m.warmups.borrow(), warmups);
    for r in db.records().unwrap() {
        assert_eq!(r.timing.key_warmup_ms, KEY_WARMUP_MS);
        assert_eq!(
            r.winner().unwrap().0.kernel,
            ks[0].built.id.0,
            "k2 settles at 1.5 ms"
        );
    }
    // Then nothing is left to time.
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    let (counts, _) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
    assert_eq!((m.timings.get(), counts.finals), (0, 0));
}

#[test]
fn a_key_stopped_among_its_finals_takes_them_all_again_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let ks = kernels(6);
    let keys = keys(&[512, 4096]);
    let current = |_: Template| "h1".to_string();
    let settled = |db: &TuningDb| -> usize {
        db.records()
            .unwrap()
            .iter()
            .flat_map(|r| r.candidates.iter().map(|c| c.settled_passes().len()))
            .sum()
    };
    // The deadline passes while the first finalist is timed: the screening is
    // whole, one finalist has one pass.
    let deadline = Instant::now() + Duration::from_millis(1500);
    let session = Session {
        db: &db,
        device: device(),
        template_hash: &current,
        deadline: Some(deadline),
        retake_finals: false,
    };
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    m.finals_until = Some(deadline);
    let (counts, stopped) = tune_spec(&session, &keys, &ks, &mut m, &Silent).unwrap();
    assert!(stopped);
    assert_eq!((m.timings.get(), m.finals(), counts.finals), (12, 1, 1));
    assert_eq!(settled(&db), 1);
    // The next run takes that key's finals again from the start (the pass from the
    // last run goes: it would meet this run's); the GPU fails at its third timing.
    let session = Session {
        deadline: None,
        retake_finals: false,
        ..session
    };
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    m.finals_crash = Some(2);
    assert!(matches!(
        tune_spec(&session, &keys, &ks, &mut m, &Silent),
        Err(TuneError::Gpu(_))
    ));
    assert_eq!((m.checks.get(), m.timings.get(), m.finals()), (0, 0, 2));
    assert_eq!(settled(&db), 2, "this run's two passes alone");
    // The next run takes every finalist of both keys in one run; then nothing is left.
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    let (counts, stopped) = tune_spec(&session, &keys, &ks, &mut m, &Silent).unwrap();
    assert!(!stopped);
    assert_eq!(
        (m.timings.get(), counts.finals),
        (0, finals_for(&[512, 4096]))
    );
    for r in db.records().unwrap() {
        let settled: Vec<usize> = settled_of(&r, &ks).into_iter().map(|s| s.0).collect();
        assert_eq!(settled, vec![0, 1, 2, 3]);
    }
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    let (counts, _) = tune_spec(&session, &keys, &ks, &mut m, &Silent).unwrap();
    assert_eq!((m.timings.get(), m.finals(), counts.finals), (0, 0, 0));
    // --retake-finals takes them all again, and screens nothing.
    let session = Session {
        retake_finals: true,
        ..session
    };
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    let (counts, _) = tune_spec(&session, &keys, &ks, &mut m, &Silent).unwrap();
    assert_eq!(
        (m.timings.get(), counts.finals),
        (0, finals_for(&[512, 4096]))
    );
    assert_eq!(settled(&db), finals_for(&[512, 4096]));
}

#[test]
fn a_new_finalist_has_the_keys_finals_taken_again_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let current = |_: Template| "h1".to_string();
    let session = Session {
        db: &db,
        device: device(),
        template_hash: &current,
        deadline: None,
        retake_finals: false,
    };
    // Four candidates, all finalists, their finals taken.
    let ks = kernels(5);
    let mut m = Scripted::new(&ks[..4], None, Duration::ZERO);
    tune_spec(&session, &keys(&[512]), &ks[..4], &mut m, &Silent).unwrap();
    let old: Vec<Vec<f64>> = db.records().unwrap()[0]
        .candidates
        .iter()
        .map(|c| c.settled_passes())
        .collect();
    assert!(old.iter().all(|p| p.len() == FINAL_PASSES));
    // A fifth, new to the space, screens faster than k3 on a GPU that runs 10%
    // slower: every finalist is timed again in this run, not the new one alone
    // beside passes of the last run, and k3, no longer a finalist, loses its passes.
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    m.screened = BTreeMap::from([(4, 0.8)]);
    m.settled = BTreeMap::from([(0, 1.1), (1, 1.1), (2, 1.1), (3, 1.1), (4, 1.1)]);
    // A run that built the new kernel alone (what `fa4-gen tune` built before
    // configs_to_time added the finalists: the old ones lost their passes and the new
    // one, timed alone, won) leaves the key's finals as they were.
    let new_alone: Vec<TuneKernel> = kernels(5).into_iter().skip(4).collect();
    let (counts, _) = tune_spec(&session, &keys(&[512]), &new_alone, &mut m, &Silent).unwrap();
    assert_eq!(
        (m.timings.get(), counts.finals, counts.finals_unbuilt),
        (1, 0, 1)
    );
    let r = &db.records().unwrap()[0];
    let kept: Vec<Vec<f64>> = r.candidates[..4]
        .iter()
        .map(|c| c.settled_passes())
        .collect();
    assert_eq!(kept, old, "no finalist's passes lost");
    assert_eq!(
        r.winner().unwrap().0.kernel,
        ks[2].built.id.0,
        "the new one unsettled"
    );
    // What `fa4-gen tune` builds for that key: the new candidate and its finalists.
    let configs: Vec<TileConfig> = ks
        .iter()
        .map(|k| k.built.candidate.config.clone())
        .collect();
    db.records().unwrap().into_iter().for_each(|mut r| {
        r.candidates.truncate(4);
        db.put(&r).unwrap();
    });
    let needed = configs_to_time(&db, &device(), &current, &keys(&[512]), &configs, false)
        .unwrap()
        .unwrap();
    assert_eq!(needed, [4, 0, 2, 1, 3].map(|i| configs[i].clone()));
    let tally = Tally::default();
    let (counts, _) = tune_spec(&session, &keys(&[512]), &ks, &mut m, &tally).unwrap();
    assert_eq!(
        (m.timings.get(), counts.finals),
        (2, FINALISTS * FINAL_PASSES)
    );
    assert_eq!(tally.planned.get(), tally.done.get(), "the bar ends full");
    let r = &db.records().unwrap()[0];
    let k3 = r
        .candidates
        .iter()
        .find(|c| c.kernel == ks[3].built.id.0)
        .unwrap();
    assert!(k3.settled_passes().is_empty(), "no longer a finalist");
    assert!(finals_complete(r));
}

#[test]
fn every_key_settles_on_the_mean_of_passes_over_buffer_sets() {
    let ks = kernels(5);
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    // At 512 keys: k2 0.25 ms, k0 0.5, k1 0.55, k3 0.65 (finalists), k4 0.7; at 4096
    // eight times that. At 512, one of k2's three readings is 5x (a buffer set its
    // tile is slow on) and one of k0's 0.5x: k2 leads by the median (0.25 against
    // 0.5 ms) and trails over all three sets (0.583 against 0.417). At 4096 its 3x
    // set leaves it ahead (3.33 against 4 ms).
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    m.outliers = BTreeMap::from([((2, 1), 5.0), ((0, 2), 0.5), ((2, 3), 3.0)]);
    run(&db, "h1", &keys(&[512, 4096]), &ks, &mut m, &Silent);
    let timed = m.finals.borrow().clone();
    // Pass p starts at the p-th finalist (default, then by screening time) and runs
    // on the p-th buffer set.
    let order = [0, 2, 1, 3, 2, 1, 3, 0, 1, 3, 0, 2];
    assert_eq!(timed, [order, order].concat(), "{timed:?}");
    let sets: Vec<usize> = (0..2 * FINAL_PASSES)
        .flat_map(|p| vec![p % FINAL_PASSES; FINALISTS])
        .collect();
    assert_eq!(*m.placements.borrow(), sets);
    let records = db.records().unwrap();
    let short = records.iter().find(|r| r.bucket.seqlen == 512).unwrap();
    let passes = |r: &Record, k: usize| {
        r.candidates
            .iter()
            .find(|c| c.kernel == ks[k].built.id.0)
            .unwrap()
            .settled_passes()
    };
    assert_eq!(passes(short, 2), vec![0.25, 1.25, 0.25]);
    assert_eq!(passes(short, 0), vec![0.5, 0.5, 0.25]);
    assert_eq!(
        short.winner().unwrap().0.kernel,
        ks[0].built.id.0,
        "the slow set counts"
    );
    assert!((short.default_ms().unwrap() - 1.25 / 3.0).abs() < 1e-12);
    let long = records.iter().find(|r| r.bucket.seqlen == 4096).unwrap();
    assert_eq!(passes(long, 2), vec![6.0, 2.0, 2.0]);
    assert_eq!(long.winner().unwrap().0.kernel, ks[2].built.id.0);
    assert_eq!(long.timing.final_placements, FINAL_PASSES as u32);

    // Records whose finals all ran on one buffer set (an older fa4-gen) take them
    // again, every key; nothing is screened again.
    for mut r in db.records().unwrap() {
        r.timing.final_passes = 0;
        r.timing.final_placements = 0;
        r.timing.short_key_passes = 3;
        r.timing.short_key_ms = 1.0;
        db.put(&r).unwrap();
    }
    // Only the finalists are built again for that.
    let current = |_: Template| "h1".to_string();
    let configs: Vec<TileConfig> = ks
        .iter()
        .map(|k| k.built.candidate.config.clone())
        .collect();
    let to_time =
        |keys: &[Key]| configs_to_time(&db, &device(), &current, keys, &configs, false).unwrap();
    let finalists: Vec<TileConfig> = [0, 2, 1, 3].iter().map(|&i| configs[i].clone()).collect();
    assert_eq!(to_time(&keys(&[512, 4096])), Some(finalists));
    assert_eq!(
        to_time(&keys(&[512, 4096, 8192])),
        None,
        "a new key: everything"
    );
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    m.settled = BTreeMap::from([(2, 3.0)]);
    let (counts, _) = run(&db, "h1", &keys(&[512, 4096]), &ks, &mut m, &Silent);
    assert_eq!(
        (m.timings.get(), counts.finals),
        (0, finals_for(&[512, 4096]))
    );
    assert_eq!(to_time(&keys(&[512, 4096])), Some(vec![]), "nothing left");
    for r in db.records().unwrap() {
        assert_eq!(
            r.winner().unwrap().0.kernel,
            ks[0].built.id.0,
            "the new passes decide"
        );
        assert_eq!(
            (r.timing.final_placements, r.timing.short_key_passes),
            (FINAL_PASSES as u32, 0)
        );
    }
    // A candidate the records lack (new to the space) is built, and with it the
    // finalists it may join.
    for mut r in db.records().unwrap() {
        r.candidates.retain(|c| c.kernel != ks[4].built.id.0);
        db.put(&r).unwrap();
    }
    let with_finalists: Vec<TileConfig> = [4, 0, 2, 1, 3]
        .iter()
        .map(|&i| configs[i].clone())
        .collect();
    assert_eq!(to_time(&keys(&[512, 4096])), Some(with_finalists));
}
