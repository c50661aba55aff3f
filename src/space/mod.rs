//! The config space: which kernels exist, before anything is rendered or compiled.
//!
//! A [`Template`] is one kernel source (a `.cu.tera` entry point plus its headers). For a
//! [`KernelSpec`] it offers candidate [`TileConfig`]s, prunes those that cannot work
//! from arithmetic alone (shared memory, tile divisibility, a register estimate) and
//! names a heuristic default, the config served when nothing has been tuned.

mod blackwell;
mod hopper;
mod portable;

pub mod switches;

use std::fmt;

pub use fa4_spec::Footprint;
use fa4_spec::{head_dims_name, Arch, Dtype, Features, KernelSpec, MaskKind, TileConfig};
use serde::{Deserialize, Serialize};

pub use fa4_spec::Template;

/// What a template offers: its entry point, the archs and head dims it builds, and its
/// config space. (The template's name is the shared vocabulary's, since a kernel cache
/// names it; what it offers is the generator's alone.)
pub trait TemplateSpace: Copy {
    /// Entry point under `templates/`.
    fn file(self) -> &'static str;
    /// NVRTC flags the template adds to the arch's ([`crate::render::nvrtc_options`]).
    fn nvrtc_flags(self) -> &'static [&'static str];
    /// Architectures the template compiles for.
    fn archs(self) -> &'static [Arch];
    /// (head_dim, head_dim_v) pairs offered.
    fn head_dims(self) -> &'static [(u32, u32)];
    /// Whether the template can produce a kernel for `spec` at all.
    fn supports(self, spec: &KernelSpec) -> bool;
    /// Whether this template serves `spec` in the shipped cache ([`serving_template`]).
    fn serves(self, spec: &KernelSpec) -> bool;
    /// Every candidate config for `spec`, unpruned, in a fixed order.
    fn candidates(self, spec: &KernelSpec) -> Vec<TileConfig>;
    /// Static check of one config: its launch footprint, or why it cannot work.
    fn check(self, spec: &KernelSpec, config: &TileConfig) -> Result<Footprint, Rejection>;
    /// The config served when no tuning record exists: always one that passes
    /// [`TemplateSpace::check`] (tests also compile it for every arch and head dim).
    fn default_config(self, spec: &KernelSpec) -> TileConfig;
    /// The values the `.tera` entry point is rendered with.
    fn render_values(
        self,
        spec: &KernelSpec,
        config: &TileConfig,
        footprint: &Footprint,
    ) -> Vec<(&'static str, serde_json::Value)>;
}

impl TemplateSpace for Template {
    fn file(self) -> &'static str {
        match self {
            Template::Portable => "portable_fwd.cu.tera",
            Template::Hopper => "hopper_fwd.cu.tera",
            Template::Blackwell => "blackwell_fwd.cu.tera",
        }
    }

    /// The Hopper kernels pass a key block's live width to generic lambdas as a type;
    /// NVRTC compiles those as host functions unless unannotated ones default to device
    /// (the Blackwell kernels include Hopper's TMA and mbarrier headers).
    fn nvrtc_flags(self) -> &'static [&'static str] {
        match self {
            Template::Portable => &[],
            Template::Hopper | Template::Blackwell => &["-default-device"],
        }
    }

    fn archs(self) -> &'static [Arch] {
        match self {
            Template::Portable => &Arch::ALL,
            Template::Hopper => &[Arch::Sm90],
            Template::Blackwell => &[Arch::Sm100],
        }
    }

    fn head_dims(self) -> &'static [(u32, u32)] {
        match self {
            Template::Portable => portable::HEAD_DIMS,
            Template::Hopper => hopper::HEAD_DIMS,
            Template::Blackwell => blackwell::HEAD_DIMS,
        }
    }

    fn supports(self, spec: &KernelSpec) -> bool {
        self.archs().contains(&spec.arch)
            && self.head_dims().contains(&(spec.head_dim, spec.head_dim_v))
            && match self {
                // (FP8 is the Hopper template's alone, and only some of its specs)
                Template::Portable => !spec.dtype.is_fp8(),
                Template::Hopper => hopper::supports_dtype(spec),
                Template::Blackwell => blackwell::supports_spec(spec),
            }
    }

    fn serves(self, spec: &KernelSpec) -> bool {
        self.supports(spec) && self == serving_template(spec)
    }

    fn candidates(self, spec: &KernelSpec) -> Vec<TileConfig> {
        match self {
            Template::Portable => portable::candidates(spec),
            Template::Hopper => hopper::candidates(spec),
            Template::Blackwell => blackwell::candidates(spec),
        }
    }

    fn check(self, spec: &KernelSpec, config: &TileConfig) -> Result<Footprint, Rejection> {
        match self {
            Template::Portable => portable::check(spec, config),
            Template::Hopper => hopper::check(spec, config),
            Template::Blackwell => blackwell::check(spec, config),
        }
    }

    fn default_config(self, spec: &KernelSpec) -> TileConfig {
        match self {
            Template::Portable => portable::default_config(spec),
            Template::Hopper => hopper::default_config(spec),
            Template::Blackwell => blackwell::default_config(spec),
        }
    }

    fn render_values(
        self,
        spec: &KernelSpec,
        config: &TileConfig,
        footprint: &Footprint,
    ) -> Vec<(&'static str, serde_json::Value)> {
        match self {
            Template::Portable => portable::render_values(spec, config, footprint),
            Template::Hopper => hopper::render_values(spec, config, footprint),
            Template::Blackwell => blackwell::render_values(spec, config, footprint),
        }
    }
}

