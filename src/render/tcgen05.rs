//! Descriptors of Blackwell's `tcgen05.mma` (sm_100a, `.cta_group::1`): the 32-bit
//! instruction descriptor and the 64-bit shared-memory descriptor of each operand.
//!
//! Their constant parts follow from a tile config, so the sm100 template takes them as
//! rendered literals ([`cuda_u32`], [`cuda_u64`]) instead of composing them on the
//! device. A shared-memory descriptor rendered with start address 0 is the template's
//! constant; the device adds `(address & 0x3FFFF) >> 4` to its low word, as `smem_desc`
//! in `templates/include/fa4/hopper/wgmma.cuh` does (addresses stay below 256 KiB, so the
//! 14-bit field never carries into the reserved bits above it).
//!
//! # Instruction descriptor (`.kind::f16`, `.kind::f8f6f4`)
//!
//! | bits  | field                  | value here                                         |
//! |-------|------------------------|----------------------------------------------------|
//! | 0-1   | sparsity selector      | 0-3 when sparse, else 0                            |
//! | 2     | sparsity               | dense 0, sparse 1                                  |
//! | 3     | saturate               | 0 (integer kinds only)                             |
//! | 4-5   | D (accumulator) format | f16 0, f32 1                                       |
//! | 6     | reserved               | 0                                                  |
//! | 7-9   | A format               | f16: f16 0, bf16 1; f8f6f4: e4m3 0, e5m2 1         |
//! | 10-12 | B format               | as A                                               |
//! | 13    | negate A               | 0/1                                                |
//! | 14    | negate B               | 0/1                                                |
//! | 15    | transpose A            | K-major 0, MN-major 1                              |
//! | 16    | transpose B            | K-major 0, MN-major 1                              |
//! | 17-22 | N >> 3                 | 1 (N = 8) to 32 (N = 256)                          |
//! | 23    | reserved               | 0                                                  |
//! | 24-28 | M >> 4                 | 4 (M = 64) or 8 (M = 128)                          |
//! | 29    | reserved               | 0                                                  |
//! | 30-31 | maximum shift (`.ws`)  | 0: the `.ws` variant is not the one encoded here   |
//!
//! `.kind::f8f6f4` uses the same table; only the format codes differ (e4m3 0, e5m2 1; the
//! 6- and 4-bit codes 3, 4 and 5 are left out, as fa4-gen has no such dtype). K is no field:
//! it follows from the kind (16 for f16, 32 for f8f6f4, twice that when sparse), see
//! [`InstrDescriptor::k`]. The shapes are the ISA's for `.cta_group::1` without `.ws`:
//! M 64 or 128; N a multiple of 8 from 8 to 256, except f8f6f4 with B MN-major, where N
//! is a multiple of 16 (see the disagreements below). f16 accumulators take f16
//! operands only; bf16 accumulates in f32.
//!
//! # Shared-memory descriptor
//!
//! | bits  | field                       | value                                          |
//! |-------|-----------------------------|------------------------------------------------|
//! | 0-13  | start address               | `(addr & 0x3FFFF) >> 4`                        |
//! | 14-15 | reserved                    | 0                                              |
//! | 16-29 | leading dimension (LBO)     | `(bytes & 0x3FFFF) >> 4`, or an address        |
//! | 30-31 | reserved                    | 0                                              |
//! | 32-45 | stride dimension (SBO)      | `(bytes & 0x3FFFF) >> 4`                       |
//! | 46-48 | fixed                       | 0b001                                          |
//! | 49-51 | matrix base offset          | 0-7                                            |
//! | 52    | leading dimension mode      | relative offset 0, absolute address 1          |
//! | 53-60 | fixed                       | 0                                              |
//! | 61-63 | swizzle                     | none 0, 128B with 32B atoms 1, 128B 2, 64B 4, 32B 6 |
//!
//! What differs from Hopper's `wgmma` descriptor (`hopper/wgmma.cuh` builds that one on
//! the device): bits 46-48 must hold 0b001 (wgmma leaves them 0); bit 52 selects an
//! absolute leading address (wgmma has no such mode); the swizzle field widens from 2 bits
//! at 62-63 (none 0, 128B 1, 64B 2, 32B 3) to 3 bits at 61-63, where the old codes
//! reappear shifted one bit up (128B 2, 64B 4, 32B 6: the same bits 62-63 set) and the new
//! bit 61 is the 128-byte swizzle with 32-byte atoms. So a K-major 128B-swizzled tile's
//! tcgen05 descriptor is its wgmma descriptor plus bit 46 (a test checks this). Major-ness
//! is in neither: wgmma takes it as the instruction's `imm-trans` operands, tcgen05 as
//! bits 15-16 of the instruction descriptor, which also carries the shape and formats
//! wgmma spells in its opcode.
//!
//! # Sources
//!
//! Every bit position above was checked in the PTX ISA and in at least two independent
//! implementations:
//!
//! - PTX ISA, tcgen05 "Instruction descriptor" (Table "Instruction descriptor format for
//!   .kind::tf32, .kind::f16, .kind::f8f6f4 and .kind::i8"), "Shared memory descriptor",
//!   "Matrix Shape" (Table "Various combinations of .kind and shapes"), "Leading dimension
//!   byte offset" / "Stride dimension byte offset", "Valid Combinations of Type-Size,
//!   Major-ness and Swizzling", and the wgmma "Matrix Descriptor Format":
//!   <https://docs.nvidia.com/cuda/parallel-thread-execution/#tcgen05-instruction-descriptor>,
//!   `#tcgen05-shared-memory-descriptor`, `#tcgen05-kind-shapes`,
//!   `#tcgen05-matrices-valid-type-size-majorness-swizzle`,
//!   `#asynchronous-warpgroup-level-matrix-shared-memory-layout-matrix-descriptor`
//!   (read in PTX ISA 9.x copies and at <https://ptx.poole.ai/docs/09-instruction-set/16-tcgen05/>).
//! - CUTLASS `include/cute/arch/mma_sm100_desc.hpp` (`UMMA::InstrDescriptor`,
//!   `UMMA::SmemDescriptor`, `make_umma_desc`), `include/cute/arch/mma_sm100_umma.hpp` and
//!   `include/cute/atom/mma_traits_sm100.hpp` (shape checks), github.com/NVIDIA/cutlass.
//! - ThunderKittens `include/ops/thread/mma/tcgen05.cuh` (`instruction_descriptor`) and
//!   `include/types/shared/descriptor.cuh` (bit 46 set for Blackwell, swizzle codes),
//!   github.com/HazyResearch/ThunderKittens.
//! - Modular's Mojo `gpu.mma_sm100` docs, `MMASmemDescriptor` and `UMMAInsDescriptor`:
//!   <https://docs.modular.com/mojo/stdlib/gpu/mma_sm100/MMASmemDescriptor>.
//!
//! The tests' expected values, worked out by hand from the ISA's tables, were also
//! reproduced bit for bit by CUTLASS's own header (`UMMA::make_instr_desc` and
//! `UMMA::SmemDescriptor` of `mma_sm100_desc.hpp`, commit 7107b055) compiled on the host.
//!
//! Where they disagree, this module follows the ISA:
//!
//! - N for `.kind::f16` with M = 128: the ISA allows any multiple of 8; older CUTLASS
//!   checks asked for a multiple of 16 at M = 128 (its current shared-memory-operand
//!   checks follow the ISA).
//! - N for `.kind::f8f6f4`: the ISA lists "steps of 8 OR steps of 16" without saying
//!   which applies when; current CUTLASS reads it as 16 when B is MN-major (an 8-bit
//!   MN-major core matrix is 16 elements wide along N), older CUTLASS as 16 when M = 128.
//!   This module takes the B-major reading.
//! - f16 accumulators for `.kind::f8f6f4`: current ISA tables and ThunderKittens allow
//!   them; an older rendition of the descriptor table lists f32 only.
//! - The 128-byte swizzle with 32-byte atoms: the ISA's valid-combinations table allows
//!   it for K-major operands of any type and forbids it for MN-major 8- and 16-bit ones
//!   (32-bit MN-major needs it); CUTLASS rejects it K-major (it builds that atom for tf32
//!   MN-major only). This module accepts it K-major, rejects it MN-major.
//! - Bits 46-48: the ISA and CUTLASS (a 2-bit `version_` = 1 at 46-47, bit 48 unused) set
//!   the same bits; an older Mojo doc page listed 46-48 as unused zeros. Bits 53-60: the
//!   ISA prints the constant as "0xb00000000", read as zero as every implementation does.

