//! The export, slim and full: what a slim record keeps, that it serves what its full
//! original did (over generated records, and over every record of the last full export
//! committed), and that the store and a merge keep its summary.

use std::path::Path;

use super::*;

/// What a record serves and why, to compare a slim record with its original: the
/// choice's kernel and config, the winner and its ms, the default's ms, whether the
/// finals ran.
fn served(r: &Record) -> impl PartialEq + std::fmt::Debug + '_ {
    (
        r.choice().map(|c| (&c.kernel, &c.config)),
        r.winner().map(|(c, ms)| (&c.kernel, ms)),
        r.default_ms(),
        r.finals_done(),
    )
}

#[test]
fn a_slim_record_keeps_the_default_the_finalists_and_the_winner() {
    // Before the finals: the default and the winner (k2), the others summarised.
    let r = record(
        &[Some(2.0), Some(1.8), Some(1.5), None, Some(3.0)],
        4096,
        "H200",
    );
    let slim = Entry::from(r.clone()).slim();
    assert_eq!(kernels(&slim), ["k0", "k2"]);
    assert_eq!(
        slim.screened,
        Some(Screened {
            measured: 2,
            failed: 1,
            fastest_ms: Some(1.8),
            slowest_ms: Some(3.0),
        })
    );
    assert_eq!(served(&slim.record), served(&r));
    // After: every finalist (k1, k3 and the default) too, though k1 serves.
    let r = settle(
        record(
            &[Some(2.0), Some(1.4), Some(1.5), Some(1.3), Some(1.9)],
            1024,
            "H200",
        ),
        &[Some(1.9), Some(1.2), None, Some(1.25), None],
    );
    let slim = Entry::from(r.clone()).slim();
    assert_eq!(kernels(&slim), ["k0", "k1", "k3"]);
    assert_eq!(slim.screened.unwrap().fastest_ms, Some(1.5));
    assert_eq!(served(&slim.record), served(&r));
    assert_eq!(slim.record.choice().unwrap().kernel, "k1");
    // A failed default is kept: candidate 0 is the default in every record.
    let r = record(&[None, Some(1.0), Some(2.0)], 1024, "H200");
    assert_eq!(kernels(&Entry::from(r).slim()), ["k0", "k1"]);
    // Nothing to leave out: no summary, and the slim export reads as the full one.
    let r = record(&[Some(2.0), Some(1.0)], 1024, "H200");
    let whole = Entry::from(r.clone());
    assert_eq!(whole.slim(), whole);
    assert_eq!(
        export(&[whole], Detail::Slim),
        export_json(std::slice::from_ref(&r))
    );
    // Nothing measured: the default alone, the rest counted.
    let none = Entry::from(record(&[None, None, None], 1024, "H200")).slim();
    assert_eq!(kernels(&none), ["k0"]);
    assert_eq!(
        none.screened,
        Some(Screened {
            measured: 0,
            failed: 2,
            fastest_ms: None,
            slowest_ms: None,
        })
    );
    assert!(none.record.choice().is_none());
}

/// A small deterministic generator (xorshift), for records of every shape.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn slim_records_serve_what_their_originals_do_whatever_their_shape() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for n in 0..2000 {
        let count = 1 + rng.below(12) as usize;
        // Coarse times, so ties and near-ties at the margins are common.
        let ms: Vec<Option<f64>> = (0..count)
            .map(|_| (rng.below(6) != 0).then(|| 0.5 + rng.below(12) as f64 * 0.05))
            .collect();
        let mut r = record(&ms, 1024, "H200");
        if rng.below(3) != 0 {
            let settled: Vec<Option<f64>> = ms
                .iter()
                .map(|m| m.filter(|_| rng.below(3) == 0).map(|m| m * 0.9))
                .collect();
            r = settle(r, &settled);
            r.timing.final_placements = rng.below(4) as u32;
        }
        let full = Entry::from(r);
        let slim = full.slim();
        assert_eq!(
            served(&slim.record),
            served(&full.record),
            "record {n}: {full:?}"
        );
        let left = slim.screened.map_or(0, |s| s.measured + s.failed) as usize;
        assert_eq!(slim.record.candidates.len() + left, count, "record {n}");
        assert_eq!(
            slim.slim(),
            slim,
            "record {n}: slimming twice changes nothing"
        );
    }
}

