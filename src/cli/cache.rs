//! `fa4-gen build-cache` (the shipped kernel cache from the tuning-db export) and
//! `fa4-gen explain` (which kernel the dispatcher picks for a problem, and why).

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Args;
use fa4_spec::{Arch, Dtype, Features, MaskKind, TileConfig};

use super::{
    compile_pool, head_dims_arg, load_nvrtc, parse_list, BarReporter, CliError, CliResult,
};
use fa4_gen::cache;
use fa4_gen::db::{parse_export, Record, MIN_GAIN, MIN_GAIN_SCREENED};
use fa4_gen::render::Renderer;
use fa4_gen::runtime::{KernelCache, Query, Reason};
use fa4_gen::space::{switches, Footprint};

#[derive(Debug, Args)]
pub struct BuildCacheArgs {
    /// Architectures [default: all; sm90 is tuned, the others serve their defaults]. The
    /// manifest's other archs keep their entries.
    #[arg(long, value_delimiter = ',')]
    pub arch: Vec<String>,
    /// Head dims of Q and K, or QK/V pairs such as 192/128 [default: all]. The manifest's
    /// other head dims keep their entries.
    #[arg(long = "head-dim", value_delimiter = ',')]
    pub head_dim: Vec<String>,
    /// Feature sets to ship: none, sinks, softcap, paged joined with +, or all [default:
    /// all]. The manifest's other feature sets keep their entries.
    #[arg(long, value_delimiter = ',')]
    pub features: Vec<String>,
    /// Tuning-db exports to take the tuned choices from.
    #[arg(
        long = "tuning-db",
        value_delimiter = ',',
        default_value = "tuning-db/sm90.json"
    )]
    pub tuning_db: Vec<PathBuf>,
    /// The cache folder.
    #[arg(long, default_value = "generated")]
    pub out: PathBuf,
    /// Parallel NVRTC compilations [default: one per core].
    #[arg(short, long)]
    pub jobs: Option<usize>,
    /// Serve each spec that carries sinks and was never tuned with the tuned choices of
    /// the same spec without sinks, built for it, instead of its heuristic default (off
    /// in the shipped cache until those kernels have been checked on a GPU: run `fa4-gen
    /// verify` on them before serving such a cache).
    #[arg(long = "borrow-sinks")]
    pub borrow_sinks: bool,
    /// Also build the kernels the shipped cache holds back until every default has passed
    /// `fa4-gen verify` on a GPU (none now: every e4m3 default, paged ones included, has passed): a cache to check them with
    /// (`python3 -m fa4gen.check`), not to serve
    #[arg(long = "held-back")]
    pub held_back: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[arg(long, default_value = "sm90")]
    pub arch: String,
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Q/K head dim, or a QK/V pair such as 192/128.
    #[arg(long = "head-dim")]
    pub head_dim: String,
    /// V head dim [default: the pair's, else the Q/K head dim].
    #[arg(long = "head-dim-v")]
    pub head_dim_v: Option<u32>,
    /// The longest query sequence of the batch (max_seqlen_q).
    #[arg(long)]
    pub seqlen: u32,
    /// A varlen batch of several sequences (prompts of mixed length packed with
    /// cu_seqlens): served its bucket's ragged choice where the cache has one.
    #[arg(long)]
    pub ragged: bool,
    /// The device, as tuning names GPUs ("NVIDIA H100 80GB HBM3 (132 SMs)"): its own
    /// tuned choices where the cache has them [default: the arch's]
    #[arg(long)]
    pub gpu: Option<String>,
    /// The longest key sequence (max_seqlen_k) [default: --seqlen]: a window wider than
    /// the keys is served as causal or unmasked, as a prefill launches it.
    #[arg(long = "seqlen-k")]
    pub seqlen_k: Option<u32>,
    /// none, causal or local.
    #[arg(long, default_value = "causal")]
    pub mask: String,
    /// Sliding window LEFT,RIGHT for local masks (-1: unbounded); one bounded on both
    /// sides is served by the bucket of its width.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "-1,-1",
        allow_hyphen_values = true
    )]
    pub window: Vec<i32>,
    /// none, or sinks, softcap, paged joined with +.
    #[arg(long, default_value = "none")]
    pub features: String,
    /// The kernel cache.
    #[arg(long, default_value = "generated")]
    pub cache: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn build_cache(a: BuildCacheArgs, quiet: bool) -> CliResult {
    let mut archs: Vec<Arch> = parse_list(&a.arch)?;
    if archs.is_empty() {
        archs = Arch::ALL.to_vec();
    }
    let features: Vec<Features> = if a.features.is_empty() || a.features.iter().any(|f| f == "all")
    {
        Features::ALL.to_vec()
    } else {
        parse_list(&a.features)?
    };
    let mut all: Vec<Record> = Vec::new();
    let mut texts = Vec::new();
    for path in &a.tuning_db {
        let text = std::fs::read_to_string(path).map_err(|e| {
            CliError::Failed(format!(
                "{}: {e}; export a tuning database with `fa4-gen db export`",
                path.display()
            ))
        })?;
        all.extend(parse_export(path, &text)?);
        texts.push(text);
    }
    let renderer = Renderer::embedded()?;
    // Records of other template versions are stale: never shipped.
    let (records, stale): (Vec<Record>, Vec<Record>) = all
        .into_iter()
        .partition(|r| !r.is_stale(|t| renderer.template_hash(t).to_string()));
    let stale = stale.len();
    if stale > 0 {
        // Their specs ship heuristic defaults: say so even when quiet.
        eprintln!(
            "warning: {stale} tuning records are of other template versions and are left out \
             (their specs ship the defaults); re-tune them with `fa4-gen tune` and export"
        );
    }
    let head_dims: Vec<(u32, Option<u32>)> = a
        .head_dim
        .iter()
        .map(|h| head_dims_arg(h))
        .collect::<Result<_, _>>()?;
    let specs = cache::specs(&archs, &head_dims, &features, a.held_back)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let nvrtc = load_nvrtc(quiet)?;
    let pool = compile_pool(a.jobs)?;
    let started = std::time::Instant::now();
    let hash = cache::export_hash(&texts);
    let untuned = if a.borrow_sinks {
        cache::Untuned::Borrow
    } else {
        cache::Untuned::Default
    };
    // The manifest this build replaces, to say which kernels' machine code moved.
    let previous: Option<fa4_spec::manifest::Manifest> =
        std::fs::read_to_string(a.out.join(fa4_spec::manifest::MANIFEST_FILE))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok());
    let request = cache::BuildRequest {
        specs: &specs,
        records: &records,
        export_hash: &hash,
        untuned,
        previous: previous.as_ref(),
    };
    let reporter = BarReporter::new(quiet);
    let built = pool.install(|| cache::build(&nvrtc, &renderer, &request, &reporter, &a.out))?;
    // Said even when quiet: those buckets serve the nearest borrowed choice or the default.
    for id in &built.dropped {
        eprintln!(
            "warning: {id} did not build cleanly, so the buckets it was borrowed for serve the \
             nearest borrowed choice or the spec's default"
        );
    }
    let manifest = &built.manifest;
    if !quiet {
        let built_archs: BTreeSet<Arch> = built.compiled.values().map(|k| k.spec.arch).collect();
        for (arch, entry) in manifest
            .archs
            .iter()
            .filter(|(a, _)| built_archs.contains(a))
        {
            let tuned = entry.specs.values().filter(|s| !s.tuned.is_empty());
            let borrowing = tuned.clone().filter(|s| s.borrowed_from.is_some()).count();
            println!(
                "{arch}: {} specs, {} tuned{}{}",
                entry.specs.len(),
                tuned.count() - borrowing,
                entry
                    .tuned_on
                    .as_ref()
                    .map_or(" (untuned: heuristic defaults)".to_string(), |g| format!(
                        " on {g}"
                    )),
                if borrowing > 0 {
                    format!(", {borrowing} serving a twin's tuned choices")
                } else {
                    String::new()
                }
            );
        }
        println!(
            "{} kernels built into {} ({:.0} s); its manifest serves {} kernels",
            built.compiled.len(),
            a.out.display(),
            started.elapsed().as_secs_f64(),
            manifest.kernels.len(),
        );
    }
    if let Some(previous) = &previous {
        // Said even when quiet: a template edit that moved machine code needs its kernels
        // checked and timed again on a GPU.
        let c = cache::code_changes(previous, &built.compiled);
        println!(
            "machine code against the manifest replaced: {} kernels unchanged, {} changed, {} new",
            c.unchanged,
            c.changed.len(),
            c.new
        );
        for (old, new) in &c.changed {
            println!("  changed: {new} (was {old})");
        }
    }
    Ok(())
}

