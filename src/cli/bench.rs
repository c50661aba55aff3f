//! `fa4-gen bench`: kernels timed on the FA3 grid, varlen batches, model layers, and the host cost of a call.

use std::path::PathBuf;

use clap::Args;
use fa4_spec::{Arch, Dtype, Features, KernelSpec, MaskKind, ParseError};

use fa4_gen::compile::BuildDir;
use fa4_gen::db::{self, GpuId};
use fa4_gen::render::Renderer;
use fa4_gen::space::{Candidate, Template, TemplateSpace};

use fa4_gen::measure::bench::{BenchPlan, Event};

use super::{
    device_kernels, open_gpu, parse_list, window_arg, CliError, CliResult, ConfigArgs, SpecArgs,
};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Also time each cell's tuned choice from this tuning database (rows with backend
    /// `fa4-gen-tuned`: the choice the record serves, else the default), measured on this
    /// GPU or, where it has no records, on the arch's most tuned GPU, as the shipped
    /// cache serves them.
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Head dims.
    #[arg(long = "head-dim", value_delimiter = ',', default_value = "64,128,256")]
    pub head_dim: Vec<u32>,
    /// Sequence lengths (batch = total tokens / seqlen).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "512,1024,2048,4096,8192,16384"
    )]
    pub seqlen: Vec<i32>,
    /// Masks: none, causal, local.
    #[arg(long, value_delimiter = ',', default_value = "none,causal")]
    pub mask: Vec<String>,
    /// Features: none, or sinks, softcap, paged joined with + (sinks+softcap).
    #[arg(long, value_delimiter = ',', default_value = "none")]
    pub features: Vec<String>,
    /// Keys per page for paged kernels.
    #[arg(long, default_value_t = 16)]
    pub page_size: i32,
    /// Time model layers instead of the grid: gpt-oss-20b (sliding and full layers),
    /// llama-3-8b, or all. Each layer brings its own head dim, heads, mask and features.
    #[arg(long, value_delimiter = ',')]
    pub layers: Vec<String>,
    /// Time serving batches instead of the grid: ragged prefill mixes (prompts of mixed
    /// length packed with cu_seqlens, a chunked-prefill step behind cached prefixes) on
    /// the attention layers of llama-3-8b (32:8 heads, d128) and gpt-oss-20b (64:8, d64),
    /// causal, or all. Rows carry the mix and its lengths (`bench/peers_serving.py`
    /// times the peers on the same batches). `--features paged` reads K/V through a page
    /// table, as SGLang's extend and vLLM's prefill calls do.
    #[arg(long, value_delimiter = ',')]
    pub serving: Vec<String>,
    /// Hand the grid's batches over packed with cu_seqlens (varlen) instead of dense.
    #[arg(long)]
    pub varlen: bool,
    /// Sliding window LEFT,RIGHT for local masks (-1: unbounded).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "128,0",
        allow_hyphen_values = true
    )]
    pub window: Vec<i32>,
    /// Soft-capping value for softcap kernels.
    #[arg(long, default_value_t = 50.0)]
    pub softcap: f32,
    /// Element type.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Tokens per batch.
    #[arg(long, default_value_t = 16384)]
    pub total_tokens: i32,
    /// Hidden size: heads = hidden / head dim.
    #[arg(long, default_value_t = 2048)]
    pub hidden: i32,
    #[command(flatten)]
    pub configs: ConfigArgs,
    /// Kernel time spent per (kernel, cell), in milliseconds.
    #[arg(long, default_value_t = 200.0)]
    pub budget_ms: f64,
    /// Back-to-back runs before the timed ones, in milliseconds of kernel time, so the
    /// clocks settle (the peers' `do_bench` warms up for 50)
    #[arg(long, default_value_t = 50.0)]
    pub warmup_ms: f64,
    /// Build folder to take cubins from (kernels missing there are compiled into it).
    #[arg(long, default_value = "build", env = "FA4_GEN_OUT")]
    pub build_dir: PathBuf,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Write the rows as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Measure the host's cost of a prefill call through the runtime instead (lookup +
    /// launch per call, first call, preload), with the Python module's and FA4's per-call
    /// overhead and first call beside it when python3 with torch (and flash_attn.cute)
    /// is there.
    #[arg(long)]
    pub host: bool,
    /// The kernel cache `--host` launches from.
    #[arg(long, default_value = "generated")]
    pub cache: PathBuf,
    /// Templates to time [default: every template that supports the GPU's arch].
    #[arg(long, value_delimiter = ',')]
    pub template: Vec<String>,
    /// Time each cell on this many buffer sets, each allocated behind a spacer of another
    /// size (rows carry `placement`), to tell a kernel's speed from where its buffers
    /// landed in memory.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub placements: u32,
    /// With --placements: move only this buffer (q, k, v or o) behind each set's spacer,
    /// the others staying where the first set put them [default: all four together].
    #[arg(long)]
    pub move_buffer: Option<String>,
    /// Launch without a split workspace: unmasked persistent kernels then work their last
    /// round whole instead of sharing its tiles out by keys (to measure what that buys).
    #[arg(long)]
    pub no_split_tail: bool,
}

