use super::*;

fn gpu(name: &str) -> GpuId {
    GpuId {
        name: name.into(),
        sm_count: 132,
    }
}

#[test]
fn an_arch_serves_its_own_gpus_records_else_the_gpu_with_the_most() {
    let records = vec![
        record(&[Some(1.0)], 1024, "H100"),
        record(&[Some(1.0)], 2048, "H200"),
        record(&[Some(1.0)], 4096, "H200"),
    ];
    assert_eq!(served_gpu(&records, Arch::Sm90, None), Some(gpu("H200")));
    assert_eq!(
        served_gpu(&records, Arch::Sm90, Some(&gpu("H100"))),
        Some(gpu("H100"))
    );
    // A GPU with no records of its own gets the most-tuned one's, not nothing.
    assert_eq!(
        served_gpu(&records, Arch::Sm90, Some(&gpu("GH200"))),
        Some(gpu("H200"))
    );
    assert_eq!(served_gpu(&records, Arch::Sm80, None), None);
}

#[test]
fn a_tie_between_gpus_goes_to_the_name_first_in_order() {
    let records = vec![
        record(&[Some(1.0)], 1024, "B"),
        record(&[Some(1.0)], 1024, "A"),
    ];
    assert_eq!(served_gpu(&records, Arch::Sm90, None), Some(gpu("A")));
}

#[test]
fn tuned_choices_reads_the_served_gpus_current_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = TuningDb::open(&path).unwrap();
    // H200: two current records (the second's winner, candidate 1, is 2x faster) and
    // one of another template version; H100: one record.
    db.put(&record(&[Some(1.0)], 1024, "H200")).unwrap();
    db.put(&record(&[Some(2.0), Some(1.0)], 2048, "H200"))
        .unwrap();
    let mut stale = record(&[Some(1.0)], 4096, "H200");
    stale.template_hash = "old".into();
    db.put(&stale).unwrap();
    db.put(&record(&[Some(1.0)], 1024, "H100")).unwrap();
    drop(db);

    let templates = [crate::space::Template::Portable];
    let current = |_| "abc".to_string();
    let picks = tuned_choices(&path, Arch::Sm90, &gpu("GH200"), &templates, current).unwrap();
    assert_eq!(picks.measured_on, Some(gpu("H200")));
    assert_eq!(picks.stale, 1);
    assert_eq!(picks.choices.len(), 2);
    let spec = record(&[], 2048, "H200").spec;
    let chosen = &picks.choices[&(
        crate::space::Template::Portable,
        spec,
        fa4_spec::Bucket::of(2048),
    )];
    assert_eq!(
        chosen.block_n, 64,
        "the 2048 bucket serves its winner, candidate 1"
    );

    // The H100: its own record at 1024 (in place of the H200's), the H200's at 2048, and
    // the stale 4096 served the default.
    let own = tuned_choices(&path, Arch::Sm90, &gpu("H100"), &templates, current).unwrap();
    assert_eq!(
        (own.measured_on, own.choices.len(), own.stale),
        (None, 2, 1)
    );
    let key = |seqlen| {
        (
            crate::space::Template::Portable,
            spec,
            fa4_spec::Bucket::of(seqlen),
        )
    };
    assert_eq!(own.choices[&key(2048)].block_n, 64, "the H200's 2048");
}

#[test]
fn a_gpus_own_ragged_records_join_the_most_tuned_gpus_dense_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = TuningDb::open(&path).unwrap();
    db.put(&record(&[Some(1.0)], 2048, "H200")).unwrap();
    db.put(&record(&[Some(1.0)], 4096, "H200")).unwrap();
    let mut ragged = record(&[Some(2.0), Some(1.0)], 2048, "H100");
    ragged.bucket = ragged.bucket.ragged();
    db.put(&ragged).unwrap();
    drop(db);
    let templates = [crate::space::Template::Portable];
    let picks = tuned_choices(&path, Arch::Sm90, &gpu("H100"), &templates, |_| {
        "abc".into()
    })
    .unwrap();
    let buckets: Vec<String> = picks.choices.keys().map(|k| k.2.to_string()).collect();
    assert_eq!(buckets, ["2048", "ragged 2048", "4096"]);
}
