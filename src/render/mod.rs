//! Rendering: a candidate becomes CUDA source text.
//!
//! The `.tera` entry points stay thin (rendered constants and an `extern "C"` entry);
//! the kernel bodies are the hand-written headers, handed to NVRTC as they are. Every
//! kernel's id hashes its template together with every header the template includes,
//! so an edited header can never hide behind a stale cubin.

pub mod tcgen05;
pub mod templates;

use std::collections::BTreeMap;

use fa4_spec::{Arch, Fnv1a64};
use serde::{Deserialize, Serialize};

use crate::render::templates::{TemplateError, TemplateSet};
use crate::space::{Candidate, Footprint, Template, TemplateSpace};

/// NVRTC flags for an arch. They are part of a kernel's identity: its id hashes them,
/// so a changed flag can never reuse an old cubin.
pub fn nvrtc_options(arch: Arch) -> Vec<String> {
    vec![
        format!("--gpu-architecture={}", arch.nvrtc_target()),
        "-std=c++17".into(),
        "--ptxas-options=-v".into(),
        "-lineinfo".into(),
    ]
}

/// NVRTC flags for a template's kernels on an arch: the arch's and the template's own.
pub fn kernel_nvrtc_options(template: Template, arch: Arch) -> Vec<String> {
    let mut options = nvrtc_options(arch);
    options.extend(template.nvrtc_flags().iter().map(|f| f.to_string()));
    options
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error("rendering {file}: {message}")]
    Tera { file: String, message: String },
}

/// Stable name of a kernel: readable prefix, content hash suffix.
/// `portable_sm90_bf16_d128_causal_m128n64w8s2_qregs0_1f0c5e2a9b`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KernelId(pub String);

impl std::fmt::Display for KernelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A rendered kernel source.
#[derive(Debug, Clone)]
pub struct RenderedKernel {
    pub id: KernelId,
    pub candidate: Candidate,
    pub template_hash: String,
    pub footprint: Footprint,
    pub source: String,
    /// NVRTC flags to compile `source` with.
    pub options: Vec<String>,
}

/// Renders candidates from one template set.
pub struct Renderer {
    templates: TemplateSet,
    tera: tera::Tera,
    hashes: BTreeMap<Template, String>,
}

impl Renderer {
    /// A renderer over the templates built into this binary.
    pub fn embedded() -> Result<Self, RenderError> {
        Self::new(TemplateSet::embedded())
    }

    pub fn new(templates: TemplateSet) -> Result<Self, RenderError> {
        let mut tera = tera::Tera::new();
        tera.autoescape_on(Vec::<&str>::new());
        let mut hashes = BTreeMap::new();
        for t in Template::ALL {
            let file = t.file();
            let text = templates
                .get(file)
                .ok_or_else(|| TemplateError::Missing(file.to_string()))?;
            tera.add_raw_template(file, text)
                .map_err(|e| RenderError::Tera {
                    file: file.to_string(),
                    message: error_chain(&e),
                })?;
            hashes.insert(t, templates.template_hash(file)?);
        }
        Ok(Renderer {
            templates,
            tera,
            hashes,
        })
    }

    pub fn templates(&self) -> &TemplateSet {
        &self.templates
    }

    /// Hash of a template and every header it includes.
    pub fn template_hash(&self, t: Template) -> &str {
        &self.hashes[&t]
    }

    /// The id of a candidate under the current templates. It hashes the values the
    /// config space derives for the template too (register split, shared-memory layout),
    /// so a change of that arithmetic cannot reuse a cubin rendered under the old one.
    pub fn kernel_id(&self, c: &Candidate) -> KernelId {
        let derived = match c.template.check(&c.spec, &c.config) {
            Ok(fp) => serde_json::to_string(&c.template.render_values(&c.spec, &c.config, &fp))
                .expect("render values serialise"),
            Err(_) => String::new(),
        };
        let mut h = Fnv1a64::default();
        h.field(c.template.name())
            .field(self.template_hash(c.template))
            .field(&serde_json::to_string(&c.spec).expect("spec serialises"))
            .field(&serde_json::to_string(&c.config).expect("config serialises"))
            .field(&derived)
            .field(&kernel_nvrtc_options(c.template, c.spec.arch).join(" "));
        KernelId(format!(
            "{}_{}_{}_{}",
            c.template.name(),
            c.spec.tag(),
            c.config.tag(),
            &h.hex()[..10]
        ))
    }

