//! `fa4-gen sass`: each built kernel's main loop read from its SASS, optionally beside another build.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use fa4_spec::{Arch, ParseError};

use fa4_gen::compile::{self, BuildDir};

use super::{CliError, CliResult};

#[derive(Debug, Args)]
pub struct SassArgs {
    /// Build folder to read (what `fa4-gen compile --out` wrote).
    #[arg(long, default_value = "build", env = "FA4_GEN_OUT")]
    pub out: PathBuf,
    /// The arch whose kernels to read.
    #[arg(long, default_value = "sm90")]
    pub arch: String,
    /// Only the kernels whose id contains this text.
    #[arg(long)]
    pub filter: Option<String>,
    /// Another build folder (e.g. of the last commit's templates): each kernel beside the
    /// one there of the same spec and config, whatever their template hashes.
    #[arg(long)]
    pub against: Option<PathBuf>,
    /// Print JSON (every opcode's count too).
    #[arg(long)]
    pub json: bool,
    /// Also read these cubins, built elsewhere (e.g. FA4's sm100 kernel compiled by the
    /// CuTe DSL without a GPU): each a row named by its file, beside the build's kernels.
    /// With only these, the build folder may be absent.
    #[arg(long)]
    pub cubin: Vec<PathBuf>,
}

/// A built kernel's id without its hash: its spec and config, across template edits.
pub(super) fn id_without_hash(id: &str) -> &str {
    id.rsplit_once('_').map_or(id, |(head, _)| head)
}

/// One built kernel's SASS, as `fa4-gen sass` reports it.
#[derive(serde::Serialize)]
pub(super) struct KernelSass {
    kernel: String,
    main_loop: Option<compile::sass::LoopCensus>,
    /// tcgen05 kernels: the softmax warps' loop (the main loop is the MMA warp's).
    softmax_loop: Option<compile::sass::LoopCensus>,
    /// Instructions in the whole kernel, each once (`sass::instruction_count`).
    instructions: u32,
    /// LDL/STL anywhere in the kernel.
    local_accesses: u32,
}

impl KernelSass {
    /// Instructions outside the main loop: once per block or work tile, or in outer loops.
    /// `instructions` leaves NOPs out, so the loop's NOPs are not taken off it.
    fn outside_loop(&self) -> u32 {
        let in_loop = self.main_loop.as_ref().map_or(0, |c| {
            c.instructions - c.opcodes.get("NOP").copied().unwrap_or(0)
        });
        self.instructions.saturating_sub(in_loop)
    }
}

