//! The runtime dispatcher: opens a kernel cache (`generated/` by default) and answers
//! which kernel serves a problem. [`KernelCache::select`] is a pure lookup: no GPU, no
//! allocation, a map search and a scan of at most nine buckets.
//!
//! Bucketing: the problem's longest query sequence picks a sequence-length bucket (a
//! sliding window bounded on both sides: its width); the
//! spec's tuned choice for that bucket serves it, or the nearest tuned bucket's; a spec
//! with no tuned record serves its heuristic default (never an error), or, in a cache
//! built to borrow them, the tuned choices of its twin without sinks. A varlen batch of
//! several sequences is served its bucket's ragged choice (tuned on such a batch) where
//! the cache has one, else as above. A problem no cached spec covers is an error naming
//! what is unsupported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fa4_spec::{Arch, Dtype, Features, KernelSpec, MaskKind};

use fa4_spec::manifest::{KernelEntry, Manifest, MANIFEST_FILE, MANIFEST_FORMAT};
use fa4_spec::Bucket;

/// What the dispatcher needs to know about a prefill call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    pub arch: Arch,
    pub dtype: Dtype,
    pub head_dim: u32,
    pub head_dim_v: u32,
    pub mask: MaskKind,
    pub features: Features,
    /// The longest query sequence of the batch (`max_seqlen_q`).
    pub max_seqlen_q: u32,
    /// FlashAttention's `window_size` (-1: unbounded), read for local masks: a window
    /// bounded on both sides is served by the bucket of its width ([`Bucket::of_call`]).
    pub window: (i32, i32),
    /// A varlen batch of several sequences (packed with `cu_seqlens`,
    /// [`Bucket::is_ragged_batch`]): served its bucket's ragged choice where the cache has
    /// one ([`Bucket::of_batch`]).
    pub ragged: bool,
}

impl Query {
    /// The query a launch of this call resolves to: `mask` and `window` as the caller
    /// states them (the window read for local masks only), normalised as a prefill
    /// normalises them ([`mask_of`]): a window side reaching past every key is unbounded,
    /// so a window wider than the sequence is served, and looked up, as causal or none.
    /// `max_seqlen_k` 0 stands for `max_seqlen_q`.
    pub fn as_launched(self, max_seqlen_k: u32) -> Query {
        let causal = self.mask == MaskKind::Causal;
        let window = if self.mask == MaskKind::Local {
            self.window
        } else {
            (-1, -1)
        };
        let max_k = if max_seqlen_k == 0 {
            self.max_seqlen_q
        } else {
            max_seqlen_k
        };
        let as_i32 = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
        let (mask, window) = mask_of(causal, window, as_i32(self.max_seqlen_q), as_i32(max_k));
        Query {
            mask,
            window,
            ..self
        }
    }

    /// The kernel spec this query is served by.
    pub fn spec(&self) -> KernelSpec {
        KernelSpec {
            arch: self.arch,
            dtype: self.dtype,
            head_dim: self.head_dim,
            head_dim_v: self.head_dim_v,
            mask: self.mask,
            features: self.features,
        }
    }
}

/// The mask FlashAttention's `(causal, window_size)` stands for, with the window it
/// keeps: a causal call caps the right side at 0; a side that reaches past every key
/// (left >= max_seqlen_k, right >= max_seqlen_q - 1) is unbounded, so `(-1, 0)` serves the
/// causal kernel and `(-1, -1)` the unmasked one.
pub fn mask_of(
    causal: bool,
    window: (i32, i32),
    max_seqlen_q: i32,
    max_seqlen_k: i32,
) -> (MaskKind, (i32, i32)) {
    let (mut left, mut right) = window;
    if causal {
        right = 0;
    }
    if left < 0 || left >= max_seqlen_k {
        left = -1;
    }
    if right < 0 || (right > 0 && right >= max_seqlen_q - 1) {
        right = -1;
    }
    match (left, right) {
        (-1, -1) => (MaskKind::None, (-1, -1)),
        (-1, 0) => (MaskKind::Causal, (-1, -1)),
        w => (MaskKind::Local, w),
    }
}

/// Why a kernel was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The tuned choice of the problem's own bucket (which may be the default, kept
    /// because nothing beat it by the serving margin).
    Tuned { bucket: u32 },
    /// A varlen batch of several sequences: the choice tuned on such a batch for its
    /// bucket (`SpecEntry::tuned_ragged`).
    TunedRagged { bucket: u32 },
    /// No record for the problem's bucket: the nearest tuned bucket's choice.
    NearestTuned { bucket: u32, wanted: u32 },
    /// The spec was not tuned on this arch, a related one was: that spec's choice for
    /// `bucket` (the problem's own, or the nearest), built for this spec
    /// ([`crate::cache::donor`]; the manifest names it, [`KernelCache::borrowed_from`]).
    Borrowed { bucket: u32, wanted: u32 },
    /// The spec was not tuned on this arch: the heuristic default.
    Default,
}

