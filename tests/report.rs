//! `fa4-gen report` as a user meets it: the page of the committed export and the latest
//! committed grid, rendered by a real browser (Chromium headless, from Debian's packages:
//! `scripts/ensure-chromium.sh`), and one clear line for bad input.
//!
//! Without Chromium the browser test skips, saying so; with FA4GEN_REQUIRE_BROWSER=1 (CI,
//! `.ci/run`) it fails instead. FA4GEN_CHROMIUM names another browser binary.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{fa4_gen, fa4_gen_ok, stderr};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The browser, or None (saying the test skips) where there is none and none is required.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("FA4GEN_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.is_file() {
        return Some(path);
    }
    if std::env::var("FA4GEN_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
        panic!(
            "no Chromium at {} and FA4GEN_REQUIRE_BROWSER=1: run scripts/ensure-chromium.sh (the README's test command does)",
            path.display()
        );
    }
    eprintln!(
        "skipped: no Chromium at {}; scripts/ensure-chromium.sh installs it",
        path.display()
    );
    None
}

/// The newest grid in bench/results: `<prefix>-grid-peers.json` and our rows beside it
/// (`<prefix>-grid.json` or `<prefix>-grid-hopper.json`).
fn latest_grid() -> (PathBuf, PathBuf) {
    let results = repo().join("bench/results");
    let mut peers: Vec<PathBuf> = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("-grid-peers.json"))
        })
        .collect();
    peers.sort();
    for p in peers.iter().rev() {
        let name = p.file_name().unwrap().to_str().unwrap();
        let prefix = name.trim_end_matches("-peers.json");
        for ours in [format!("{prefix}.json"), format!("{prefix}-hopper.json")] {
            let ours = results.join(ours);
            if ours.is_file() {
                return (ours, p.clone());
            }
        }
    }
    panic!(
        "no grid beside the peers in {} (`*-grid-peers.json` with `*-grid.json` or `*-grid-hopper.json`)",
        results.display()
    );
}

/// The DOM Chromium builds from `page`, serialised (`--dump-dom`).
fn rendered_dom(chromium: &Path, page: &Path, profile: &Path) -> String {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", chromium.display()));
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).map(|_| s)
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "Chromium did not finish rendering {} in 120 s",
                page.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dom = reader.join().unwrap().unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(status.success(), "Chromium failed ({status}): {err}");
    dom
}

/// Each `<svg class="heatmap">` of a DOM: its id, the cells it says it has
/// (`data-cells`), and the `<rect class="cell ...">` elements inside it.
fn heatmaps(dom: &str) -> Vec<(String, usize, usize)> {
    dom.split("<svg class=\"heatmap\"")
        .skip(1)
        .map(|chunk| {
            let svg = &chunk[..chunk.find("</svg>").expect("every heatmap closes")];
            let attr = |name: &str| {
                let start = svg.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
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

#[test]
fn the_report_renders_in_a_browser_with_every_cell() {
    let Some(chromium) = chromium() else { return };
    let (ours, peers) = latest_grid();
    let export = repo().join("tuning-db/sm90.json");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let args = [
        "report",
        "--tuning-db",
        export.to_str().unwrap(),
        "--bench",
        ours.to_str().unwrap(),
        "--peers",
        peers.to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
    ];
    fa4_gen_ok(dir.path(), &args);

    // What the page must draw: a cell per key of the export, a grid cell per cell our
    // tuned rows time.
    let records =
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&export).unwrap())
            .unwrap()["records"]
            .as_object()
            .unwrap()
            .len();
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&ours).unwrap()).unwrap();
    let grid: BTreeSet<(u64, u64, u64)> = rows
        .iter()
        .filter(|r| r["backend"].as_str().is_some_and(|b| b.ends_with("-tuned")))
        .filter(|r| r["tflops"].is_number() && r["dtype"] == "bf16")
        .map(|r| {
            (
                r["hdim"].as_u64().unwrap(),
                r["causal"].as_u64().unwrap(),
                r["seqlen"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(records > 0 && !grid.is_empty());

    let profile = dir.path().join("profile");
    let dom = rendered_dom(&chromium, &page, &profile);
    assert!(
        dom.contains("<title>fa4-gen: pictures of the tuning</title>") && dom.contains("</html>"),
        "Chromium's DOM of {} is no whole page:\n{}",
        page.display(),
        &dom[..dom.len().min(2000)]
    );
    let maps = heatmaps(&dom);
    for (id, said, drawn) in &maps {
        assert_eq!(
            said, drawn,
            "heatmap {id}: the cells it says against those rendered"
        );
    }
    let sum = |prefix: &str| -> usize {
        maps.iter()
            .filter(|m| m.0.starts_with(prefix))
            .map(|m| m.2)
            .sum()
    };
    assert_eq!(
        sum("tuning-"),
        records,
        "a tuning cell per key of the export"
    );
    assert_eq!(sum("grid-"), grid.len(), "a grid cell per cell of ours");
    assert!(maps.iter().filter(|m| m.0.starts_with("tuning-")).count() >= 2);
    // Nothing fetched: no script, no link, no address anywhere.
    for absent in ["<script", "<link", "http:", "https:"] {
        assert!(!dom.contains(absent), "{absent}");
    }
}

#[test]
fn report_names_a_bad_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let export = repo().join("tuning-db/sm90.json");
    let export = export.to_str().unwrap();
    std::fs::write(
        dir.path().join("cut.json"),
        "[{\"backend\": \"fa4-gen-hopper-tuned\", \"hdim\"",
    )
    .unwrap();
    let out = fa4_gen(
        dir.path(),
        &["report", "--tuning-db", export, "--bench", "cut.json"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.starts_with("error: cut.json: not JSON"), "{err}");

    let out = fa4_gen(dir.path(), &["report", "--tuning-db", "missing.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("error: missing.json: cannot be read"),
        "{}",
        stderr(&out)
    );

    let out = fa4_gen(dir.path(), &["report", "--tuning-db", "cut.json"]);
    assert!(
        stderr(&out).starts_with("error: cut.json: not a tuning-db export"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.path().join("report.html").exists(), "nothing written");
}
