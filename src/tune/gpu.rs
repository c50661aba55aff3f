//! The [`Measurer`] on a GPU: checks against the f32 reference with the verify cases,
//! times with CUDA events after an L2 flush.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fa4_spec::{Bucket, KernelSpec};

use super::{
    bucket_cell, Measurer, Timing, TuneError, TuneKernel, CHECK_CASES, PAGE_SIZE, TIME_BUDGET_MS,
};
use crate::measure::bench::{self, L2Flush};
use crate::measure::gpu::{FwdKernel, Gpu, GpuError};
use crate::measure::problems::{attention_flops, Case, Problem};
use crate::measure::support::Support;
use crate::measure::verify;

/// A timed problem and the spacer allocated before it ([`bench::placement_spacer`]).
struct Placed {
    case: Case,
    problem: Problem,
    _spacer: Option<cudarc::driver::CudaSlice<u8>>,
}

/// Checks with the standard verify cases and times with CUDA events on one GPU. The
/// problems of the spec in hand are kept per bucket; the kernel in hand stays loaded.
pub struct GpuMeasurer<'g> {
    gpu: &'g Gpu,
    support: &'g Support,
    flush: L2Flush,
    cases: Vec<Case>,
    /// Per (bucket, placement): the problem, behind its spacer (kept while it is).
    problems: BTreeMap<(Bucket, usize), Placed>,
    problems_spec: Option<KernelSpec>,
    loaded: Option<(String, FwdKernel)>,
    /// Time spent in GPU work (checking, timing, making problems).
    pub busy: Duration,
}

impl<'g> GpuMeasurer<'g> {
    pub fn new(gpu: &'g Gpu, support: &'g Support) -> Result<Self, GpuError> {
        let cases = verify::standard_cases()
            .into_iter()
            .filter(|c| CHECK_CASES.contains(&c.name.as_str()))
            .collect();
        Ok(GpuMeasurer {
            gpu,
            support,
            flush: L2Flush::new(gpu)?,
            cases,
            problems: BTreeMap::new(),
            problems_spec: None,
            loaded: None,
            busy: Duration::ZERO,
        })
    }

    fn kernel(&mut self, k: &TuneKernel) -> Result<(), GpuError> {
        if self
            .loaded
            .as_ref()
            .is_none_or(|(id, _)| *id != k.built.id.0)
        {
            self.loaded = None; // unload the previous module first
            let f = FwdKernel::load(
                self.gpu,
                &k.cubin,
                k.varlen_cubin.as_deref(),
                k.built.candidate.spec,
                k.built.footprint,
            )?;
            self.loaded = Some((k.built.id.0.clone(), f));
        }
        Ok(())
    }
}

impl Measurer for GpuMeasurer<'_> {
    fn check(&mut self, k: &TuneKernel) -> Result<Result<(), String>, TuneError> {
        let started = Instant::now();
        self.kernel(k)?;
        let kernel = &self.loaded.as_ref().expect("loaded").1;
        let mut verdict = Ok(());
        for case in &self.cases {
            let seed = fa4_spec::fnv1a64(format!("tune/{}/{}", k.built.id.0, case.name).as_bytes());
            let r = verify::run_case(self.gpu, self.support, kernel, &k.built, case, seed)?;
            if !r.passed {
                verdict = Err(format!("{}: {}", case.name, r.failure.unwrap_or_default()));
                break;
            }
        }
        self.busy += started.elapsed();
        Ok(verdict)
    }

    fn time(
        &mut self,
        k: &TuneKernel,
        bucket: Bucket,
        settle_ms: f64,
        placement: usize,
    ) -> Result<Result<Timing, String>, TuneError> {
        let started = Instant::now();
        let spec = k.built.candidate.spec;
        if self.problems_spec != Some(spec) {
            self.problems.clear();
            self.problems_spec = Some(spec);
        }
        if !self.problems.contains_key(&(bucket, placement)) {
            let case = Case {
                page_size: PAGE_SIZE,
                ..bucket_cell(&spec, bucket).case()
            };
            let spacer = bench::placement_spacer(self.gpu, placement)?;
            let problem = Problem::new(self.gpu, self.support, &spec, &case, 0x7e57)?;
            self.problems.insert(
                (bucket, placement),
                Placed {
                    case,
                    problem,
                    _spacer: spacer,
                },
            );
        }
        self.kernel(k)?;
        let kernel = &self.loaded.as_ref().expect("loaded").1;
        let Placed { case, problem, .. } = &self.problems[&(bucket, placement)];
        let times = bench::time_kernel(
            self.gpu,
            kernel,
            &problem.launch_args(),
            &mut self.flush,
            TIME_BUDGET_MS,
            settle_ms, // the recorded policy (timing_policy): 0 screening, else the finals'
        )?;
        let ms = times[times.len() / 2];
        let spread = (times[times.len() - 1] - times[0]) / ms;
        let tflops = attention_flops(&spec, case) / (ms * 1e-3) / 1e12;
        self.busy += started.elapsed();
        Ok(Ok(Timing { ms, spread, tflops }))
    }
}
