//! What `fa4-gen tune` shows while it runs, on stderr: a bar on a terminal, plain lines
//! elsewhere (CI and device-call logs: one per spec built and tuned, and one every
//! [`LINE_EVERY`] measurements), nothing with --quiet or --json but the warnings.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

use fa4_gen::compile::{BuildSummary, Nvrtc};
use fa4_gen::db::Outcome;
use fa4_gen::space::Template;
use fa4_gen::tune::{Counts, Key, Progress, TuneKernel};
use fa4_spec::KernelSpec;
use indicatif::{ProgressBar, ProgressStyle};

/// Measurements between two plain progress lines.
const LINE_EVERY: usize = 100;

enum Show {
    /// --quiet or --json: the warnings alone.
    Nothing,
    /// A terminal: a bar with the counts and the current key's best.
    Bar(ProgressBar),
    /// Anywhere else: the bar's counts as lines now and then.
    Lines { started: Instant },
}

/// Shows the run's progress and says what it warns of.
pub(super) struct Printer {
    show: Show,
    quiet: bool,
    compile_only: bool,
    counts: Mutex<Tally>,
}

#[derive(Default)]
struct Tally {
    compiled: usize,
    checked: usize,
    wrong: usize,
    timed: usize,
    failed: usize,
    finals: usize,
    /// Measurements announced and done (the bar's length and position), and the ones
    /// done at the last plain line.
    planned: usize,
    done: usize,
    shown: usize,
}

impl Tally {
    /// The bar's message: the counts, then what `key` is at.
    fn line(&self, key: &Key, at: &str) -> String {
        format!(
            "compiled {} · checked {} ({} wrong) · timed {} · failed {} · finals {} · {} {}: {at}",
            self.compiled,
            self.checked,
            self.wrong,
            self.timed,
            self.failed,
            self.finals,
            key.spec.tag(),
            key.bucket.key(), // as the record keys name it: s04096, r04096
        )
    }
}

impl Printer {
    pub(super) fn new(quiet: bool, compile_only: bool) -> Self {
        let show = if quiet {
            Show::Nothing
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} tuning {pos}/{len} [{elapsed_precise} eta {eta}] {msg}",
                )
                .expect("valid template"),
            );
            Show::Bar(bar)
        } else {
            Show::Lines {
                started: Instant::now(),
            }
        };
        Printer {
            show,
            quiet,
            compile_only,
            counts: Default::default(),
        }
    }

    /// Clears the bar before the closing summary.
    pub(super) fn finish(&self) {
        if let Show::Bar(bar) = &self.show {
            bar.finish_and_clear();
        }
    }

    /// `done` more measurements ended; `at` says what `key` is at.
    fn advance(&self, c: &mut Tally, done: usize, key: &Key, at: &str) {
        c.done += done;
        match &self.show {
            Show::Bar(bar) => {
                bar.inc(done as u64);
                bar.set_message(c.line(key, at));
            }
            Show::Lines { .. } if c.done >= c.shown + LINE_EVERY => {
                c.shown = c.done;
                self.say(c, &c.line(key, at));
            }
            _ => {}
        }
    }

    /// A plain progress line, shaped like the bar.
    fn say(&self, c: &Tally, what: &str) {
        if let Show::Lines { started } = &self.show {
            let s = started.elapsed().as_secs();
            eprintln!(
                "tuning {}/{} [{:02}:{:02}:{:02}] {what}",
                c.done,
                c.planned,
                s / 3600,
                s / 60 % 60,
                s % 60
            );
        }
    }
}

impl Progress for Printer {
    fn nvrtc_loaded(&self, nvrtc: &Nvrtc) {
        if nvrtc.version() != (13, 0) && !self.quiet {
            eprintln!(
                "warning: NVRTC {} from {}: cubins meant to ship are built with 13.0.x (the GPU hosts run CUDA 13.0)",
                nvrtc.version_string(),
                nvrtc.path()
            );
        }
    }

    fn stale_outside(&self, keys: &[Key]) {
        let mut tags: Vec<String> = keys.iter().map(|k| k.spec.tag()).collect();
        tags.dedup();
        let shown = tags.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
        let more = tags.len().saturating_sub(4);
        eprintln!(
            "warning: {} keys outside this run have records of another template version \
             ({shown}{}): build-cache and bench --db serve their defaults until they are \
             tuned too (a wider `fa4-gen tune` keeps the timings of unchanged kernels)",
            keys.len(),
            if more > 0 {
                format!(" and {more} more specs")
            } else {
                String::new()
            }
        );
    }

    fn built(&self, _template: Template, spec: &KernelSpec, summary: &BuildSummary) {
        let mut c = self.counts.lock().expect("lock");
        c.compiled += summary.compiled;
        let (built, set_aside) = (summary.built().count(), summary.rejected().count());
        if !self.compile_only {
            let what = format!(
                "{}: {built} kernels built ({} compiled now, {set_aside} set aside)",
                spec.tag(),
                summary.compiled
            );
            self.say(&c, &what);
        } else if !self.quiet {
            println!(
                "{:<34} {:>3} built, {:>3} set aside, {:>3} compiled now",
                spec.tag(),
                built,
                set_aside,
                summary.compiled
            );
        }
    }

    fn tuned(&self, _template: Template, spec: &KernelSpec, n: &Counts) {
        let mut c = self.counts.lock().expect("lock");
        c.shown = c.done;
        let what = format!(
            "{} tuned: {} checked ({} wrong), {} timed ({} failed), {} finalists re-timed, {} already measured, {} kept from another template version",
            spec.tag(),
            n.checked,
            n.check_failed,
            n.timed,
            n.time_failed,
            n.finals,
            n.skipped,
            n.carried
        );
        self.say(&c, &what);
    }

    fn planned(&self, count: usize) {
        self.counts.lock().expect("lock").planned += count;
        if let Show::Bar(bar) = &self.show {
            bar.inc_length(count as u64);
        }
    }

    fn checked(&self, _kernel: &TuneKernel, passed: bool) {
        let mut c = self.counts.lock().expect("lock");
        c.checked += 1;
        c.wrong += usize::from(!passed);
    }

    fn measured(
        &self,
        key: &Key,
        _kernel: &TuneKernel,
        outcome: &Outcome,
        best: Option<(String, f64)>,
    ) {
        let mut c = self.counts.lock().expect("lock");
        match outcome {
            Outcome::Measured { .. } => c.timed += 1,
            Outcome::Failed { .. } => c.failed += 1,
        }
        let best = best.map_or("-".into(), |(cfg, ms)| format!("{cfg} {ms:.4} ms"));
        self.advance(&mut c, 1, key, &format!("best {best}"));
    }

    fn finalist(&self, key: &Key, kernel: &TuneKernel, settled_ms: Option<f64>) {
        let mut c = self.counts.lock().expect("lock");
        match settled_ms {
            Some(_) => c.finals += 1,
            None => c.failed += 1,
        }
        let settled = settled_ms.map_or("failed".into(), |ms| format!("{ms:.4} ms settled"));
        let at = format!("finalist {} {settled}", kernel.built.candidate.config.tag());
        self.advance(&mut c, 1, key, &at);
    }

    fn finals_kept(&self, key: &Key, planned: usize) {
        let mut c = self.counts.lock().expect("lock");
        self.advance(&mut c, planned, key, "finals kept (same machine code)");
    }
}