/// How a kernel runs, in words: its warps' roles, how it loads and how its grid covers
/// the work tiles.
fn schedule(config: &TileConfig, fp: &Footprint, paged: bool) -> String {
    let warpgroups = fp.threads / 128;
    let warp_specialised = config.switch(switches::WARP_SPECIALIZED, 0) == 1;
    let mut parts = vec![if warp_specialised {
        format!(
            "warp-specialised: a producer warpgroup and {} consumer warpgroup{}",
            warpgroups.saturating_sub(1),
            if warpgroups == 2 { "" } else { "s" }
        )
    } else {
        format!("every warp loads and computes ({} warps)", fp.threads / 32)
    }];
    // The portable kernel's lazy switch has the Hopper one's name and meaning; pingpong
    // and overlap exist on warp-specialised kernels only, stagger on portable ones.
    for (switch, what) in [
        (switches::PINGPONG, "pingpong"),
        (switches::OVERLAP, "softmax under the previous PV GEMM"),
        (
            switches::STAGGER,
            "a warp's two m-tiles in turn, one's softmax beside the other's GEMMs",
        ),
        (
            switches::CAP_OFFSET,
            "exponents offset by the cap's bound (no row max) for caps up to 51.9",
        ),
        (switches::LAZY_RESCALE, "O rescaled lazily"),
    ] {
        if config.switch(switch, 0) == 1 {
            parts.push(what.to_string());
        }
    }
    if warp_specialised {
        parts.push(format!("a {}-stage K/V ring", config.stages));
    }
    let blocks = config.switch(switches::MIN_BLOCKS, 1);
    if blocks > 1 {
        parts.push(format!("registers capped for {blocks} blocks per SM"));
    }
    parts.push(match (fp.tma_rows, warp_specialised) {
        (0, true) => "Q/K/V by the producer's cp.async".to_string(),
        (0, false) => "Q/K/V by cp.async".to_string(),
        (keys, _) if paged => format!(
            "K/V by TMA through the pages ({keys} keys per tile, a box per page), Q by cp.async"
        ),
        (keys, _) => format!("Q/K/V by TMA ({keys} keys per tile)"),
    });
    parts.push(if fp.persistent_per_sm > 0 {
        format!(
            "persistent grid ({} block{} per SM over the work tiles)",
            fp.persistent_per_sm,
            if fp.persistent_per_sm == 1 { "" } else { "s" }
        )
    } else if fp.causal_m_blocks_in_y {
        "one block per work tile, causal tiles heaviest first over a sequence's heads".to_string()
    } else if fp.section_key_bytes > 0 {
        "one block per work tile, causal tiles in L2 sections of a few (head, sequence) \
         pairs, heaviest first"
            .to_string()
    } else if fp.cluster_m > 1 {
        format!(
            "one block per work tile, in clusters of {} along the queries that share K/V loads (TMA multicast)",
            fp.cluster_m
        )
    } else {
        "one block per work tile".to_string()
    });
    parts.join(", ")
}

