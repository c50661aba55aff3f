//! `fa4-gen verify`: kernels checked on the GPU against the f32 reference.

use std::path::PathBuf;

use clap::Args;
use fa4_spec::{fnv1a64, Arch, Dtype};

use fa4_gen::compile::BuildDir;
use fa4_gen::measure::gpu::{FwdKernel, GpuError};
use fa4_gen::measure::verify;

use super::{device_kernels, open_gpu, parse_list, CliError, CliResult, ConfigArgs, SpecArgs};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Build folder to take cubins from (kernels missing there are compiled into it).
    #[arg(long, default_value = "build", env = "FA4_GEN_OUT")]
    pub build_dir: PathBuf,
    #[command(flatten)]
    pub configs: ConfigArgs,
    /// Only these cases (names as printed), comma separated.
    #[arg(long, value_delimiter = ',')]
    pub cases: Vec<String>,
    /// Seed of the random inputs [default: from the clock; printed for replay].
    #[arg(long)]
    pub seed: Option<u64>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

// ---- verify --------------------------------------------------------------------------------

pub(super) fn run(a: VerifyArgs, quiet: bool) -> CliResult {
    // Validate the selection before touching the GPU, so a typo fails fast anywhere.
    let requested: Vec<Arch> = parse_list(&a.spec.arch)?;
    let _ = a.spec.specs(&Arch::ALL)?;
    let cases: Vec<verify::Case> = verify::standard_cases()
        .into_iter()
        .filter(|c| a.cases.is_empty() || a.cases.contains(&c.name))
        .collect();
    if cases.is_empty() {
        let names: Vec<String> = verify::standard_cases()
            .into_iter()
            .map(|c| c.name)
            .collect();
        return Err(CliError::Usage(format!(
            "no case matches --cases; cases are {}",
            names.join(", ")
        )));
    }
    let (gpu, arch) = open_gpu(a.device, &requested)?;
    let specs = a.spec.specs(&[arch])?;
    let dir = BuildDir::new(&a.build_dir);
    let configs = a.configs.choice();
    let (kernels, support) = device_kernels(&gpu, arch, &specs, configs, &[], &dir, quiet)?;
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    println!(
        "verify on {} ({arch}, {} SMs, driver CUDA {}), {} kernels x {} cases, seed {seed}",
        gpu.info.name,
        gpu.info.sm_count,
        gpu.info.driver,
        kernels.len(),
        cases.len()
    );
    println!(
        "{:<34} {:<28} {:<26} {:>9} {:>9} {:>8}  result",
        "spec", "config", "case", "O rel L2", "LSE err", "TFLOP/s"
    );
    let mut results = Vec::new();
    let mut refused = Vec::new();
    // A kernel its launch's checks refuse fails alone and the others go on; a fault while
    // one runs stops the call (the context is lost).
    let mut refuse = |built: &fa4_gen::compile::BuiltKernel, why: String| {
        println!(
            "{:<34} {:<28} {:<26} {:>9} {:>9} {:>8}  FAIL: {why}",
            built.candidate.spec.tag(),
            built.candidate.config.tag(),
            "-",
            "-",
            "-",
            "-"
        );
        refused.push(verify::RefusedKernel {
            kernel: built.id.to_string(),
            spec: built.candidate.spec,
            why,
        });
    };
    'kernels: for fa4_gen::measure::kernels::ReadyKernel {
        built,
        cubin,
        varlen_cubin,
    } in &kernels
    {
        let kernel = FwdKernel::load(
            &gpu,
            cubin,
            varlen_cubin.as_deref(),
            built.candidate.spec,
            built.footprint,
        )?;
        for case in &cases {
            let case_seed = fnv1a64(format!("{seed}/{}/{}", built.id, case.name).as_bytes());
            let r = match verify::run_case(&gpu, &support, &kernel, built, case, case_seed) {
                Ok(r) => r,
                Err(e @ GpuError::Problem(_)) => {
                    refuse(built, format!("case {}: {e}", case.name));
                    continue 'kernels;
                }
                Err(e) => return Err(e.into()),
            };
            println!(
                "{:<34} {:<28} {:<26} {:>9.2e} {:>9.1e} {:>8}  {}",
                built.candidate.spec.tag(),
                built.candidate.config.tag(),
                case.name,
                r.o_rel_l2,
                r.lse_max_abs,
                r.tflops.map_or("-".to_string(), |t| format!("{t:.1}")),
                r.failure
                    .as_deref()
                    .map_or("ok".to_string(), |f| format!("FAIL: {f}"))
            );
            results.push(r);
        }
    }
    let passed = results.iter().filter(|r| r.passed).count();
    let failed = results.len() - passed + refused.len();
    let worst = |d: Dtype| {
        results
            .iter()
            .filter(|r| r.spec.dtype == d)
            .map(|r| r.o_rel_l2)
            .fold(0.0f64, f64::max)
    };
    // The 16-bit dtypes always, e4m3 where it was checked.
    let dtypes: Vec<Dtype> = Dtype::EVERY
        .into_iter()
        .filter(|d| Dtype::ALL.contains(d) || results.iter().any(|r| r.spec.dtype == *d))
        .collect();
    let worsts: Vec<String> = dtypes
        .iter()
        .map(|&d| format!("{} {:.2e}", d.name(), worst(d)))
        .collect();
    let bounds: Vec<String> = dtypes
        .iter()
        .map(|&d| format!("{:.0e}", verify::o_tolerance(d)))
        .collect();
    println!(
        "{} of {} checks passed{}; worst O relative L2: {} (bounds {})",
        passed,
        results.len(),
        if refused.is_empty() {
            String::new()
        } else {
            format!(", {} kernels refused before running", refused.len())
        },
        worsts.join(", "),
        bounds.join(", "),
    );
    if let Some(path) = &a.json {
        let report = verify::VerifyReport {
            date: fa4_gen::timestamp::utc_now(),
            commit: env!("FA4_GEN_COMMIT").to_string(),
            device: gpu.info.clone(),
            results,
            refused,
        };
        verify::write_json(path, &report)?;
    }
    if failed > 0 {
        return Err(CliError::Failed(format!("{failed} checks failed")));
    }
    Ok(())
}
