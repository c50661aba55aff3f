//! How the tuner times and checks a candidate: the problem per bucket, the kernel time
//! per timing, the finals' settling and passes, and the verify cases; recorded with
//! every record as its [`TimingPolicy`].

use fa4_spec::{Bucket, KernelSpec, MaskKind};

use crate::db::TimingPolicy;
use crate::measure::bench::{ragged_mix, Cell};

/// The problem timed for a bucket: the FlashAttention-3 paper's shapes (16384 tokens,
/// hidden 2048), so `batch = tokens / seqlen` and `heads = hidden / head_dim`.
pub const TOKENS: i32 = 16384;
pub const HIDDEN: i32 = 2048;
/// Softcap kernels are timed with Gemma-2's cap; paged kernels with pages of 16 keys.
/// (Local masks: see [`bucket_cell`].)
pub const SOFTCAP: f32 = 50.0;
pub const PAGE_SIZE: i32 = 16;
/// Kernel time spent per (candidate, bucket): runs are timed one by one after an L2
/// flush until this is spent, at least 10 and at most 200 of them.
pub const TIME_BUDGET_MS: f64 = 25.0;
/// Candidates per key re-timed in the finals, the default included. Screening times
/// with two warm-up runs and no settling time, so its readings run 0 to 13% above the
/// benchmark's (which settles the clocks first) and can rank two close candidates the
/// wrong way round; settling every candidate of every key would cost too much device
/// time, so only the few that can win are re-timed.
pub const FINALISTS: usize = 4;
/// How long a finalist runs back to back before its finals timing, so the GPU clocks
/// reach their sustained level: the benchmark's warm-up (`bench::time_kernel`, as
/// triton's do_bench does for the peers).
pub const SETTLE_MS: f64 = 50.0;
/// How long the first finalist timed for a key runs back to back instead: it follows
/// the set-up of the key's problem, during which the GPU idled, and 50 ms did not bring
/// the clocks back down to where the next finalists were timed (the default, always
/// first, read 1% faster against its screening than the others did, and d128 at 1024
/// keys kept it on a 0.5% lead over a tile that runs 11% faster held at the power cap).
pub const KEY_WARMUP_MS: f64 = 250.0;
/// Finals passes of every key, each on its own buffer set (pass p on placement p, behind
/// a spacer of its own size: [`GpuMeasurer`]). Each pass times every finalist once, in
/// an order rotated by one per pass; the mean of a finalist's passes ranks it.
/// One settled timing decided near-ties on readings another call put 10% off (d256
/// at 512 keys), and a pick could trail its default by 5 to 12% on one pass in three
/// to eight: a clock dip under the power cap about a second into sustained load, not
/// the buffers' addresses. Passes at other times and on other buffer sets outvote
/// both. The mean, not the median: a pass slow for every finalist adds the same to
/// each mean and cancels, while the median let a tile faster on two passes of three
/// but slower on average win (d64 at 1024 keys; 7% faster over six sets).
pub const FINAL_PASSES: usize = 3;
/// The standard verify cases every candidate passes before it is timed: odd lengths,
/// more keys than queries, GQA, ragged varlen batches with empty sequences, prefixes,
/// and a grid whose unmasked persistent kernels split their last tiles by keys.
pub const CHECK_CASES: &[&str] = &[
    "s17",
    "q77_k513",
    "gqa8to2_s257",
    "varlen_ragged",
    "varlen_prefix",
    "split_q2200_k4100",
];

/// How the tuner times, as recorded with every record.
pub fn timing_policy() -> TimingPolicy {
    TimingPolicy {
        warmup: 2,
        runs: 10,
        l2_flush: true,
        budget_ms: TIME_BUDGET_MS,
        finalists: FINALISTS as u32,
        settle_ms: SETTLE_MS,
        key_warmup_ms: KEY_WARMUP_MS,
        final_passes: FINAL_PASSES as u32,
        final_placements: FINAL_PASSES as u32,
        short_key_passes: 0,
        short_key_ms: 0.0,
    }
}

/// The problem a bucket is timed on. A local mask's bucket is the width of its window
/// ([`Bucket::of_call`]): window `(bucket, 0)` over sequences four times as long, at
/// least 4096 (gpt-oss's prompts in `bench --layers`), so nearly every tile sees the
/// whole window. A ragged bucket: [`ragged_cell`].
pub fn bucket_cell(spec: &KernelSpec, bucket: Bucket) -> Cell {
    if bucket.ragged {
        return ragged_cell(spec, bucket);
    }
    let (seqlen, window) = if spec.mask == MaskKind::Local {
        let width = bucket.seqlen as i32;
        ((4 * width).clamp(4096, Bucket::MAX as i32), (width, 0))
    } else {
        (bucket.seqlen as i32, (-1, -1))
    };
    let heads = (HIDDEN / spec.head_dim as i32).max(1);
    Cell {
        head_dim: spec.head_dim,
        head_dim_v: spec.head_dim_v,
        seqlen,
        batch: (TOKENS / seqlen).max(1),
        heads,
        heads_kv: heads,
        varlen: false,
        layer: None,
        mix: None,
        features: Some(spec.features),
        mask: spec.mask,
        window,
        softcap: SOFTCAP,
    }
}

/// Query heads per KV head of a ragged bucket's problem.
pub const RAGGED_KV_HEADS: i32 = 8;

/// The problem a ragged bucket is timed on: a varlen batch of prompts of mixed length,
/// the longest the bucket's ([`ragged_mix`]: log-uniform from 32 tokens, [`TOKENS`] in
/// all), over GQA heads as serving models have them: 8 KV heads, and query heads making
/// a hidden size of about 4096 (Llama-3-8B's 32:8 at head dim 128, gpt-oss-20b's 64:8 at
/// 64), causal or unmasked as the spec.
pub fn ragged_cell(spec: &KernelSpec, bucket: Bucket) -> Cell {
    let mix = ragged_mix(bucket.seqlen, TOKENS);
    let group = (2 * HIDDEN / RAGGED_KV_HEADS / spec.head_dim as i32).max(1);
    Cell {
        head_dim: spec.head_dim,
        head_dim_v: spec.head_dim_v,
        seqlen: mix.max_q(),
        batch: mix.seqlens.len() as i32,
        heads: RAGGED_KV_HEADS * group,
        heads_kv: RAGGED_KV_HEADS,
        varlen: true,
        layer: None,
        mix: Some(mix),
        features: Some(spec.features),
        mask: spec.mask,
        window: (-1, -1),
        softcap: SOFTCAP,
    }
}