use std::fmt;

use fa4_spec::Dtype;

/// A descriptor field: `width` bits from bit `lsb`.
#[derive(Debug, Clone, Copy)]
struct Field {
    lsb: u32,
    width: u32,
}

impl Field {
    const fn new(lsb: u32, width: u32) -> Self {
        Field { lsb, width }
    }

    /// `value` in place. Callers validate first; the check keeps a slip from spilling
    /// into a neighbouring field.
    fn put(self, value: u64) -> u64 {
        debug_assert!(
            value < 1 << self.width,
            "{value} overflows a {}-bit field",
            self.width
        );
        value << self.lsb
    }
}

// Instruction descriptor fields (PTX ISA, tcgen05 "Instruction descriptor").
const SPARSITY_SELECTOR: Field = Field::new(0, 2);
const SPARSITY: Field = Field::new(2, 1);
const SATURATE: Field = Field::new(3, 1);
const D_FORMAT: Field = Field::new(4, 2);
const A_FORMAT: Field = Field::new(7, 3);
const B_FORMAT: Field = Field::new(10, 3);
const NEGATE_A: Field = Field::new(13, 1);
const NEGATE_B: Field = Field::new(14, 1);
const TRANSPOSE_A: Field = Field::new(15, 1);
const TRANSPOSE_B: Field = Field::new(16, 1);
const N_SHR3: Field = Field::new(17, 6);
const M_SHR4: Field = Field::new(24, 5);
const MAX_SHIFT: Field = Field::new(30, 2);

// Shared-memory descriptor fields (PTX ISA, tcgen05 "Shared memory descriptor").
const START_ADDRESS: Field = Field::new(0, 14);
const LEADING: Field = Field::new(16, 14);
const STRIDE: Field = Field::new(32, 14);
const FIXED_0B001: Field = Field::new(46, 3);
const BASE_OFFSET: Field = Field::new(49, 3);
const LEADING_MODE: Field = Field::new(52, 1);
const FIXED_ZERO: Field = Field::new(53, 8);
const SWIZZLE: Field = Field::new(61, 3);

/// The MMA kind an operand format belongs to: the `.kind::` qualifier of the instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmaKind {
    /// `.kind::f16`: f16 or bf16 operands, K = 16.
    F16,
    /// `.kind::f8f6f4`: 8-, 6- and 4-bit float operands, K = 32 (only the 8-bit ones here).
    F8f6f4,
}

impl fmt::Display for MmaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MmaKind::F16 => "kind::f16",
            MmaKind::F8f6f4 => "kind::f8f6f4",
        })
    }
}

/// Element format of the A or B operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperandFormat {
    F16,
    Bf16,
    /// OCP FP8 e4m3 (PyTorch's `float8_e4m3fn`).
    E4m3,
    /// OCP FP8 e5m2.
    E5m2,
}

