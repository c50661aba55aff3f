//! Built kernels ready to load on a device: the cubins of a build folder that its report
//! vouches for.

use std::collections::BTreeMap;

use fa4_spec::Arch;

use crate::compile::{BuildDir, BuildError, BuiltKernel};
use crate::render::Renderer;
use crate::space::{Candidate, Planned};

/// A built kernel with its cubin's bytes.
pub struct ReadyKernel {
    pub built: BuiltKernel,
    pub cubin: Vec<u8>,
    /// The varlen build's cubin, where the kernel has one.
    pub varlen_cubin: Option<Vec<u8>>,
}

/// The kernels of `planned` whose cubins are in the build folder and match its report,
/// in candidate order; and why any of them could not be read.
pub fn ready_kernels(
    renderer: &Renderer,
    dir: &BuildDir,
    arch: Arch,
    planned: &[Planned],
) -> Result<(Vec<ReadyKernel>, Vec<String>), BuildError> {
    let Some(report) = dir.load_report(arch)? else {
        return Ok((Vec::new(), Vec::new()));
    };
    let wanted: BTreeMap<String, &Candidate> = planned
        .iter()
        .map(|p| (renderer.kernel_id(&p.candidate).0, &p.candidate))
        .collect();
    let mut out = Vec::new();
    let mut unreadable = Vec::new();
    for built in report.kernels {
        if wanted.contains_key(&built.id.0) {
            match dir
                .read_cubin(&built)
                .and_then(|cubin| Ok((cubin, dir.read_varlen_cubin(&built)?)))
            {
                Ok((cubin, varlen_cubin)) => out.push(ReadyKernel {
                    built,
                    cubin,
                    varlen_cubin,
                }),
                Err(e) => unreadable.push(e.to_string()),
            }
        }
    }
    out.sort_by(|a, b| a.built.candidate.cmp(&b.built.candidate));
    Ok((out, unreadable))
}