#[test]
fn slim_exports_read_back_and_write_again_byte_for_byte() {
    let records = [
        settle(
            record(
                &[Some(2.0), Some(1.4), Some(1.5), Some(1.3), Some(1.9)],
                1024,
                "H200",
            ),
            &[Some(1.9), Some(1.2), None, Some(1.25), None],
        ),
        record(&[Some(2.0), Some(1.0), None], 4096, "H200"),
        record(&[Some(2.0)], 8192, "H200"),
    ];
    let entries: Vec<Entry> = records.iter().cloned().map(Entry::from).collect();
    let text = export(&entries, Detail::Slim);
    assert!(text.contains("\"screened\": {"), "{text}");
    let mut reversed = entries.clone();
    reversed.reverse();
    assert_eq!(text, export(&reversed, Detail::Slim), "deterministic");
    let back = parse_export_entries(Path::new("slim.json"), &text).unwrap();
    assert_eq!(export(&back, Detail::Slim), text);
    assert_eq!(back.iter().filter(|e| e.is_slim()).count(), 2);
    for (e, r) in back.iter().zip(&records) {
        assert_eq!(served(&e.record), served(r));
    }
    // The records alone, as `build-cache` reads them.
    let plain = parse_export(Path::new("slim.json"), &text).unwrap();
    assert_eq!(plain[0].candidates.len(), 3);
    // A full export of what a slim import holds keeps the summary (nothing is lost),
    // and the full export of whole records is the export before slim ones.
    let full = export(&back, Detail::Full);
    assert_eq!(full.matches("\"screened\"").count(), 2);
    assert_eq!(
        parse_export_entries(Path::new("full.json"), &full).unwrap(),
        back
    );
    assert_eq!(export(&entries, Detail::Full), export_json(&records));
    assert!(!export_json(&records).contains("screened"));
}

#[test]
fn the_store_keeps_a_slim_records_summary_until_the_record_is_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let mut r = record(&[Some(2.0), Some(1.0), Some(3.0)], 4096, "H200");
    // Candidate 0 timed before code hashes were kept.
    if let Outcome::Measured { code_hash, .. } = &mut r.candidates[0].outcome {
        code_hash.clear();
    }
    let slim = Entry::from(r.clone()).slim();
    assert_eq!(kernels(&slim), ["k0", "k1"]);
    assert_eq!(
        db.merge_entries(vec![slim.clone()]).unwrap(),
        MergeSummary {
            added: 1,
            ..Default::default()
        }
    );
    assert_eq!(db.get_entry(&r.key()).unwrap().unwrap(), slim);
    assert_eq!(db.get(&r.key()).unwrap().unwrap(), slim.record);
    // Maintenance keeps it: stamping a code hash, carrying to a new template version.
    assert_eq!(db.stamp_code_hashes(|_| Some("c0".into())).unwrap(), (1, 1));
    let kept = db.get_entry(&r.key()).unwrap().unwrap();
    assert_eq!(kept.screened, slim.screened);
    let summary = db
        .carry_unchanged(
            |_| "new".into(),
            |_, c| Some((format!("new{}", c.block_n), format!("c{}", c.block_n / 64))),
        )
        .unwrap();
    assert_eq!(summary.carried, 1, "judged by the candidates it holds");
    let carried = db.get_entry(&r.key()).unwrap().unwrap();
    assert_eq!(carried.record.template_hash, "new");
    assert_eq!(carried.screened, slim.screened);
    // A record written whole (as a tune writes it) holds what it holds.
    db.put(&carried.record).unwrap();
    assert!(!db.get_entry(&r.key()).unwrap().unwrap().is_slim());
}