impl OperandFormat {
    pub fn kind(self) -> MmaKind {
        match self {
            OperandFormat::F16 | OperandFormat::Bf16 => MmaKind::F16,
            OperandFormat::E4m3 | OperandFormat::E5m2 => MmaKind::F8f6f4,
        }
    }

    /// The 3-bit atype/btype code; its meaning depends on the kind.
    fn code(self) -> u64 {
        match self {
            OperandFormat::F16 => 0,
            OperandFormat::Bf16 => 1,
            OperandFormat::E4m3 => 0,
            OperandFormat::E5m2 => 1,
        }
    }
}

impl From<Dtype> for OperandFormat {
    fn from(dtype: Dtype) -> Self {
        match dtype {
            Dtype::Bf16 => OperandFormat::Bf16,
            Dtype::Fp16 => OperandFormat::F16,
            Dtype::E4m3 => OperandFormat::E4m3,
        }
    }
}

impl fmt::Display for OperandFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OperandFormat::F16 => "f16",
            OperandFormat::Bf16 => "bf16",
            OperandFormat::E4m3 => "e4m3",
            OperandFormat::E5m2 => "e5m2",
        })
    }
}

/// Format of the accumulator D in tensor memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccumFormat {
    F16,
    F32,
}

impl fmt::Display for AccumFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccumFormat::F16 => "f16",
            AccumFormat::F32 => "f32",
        })
    }
}

/// Which dimension of an operand is contiguous in shared memory. K-major is the ISA's
/// "no transpose" (Q and K in the QK GEMM); MN-major its "transpose" (V in the PV GEMM,
/// read with keys along K).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Major {
    K,
    Mn,
}

impl fmt::Display for Major {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Major::K => "K-major",
            Major::Mn => "MN-major",
        })
    }
}

/// Dense, or 2:4 structured-sparse A with the metadata selector to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sparsity {
    Dense,
    /// Selector 0 to 3.
    Sparse {
        selector: u8,
    },
}

/// The operands and shape of one `tcgen05.mma.cta_group::1` (without `.ws`); encoded by
/// [`InstrDescriptor::encode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstrDescriptor {
    pub a: OperandFormat,
    pub b: OperandFormat,
    pub accumulator: AccumFormat,
    pub a_major: Major,
    pub b_major: Major,
    pub negate_a: bool,
    pub negate_b: bool,
    pub m: u32,
    pub n: u32,
    pub sparsity: Sparsity,
}

impl InstrDescriptor {
    /// A dense, unnegated `m` x `n` MMA.
    pub fn dense(
        a: OperandFormat,
        b: OperandFormat,
        accumulator: AccumFormat,
        (a_major, b_major): (Major, Major),
        m: u32,
        n: u32,
    ) -> Self {
        InstrDescriptor {
            a,
            b,
            accumulator,
            a_major,
            b_major,
            negate_a: false,
            negate_b: false,
            m,
            n,
            sparsity: Sparsity::Dense,
        }
    }

    /// The instruction's `.kind::` (A's; [`InstrDescriptor::encode`] checks B's agrees).
    pub fn kind(&self) -> MmaKind {
        self.a.kind()
    }

    /// K of one instruction: set by the kind and sparsity, not by a descriptor field.
    pub fn k(&self) -> u32 {
        let dense = match self.kind() {
            MmaKind::F16 => 16,
            MmaKind::F8f6f4 => 32,
        };
        match self.sparsity {
            Sparsity::Dense => dense,
            Sparsity::Sparse { .. } => 2 * dense,
        }
    }

    /// The 32-bit instruction descriptor, or why the ISA has no such instruction.
    pub fn encode(&self) -> Result<u32, DescriptorError> {
        let kind = self.kind();
        if self.b.kind() != kind {
            return Err(DescriptorError::MixedKinds {
                a: self.a,
                b: self.b,
            });
        }
        // kind::f8f6f4 mixes e4m3 and e5m2 freely; kind::f16 pairs f16 with f16 and bf16
        // with bf16 (one row per pair in the ISA's shape table).
        if kind == MmaKind::F16 && self.a != self.b {
            return Err(DescriptorError::MixedF16Types {
                a: self.a,
                b: self.b,
            });
        }
        if self.accumulator == AccumFormat::F16 && self.a == OperandFormat::Bf16 {
            return Err(DescriptorError::Bf16IntoF16);
        }
        if self.m != 64 && self.m != 128 {
            return Err(DescriptorError::M { m: self.m });
        }
        let step = if kind == MmaKind::F8f6f4 && self.b_major == Major::Mn {
            16
        } else {
            8
        };
        if self.n < step || self.n > 256 || self.n % step != 0 {
            return Err(DescriptorError::N {
                n: self.n,
                kind,
                b_major: self.b_major,
                step,
            });
        }
        let (sparse, selector) = match self.sparsity {
            Sparsity::Dense => (0, 0),
            Sparsity::Sparse { selector } if selector < 4 => (1, selector),
            Sparsity::Sparse { selector } => {
                return Err(DescriptorError::SparsitySelector(selector))
            }
        };
        let transpose = |major| match major {
            Major::K => 0,
            Major::Mn => 1,
        };
        let d_format = match self.accumulator {
            AccumFormat::F16 => 0,
            AccumFormat::F32 => 1,
        };
        let bits = SPARSITY_SELECTOR.put(u64::from(selector))
            | SPARSITY.put(sparse)
            | SATURATE.put(0)
            | D_FORMAT.put(d_format)
            | A_FORMAT.put(self.a.code())
            | B_FORMAT.put(self.b.code())
            | NEGATE_A.put(u64::from(self.negate_a))
            | NEGATE_B.put(u64::from(self.negate_b))
            | TRANSPOSE_A.put(transpose(self.a_major))
            | TRANSPOSE_B.put(transpose(self.b_major))
            | N_SHR3.put(u64::from(self.n >> 3))
            | M_SHR4.put(u64::from(self.m >> 4))
            | MAX_SHIFT.put(0);
        Ok(bits as u32)
    }
}

