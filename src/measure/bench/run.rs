//! The bench loop: every cell's kernels timed on each buffer set, beside the tuned
//! choices of a tuning database, as rows in the format the peers' scripts write.

use std::collections::BTreeMap;

use fa4_spec::{Bucket, Features, FwdParams, KernelSpec, MaskKind, Template, TileConfig};

use super::{move_buffer, placement_spacer, row, time_kernel, Buffer, Cell, L2Flush, Row};
use crate::measure::gpu::{FwdKernel, Gpu, GpuError, LaunchArgs};
use crate::measure::kernels::ReadyKernel;
use crate::measure::problems::{Case, Problem};
use crate::measure::support::Support;

/// A tuning database's choice per (template, spec, bucket seqlen) (`db::tuned_choices`).
pub type TunedChoices = BTreeMap<(Template, KernelSpec, Bucket), TileConfig>;

/// What `run` times and how.
pub struct BenchPlan {
    /// The cells, each with the feature sets it is timed with.
    pub cells: Vec<(Cell, Vec<Features>)>,
    /// Keys per page for paged feature sets.
    pub page_size: i32,
    /// Buffer sets each cell is timed on (1: one).
    pub placements: u32,
    /// With several buffer sets: move only this buffer between them.
    pub moved: Option<Buffer>,
    /// Launch with the problem's split workspace (unmasked persistent kernels may share
    /// their last round's tiles out by keys).
    pub split_tail: bool,
    pub budget_ms: f64,
    pub warmup_ms: f64,
    /// Time every kernel given (a config filter), not only each cell's default and tuned
    /// choice; each cell then also gets a `-best` row.
    pub all_configs: bool,
    /// The tuned choices, where a tuning database was given: each one's timing also
    /// makes a `-tuned` row, and so does the default of a key the database lacks.
    pub tuned: Option<TunedChoices>,
}

/// What `run` reports as it goes.
pub enum Event<'a> {
    /// One kernel timed on one buffer set.
    Timed {
        row: &'a Row,
        cell: &'a Cell,
        features: Features,
        is_tuned: bool,
        /// The parameters of the buffer set, where there are several.
        placed: Option<&'a FwdParams>,
    },
    /// The fastest config of a cell, with every config timed.
    Best {
        row: &'a Row,
        cell: &'a Cell,
        features: Features,
    },
}