/// `bench --host`: the runtime's host cost per call here, then the Python module's and
/// FA4's from `python -m fa4gen.overhead` when python3 can run it.
pub(super) fn bench_host(a: &BenchArgs) -> CliResult {
    let (gpu, arch) = open_gpu(a.device, &[])?;
    let cost = fa4_gen::measure::bench::host_cost(&gpu, &a.cache).map_err(CliError::Failed)?;
    println!(
        "host cost on {} ({arch}, driver CUDA {}): {}",
        gpu.info.name, gpu.info.driver, cost.problem
    );
    println!("  kernel            {}", cost.kernel);
    println!("  open cache        {:.2} ms", cost.open_ms);
    println!(
        "  first call        {:.2} ms (bind, read + check + load the cubin, launch)",
        cost.first_call_ms
    );
    println!(
        "  per call          {:.2} us median, {:.2} us p90 over {} calls (lookup, checks, cuLaunchKernel)",
        cost.per_call_us, cost.per_call_p90_us, cost.calls
    );
    println!("  lookup alone      {:.0} ns", cost.select_ns);
    println!(
        "  preload           {:.1} ms for all {} {arch} kernels",
        cost.preload_ms, cost.preloaded
    );
    drop(gpu);
    let python = python_overhead(&a.cache);
    match &python {
        Ok(v) => println!("python (fa4gen, FA4, FA2 per call): {v}"),
        Err(why) => println!("python overhead skipped: {why}"),
    }
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "backend": "fa4-gen",
            "runtime": cost,
            "python": python.as_ref().ok(),
            "python_skipped": python.as_ref().err(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap() + "\n")
            .map_err(|e| CliError::Failed(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

/// Runs `python3 -m fa4gen.overhead --json` from the repository's `python/` folder.
pub(super) fn python_overhead(cache: &std::path::Path) -> Result<serde_json::Value, String> {
    let python_dir = std::path::Path::new("python");
    if !python_dir.join("fa4gen/overhead.py").is_file() {
        return Err("no python/fa4gen here (run from the repository root)".into());
    }
    let lib = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("libfa4_runtime.so")))
        .filter(|l| l.is_file());
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-m", "fa4gen.overhead", "--json", "--cache"])
        .arg(cache)
        .env("PYTHONPATH", {
            let mut path = std::ffi::OsString::from(python_dir);
            if let Some(rest) = std::env::var_os("PYTHONPATH") {
                path.push(":");
                path.push(rest);
            }
            path
        });
    if let Some(lib) = lib {
        cmd.env("FA4GEN_LIB", lib);
    }
    let out = cmd.output().map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").to_string();
        return Err(format!("python3 -m fa4gen.overhead failed: {last}"));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("fa4gen.overhead printed no JSON: {e}"))
}

