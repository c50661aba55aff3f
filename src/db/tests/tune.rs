//! A slim record met by `tune`: the candidates it left out are not yet screened there,
//! so the tuner screens them; the key's finals stand unless one of them screens among
//! the finalists, and then they are taken again, side by side.

use std::collections::BTreeMap;

use super::*;
use crate::compile::{BuiltKernel, Resources};
use crate::render::KernelId;
use crate::space::Template;
use crate::tune::{self, Key, Measurer, Session, Timing, TuneError, TuneKernel};

fn spec() -> KernelSpec {
    KernelSpec::new(Arch::Sm90, Dtype::Bf16, 64, MaskKind::Causal)
}

/// `n` kernels of real candidates of `spec()`, the default first, built under template
/// version "h1" (no cubins: the scripted measurer needs none).
fn built(n: usize) -> Vec<TuneKernel> {
    let mut planned = crate::space::plan(Template::Portable, &spec());
    planned.sort_by_key(|p| !p.is_default);
    planned
        .into_iter()
        .filter_map(|p| p.verdict.clone().ok().map(|fp| (p, fp)))
        .take(n)
        .enumerate()
        .map(|(i, (p, footprint))| TuneKernel {
            built: BuiltKernel {
                id: KernelId(format!("k{i}")),
                is_default: p.is_default,
                candidate: p.candidate,
                template_hash: "h1".into(),
                footprint,
                resources: Resources::default(),
                source: String::new(),
                cubin: String::new(),
                cubin_hash: String::new(),
                code_hash: format!("code{i}"),
                varlen_cubin_hash: None,
                varlen_registers: None,
                nvrtc_version: "13.0".into(),
                compile_ms: 0,
            },
            cubin: Vec::new(),
            varlen_cubin: None,
        })
        .collect()
}

/// Kernel `ki` screens at `screen[i]` ms and times 5% faster in the finals; counts what
/// it timed.
struct Script {
    screen: Vec<f64>,
    screened: Vec<String>,
    finals: usize,
}

impl Measurer for Script {
    fn check(&mut self, _: &TuneKernel) -> Result<Result<(), String>, TuneError> {
        Ok(Ok(()))
    }

    fn time(
        &mut self,
        kernel: &TuneKernel,
        _: Bucket,
        settle_ms: f64,
        _: usize,
    ) -> Result<Result<Timing, String>, TuneError> {
        let id = &kernel.built.id.0;
        let mut ms = self.screen[id[1..].parse::<usize>().unwrap()];
        if settle_ms > 0.0 {
            self.finals += 1;
            ms *= 0.95;
        } else {
            self.screened.push(id.clone());
        }
        Ok(Ok(Timing {
            ms,
            spread: 0.01,
            tflops: 1.0 / ms,
        }))
    }
}

fn tune(db: &TuningDb, ks: &[TuneKernel], screen: &[f64]) -> (tune::Counts, Script) {
    let current = |_: Template| "h1".to_string();
    let session = Session {
        db,
        device: device(),
        template_hash: &current,
        deadline: None,
        retake_finals: false,
    };
    let mut m = Script {
        screen: screen.to_vec(),
        screened: Vec::new(),
        finals: 0,
    };
    let keys = [Key {
        template: Template::Portable,
        spec: spec(),
        bucket: Bucket::of(1024),
    }];
    let (counts, stopped) = tune::tune_spec(&session, &keys, ks, &mut m, &tune::Silent).unwrap();
    assert!(!stopped);
    (counts, m)
}

fn device() -> Device {
    Device {
        name: "Test GPU".into(),
        sm_count: 8,
        driver: "13.0".into(),
        nvrtc: "13.0".into(),
    }
}

/// `(kernel, finals passes)` of the candidates of `r` that have finals.
fn finals(r: &Record) -> BTreeMap<String, usize> {
    r.candidates
        .iter()
        .filter(|c| c.has_finals())
        .map(|c| (c.kernel.clone(), c.settled_passes().len()))
        .collect()
}

#[test]
fn tune_screens_what_a_slim_record_left_out_and_keeps_its_finals_unless_they_change() {
    let ks = built(8);
    assert_eq!(ks.len(), 8);
    let screen = [1.0, 1.2, 0.9, 1.1, 0.95, 1.3, 1.4, 1.5];
    let dir = tempfile::tempdir().unwrap();
    let full_db = TuningDb::open(&dir.path().join("full")).unwrap();
    let (counts, _) = tune(&full_db, &ks, &screen);
    assert_eq!((counts.timed, counts.finals), (8, 4 * tune::FINAL_PASSES));
    let full = full_db.entries().unwrap().remove(0);
    let finalists = finals(&full.record);
    assert_eq!(
        finalists.keys().collect::<Vec<_>>(),
        ["k0", "k2", "k3", "k4"]
    );
    let slim = full.slim();
    assert_eq!(kernels(&slim), ["k0", "k2", "k3", "k4"]);
    assert_eq!(slim.screened.unwrap().measured, 4);

    // The same screening again: the four left out are screened, the four held are not;
    // none of them screens among the finalists, so the finals stand as they were.
    let db = TuningDb::open(&dir.path().join("slim")).unwrap();
    db.merge_entries(vec![slim.clone()]).unwrap();
    let (counts, m) = tune(&db, &ks, &screen);
    assert_eq!((counts.skipped, counts.timed), (4, 4));
    assert_eq!(m.screened, ["k1", "k5", "k6", "k7"]);
    assert_eq!(counts.finals, 0, "the finals stand");
    let back = db.entries().unwrap().remove(0);
    assert!(!back.is_slim(), "it holds every candidate again");
    assert_eq!(back.record.candidates.len(), 8);
    assert_eq!(finals(&back.record), finalists);
    assert_eq!(
        back.record.choice().unwrap().kernel,
        full.record.choice().unwrap().kernel
    );

    // k6 screens faster now (another day, another GPU): it joins the finalists in
    // place of k3, and the key's finals are taken again, all four side by side.
    let db = TuningDb::open(&dir.path().join("slim2")).unwrap();
    db.merge_entries(vec![slim]).unwrap();
    let mut faster = screen;
    faster[6] = 0.8;
    let (counts, m) = tune(&db, &ks, &faster);
    assert_eq!(m.screened, ["k1", "k5", "k6", "k7"]);
    assert_eq!(counts.finals, 4 * tune::FINAL_PASSES);
    let back = db.records().unwrap().remove(0);
    assert_eq!(
        finals(&back),
        ["k0", "k2", "k4", "k6"]
            .map(|k| (k.to_string(), tune::FINAL_PASSES))
            .into()
    );
    assert_eq!(back.choice().unwrap().kernel, "k6");
}