pub(super) fn explain(a: ExplainArgs) -> CliResult {
    let usage = |e: fa4_spec::ParseError| CliError::Usage(e.to_string());
    let arch: Arch = a.arch.parse().map_err(usage)?;
    let dtype: Dtype = a.dtype.parse().map_err(usage)?;
    let mask: MaskKind = a.mask.parse().map_err(usage)?;
    let features: Features = a.features.parse().map_err(usage)?;
    let (head_dim, pair_v) = super::head_dims_arg(&a.head_dim)?;
    let head_dim_v = match (pair_v, a.head_dim_v) {
        (Some(p), Some(v)) if p != v => {
            return Err(CliError::Usage(format!(
                "--head-dim {} and --head-dim-v {v} name two V head dims: pass one",
                a.head_dim
            )))
        }
        (p, v) => p.or(v).unwrap_or(head_dim),
    };
    let cache = KernelCache::open(&a.cache)?;
    let q = Query {
        arch,
        dtype,
        head_dim,
        head_dim_v,
        mask,
        features,
        max_seqlen_q: a.seqlen,
        window: super::window_arg(&a.window)?,
        ragged: a.ragged,
    }
    .as_launched(a.seqlen_k.unwrap_or(a.seqlen));
    let s = cache
        .select_on(&q, a.gpu.as_deref())
        .map_err(|e| CliError::Usage(e.to_string()))?;
    // What the lookup costs a serving engine per call (the cache is open already).
    const LOOKUPS: u32 = 100_000;
    let t = std::time::Instant::now();
    for i in 0..LOOKUPS {
        let q = Query {
            max_seqlen_q: q.max_seqlen_q.wrapping_add(i & 1),
            ..q
        };
        std::hint::black_box(cache.select(std::hint::black_box(&q)).is_ok());
    }
    let lookup_ns = t.elapsed().as_nanos() as f64 / LOOKUPS as f64;
    // The GPU whose measurements chose the kernel: the device's own, else the arch's.
    let gpu = s
        .tuned_on
        .or_else(|| cache.tuned_on(arch))
        .unwrap_or("no GPU");
    let why = match s.reason {
        Reason::Tuned { bucket } if s.is_default => format!(
            "tuned on {gpu}, bucket {bucket}: the heuristic default, no candidate beat it by \
             {:.0}% ({:.0}% before the finals)",
            (MIN_GAIN - 1.0) * 100.0,
            (MIN_GAIN_SCREENED - 1.0) * 100.0
        ),
        Reason::Tuned { bucket } => format!("tuned on {gpu}, bucket {bucket}: the fastest candidate"),
        Reason::TunedRagged { bucket } => format!(
            "tuned on {gpu} for ragged batches, bucket {bucket} (varlen batches of prompts up to \
             {bucket} tokens): the fastest candidate{}",
            if s.is_default { ", the heuristic default" } else { "" }
        ),
        Reason::NearestTuned { bucket, wanted } => format!(
            "no record for bucket {wanted}: the choice tuned on {gpu} for the nearest bucket, {bucket}"
        ),
        Reason::Borrowed { bucket, wanted } => format!(
            "{arch} is not tuned for this spec: the choice tuned on {gpu} for {} at bucket \
             {bucket}{}, built for this spec (its sinks leave the tile's key loop as it was)",
            cache.borrowed_from(&s.kernel.spec).unwrap_or("a related spec"),
            if bucket == wanted {
                String::new()
            } else {
                format!(" (nearest to {wanted})")
            }
        ),
        Reason::Default => {
            // A sinks spec whose twin without sinks is tuned could serve that twin's tiles.
            let twin = cache::donor(&s.kernel.spec).filter(|d| cache.is_tuned(d));
            let hint = twin.map_or(String::new(), |d| {
                format!(
                    " ({} is tuned: a cache built with `fa4-gen build-cache --borrow-sinks` \
                     serves its choices here)",
                    d.tag()
                )
            });
            format!("{arch} is not tuned for this spec: the heuristic default{hint}")
        }
    };
    let k = s.kernel;
    let note = if fa4_gen::space::awaits_verify(&k.spec) {
        Some(format!(
            "{} {} kernels are held back from the shipped cache until every default passes \
             `fa4-gen verify` on a GPU; this cache was built with `build-cache --held-back`, to check them",
            k.spec.dtype, k.spec.mask
        ))
    } else {
        fa4_gen::space::held_back_template(&k.spec)
            .map(|t| fa4_gen::space::held_back_reason(t, &k.spec))
    };
    // How a varlen batch (cu_seqlens_q) of this bucket is launched.
    let varlen = match &k.varlen_cubin_hash {
        Some(_) => format!(
            "its varlen build, {}: the tiles that have rows, sequence by sequence",
            a.cache
                .join(fa4_spec::varlen_cubin_path(&k.cubin))
                .display()
        ),
        None => "the dense grid: the longest sequence's m-blocks for every sequence".to_string(),
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "kernel": s.id,
                "varlen": varlen,
                "config": k.config,
                "footprint": k.footprint,
                "registers": k.registers,
                "cubin": a.cache.join(&k.cubin),
                "is_default": s.is_default,
                "why": why,
                "note": note,
                "lookup_ns": lookup_ns,
            }))
            .expect("serialises")
        );
        return Ok(());
    }
    println!("kernel    {}", s.id);
    println!("config    {}", k.config.tag());
    println!(
        "launch    {} threads, {} rows per block{}, {} bytes of shared memory, {} registers",
        k.footprint.threads,
        k.footprint.block_m,
        if k.footprint.pack_gqa {
            " (pack-GQA)"
        } else {
            ""
        },
        k.footprint.smem_bytes,
        k.registers
    );
    println!(
        "schedule  {}",
        schedule(&k.config, &k.footprint, k.spec.features.paged_kv)
    );
    println!("cubin     {}", a.cache.join(&k.cubin).display());
    println!("varlen    {varlen}");
    println!("why       {why}");
    if let Some(note) = note {
        println!("note      {note}");
    }
    println!("lookup    {lookup_ns:.0} ns per select (mean of {LOOKUPS}; no GPU, no allocation)");
    Ok(())
}
