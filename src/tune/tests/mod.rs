//! The tuner's loop against a scripted [`Measurer`]: real candidates of one spec, no
//! GPU; each file takes one part of what the loop promises.

mod carry;
mod finals;
mod policy;
mod screening;

use std::cell::Cell as Counter;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::finals::finals_complete;
use super::*;
use crate::compile::resources::Resources;
use crate::db::{Candidate, Device, TuningDb};
use crate::render::KernelId;
use fa4_spec::{Arch, Dtype, MaskKind, TileConfig};

fn spec() -> KernelSpec {
    KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal)
}

/// `n` kernels of real candidates of `spec()` (the default first), as a build
/// would hand them over; no cubins, the scripted measurer needs none.
fn kernels(n: usize) -> Vec<TuneKernel> {
    let mut planned = crate::space::plan(Template::Portable, &spec());
    planned.sort_by_key(|p| !p.is_default);
    planned
        .into_iter()
        .filter_map(|p| p.verdict.clone().ok().map(|fp| (p, fp)))
        .take(n)
        .map(|(p, footprint)| {
            let tag = p.candidate.config.tag();
            TuneKernel {
                built: BuiltKernel {
                    id: KernelId(format!("k_{tag}")),
                    is_default: p.is_default,
                    candidate: p.candidate,
                    template_hash: "h1".into(),
                    footprint,
                    resources: Resources::default(),
                    source: String::new(),
                    cubin: String::new(),
                    cubin_hash: String::new(),
                    code_hash: format!("code_{}", tag),
                    varlen_cubin_hash: None,
                    varlen_registers: None,
                    nvrtc_version: "13.0".into(),
                    compile_ms: 0,
                },
                cubin: Vec::new(),
                varlen_cubin: None,
            }
        })
        .collect()
}

/// Kernel i takes 1 + i/10 ms, except kernel 2, the fastest; `wrong` fails its check.
/// Settled (in the finals) kernel i takes its screening time times `settled[i]`
/// (1 when not given). `timings` counts screening timings, `finals` the kernels
/// timed in the finals, in order.
struct Scripted {
    wrong: Option<usize>,
    delay: Duration,
    checks: Counter<usize>,
    timings: Counter<usize>,
    ids: Vec<String>,
    settled: BTreeMap<usize, f64>,
    /// Screening times (at 1024 tokens) other than the above, by kernel.
    screened: BTreeMap<usize, f64>,
    finals: std::cell::RefCell<Vec<usize>>,
    /// The buffer set of each finals timing, in order (screening asserts set 0).
    placements: std::cell::RefCell<Vec<usize>>,
    /// Whether each finals timing (in order) had the key's warm-up.
    warmups: std::cell::RefCell<Vec<bool>>,
    /// Every finals timing sleeps until then (past a deadline).
    finals_until: Option<Instant>,
    /// The finals timing with this index (0-based) ends the run with a GPU error.
    finals_crash: Option<usize>,
    /// The finals timing of this kernel fails (kept as data).
    finals_fail: Option<usize>,
    /// (kernel, its n-th finals timing of the run): a factor on that one reading.
    outliers: BTreeMap<(usize, usize), f64>,
}

impl Scripted {
    fn new(kernels: &[TuneKernel], wrong: Option<usize>, delay: Duration) -> Self {
        Scripted {
            wrong,
            delay,
            checks: Counter::new(0),
            timings: Counter::new(0),
            ids: kernels.iter().map(|k| k.built.id.0.clone()).collect(),
            settled: BTreeMap::new(),
            screened: BTreeMap::new(),
            finals: Default::default(),
            placements: Default::default(),
            warmups: Default::default(),
            finals_until: None,
            finals_crash: None,
            finals_fail: None,
            outliers: BTreeMap::new(),
        }
    }
    fn finals(&self) -> usize {
        self.finals.borrow().len()
    }
    fn index(&self, k: &TuneKernel) -> usize {
        self.ids.iter().position(|id| *id == k.built.id.0).unwrap()
    }
}

