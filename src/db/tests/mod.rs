//! The tuning database's tests: the choice rule (`record`), the sled store (`store`),
//! the export and its slim records (`export`).

use fa4_spec::{Arch, Bucket, Dtype, KernelSpec, MaskKind, TileConfig};

use super::*;

mod export;
mod record;
mod serving;
mod store;
mod tune;

fn record(ms: &[Option<f64>], seqlen: u32, gpu: &str) -> Record {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    Record {
        template: crate::space::Template::Portable,
        spec,
        bucket: Bucket::of(seqlen),
        device: Device {
            name: gpu.into(),
            sm_count: 132,
            driver: "13.0".into(),
            nvrtc: "13.0".into(),
        },
        template_hash: "abc".into(),
        timing: TimingPolicy {
            warmup: 3,
            runs: 50,
            l2_flush: true,
            budget_ms: 25.0,
            finalists: 0,
            settle_ms: 0.0,
            key_warmup_ms: 0.0,
            final_passes: 0,
            final_placements: 0,
            short_key_passes: 0,
            short_key_ms: 0.0,
        },
        date: "2026-11-30T10:00:00Z".into(),
        candidates: ms
            .iter()
            .enumerate()
            .map(|(i, m)| Candidate {
                config: TileConfig {
                    block_m: 128,
                    block_n: 32 << i,
                    warps: 4,
                    stages: 1,
                    switches: Default::default(),
                },
                kernel: format!("k{i}"),
                outcome: match m {
                    Some(ms) => Outcome::Measured {
                        ms: *ms,
                        spread: 0.01,
                        tflops: 100.0 / ms,
                        registers: 200,
                        settled_ms: None,
                        settled_passes: Vec::new(),
                        code_hash: format!("c{i}"),
                    },
                    None => Outcome::Failed {
                        error: "O relative L2 error 1e-1".into(),
                    },
                },
            })
            .collect(),
    }
}

/// `record(ms)` with the finals' settled times `settled` (by candidate).
fn settle(mut r: Record, settled: &[Option<f64>]) -> Record {
    for (c, s) in r.candidates.iter_mut().zip(settled) {
        c.set_settled_ms(*s);
    }
    r
}

/// The kernels of `e`'s candidates, in order.
fn kernels(e: &Entry) -> Vec<&str> {
    e.record
        .candidates
        .iter()
        .map(|c| c.kernel.as_str())
        .collect()
}