/// The one template that serves `spec` in the shipped cache: the Hopper template
/// wherever it offers the spec and is not held back there (d96, which it builds in
/// d128's tiles, until its tune and timing). Its defaults ran 1.03 to 1.68x the portable
/// ones on every timed cell of the FA3 grid, varlen, d192, windows, sinks, softcap and
/// pages on the H200. The Blackwell template never serves yet ([`blackwell::HELD_BACK`]:
/// no sm100 GPU has run it). Tuning keys are per template, so the tuner picks configs
/// within the serving template.
pub fn serving_template(spec: &KernelSpec) -> Template {
    if Template::Blackwell.supports(spec) && !blackwell::HELD_BACK {
        Template::Blackwell
    } else if Template::Hopper.supports(spec)
        && !hopper::HELD_BACK_HEAD_DIMS.contains(&(spec.head_dim, spec.head_dim_v))
        && !hopper::awaits_verify(spec)
    {
        Template::Hopper
    } else {
        Template::Portable
    }
}

/// The template that builds `spec` but does not serve it yet (d96 and e4m3 on the Hopper
/// template, every sm100 spec on the Blackwell template): what `explain` names beside
/// the choice.
pub fn held_back_template(spec: &KernelSpec) -> Option<Template> {
    // (no template serves a held-back dtype: Template::serves is false for both)
    [Template::Blackwell, Template::Hopper]
        .into_iter()
        .find(|&t| t.supports(spec) && serving_template(spec) != t)
}

/// What a template's config holds beyond its [`Footprint`] where ptxas cannot say
/// (Blackwell: tensor-memory columns and each warp role's registers), for `list`.
pub fn resource_note(template: Template, spec: &KernelSpec, config: &TileConfig) -> Option<String> {
    (template == Template::Blackwell && template.check(spec, config).is_ok())
        .then(|| blackwell::resource_note(spec, config))
}

/// Why [`held_back_template`] does not serve `spec` yet, and what lifts it.
pub fn held_back_reason(template: Template, spec: &KernelSpec) -> String {
    match template {
        Template::Blackwell => format!(
            "the blackwell template (tcgen05) builds this spec but no {} GPU has run it: the \
             {} template serves it until `fa4-gen verify --arch {} --template blackwell` passes on one",
            spec.arch,
            serving_template(spec),
            spec.arch
        ),
        t => format!(
            "the {t} template builds this head dim but the {} template serves it until the \
             {t} kernels are tuned and timed ahead (bench/headdim_check.sh run)",
            serving_template(spec)
        ),
    }
}

/// Whether `spec` is built but held back from the shipped cache until `fa4-gen verify`
/// passes on a GPU (a held-back dtype, or FP8 at a held-back head dim or with held-back
/// features; `build-cache --held-back` builds them all the same, for that check).
pub fn awaits_verify(spec: &KernelSpec) -> bool {
    hopper::awaits_verify(spec)
}

/// Why a config was set aside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub kind: RejectKind,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    /// Tile shapes that do not divide (static).
    Shape,
    /// More shared memory than the arch gives one block (static).
    SharedMemory,
    /// Register estimate past 255 per thread (static).
    Registers,
    /// ptxas reported spills or a stack frame (after compiling).
    Spills,
    /// NVRTC refused the source (after compiling).
    Compile,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// One (template, spec, config) triple: everything that determines a kernel.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Candidate {
    pub template: Template,
    pub spec: KernelSpec,
    pub config: TileConfig,
}

/// A candidate with the static verdict on it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub candidate: Candidate,
    pub is_default: bool,
    pub verdict: Result<Footprint, Rejection>,
}

/// Every candidate of `template` for `spec`, each with its static verdict; the
/// heuristic default is marked.
pub fn plan(template: Template, spec: &KernelSpec) -> Vec<Planned> {
    let default = template.default_config(spec);
    template
        .candidates(spec)
        .into_iter()
        .map(|config| {
            let candidate = Candidate {
                template,
                spec: *spec,
                config,
            };
            judged(candidate, &default)
        })
        .collect()
}

/// One candidate with its static verdict, marked where it is its spec's default.
pub fn planned(candidate: Candidate) -> Planned {
    let default = candidate.template.default_config(&candidate.spec);
    judged(candidate, &default)
}

/// `candidate` with its static verdict; `default` is its spec's default config (worked
/// out once per spec by [`plan`]).
fn judged(candidate: Candidate, default: &TileConfig) -> Planned {
    Planned {
        is_default: candidate.config == *default,
        verdict: candidate.template.check(&candidate.spec, &candidate.config),
        candidate,
    }
}

