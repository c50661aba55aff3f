//! A new template version: stale records are replaced whole, and the timings of
//! kernels whose machine code did not change are carried over.

use super::*;

#[test]
fn stale_records_outside_the_run_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let ks = kernels(3);
    let all = keys(&[512, 1024, 4096]);
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    run(&db, "v1", &all, &ks, &mut m, &Silent);
    let records = db.records().unwrap();
    let v = |h: &'static str| move |_: Template| h.to_string();
    // The same template version: nothing is stale.
    assert_eq!(
        stale_outside(&records, &device(), &v("v1"), &all[..1]),
        vec![]
    );
    // A new version, a run over the first key: the other two are left stale.
    assert_eq!(
        stale_outside(&records, &device(), &v("v2"), &all[..1]),
        all[1..].to_vec()
    );
    assert_eq!(stale_outside(&records, &device(), &v("v2"), &all), vec![]);
    // Another GPU's records are not this run's business.
    let other = Device {
        name: "Other GPU".into(),
        ..device()
    };
    assert_eq!(stale_outside(&records, &other, &v("v2"), &[]), vec![]);
}

#[test]
fn a_run_stopped_early_leaves_no_carried_timing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let ks = kernels(4);
    let keys = keys(&[1024, 8192]);
    run(
        &db,
        "h1",
        &keys,
        &ks,
        &mut Scripted::new(&ks, None, Duration::ZERO),
        &Silent,
    );
    // A new version changes kernel 1 only, and its first run has no time at all:
    // it measures nothing, but every timing that stands is carried before it stops.
    let next = renamed(&ks, "h2", &[1]);
    let h2 = |_: Template| "h2".to_string();
    let session = Session {
        db: &db,
        device: device(),
        template_hash: &h2,
        deadline: Some(Instant::now()),
        retake_finals: false,
    };
    let mut m = Scripted::new(&next, None, Duration::ZERO);
    let (counts, stopped) = tune_spec(&session, &keys, &next, &mut m, &Silent).unwrap();
    assert!(stopped);
    assert_eq!((counts.carried, m.timings.get()), (3 * 2, 0));
    // The next run times kernel 1 alone.
    let mut rest = Scripted::new(&next, None, Duration::ZERO);
    let (counts, _) = run(&db, "h2", &keys, &next, &mut rest, &Silent);
    assert_eq!((counts.carried, rest.timings.get()), (0, 2));
    assert!(db
        .records()
        .unwrap()
        .iter()
        .all(|r| r.candidates.len() == 4));
}

#[test]
fn a_new_template_keeps_the_screening_of_unchanged_machine_code() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let ks = kernels(4);
    let keys = keys(&[1024, 8192]);
    let mut m = Scripted::new(&ks, Some(3), Duration::ZERO);
    run(&db, "h1", &keys, &ks, &mut m, &Silent);
    // The next version renames every kernel and changes kernel 1's code only.
    let next = renamed(&ks, "h2", &[1]);
    let mut again = Scripted::new(&next, Some(3), Duration::ZERO);
    let (counts, _) = run(&db, "h2", &keys, &next, &mut again, &Silent);
    assert_eq!(counts.carried, 2 * 2, "kernels 0 and 2 at both keys");
    assert_eq!(
        (again.checks.get(), again.timings.get()),
        (2, 2),
        "kernel 1 is checked and timed at both keys, kernel 3 (wrong before) checked again"
    );
    assert_eq!(
        again.finals(),
        2 * 3 * FINAL_PASSES,
        "the finals are taken again, side by side"
    );
    for r in db.records().unwrap() {
        assert_eq!(r.template_hash, "h2");
        // The default first; the carried timings next, then the ones taken now.
        let ids: Vec<&str> = r.candidates.iter().map(|c| c.kernel.as_str()).collect();
        let id = |i: usize| next[i].built.id.0.as_str();
        assert_eq!(ids, [id(0), id(2), id(1), id(3)]);
        // A carried timing keeps its screening time and names the code it timed.
        let old = 0.5 * r.bucket.seqlen as f64 / 1024.0; // kernel 2's, in the first run
        assert!(matches!(
            &r.candidates[1].outcome,
            Outcome::Measured { ms, code_hash, settled_ms: Some(_), .. }
                if *ms == old && code_hash == &ks[2].built.code_hash
        ));
        assert!(matches!(&r.candidates[3].outcome, Outcome::Failed { .. }));
    }
}

