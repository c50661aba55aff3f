//! The runtime dispatcher: opens a kernel cache (`generated/` by default) and answers
//! which kernel serves a problem. [`KernelCache::select`] is a pure lookup: no GPU, no
//! allocation, a map search and a scan of at most nine buckets.
//!
//! Bucketing: the problem's longest query sequence picks a sequence-length bucket (a
//! sliding window bounded on both sides: its width); the
//! spec's tuned choice for that bucket serves it, or the nearest tuned bucket's; a spec
//! with no tuned record serves its heuristic default (never an error), or, in a cache
//! built to borrow them, the tuned choices of its twin without sinks. A problem no cached
//! spec covers is an error naming what is unsupported.

mod prefill;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fa4_spec::{Arch, Dtype, Features, KernelSpec, MaskKind};

use fa4_spec::manifest::{KernelEntry, Manifest, MANIFEST_FILE, MANIFEST_FORMAT};
use fa4_spec::Bucket;

pub use prefill::{cubin_sm, mask_of, PrefillArgs, PrefillError, Runtime};

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

/// Why a kernel was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The tuned choice of the problem's own bucket (which may be the default, kept
    /// because nothing beat it by the serving margin).
    Tuned { bucket: u32 },
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
    #[error("head dim {head_dim} (V {head_dim_v}) is not offered on {arch}: offered head dims are {offered}")]
    HeadDim {
        arch: Arch,
        head_dim: u32,
        head_dim_v: u32,
        offered: String,
    },
    #[error("{what} is not in this cache for {arch} d{head_dim}; build it with `fa4-gen build-cache --features all`")]
    Variant {
        arch: Arch,
        head_dim: u32,
        what: String,
    },
}

