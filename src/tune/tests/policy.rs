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

#[test]
fn a_ragged_bucket_is_timed_on_a_ragged_gqa_batch_of_its_longest_prompt() {
    for (head_dim, heads) in [(64, 64), (128, 32), (256, 16)] {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, head_dim, MaskKind::Causal);
        let c = bucket_cell(&spec, Bucket::of(4096).ragged());
        let mix = c.mix.expect("a ragged batch");
        assert_eq!((c.heads, c.heads_kv), (heads, 8), "d{head_dim}");
        assert!(c.varlen);
        assert_eq!(mix.max_q(), 4096, "its longest prompt names the bucket");
        assert_eq!(mix.total_q(), i64::from(TOKENS));
        assert!(mix.seqlens.len() > 4, "{:?}", mix.seqlens);
        assert!(mix
            .seqlens
            .iter()
            .all(|&(q, k)| q == k && (32..=4096).contains(&q)));
        // Lengths of every order of magnitude up to the bucket.
        assert!(mix.seqlens.iter().any(|s| s.0 < 512));
        // Drawn once: the same batch every time.
        assert!(std::ptr::eq(
            mix,
            bucket_cell(&spec, Bucket::of(4096).ragged()).mix.unwrap()
        ));
    }
    // Past the token count the batch grows to twice the longest prompt.
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
    let mix = bucket_cell(&spec, Bucket::of(32768).ragged()).mix.unwrap();
    assert_eq!((mix.max_q(), mix.total_q()), (32768, 65536));
}

#[test]
fn ragged_keys_are_tuned_for_causal_and_unmasked_specs_only() {
    let specs: Vec<(Template, KernelSpec)> = [MaskKind::None, MaskKind::Causal, MaskKind::Local]
        .iter()
        .map(|&m| {
            (
                Template::Hopper,
                KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, m),
            )
        })
        .collect();
    let dense = parse_buckets(&[1024, 2048]).unwrap();
    let buckets = with_ragged(&dense, "both").unwrap();
    assert_eq!(buckets.len(), 4);
    let keys = shard_keys(&specs, &buckets, 0, 1);
    let ragged: Vec<MaskKind> = keys
        .iter()
        .filter(|k| k.bucket.ragged)
        .map(|k| k.spec.mask)
        .collect();
    assert_eq!(ragged.len(), 4);
    assert!(!ragged.contains(&MaskKind::Local));
    assert_eq!(keys.len(), 3 * 2 + 2 * 2);
    assert!(with_ragged(&dense, "yes").unwrap().iter().all(|b| b.ragged));
    assert_eq!(with_ragged(&dense, "no").unwrap(), dense);
    assert!(with_ragged(&dense, "maybe")
        .unwrap_err()
        .contains("both, yes or no"));
    // A library request tunes both by default, as the CLI does.
    let request = TuneRequest::new(Arch::Sm90, specs);
    assert_eq!(request.buckets.len(), 18);
}