impl Measurer for Scripted {
    fn check(&mut self, k: &TuneKernel) -> Result<Result<(), String>, TuneError> {
        self.checks.set(self.checks.get() + 1);
        Ok(if Some(self.index(k)) == self.wrong {
            Err("O rel. L2 0.5 above 4e-3".into())
        } else {
            Ok(())
        })
    }
    fn time(
        &mut self,
        k: &TuneKernel,
        bucket: Bucket,
        settle_ms: f64,
        placement: usize,
    ) -> Result<Result<Timing, String>, TuneError> {
        std::thread::sleep(self.delay);
        let i = self.index(k);
        let base = match self.screened.get(&i) {
            Some(&ms) => ms,
            None if i == 2 => 0.5,
            None => 1.0 + i as f64 / 10.0,
        };
        let mut ms = base * bucket.seqlen as f64 / 1024.0;
        if settle_ms > 0.0 {
            assert!(
                settle_ms == SETTLE_MS || settle_ms == KEY_WARMUP_MS,
                "{settle_ms}"
            );
            self.warmups.borrow_mut().push(settle_ms == KEY_WARMUP_MS);
            if self.finals_crash == Some(self.finals()) {
                return Err(TuneError::Gpu(GpuError::Driver {
                    call: "cuLaunchKernel",
                    message: "CUDA_ERROR_LAUNCH_FAILED".into(),
                }));
            }
            if let Some(t) = self.finals_until {
                std::thread::sleep(t.saturating_duration_since(Instant::now()));
            }
            let nth = self.finals.borrow().iter().filter(|&&k| k == i).count();
            self.finals.borrow_mut().push(i);
            self.placements.borrow_mut().push(placement);
            if self.finals_fail == Some(i) {
                return Ok(Err("launch timed out".into()));
            }
            ms *= self.settled.get(&i).copied().unwrap_or(1.0);
            ms *= self.outliers.get(&(i, nth)).copied().unwrap_or(1.0);
        } else {
            assert_eq!(placement, 0, "screening times on the first buffer set");
            self.timings.set(self.timings.get() + 1);
        }
        Ok(Ok(Timing {
            ms,
            spread: 0.01,
            tflops: 1.0 / ms,
        }))
    }
}

fn device() -> Device {
    Device {
        name: "Test GPU".into(),
        sm_count: 8,
        driver: "13.0".into(),
        nvrtc: "13.0".into(),
    }
}

/// Finals timings of a whole tune of `keys(buckets)` with every finalist right.
fn finals_for(buckets: &[u32]) -> usize {
    buckets.len() * FINALISTS * FINAL_PASSES
}

fn keys(buckets: &[u32]) -> Vec<Key> {
    let buckets: Vec<Bucket> = buckets.iter().map(|&b| Bucket::of(b)).collect();
    shard_keys(&[(Template::Portable, spec())], &buckets, 0, 1)
}

fn run(
    db: &TuningDb,
    hash: &str,
    keys: &[Key],
    ks: &[TuneKernel],
    m: &mut Scripted,
    progress: &dyn Progress,
) -> (Counts, bool) {
    let hash = hash.to_string();
    let current = move |_: Template| hash.clone();
    let session = Session {
        db,
        device: device(),
        template_hash: &current,
        deadline: None,
        retake_finals: false,
    };
    tune_spec(&session, keys, ks, m, progress).unwrap()
}

/// `ks` as another template version builds them: new ids, and new machine code for
/// the kernels at `recoded`.
fn renamed(ks: &[TuneKernel], version: &str, recoded: &[usize]) -> Vec<TuneKernel> {
    ks.iter()
        .enumerate()
        .map(|(i, k)| {
            let mut built = k.built.clone();
            built.id = KernelId(format!("{}_{version}", built.id.0));
            if recoded.contains(&i) {
                built.code_hash = format!("{}_{version}", built.code_hash);
            }
            TuneKernel {
                built,
                cubin: k.cubin.clone(),
                varlen_cubin: k.varlen_cubin.clone(),
            }
        })
        .collect()
}

/// `(kernel index, settled ms)` of each candidate of `r` with a settled time.
fn settled_of(r: &Record, ks: &[TuneKernel]) -> Vec<(usize, f64)> {
    r.candidates
        .iter()
        .filter_map(|c| match c.outcome {
            Outcome::Measured {
                settled_ms: Some(s),
                ..
            } => Some((ks.iter().position(|k| k.built.id.0 == c.kernel).unwrap(), s)),
            _ => None,
        })
        .collect()
}

/// Sums what a tune plans and counts what it then measures.
#[derive(Default)]
struct Tally {
    planned: Counter<usize>,
    done: Counter<usize>,
}
impl Progress for Tally {
    fn planned(&self, count: usize) {
        self.planned.set(self.planned.get() + count);
    }
    fn measured(&self, _: &Key, _: &TuneKernel, _: &Outcome, _: Option<(String, f64)>) {
        self.done.set(self.done.get() + 1);
    }
    fn finalist(&self, _: &Key, _: &TuneKernel, _: Option<f64>) {
        self.done.set(self.done.get() + 1);
    }
    fn finals_kept(&self, _: &Key, planned: usize) {
        self.done.set(self.done.get() + planned);
    }
}
