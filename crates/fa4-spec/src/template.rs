use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ParseError;

/// A kernel template: one `.cu.tera` entry point and the headers it includes. Its config
/// space (candidates, pruning, defaults) is the generator's; a cache names the template
/// each kernel was rendered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Template {
    /// FlashAttention-2's algorithm on `mma.sync`: sm80 and newer.
    Portable,
    /// Hopper's warpgroup MMA (`wgmma`, sm_90a): a TMA producer warpgroup feeding
    /// pingponging consumer warpgroups, persistent or not (and a first-stage schedule
    /// without the producer, which paged K/V's windows and unverified head dims keep).
    Hopper,
    /// Blackwell's fifth-generation tensor cores (`tcgen05`, sm_100a): S and O in tensor
    /// memory, FA4's warp roles (load, MMA, softmax per Q stage, correction). Compiled
    /// and checked without an sm100 GPU; served nowhere until one has verified it.
    Blackwell,
}

impl Template {
    pub const ALL: [Template; 3] = [Template::Portable, Template::Hopper, Template::Blackwell];

    pub fn name(self) -> &'static str {
        match self {
            Template::Portable => "portable",
            Template::Hopper => "hopper",
            Template::Blackwell => "blackwell",
        }
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Template {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Template::ALL
            .into_iter()
            .find(|t| t.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| ParseError {
                what: "template",
                given: s.to_string(),
                expected: Template::ALL.map(|t| t.name()).join(", "),
            })
    }
}