/// The answer of [`KernelCache::select`].
#[derive(Debug, Clone, Copy)]
pub struct Selected<'a> {
    pub id: &'a str,
    /// The kernel's position in the cache (a stable index while the cache is open).
    pub position: usize,
    pub kernel: &'a KernelEntry,
    pub reason: Reason,
    pub is_default: bool,
    /// The GPU whose tuned choices served the call where it is not the arch's
    /// (`KernelCache::tuned_on`): the device's own.
    pub tuned_on: Option<&'a str>,
}

/// A device as the cache names the GPUs tuning measured on: "NAME (N SMs)".
pub fn gpu_name(name: &str, sm_count: u32) -> String {
    format!("{name} ({sm_count} SMs)")
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("{path}: no kernel cache here ({why}); build one with `fa4-gen build-cache --out {dir}` or point at the shipped one")]
    Missing {
        path: PathBuf,
        dir: String,
        why: String,
    },
    #[error("{path}: the kernel cache manifest cannot be read ({why}); rebuild it with `fa4-gen build-cache`")]
    Corrupt { path: PathBuf, why: String },
    #[error("{path}: a kernel cache of format `{found}`, this fa4-gen reads `{MANIFEST_FORMAT}`; rebuild it with this version's `fa4-gen build-cache`")]
    Format { path: PathBuf, found: String },
    #[error(
        "{path}: the manifest names kernel {id} for {spec} but does not list it; rebuild the cache"
    )]
    Dangling {
        path: PathBuf,
        id: String,
        spec: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("no kernels for {arch} in this cache (it has {cached}); build them with `fa4-gen build-cache --arch {arch}`")]
    Arch { arch: Arch, cached: String },
    #[error("no {dtype} kernels for {arch} in this cache (it has {cached}){why}")]
    Dtype {
        arch: Arch,
        dtype: Dtype,
        cached: String,
        why: &'static str,
    },
    #[error("head dim {head_dim} (V {head_dim_v}) is not offered on {arch}: offered head dims are {offered}")]
    HeadDim {
        arch: Arch,
        head_dim: u32,
        head_dim_v: u32,
        offered: String,
    },
    #[error("{what} is not in this cache for {arch} d{head_dim}; {fix}")]
    Variant {
        arch: Arch,
        head_dim: u32,
        what: String,
        fix: &'static str,
    },
}

/// A tuned choice: its bucket, the kernel's index, and whether a device's own GPU
/// measured it (not the arch's most-tuned GPU).
#[derive(Debug, Clone, Copy)]
struct Choice {
    bucket: u32,
    kernel: usize,
    own: bool,
}

/// The tuned choices of a spec for one device, ascending by bucket.
#[derive(Default, Clone)]
struct Choices {
    dense: Vec<Choice>,
    ragged: Vec<Choice>,
}

impl Choices {
    /// `self` with `own`'s buckets in place of its own (a GPU that tuned some buckets is
    /// served the arch's choices for the others).
    fn overlaid(&self, own: Choices) -> Choices {
        let merge = |base: &[Choice], own: Vec<Choice>| {
            let mut out: Vec<Choice> = base
                .iter()
                .filter(|c| !own.iter().any(|o| o.bucket == c.bucket))
                .copied()
                .collect();
            out.extend(own);
            out.sort_by_key(|c| c.bucket);
            out
        };
        Choices {
            dense: merge(&self.dense, own.dense),
            ragged: merge(&self.ragged, own.ragged),
        }
    }
}

struct SpecIndex {
    default: usize,
    /// The arch's tuned choices (the manifest's `tuned`, `tuned_ragged`).
    tuned: Choices,
    /// Other GPUs' choices (`tuned_by_gpu`, `tuned_ragged_by_gpu`) over the arch's.
    by_gpu: Vec<(String, Choices)>,
    /// `tuned` holds a related spec's choices (the manifest's `borrowed_from`).
    borrowed: bool,
}

/// An open kernel cache.
pub struct KernelCache {
    dir: PathBuf,
    manifest: Manifest,
    kernels: Vec<(String, KernelEntry)>,
    index: BTreeMap<KernelSpec, SpecIndex>,
}

