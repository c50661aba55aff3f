use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Arch, ParseError};

/// Element type of Q, K, V and O. Accumulation is always f32, LSE is always f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Bf16,
    Fp16,
    /// FP8 (OCP e4m3, PyTorch's `float8_e4m3fn`) Q, K and V with f32 descales per
    /// (sequence, KV head); O comes out in bf16 (`Dtype::output`). Hopper template only.
    E4m3,
}

impl Dtype {
    /// The 16-bit dtypes every template offers: what a listing or tune covers unless
    /// asked for others.
    pub const ALL: [Dtype; 2] = [Dtype::Bf16, Dtype::Fp16];
    /// Every dtype a spec may name.
    pub const EVERY: [Dtype; 3] = [Dtype::Bf16, Dtype::Fp16, Dtype::E4m3];

    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
            Dtype::E4m3 => "e4m3",
        }
    }

    /// Bytes per element of Q, K and V.
    pub fn size(self) -> u32 {
        match self {
            Dtype::Bf16 | Dtype::Fp16 => 2,
            Dtype::E4m3 => 1,
        }
    }

    /// The dtype of O: the inputs' own, but bf16 for FP8 inputs (as FlashAttention-3's
    /// FP8 forward and cuDNN's FP8 SDPA return by default).
    pub fn output(self) -> Dtype {
        match self {
            Dtype::E4m3 => Dtype::Bf16,
            d => d,
        }
    }

    /// FP8 inputs: Q/K/V scaled by descales that the kernel folds into its softmax scale
    /// and its output.
    pub fn is_fp8(self) -> bool {
        self == Dtype::E4m3
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dtype {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" => Ok(Dtype::Bf16),
            "fp16" | "f16" | "float16" | "half" => Ok(Dtype::Fp16),
            "e4m3" | "fp8" | "float8_e4m3fn" | "fp8_e4m3" => Ok(Dtype::E4m3),
            _ => Err(ParseError {
                what: "dtype",
                given: s.to_string(),
                expected: "bf16, fp16, e4m3".into(),
            }),
        }
    }
}

/// Which (query, key) pairs take part in the softmax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MaskKind {
    /// Every query sees every key.
    None,
    /// Query `i` sees key `j` when `j <= i + seqlen_k - seqlen_q`: aligned to the
    /// bottom-right corner as FlashAttention does, so the last query sees every key
    /// (a cached prefix followed by new tokens).
    Causal,
    /// A sliding window `(left, right)` given at run time, as FlashAttention's
    /// `window_size`: query `i` sees key `j` when
    /// `i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right`, a negative
    /// bound meaning unbounded on that side. Causal with a window is `(left, 0)`.
    Local,
}

impl MaskKind {
    pub const ALL: [MaskKind; 3] = [MaskKind::None, MaskKind::Causal, MaskKind::Local];

    pub fn name(self) -> &'static str {
        match self {
            MaskKind::None => "none",
            MaskKind::Causal => "causal",
            MaskKind::Local => "local",
        }
    }
}

impl fmt::Display for MaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MaskKind {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "full" | "noncausal" | "non-causal" | "0" => Ok(MaskKind::None),
            "causal" | "1" => Ok(MaskKind::Causal),
            "local" | "window" | "sliding" => Ok(MaskKind::Local),
            _ => Err(ParseError {
                what: "mask",
                given: s.to_string(),
                expected: "none, causal, local".into(),
            }),
        }
    }
}

/// What a kernel is compiled to do beyond plain attention (each one a template switch).
///
/// Varlen batches (`cu_seqlens_q/k`, `seqused_k`) are not a feature: every kernel reads
/// them at run time, since they change only a few scalar loads per thread block.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Features {
    /// A learned logit per query head that joins the softmax denominator only
    /// (gpt-oss's attention sinks).
    #[serde(default)]
    pub sinks: bool,
    /// Logit soft-capping, `cap * tanh(score / cap)` on the scaled scores (Gemma 2).
    #[serde(default)]
    pub softcap: bool,
    /// K and V read through a page table (prefix-cached prefill): a gather path.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paged_kv: bool,
}

impl Features {
    /// Every combination, plain first.
    pub const ALL: [Features; 8] = {
        let mut all = [Features {
            sinks: false,
            softcap: false,
            paged_kv: false,
        }; 8];
        let mut i = 0;
        while i < 8 {
            all[i] = Features {
                sinks: i & 1 != 0,
                softcap: i & 2 != 0,
                paged_kv: i & 4 != 0,
            };
            i += 1;
        }
        all
    };

