use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ParseError;

/// A GPU architecture fa4-gen can compile for.
///
/// `Sm90` and `Sm100` always mean the architecture-specific targets `sm_90a` and
/// `sm_100a`: their kernels may use `wgmma`/`setmaxnreg` and `tcgen05`, which the
/// plain targets lack, and a cubin for them runs only on that exact architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// A100, A30 (compute capability 8.0).
    Sm80,
    /// RTX 30xx, A10, A40 (8.6).
    Sm86,
    /// RTX 40xx, L4, L40 (8.9).
    Sm89,
    /// H100, H200, H20 (9.0), compiled as `sm_90a`.
    Sm90,
    /// B200, GB200 (10.0), compiled as `sm_100a`.
    Sm100,
    /// RTX 50xx, RTX PRO 6000 (12.0).
    Sm120,
}

impl Arch {
    /// Every architecture, oldest first.
    pub const ALL: [Arch; 6] = [
        Arch::Sm80,
        Arch::Sm86,
        Arch::Sm89,
        Arch::Sm90,
        Arch::Sm100,
        Arch::Sm120,
    ];

    /// The short name used on the command line and in file names: `sm90`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm80",
            Arch::Sm86 => "sm86",
            Arch::Sm89 => "sm89",
            Arch::Sm90 => "sm90",
            Arch::Sm100 => "sm100",
            Arch::Sm120 => "sm120",
        }
    }

    /// The value of NVRTC's `--gpu-architecture` that yields a cubin for this arch.
    pub fn nvrtc_target(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm_80",
            Arch::Sm86 => "sm_86",
            Arch::Sm89 => "sm_89",
            Arch::Sm90 => "sm_90a",
            Arch::Sm100 => "sm_100a",
            Arch::Sm120 => "sm_120",
        }
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(self) -> (u32, u32) {
        match self {
            Arch::Sm80 => (8, 0),
            Arch::Sm86 => (8, 6),
            Arch::Sm89 => (8, 9),
            Arch::Sm90 => (9, 0),
            Arch::Sm100 => (10, 0),
            Arch::Sm120 => (12, 0),
        }
    }

    /// The arch of a device with this compute capability, if fa4-gen targets it.
    pub fn from_compute_capability(major: u32, minor: u32) -> Option<Arch> {
        Arch::ALL
            .into_iter()
            .find(|a| a.compute_capability() == (major, minor))
    }

    /// Most dynamic shared memory one block may opt into, in bytes
    /// (`cudaDevAttrMaxSharedMemoryPerBlockOptin`).
    pub fn max_smem_per_block(self) -> u32 {
        match self {
            Arch::Sm80 => 163 * 1024,
            Arch::Sm86 | Arch::Sm89 | Arch::Sm120 => 99 * 1024,
            Arch::Sm90 | Arch::Sm100 => 227 * 1024,
        }
    }

    /// Shared memory of one SM in bytes, which bounds how many blocks fit at once.
    pub fn smem_per_sm(self) -> u32 {
        match self {
            Arch::Sm80 => 164 * 1024,
            Arch::Sm86 | Arch::Sm89 | Arch::Sm120 => 100 * 1024,
            Arch::Sm90 | Arch::Sm100 => 228 * 1024,
        }
    }

    /// Whether kernels for this arch can be run and checked on the machines fa4-gen
    /// is developed with (an H200). Kernels for the others are compiled and
    /// resource-checked only, and every listing says so.
    pub fn verified_on_hardware(self) -> bool {
        matches!(self, Arch::Sm90)
    }

    fn spellings() -> String {
        Arch::ALL.map(|a| a.name()).join(", ")
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arch {
    type Err = ParseError;

    /// Accepts `sm90`, `sm_90`, `sm90a`, `sm_90a` and the like, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase().replace('_', "");
        let t = t.strip_suffix('a').unwrap_or(&t);
        Arch::ALL
            .into_iter()
            .find(|a| a.name() == t)
            .ok_or_else(|| ParseError {
                what: "arch",
                given: s.to_string(),
                expected: Arch::spellings(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_spelling() {
        for (text, arch) in [
            ("sm90", Arch::Sm90),
            ("sm_90a", Arch::Sm90),
            ("SM90A", Arch::Sm90),
            ("sm_100a", Arch::Sm100),
            ("sm120", Arch::Sm120),
            ("sm_80", Arch::Sm80),
        ] {
            assert_eq!(text.parse::<Arch>().unwrap(), arch, "{text}");
        }
    }

    #[test]
    fn rejects_unknown_arch_with_choices() {
        let err = "sm91".parse::<Arch>().unwrap_err();
        assert_eq!(err.given, "sm91");
        assert!(err
            .to_string()
            .contains("sm80, sm86, sm89, sm90, sm100, sm120"));
        assert!("sm".parse::<Arch>().is_err());
        assert!("sm9a0".parse::<Arch>().is_err());
    }

    #[test]
    fn compute_capability_round_trips() {
        for a in Arch::ALL {
            let (ma, mi) = a.compute_capability();
            assert_eq!(Arch::from_compute_capability(ma, mi), Some(a));
        }
        assert_eq!(Arch::from_compute_capability(7, 5), None);
    }
}