pub(super) fn run(a: BenchArgs, quiet: bool) -> CliResult {
    if a.host {
        return bench_host(&a);
    }
    let dtype: Dtype = a
        .dtype
        .parse()
        .map_err(|e: ParseError| CliError::Usage(e.to_string()))?;
    let masks: Vec<MaskKind> = parse_list(&a.mask)?;
    if let Some(s) = a.seqlen.iter().find(|s| **s < 1) {
        return Err(CliError::Usage(format!(
            "--seqlen {s} is not a positive length"
        )));
    }
    let features: Vec<Features> = parse_list(&a.features)?;
    let window = window_arg(&a.window)?;
    if !(a.softcap.is_finite() && a.softcap > 0.0) {
        return Err(CliError::Usage(format!(
            "--softcap {} is not a positive number",
            a.softcap
        )));
    }
    if a.page_size < 1 {
        return Err(CliError::Usage(format!(
            "--page-size {} is not a positive number of keys",
            a.page_size
        )));
    }
    let moved = match &a.move_buffer {
        None => None,
        Some(name) => {
            let buffer = fa4_gen::measure::bench::Buffer::parse(name).ok_or_else(|| {
                CliError::Usage(format!("--move-buffer {name}: expected q, k, v or o"))
            })?;
            if a.placements < 2 {
                return Err(CliError::Usage(format!(
                    "--move-buffer {name} moves a buffer between buffer sets: add --placements 2 or more"
                )));
            }
            Some(buffer)
        }
    };
    // Cells, each with the feature sets it is timed with.
    if !a.serving.is_empty() && !a.layers.is_empty() {
        return Err(CliError::Usage(
            "--serving and --layers each choose the cells: give one of them".into(),
        ));
    }
    let cells: Vec<(fa4_gen::measure::bench::Cell, Vec<Features>)> = if !a.serving.is_empty() {
        fa4_gen::measure::bench::serving_cells(&a.serving)
            .map_err(CliError::Usage)?
            .into_iter()
            .map(|cell| (cell, features.clone()))
            .collect()
    } else if a.layers.is_empty() {
        fa4_gen::measure::bench::paper_grid(
            &a.head_dim,
            &a.seqlen,
            &masks,
            a.total_tokens,
            a.hidden,
        )
        .into_iter()
        .map(|mut cell| {
            cell.window = window;
            cell.softcap = a.softcap;
            cell.varlen = a.varlen;
            (cell, features.clone())
        })
        .collect()
    } else {
        fa4_gen::measure::bench::model_layers(&a.layers)
            .map_err(CliError::Usage)?
            .into_iter()
            .map(|cell| {
                let f = cell.features.unwrap_or_default();
                (cell, vec![f])
            })
            .collect()
    };
    let templates: Vec<Template> = if a.template.is_empty() {
        Template::ALL.to_vec()
    } else {
        parse_list(&a.template)?
    };
    let wanted = |arch: Arch| -> Vec<(Template, KernelSpec)> {
        let mut specs: Vec<(Template, KernelSpec)> = cells
            .iter()
            .flat_map(|(cell, fs)| {
                fs.iter().map(move |&features| KernelSpec {
                    features,
                    head_dim_v: cell.head_dim_v,
                    ..KernelSpec::new(arch, dtype, cell.head_dim, cell.mask)
                })
            })
            .flat_map(|spec| {
                templates
                    .iter()
                    .copied()
                    .filter(move |t| t.supports(&spec))
                    .map(move |t| (t, spec))
            })
            .collect();
        specs.sort();
        specs.dedup();
        specs
    };
    // Validate the head dims before touching the GPU.
    let spec_args = SpecArgs {
        arch: Vec::new(),
        head_dim: cells
            .iter()
            .map(|(c, _)| fa4_spec::head_dims_name(c.head_dim, Some(c.head_dim_v)))
            .collect(),
        dtype: vec![dtype.name().to_string()],
        mask: Vec::new(),
        features: Vec::new(),
        template: Vec::new(),
    };
    // (a head dim some arch offers: DeepSeek's 192/128 is the Hopper template's alone)
    let checked: Vec<_> = Arch::ALL
        .iter()
        .map(|&arch| spec_args.specs(&[arch]))
        .collect();
    if !checked.iter().any(Result::is_ok) {
        checked.into_iter().next().expect("some arch")?;
    }
    let (gpu, arch) = open_gpu(a.device, &[])?;
    let specs = wanted(arch);
    let dir = BuildDir::new(&a.build_dir);
    let configs = a.configs.choice();
    let tuned = match &a.db {
        None => None,
        Some(path) => {
            let renderer = Renderer::embedded()?;
            let own = GpuId {
                name: gpu.info.name.clone(),
                sm_count: gpu.info.sm_count,
            };
            let picks = db::tuned_choices(path, arch, &own, &templates, |t| {
                renderer.template_hash(t).to_string()
            })?;
            // A stale record's cell is timed with the default as its "tuned" row, which
            // reads as a regression unless said (always, -q or not).
            if picks.stale > 0 {
                eprintln!(
                    "warning: {} records in {} are of other template versions: their cells time the default; \
                     re-tune those specs (`fa4-gen tune`, which keeps the timings of kernels whose code is unchanged)",
                    picks.stale,
                    path.display()
                );
            }
            if let Some(other) = &picks.measured_on {
                eprintln!(
                    "note: {} has no records of {}: the tuned rows time the picks measured on {other}, \
                     as the shipped cache serves them",
                    path.display(),
                    gpu.info.name
                );
            }
            let choices = picks.choices;
            Some(choices)
        }
    };
    let extra: Vec<Candidate> = tuned
        .iter()
        .flatten()
        .map(|((template, spec, _), config)| Candidate {
            template: *template,
            spec: *spec,
            config: config.clone(),
        })
        .collect();
    let (kernels, support) = device_kernels(&gpu, arch, &specs, configs, &extra, &dir, quiet)?;
    println!(
        "bench on {} ({arch}, {} SMs, driver CUDA {}), {} kernels, {} tokens, hidden {}",
        gpu.info.name,
        gpu.info.sm_count,
        gpu.info.driver,
        kernels.len(),
        a.total_tokens,
        a.hidden
    );
    println!(
        "{:>7} {:>6} {:<7} {:<14} {:>5} {:>5} {:<20} {:>9} {:>8}",
        "hdim", "seqlen", "mask", "features", "batch", "heads", "config", "ms", "TFLOP/s"
    );
    let plan = BenchPlan {
        cells,
        page_size: a.page_size,
        placements: a.placements,
        moved,
        split_tail: !a.no_split_tail,
        budget_ms: a.budget_ms,
        warmup_ms: a.warmup_ms,
        all_configs: configs.is_some(),
        tuned,
    };
    let rows =
        fa4_gen::measure::bench::run(&gpu, &kernels, &support, &plan, |event| match event {
            Event::Timed {
                row,
                cell,
                features,
                is_tuned,
                placed,
            } => println!(
                "{:>7} {:>6} {:<7} {:<14} {:>5} {:>5} {:<20} {:>9.3} {:>8.1}{}{}",
                fa4_spec::head_dims_name(row.hdim, row.hdim_v),
                row.seqlen,
                cell.mask.name(),
                // a serving row's mix stands where the grid's feature set does
                cell.mix.map_or_else(
                    || features.name(),
                    |m| format!("{}/{}", row.layer.unwrap_or(""), m.name)
                ),
                row.batch,
                row.heads,
                row.config,
                row.ms,
                row.tflops,
                match (row.is_default, is_tuned) {
                    (true, true) => "  (default, tuned)",
                    (true, false) => "  (default)",
                    (false, true) => "  (tuned)",
                    (false, false) => "",
                },
                match (row.placement, placed) {
                    (Some(n), Some(p)) => format!(
                        "  placement {n}: q {:#x} k {:#x} v {:#x} o {:#x}",
                        p.q, p.k, p.v, p.o
                    ),
                    _ => String::new(),
                }
            ),
            Event::Best {
                row,
                cell,
                features,
            } => println!(
                "{:>4} {:>6} {:<7} {:<14} best: {} at {:.1} TFLOP/s",
                row.hdim,
                row.seqlen,
                cell.mask.name(),
                features.name(),
                row.config,
                row.tflops
            ),
        })?;
    if let Some(path) = &a.json {
        fa4_gen::fsutil::write_atomic(
            path,
            (serde_json::to_string_pretty(&rows).expect("serialises") + "\n").as_bytes(),
        )?;
    }
    Ok(())
}