struct SpecIndex {
    default: usize,
    /// (bucket, kernel index), ascending by bucket.
    tuned: Vec<(u32, usize)>,
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
                let mut tuned = Vec::new();
                for (bucket, id) in &entry.tuned {
                    tuned.push((*bucket, position(id, tag)?));
                }
                let borrowed = entry.borrowed_from.is_some();
                index.insert(
                    spec,
                    SpecIndex {
                        default,
                        tuned,
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
            .is_some_and(|ix| !ix.tuned.is_empty() && !ix.borrowed)
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
        let Some(ix) = self.index.get(&q.spec()) else {
            return Err(self.why_not(q));
        };
        let wanted = Bucket::of_call(q.mask, q.window, q.max_seqlen_q).seqlen;
        let log2 = |b: u32| b.trailing_zeros() as i32;
        let pick = ix
            .tuned
            .iter()
            .min_by_key(|(b, _)| ((log2(*b) - log2(wanted)).abs(), *b))
            .copied();
        let (k, reason) = match pick {
            Some((b, k)) if ix.borrowed => (k, Reason::Borrowed { bucket: b, wanted }),
            Some((b, k)) if b == wanted => (k, Reason::Tuned { bucket: b }),
            Some((b, k)) => (k, Reason::NearestTuned { bucket: b, wanted }),
            None => (ix.default, Reason::Default),
        };
        let (id, kernel) = &self.kernels[k];
        Ok(Selected {
            id,
            position: k,
            kernel,
            reason,
            is_default: k == ix.default,
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
        SelectError::Variant {
            arch: q.arch,
            head_dim: q.head_dim,
            what: format!(
                "{} {} mask with features {}",
                q.dtype.name(),
                q.mask.name(),
                q.features.name()
            ),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::space::{self, Template, TemplateSpace};
    use fa4_spec::manifest::{ArchEntry, SpecEntry};

    fn spec(head_dim: u32, mask: MaskKind) -> KernelSpec {
        KernelSpec::new(Arch::Sm90, Dtype::Bf16, head_dim, mask)
    }

    fn entry(spec: KernelSpec, config: fa4_spec::TileConfig) -> KernelEntry {
        let footprint = Template::Portable.check(&spec, &config).unwrap();
        KernelEntry {
            template: Template::Portable,
            spec,
            config,
            footprint,
            cubin: "sm90/x.cubin".into(),
            cubin_hash: "0".into(),
            code_hash: String::new(),
            registers: 200,
        }
    }

    /// d128 causal tuned at buckets 1024 (default kept) and 4096 (another tile); d64
    /// causal untuned.
    pub(crate) fn manifest() -> Manifest {
        let d128 = spec(128, MaskKind::Causal);
        let d64 = spec(64, MaskKind::Causal);
        let default128 = Template::Portable.default_config(&d128);
        let other = space::plan(Template::Portable, &d128)
            .into_iter()
            .find(|p| !p.is_default && p.verdict.is_ok())
            .unwrap()
            .candidate
            .config;
        let kernels = BTreeMap::from([
            ("a_d128_default".to_string(), entry(d128, default128)),
            ("b_d128_tuned".to_string(), entry(d128, other)),
            (
                "c_d64_default".to_string(),
                entry(d64, Template::Portable.default_config(&d64)),
            ),
        ]);
        let specs = BTreeMap::from([
            (
                d128.tag(),
                SpecEntry {
                    default: "a_d128_default".into(),
                    tuned: BTreeMap::from([
                        (1024, "a_d128_default".into()),
                        (4096, "b_d128_tuned".into()),
                    ]),
                    borrowed_from: None,
                },
            ),
            (
                d64.tag(),
                SpecEntry {
                    default: "c_d64_default".into(),
                    tuned: BTreeMap::new(),
                    borrowed_from: None,
                },
            ),
        ]);
        Manifest {
            format: MANIFEST_FORMAT.into(),
            fa4_gen_version: "0".into(),
            nvrtc: "13.0".into(),
            tuning_db_hash: "0".into(),
            archs: BTreeMap::from([(
                Arch::Sm90,
                ArchEntry {
                    tuned_on: Some("NVIDIA H200 (132 SMs)".into()),
                    specs,
                },
            )]),
            kernels,
        }
    }

    fn open(m: &Manifest) -> (tempfile::TempDir, Result<KernelCache, CacheError>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(MANIFEST_FILE),
            serde_json::to_string(m).unwrap(),
        )
        .unwrap();
        let cache = KernelCache::open(dir.path());
        (dir, cache)
    }

    fn query(head_dim: u32, seqlen: u32) -> Query {
        Query {
            arch: Arch::Sm90,
            dtype: Dtype::Bf16,
            head_dim,
            head_dim_v: head_dim,
            mask: MaskKind::Causal,
            features: Features::default(),
            max_seqlen_q: seqlen,
            window: (-1, -1),
        }
    }

    #[test]
    fn a_problem_gets_its_bucket_or_the_nearest_tuned_one_or_the_default() {
        let (_dir, cache) = open(&manifest());
        let cache = cache.unwrap();
        let s = cache.select(&query(128, 3000)).unwrap();
        assert_eq!(
            (s.id, s.reason, s.is_default),
            ("b_d128_tuned", Reason::Tuned { bucket: 4096 }, false)
        );
        let s = cache.select(&query(128, 1000)).unwrap();
        assert_eq!((s.id, s.is_default), ("a_d128_default", true));
        // 64k: nearest tuned bucket is 4096; 100: nearest is 1024.
        let s = cache.select(&query(128, 65536)).unwrap();
        assert_eq!(
            s.reason,
            Reason::NearestTuned {
                bucket: 4096,
                wanted: 32768
            }
        );
        let s = cache.select(&query(128, 100)).unwrap();
        assert_eq!(
            s.reason,
            Reason::NearestTuned {
                bucket: 1024,
                wanted: 128
            }
        );
        // An untuned spec serves its default, never an error; seqlen 0 is fine.
        let s = cache.select(&query(64, 0)).unwrap();
        assert_eq!((s.id, s.reason), ("c_d64_default", Reason::Default));
    }

    #[test]
    fn a_lookup_resolves_the_mask_as_a_launch_does() {
        let local = |window, max_q| Query {
            mask: MaskKind::Local,
            window,
            ..query(128, max_q)
        };
        // Narrower than the keys: the window stays.
        let q = local((1000, 0), 512).as_launched(4096);
        assert_eq!((q.mask, q.window), (MaskKind::Local, (1000, 0)));
        // Wider than the keys (0: as many keys as queries): causal, as prefill launches it.
        let q = local((1000, 0), 512).as_launched(0);
        assert_eq!((q.mask, q.window), (MaskKind::Causal, (-1, -1)));
        let q = local((1000, 1000), 512).as_launched(512);
        assert_eq!((q.mask, q.window), (MaskKind::None, (-1, -1)));
        let q = local((-1, -1), 4096).as_launched(4096);
        assert_eq!(q.mask, MaskKind::None);
        // Causal and unmasked queries ignore the window they carry.
        let q = Query {
            window: (128, 0),
            ..query(128, 4096)
        }
        .as_launched(4096);
        assert_eq!((q.mask, q.window), (MaskKind::Causal, (-1, -1)));
        let q = Query {
            mask: MaskKind::None,
            window: (128, 0),
            ..query(128, 4096)
        }
        .as_launched(0);
        assert_eq!((q.mask, q.window), (MaskKind::None, (-1, -1)));
    }

    #[test]
    fn an_untuned_spec_serving_a_related_specs_choices_says_so() {
        // d128 causal with sinks, never tuned, serves d128 causal's tuned tile at 4096.
        let mut m = manifest();
        let plain = spec(128, MaskKind::Causal);
        let sinks = KernelSpec {
            features: Features {
                sinks: true,
                ..Features::default()
            },
            ..plain
        };
        let default = Template::Portable.default_config(&sinks);
        let tuned = m.kernels["b_d128_tuned"].config.clone();
        m.kernels
            .insert("f_sinks_default".into(), entry(sinks, default));
        m.kernels
            .insert("g_sinks_borrowed".into(), entry(sinks, tuned));
        m.archs.get_mut(&Arch::Sm90).unwrap().specs.insert(
            sinks.tag(),
            SpecEntry {
                default: "f_sinks_default".into(),
                tuned: BTreeMap::from([(4096, "g_sinks_borrowed".into())]),
                borrowed_from: Some(plain.tag()),
            },
        );
        let (_dir, cache) = open(&m);
        let cache = cache.unwrap();
        let with_sinks = |seqlen| Query {
            features: sinks.features,
            ..query(128, seqlen)
        };
        let s = cache.select(&with_sinks(3000)).unwrap();
        assert_eq!(
            (s.id, s.reason, s.is_default),
            (
                "g_sinks_borrowed",
                Reason::Borrowed {
                    bucket: 4096,
                    wanted: 4096
                },
                false
            )
        );
        let s = cache.select(&with_sinks(100)).unwrap();
        assert_eq!(
            s.reason,
            Reason::Borrowed {
                bucket: 4096,
                wanted: 128
            }
        );
        assert_eq!(cache.borrowed_from(&sinks), Some(plain.tag().as_str()));
        assert!(!cache.is_tuned(&sinks) && cache.is_tuned(&plain));
        // The plain spec's own lookups are unchanged.
        let s = cache.select(&query(128, 3000)).unwrap();
        assert_eq!(s.reason, Reason::Tuned { bucket: 4096 });
        assert_eq!(cache.borrowed_from(&plain), None);
    }

    #[test]
    fn a_sliding_window_is_served_by_its_width_not_its_sequence() {
        // d128 local: the default at width 128, another tile tuned at width 1024.
        let mut m = manifest();
        let local = spec(128, MaskKind::Local);
        let d128 = m.kernels["a_d128_default"].config.clone();
        let wide = m.kernels["b_d128_tuned"].config.clone();
        m.kernels
            .insert("d_local_default".into(), entry(local, d128));
        m.kernels.insert("e_local_wide".into(), entry(local, wide));
        m.archs.get_mut(&Arch::Sm90).unwrap().specs.insert(
            local.tag(),
            SpecEntry {
                default: "d_local_default".into(),
                tuned: BTreeMap::from([
                    (128, "d_local_default".into()),
                    (1024, "e_local_wide".into()),
                ]),
                borrowed_from: None,
            },
        );
        let (_dir, cache) = open(&m);
        let cache = cache.unwrap();
        let at = |seqlen, window| {
            let s = cache
                .select(&Query {
                    mask: MaskKind::Local,
                    window,
                    ..query(128, seqlen)
                })
                .unwrap();
            (s.id, s.reason)
        };
        // gpt-oss's window over long prompts: width 128, whatever the length.
        assert_eq!(
            at(16384, (128, 0)),
            ("d_local_default", Reason::Tuned { bucket: 128 })
        );
        assert_eq!(
            at(300, (1000, 0)),
            ("e_local_wide", Reason::Tuned { bucket: 1024 })
        );
        assert_eq!(
            at(100_000, (500, 500)),
            ("e_local_wide", Reason::Tuned { bucket: 1024 })
        );
        // Unbounded on one side: the sequence's length, as for causal (4096 -> nearest 1024).
        assert_eq!(
            at(3000, (-1, 64)),
            (
                "e_local_wide",
                Reason::NearestTuned {
                    bucket: 1024,
                    wanted: 4096
                }
            )
        );
    }

    #[test]
    fn unsupported_problems_are_named() {
        let (_dir, cache) = open(&manifest());
        let cache = cache.unwrap();
        let e = cache.select(&query(80, 512)).unwrap_err();
        assert!(
            e.to_string().contains(
                "head dim 80 (V 80) is not offered on sm90: offered head dims are 64, 128"
            ),
            "{e}"
        );
        let e = cache
            .select(&Query {
                arch: Arch::Sm100,
                ..query(64, 512)
            })
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("no kernels for sm100 in this cache (it has sm90)"),
            "{e}"
        );
        let e = cache
            .select(&Query {
                mask: MaskKind::Local,
                ..query(64, 512)
            })
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("bf16 local mask with features none is not in this cache"),
            "{e}"
        );
    }

    #[test]
    fn broken_caches_are_refused_with_the_fix() {
        let missing = KernelCache::open(std::path::Path::new("/nonexistent/cache"))
            .err()
            .unwrap();
        assert!(
            missing.to_string().contains("fa4-gen build-cache"),
            "{missing}"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST_FILE), "{ not json").unwrap();
        let corrupt = KernelCache::open(dir.path()).err().unwrap();
        assert!(matches!(corrupt, CacheError::Corrupt { .. }), "{corrupt}");
        let mut m = manifest();
        m.format = "fa4-gen kernel cache 0".into();
        let (_d, old) = open(&m);
        assert!(matches!(old, Err(CacheError::Format { .. })));
        let mut m = manifest();
        m.kernels.remove("b_d128_tuned");
        let (_d, dangling) = open(&m);
        let e = dangling.err().unwrap();
        assert!(e.to_string().contains("b_d128_tuned"), "{e}");
    }
}
