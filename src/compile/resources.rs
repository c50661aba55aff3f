//! The ptxas resource report (`--ptxas-options=-v`), parsed from NVRTC's log.

use serde::{Deserialize, Serialize};

/// What one compiled kernel uses, as ptxas reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub registers: u32,
    pub barriers: u32,
    /// Statically declared shared memory, bytes (the kernels use dynamic shared memory,
    /// whose size is the footprint's).
    pub static_smem: u32,
    pub stack_frame: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    /// ptxas warnings, verbatim (e.g. C7515: wgmma serialised).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Resources {
    /// Why this kernel must not be used, if it must not: spills or a stack frame move
    /// registers to local memory, which costs far more than any tile shape gains, except
    /// for a few registers parked across the main loop. At the 255-register limit ptxas
    /// stores up to four lane indices before the loop and reloads them in the epilogue
    /// (read in the SASS: stores before the loop, one rarely taken reload in it);
    /// [`SPILL_TOLERANCE`] lets those through to be timed.
    pub fn disqualification(&self) -> Option<String> {
        let (stores, loads) = SPILL_TOLERANCE;
        let tolerated =
            self.spill_stores <= stores && self.spill_loads <= loads && self.stack_frame <= stores;
        if !tolerated {
            // Past the tolerance one of the two is non-zero.
            return Some(if self.spill_stores > 0 || self.spill_loads > 0 {
                format!(
                    "spills registers ({} bytes stored, {} loaded at {} registers)",
                    self.spill_stores, self.spill_loads, self.registers
                )
            } else {
                format!(
                    "uses a {}-byte stack frame (local memory)",
                    self.stack_frame
                )
            });
        }
        self.warnings
            .iter()
            .find(|w| serialises_wgmma(w))
            .map(|w| format!("ptxas: {w}"))
    }
}

/// Whether a ptxas advisory says it serialised the wgmma pipeline (each wgmma waited
/// for before the next): C7510 to C7515 name the causes (too few registers, accumulators
/// read mid-pipeline, ...); a kernel with any of them ran at half to two thirds of its
/// speed on the H200 (0.63 to 0.75x for C7514).
fn serialises_wgmma(warning: &str) -> bool {
    warning.contains("wgmma.mma_async instructions are serialized")
        || ["C7510", "C7511", "C7512", "C7513", "C7514", "C7515"]
            .iter()
            .any(|code| warning.contains(code))
}

/// The largest spill a kernel may have and still be built, (bytes stored, bytes
/// loaded): four registers stored, each reloaded at most twice. The stack frame may be
/// as large as the stores.
pub const SPILL_TOLERANCE: (u32, u32) = (16, 32);

/// Reads the report of the entry function `entry` out of an NVRTC log.
/// Returns `None` when the log holds no report for it.
pub fn parse(log: &str, entry: &str) -> Option<Resources> {
    let mut r = Resources::default();
    let mut in_entry = false;
    let mut found = false;
    for line in log.lines() {
        if line.contains("Compiling entry function") {
            in_entry = line.contains(&format!("'{entry}'"));
            continue;
        }
        // Warnings, and the "Potential Performance Loss" advisories ptxas prints as info
        // lines (C7511: wgmma serialised for want of registers).
        if line.to_ascii_lowercase().contains("warning") || line.contains("Performance Loss") {
            r.warnings.push(line.trim().to_string());
            continue;
        }
        if !in_entry {
            continue;
        }
        if line.contains("bytes stack frame") {
            found = true;
            r.stack_frame = number_before(line, "bytes stack frame").unwrap_or(0);
            r.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
            r.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
        } else if line.contains("Used") && line.contains("registers") {
            found = true;
            r.registers = number_before(line, "registers").unwrap_or(0);
            r.barriers = number_before(line, "barriers").unwrap_or(0);
            r.static_smem = number_before(line, "bytes smem").unwrap_or(0);
        }
    }
    found.then_some(r)
}

/// The integer that directly precedes `label` in `line` ("8 bytes spill stores").
fn number_before(line: &str, label: &str) -> Option<u32> {
    let at = line.find(label)?;
    line[..at]
        .trim_end()
        .rsplit(|c: char| c.is_whitespace() || c == ',')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "ptxas info    : 145 bytes gmem
ptxas info    : Compiling entry function 'other' for 'sm_90a'
ptxas info    : Used 12 registers, used 0 barriers
ptxas info    : Compiling entry function 'fa4_fwd' for 'sm_90a'
ptxas info    : Function properties for fa4_fwd
ptxas         .     24 bytes stack frame, 24 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 24 bytes cumulative stack size
ptxas info    : Compile time = 473.861 ms
";

    #[test]
    fn parses_the_named_entry_only() {
        let r = parse(LOG, "fa4_fwd").unwrap();
        assert_eq!(r.registers, 255);
        assert_eq!(r.barriers, 1);
        assert_eq!(r.static_smem, 4096);
        assert_eq!((r.stack_frame, r.spill_stores, r.spill_loads), (24, 24, 20));
        assert!(r.disqualification().unwrap().contains("spills"));
        // A spill within the tolerance is built (and judged by timing); past it, not.
        let small = Resources {
            stack_frame: 16,
            spill_stores: 16,
            spill_loads: 32,
            ..r.clone()
        };
        assert_eq!(small.disqualification(), None);
        let past = Resources {
            spill_loads: 36,
            ..small.clone()
        };
        assert!(past.disqualification().unwrap().contains("spills"));
        let frame = Resources {
            stack_frame: 24,
            spill_stores: 0,
            spill_loads: 0,
            ..small
        };
        assert!(frame.disqualification().unwrap().contains("stack frame"));
        assert!(parse(LOG, "missing").is_none());
    }

    #[test]
    fn clean_kernel_is_not_disqualified() {
        let log = "ptxas info    : Compiling entry function 'fa4_fwd' for 'sm_80'
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 175 registers, used 1 barriers, 368 bytes cmem[0]";
        let r = parse(log, "fa4_fwd").unwrap();
        assert_eq!(r.registers, 175);
        assert_eq!(r.static_smem, 0);
        assert_eq!(r.disqualification(), None);
    }

    #[test]
    fn serialising_wgmma_warning_disqualifies() {
        let log = "ptxas info    : Compiling entry function 'fa4_fwd' for 'sm_90a'
ptxas /tmp/x, line 5; warning : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers";
        let r = parse(log, "fa4_fwd").unwrap();
        assert!(r.disqualification().unwrap().contains("C7515"));
        // The same advisory as an info line (ptxas 13): a consumer short of registers
        // for the wgmma pipeline ran at half speed on the H200 (0.4 to 0.8x).
        let log = "ptxas info    : Compiling entry function 'fa4_fwd' for 'sm_90a'
ptxas info    : (C7519) warpgroup.arrive is injected in around line 2677 by compiler to allow use of registers in GMMA in function 'fa4_fwd'
ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources for the wgmma pipeline in the function 'fa4_fwd'
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers";
        let r = parse(log, "fa4_fwd").unwrap();
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(r.disqualification().unwrap().contains("C7511"));
        // Accumulators read between a wgmma's start and end (a persistent d256 tile that
        // ran at 0.63x its twin).
        let log = "ptxas info    : Compiling entry function 'fa4_fwd' for 'sm_90a'
ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline stage in the function 'fa4_fwd'
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers";
        let r = parse(log, "fa4_fwd").unwrap();
        assert!(r.disqualification().unwrap().contains("C7514"));
    }
}
