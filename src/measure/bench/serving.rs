//! The serving batches of `bench --serving`: ragged varlen prefill batches as engines
//! send them, on the attention layers of the models they serve.
//!
//! A serving engine prefills many prompts of mixed length in one call, packed with
//! `cu_seqlens` (and, with chunked prefill and a prefix cache, a chunk of new queries
//! per sequence against keys that include the cached prefix). The mixes are drawn once
//! from fixed seeds, so every run, and the peers' script reading the rows
//! (`bench/peers_serving.py`), times the same batches.

use std::sync::OnceLock;

use fa4_spec::MaskKind;

use super::Cell;

/// One serving batch: each sequence's (new queries, keys), keys >= queries (a cached
/// prefix is the difference).
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    pub name: &'static str,
    pub what: &'static str,
    pub seqlens: Vec<(i32, i32)>,
}

impl Mix {
    pub fn total_q(&self) -> i64 {
        self.seqlens.iter().map(|s| i64::from(s.0)).sum()
    }
    pub fn max_q(&self) -> i32 {
        self.seqlens.iter().map(|s| s.0).max().unwrap_or(0)
    }
}

/// A model's attention layer: (name, head dim, query heads, KV heads), causal.
pub const SERVING_MODELS: [(&str, u32, i32, i32); 2] =
    [("llama-3-8b", 128, 32, 8), ("gpt-oss-20b", 64, 64, 8)];

/// splitmix64: a fixed, dependency-free stream of draws for the mixes.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Log-uniform in [lo, hi].
    fn log_uniform(&mut self, lo: i32, hi: i32) -> i32 {
        let (a, b) = (f64::from(lo).ln(), f64::from(hi).ln());
        ((a + (b - a) * self.unit()).exp().round() as i32).clamp(lo, hi)
    }
    /// Log-normal with `median` and `sigma`, clipped to [lo, hi].
    fn log_normal(&mut self, median: f64, sigma: f64, lo: i32, hi: i32) -> i32 {
        // Box-Muller.
        let (u, v) = (self.unit().max(1e-12), self.unit());
        let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
        ((median.ln() + sigma * z).exp().round() as i32).clamp(lo, hi)
    }
}

/// Lengths drawn until they reach `tokens`, the last one cut to land on it exactly, in
/// the drawn order (engines pack prompts as they arrive, not sorted).
fn fill(tokens: i32, mut draw: impl FnMut() -> i32) -> Vec<i32> {
    let mut lens = Vec::new();
    let mut left = tokens;
    while left > 0 {
        let len = draw().min(left);
        lens.push(len);
        left -= len;
    }
    lens
}

fn self_attention(lens: &[i32]) -> Vec<(i32, i32)> {
    lens.iter().map(|&l| (l, l)).collect()
}

/// The serving mixes, built once.
pub fn serving_mixes() -> &'static [Mix] {
    static MIXES: OnceLock<Vec<Mix>> = OnceLock::new();
    MIXES.get_or_init(|| {
        let mut d = Draws(0x5e7e_b47c);
        // The shortest and the longest of the mix first drawn, then the rest.
        let mut mixed = vec![37, 7000];
        mixed.extend(fill(20480 - 7037, || d.log_uniform(37, 7000)));
        let short = fill(16384, || d.log_uniform(37, 1500));
        let trace = fill(16384, || d.log_normal(1000.0, 1.0, 16, 8192));
        let chunked: Vec<(i32, i32)> = fill(8192, || d.log_uniform(64, 4096))
            .into_iter()
            .map(|q| {
                let prefix = if d.unit() < 0.25 {
                    0
                } else {
                    d.log_uniform(256, 16384)
                };
                (q, q + prefix)
            })
            .collect();
        vec![
            Mix {
                name: "mixed",
                what: "about 20k tokens of prompts from 37 to 7,000 tokens (log-uniform)",
                seqlens: self_attention(&mixed),
            },
            Mix {
                name: "short",
                what: "16k tokens of short prompts, 37 to 1,500 tokens (log-uniform)",
                seqlens: self_attention(&short),
            },
            Mix {
                name: "trace",
                what: "16k tokens of prompts drawn log-normal, median 1,000, sigma 1, 16 to 8,192 \
                       (the shape of public conversation traces' prompt lengths)",
                seqlens: self_attention(&trace),
            },
            Mix {
                name: "long",
                what: "three long prompts: 7,000, 7,000 and 4,000 tokens",
                seqlens: self_attention(&[7000, 7000, 4000]),
            },
            Mix {
                name: "equal",
                what: "eight prompts of 2,048 tokens",
                seqlens: self_attention(&[2048; 8]),
            },
            Mix {
                name: "chunked",
                what: "a chunked-prefill step: 8,192 new tokens over sequences of 64 to 4,096 new \
                       tokens, three in four behind a cached prefix of 256 to 16k keys",
                seqlens: chunked,
            },
        ]
    })
}

/// The ragged batch a ragged bucket of `seqlen` is tuned on: one sequence of `seqlen`
/// tokens (the batch's longest, which names the bucket), then prompts drawn log-uniform
/// from 32 to `seqlen` tokens until the batch holds `tokens` (at least twice `seqlen`, so
/// the longest never stands alone), in the drawn order. Drawn once per bucket from a
/// fixed seed.
pub fn ragged_mix(seqlen: u32, tokens: i32) -> &'static Mix {
    static MIXES: OnceLock<std::sync::Mutex<Vec<&'static Mix>>> = OnceLock::new();
    let seqlen = seqlen.min(i32::MAX as u32) as i32;
    let tokens = tokens.max(2 * seqlen);
    let mut mixes = MIXES.get_or_init(Default::default).lock().expect("mixes");
    if let Some(m) = mixes
        .iter()
        .find(|m| m.max_q() == seqlen && m.total_q() == i64::from(tokens))
    {
        return m;
    }
    let mut d = Draws(0x7a66_ed00 ^ seqlen as u64);
    let lo = 32.min(seqlen);
    let mut lens = vec![seqlen];
    lens.extend(fill(tokens - seqlen, || d.log_uniform(lo, seqlen)));
    let mix: &'static Mix = Box::leak(Box::new(Mix {
        name: "ragged",
        what: "prompts log-uniform up to the bucket's length behind one of that length",
        seqlens: self_attention(&lens),
    }));
    mixes.push(mix);
    mix
}

/// The cells of `bench --serving MODELS` (`all`, or model names): every mix on every
/// model's layer, causal, packed with cu_seqlens.
pub fn serving_cells(models: &[String]) -> Result<Vec<Cell>, String> {
    let mut cells = Vec::new();
    for &(model, head_dim, heads, heads_kv) in &SERVING_MODELS {
        if !models.iter().any(|m| m == "all" || m == model) {
            continue;
        }
        for mix in serving_mixes() {
            cells.push(Cell {
                head_dim,
                head_dim_v: head_dim,
                seqlen: mix.max_q(),
                batch: mix.seqlens.len() as i32,
                heads,
                heads_kv,
                varlen: true,
                layer: Some(model),
                mix: Some(mix),
                features: None,
                mask: MaskKind::Causal,
                window: (-1, -1),
                softcap: 0.0,
            });
        }
    }
    if let Some(unknown) = models
        .iter()
        .find(|m| *m != "all" && !SERVING_MODELS.iter().any(|s| s.0 == m.as_str()))
    {
        let names: Vec<&str> = SERVING_MODELS.iter().map(|s| s.0).collect();
        return Err(format!(
            "unknown serving model `{unknown}` (expected all, {})",
            names.join(", ")
        ));
    }
    Ok(cells)
}
