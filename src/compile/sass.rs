//! The main loop of a built kernel, read from its SASS: how many instructions one
//! iteration issues and of which kinds. A template edit that leaves registers and spills
//! alone can still cost the loop issue slots (ptxas moving wgmma descriptors off the
//! uniform datapath took a d256 loop from 471 to 514 instructions and 5% of its speed:
//! on the H200); this census shows it without a GPU, and where a kernel's spills are
//! reloaded: ptxas's report counts spilled bytes, not whether the main loop touches them
//! (a persistent tile's scalars reloaded once per work tile cost nothing measurable). It
//! needs `nvdisasm` (CUDA's, or PyPI's `nvidia-cuda-nvdisasm`), which nothing else in
//! fa4-gen does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

/// Environment variable naming the nvdisasm binary to use.
pub const NVDISASM_ENV: &str = "FA4_GEN_NVDISASM";

#[derive(Debug, thiserror::Error)]
pub enum SassError {
    #[error("no nvdisasm found (set {NVDISASM_ENV}, put CUDA's bin/ on PATH, or `python3 -m pip install nvidia-cuda-nvdisasm`)")]
    NoNvdisasm,
    #[error("{nvdisasm} failed on {cubin}: {message}")]
    Disassemble {
        nvdisasm: PathBuf,
        cubin: PathBuf,
        message: String,
    },
}

/// One iteration of a kernel's main loop: the innermost loop that issues tensor-core
/// instructions (wgmma's HGMMA, QGMMA for FP8, mma.sync's HMMA, or tcgen05's UTCHMMA
/// and UTCQMMA, which Blackwell kernels issue from one warp while others run the softmax:
/// [`softmax_loop`] reads theirs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoopCensus {
    pub instructions: u32,
    /// HGMMA / QGMMA / HMMA / UTC*MMA.
    pub tensor: u32,
    /// MUFU (exp2, tanh, rcp, ...).
    pub mufu: u32,
    /// LDTM / STTM: tensor-memory loads and stores (tcgen05.ld/st; Blackwell only).
    #[serde(default)]
    pub tmem: u32,
    /// R2UR: values built on the vector datapath and moved to uniform registers (wgmma
    /// descriptors that ptxas could not keep uniform).
    pub r2ur: u32,
    /// LDL / STL: local-memory loads and stores (spills) in the loop.
    pub local: u32,
    /// Every opcode (the mnemonic before its first dot) and its count.
    pub opcodes: BTreeMap<String, u32>,
}

