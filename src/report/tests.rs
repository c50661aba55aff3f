use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fa4_spec::{Arch, Bucket, Dtype, KernelSpec, MaskKind, Template, TileConfig};

use super::*;
use crate::db::{Candidate, Detail, Device, Outcome, Record, TimingPolicy};

/// FLOPs of every synthetic problem, in TFLOP/s x ms: 300 TFLOP/s at 1 ms.
const WORK: f64 = 300.0;

/// A record whose candidate i took `times[i]` (screened ms, settled ms).
fn record(
    template: Template,
    head_dim: u32,
    mask: MaskKind,
    bucket: Bucket,
    gpu: &str,
    times: &[(f64, Option<f64>)],
) -> Record {
    Record {
        template,
        spec: KernelSpec::new(Arch::Sm90, Dtype::Bf16, head_dim, mask),
        bucket,
        device: Device {
            name: gpu.into(),
            sm_count: 132,
            driver: "13.0".into(),
            nvrtc: "13.0".into(),
        },
        template_hash: "abc".into(),
        timing: TimingPolicy {
            warmup: 2,
            runs: 10,
            l2_flush: true,
            budget_ms: 25.0,
            finalists: 4,
            settle_ms: 50.0,
            key_warmup_ms: 250.0,
            final_passes: 3,
            final_placements: 3,
            short_key_passes: 0,
            short_key_ms: 0.0,
        },
        date: "2026-12-06T00:00:00Z".into(),
        candidates: times
            .iter()
            .enumerate()
            .map(|(i, &(ms, settled))| Candidate {
                config: TileConfig {
                    block_m: 128,
                    block_n: 64 * (i as u32 + 1),
                    warps: 12,
                    stages: 2,
                    switches: BTreeMap::new(),
                },
                kernel: format!("k{i}"),
                outcome: Outcome::Measured {
                    ms,
                    spread: 0.01,
                    tflops: WORK / ms,
                    registers: 168,
                    settled_ms: settled,
                    settled_passes: vec![],
                    code_hash: String::new(),
                },
            })
            .collect(),
    }
}

/// A tuned key: the second candidate settles 1.25x faster than the default.
fn tuned(template: Template, head_dim: u32, mask: MaskKind, bucket: Bucket, gpu: &str) -> Record {
    record(
        template,
        head_dim,
        mask,
        bucket,
        gpu,
        &[(1.0, Some(1.0)), (0.8, Some(0.8))],
    )
}

/// Seven keys over two GPUs: on the H200 d128 causal at three buckets and a ragged
/// one, d128 unmasked at one, the portable template's d64 causal at one; one d128 key
/// on the H100.
fn sample_records() -> Vec<Record> {
    let (h200, h100) = ("NVIDIA H200", "NVIDIA H100 80GB HBM3");
    let mut v: Vec<Record> = [512, 1024, 2048]
        .into_iter()
        .map(|s| tuned(Template::Hopper, 128, MaskKind::Causal, Bucket::of(s), h200))
        .collect();
    v.push(tuned(
        Template::Hopper,
        128,
        MaskKind::Causal,
        Bucket::of(1024).ragged(),
        h200,
    ));
    v.push(tuned(
        Template::Hopper,
        128,
        MaskKind::None,
        Bucket::of(512),
        h200,
    ));
    v.push(tuned(
        Template::Portable,
        64,
        MaskKind::Causal,
        Bucket::of(512),
        h200,
    ));
    v.push(tuned(
        Template::Hopper,
        128,
        MaskKind::Causal,
        Bucket::of(512),
        h100,
    ));
    v
}

/// The records as an export's entries, read back from the export's text.
fn entries(records: &[Record]) -> Vec<Entry> {
    let all: Vec<Entry> = records.iter().cloned().map(Entry::from).collect();
    let text = crate::db::export(&all, Detail::Slim);
    parse_export(Path::new("sm90.json"), &text).unwrap()
}

fn inputs(records: &[Record]) -> Inputs {
    Inputs {
        export: Named {
            path: PathBuf::from("tuning-db/sm90.json"),
            value: entries(records),
        },
        bench: vec![],
        peers: vec![],
        tune_runs: vec![],
        ours: vec![],
        dtype: "bf16".into(),
        current: BTreeMap::new(),
    }
}