    /// Renders a candidate that passed the static check.
    pub fn render(
        &self,
        c: &Candidate,
        footprint: &Footprint,
    ) -> Result<RenderedKernel, RenderError> {
        let id = self.kernel_id(c);
        let template_hash = self.template_hash(c.template).to_string();
        let mut ctx = tera::Context::new();
        ctx.insert("kernel_id", &id.0);
        ctx.insert("template_name", c.template.file());
        ctx.insert("template_hash", &template_hash);
        ctx.insert("spec", &c.spec.to_string());
        ctx.insert("config", &c.config.to_string());
        for (k, v) in c.template.render_values(&c.spec, &c.config, footprint) {
            ctx.insert(k, &v);
        }
        let source = self
            .tera
            .render(c.template.file(), &ctx)
            .map_err(|e| RenderError::Tera {
                file: c.template.file().to_string(),
                message: error_chain(&e),
            })?;
        Ok(RenderedKernel {
            id,
            candidate: c.clone(),
            template_hash,
            footprint: *footprint,
            source,
            options: kernel_nvrtc_options(c.template, c.spec.arch),
        })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::default_candidate;
    use fa4_spec::{Arch, Dtype, KernelSpec, MaskKind};

    fn spec() -> KernelSpec {
        KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal)
    }

    #[test]
    fn rendered_source_opens_with_its_identity() {
        let r = Renderer::embedded().unwrap();
        let c = default_candidate(Template::Portable, &spec());
        let fp = c.template.check(&c.spec, &c.config).unwrap();
        let k = r.render(&c, &fp).unwrap();
        let head: Vec<&str> = k.source.lines().take(5).collect();
        assert!(head[1].contains(&k.id.0), "{head:?}");
        assert!(head[2].contains(r.template_hash(Template::Portable)));
        assert!(head[3].contains("arch=sm90 dtype=bf16 head_dim=128 head_dim_v=128 mask=causal"));
        assert!(head[4].contains(&format!("block_m={}", c.config.block_m)));
        assert!(k.source.contains("static constexpr int kHeadDim = 128;"));
        assert!(k.source.contains("fa4::MaskKind::Causal"));
        assert!(k
            .source
            .contains(&format!("kSmemBytes == {}", fp.smem_bytes)));
        assert!(!k.source.contains("{{"), "unrendered placeholder left");
        // ptxas picks the registers of a plain config; a minblocks twin asks for room
        // for that many blocks per SM.
        assert!(k
            .source
            .contains("__launch_bounds__(KernelTraits::kThreads, 1)"));
        let mut twin = c.clone();
        twin.config.block_m = 128;
        twin.config.warps = 8;
        twin.config.switches = [("qregs".to_string(), 0), ("minblocks".to_string(), 2)].into();
        let fp = twin.template.check(&twin.spec, &twin.config).unwrap();
        let k = r.render(&twin, &fp).unwrap();
        assert!(k
            .source
            .contains("__launch_bounds__(KernelTraits::kThreads, 2)"));
    }

    #[test]
    fn ids_are_stable_distinct_and_follow_headers() {
        let r = Renderer::embedded().unwrap();
        let a = default_candidate(Template::Portable, &spec());
        let mut b = a.clone();
        b.config.block_n *= 2;
        assert_eq!(r.kernel_id(&a), r.kernel_id(&a.clone()));
        assert_ne!(r.kernel_id(&a), r.kernel_id(&b));
        let mut c = a.clone();
        c.spec.dtype = Dtype::Fp16;
        assert_ne!(r.kernel_id(&a), r.kernel_id(&c));

        // Editing a header the template includes changes every id.
        let mut set = TemplateSet::embedded();
        let softmax = set
            .get("include/fa4/common/softmax.cuh")
            .unwrap()
            .to_string();
        set.insert("include/fa4/common/softmax.cuh", softmax + "\n// edited\n");
        let r2 = Renderer::new(set).unwrap();
        assert_ne!(r.kernel_id(&a), r2.kernel_id(&a));
        assert_ne!(
            r.template_hash(Template::Portable),
            r2.template_hash(Template::Portable)
        );
    }
}
