//! Screening: every candidate checked and timed once per key, written as it is
//! measured, so a second run, a run past its deadline or a killed one resumes.

use std::io::{BufRead, Write};

use super::*;

#[test]
fn every_candidate_is_kept_and_the_fastest_correct_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let ks = kernels(5);
    let keys = keys(&[512, 4096]);
    // Kernel 2 is the fastest but computes wrong output: never a winner.
    let mut m = Scripted::new(&ks, Some(2), Duration::ZERO);
    let (counts, stopped) = run(&db, "h1", &keys, &ks, &mut m, &Silent);
    assert!(!stopped);
    assert_eq!((counts.checked, counts.check_failed), (5, 1));
    assert_eq!(m.timings.get(), 4 * 2, "the wrong kernel is not timed");
    assert_eq!(
        (m.finals(), counts.finals),
        (2 * 4 * FINAL_PASSES, 2 * 4 * FINAL_PASSES),
        "every right one is a finalist, in three passes at each key"
    );
    let records = db.records().unwrap();
    assert_eq!(records.len(), 2);
    for r in &records {
        assert_eq!(r.candidates.len(), 5);
        assert_eq!(
            r.candidates[0].kernel, ks[0].built.id.0,
            "the default is candidate 0"
        );
        assert!(
            matches!(&r.candidates[2].outcome, Outcome::Failed { error } if error.contains("wrong output"))
        );
        // Each timing names the machine code it timed.
        for (c, k) in r.candidates.iter().zip(&ks) {
            if let Outcome::Measured { code_hash, .. } = &c.outcome {
                assert_eq!(code_hash, &k.built.code_hash);
            }
        }
        let (winner, _) = r.winner().unwrap();
        assert_eq!(
            winner.kernel, ks[0].built.id.0,
            "kernel 0 is the fastest correct one"
        );
    }
    // The closing table sets each winner against the default.
    let current = |_: Template| "h1".to_string();
    let rows = winners(&db, &device(), &keys, &current).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].speedup, Some(1.0));
    assert_eq!(rows[0].failed, 1);
    assert!(rows.iter().all(|r| r.settled));
}

#[test]
fn a_second_run_measures_nothing_and_a_new_template_measures_everything() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let ks = kernels(3);
    let keys = keys(&[1024]);
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    run(&db, "h1", &keys, &ks, &mut m, &Silent);
    let mut again = Scripted::new(&ks, None, Duration::ZERO);
    let (counts, _) = run(&db, "h1", &keys, &ks, &mut again, &Silent);
    assert_eq!(m.finals(), 3 * FINAL_PASSES);
    assert_eq!(
        (
            again.checks.get(),
            again.timings.get(),
            again.finals(),
            counts.finals,
            counts.skipped
        ),
        (0, 0, 0, 0, 3),
        "nothing at all is measured again, finals included"
    );
    // Another template version that changed every kernel's code: the stale record is
    // replaced whole, not extended.
    let recoded = renamed(&ks, "h2", &[0, 1, 2]);
    let mut fresh = Scripted::new(&recoded, None, Duration::ZERO);
    let (counts, _) = run(&db, "h2", &keys, &recoded, &mut fresh, &Silent);
    assert_eq!(
        (fresh.timings.get(), fresh.finals(), counts.carried),
        (3, 3 * FINAL_PASSES, 0)
    );
    let r = &db.records().unwrap()[0];
    assert_eq!((r.template_hash.as_str(), r.candidates.len()), ("h2", 3));
}

#[test]
fn a_deadline_stops_between_measurements_and_the_next_run_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let ks = kernels(4);
    let keys = keys(&[256, 2048]);
    let current = |_: Template| "h1".to_string();
    let session = Session {
        db: &db,
        device: device(),
        template_hash: &current,
        deadline: Some(Instant::now() + Duration::from_millis(50)),
        retake_finals: false,
    };
    let mut m = Scripted::new(&ks, None, Duration::from_millis(20));
    let (_, stopped) = tune_spec(&session, &keys, &ks, &mut m, &Silent).unwrap();
    assert!(stopped);
    let done = m.timings.get();
    assert!((1..8).contains(&done), "{done}");
    assert_eq!(m.finals(), 0, "the finals come after the screening");
    let mut rest = Scripted::new(&ks, None, Duration::ZERO);
    run(&db, "h1", &keys, &ks, &mut rest, &Silent);
    assert_eq!(rest.timings.get(), 8 - done);
    assert_eq!(rest.finals(), finals_for(&[256, 2048]));
}

/// Prints a line per measurement, for the parent of `tune_child` to count.
struct Lines;
impl Progress for Lines {
    fn measured(&self, _: &Key, _: &TuneKernel, _: &Outcome, _: Option<(String, f64)>) {
        println!("measured");
        std::io::stdout().flush().unwrap();
    }
}

const CHILD_DB: &str = "FA4_GEN_TUNE_CHILD_DB";

/// The tune `a_killed_tune_loses_at_most_the_candidate_in_flight` kills: slow
/// measurements into the database named by the environment. Does nothing alone.
#[test]
#[ignore = "run by a_killed_tune_loses_at_most_the_candidate_in_flight"]
fn tune_child() {
    let Some(path) = std::env::var_os(CHILD_DB) else {
        return;
    };
    let db = TuningDb::open(std::path::Path::new(&path)).unwrap();
    let ks = kernels(6);
    let mut m = Scripted::new(&ks, None, Duration::from_millis(40));
    run(&db, "h1", &keys(&[512, 8192]), &ks, &mut m, &Lines);
}

/// `tune_child`'s name as the test binary knows it (its module path, less the crate's).
fn child_test_name() -> String {
    let path = module_path!().split_once("::").expect("in a crate").1;
    format!("{path}::tune_child")
}

#[test]
fn a_killed_tune_loses_at_most_the_candidate_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            child_test_name().as_str(),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DB, &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = 0;
    while seen < 5 {
        if lines.next().unwrap().unwrap() == "measured" {
            seen += 1;
        }
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no flush runs
    child.wait().unwrap();

    let db = TuningDb::open(&path).unwrap();
    let kept: usize = db
        .records()
        .unwrap()
        .iter()
        .map(|r| r.candidates.len())
        .sum();
    assert!((5..12).contains(&kept), "{kept} outcomes survived the kill");
    let ks = kernels(6);
    let mut rest = Scripted::new(&ks, None, Duration::ZERO);
    run(&db, "h1", &keys(&[512, 8192]), &ks, &mut rest, &Silent);
    assert_eq!(
        rest.timings.get(),
        12 - kept,
        "only what the kill lost is measured again"
    );
    assert_eq!(
        rest.finals(),
        finals_for(&[512, 8192]),
        "then the finals of both keys"
    );
    for r in db.records().unwrap() {
        let ids: Vec<&str> = r.candidates.iter().map(|c| c.kernel.as_str()).collect();
        let want: Vec<&str> = ks.iter().map(|k| k.built.id.0.as_str()).collect();
        assert_eq!(ids, want, "each candidate once, the default first");
    }
}

#[test]
fn the_progress_plan_covers_every_pass_of_new_keys() {
    let ks = kernels(5);
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let mut m = Scripted::new(&ks, None, Duration::ZERO);
    let tally = Tally::default();
    run(&db, "h1", &keys(&[512, 4096]), &ks, &mut m, &tally);
    assert_eq!(tally.done.get(), 5 * 2 + finals_for(&[512, 4096]));
    assert_eq!(tally.planned.get(), tally.done.get());
}
