//! Which records an arch serves. A database may hold records of several GPUs of one arch;
//! the shipped cache serves one GPU's per arch: the GPU's own where it has them, else
//! the GPU with the most records (ties to the name first in order).

use std::collections::BTreeMap;
use std::path::Path;

use fa4_spec::{Arch, KernelSpec, TileConfig};

use super::record::Record;
use super::store::TuningDb;
use super::DbError;
use crate::space::Template;

/// A GPU as records name it: its name and SM count.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuId {
    pub name: String,
    pub sm_count: u32,
}

impl GpuId {
    pub fn of(record: &Record) -> GpuId {
        GpuId {
            name: record.device.name.clone(),
            sm_count: record.device.sm_count,
        }
    }
}

impl std::fmt::Display for GpuId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} SMs)", self.name, self.sm_count)
    }
}

/// The GPU whose records of `arch` are served: `own` where it has any, else the one
/// with the most. None without records of the arch.
pub fn served_gpu<'a>(
    records: impl IntoIterator<Item = &'a Record>,
    arch: Arch,
    own: Option<&GpuId>,
) -> Option<GpuId> {
    let mut by_gpu: BTreeMap<GpuId, usize> = BTreeMap::new();
    for r in records.into_iter().filter(|r| r.spec.arch == arch) {
        *by_gpu.entry(GpuId::of(r)).or_default() += 1;
    }
    if let Some(own) = own.filter(|g| by_gpu.contains_key(g)) {
        return Some(own.clone());
    }
    by_gpu
        .into_iter()
        .max_by_key(|(g, n)| (*n, std::cmp::Reverse(g.clone())))
        .map(|(g, _)| g)
}

/// What [`tuned_choices`] found.
pub struct TunedPicks {
    /// The served config by (template, spec, bucket seqlen).
    pub choices: BTreeMap<(Template, KernelSpec, u32), TileConfig>,
    /// Records of other template versions, left out.
    pub stale: usize,
    /// The GPU the choices were measured on, where it is not `own`.
    pub measured_on: Option<GpuId>,
}

/// The tuned choices of the database at `path` for GPU `own` of `arch` with these
/// templates, as the shipped cache serves them ([`served_gpu`]), and how many records
/// were left out as stale (measured with other template versions: `template_hash`
/// names the current ones).
pub fn tuned_choices(
    path: &Path,
    arch: Arch,
    own: &GpuId,
    templates: &[Template],
    template_hash: impl Fn(Template) -> String,
) -> Result<TunedPicks, DbError> {
    let records: Vec<Record> = TuningDb::open(path)?
        .records()?
        .into_iter()
        .filter(|r| r.spec.arch == arch && templates.contains(&r.template))
        .collect();
    let gpu = served_gpu(&records, arch, Some(own));
    let (current, stale): (Vec<_>, Vec<_>) = records
        .into_iter()
        .filter(|r| Some(GpuId::of(r)) == gpu)
        .partition(|r| !r.is_stale(&template_hash));
    let choices = current
        .into_iter()
        .filter_map(|r| {
            let choice = r.choice()?.config.clone();
            Some(((r.template, r.spec, r.bucket.seqlen), choice))
        })
        .collect();
    Ok(TunedPicks {
        choices,
        stale: stale.len(),
        measured_on: gpu.filter(|g| g != own),
    })
}
