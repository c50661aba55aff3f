//! The timed problems, the shards of a run and the arguments that name them.

use super::*;

#[test]
fn bucket_cells_follow_the_paper_grid() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    let c = bucket_cell(&spec, Bucket::of(512));
    assert_eq!((c.seqlen, c.batch, c.heads, c.heads_kv), (512, 32, 16, 16));
    // Longer than the token count: one sequence.
    let c = bucket_cell(&spec, Bucket::of(32768));
    assert_eq!((c.seqlen, c.batch), (32768, 1));
    // A local key: a window as wide as its bucket, which the dispatcher maps back to it.
    let local = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Local);
    for (bucket, seqlen, batch) in [
        (128, 4096, 4),
        (1024, 4096, 4),
        (2048, 8192, 2),
        (16384, 32768, 1),
    ] {
        let c = bucket_cell(&local, Bucket::of(bucket));
        assert_eq!(
            (c.seqlen, c.batch, c.window),
            (seqlen, batch, (bucket as i32, 0))
        );
        assert_eq!(
            Bucket::of_call(MaskKind::Local, c.window, c.seqlen as u32).seqlen,
            bucket
        );
    }
}

#[test]
fn shards_split_the_keys_without_overlap() {
    let specs: Vec<(Template, KernelSpec)> = [MaskKind::None, MaskKind::Causal]
        .iter()
        .map(|&m| {
            (
                Template::Portable,
                KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, m),
            )
        })
        .collect();
    let buckets: Vec<Bucket> = Bucket::all().collect();
    let all = shard_keys(&specs, &buckets, 0, 1);
    assert_eq!(all.len(), 2 * 9);
    let mut union: Vec<Key> = (0..4)
        .flat_map(|i| shard_keys(&specs, &buckets, i, 4))
        .collect();
    union.sort();
    assert_eq!(union, all);
    // Round robin: each shard holds short and long buckets.
    let first = shard_keys(&specs, &buckets, 0, 4);
    assert!(
        first.iter().any(|k| k.bucket.seqlen <= 512)
            && first.iter().any(|k| k.bucket.seqlen >= 4096)
    );
}

#[test]
fn arguments_parse_or_say_what_is_expected() {
    assert_eq!(parse_shard("1/4"), Ok((1, 4)));
    assert!(parse_shard("4/4").unwrap_err().contains("0 <= i < n"));
    assert!(parse_shard("x").is_err());
    assert_eq!(parse_budget("10m"), Ok(Duration::from_secs(600)));
    assert_eq!(parse_budget("90s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_budget("45"), Ok(Duration::from_secs(45)));
    assert!(parse_budget("10d").unwrap_err().contains("unit"));
    assert!(parse_budget("-1m").is_err());
    assert_eq!(parse_buckets(&[]).unwrap().len(), 9);
    assert_eq!(
        parse_buckets(&[4096, 512, 4096]).unwrap(),
        vec![Bucket::of(512), Bucket::of(4096)]
    );
    assert!(parse_buckets(&[1000]).unwrap_err().contains("128, 256"));
}