#[test]
fn finals_stand_where_every_finalist_keeps_its_machine_code() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    // Six kernels: the default (0) and the fastest three by screening (2, 1, 3) are
    // the finalists; 4 and 5 screen slower.
    let ks = kernels(6);
    let keys = keys(&[1024, 8192]);
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    run(&db, "h1", &keys, &ks, &mut m, &Silent);
    let settled = |db: &TuningDb| -> Vec<Vec<Option<f64>>> {
        db.records()
            .unwrap()
            .iter()
            .map(|r| r.candidates.iter().map(Candidate::settled_ms).collect())
            .collect()
    };
    let first = settled(&db);

    // A template edit that changes no machine code: nothing is timed, the finals of
    // both keys stand as they were.
    let same = renamed(&ks, "h2", &[]);
    let mut m2 = Scripted::new(&same, None, Duration::ZERO);
    let tally = Tally::default();
    let (counts, _) = run(&db, "h2", &keys, &same, &mut m2, &tally);
    assert_eq!(tally.planned.get(), tally.done.get(), "the bar ends full");
    assert_eq!((m2.checks.get(), m2.timings.get(), m2.finals()), (0, 0, 0));
    assert_eq!((counts.carried, counts.finals_carried), (6 * 2, 2));
    assert_eq!(settled(&db), first, "the same settled times, now under h2");
    assert!(db
        .records()
        .unwrap()
        .iter()
        .all(|r| r.template_hash == "h2"));

    // A changed kernel that still screens outside the finals: it alone is timed.
    let slow = renamed(&same, "h3", &[5]);
    let mut m3 = Scripted::new(&slow, None, Duration::ZERO);
    let tally = Tally::default();
    let (counts, _) = run(&db, "h3", &keys, &slow, &mut m3, &tally);
    assert_eq!(tally.planned.get(), tally.done.get());
    assert_eq!((m3.checks.get(), m3.timings.get(), m3.finals()), (1, 2, 0));
    assert_eq!(counts.finals_carried, 2);

    // A changed kernel that screens fastest joins the finals: at both keys all four
    // finalists are timed again, side by side.
    let fast = renamed(&slow, "h4", &[4]);
    let mut m4 = Scripted::new(&fast, None, Duration::ZERO);
    m4.screened.insert(4, 0.1);
    let tally = Tally::default();
    let (counts, _) = run(&db, "h4", &keys, &fast, &mut m4, &tally);
    assert_eq!(tally.planned.get(), tally.done.get());
    assert_eq!(m4.timings.get(), 2);
    assert_eq!(counts.finals_carried, 0);
    assert_eq!(m4.finals(), 2 * FINALISTS * FINAL_PASSES);
    for r in db.records().unwrap() {
        let (winner, _) = r.winner().unwrap();
        assert_eq!(winner.kernel, fast[4].built.id.0);
    }
}

#[test]
fn finals_of_another_timing_policy_are_taken_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let ks = kernels(3);
    let keys = keys(&[8192]);
    run(
        &db,
        "h1",
        &keys,
        &ks,
        &mut Scripted::new(&ks, None, Duration::ZERO),
        &Silent,
    );
    // The stored record's finals were settled for another length.
    let mut r = db.records().unwrap().remove(0);
    r.timing.settle_ms *= 2.0;
    db.put(&r).unwrap();
    let same = renamed(&ks, "h2", &[]);
    let mut m = Scripted::new(&same, None, Duration::ZERO);
    let (counts, _) = run(&db, "h2", &keys, &same, &mut m, &Silent);
    assert_eq!(
        (m.timings.get(), counts.carried),
        (0, 3),
        "the screening carries"
    );
    assert_eq!(
        (m.finals(), counts.finals_carried),
        (3 * FINAL_PASSES, 0),
        "the finals do not"
    );
}