    /// The names of the features set, in a fixed order.
    fn parts(self) -> impl Iterator<Item = &'static str> {
        [
            (self.sinks, "sinks"),
            (self.softcap, "softcap"),
            (self.paged_kv, "paged"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
    }

    /// `none`, or the features joined with `+`: `sinks+softcap+paged`.
    pub fn name(self) -> String {
        let parts: Vec<&str> = self.parts().collect();
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join("+")
        }
    }
}

impl fmt::Display for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for Features {
    type Err = ParseError;

    /// `none`, or any of `sinks`, `softcap`, `paged` joined with `+` in any order.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut f = Features::default();
        for part in s.trim().to_ascii_lowercase().split('+') {
            match part.trim() {
                "none" | "" => {}
                "sinks" | "sink" => f.sinks = true,
                "softcap" => f.softcap = true,
                "paged" | "paged_kv" | "paged-kv" => f.paged_kv = true,
                _ => {
                    return Err(ParseError {
                        what: "feature set",
                        given: s.to_string(),
                        expected: "none, sinks, softcap, paged (joined with +, as in sinks+paged)"
                            .into(),
                    })
                }
            }
        }
        Ok(f)
    }
}

/// What a caller needs computed: everything that changes the kernel's meaning.
///
/// Two problems with the same spec can run the same kernel; problem sizes (batch,
/// seqlens, heads) are run-time arguments and never part of a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KernelSpec {
    pub arch: Arch,
    pub dtype: Dtype,
    /// Head dim of Q and K.
    pub head_dim: u32,
    /// Head dim of V and O.
    pub head_dim_v: u32,
    pub mask: MaskKind,
    #[serde(default)]
    pub features: Features,
}

impl KernelSpec {
    /// A spec without score features whose V head dim equals its QK head dim.
    pub fn new(arch: Arch, dtype: Dtype, head_dim: u32, mask: MaskKind) -> Self {
        KernelSpec {
            arch,
            dtype,
            head_dim,
            head_dim_v: head_dim,
            mask,
            features: Features::default(),
        }
    }

    /// Short stable tag for file names: `sm90_bf16_d128_causal` (`d192v128` when the
    /// head dims differ; `_sinks`, `_softcap`, `_paged` appended for features).
    pub fn tag(&self) -> String {
        let dims = if self.head_dim == self.head_dim_v {
            format!("d{}", self.head_dim)
        } else {
            format!("d{}v{}", self.head_dim, self.head_dim_v)
        };
        let mut t = format!("{}_{}_{}_{}", self.arch, self.dtype, dims, self.mask);
        for part in self.features.parts() {
            t.push('_');
            t.push_str(part);
        }
        t
    }
}

impl fmt::Display for KernelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arch={} dtype={} head_dim={} head_dim_v={} mask={} features={}",
            self.arch, self.dtype, self.head_dim, self.head_dim_v, self.mask, self.features
        )
    }
}

/// How one kernel computes a spec: the tile shape and the template's own switches.
///
/// `switches` holds the knobs a particular template exposes (for example whether Q
/// stays in registers); its keys are sorted so the config serialises, prints and
/// hashes the same way every time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TileConfig {
    /// Query rows per thread block.
    pub block_m: u32,
    /// Key/value rows per main-loop iteration.
    pub block_n: u32,
    /// Warps per thread block.
    pub warps: u32,
    /// K/V tiles in flight (shared-memory ring depth).
    pub stages: u32,
    /// Template-specific switches, by name.
    #[serde(default)]
    pub switches: BTreeMap<String, u32>,
}

impl TileConfig {
    /// Value of a template switch, or `default` when the config does not set it.
    pub fn switch(&self, name: &str, default: u32) -> u32 {
        self.switches.get(name).copied().unwrap_or(default)
    }

    /// Short stable tag for file names: `m128n64w4s2` plus `_name1` per switch.
    pub fn tag(&self) -> String {
        let mut t = format!(
            "m{}n{}w{}s{}",
            self.block_m, self.block_n, self.warps, self.stages
        );
        for (k, v) in &self.switches {
            t.push_str(&format!("_{k}{v}"));
        }
        t
    }
}