impl KernelCache {
    /// Opens the cache in `dir` and checks that its manifest is whole.
    pub fn open(dir: &Path) -> Result<KernelCache, CacheError> {
        let path = dir.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| CacheError::Missing {
            path: path.clone(),
            dir: dir.display().to_string(),
            why: e.to_string(),
        })?;
        #[derive(serde::Deserialize)]
        struct Head {
            format: String,
        }
        let head: Head = serde_json::from_str(&text).map_err(|e| CacheError::Corrupt {
            path: path.clone(),
            why: e.to_string(),
        })?;
        if head.format != MANIFEST_FORMAT {
            return Err(CacheError::Format {
                path,
                found: head.format,
            });
        }
        let manifest: Manifest = serde_json::from_str(&text).map_err(|e| CacheError::Corrupt {
            path: path.clone(),
            why: e.to_string(),
        })?;
        let kernels: Vec<(String, KernelEntry)> = manifest
            .kernels
            .iter()
            .map(|(id, k)| (id.clone(), k.clone()))
            .collect();
        let position = |id: &str, spec: &str| {
            kernels
                .binary_search_by(|(k, _)| k.as_str().cmp(id))
                .map_err(|_| CacheError::Dangling {
                    path: path.clone(),
                    id: id.to_string(),
                    spec: spec.to_string(),
                })
        };
        let mut index = BTreeMap::new();
        for arch in manifest.archs.values() {
            for (tag, entry) in &arch.specs {
                let default = position(&entry.default, tag)?;
                let spec = kernels[default].1.spec;
                let positions = |choices: Option<&BTreeMap<u32, String>>, own: bool| {
                    choices
                        .into_iter()
                        .flatten()
                        .map(|(bucket, id)| {
                            Ok(Choice {
                                bucket: *bucket,
                                kernel: position(id, tag)?,
                                own,
                            })
                        })
                        .collect::<Result<Vec<_>, CacheError>>()
                };
                let tuned = Choices {
                    dense: positions(Some(&entry.tuned), false)?,
                    ragged: positions(Some(&entry.tuned_ragged), false)?,
                };
                let borrowed = entry.borrowed_from.is_some();
                let mut gpus: Vec<&String> = entry
                    .tuned_by_gpu
                    .keys()
                    .chain(entry.tuned_ragged_by_gpu.keys())
                    .collect();
                gpus.sort();
                gpus.dedup();
                let mut by_gpu = Vec::new();
                for gpu in gpus {
                    let own = Choices {
                        dense: positions(entry.tuned_by_gpu.get(gpu), true)?,
                        ragged: positions(entry.tuned_ragged_by_gpu.get(gpu), true)?,
                    };
                    by_gpu.push((gpu.clone(), tuned.overlaid(own)));
                }
                index.insert(
                    spec,
                    SpecIndex {
                        default,
                        tuned,
                        by_gpu,
                        borrowed,
                    },
                );
            }
        }
        Ok(KernelCache {
            dir: dir.to_path_buf(),
            manifest,
            kernels,
            index,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Every kernel of the cache, by position (see [`Selected::position`]).
    pub fn kernels(&self) -> &[(String, KernelEntry)] {
        &self.kernels
    }

    /// The GPU an arch's tuned choices were measured on, if it was tuned.
    pub fn tuned_on(&self, arch: Arch) -> Option<&str> {
        self.manifest.archs.get(&arch)?.tuned_on.as_deref()
    }

    /// Whether `spec` has tuned choices of its own in this cache (not borrowed ones).
    pub fn is_tuned(&self, spec: &KernelSpec) -> bool {
        self.index
            .get(spec)
            .is_some_and(|ix| !ix.tuned.dense.is_empty() && !ix.borrowed)
    }

    /// The tag of the spec whose tuned choices serve `spec` (see [`Reason::Borrowed`]).
    pub fn borrowed_from(&self, spec: &KernelSpec) -> Option<&str> {
        self.manifest
            .archs
            .get(&spec.arch)?
            .specs
            .get(&spec.tag())?
            .borrowed_from
            .as_deref()
    }

    /// The kernel that serves `q`.
    pub fn select(&self, q: &Query) -> Result<Selected<'_>, SelectError> {
        self.select_on(q, None)
    }

    /// [`select`](Self::select) for a device named `gpu` ("NVIDIA H100 80GB HBM3 (132
    /// SMs)", as [`gpu_name`] spells it): its own tuned choices where the cache has them
    /// (`SpecEntry::tuned_by_gpu`), else the arch's, bucket by bucket. A spec the arch's
    /// GPU never tuned (FP8, tuned on an H100 while the H200 tuned the rest) is served
    /// another GPU's choices (the first by name) before its default.
    pub fn select_on(&self, q: &Query, gpu: Option<&str>) -> Result<Selected<'_>, SelectError> {
        let Some(ix) = self.index.get(&q.spec()) else {
            return Err(self.why_not(q));
        };
        let untuned = ix.tuned.dense.is_empty() && ix.tuned.ragged.is_empty();
        let own = gpu
            .and_then(|g| ix.by_gpu.iter().find(|(name, _)| name == g))
            .or_else(|| ix.by_gpu.first().filter(|_| untuned));
        let tuned = own.map_or(&ix.tuned, |(_, t)| t);
        let bucket = Bucket::of_batch(q.mask, q.window, q.max_seqlen_q, q.ragged);
        let wanted = bucket.seqlen;
        // A ragged batch: its own bucket's ragged choice (no nearest: a ragged bucket
        // not tuned is served as a dense batch of its longest sequence).
        let ragged = bucket
            .ragged
            .then(|| tuned.ragged.iter().find(|c| c.bucket == wanted))
            .flatten();
        let log2 = |b: u32| b.trailing_zeros() as i32;
        let pick = ragged.or_else(|| {
            tuned
                .dense
                .iter()
                .min_by_key(|c| ((log2(c.bucket) - log2(wanted)).abs(), c.bucket))
        });
        let (k, reason) = match pick {
            Some(c) if ix.borrowed && !c.own => (
                c.kernel,
                Reason::Borrowed {
                    bucket: c.bucket,
                    wanted,
                },
            ),
            Some(c) if ragged.is_some() => (c.kernel, Reason::TunedRagged { bucket: c.bucket }),
            Some(c) if c.bucket == wanted => (c.kernel, Reason::Tuned { bucket: c.bucket }),
            Some(c) => (
                c.kernel,
                Reason::NearestTuned {
                    bucket: c.bucket,
                    wanted,
                },
            ),
            None => (ix.default, Reason::Default),
        };
        let (id, kernel) = &self.kernels[k];
        Ok(Selected {
            id,
            position: k,
            kernel,
            reason,
            is_default: k == ix.default,
            tuned_on: match (own, pick) {
                (Some((g, _)), Some(c)) if c.own => Some(g.as_str()),
                _ => None,
            },
        })
    }