/// The nvdisasm to use: [`NVDISASM_ENV`], CUDA's `bin/` (`CUDA_HOME`, `CUDA_PATH`,
/// /usr/local/cuda), `PATH`, then PyPI's wheel in any site-packages `python3` knows.
pub fn find_nvdisasm() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(NVDISASM_ENV) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var) {
            dirs.push(PathBuf::from(root).join("bin"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    for site in super::nvrtc::python_site_dirs() {
        dirs.push(site.join("nvidia/cu13/bin"));
        dirs.push(site.join("nvidia/cuda_nvdisasm/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join("nvdisasm"))
        .find(|p| p.is_file())
}

/// The SASS of a cubin, as `nvdisasm -c` prints it.
pub fn disassemble(nvdisasm: &Path, cubin: &Path) -> Result<String, SassError> {
    let failed = |message: String| SassError::Disassemble {
        nvdisasm: nvdisasm.to_path_buf(),
        cubin: cubin.to_path_buf(),
        message,
    };
    let out = Command::new(nvdisasm)
        .arg("-c")
        .arg(cubin)
        .output()
        .map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn is_tensor(op: &str) -> bool {
    matches!(op, "HGMMA" | "QGMMA" | "HMMA") || (op.starts_with("UTC") && op.ends_with("MMA"))
}

fn is_tmem(op: &str) -> bool {
    op == "LDTM" || op == "STTM"
}

/// The census of the main loop in `sass`; `None` when no loop issues tensor-core
/// instructions.
pub fn main_loop(sass: &str) -> Option<LoopCensus> {
    innermost_loop(sass, &|body| body.iter().any(|op| is_tensor(op)))
}

/// A tcgen05 kernel's softmax loop: the innermost loop that loads from tensor memory,
/// exponentiates and stores back (S in, P out; the correction warps' loops lack one of
/// the three); `None` in kernels without tensor memory.
pub fn softmax_loop(sass: &str) -> Option<LoopCensus> {
    innermost_loop(sass, &|body| {
        ["LDTM", "STTM", "MUFU"]
            .iter()
            .all(|wanted| body.iter().any(|op| op == wanted))
    })
}

/// The census of the shortest loop whose body `wanted` accepts.
fn innermost_loop(sass: &str, wanted: &dyn Fn(&[&str]) -> bool) -> Option<LoopCensus> {
    // Instructions in order (predicate stripped, mnemonic first), and each label's place.
    let mut ops: Vec<&str> = Vec::new();
    let mut branch_to: Vec<Option<&str>> = Vec::new();
    let mut labels: BTreeMap<&str, usize> = BTreeMap::new();
    let mut last_exit = None;
    for line in sass.lines() {
        let line = line.trim();
        if let Some(label) = line.strip_suffix(':').filter(|l| l.starts_with(".L")) {
            labels.insert(label, ops.len());
            continue;
        }
        let Some((predicated, text)) = instruction(line) else {
            continue;
        };
        let Some(op) = text.split_whitespace().next() else {
            continue;
        };
        if op == "EXIT" && !predicated {
            last_exit = Some(ops.len());
        }
        ops.push(op.split('.').next().unwrap_or(op));
        branch_to.push(
            (ops.last() == Some(&"BRA"))
                .then(|| text.split("`(").nth(1)?.split(')').next())
                .flatten(),
        );
    }
    // Loops: a branch back to a label at or before it. The main loop is the shortest one
    // with tensor-core instructions in it (the softmax loop: with TMEM loads and MUFU). Past the last EXIT, ptxas puts the retry loops
    // of mbarrier waits, out of line, each branching back to its wait: not loops.
    let in_line = last_exit.unwrap_or(ops.len());
    let (start, end) = branch_to
        .iter()
        .enumerate()
        .take(in_line)
        .filter_map(|(i, target)| {
            let start = *labels.get((*target)?)?;
            (start <= i && wanted(&ops[start..=i])).then_some((start, i))
        })
        .min_by_key(|(start, end)| end - start)?;
    let body = &ops[start..=end];
    let mut opcodes: BTreeMap<String, u32> = BTreeMap::new();
    for op in body {
        *opcodes.entry(op.to_string()).or_default() += 1;
    }
    let count = |f: &dyn Fn(&str) -> bool| body.iter().filter(|op| f(op)).count() as u32;
    Some(LoopCensus {
        instructions: body.len() as u32,
        tensor: count(&|op| is_tensor(op)),
        mufu: count(&|op| op == "MUFU"),
        tmem: count(&|op| is_tmem(op)),
        r2ur: count(&|op| op == "R2UR"),
        local: count(&|op| is_local(op)),
        opcodes,
    })
}

fn is_local(op: &str) -> bool {
    op == "LDL" || op == "STL"
}

/// An instruction line of `nvdisasm -c` (`/*0c40*/  @!P0 BRA `(.L_x_6) ;`): whether it is
/// predicated, and its text from the mnemonic on, without the predicate and the `;`.
fn instruction(line: &str) -> Option<(bool, &str)> {
    let (_, text) = line.trim().strip_prefix("/*")?.split_once("*/")?;
    let text = text.trim().trim_end_matches(';').trim();
    Some(match text.split_once(' ') {
        Some((pred, rest)) if pred.starts_with('@') => (true, rest.trim()),
        _ => (false, text),
    })
}

/// The kernel's instructions, each counted once wherever it sits (NOP padding left out).
/// Those outside the main loop run once per work tile or per block: at 512 tokens a
/// portable d256 block visits 4.5 key blocks, and its start and end (copies, O stores)
/// took a quarter of its time.
pub fn instruction_count(sass: &str) -> u32 {
    sass.lines()
        .filter_map(|line| instruction(line)?.1.split_whitespace().next())
        .filter(|op| *op != "NOP")
        .count() as u32
}

/// Local-memory loads and stores (LDL / STL) anywhere in `sass`: where ptxas spilled, and
/// how often the spills are touched outside the main loop too.
pub fn local_accesses(sass: &str) -> u32 {
    sass.lines()
        .filter_map(|line| instruction(line)?.1.split_whitespace().next())
        .filter(|op| is_local(op.split('.').next().unwrap_or(op)))
        .count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shaped like `nvdisasm -c`: a prologue, an outer loop around an inner one with
    // wgmma, a loop without tensor-core work (a producer's copy loop), and past the EXIT
    // an mbarrier wait's retry loop, which jumps back into the inner loop.
    const SASS: &str = "
        .text.fa4_fwd:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0008*/                   STL [R1], R17 ;
.L_x_1:
        /*0010*/                   ISETP.GE.AND P0, PT, R0, UR4, PT ;
.L_x_2:
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*0030*/                   MUFU.EX2 R2, R2 ;
        /*0040*/                   R2UR UR4, R3 ;
        /*0048*/               @P3 LDL.64 R4, [R1+0x8] ;
        /*0050*/               @!P0 BRA `(.L_x_2) ;
        /*0060*/                   FADD R1, R1, R2 ;
        /*0070*/               @P1 BRA `(.L_x_1) ;
.L_x_3:
        /*0080*/                   LDGSTS.E.BYPASS.128 [R5], desc[UR6][R6.64] ;
        /*0090*/               @P2 BRA `(.L_x_3) ;
        /*00a0*/                   EXIT ;
.L_x_4:
        /*00b0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x10], R2 ;
        /*00c0*/               @!P0 BRA `(.L_x_4) ;
        /*00d0*/                   BRA `(.L_x_2) ;
";

    #[test]
    fn the_main_loop_is_the_innermost_with_tensor_work() {
        let c = main_loop(SASS).unwrap();
        assert_eq!(
            (c.instructions, c.tensor, c.mufu, c.r2ur, c.local),
            (5, 1, 1, 1, 1)
        );
        assert_eq!(c.opcodes.get("BRA"), Some(&1));
        assert_eq!(
            c.opcodes.get("FADD"),
            None,
            "the outer loop's instructions stay out"
        );
    }

    #[test]
    fn spills_are_counted_in_the_loop_and_in_the_whole_kernel() {
        assert_eq!(
            local_accesses(SASS),
            2,
            "the prologue's STL and the loop's LDL"
        );
        let none = SASS.replace("STL [R1], R17", "MOV R3, R17");
        assert_eq!(local_accesses(&none), 1);
    }

    #[test]
    fn the_kernel_count_takes_every_instruction_once_but_padding() {
        assert_eq!(instruction_count(SASS), 16);
        let padded = SASS.replace("EXIT ;", "EXIT ;\n        /*00a8*/                   NOP ;");
        assert_eq!(instruction_count(&padded), 16);
        let longer = SASS.replace(
            "FADD R1, R1, R2 ;",
            "FADD R1, R1, R2 ;\n        /*0068*/ IADD3 R1, R1, 0x1, RZ ;",
        );
        assert_eq!(instruction_count(&longer), 17);
    }

    #[test]
    fn a_kernel_without_tensor_loops_has_no_main_loop() {
        let without = SASS.replace("HGMMA.64x128x16.F32.BF16", "FMUL");
        assert_eq!(main_loop(&without), None);
        // mma.sync kernels count too.
        let hmma = SASS.replace("HGMMA.64x128x16.F32.BF16", "HMMA.16816.F32.BF16");
        assert_eq!(main_loop(&hmma).unwrap().tensor, 1);
    }
}
