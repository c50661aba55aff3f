//! What a run covers: its keys (specs x buckets, one shard of them), the keys it
//! leaves stale, and the wall time it may take.

use std::time::Duration;

use fa4_spec::{Bucket, Features, KernelSpec, MaskKind};

use super::Key;
use crate::db::{Device, Record};
use crate::space::Template;

/// The keys measured on `device` (same GPU name and SM count) whose records name another
/// template version than `current` and that `run` does not cover: after a template edit,
/// a tune of some specs leaves the others' records stale, and `build-cache` and `bench
/// --db` serve those keys' defaults until they are tuned too. Sorted, without repeats.
pub fn stale_outside(
    records: &[Record],
    device: &Device,
    current: &dyn Fn(Template) -> String,
    run: &[Key],
) -> Vec<Key> {
    let mut out: Vec<Key> = records
        .iter()
        .filter(|r| r.device.name == device.name && r.device.sm_count == device.sm_count)
        .filter(|r| r.is_stale(current))
        .map(Key::of)
        .filter(|k| !run.contains(k))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Every key of `specs` x `buckets` (ragged buckets for the specs that have them:
/// [`Bucket::has_ragged`]), sorted, and the `index`-th of `count` shards of them (round
/// robin, so every shard gets short and long buckets).
pub fn shard_keys(
    specs: &[(Template, KernelSpec)],
    buckets: &[Bucket],
    index: usize,
    count: usize,
) -> Vec<Key> {
    let mut keys: Vec<Key> = specs
        .iter()
        .flat_map(|&(template, spec)| {
            buckets
                .iter()
                .filter(move |b| !b.ragged || Bucket::has_ragged(spec.mask))
                .map(move |&bucket| Key {
                    template,
                    spec,
                    bucket,
                })
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .enumerate()
        .filter(|(i, _)| i % count.max(1) == index)
        .map(|(_, k)| k)
        .collect()
}

/// Parses `--shard i/n` (0 <= i < n).
pub fn parse_shard(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--shard {text}: expected i/n with 0 <= i < n, e.g. 0/4");
    let (i, n) = text.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// Parses a wall-time budget: `90s`, `10m`, `1h`, or plain seconds.
pub fn parse_budget(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => t.split_at(i),
        None => (t, "s"),
    };
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
        .ok_or_else(|| {
            format!("--budget {text}: expected a positive time such as 90s, 10m or 1h")
        })?;
    let seconds = match unit {
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("--budget {text}: the unit is s, m or h")),
    };
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses `--buckets`: sequence lengths that are bucket bounds (powers of two from 128
/// to 32768).
pub fn parse_buckets(values: &[u32]) -> Result<Vec<Bucket>, String> {
    if values.is_empty() {
        return Ok(Bucket::all().collect());
    }
    let mut out = Vec::new();
    for &v in values {
        let b = Bucket::of(v);
        if b.seqlen != v {
            let all: Vec<String> = Bucket::all().map(|b| b.seqlen.to_string()).collect();
            return Err(format!(
                "--buckets {v} is not a bucket; buckets are {}",
                all.join(", ")
            ));
        }
        out.push(b);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Parses `--ragged` (both, yes or no): `buckets` (dense) with their ragged twins, the
/// ragged ones alone, or the dense ones.
pub fn with_ragged(buckets: &[Bucket], ragged: &str) -> Result<Vec<Bucket>, String> {
    let twins = buckets.iter().map(|b| b.ragged());
    let mut out: Vec<Bucket> = match ragged {
        "both" => buckets.iter().copied().chain(twins).collect(),
        "yes" => twins.collect(),
        "no" => buckets.to_vec(),
        other => return Err(format!("--ragged {other}: expected both, yes or no")),
    };
    out.sort();
    out.dedup();
    Ok(out)
}

/// The specs `tune` covers for a head dim when not told otherwise: both dtypes, causal
/// and not, no features.
pub fn default_masks() -> Vec<MaskKind> {
    vec![MaskKind::None, MaskKind::Causal]
}

/// Features tuned when not told otherwise.
pub fn default_features() -> Vec<Features> {
    vec![Features::default()]
}