pub(super) fn run(a: SassArgs) -> CliResult {
    use compile::sass;
    let arch: Arch = a
        .arch
        .parse()
        .map_err(|e: ParseError| CliError::Usage(e.to_string()))?;
    let nvdisasm = sass::find_nvdisasm()
        .ok_or_else(|| CliError::Failed(sass::SassError::NoNvdisasm.to_string()))?;
    // (id without hash) -> census, of one build folder's kernels.
    let census_of = |root: &PathBuf| -> Result<BTreeMap<String, KernelSass>, CliError> {
        let dir = BuildDir::new(root);
        let report = dir.load_report(arch)?.ok_or_else(|| {
                let root = root.display();
                CliError::Usage(format!(
                    "{root}: nothing built for {arch}; run `fa4-gen compile --arch {arch} --out {root}` first"
                ))
            })?;
        let mut out = BTreeMap::new();
        for k in &report.kernels {
            if a.filter
                .as_ref()
                .is_some_and(|f| !k.id.0.contains(f.as_str()))
            {
                continue;
            }
            let text = sass::disassemble(&nvdisasm, &dir.path(&k.cubin))
                .map_err(|e| CliError::Failed(e.to_string()))?;
            out.insert(
                id_without_hash(&k.id.0).to_string(),
                KernelSass {
                    kernel: k.id.0.clone(),
                    main_loop: sass::main_loop(&text),
                    softmax_loop: sass::softmax_loop(&text),
                    instructions: sass::instruction_count(&text),
                    local_accesses: sass::local_accesses(&text),
                },
            );
        }
        Ok(out)
    };
    let mut ours = if a.cubin.is_empty() || BuildDir::new(&a.out).report_path(arch).is_file() {
        census_of(&a.out)?
    } else {
        BTreeMap::new()
    };
    for path in &a.cubin {
        let text =
            sass::disassemble(&nvdisasm, path).map_err(|e| CliError::Failed(e.to_string()))?;
        let name = path.display().to_string();
        ours.insert(
            name.clone(),
            KernelSass {
                kernel: name,
                main_loop: sass::main_loop(&text),
                softmax_loop: sass::softmax_loop(&text),
                instructions: sass::instruction_count(&text),
                local_accesses: sass::local_accesses(&text),
            },
        );
    }
    let theirs = a.against.as_ref().map(census_of).transpose()?;
    if a.json {
        let rows: Vec<serde_json::Value> = ours
            .iter()
            .map(|(key, k)| {
                let mut row = serde_json::to_value(k).expect("serialises");
                row["against"] = serde_json::to_value(theirs.as_ref().and_then(|t| t.get(key)))
                    .expect("serialises");
                row
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("serialises")
        );
        return Ok(());
    }
    // The main loop's census (one iteration); outside: the rest of the kernel, each
    // instruction once; local: LDL/STL in the main loop / in the whole kernel (spills and
    // their reloads). Against another build: the change of the loop and of the outside.
    // tcgen05 kernels: a second row, the softmax warps' loop (tmem: TMEM loads and stores).
    println!(
        "{:>6} {:>6} {:>5} {:>5} {:>5} {:>7} {:>7}  {}kernel (main loop, one iteration)",
        "instr",
        "tensor",
        "mufu",
        "tmem",
        "r2ur",
        "local",
        "outside",
        if theirs.is_some() { "   against  " } else { "" }
    );
    let mut changed = 0;
    for (key, k) in &ours {
        let id = &k.kernel;
        let Some(c) = &k.main_loop else {
            println!(
                "{:>40} {:>7}  {id} (no loop with tensor-core instructions)",
                "-", k.instructions
            );
            continue;
        };
        let against = match theirs.as_ref().map(|t| t.get(key)) {
            None => String::new(),
            Some(Some(
                o @ KernelSass {
                    main_loop: Some(ol),
                    ..
                },
            )) => {
                let (dl, dout) = (
                    c.instructions as i64 - ol.instructions as i64,
                    k.outside_loop() as i64 - o.outside_loop() as i64,
                );
                if dl == 0 && dout == 0 {
                    format!("{:>10}  ", "same")
                } else {
                    changed += usize::from(dl != 0);
                    format!("{:>10}  ", format!("{dl:+}/{dout:+}"))
                }
            }
            Some(_) => format!("{:>10}  ", "new"),
        };
        let local = format!("{}/{}", c.local, k.local_accesses);
        println!(
            "{:>6} {:>6} {:>5} {:>5} {:>5} {local:>7} {:>7}  {against}{id}",
            c.instructions,
            c.tensor,
            c.mufu,
            c.tmem,
            c.r2ur,
            k.outside_loop()
        );
        if let Some(s) = &k.softmax_loop {
            println!(
                "{:>6} {:>6} {:>5} {:>5} {:>5} {:>7} {:>7}  {}  (its softmax loop)",
                s.instructions,
                s.tensor,
                s.mufu,
                s.tmem,
                s.r2ur,
                s.local,
                "",
                if theirs.is_some() { "          " } else { "" }
            );
        }
    }
    if let Some(t) = &theirs {
        println!(
            "{} kernels, {} matched in {}, {changed} with a main loop of another length",
            ours.len(),
            ours.keys().filter(|k| t.contains_key(*k)).count(),
            a.against
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        );
    }
    Ok(())
}
