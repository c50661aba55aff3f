//! The sled store: opening, refusing, merging, maintaining across template versions.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::db::FORMAT;
use crate::space::Template;

#[test]
fn timings_without_a_code_hash_are_stamped_from_a_build() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let mut r = record(&[Some(2.0), Some(1.0), None, Some(3.0)], 4096, "H200");
    // Timed before code hashes were kept, but for candidate 3.
    for c in &mut r.candidates[..3] {
        if let Outcome::Measured { code_hash, .. } = &mut c.outcome {
            code_hash.clear();
        }
    }
    db.put(&r).unwrap();
    let build: BTreeMap<&str, &str> = [("k0", "aaaa"), ("k2", "cccc"), ("k3", "dddd")].into();
    let code_of = |id: &str| build.get(id).map(|h| h.to_string());
    assert_eq!(db.stamp_code_hashes(code_of).unwrap(), (1, 1));
    let codes: Vec<Option<String>> = db
        .get(&r.key())
        .unwrap()
        .unwrap()
        .candidates
        .iter()
        .map(|c| match &c.outcome {
            Outcome::Measured { code_hash, .. } => Some(code_hash.clone()),
            Outcome::Failed { .. } => None,
        })
        .collect();
    // k1 is not in the build, k2 failed (no timing), k3 keeps the hash it had.
    assert_eq!(
        codes,
        [
            Some("aaaa".into()),
            Some(String::new()),
            None,
            Some("c3".into())
        ]
    );
    assert_eq!(db.stamp_code_hashes(code_of).unwrap(), (0, 0), "idempotent");
}

#[test]
fn stale_records_move_to_the_current_template_only_where_no_kernel_changed() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    // Timed under template version "abc": k0, k1 and k2 with code hashes c0, c1, c2.
    let same = record(&[Some(2.0), Some(1.0), Some(3.0)], 4096, "H200");
    let changed = record(&[Some(2.0), Some(1.0), Some(3.0)], 8192, "H200");
    let failed = record(&[Some(2.0), None], 16384, "H200");
    let current = record(&[Some(2.0)], 1024, "H200");
    for r in [&same, &changed, &failed] {
        db.put(r).unwrap();
    }
    db.put(&Record {
        template_hash: "new".into(),
        ..current.clone()
    })
    .unwrap();
    // The build of version "new": block_n picks the candidate; at 8192 tokens (a
    // spec's record stands in for its own build here) the third kernel's code changed.
    let built = |r: &Record, c: &TileConfig| {
        let i = (c.block_n / 32).trailing_zeros();
        let code = if r.bucket.seqlen == 8192 && i == 2 {
            "other".to_string()
        } else {
            format!("c{i}")
        };
        Some((format!("new{i}"), code))
    };
    let summary = db.carry_unchanged(|_| "new".to_string(), built).unwrap();
    assert_eq!(summary.carried, 1);
    assert_eq!(summary.left, vec![changed.key(), failed.key()]);
    let moved = db.get(&same.key()).unwrap().unwrap();
    assert_eq!(moved.template_hash, "new");
    let ids: Vec<&str> = moved.candidates.iter().map(|c| c.kernel.as_str()).collect();
    assert_eq!(ids, ["new0", "new1", "new2"]);
    // The timings and the winner are the record's own.
    assert_eq!(
        moved
            .candidates
            .iter()
            .map(|c| &c.outcome)
            .collect::<Vec<_>>(),
        same.candidates
            .iter()
            .map(|c| &c.outcome)
            .collect::<Vec<_>>()
    );
    assert_eq!(db.get(&changed.key()).unwrap().unwrap(), changed);
    assert_eq!(db.get(&failed.key()).unwrap().unwrap(), failed);
    // A candidate the current build lacks keeps the record stale too.
    let summary = db
        .carry_unchanged(|_| "newer".to_string(), |_, _| None)
        .unwrap();
    assert_eq!(summary.carried, 0);
    assert_eq!(summary.left.len(), 4);
}

#[test]
fn each_template_keeps_its_own_record_of_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let portable = record(&[Some(2.0), Some(1.0)], 4096, "H200");
    let hopper = Record {
        template: Template::Hopper,
        ..record(&[Some(1.5)], 4096, "H200")
    };
    db.put(&portable).unwrap();
    db.put(&hopper).unwrap();
    assert_ne!(portable.key(), hopper.key());
    assert_eq!(db.records().unwrap().len(), 2, "neither replaced the other");
    let back = db.get(&portable.key()).unwrap().unwrap();
    assert_eq!(back.winner().unwrap().1, 1.0);
    assert_eq!(
        db.get(&hopper.key()).unwrap().unwrap().template,
        Template::Hopper
    );
}

#[test]
fn a_ragged_bucket_has_its_own_record_beside_the_dense_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let dense = record(&[Some(2.0)], 4096, "H100");
    let ragged = Record {
        bucket: Bucket::of(4096).ragged(),
        ..record(&[Some(1.0)], 4096, "H100")
    };
    db.put(&dense).unwrap();
    db.put(&ragged).unwrap();
    assert!(dense.key().contains("/s04096/") && ragged.key().contains("/r04096/"));
    assert_eq!(db.records().unwrap().len(), 2, "neither replaced the other");
    assert!(db.get(&ragged.key()).unwrap().unwrap().bucket.ragged);
    // An export says which is which, and reads back so.
    let text = export_json(&db.records().unwrap());
    assert!(text.contains("\"ragged\": true") || text.contains("\"ragged\":true"));
    let read = parse_export(Path::new("export.json"), &text).unwrap();
    assert_eq!(read, db.records().unwrap());
}

