//! `fa4-gen list`: the config space, what static pruning keeps and why, each spec's default.

use clap::Args;
use fa4_spec::Arch;

use fa4_gen::space::{self};

use super::{plan_all, untested_note, CliResult, SpecArgs};

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// List every candidate config with its verdict, not one line per spec.
    #[arg(long)]
    pub configs: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

// ---- list ----------------------------------------------------------------------------------

pub(super) fn run(a: ListArgs) -> CliResult {
    let specs = a.spec.specs(&Arch::ALL)?;
    let planned = plan_all(&specs, false);
    if a.json {
        let rows: Vec<serde_json::Value> = planned
            .iter()
            .map(|p| {
                let verdict = match &p.verdict {
                    Ok(fp) => serde_json::json!({ "ok": fp }),
                    Err(r) => serde_json::json!({ "rejected": r }),
                };
                serde_json::json!({
                    "template": p.candidate.template,
                    "spec": p.candidate.spec,
                    "config": p.candidate.config,
                    "is_default": p.is_default,
                    "verdict": verdict,
                    "resources": space::resource_note(p.candidate.template, &p.candidate.spec, &p.candidate.config),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("serialises")
        );
        return Ok(());
    }
    if a.configs {
        println!(
            "{:<9} {:<26} {:<22} {:>8} {:>5}  verdict",
            "template", "spec", "config", "smem", "regs~"
        );
        for p in &planned {
            let (smem, regs, verdict) = match &p.verdict {
                Ok(fp) => (
                    format!("{}K", fp.smem_bytes.div_ceil(1024)),
                    fp.est_registers.to_string(),
                    if p.is_default {
                        "default".to_string()
                    } else {
                        "ok".to_string()
                    },
                ),
                Err(r) => ("-".into(), "-".into(), format!("pruned: {}", r.reason)),
            };
            let verdict = match space::resource_note(
                p.candidate.template,
                &p.candidate.spec,
                &p.candidate.config,
            ) {
                Some(note) => format!("{verdict} ({note})"),
                None => verdict,
            };
            println!(
                "{:<9} {:<26} {:<22} {:>8} {:>5}  {verdict}",
                p.candidate.template.name(),
                p.candidate.spec.tag(),
                p.candidate.config.tag(),
                smem,
                regs
            );
        }
    } else {
        println!(
            "{:<9} {:<6} {:<5} {:>7} {:<7} {:>5} {:>5}  {:<22} {:>6} {:>5}",
            "template",
            "arch",
            "dtype",
            "hdim",
            "mask",
            "cands",
            "kept",
            "default config",
            "smem",
            "regs~"
        );
        for (t, s) in &specs {
            let plan = space::plan(*t, s);
            let kept = plan.iter().filter(|p| p.verdict.is_ok()).count();
            let default = plan
                .iter()
                .find(|p| p.is_default)
                .expect("default in space");
            let fp = default
                .verdict
                .as_ref()
                .expect("default passes the static check");
            println!(
                "{:<9} {:<6} {:<5} {:>7} {:<7} {:>5} {:>5}  {:<22} {:>5}K {:>5}",
                t.name(),
                s.arch.name(),
                s.dtype.name(),
                fa4_spec::head_dims_name(s.head_dim, Some(s.head_dim_v)),
                s.mask.name(),
                plan.len(),
                kept,
                default.candidate.config.tag(),
                fp.smem_bytes.div_ceil(1024),
                fp.est_registers
            );
        }
    }
    if let Some(note) = untested_note(specs.iter().map(|(_, s)| s.arch)) {
        println!("{note}");
    }
    Ok(())
}