    /// Names what about `q` the cache does not cover (the slow path of an error).
    fn why_not(&self, q: &Query) -> SelectError {
        let same_arch: Vec<&KernelSpec> = self.index.keys().filter(|s| s.arch == q.arch).collect();
        if same_arch.is_empty() {
            let cached: Vec<&str> = self.manifest.archs.keys().map(|a| a.name()).collect();
            return SelectError::Arch {
                arch: q.arch,
                cached: if cached.is_empty() {
                    "none".into()
                } else {
                    cached.join(", ")
                },
            };
        }
        if !same_arch.iter().any(|s| s.dtype == q.dtype) {
            let cached: Vec<&str> = Dtype::EVERY
                .iter()
                .filter(|d| same_arch.iter().any(|s| s.dtype == **d))
                .map(|d| d.name())
                .collect();
            return SelectError::Dtype {
                arch: q.arch,
                dtype: q.dtype,
                cached: cached.join(", "),
                why: if q.dtype.is_fp8() && q.arch != Arch::Sm90 {
                    ": e4m3 kernels are built for sm90 (Hopper) only"
                } else if q.dtype.is_fp8() {
                    ": a cache built before e4m3 was served, or without sm90's head dims; \
                     rebuild it with `fa4-gen build-cache` (e4m3 at d64, d128 and d256)"
                } else {
                    ""
                },
            };
        }
        if !same_arch
            .iter()
            .any(|s| s.head_dim == q.head_dim && s.head_dim_v == q.head_dim_v)
        {
            let mut offered: Vec<(u32, u32)> = same_arch
                .iter()
                .map(|s| (s.head_dim, s.head_dim_v))
                .collect();
            offered.sort_unstable();
            offered.dedup();
            let offered: Vec<String> = offered
                .iter()
                .map(|&(d, dv)| fa4_spec::head_dims_name(d, Some(dv)))
                .collect();
            return SelectError::HeadDim {
                arch: q.arch,
                head_dim: q.head_dim,
                head_dim_v: q.head_dim_v,
                offered: offered.join(", "),
            };
        }
        let fp8_here = same_arch.iter().any(|s| {
            s.dtype == q.dtype && s.head_dim == q.head_dim && s.head_dim_v == q.head_dim_v
        });
        SelectError::Variant {
            arch: q.arch,
            head_dim: q.head_dim,
            what: format!(
                "{} {} mask with features {}",
                q.dtype.name(),
                q.mask.name(),
                q.features.name()
            ),
            fix: if q.dtype.is_fp8() && !fp8_here {
                "this cache has no e4m3 kernel at this head dim: fa4-gen serves e4m3 at d64, \
                 d128, d256 and 192/128 (`fa4-gen build-cache --head-dim ...` builds them)"
            } else if q.dtype.is_fp8() && q.features.paged_kv {
                "this cache was built without e4m3 over paged K/V: `fa4-gen build-cache \
                 --features paged` builds it (or pass the keys packed with cu_seqlens_k)"
            } else {
                "build it with `fa4-gen build-cache --features all`"
            },
        }
    }
}

#[cfg(test)]
mod tests;