/// Each heatmap of a page: its id, the cells it says it has (`data-cells`), and the
/// `<rect class="cell` elements it holds.
fn heatmaps(html: &str) -> Vec<(String, usize, usize)> {
    html.split("<svg class=\"heatmap\"")
        .skip(1)
        .map(|chunk| {
            let svg = &chunk[..chunk.find("</svg>").expect("closed")];
            let attr = |name: &str| {
                let start = svg.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                svg[start..start + svg[start..].find('"').unwrap()].to_string()
            };
            (
                attr("id"),
                attr("data-cells").parse().unwrap(),
                svg.matches("<rect class=\"cell").count(),
            )
        })
        .collect()
}

fn rows(path: &str, text: &str) -> Named<Vec<BenchRow>> {
    Named {
        path: path.into(),
        value: parse_rows(Path::new(path), text).unwrap(),
    }
}

#[test]
fn the_tuning_maps_have_a_cell_per_key() {
    let page = render(&inputs(&sample_records()));
    assert_eq!((page.tuning_cells, page.gpus, page.grid_cells), (7, 2, 0));
    let maps = heatmaps(&page.html);
    let ids: Vec<&str> = maps.iter().map(|m| m.0.as_str()).collect();
    // The GPU with the most keys first, head dims in order.
    assert_eq!(ids, ["tuning-0-d64", "tuning-0-d128", "tuning-1-d128"]);
    let cells: Vec<(usize, usize)> = maps.iter().map(|m| (m.1, m.2)).collect();
    assert_eq!(cells, [(1, 1), (5, 5), (1, 1)]);
    // The H200's d128 map: a row for causal, for unmasked and for ragged causal batches.
    let h = &page.html;
    for row in [
        ">hopper bf16 causal<",
        ">hopper bf16 none<",
        ">hopper bf16 causal ragged<",
        ">portable bf16 causal<",
    ] {
        assert!(h.contains(row), "{row}");
    }
    assert!(h.contains(r#"data-key="hopper/sm90_bf16_d128_causal/r01024/NVIDIA_H200-132sm""#));
    assert_eq!(
        h.matches(r#"data-tflops="375.0" data-gain="1.250""#)
            .count(),
        7
    );
    assert!(h.starts_with("<!DOCTYPE html>") && h.ends_with("</html>\n"));
}

#[test]
fn a_pick_reads_in_its_ranking_time_against_the_default() {
    let none = BTreeMap::new();
    let bucket = Bucket::of(4096);
    let key = |times: &[(f64, Option<f64>)]| {
        let r = record(
            Template::Hopper,
            128,
            MaskKind::Causal,
            bucket,
            "GPU",
            times,
        );
        pick(&Entry::from(r), &none)
    };
    // Settled times rank: the default settled slower than it screened.
    let p = key(&[(1.0, Some(1.2)), (0.9, Some(0.96))]);
    assert_eq!(p.config.as_deref(), Some("m128n128w12s2"));
    assert!((p.tflops.unwrap() - WORK / 0.96).abs() < 1e-9);
    assert!((p.gain.unwrap() - 1.25).abs() < 1e-9);
    assert!(p.settled && p.held_back.is_none());
    // Within the margin (1% with placed finals): the default stays, its rival noted.
    let p = key(&[(1.0, Some(1.0)), (0.99, Some(0.995))]);
    assert_eq!(p.config.as_deref(), Some("m128n64w12s2"));
    assert_eq!(p.gain, Some(1.0));
    assert!((p.held_back.unwrap() - 1.0 / 0.995).abs() < 1e-9);
    assert!((p.tflops.unwrap() - WORK).abs() < 1e-9);
    // Before the finals, screening times and the 10% margin.
    let p = key(&[(1.0, None), (0.95, None)]);
    assert!(!p.settled && p.gain == Some(1.0) && p.held_back.is_some());
    let p = key(&[(1.0, None), (0.8, None)]);
    assert!((p.gain.unwrap() - 1.25).abs() < 1e-9);
    // Stale against the current template hash.
    let current = BTreeMap::from([(Template::Hopper, "new".to_string())]);
    let r = record(
        Template::Hopper,
        128,
        MaskKind::Causal,
        bucket,
        "GPU",
        &[(1.0, None)],
    );
    assert!(pick(&Entry::from(r), &current).stale);
}

#[test]
fn stale_keys_are_marked() {
    let mut i = inputs(&sample_records());
    i.current = BTreeMap::from([
        (Template::Hopper, "abc".to_string()),
        (Template::Portable, "newer".to_string()),
    ]);
    let html = render(&i).html;
    assert_eq!(html.matches("class=\"cell tuned stale\"").count(), 1);
    assert!(html.contains("stroke-dasharray"));
}

const OURS: &str = r#"[
 {"backend":"fa4-gen-hopper","dtype":"bf16","hdim":64,"seqlen":512,"causal":0,"mask":"none","window":[128,0],"features":{"sinks":false,"softcap":false},"tflops":250.0},
 {"backend":"fa4-gen-hopper:m128n256w12s2","dtype":"bf16","hdim":64,"seqlen":512,"causal":0,"tflops":320.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"bf16","hdim":64,"seqlen":512,"causal":0,"mask":"none","tflops":300.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"bf16","hdim":64,"seqlen":512,"causal":1,"mask":"causal","tflops":200.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"bf16","hdim":64,"seqlen":4096,"causal":0,"mask":"none","tflops":500.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"bf16","hdim":64,"seqlen":4096,"causal":1,"mask":"causal","tflops":450.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"bf16","hdim":128,"seqlen":512,"causal":0,"mask":"none","tflops":400.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"bf16","hdim":128,"seqlen":512,"causal":1,"mask":"causal","tflops":300.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"bf16","hdim":128,"seqlen":4096,"causal":0,"mask":"none","tflops":650.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"bf16","hdim":128,"seqlen":4096,"causal":1,"mask":"causal","tflops":560.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"e4m3","hdim":128,"seqlen":4096,"causal":1,"mask":"causal","tflops":800.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"bf16","hdim":128,"seqlen":4096,"causal":1,"mask":"local","tflops":100.0},
 {"backend":"fa4-gen-hopper-tuned","dtype":"bf16","hdim":128,"seqlen":7000,"causal":1,"layer":"llama-3-8b","mix":"mixed","tflops":540.0}
]"#;

/// The peers on the same eight cells; cuDNN beats us at d64 512 unmasked only.
const PEERS: &str = r#"[
 {"backend":"flash","hdim":64,"seqlen":512,"causal":0,"tflops":260.0},
 {"backend":"cudnn","hdim":64,"seqlen":512,"causal":0,"tflops":330.0},
 {"backend":"cudnn","hdim":64,"seqlen":512,"causal":1,"tflops":190.0},
 {"backend":"cudnn","hdim":64,"seqlen":4096,"causal":0,"tflops":450.0},
 {"backend":"fa4","hdim":64,"seqlen":4096,"causal":0,"tflops":480.0},
 {"backend":"cudnn","hdim":64,"seqlen":4096,"causal":1,"tflops":400.0},
 {"backend":"cudnn","hdim":128,"seqlen":512,"causal":0,"tflops":390.0},
 {"backend":"cudnn","hdim":128,"seqlen":512,"causal":1,"tflops":290.0},
 {"backend":"cudnn","hdim":128,"seqlen":4096,"causal":0,"tflops":600.0},
 {"backend":"cudnn","hdim":128,"seqlen":4096,"causal":1,"tflops":540.0},
 {"backend":"fa4","hdim":128,"seqlen":4096,"causal":1,"tflops":null,"error":"no kernel"},
 {"backend":"fa4","hdim":128,"seqlen":4096,"causal":1,"feature":"softcap","window":-1,"tflops":900.0},
 {"backend":"fa4","hdim":128,"seqlen":4096,"causal":1,"feature":"none","window":128,"tflops":900.0},
 {"backend":"fa4gen","hdim":128,"seqlen":4096,"causal":1,"tflops":9000.0}
]"#;

#[test]
fn the_grid_sets_each_cell_beside_its_best_peer() {
    let mut i = inputs(&sample_records());
    i.bench = vec![rows("ours.json", OURS)];
    i.peers = vec![rows("peers.json", PEERS)];
    assert_eq!(default_ours(&i.bench), ["fa4-gen-hopper-tuned"]);
    let g = grid("fa4-gen-hopper-tuned", &i.bench, &i.peers, "bf16");
    assert_eq!(g.cells.len(), 8, "bf16 plain grid cells only");
    let names: Vec<&str> = g.peers.iter().map(String::as_str).collect();
    assert_eq!(
        names,
        ["cudnn", "fa4", "flash"],
        "fa4gen is ours, not a peer"
    );
    let c = &g.cells[&(64, 64, false, 512)];
    assert_eq!(c.best_peer(), Some(("cudnn", 330.0)));
    assert!((c.ratio().unwrap() - 300.0 / 330.0).abs() < 1e-12);
    assert_eq!(
        g.cells[&(64, 64, false, 4096)].best_peer(),
        Some(("fa4", 480.0))
    );
    let c = &g.cells[&(128, 128, true, 4096)];
    assert_eq!(
        c.peers.keys().collect::<Vec<_>>(),
        ["cudnn"],
        "a failed row, a feature and a window are no cells"
    );

    let page = render(&i);
    assert_eq!((page.grid_cells, page.tuning_cells), (8, 7));
    let maps = heatmaps(&page.html);
    assert_eq!(maps[0], ("grid-0".to_string(), 8, 8));
    let h = &page.html;
    assert_eq!(h.matches("<rect class=\"cell below\"").count(), 1);
    assert_eq!(h.matches("<rect class=\"cell above\"").count(), 7);
    assert!(h.contains(r#"data-key="fa4-gen-hopper-tuned/d64/none/512" data-ours="300.0" data-best-peer="cudnn" data-ratio="0.909""#));
    assert!(h.contains("<b>1 of 8 cells below the best peer</b>"), "{h}");
    assert!(h.contains("min 0.909 (d64 none 512)"));
    // Rows that are no grid cells are counted, not drawn: our local and layer rows, the
    // peers' softcap and window rows.
    assert!(h.contains(" 4 rows are no plain grid cell"), "{h}");
    assert!(h.contains(" 1 rows have no time"));
    // Every cell in figures, the losing one flagged.
    assert!(h.contains("<td class=\"l\">cuDNN</td><td class=\"below\">0.909</td>"));
}

#[test]
fn ours_can_be_named_and_the_page_says_what_is_missing() {
    let mut i = inputs(&sample_records());
    let page = render(&i);
    assert!(page.html.contains("No bench rows given"));
    assert!(page.html.contains("<p class=\"missing\">Not recorded."));

    i.bench = vec![rows("ours.json", OURS)];
    i.ours = vec!["fa4-gen-hopper".into()];
    let page = render(&i);
    assert_eq!(
        page.grid_cells, 1,
        "the default's row: one cell, no peer given"
    );
    assert!(page.html.contains("<rect class=\"cell nopeer\""));
}

const TUNE_RUN: &str = r#"{
  "counts": {"checked": 151, "compiled": 155, "finals": 96, "timed": 604},
  "device": {"driver": "13.0", "name": "NVIDIA H200", "nvrtc": "13.0", "sm_count": 132},
  "gpu_busy_share": 0.7086,
  "keys": [
    {"bucket": 1024, "ragged": true, "spec": "sm90_bf16_d128_causal", "speedup": 1.25, "candidates": 2, "failed": 0},
    {"bucket": 8192, "ragged": true, "spec": "sm90_bf16_d128_causal", "speedup": 1.0, "candidates": 2, "failed": 0}
  ],
  "stopped_by_budget": false,
  "wall_seconds": 52.855
}"#;

#[test]
fn the_tuners_time_and_busy_share_come_from_its_summaries() {
    let mut i = inputs(&sample_records());
    i.tune_runs = vec![Named {
        path: "tune.json".into(),
        value: parse_tune_run(Path::new("tune.json"), TUNE_RUN).unwrap(),
    }];
    let h = render(&i).html;
    assert!(h.contains("<td>52.9 s</td>"), "{h}");
    assert!(h.contains("GPU busy 71%"));
    assert!(h.contains("<rect class=\"busy\" x=\"0\" y=\"0\" width=\"85.0\""));
    assert!(
        h.contains("cover 1 of the export's 7 keys"),
        "the ragged 1024 key is in the export, 8192 not"
    );
    assert!(h.contains("The export does not record them"));
}

#[test]
fn the_page_is_self_contained_and_escapes_what_it_quotes() {
    let mut i = inputs(&sample_records());
    let evil = r#"[{"backend":"<img src=x onerror=alert(1)>-tuned","hdim":64,"seqlen":512,"causal":0,"tflops":1.0}]"#;
    i.bench = vec![rows("<b>ours&.json", evil)];
    i.peers = vec![rows("peers.json", PEERS)];
    let h = render(&i).html;
    assert!(h.contains("&lt;img src=x onerror=alert(1)&gt;-tuned"));
    assert!(h.contains("&lt;b&gt;ours&amp;.json"));
    for absent in [
        "<img", "<script", "<b>ours", "http:", "https:", "<link", "@import", "url(",
    ] {
        assert!(!h.contains(absent), "{absent}");
    }
}

#[test]
fn bad_inputs_name_their_file() {
    let p = Path::new("bench/x.json");
    let err = |text: &str| parse_rows(p, text).unwrap_err().to_string();
    assert!(err("{not json").starts_with("bench/x.json: not JSON"));
    assert!(err(r#"{"rows": []}"#).contains("bench/x.json: not a list of bench rows"));
    assert_eq!(
        err(
            r#"[{"backend":"a","hdim":64,"seqlen":512,"causal":0}, {"backend":"b","seqlen":1,"causal":0}]"#
        ),
        "bench/x.json: row 1: no `hdim`"
    );
    assert!(
        err(r#"[{"backend":"a","hdim":64,"seqlen":512,"causal":2}]"#)
            .contains("row 0: `causal` is 2")
    );
    assert!(
        err(r#"[{"backend":"a","hdim":64,"seqlen":512,"causal":0,"tflops":"fast"}]"#)
            .contains("`tflops` is \"fast\", not a positive number")
    );
    assert!(err(r#"[3]"#).contains("row 0 is not an object"));

    let e = parse_export(Path::new("db.json"), "[1, 2]")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("db.json: not a tuning-db export"), "{e}");
    let e = parse_export(Path::new("db.json"), r#"{"format":"other","records":{}}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("format `other`"), "{e}");

    let e = parse_tune_run(Path::new("t.json"), r#"{"device":{"name":"X"}}"#)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "t.json: not a `fa4-gen tune --json` summary of a run on a GPU (no `wall_seconds`)"
    );

    // Files: missing, and a backend named that the rows lack.
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("sm90.json");
    let all: Vec<Entry> = sample_records().into_iter().map(Entry::from).collect();
    std::fs::write(&export, crate::db::export(&all, Detail::Slim)).unwrap();
    let ours = dir.path().join("ours.json");
    std::fs::write(&ours, OURS).unwrap();
    let missing = dir.path().join("peers.json");
    let req = Request {
        export: export.clone(),
        bench: vec![ours.clone()],
        peers: vec![missing.clone()],
        dtype: "bf16".into(),
        ..Request::default()
    };
    let e = load(&req).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: cannot be read", missing.display())),
        "{e}"
    );
    let req = Request {
        peers: vec![],
        ours: vec!["fa4-gen-hopper-tund".into()],
        ..req
    };
    let e = load(&req).unwrap_err();
    assert!(matches!(e, ReportError::Usage(_)));
    assert!(e.to_string().contains(
        "--ours fa4-gen-hopper-tund: no such backend in the --bench files (they have fa4-gen-hopper, fa4-gen-hopper-tuned)"
    ));
    let req = Request {
        ours: vec![],
        ..req
    };
    let i = load(&req).unwrap();
    assert_eq!(i.export.value.len(), 7);
    let seen: BTreeSet<u32> = i.bench[0].value.iter().map(|r| r.hdim).collect();
    assert_eq!(seen, BTreeSet::from([64, 128]));
}