#[test]
fn a_slim_record_gives_way_to_the_whole_record_it_was_cut_from() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let whole = Entry::from(record(&[Some(2.0), Some(1.0), Some(3.0)], 4096, "H200"));
    let slim = whole.slim();
    db.put_entry(&slim).unwrap();
    // The slim one again, or another whole record of the key: kept.
    let mut other = whole.clone();
    other.record.date = "2026-12-01T10:00:00Z".into();
    let summary = db.merge_entries(vec![slim.clone(), other]).unwrap();
    assert_eq!((summary.kept, summary.restored), (2, 0));
    // Its original: restored.
    let summary = db.merge_entries(vec![whole.clone()]).unwrap();
    assert_eq!((summary.kept, summary.restored), (0, 1));
    assert_eq!(db.get_entry(&whole.record.key()).unwrap().unwrap(), whole);
    // And a whole record is never given up for its slim form.
    let summary = db.merge_entries(vec![slim]).unwrap();
    assert_eq!((summary.kept, summary.restored), (1, 0));
    assert_eq!(db.get_entry(&whole.record.key()).unwrap().unwrap(), whole);
}

/// The last commit whose `tuning-db/sm90.json` was the full export: 656 records, every
/// candidate of each.
const LAST_FULL_EXPORT: &str = "b4256aa9";

/// That export's text, from git; None without the history (a shallow clone, a tarball).
fn last_full_export() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["show", &format!("{LAST_FULL_EXPORT}:tuning-db/sm90.json")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}

#[test]
fn every_record_of_the_last_full_export_serves_the_same_choice_slim() {
    let Some(text) = last_full_export() else {
        eprintln!("skipped: no git history holding {LAST_FULL_EXPORT}:tuning-db/sm90.json");
        return;
    };
    let full = parse_export_entries(Path::new("full.json"), &text).unwrap();
    assert_eq!(full.len(), 656);
    assert!(full.iter().all(|e| !e.is_slim()));
    let slim_text = export(&full, Detail::Slim);
    let slim = parse_export_entries(Path::new("slim.json"), &slim_text).unwrap();
    assert_eq!(slim.len(), full.len());
    for (f, s) in full.iter().zip(&slim) {
        let key = f.record.key();
        assert_eq!(s.record.key(), key);
        assert_eq!(served(&s.record), served(&f.record), "{key}");
        assert!(s.record.choice().is_some(), "{key}");
        let left = s.screened.map_or(0, |x| x.measured + x.failed) as usize;
        assert_eq!(s.record.candidates.len() + left, f.record.candidates.len());
        // Every finalist is held, so a tune finds the key's finals as they were.
        let finals = |r: &Record| r.candidates.iter().filter(|c| c.has_finals()).count();
        assert_eq!(finals(&s.record), finals(&f.record), "{key}");
    }
    assert!(
        slim_text.len() * 8 < text.len(),
        "slim {} bytes, full {}",
        slim_text.len(),
        text.len()
    );
    // The committed export: each record that is still the one measured then (same
    // date) is that record, whole or slim; one carried to a later template version
    // (`db carry`) differs only in that version and its kernels' names.
    let committed_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning-db/sm90.json");
    let committed = parse_export_entries(
        &committed_path,
        &std::fs::read_to_string(&committed_path).unwrap(),
    )
    .unwrap();
    let by_key: std::collections::BTreeMap<String, &Entry> =
        full.iter().map(|e| (e.record.key(), e)).collect();
    let mut same = 0;
    for c in &committed {
        let Some(f) = by_key.get(&c.record.key()) else {
            continue;
        };
        if c.record.date == f.record.date {
            let as_carried = |e: &Entry| {
                let mut e = e.clone();
                e.record.template_hash = c.record.template_hash.clone();
                for cand in &mut e.record.candidates {
                    if let Some(now) = c.record.candidates.iter().find(|n| n.config == cand.config)
                    {
                        cand.kernel = now.kernel.clone();
                    }
                }
                e
            };
            assert!(
                *c == as_carried(&f.slim()) || *c == as_carried(f),
                "{}",
                c.record.key()
            );
            same += 1;
        }
    }
    eprintln!("{same} committed records checked against the last full export");
}