/// The heuristic default of `template` for `spec`, as a candidate.
pub fn default_candidate(template: Template, spec: &KernelSpec) -> Candidate {
    Candidate {
        template,
        spec: *spec,
        config: template.default_config(spec),
    }
}

/// A user's choice of specs: the cross product of the listed values.
#[derive(Debug, Clone)]
pub struct Selection {
    pub archs: Vec<Arch>,
    pub dtypes: Vec<Dtype>,
    /// QK head dims, each with its V head dim or, without one, every V head dim the
    /// templates offer with it.
    pub head_dims: Vec<(u32, Option<u32>)>,
    pub masks: Vec<MaskKind>,
    pub features: Vec<Features>,
    pub templates: Vec<Template>,
}

/// Twins of the configs in `out` that `of` picks, each with `switch` set to `value`, in
/// `out`'s order: how the templates' candidate lists grow, switch by switch.
fn twins(
    out: &[TileConfig],
    switch: &str,
    value: u32,
    of: impl Fn(&TileConfig) -> bool,
) -> Vec<TileConfig> {
    out.iter()
        .filter(|c| of(c))
        .map(|c| {
            let mut c = c.clone();
            c.switches.insert(switch.to_string(), value);
            c
        })
        .collect()
}

/// A selection that names something no template offers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error(
        "head dim {head_dim} is not offered for {arch}: offered head dims are {offered}; \
         pick one of those with --head-dim"
    )]
    HeadDim {
        head_dim: String,
        arch: Arch,
        offered: String,
    },
    #[error(
        "no selected template compiles for {arch}: {offered}; pick another --arch or --template"
    )]
    Arch { arch: Arch, offered: String },
    #[error(
        "{dtype} is offered for none of the selected specs: {dtype} kernels are the hopper \
         template's, on sm90, at head dims 64, 128, 256 and 192/128, any mask and features; pick those \
         with --arch and --head-dim, or another --dtype"
    )]
    Dtype { dtype: Dtype },
}

impl Selection {
    /// Every dtype, head dim and mask every template offers, for the given archs, without
    /// score features (those are asked for by name: each one multiplies the space).
    pub fn all(archs: Vec<Arch>) -> Self {
        Selection {
            archs,
            dtypes: Dtype::ALL.to_vec(),
            head_dims: Vec::new(),
            masks: MaskKind::ALL.to_vec(),
            features: vec![Features::default()],
            templates: Template::ALL.to_vec(),
        }
    }

    /// The (template, spec) pairs selected, in a fixed order; an empty `head_dims`
    /// means every head dim offered. Fails when a listed head dim is offered by none
    /// of the selected templates for a listed arch.
    pub fn specs(&self) -> Result<Vec<(Template, KernelSpec)>, SelectionError> {
        let mut out = Vec::new();
        for &arch in &self.archs {
            let templates: Vec<Template> = self
                .templates
                .iter()
                .copied()
                .filter(|t| t.archs().contains(&arch))
                .collect();
            if templates.is_empty() {
                let offered: Vec<String> = self
                    .templates
                    .iter()
                    .map(|t| {
                        let archs: Vec<&str> = t.archs().iter().map(|a| a.name()).collect();
                        format!("{t} compiles for {}", archs.join(", "))
                    })
                    .collect();
                return Err(SelectionError::Arch {
                    arch,
                    offered: offered.join("; "),
                });
            }
            let mut offered: Vec<(u32, u32)> = templates
                .iter()
                .flat_map(|t| t.head_dims().iter().copied())
                .collect();
            offered.sort_unstable();
            offered.dedup();
            let picks = |wanted: &(u32, Option<u32>), pair: &(u32, u32)| {
                pair.0 == wanted.0 && wanted.1.is_none_or(|v| v == pair.1)
            };
            for wanted in &self.head_dims {
                if !offered.iter().any(|pair| picks(wanted, pair)) {
                    return Err(SelectionError::HeadDim {
                        head_dim: head_dims_name(wanted.0, wanted.1),
                        arch,
                        offered: offered
                            .iter()
                            .map(|&(d, dv)| head_dims_name(d, Some(dv)))
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
            }
            for &template in &templates {
                for &(d, dv) in template.head_dims() {
                    if !self.head_dims.is_empty()
                        && !self.head_dims.iter().any(|w| picks(w, &(d, dv)))
                    {
                        continue;
                    }
                    for &dtype in &self.dtypes {
                        for &mask in &self.masks {
                            for &features in &self.features {
                                let spec = KernelSpec {
                                    arch,
                                    dtype,
                                    head_dim: d,
                                    head_dim_v: dv,
                                    mask,
                                    features,
                                };
                                if template.supports(&spec) {
                                    out.push((template, spec));
                                }
                            }
                        }
                    }
                }
            }
        }
        // A dtype asked for that no template offers on any selected spec (FP8 off sm90,
        // or with a window or features) is an error, not an empty selection.
        if let Some(&dtype) = self
            .dtypes
            .iter()
            .find(|&&d| !out.iter().any(|(_, s)| s.dtype == d))
        {
            return Err(SelectionError::Dtype { dtype });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