/// Times the plan's cells with `kernels` (each cell takes the kernels of its head dims,
/// mask and feature set), calling `on` after each timing; returns every row. A row's
/// backend is `fa4-gen` for the portable template's default (`fa4-gen-hopper` for the
/// Hopper template's), `+local`, `+<features>` and `+varlen` name the variants (so
/// compare.py sets each against the plain one), `:<config>` a config other than the
/// default, `-tuned` a tuned choice and `-best` a cell's fastest config.
pub fn run(
    gpu: &Gpu,
    kernels: &[ReadyKernel],
    support: &Support,
    plan: &BenchPlan,
    mut on: impl FnMut(Event),
) -> Result<Vec<Row>, GpuError> {
    let no_choices = TunedChoices::new();
    let tuned = plan.tuned.as_ref().unwrap_or(&no_choices);
    let mut flush = L2Flush::new(gpu)?;
    let mut rows = Vec::new();
    for (cell, features) in &plan.cells {
        for &feature_set in features {
            // As the runtime serves the cell: a varlen batch of several sequences its
            // ragged bucket's choice where there is one, else the dense bucket's.
            let ragged = Bucket::is_ragged_batch(cell.varlen.then_some(cell.batch.max(0) as u32));
            let bucket =
                Bucket::of_batch(cell.mask, cell.window, cell.seqlen.max(1) as u32, ragged);
            let dense = Bucket {
                ragged: false,
                ..bucket
            };
            let is_tuned = |k: &ReadyKernel| {
                let c = &k.built.candidate;
                let choice = tuned
                    .get(&(c.template, c.spec, bucket))
                    .or_else(|| tuned.get(&(c.template, c.spec, dense)));
                choice == Some(&c.config)
            };
            let mut cell_kernels: Vec<&ReadyKernel> = kernels
                .iter()
                .filter(|k| {
                    let s = &k.built.candidate.spec;
                    s.head_dim == cell.head_dim
                        && s.head_dim_v == cell.head_dim_v
                        && s.mask == cell.mask
                        && s.features == feature_set
                })
                .filter(|k| plan.all_configs || k.built.is_default || is_tuned(k))
                .collect();
            cell_kernels.sort_by_key(|k| !k.built.is_default);
            let Some(first) = cell_kernels.first() else {
                continue;
            };
            let spec = first.built.candidate.spec;
            let case = Case {
                page_size: plan.page_size,
                ..cell.case()
            };
            let variant = variant_name(cell, feature_set);
            let mut best: Option<Row> = None;
            // With a moved buffer, one problem whose named buffer is copied behind each
            // set's spacer; else a whole problem per set.
            let shared = match plan.moved {
                Some(_) => Some(Problem::new(gpu, support, &spec, &case, 0x5eed)?),
                None => None,
            };
            for placement in 0..plan.placements {
                // What the set's parameters point at lives as long as its timings.
                let (mut _moved, mut _own) = (None, None);
                let mut args = match (&shared, plan.moved) {
                    (Some(problem), Some(buffer)) if placement > 0 => {
                        let m = move_buffer(gpu, problem, buffer, placement as usize)?;
                        LaunchArgs {
                            params: _moved.insert(m).params,
                            ..problem.launch_args()
                        }
                    }
                    (Some(problem), _) => problem.launch_args(),
                    (None, _) => {
                        let spacer = placement_spacer(gpu, placement as usize)?;
                        let problem = Problem::new(gpu, support, &spec, &case, 0x5eed)?;
                        _own.insert((spacer, problem)).1.launch_args()
                    }
                };
                args.split = args.split.filter(|_| plan.split_tail);
                let placement = (plan.placements > 1).then_some(placement);
                for k in &cell_kernels {
                    let built = &k.built;
                    let base = match built.candidate.template {
                        Template::Portable => format!("fa4-gen{variant}"),
                        t => format!("fa4-gen-{t}{variant}"),
                    };
                    let kernel = FwdKernel::load(
                        gpu,
                        &k.cubin,
                        k.varlen_cubin.as_deref(),
                        built.candidate.spec,
                        built.footprint,
                    )?;
                    let times = time_kernel(
                        gpu,
                        &kernel,
                        &args,
                        &mut flush,
                        plan.budget_ms,
                        plan.warmup_ms,
                    )?;
                    let config = built.candidate.config.tag();
                    let backend = if built.is_default {
                        base.clone()
                    } else {
                        format!("{base}:{config}")
                    };
                    let row = Row {
                        placement,
                        ..row(
                            &spec,
                            cell,
                            &times,
                            &built.id.0,
                            &config,
                            built.is_default,
                            &backend,
                        )
                    };
                    on(Event::Timed {
                        row: &row,
                        cell,
                        features: feature_set,
                        is_tuned: is_tuned(k),
                        placed: placement.map(|_| &args.params),
                    });
                    if best.as_ref().is_none_or(|b| row.ms < b.ms) {
                        best = Some(row.clone());
                    }
                    let untuned = !tuned.contains_key(&(
                        built.candidate.template,
                        built.candidate.spec,
                        bucket,
                    ));
                    if is_tuned(k) || (plan.tuned.is_some() && built.is_default && untuned) {
                        rows.push(Row {
                            backend: format!("{base}-tuned"),
                            ..row.clone()
                        });
                    }
                    rows.push(row);
                }
            }
            if plan.all_configs {
                if let Some(mut b) = best {
                    b.backend = format!("fa4-gen{variant}-best");
                    on(Event::Best {
                        row: &b,
                        cell,
                        features: feature_set,
                    });
                    rows.push(b);
                }
            }
        }
    }
    Ok(rows)
}

/// The part of a row's backend that names the cell's variant: `+local`, `+<features>`,
/// `+varlen` (a packed batch of the grid, not a model layer).
fn variant_name(cell: &Cell, features: Features) -> String {
    let mut variant = String::new();
    if cell.mask == MaskKind::Local {
        variant.push_str("+local");
    }
    if features != Features::default() {
        variant.push('+');
        variant.push_str(&features.name());
    }
    if cell.varlen && cell.layer.is_none() {
        variant.push_str("+varlen");
    }
    variant
}