/// Swizzling of an operand tile in shared memory, with the sm100 3-bit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swizzle {
    /// Interleaved 8x16-byte core matrices.
    None,
    /// 128-byte swizzle of 32-byte units (the ISA's "128-Byte with 32B atomic").
    Bytes128Atom32,
    /// 128-byte swizzle of 16-byte units: the pattern repeats every 1024 bytes.
    Bytes128,
    /// Repeats every 512 bytes.
    Bytes64,
    /// Repeats every 256 bytes.
    Bytes32,
}

impl Swizzle {
    fn code(self) -> u64 {
        match self {
            Swizzle::None => 0,
            Swizzle::Bytes128Atom32 => 1,
            Swizzle::Bytes128 => 2,
            Swizzle::Bytes64 => 4,
            Swizzle::Bytes32 => 6,
        }
    }
}

impl fmt::Display for Swizzle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Swizzle::None => "unswizzled",
            Swizzle::Bytes128Atom32 => "128-byte-swizzled (32-byte atoms)",
            Swizzle::Bytes128 => "128-byte-swizzled",
            Swizzle::Bytes64 => "64-byte-swizzled",
            Swizzle::Bytes32 => "32-byte-swizzled",
        })
    }
}

/// The leading-dimension field and its mode bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leading {
    /// Swizzled K-major layouts: the ISA reads no leading offset ("not used, assumed to
    /// be 1"); encoded as 1.
    Unused,
    /// Byte offset, relative (bit 52 = 0): for MN-major swizzled layouts, from one
    /// swizzle-width group of MN to the next; for unswizzled ones, between the core
    /// matrices along K (K-major) or MN (MN-major).
    Offset(u32),
    /// Absolute shared address of a second K chunk (bit 52 = 1), for K-major 128-byte
    /// swizzled tiles whose 48-byte K step would cross the 128-byte row. The ISA offers
    /// this mode on sm_103a only, for 6- and 4-bit operands; sm_100a kernels leave it.
    Absolute(u32),
}

/// One operand tile in shared memory; encoded by [`SmemDescriptor::encode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmemDescriptor {
    /// Shared-memory byte address of the matrix start; 0 for a template constant the
    /// device adds the address to.
    pub start_address: u32,
    /// Not encoded here (the instruction descriptor carries it), but it decides what the
    /// leading field means and which swizzles are allowed.
    pub major: Major,
    pub swizzle: Swizzle,
    pub leading: Leading,
    /// Stride dimension byte offset: from one 8-row group to the next (K-major), from one
    /// 8-column group of K to the next (MN-major swizzled), or between rows (MN-major
    /// unswizzled).
    pub stride_byte_offset: u32,
    /// 0 when the swizzle pattern starts on its own boundary (1024, 512 or 256 bytes),
    /// else `(pattern start >> 7) & 7`.
    pub base_offset: u8,
}

/// The ISA's `matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4`, refused where the mask
/// would drop bits or the shift would drop a misalignment.
fn encode_16b(field: SmemField, value: u32) -> Result<u64, DescriptorError> {
    if value % 16 != 0 {
        return Err(DescriptorError::Unaligned { field, value });
    }
    if value > MAX_ENCODED_BYTES {
        return Err(DescriptorError::TooLarge { field, value });
    }
    Ok(u64::from(value >> 4))
}

/// The largest byte value a 14-bit, 16-byte-unit field holds.
const MAX_ENCODED_BYTES: u32 = ((1 << 14) - 1) << 4;

impl SmemDescriptor {
    /// The 64-bit shared-memory descriptor, or why the ISA has no such layout.
    pub fn encode(&self) -> Result<u64, DescriptorError> {
        let start = encode_16b(SmemField::StartAddress, self.start_address)?;
        let stride = encode_16b(SmemField::StrideByteOffset, self.stride_byte_offset)?;
        if self.base_offset > 7 {
            return Err(DescriptorError::BaseOffset(self.base_offset));
        }
        // The formats here are 8- and 16-bit: MN-major takes every swizzle but this one.
        if self.major == Major::Mn && self.swizzle == Swizzle::Bytes128Atom32 {
            return Err(DescriptorError::MnMajorAtom32);
        }
        let leading_unused = self.major == Major::K && self.swizzle != Swizzle::None;
        let (leading, mode) = match self.leading {
            Leading::Unused if leading_unused => (1, 0),
            Leading::Unused => {
                return Err(DescriptorError::LeadingNeeded {
                    major: self.major,
                    swizzle: self.swizzle,
                })
            }
            Leading::Offset(_) if leading_unused => {
                return Err(DescriptorError::LeadingUnused {
                    swizzle: self.swizzle,
                })
            }
            Leading::Offset(bytes) => (encode_16b(SmemField::LeadingByteOffset, bytes)?, 0),
            Leading::Absolute(address) => {
                if self.major != Major::K
                    || self.swizzle != Swizzle::Bytes128
                    || self.base_offset != 0
                {
                    return Err(DescriptorError::AbsoluteLeading {
                        major: self.major,
                        swizzle: self.swizzle,
                        base_offset: self.base_offset,
                    });
                }
                (encode_16b(SmemField::LeadingAddress, address)?, 1)
            }
        };
        Ok(START_ADDRESS.put(start)
            | LEADING.put(leading)
            | STRIDE.put(stride)
            | FIXED_0B001.put(0b001)
            | BASE_OFFSET.put(u64::from(self.base_offset))
            | LEADING_MODE.put(mode)
            | FIXED_ZERO.put(0)
            | SWIZZLE.put(self.swizzle.code()))
    }
}