#[test]
fn stores_and_exports_keyed_without_the_template_are_read_and_rekeyed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let r = record(&[Some(2.0), Some(1.0)], 4096, "H200");
    let legacy = r.legacy_key();
    {
        // A store written before templates joined the key.
        let db = TuningDb::open(&path).unwrap();
        db.tree
            .insert(legacy.as_bytes(), serde_json::to_vec(&r).unwrap())
            .unwrap();
        db.tree.flush().unwrap();
    }
    let db = TuningDb::open(&path).unwrap();
    assert!(db.get(&legacy).unwrap().is_none(), "the old key is gone");
    assert_eq!(db.get(&r.key()).unwrap().unwrap().winner().unwrap().1, 1.0);
    assert_eq!(db.records().unwrap().len(), 1, "moved, not copied");
    drop(db);
    // An export written then: read, and written back under the new keys.
    let old_export = export_json(std::slice::from_ref(&r)).replace(&r.key(), &legacy);
    assert!(old_export.contains(&format!("\"{legacy}\"")));
    let back = parse_export(Path::new("old.json"), &old_export).unwrap();
    assert_eq!(back.len(), 1);
    assert!(export_json(&back).contains(&format!("\"{}\"", r.key())));
}

#[test]
fn a_database_held_open_elsewhere_is_named_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let held = TuningDb::open(&path).unwrap();
    let err = TuningDb::open(&path)
        .err()
        .expect("a second open must fail");
    assert!(matches!(err, DbError::InUse { .. }), "{err}");
    assert!(err.to_string().contains("open in another process"), "{err}");
    drop(held);
    // Closed, it opens again (the reopen waits out sled's lock release).
    TuningDb::open(&path).unwrap();
}

#[test]
fn records_survive_a_reopen_and_export_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = TuningDb::open(&path).unwrap();
    db.put(&record(&[Some(2.0)], 8192, "H200")).unwrap();
    db.put(&record(&[Some(1.0)], 512, "H200")).unwrap();
    drop(db);
    let db = TuningDb::open(&path).unwrap();
    let records = db.records().unwrap();
    assert_eq!(records.len(), 2);
    let text = export_json(&records);
    let mut reversed = records.clone();
    reversed.reverse();
    assert_eq!(
        text,
        export_json(&reversed),
        "order of records does not matter"
    );
    assert!(text.find("s00512").unwrap() < text.find("s08192").unwrap());
    let back = parse_export(Path::new("x.json"), &text).unwrap();
    assert_eq!(export_json(&back), text);
}

#[test]
fn merge_keeps_the_fastest_per_key_and_device() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    db.put(&record(&[Some(2.0)], 4096, "H200")).unwrap();
    let summary = db
        .merge_records(vec![
            record(&[Some(1.0)], 4096, "H200"), // faster: replaces
            record(&[Some(3.0)], 4096, "H200"), // slower: kept out
            record(&[Some(9.0)], 4096, "H100"), // another device: added
            record(&[None], 2048, "H200"),      // new key, no winner: added
        ])
        .unwrap();
    assert_eq!(
        summary,
        MergeSummary {
            added: 2,
            replaced: 1,
            kept: 1,
            restored: 0,
        }
    );
    let best = db.get(&record(&[], 4096, "H200").key()).unwrap().unwrap();
    assert_eq!(best.winner().unwrap().1, 1.0);
    assert_eq!(db.records().unwrap().len(), 3);
}

#[test]
fn gc_removes_only_stale_records() {
    let dir = tempfile::tempdir().unwrap();
    let db = TuningDb::open(&dir.path().join("db")).unwrap();
    let mut old = record(&[Some(1.0)], 1024, "H200");
    old.template_hash = "old".into();
    db.put(&old).unwrap();
    db.put(&record(&[Some(1.0)], 2048, "H200")).unwrap();
    let current = |_| "abc".to_string();
    let removed = db.gc(current).unwrap();
    assert_eq!(removed, vec![old.key()]);
    let left = db.records().unwrap();
    assert_eq!(left.len(), 1);
    assert!(!left[0].is_stale(current));
}

#[test]
fn foreign_and_corrupt_stores_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    // A folder with other files in it.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"hello").unwrap();
    let e = TuningDb::open(&other).err().unwrap().to_string();
    assert!(e.contains("not a fa4-gen tuning database"), "{e}");
    assert_eq!(std::fs::read(other.join("notes.txt")).unwrap(), b"hello");
    // A file where the folder should be.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let e = TuningDb::open(&file).err().unwrap().to_string();
    assert!(e.contains("it is a file"), "{e}");
    // A sled store written by something else.
    let foreign = dir.path().join("foreign");
    {
        let s = sled::open(&foreign).unwrap();
        s.insert(b"k", b"v").unwrap();
        s.flush().unwrap();
    }
    let e = TuningDb::open(&foreign).err().unwrap().to_string();
    assert!(e.contains("without fa4-gen's format mark"), "{e}");
    // An export with a wrong format or a record under the wrong key.
    let e = parse_export(Path::new("t.json"), r#"{"format":"x","records":{}}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a tuning-db export"), "{e}");
    let r = record(&[Some(1.0)], 4096, "H200");
    let text = serde_json::json!({"format": FORMAT, "records": {"wrong": r}}).to_string();
    let e = parse_export(Path::new("t.json"), &text)
        .unwrap_err()
        .to_string();
    assert!(e.contains("belongs under"), "{e}");
}
