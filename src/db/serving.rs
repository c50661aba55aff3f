//! Which records an arch serves. A database may hold records of several GPUs of one arch;
//! the shipped cache serves one GPU's per arch: the GPU's own where it has them, else
//! the GPU with the most records (ties to the name first in order).

use std::collections::BTreeMap;
use std::path::Path;

use fa4_spec::{Arch, Bucket, KernelSpec, TileConfig};

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
    /// The served config by (template, spec, bucket).
    pub choices: BTreeMap<(Template, KernelSpec, Bucket), TileConfig>,
    /// Records of other template versions, left out.
    pub stale: usize,
    /// The GPU the choices were measured on, where it is not `own`.
    pub measured_on: Option<GpuId>,
}

/// The tuned choices of the database at `path` for GPU `own` of `arch` with these
/// templates, as the shipped cache serves them: `own`'s choice for each key it has, the
/// arch's most-tuned GPU's for the others ([`served_gpu`]); and how many records were
/// left out as stale (measured with other template versions: `template_hash` names the
/// current ones).
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
    let most = served_gpu(&records, arch, None);
    let has_own = records.iter().any(|r| GpuId::of(r) == *own);
    let (current, stale): (Vec<_>, Vec<_>) = records
        .into_iter()
        .filter(|r| Some(GpuId::of(r)) == most || GpuId::of(r) == *own)
        .partition(|r| !r.is_stale(&template_hash));
    // The most-tuned GPU's first, then the device's own over them.
    let mut choices = BTreeMap::new();
    let (own_records, others): (Vec<&Record>, Vec<&Record>) =
        current.iter().partition(|r| GpuId::of(r) == *own);
    for r in others.into_iter().chain(own_records) {
        if let Some(choice) = r.choice() {
            choices.insert((r.template, r.spec, r.bucket), choice.config.clone());
        }
    }
    // Stale records whose keys no current record serves: their cells time the default.
    let stale = stale
        .iter()
        .filter(|r| !choices.contains_key(&(r.template, r.spec, r.bucket)))
        .count();
    Ok(TunedPicks {
        choices,
        stale,
        measured_on: most.filter(|g| g != own && !has_own),
    })
}