/// A 32-bit descriptor as a CUDA literal: `0x08200490u`.
pub fn cuda_u32(value: u32) -> String {
    format!("{value:#010x}u")
}

/// A 64-bit descriptor as a CUDA literal: `0x4000404000010000ull`.
pub fn cuda_u64(value: u64) -> String {
    format!("{value:#018x}ull")
}

/// A byte-valued field of the shared-memory descriptor, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmemField {
    StartAddress,
    LeadingByteOffset,
    LeadingAddress,
    StrideByteOffset,
}

impl fmt::Display for SmemField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SmemField::StartAddress => "start address",
            SmemField::LeadingByteOffset => "leading byte offset",
            SmemField::LeadingAddress => "leading address",
            SmemField::StrideByteOffset => "stride byte offset",
        })
    }
}

/// Why a descriptor was refused: each names the problem and what the ISA accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    #[error(
        "A is {a} ({}) and B is {b} ({}): one tcgen05.mma takes both operands of one kind",
        a.kind(),
        b.kind()
    )]
    MixedKinds { a: OperandFormat, b: OperandFormat },
    #[error("kind::f16 takes A and B of one type (f16 with f16, or bf16 with bf16), not A {a} with B {b}")]
    MixedF16Types { a: OperandFormat, b: OperandFormat },
    #[error("bf16 operands accumulate in f32 only; an f16 accumulator takes f16 operands")]
    Bf16IntoF16,
    #[error("M = {m} is not a tcgen05.mma.cta_group::1 shape: M is 64 or 128")]
    M { m: u32 },
    #[error("N = {n} is not a {kind} shape with B {b_major}: N is a multiple of {step} from {step} to 256")]
    N {
        n: u32,
        kind: MmaKind,
        b_major: Major,
        step: u32,
    },
    #[error("sparsity selector {0} is out of range: it is 0 to 3")]
    SparsitySelector(u8),
    #[error("{field} {value:#x} is not 16-byte aligned: the descriptor holds it in 16-byte units")]
    Unaligned { field: SmemField, value: u32 },
    #[error(
        "{field} {value:#x} does not fit: the descriptor holds it in 16-byte units in 14 bits, \
         0 to {MAX_ENCODED_BYTES:#x}"
    )]
    TooLarge { field: SmemField, value: u32 },
    #[error("matrix base offset {0} is out of range: it is 0 to 7")]
    BaseOffset(u8),
    #[error("{major} {swizzle} layouts step by their leading byte offset: give Leading::Offset")]
    LeadingNeeded { major: Major, swizzle: Swizzle },
    #[error(
        "K-major {swizzle} layouts have no leading byte offset (the ISA assumes 1): \
         give Leading::Unused"
    )]
    LeadingUnused { swizzle: Swizzle },
    #[error(
        "MN-major 8- and 16-bit operands take any swizzle but the 128-byte one with 32-byte \
         atoms: use Swizzle::Bytes128, Bytes64, Bytes32 or None"
    )]
    MnMajorAtom32,
    #[error(
        "an absolute leading address needs a K-major operand, the 128-byte swizzle and base \
         offset 0; got {major}, {swizzle}, base offset {base_offset}"
    )]
    AbsoluteLeading {
        major: Major,
        swizzle: Swizzle,
        base_offset: u8,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use AccumFormat::F32;
    use Major::{Mn, K};
    use OperandFormat::{Bf16, E4m3, E5m2, F16};

    fn idesc(d: InstrDescriptor) -> u32 {
        d.encode().unwrap_or_else(|e| panic!("{d:?}: {e}"))
    }

    fn refused(d: InstrDescriptor) -> String {
        match d.encode() {
            Ok(bits) => panic!("{d:?} encoded as {bits:#010x}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn qk_gemm_bf16_k_major_m128_n128() {
        let d = InstrDescriptor::dense(Bf16, Bf16, F32, (K, K), 128, 128);
        // D f32      1 << 4              = 0x0000_0010
        // A bf16     1 << 7              = 0x0000_0080
        // B bf16     1 << 10             = 0x0000_0400
        // N >> 3     16 << 17            = 0x0020_0000
        // M >> 4     8 << 24             = 0x0800_0000
        // sparsity, saturate, negates, transposes, max shift: 0
        assert_eq!(idesc(d), 0x0820_0490);
        assert_eq!(d.k(), 16);
        assert_eq!(cuda_u32(idesc(d)), "0x08200490u");
    }

    #[test]
    fn bf16_m128_n256() {
        let d = InstrDescriptor::dense(Bf16, Bf16, F32, (K, K), 128, 256);
        // D f32 1 << 4 | A bf16 1 << 7 | B bf16 1 << 10 = 0x0000_0490
        // N >> 3     32 << 17            = 0x0040_0000 (the field's largest value)
        // M >> 4     8 << 24             = 0x0800_0000
        assert_eq!(idesc(d), 0x0840_0490);
    }

    #[test]
    fn bf16_m64_n64() {
        let d = InstrDescriptor::dense(Bf16, Bf16, F32, (K, K), 64, 64);
        // D f32 1 << 4 | A bf16 1 << 7 | B bf16 1 << 10 = 0x0000_0490
        // N >> 3     8 << 17             = 0x0010_0000
        // M >> 4     4 << 24             = 0x0400_0000
        assert_eq!(idesc(d), 0x0410_0490);
    }

    #[test]
    fn fp16_with_f16_accumulator() {
        let d = InstrDescriptor::dense(F16, F16, AccumFormat::F16, (K, K), 128, 128);
        // D f16 0 << 4, A f16 0 << 7, B f16 0 << 10: all zero
        // N >> 3     16 << 17            = 0x0020_0000
        // M >> 4     8 << 24             = 0x0800_0000
        assert_eq!(idesc(d), 0x0820_0000);
    }

    #[test]
    fn pv_gemm_b_mn_major() {
        // V read with keys along K and the head dim along N: B transposed.
        let d = InstrDescriptor::dense(Bf16, Bf16, F32, (K, Mn), 128, 128);
        // D f32 1 << 4 | A bf16 1 << 7 | B bf16 1 << 10 = 0x0000_0490
        // transpose B 1 << 16            = 0x0001_0000
        // N >> 3     16 << 17            = 0x0020_0000
        // M >> 4     8 << 24             = 0x0800_0000
        assert_eq!(idesc(d), 0x0821_0490);
    }

    #[test]
    fn e4m3_k_major() {
        let d = InstrDescriptor::dense(E4m3, E4m3, F32, (K, K), 128, 128);
        assert_eq!(d.kind(), MmaKind::F8f6f4);
        assert_eq!(d.k(), 32);
        // D f32      1 << 4              = 0x0000_0010
        // A e4m3     0 << 7, B e4m3 0 << 10
        // N >> 3     16 << 17            = 0x0020_0000
        // M >> 4     8 << 24             = 0x0800_0000
        assert_eq!(idesc(d), 0x0820_0010);
    }

    #[test]
    fn e4m3_by_e5m2_negated_b_mn_major_f16_accumulator() {
        let d = InstrDescriptor {
            negate_b: true,
            ..InstrDescriptor::dense(E4m3, E5m2, AccumFormat::F16, (K, Mn), 64, 32)
        };
        // D f16      0 << 4, A e4m3 0 << 7
        // B e5m2     1 << 10             = 0x0000_0400
        // negate B   1 << 14             = 0x0000_4000
        // transpose B 1 << 16            = 0x0001_0000
        // N >> 3     4 << 17             = 0x0008_0000
        // M >> 4     4 << 24             = 0x0400_0000
        assert_eq!(idesc(d), 0x0409_4400);
    }

    #[test]
    fn sparse_negated_a_mn_major_m128_n24() {
        // The ISA allows N in steps of 8 at M = 128 for kind::f16 (older CUTLASS did not).
        let d = InstrDescriptor {
            negate_a: true,
            sparsity: Sparsity::Sparse { selector: 2 },
            ..InstrDescriptor::dense(F16, F16, F32, (Mn, K), 128, 24)
        };
        assert_eq!(d.k(), 32);
        // selector   2 << 0              = 0x0000_0002
        // sparse     1 << 2              = 0x0000_0004
        // D f32      1 << 4              = 0x0000_0010
        // A f16, B f16: 0
        // negate A   1 << 13             = 0x0000_2000
        // transpose A 1 << 15            = 0x0000_8000
        // N >> 3     3 << 17             = 0x0006_0000
        // M >> 4     8 << 24             = 0x0800_0000
        assert_eq!(idesc(d), 0x0806_A016);
    }

    #[test]
    fn every_valid_descriptor_keeps_reserved_bits_clear_and_reads_back() {
        let pairs = [(F16, F16), (Bf16, Bf16), (E4m3, E5m2), (E5m2, E4m3)];
        let mut seen = 0;
        for (a, b) in pairs {
            for accumulator in [AccumFormat::F16, F32] {
                for majors in [(K, K), (K, Mn), (Mn, K), (Mn, Mn)] {
                    for m in [64, 128] {
                        for n in (8..=256).step_by(8) {
                            let d = InstrDescriptor::dense(a, b, accumulator, majors, m, n);
                            let Ok(bits) = d.encode() else { continue };
                            seen += 1;
                            // Bit 3 (saturate), 6, 23, 29 (reserved), 30-31 (.ws shift), 0-2.
                            assert_eq!(bits & 0xE080_004F, 0, "{d:?}: {bits:#x}");
                            assert_eq!((bits >> 17) & 0x3F, n >> 3);
                            assert_eq!((bits >> 24) & 0x1F, m >> 4);
                            assert_eq!((bits >> 15) & 1, u32::from(majors.0 == Mn));
                            assert_eq!((bits >> 16) & 1, u32::from(majors.1 == Mn));
                        }
                    }
                }
            }
        }
        // f16: 2 accumulators x 4 majors x 2 M x 32 N; bf16: f32 only; f8: B MN-major
        // halves the N values.
        assert_eq!(seen, 512 + 256 + 2 * 2 * (2 * 2 * 32 + 2 * 2 * 16));
    }

    #[test]
    fn invalid_instructions_are_refused_with_the_valid_values() {
        let base = InstrDescriptor::dense(Bf16, Bf16, F32, (K, K), 128, 128);
        for m in [32, 96, 256] {
            assert_eq!(
                refused(InstrDescriptor { m, ..base }),
                format!("M = {m} is not a tcgen05.mma.cta_group::1 shape: M is 64 or 128")
            );
        }
        for n in [0, 12, 264] {
            assert_eq!(
                refused(InstrDescriptor { n, ..base }),
                format!(
                    "N = {n} is not a kind::f16 shape with B K-major: N is a multiple of 8 \
                     from 8 to 256"
                )
            );
        }
        assert_eq!(
            refused(InstrDescriptor::dense(E4m3, E4m3, F32, (K, Mn), 128, 24)),
            "N = 24 is not a kind::f8f6f4 shape with B MN-major: N is a multiple of 16 from \
             16 to 256"
        );
        assert_eq!(
            refused(InstrDescriptor {
                accumulator: AccumFormat::F16,
                ..base
            }),
            "bf16 operands accumulate in f32 only; an f16 accumulator takes f16 operands"
        );
        assert_eq!(
            refused(InstrDescriptor { a: F16, ..base }),
            "kind::f16 takes A and B of one type (f16 with f16, or bf16 with bf16), not A f16 \
             with B bf16"
        );
        assert_eq!(
            refused(InstrDescriptor { a: E4m3, ..base }),
            "A is e4m3 (kind::f8f6f4) and B is bf16 (kind::f16): one tcgen05.mma takes both \
             operands of one kind"
        );
        assert_eq!(
            refused(InstrDescriptor {
                sparsity: Sparsity::Sparse { selector: 4 },
                ..base
            }),
            "sparsity selector 4 is out of range: it is 0 to 3"
        );
    }

    #[test]
    fn operand_formats_follow_the_spec_dtype() {
        assert_eq!(OperandFormat::from(Dtype::Bf16), Bf16);
        assert_eq!(OperandFormat::from(Dtype::Fp16), F16);
        assert_eq!(OperandFormat::from(Dtype::E4m3), E4m3);
    }

    fn sdesc(d: SmemDescriptor) -> u64 {
        d.encode().unwrap_or_else(|e| panic!("{d:?}: {e}"))
    }

    fn smem_refused(d: SmemDescriptor) -> String {
        match d.encode() {
            Ok(bits) => panic!("{d:?} encoded as {bits:#018x}"),
            Err(e) => e.to_string(),
        }
    }

    /// A K-major bf16 tile in the 128-byte swizzle: rows of 64 elements (128 bytes), 8
    /// rows per 1024-byte swizzle pattern (Q or K in the QK GEMM).
    fn k_major_128b() -> SmemDescriptor {
        SmemDescriptor {
            start_address: 0,
            major: K,
            swizzle: Swizzle::Bytes128,
            leading: Leading::Unused,
            stride_byte_offset: 1024,
            base_offset: 0,
        }
    }

    #[test]
    fn k_major_bf16_128b_swizzle() {
        // start      0 >> 4 = 0
        // LBO        unused, assumed 1: 1 << 16          = 0x0000_0000_0001_0000
        // SBO        1024 >> 4 = 64: 64 << 32            = 0x0000_0040_0000_0000
        // fixed      0b001 << 46                         = 0x0000_4000_0000_0000
        // base offset 0, mode 0
        // swizzle    128B 2 << 61                        = 0x4000_0000_0000_0000
        let bits = sdesc(k_major_128b());
        assert_eq!(bits, 0x4000_4040_0001_0000);
        assert_eq!(cuda_u64(bits), "0x4000404000010000ull");
        // hopper/wgmma.cuh's k_major_desc of the same tile: LBO 16 >> 4 = 1 at 16, SBO 64
        // at 32, 128B swizzle 1 << 62 (= 2 << 61). tcgen05 adds bit 46 and nothing else.
        let wgmma = (1u64 << 16) | (64 << 32) | (1 << 62);
        assert_eq!(bits, wgmma | (1 << 46));
        // A tile at 0x400 and the k-step 32 bytes into the row (as wgmma.cuh steps): only
        // the start address moves. (0x400 + 32) >> 4 = 0x42.
        let stepped = SmemDescriptor {
            start_address: 0x420,
            ..k_major_128b()
        };
        assert_eq!(sdesc(stepped), 0x4000_4040_0001_0042);
    }

    #[test]
    fn mn_major_bf16_128b_swizzle() {
        // V, 128 keys (K) x head dim 128 (N) in 64-element column blocks of 128 keys x 128
        // bytes (16384 bytes), as hopper/wgmma.cuh's mn_major_desc lays it out: LBO steps
        // from one 64-element group of N to the next (16384), SBO from one 8-key group to
        // the next (1024).
        let d = SmemDescriptor {
            major: Mn,
            leading: Leading::Offset(16384),
            ..k_major_128b()
        };
        // start      0
        // LBO        16384 >> 4 = 1024: 1024 << 16       = 0x0000_0000_0400_0000
        // SBO        1024 >> 4 = 64: 64 << 32            = 0x0000_0040_0000_0000
        // fixed      0b001 << 46                         = 0x0000_4000_0000_0000
        // swizzle    128B 2 << 61                        = 0x4000_0000_0000_0000
        assert_eq!(sdesc(d), 0x4000_4040_0400_0000);
    }

    #[test]
    fn other_swizzles_base_offset_and_absolute_leading() {
        // Unswizzled K-major: LBO steps between core matrices along K.
        let none = SmemDescriptor {
            start_address: 0x1230,
            major: K,
            swizzle: Swizzle::None,
            leading: Leading::Offset(2048),
            stride_byte_offset: 128,
            base_offset: 0,
        };
        // start      0x1230 >> 4 = 0x123                 = 0x0000_0000_0000_0123
        // LBO        2048 >> 4 = 128: 128 << 16          = 0x0000_0000_0080_0000
        // SBO        128 >> 4 = 8: 8 << 32               = 0x0000_0008_0000_0000
        // fixed      0b001 << 46                         = 0x0000_4000_0000_0000
        // swizzle    none 0
        assert_eq!(sdesc(none), 0x0000_4008_0080_0123);

        // 64-byte swizzle, K-major e4m3 (64-element rows): SBO 8 x 64 bytes.
        let b64 = SmemDescriptor {
            swizzle: Swizzle::Bytes64,
            stride_byte_offset: 512,
            ..k_major_128b()
        };
        // LBO 1 << 16 | SBO 32 << 32 | fixed 1 << 46 | swizzle 64B 4 << 61 = 0x8000_0000_0000_0000
        assert_eq!(sdesc(b64), 0x8000_4020_0001_0000);

        // 32-byte swizzle, MN-major, its pattern starting 0x180 bytes past a 256-byte
        // boundary: base offset (0x180 >> 7) & 7 = 3.
        let b32 = SmemDescriptor {
            start_address: 0x180,
            major: Mn,
            swizzle: Swizzle::Bytes32,
            leading: Leading::Offset(256),
            stride_byte_offset: 512,
            base_offset: 3,
        };
        // start      0x180 >> 4 = 0x18                   = 0x0000_0000_0000_0018
        // LBO        256 >> 4 = 16: 16 << 16             = 0x0000_0000_0010_0000
        // SBO        512 >> 4 = 32: 32 << 32             = 0x0000_0020_0000_0000
        // fixed      0b001 << 46                         = 0x0000_4000_0000_0000
        // base offset 3 << 49                            = 0x0006_0000_0000_0000
        // swizzle    32B 6 << 61                         = 0xC000_0000_0000_0000
        assert_eq!(sdesc(b32), 0xC006_4020_0010_0018);

        // The 32-byte-atom 128-byte swizzle, K-major (the ISA allows it K-major).
        let atom32 = SmemDescriptor {
            swizzle: Swizzle::Bytes128Atom32,
            ..k_major_128b()
        };
        // LBO 1 << 16 | SBO 64 << 32 | fixed 1 << 46 | swizzle 1 << 61 = 0x2000_0000_0000_0000
        assert_eq!(sdesc(atom32), 0x2000_4040_0001_0000);

        // Absolute leading address: the second K chunk at 0x8030.
        let absolute = SmemDescriptor {
            start_address: 0x8000,
            leading: Leading::Absolute(0x8030),
            ..k_major_128b()
        };
        // start      0x8000 >> 4 = 0x800                 = 0x0000_0000_0000_0800
        // LBO        0x8030 >> 4 = 0x803: 0x803 << 16    = 0x0000_0000_0803_0000
        // SBO        64 << 32                            = 0x0000_0040_0000_0000
        // fixed      0b001 << 46                         = 0x0000_4000_0000_0000
        // mode       absolute 1 << 52                    = 0x0010_0000_0000_0000
        // swizzle    128B 2 << 61                        = 0x4000_0000_0000_0000
        assert_eq!(sdesc(absolute), 0x4010_4040_0803_0800);
    }

    #[test]
    fn unaligned_and_oversized_fields_are_refused() {
        let base = k_major_128b();
        assert_eq!(
            smem_refused(SmemDescriptor {
                start_address: 0x408,
                ..base
            }),
            "start address 0x408 is not 16-byte aligned: the descriptor holds it in 16-byte units"
        );
        // 256 KiB: (x & 0x3FFFF) would drop it to 0.
        assert_eq!(
            smem_refused(SmemDescriptor {
                start_address: 0x40000,
                ..base
            }),
            "start address 0x40000 does not fit: the descriptor holds it in 16-byte units in 14 \
             bits, 0 to 0x3fff0"
        );
        assert_eq!(
            smem_refused(SmemDescriptor {
                stride_byte_offset: 1 << 18,
                ..base
            }),
            "stride byte offset 0x40000 does not fit: the descriptor holds it in 16-byte units \
             in 14 bits, 0 to 0x3fff0"
        );
        assert_eq!(
            smem_refused(SmemDescriptor {
                stride_byte_offset: 1000,
                ..base
            }),
            "stride byte offset 0x3e8 is not 16-byte aligned: the descriptor holds it in 16-byte \
             units"
        );
        let mn = SmemDescriptor { major: Mn, ..base };
        assert_eq!(
            smem_refused(SmemDescriptor {
                leading: Leading::Offset(0x40010),
                ..mn
            }),
            "leading byte offset 0x40010 does not fit: the descriptor holds it in 16-byte units \
             in 14 bits, 0 to 0x3fff0"
        );
        // The largest value that fits is accepted.
        let widest = SmemDescriptor {
            start_address: 0x3FFF0,
            leading: Leading::Offset(0x3FFF0),
            stride_byte_offset: 0x3FFF0,
            ..mn
        };
        assert_eq!(sdesc(widest), 0x4000_7FFF_3FFF_3FFF);
        assert_eq!(
            smem_refused(SmemDescriptor {
                base_offset: 8,
                ..base
            }),
            "matrix base offset 8 is out of range: it is 0 to 7"
        );
    }

    #[test]
    fn leading_field_and_swizzle_must_suit_the_major_ness() {
        let base = k_major_128b();
        assert_eq!(
            smem_refused(SmemDescriptor {
                leading: Leading::Offset(16),
                ..base
            }),
            "K-major 128-byte-swizzled layouts have no leading byte offset (the ISA assumes 1): \
             give Leading::Unused"
        );
        assert_eq!(
            smem_refused(SmemDescriptor { major: Mn, ..base }),
            "MN-major 128-byte-swizzled layouts step by their leading byte offset: give \
             Leading::Offset"
        );
        assert_eq!(
            smem_refused(SmemDescriptor {
                swizzle: Swizzle::None,
                ..base
            }),
            "K-major unswizzled layouts step by their leading byte offset: give Leading::Offset"
        );
        assert_eq!(
            smem_refused(SmemDescriptor {
                major: Mn,
                swizzle: Swizzle::Bytes128Atom32,
                leading: Leading::Offset(1024),
                ..base
            }),
            "MN-major 8- and 16-bit operands take any swizzle but the 128-byte one with 32-byte \
             atoms: use Swizzle::Bytes128, Bytes64, Bytes32 or None"
        );
        let absolute = SmemDescriptor {
            leading: Leading::Absolute(0x8030),
            ..base
        };
        for bad in [
            SmemDescriptor {
                swizzle: Swizzle::Bytes64,
                ..absolute
            },
            SmemDescriptor {
                base_offset: 1,
                ..absolute
            },
            SmemDescriptor {
                major: Mn,
                ..absolute
            },
        ] {
            assert!(
                smem_refused(bad).starts_with(
                    "an absolute leading address needs a K-major operand, the 128-byte swizzle \
                     and base offset 0; got "
                ),
                "{bad:?}"
            );
        }
    }
}