impl fmt::Display for TileConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "block_m={} block_n={} warps={} stages={}",
            self.block_m, self.block_n, self.warps, self.stages
        )?;
        for (k, v) in &self.switches {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// How head dims are written on the command line and in messages: `128`, or `192/128`
/// where V's differs from QK's.
pub fn head_dims_name(head_dim: u32, head_dim_v: Option<u32>) -> String {
    match head_dim_v {
        Some(v) if v != head_dim => format!("{head_dim}/{v}"),
        _ => head_dim.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_and_mask_parse() {
        assert_eq!("BF16".parse::<Dtype>().unwrap(), Dtype::Bf16);
        assert_eq!("half".parse::<Dtype>().unwrap(), Dtype::Fp16);
        for name in ["e4m3", "FP8", "float8_e4m3fn", "fp8_e4m3"] {
            assert_eq!(name.parse::<Dtype>().unwrap(), Dtype::E4m3, "{name}");
        }
        let e = "fp4".parse::<Dtype>().unwrap_err();
        assert!(e.to_string().contains("unknown dtype `fp4`"), "{e}");
        assert!(e.to_string().contains("bf16, fp16, e4m3"), "{e}");
        // e4m3: one byte in, bf16 out; not among the 16-bit defaults.
        assert_eq!(
            (
                Dtype::E4m3.size(),
                Dtype::E4m3.output(),
                Dtype::E4m3.is_fp8()
            ),
            (1, Dtype::Bf16, true)
        );
        assert_eq!(
            (
                Dtype::Fp16.size(),
                Dtype::Fp16.output(),
                Dtype::Fp16.is_fp8()
            ),
            (2, Dtype::Fp16, false)
        );
        assert!(!Dtype::ALL.contains(&Dtype::E4m3) && Dtype::EVERY.contains(&Dtype::E4m3));
        assert_eq!("causal".parse::<MaskKind>().unwrap(), MaskKind::Causal);
        assert_eq!("0".parse::<MaskKind>().unwrap(), MaskKind::None);
        assert_eq!("sliding".parse::<MaskKind>().unwrap(), MaskKind::Local);
        assert!("diagonal".parse::<MaskKind>().is_err());
        assert_eq!(
            "softcap+sinks".parse::<Features>().unwrap(),
            Features::ALL[3]
        );
        assert_eq!("none".parse::<Features>().unwrap(), Features::default());
        let paged: Features = "paged+sinks".parse().unwrap();
        assert!(paged.paged_kv && paged.sinks && !paged.softcap);
        assert_eq!(paged.name(), "sinks+paged");
        assert_eq!(paged.name().parse::<Features>().unwrap(), paged);
        // ALL holds each combination once, plain first.
        let all: std::collections::BTreeSet<Features> = Features::ALL.into_iter().collect();
        assert_eq!(all.len(), 8);
        assert_eq!(Features::ALL[0], Features::default());
        assert!("alibi"
            .parse::<Features>()
            .unwrap_err()
            .to_string()
            .contains("sinks, softcap, paged"));
    }

    #[test]
    fn tags_are_stable_and_distinct() {
        let s = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        assert_eq!(s.tag(), "sm90_bf16_d128_causal");
        let s2 = KernelSpec {
            head_dim_v: 64,
            ..s
        };
        assert_eq!(s2.tag(), "sm90_bf16_d128v64_causal");
        let s3 = KernelSpec {
            mask: MaskKind::Local,
            features: Features {
                sinks: true,
                softcap: true,
                ..Default::default()
            },
            ..s
        };
        assert_eq!(s3.tag(), "sm90_bf16_d128_local_sinks_softcap");
        let s4 = KernelSpec {
            features: "paged".parse().unwrap(),
            ..s
        };
        assert_eq!(s4.tag(), "sm90_bf16_d128_causal_paged");
        let mut c = TileConfig {
            block_m: 128,
            block_n: 64,
            warps: 4,
            stages: 2,
            switches: BTreeMap::new(),
        };
        assert_eq!(c.tag(), "m128n64w4s2");
        c.switches.insert("qregs".into(), 1);
        assert_eq!(c.tag(), "m128n64w4s2_qregs1");
        assert_eq!(c.switch("qregs", 0), 1);
        assert_eq!(c.switch("absent", 7), 7);
    }

    #[test]
    fn config_json_round_trips() {
        let mut c = TileConfig {
            block_m: 64,
            block_n: 32,
            warps: 4,
            stages: 1,
            switches: BTreeMap::new(),
        };
        c.switches.insert("b".into(), 2);
        c.switches.insert("a".into(), 1);
        let j = serde_json::to_string(&c).unwrap();
        assert_eq!(
            j,
            r#"{"block_m":64,"block_n":32,"warps":4,"stages":1,"switches":{"a":1,"b":2}}"#
        );
        let back: TileConfig = serde_json::from_str(&j).unwrap();
        assert_eq!(back, c);
    }
}
