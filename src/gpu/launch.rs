//! Launching a forward kernel, after the checks that keep a bad argument from ever
//! reaching the device.

use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaModule, DeviceRepr, DriverError, LaunchConfig, PushKernelArg,
};
use fa4_spec::{FwdParams, KernelSpec, MaskKind};

use super::{driver, Gpu, GpuError, TmaFwdParams};
use crate::space::Footprint;
use fa4_spec::KERNEL_ENTRY;

/// A problem the kernels cannot take, found on the host before any launch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProblemError {
    #[error("{what} is {value}: it must be at least {min}")]
    TooSmall {
        what: &'static str,
        value: i64,
        min: i64,
    },
    #[error("{what} is {value}: a launch takes at most {max} ({hint})")]
    TooLarge {
        what: &'static str,
        value: i64,
        max: i64,
        hint: &'static str,
    },
    #[error("heads_q ({heads_q}) is not a multiple of heads_kv ({heads_kv}): GQA needs a whole number of query heads per KV head")]
    HeadRatio { heads_q: i32, heads_kv: i32 },
    #[error("{tensor} is a null pointer")]
    Null { tensor: &'static str },
    #[error("{tensor} at {addr:#x} is not {align}-byte aligned: the kernels read it {align} bytes at a time")]
    Misaligned {
        tensor: &'static str,
        addr: u64,
        align: u64,
    },
    #[error("{what} = {value} elements is not a multiple of 8 (16 bytes): the kernels load 16 bytes at a time")]
    Stride { what: &'static str, value: i64 },
    #[error("{what} = {value} elements is over {max}: the kernels address a tile of rows with 32-bit offsets; make the rows closer together")]
    StrideTooLarge {
        what: &'static str,
        value: i64,
        max: i64,
    },
    #[error("softmax_scale {0} is not a finite positive number")]
    Scale(String),
    #[error("window ({left}, {right}) is not a sliding window: each side is -1 (unbounded) or a key count")]
    Window { left: i32, right: i32 },
    #[error("softcap {0} is not a finite positive number: a softcap kernel needs the cap")]
    Softcap(String),
    #[error("page_size {0} is not a positive number of keys per page")]
    PageSize(i32),
    #[error("page table rows of {stride} pages x {page_size} keys cannot hold seqlen_k = {seqlen_k} keys: page_table_batch_stride must be at least ceil(seqlen_k / page_size)")]
    PageTable {
        stride: i32,
        page_size: i32,
        seqlen_k: i32,
    },
    #[error("{0} is set, but this kernel was not built for it: {1}")]
    Unexpected(&'static str, &'static str),
    #[error("split workspace of {bytes} bytes is smaller than the {need} bytes any kernel may take on a device of {sm_count} SMs: allocate fa4gen_split_workspace_bytes({sm_count}) bytes, zeroed, or pass none")]
    SplitWorkspace {
        bytes: u64,
        need: u64,
        sm_count: u32,
    },
}

/// The largest token-row stride of Q, K and V, in elements: a tile of up to 256 rows
/// then spans less than 2^32 elements (the kernels step through it in 32 bits).
pub const MAX_ROW_STRIDE: i64 = 1 << 24;

/// The host-side checks of a forward launch: shapes, pointers, alignment, strides.
pub fn check_problem(p: &FwdParams) -> Result<(), ProblemError> {
    let at_least = |what, value: i64, min| {
        if value < min {
            Err(ProblemError::TooSmall { what, value, min })
        } else {
            Ok(())
        }
    };
    at_least("batch", p.batch.into(), 0)?;
    at_least("seqlen_q", p.seqlen_q.into(), 0)?;
    at_least("seqlen_k", p.seqlen_k.into(), 0)?;
    at_least("heads_q", p.heads_q.into(), 1)?;
    at_least("heads_kv", p.heads_kv.into(), 1)?;
    // The grid's y and z dimensions (heads, sequences) stop at 65535.
    for (what, value, hint) in [
        ("batch", p.batch, "split the batch"),
        ("heads_q", p.heads_q, "split the heads"),
    ] {
        if value > 65535 {
            return Err(ProblemError::TooLarge {
                what,
                value: value.into(),
                max: 65535,
                hint,
            });
        }
    }
    if p.heads_q % p.heads_kv != 0 {
        return Err(ProblemError::HeadRatio {
            heads_q: p.heads_q,
            heads_kv: p.heads_kv,
        });
    }
    if !(p.softmax_scale.is_finite() && p.softmax_scale > 0.0) {
        return Err(ProblemError::Scale(p.softmax_scale.to_string()));
    }
    let has_queries = p.batch > 0 && p.seqlen_q > 0;
    let has_keys = has_queries && p.seqlen_k > 0;
    let tensors = [
        ("q", p.q, 16, has_queries),
        ("k", p.k, 16, has_keys),
        ("v", p.v, 16, has_keys),
        ("o", p.o, 16, has_queries),
        ("lse", p.lse, 4, has_queries),
        ("cu_seqlens_q", p.cu_seqlens_q, 4, false),
        ("cu_seqlens_k", p.cu_seqlens_k, 4, false),
        ("seqused_k", p.seqused_k, 4, false),
        ("page_table", p.page_table, 4, false),
    ];
    // A pointer the problem needs must be set; any pointer set must be aligned.
    for (tensor, addr, align, needed) in tensors {
        if addr == 0 {
            if needed {
                return Err(ProblemError::Null { tensor });
            }
            continue;
        }
        if addr % align != 0 {
            return Err(ProblemError::Misaligned {
                tensor,
                addr,
                align,
            });
        }
    }
    let strides = [
        ("q_batch_stride", p.q_batch_stride),
        ("q_row_stride", p.q_row_stride),
        ("q_head_stride", p.q_head_stride),
        ("k_batch_stride", p.k_batch_stride),
        ("k_row_stride", p.k_row_stride),
        ("k_head_stride", p.k_head_stride),
        ("v_batch_stride", p.v_batch_stride),
        ("v_row_stride", p.v_row_stride),
        ("v_head_stride", p.v_head_stride),
        ("o_batch_stride", p.o_batch_stride),
        ("o_row_stride", p.o_row_stride),
        ("o_head_stride", p.o_head_stride),
    ];
    for (what, value) in [
        ("q_row_stride", p.q_row_stride),
        ("k_row_stride", p.k_row_stride),
        ("v_row_stride", p.v_row_stride),
    ] {
        if value > MAX_ROW_STRIDE {
            return Err(ProblemError::StrideTooLarge {
                what,
                value,
                max: MAX_ROW_STRIDE,
            });
        }
    }
    at_least("lse_batch_stride", p.lse_batch_stride, 0)?;
    at_least("lse_head_stride", p.lse_head_stride, 0)?;
    for (what, value) in strides {
        if value % 8 != 0 {
            return Err(ProblemError::Stride { what, value });
        }
        at_least(what, value, 0)?;
    }
    Ok(())
}

/// The checks of [`check_problem`] plus those of the spec's mask and score features: a
/// window for local masks, a cap for softcap kernels, sink logits for sink kernels.
pub fn check_problem_for(spec: &KernelSpec, p: &FwdParams) -> Result<(), ProblemError> {
    check_problem(p)?;
    if spec.mask == fa4_spec::MaskKind::Local && (p.window_left < -1 || p.window_right < -1) {
        return Err(ProblemError::Window {
            left: p.window_left,
            right: p.window_right,
        });
    }
    if spec.features.softcap && !(p.softcap.is_finite() && p.softcap > 0.0) {
        return Err(ProblemError::Softcap(p.softcap.to_string()));
    }
    if spec.features.paged_kv {
        if p.batch > 0 && p.seqlen_q > 0 && p.seqlen_k > 0 {
            if p.page_size < 1 {
                return Err(ProblemError::PageSize(p.page_size));
            }
            if p.page_table == 0 {
                return Err(ProblemError::Null {
                    tensor: "page_table",
                });
            }
            let needed =
                (i64::from(p.seqlen_k) + i64::from(p.page_size) - 1) / i64::from(p.page_size);
            if i64::from(p.page_table_batch_stride) < needed {
                return Err(ProblemError::PageTable {
                    stride: p.page_table_batch_stride,
                    page_size: p.page_size,
                    seqlen_k: p.seqlen_k,
                });
            }
        }
        if p.cu_seqlens_k != 0 {
            return Err(ProblemError::Unexpected(
                "cu_seqlens_k",
                "paged K/V take their lengths from seqused_k (cache_seqlens)",
            ));
        }
    } else if p.page_table != 0 {
        return Err(ProblemError::Unexpected(
            "page_table",
            "use a kernel built with the paged feature",
        ));
    }
    if spec.features.sinks && p.batch > 0 && p.seqlen_q > 0 {
        if p.sinks == 0 {
            return Err(ProblemError::Null { tensor: "sinks" });
        }
        if p.sinks % 4 != 0 {
            return Err(ProblemError::Misaligned {
                tensor: "sinks",
                addr: p.sinks,
                align: 4,
            });
        }
    }
    Ok(())
}

/// The grid of a forward launch, `None` when there is nothing to compute, an error when
/// the problem does not fit the grid's limits: one block per
/// `block_m` rows of the longest sequence, per query head (or per KV head with
/// pack-GQA, whose rows are the query heads of one KV head), per sequence. A persistent
/// kernel gets those work tiles in one dimension and at most `persistent_per_sm` blocks
/// per SM of the device's `sm_count`, which stride over them.
///
/// A causal persistent kernel deals its tiles in sections of whole (head, sequence)
/// pairs, `ceil(2 * blocks / m_blocks)` pairs each, heaviest m-blocks first, snaking
/// over two rounds (`kernel_ws.cuh`): its grid is sized so that a section is two rounds
/// exactly (a few SMs may idle), which pairs every heavy tile with a light one.
///
/// A causal kernel with `causal_m_blocks_in_y` (the portable one without pack-GQA) takes
/// its m-block from y, reversed: `(heads, m-blocks, batch)`, so every head of a sequence
/// takes its heaviest m-block first, then its next. Past y's 65535 m-blocks it is an
/// error that says how to split the queries.
///
/// A causal kernel with `section_key_bytes` takes one block per tile from a grid of
/// `(section pairs x m-blocks, sections)` (`schedule.cuh`): the hardware hands blocks out
/// in launch order, so within a section the heaviest m-block of every pair goes first
/// (`causal_section_pairs` sizes the sections).
pub fn launch_grid(
    mask: MaskKind,
    footprint: &Footprint,
    params: &FwdParams,
    sm_count: u32,
) -> Result<Option<(u32, u32, u32)>, ProblemError> {
    // Query heads per KV head: pack-GQA makes them the rows of one KV head's tiles.
    let group = (params.heads_q / params.heads_kv.max(1)) as u64;
    let (rows, heads, pairs_per_kv) = if footprint.pack_gqa {
        (
            params.seqlen_q.max(0) as u64 * group,
            params.heads_kv as u32,
            1,
        )
    } else {
        (
            params.seqlen_q.max(0) as u64,
            params.heads_q as u32,
            group.max(1),
        )
    };
    let mut grid_x = rows.div_ceil(u64::from(footprint.block_m.max(1)));
    if grid_x == 0 || params.batch <= 0 {
        return Ok(None);
    }
    // A cluster's blocks take consecutive m-blocks: the last cluster of an odd count gets
    // a block past the rows, which loads its share of the K/V tiles and computes nothing.
    if footprint.cluster_m > 1 {
        grid_x = grid_x.next_multiple_of(u64::from(footprint.cluster_m));
    }
    let pairs = u64::from(heads) * params.batch as u64;
    if footprint.persistent_per_sm > 0 {
        let tiles = grid_x * pairs;
        let mut blocks = u64::from(footprint.persistent_per_sm * sm_count.max(1));
        if mask == MaskKind::Causal {
            let section_pairs = (2 * blocks / grid_x).max(1);
            // Rounded down: the kernel's ceil(2 * blocks / m_blocks) gives back exactly
            // section_pairs (m_blocks > 1), or all of them (m_blocks = 1).
            blocks = (section_pairs * grid_x / 2).clamp(1, blocks);
        }
        return Ok(Some((tiles.min(blocks) as u32, 1, 1)));
    }
    if mask == MaskKind::Causal && footprint.causal_m_blocks_in_y {
        // y stops at 65535 m-blocks (4.19 million queries at 64 rows per block).
        if grid_x > 65535 {
            return Err(ProblemError::TooLarge {
                what: "seqlen_q",
                value: params.seqlen_q.into(),
                max: 65535 * i64::from(footprint.block_m),
                hint: "split the queries: the causal mask aligns them to the keys' end, so \
                       the last queries go as one call with seqlen_q cut, then the ones before",
            });
        }
        return Ok(Some((heads, grid_x as u32, params.batch as u32)));
    }
    if mask == MaskKind::Causal && footprint.section_key_bytes > 0 {
        let mut section_pairs = causal_section_pairs(
            pairs,
            grid_x,
            params.seqlen_k.max(1) as u64 * u64::from(footprint.section_key_bytes),
            pairs_per_kv,
            sm_count,
        );
        // The grid's y dimension stops at 65535 sections.
        section_pairs = section_pairs.max(pairs.div_ceil(65535));
        let sections = pairs.div_ceil(section_pairs);
        return Ok(Some(((section_pairs * grid_x) as u32, sections as u32, 1)));
    }
    Ok(Some((grid_x as u32, heads, params.batch as u32)))
}

/// The counters at the head of a split workspace (`split.cuh`): one per (block,
/// consumer) of any grid, in the same place for every kernel, zero when the workspace is
/// first handed over and after every launch.
pub const SPLIT_COUNTER_BYTES: u64 = 4096;

/// Bytes of the split tail's workspace (`split.cuh`) for a grid of `blocks` blocks of
/// `block_m` rows (a consumer per 64) and `head_dim_v` O columns: the counters, then per
/// (block, piece, consumer) its 64 rows of O in f32 and their LSE.
pub fn split_workspace_bytes(blocks: u32, block_m: u32, head_dim_v: u32) -> u64 {
    let consumers = u64::from(block_m / 64);
    SPLIT_COUNTER_BYTES
        + u64::from(blocks) * 2 * consumers * 128 * (u64::from(head_dim_v) / 2 + 2) * 4
}

/// A split workspace that serves every kernel on a device of `sm_count` SMs: persistent
/// grids of one block of up to 192 rows per SM (two per SM only with 64 rows), O up to
/// 256 columns. 52.7 MB on 132 SMs.
pub fn max_split_workspace_bytes(sm_count: u32) -> u64 {
    split_workspace_bytes(sm_count, 192, 256)
}

/// The work tiles of a launch: m-blocks x (head, sequence) pairs (`launch_grid`).
fn work_tiles(footprint: &Footprint, params: &FwdParams) -> u64 {
    let group = (params.heads_q / params.heads_kv.max(1)).max(1) as u64;
    let (rows, heads) = if footprint.pack_gqa {
        (params.seqlen_q.max(0) as u64 * group, params.heads_kv)
    } else {
        (params.seqlen_q.max(0) as u64, params.heads_q)
    };
    rows.div_ceil(u64::from(footprint.block_m.max(1)))
        * heads.max(0) as u64
        * params.batch.max(0) as u64
}

/// The fewest keys a split tail is worth (`split_tail`).
pub const SPLIT_MIN_KEYS: i32 = 4096;

/// A split workspace a caller hands a launch: device memory of `bytes` bytes (at least
/// `max_split_workspace_bytes` of the device, which covers every kernel's grid),
/// 256-byte aligned, its first `SPLIT_COUNTER_BYTES` zero when first handed over. Every
/// launch leaves them zero; two launches must not use one at the same time. The launches
/// check it (`check_split_workspace`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitWorkspace {
    pub ptr: u64,
    pub bytes: u64,
}

/// A caller's split workspace, checked before a launch: 256-byte aligned and as large as
/// `max_split_workspace_bytes`, so that a workspace that serves one shape serves every
/// shape (a smaller one would fail only on the shapes that split). A null pointer is
/// none.
pub fn check_split_workspace(
    split: Option<SplitWorkspace>,
    sm_count: u32,
) -> Result<Option<SplitWorkspace>, ProblemError> {
    let Some(ws) = split.filter(|w| w.ptr != 0) else {
        return Ok(None);
    };
    if ws.ptr % 256 != 0 {
        return Err(ProblemError::Misaligned {
            tensor: "split workspace",
            addr: ws.ptr,
            align: 256,
        });
    }
    let need = max_split_workspace_bytes(sm_count);
    if ws.bytes < need {
        return Err(ProblemError::SplitWorkspace {
            bytes: ws.bytes,
            need,
            sm_count,
        });
    }
    Ok(Some(ws))
}

/// The tiles whose keys an unmasked persistent grid of `blocks` blocks shares out
/// (`schedule.cuh`'s SplitTail: the last round's and one round's more), or 0 for none.
/// A split takes a kernel built for it, a workspace as large as
/// `split_workspace_bytes`, a dense batch (no cu_seqlens or seqused_k: every tile sees
/// the same keys), more tiles than blocks, and a last round that would leave at least
/// an eighth of the blocks idle (one idle block in 132 does not pay for the merges).
///
/// And where it paid on the H200 (bench/NOTES.md): O of up to 128 columns and at least
/// `SPLIT_MIN_KEYS` keys. Every persistent tile of the FA3 grid split against not split,
/// twice: d64 and d128 1.006 to 1.016x from 4096 keys, 0.97 to 0.98x at 512 (a tile of
/// four key blocks cut in pieces pays a merge for little), d256 0.91x at 512 and 0.99 to
/// 1.01x at 8k and 16k.
pub fn split_tail(
    footprint: &Footprint,
    params: &FwdParams,
    blocks: u32,
    workspace: Option<SplitWorkspace>,
) -> i32 {
    let dense = params.cu_seqlens_q == 0 && params.cu_seqlens_k == 0 && params.seqused_k == 0;
    let Some(ws) = workspace else { return 0 };
    if footprint.split_head_dim_v == 0
        || footprint.split_head_dim_v > 128
        || params.seqlen_k < SPLIT_MIN_KEYS
        || footprint.persistent_per_sm == 0
        || ws.ptr == 0
        || ws.ptr % 256 != 0
        || !dense
        || blocks == 0
    {
        return 0;
    }
    let need = split_workspace_bytes(blocks, footprint.block_m, footprint.split_head_dim_v);
    let counters = u64::from(blocks) * u64::from(footprint.block_m / 64) * 4;
    if ws.bytes < need || counters > SPLIT_COUNTER_BYTES {
        return 0;
    }
    let (tiles, blocks) = (work_tiles(footprint, params), u64::from(blocks));
    let last = tiles % blocks;
    if tiles <= blocks || last == 0 || 8 * (blocks - last) < blocks {
        return 0;
    }
    (blocks + last) as i32
}

/// The K/V a section of causal pairs may keep in L2: two thirds of the H100's and H200's
/// 50 MB, leaving room for Q, O and the K/V of the section before.
const SECTION_L2_BYTES: u64 = 32 << 20;
/// At most this many pairs per section, so the blocks running together still share a few
/// pairs' K/V as they read it (sections of up to 256 pairs ran 2.5% slower at 512 tokens
/// than sections of 16 or 8 on the H200: bench/NOTES.md).
const MAX_SECTION_PAIRS: u64 = 16;

/// Pairs per section of a causal grid of `pairs` x `m_blocks` tiles. Taken one pair at a
/// time, the m-blocks of a pair run from heaviest to lightest, and a wave of blocks that
/// holds a few pairs' heavy ends and light ends unevenly leaves SMs idle at the end
/// (0.88 to 0.95 of the work's time in a list-schedule model of the FA3 grid). Sections
/// of several pairs, each pair's heaviest m-block first, then their next, even out the
/// waves. One pair at a time where a pair's m-blocks fill most of a wave already: the
/// model then loses nothing, and more pairs in flight only share less K/V in L2.
/// Otherwise as many pairs as keep the section's K/V (`pair_bytes` each; `pairs_per_kv`
/// query heads side by side share one KV head's) in `SECTION_L2_BYTES`, at most
/// `MAX_SECTION_PAIRS`, evened so the last section is not a sliver.
pub fn causal_section_pairs(
    pairs: u64,
    m_blocks: u64,
    pair_bytes: u64,
    pairs_per_kv: u64,
    sm_count: u32,
) -> u64 {
    if pairs <= 1 || 8 * m_blocks >= 7 * u64::from(sm_count) {
        return 1;
    }
    let fit = (SECTION_L2_BYTES * pairs_per_kv / pair_bytes.max(1)).clamp(1, MAX_SECTION_PAIRS);
    let sections = pairs.div_ceil(fit.min(pairs));
    pairs.div_ceil(sections)
}

/// `FwdParams` as a kernel argument: passed by value, bit for bit.
#[repr(transparent)]
pub(crate) struct ParamsArg(pub(crate) FwdParams);
// SAFETY: FwdParams is #[repr(C)], plain old data, and laid out exactly like the
// device-side struct (both sides assert its size; a test checks its offsets).
unsafe impl DeviceRepr for ParamsArg {}

#[allow(dead_code)] // read by the driver, as raw bytes
struct TmaParamsArg(TmaFwdParams);
// SAFETY: #[repr(C)] plain old data laid out as the device-side TmaFwdParams (sizes and
// the maps' offset asserted on both sides).
unsafe impl DeviceRepr for TmaParamsArg {}

/// A forward kernel loaded on a device.
pub struct FwdKernel {
    func: CudaFunction,
    pub spec: KernelSpec,
    pub footprint: Footprint,
    _module: Arc<CudaModule>,
}

impl FwdKernel {
    pub fn load(
        gpu: &Gpu,
        cubin: &[u8],
        spec: KernelSpec,
        footprint: Footprint,
    ) -> Result<Self, GpuError> {
        let module = gpu.load_module(cubin)?;
        let func = gpu.function(&module, KERNEL_ENTRY, footprint.smem_bytes)?;
        Ok(FwdKernel {
            func,
            spec,
            footprint,
            _module: module,
        })
    }

    /// Checks the problem, then launches on the GPU's stream (asynchronously); with a
    /// split workspace, an unmasked persistent kernel may share out its last tiles.
    pub fn launch(
        &self,
        gpu: &Gpu,
        params: &FwdParams,
        split: Option<SplitWorkspace>,
    ) -> Result<(), GpuError> {
        check_problem_for(&self.spec, params)?;
        let split = check_split_workspace(split, gpu.info.sm_count)?;
        let Some(grid_dim) =
            launch_grid(self.spec.mask, &self.footprint, params, gpu.info.sm_count)?
        else {
            return Ok(()); // nothing to compute
        };
        let cfg = LaunchConfig {
            grid_dim,
            block_dim: (self.footprint.threads, 1, 1),
            shared_mem_bytes: self.footprint.smem_bytes,
        };
        // TMA kernels take the tensor maps over Q, K and V after the parameters.
        let (tma_arg, plain_arg);
        let mut launch = gpu.stream().launch_builder(&self.func);
        if self.footprint.tma_rows > 0 {
            let mut arg = TmaFwdParams::encode(&self.spec, params, self.footprint.tma_rows)
                .map_err(|e| driver("cuTensorMapEncodeTiled")(DriverError(e)))?;
            arg.set_split_tail(&self.footprint, grid_dim.0, split);
            tma_arg = TmaParamsArg(arg);
            launch.arg(&tma_arg);
        } else {
            plain_arg = ParamsArg(*params);
            launch.arg(&plain_arg);
        }
        // SAFETY: the kernel takes one FwdParams (TMA kernels: TmaFwdParams) by value;
        // check_problem vetted its pointers and strides, and the buffers outlive the
        // launch (the caller synchronises before freeing them).
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(driver("cuLaunchKernel"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> FwdParams {
        let (h, d, s) = (8i64, 128i64, 100i64);
        FwdParams {
            q: 0x1000,
            k: 0x2000,
            v: 0x3000,
            o: 0x4000,
            lse: 0x5000,
            q_batch_stride: s * h * d,
            q_row_stride: h * d,
            q_head_stride: d,
            k_batch_stride: s * 2 * d,
            k_row_stride: 2 * d,
            k_head_stride: d,
            v_batch_stride: s * 2 * d,
            v_row_stride: 2 * d,
            v_head_stride: d,
            o_batch_stride: s * h * d,
            o_row_stride: h * d,
            o_head_stride: d,
            batch: 2,
            seqlen_q: 100,
            seqlen_k: 100,
            heads_q: 8,
            heads_kv: 2,
            softmax_scale: 0.088,
            scale_log2: 0.127,
            window_left: -1,
            window_right: -1,
            softcap: 0.0,
            sinks: 0,
            lse_batch_stride: h * s,
            lse_head_stride: s,
            ..FwdParams::default()
        }
    }

    #[test]
    fn accepts_a_well_formed_problem() {
        assert_eq!(check_problem(&good()), Ok(()));
    }

    #[test]
    fn names_each_bad_argument() {
        let cases: Vec<(FwdParams, &str)> = vec![
            (
                FwdParams {
                    heads_kv: 3,
                    ..good()
                },
                "heads_q (8) is not a multiple of heads_kv (3)",
            ),
            (
                FwdParams {
                    k: 0x2008,
                    ..good()
                },
                "k at 0x2008 is not 16-byte aligned",
            ),
            (FwdParams { o: 0, ..good() }, "o is a null pointer"),
            (
                FwdParams {
                    q_row_stride: 1020,
                    ..good()
                },
                "q_row_stride = 1020 elements is not a multiple of 8",
            ),
            (
                FwdParams {
                    seqlen_k: -1,
                    ..good()
                },
                "seqlen_k is -1: it must be at least 0",
            ),
            (
                FwdParams {
                    softmax_scale: f32::NAN,
                    ..good()
                },
                "softmax_scale NaN",
            ),
            (
                FwdParams {
                    heads_q: 0,
                    ..good()
                },
                "heads_q is 0",
            ),
            (
                FwdParams {
                    k_row_stride: (1 << 24) + 8,
                    ..good()
                },
                "k_row_stride = 16777224 elements is over 16777216",
            ),
            (
                FwdParams {
                    batch: 70000,
                    ..good()
                },
                "batch is 70000: a launch takes at most 65535 (split the batch)",
            ),
        ];
        for (p, expected) in cases {
            let msg = check_problem(&p).unwrap_err().to_string();
            assert!(msg.contains(expected), "{msg:?} lacks {expected:?}");
        }
    }

    #[test]
    fn feature_arguments_are_checked_against_the_spec() {
        use fa4_spec::{Arch, Dtype, Features, MaskKind};
        let plain = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
        // A plain kernel ignores the feature fields.
        let junk = FwdParams {
            window_left: -7,
            softcap: f32::NAN,
            ..good()
        };
        assert_eq!(check_problem_for(&plain, &junk), Ok(()));

        let local = KernelSpec {
            mask: MaskKind::Local,
            ..plain
        };
        let p = FwdParams {
            window_left: 128,
            window_right: 0,
            ..good()
        };
        assert_eq!(check_problem_for(&local, &p), Ok(()));
        let msg = check_problem_for(
            &local,
            &FwdParams {
                window_right: -2,
                ..p
            },
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("window (128, -2)"), "{msg}");

        let softcap = KernelSpec {
            features: Features {
                sinks: false,
                softcap: true,
                ..Default::default()
            },
            ..plain
        };
        assert!(check_problem_for(
            &softcap,
            &FwdParams {
                softcap: 50.0,
                ..good()
            }
        )
        .is_ok());
        let msg = check_problem_for(&softcap, &good())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("softcap 0 is not a finite positive number"),
            "{msg}"
        );

        let sinks = KernelSpec {
            features: Features {
                sinks: true,
                softcap: false,
                ..Default::default()
            },
            ..plain
        };
        assert_eq!(
            check_problem_for(&sinks, &good()),
            Err(ProblemError::Null { tensor: "sinks" })
        );
        let msg = check_problem_for(
            &sinks,
            &FwdParams {
                sinks: 0x6002,
                ..good()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("sinks at 0x6002 is not 4-byte aligned"),
            "{msg}"
        );
        assert!(check_problem_for(
            &sinks,
            &FwdParams {
                sinks: 0x6000,
                ..good()
            }
        )
        .is_ok());
    }

    #[test]
    fn varlen_and_paged_arguments_are_checked() {
        use fa4_spec::{Arch, Dtype, MaskKind};
        // Varlen index arrays are optional, but aligned when given.
        let varlen = FwdParams {
            cu_seqlens_q: 0x7000,
            cu_seqlens_k: 0x7100,
            seqused_k: 0x7200,
            ..good()
        };
        assert_eq!(check_problem(&varlen), Ok(()));
        let msg = check_problem(&FwdParams {
            cu_seqlens_q: 0x7002,
            ..varlen
        })
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("cu_seqlens_q at 0x7002 is not 4-byte aligned"),
            "{msg}"
        );

        let dense = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
        let paged = KernelSpec {
            features: "paged".parse().unwrap(),
            ..dense
        };
        // seqlen_k 100 in pages of 16 keys: 7 pages per sequence at least.
        let p = FwdParams {
            page_table: 0x8000,
            page_table_batch_stride: 7,
            page_size: 16,
            seqused_k: 0x7200,
            ..good()
        };
        assert_eq!(check_problem_for(&paged, &p), Ok(()));
        let msg = check_problem_for(
            &paged,
            &FwdParams {
                page_table_batch_stride: 6,
                ..p
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("page_table_batch_stride must be at least"),
            "{msg}"
        );
        assert_eq!(
            check_problem_for(&paged, &FwdParams { page_size: 0, ..p }),
            Err(ProblemError::PageSize(0))
        );
        assert_eq!(
            check_problem_for(&paged, &FwdParams { page_table: 0, ..p }),
            Err(ProblemError::Null {
                tensor: "page_table"
            })
        );
        let msg = check_problem_for(
            &paged,
            &FwdParams {
                cu_seqlens_k: 0x7100,
                ..p
            },
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("seqused_k"), "{msg}");
        // A page table handed to a kernel that would ignore it is an error, not a
        // silent dense read.
        let msg = check_problem_for(&dense, &p).unwrap_err().to_string();
        assert!(msg.contains("paged feature"), "{msg}");
    }

    /// A kernel of 128 threads over `block_m` rows, one block per tile.
    fn plain_footprint(block_m: u32) -> Footprint {
        Footprint {
            threads: 128,
            block_m,
            smem_bytes: 0,
            est_registers: 0,
            pack_gqa: false,
            tma_rows: 0,
            persistent_per_sm: 0,
            section_key_bytes: 0,
            causal_m_blocks_in_y: false,
            split_head_dim_v: 0,
            cluster_m: 0,
        }
    }

    #[test]
    fn grids_cover_every_row() {
        let fp = plain_footprint(128);
        // 100 queries, 8 query heads on 2 KV heads, 2 sequences.
        assert_eq!(
            launch_grid(MaskKind::None, &fp, &good(), 132).unwrap(),
            Some((1, 8, 2))
        );
        let long = FwdParams {
            seqlen_q: 129,
            ..good()
        };
        assert_eq!(
            launch_grid(MaskKind::None, &fp, &long, 132).unwrap(),
            Some((2, 8, 2))
        );
        // Pack-GQA: 4 query heads per KV head make 400 rows per KV head.
        let packed = Footprint {
            pack_gqa: true,
            ..fp
        };
        assert_eq!(
            launch_grid(MaskKind::None, &packed, &good(), 132).unwrap(),
            Some((4, 2, 2))
        );
        // Nothing to compute: no launch.
        let empty = FwdParams {
            seqlen_q: 0,
            ..good()
        };
        assert_eq!(launch_grid(MaskKind::None, &fp, &empty, 132).unwrap(), None);
        // Clusters of two blocks along m: the m-blocks rounded up to pairs (the second
        // block of the last pair past the rows), the rest alike.
        let pairs = Footprint { cluster_m: 2, ..fp };
        assert_eq!(
            launch_grid(MaskKind::None, &pairs, &good(), 132).unwrap(),
            Some((2, 8, 2))
        );
        let three = FwdParams {
            seqlen_q: 257,
            ..good()
        };
        assert_eq!(
            launch_grid(MaskKind::None, &fp, &three, 132).unwrap(),
            Some((3, 8, 2))
        );
        assert_eq!(
            launch_grid(MaskKind::None, &pairs, &three, 132).unwrap(),
            Some((4, 8, 2))
        );
        assert_eq!(
            launch_grid(MaskKind::None, &pairs, &long, 132).unwrap(),
            Some((2, 8, 2))
        );
        assert_eq!(
            launch_grid(MaskKind::None, &pairs, &empty, 132).unwrap(),
            None
        );
        // Persistent: the work tiles (m-blocks x heads x sequences) in one dimension, at
        // most persistent_per_sm blocks per SM.
        let persistent = Footprint {
            persistent_per_sm: 1,
            ..fp
        };
        assert_eq!(
            launch_grid(MaskKind::None, &persistent, &good(), 132).unwrap(),
            Some((16, 1, 1))
        );
        assert_eq!(
            launch_grid(MaskKind::None, &persistent, &good(), 10).unwrap(),
            Some((10, 1, 1))
        );
        assert_eq!(
            launch_grid(MaskKind::None, &persistent, &empty, 132).unwrap(),
            None
        );
        // Causal: as many blocks as make a section of whole pairs exactly two rounds.
        let causal = |seqlen_q, heads_q, sm_count| {
            let p = FwdParams {
                seqlen_q,
                heads_q,
                heads_kv: heads_q,
                batch: 8,
                ..good()
            };
            launch_grid(MaskKind::Causal, &persistent, &p, sm_count)
                .unwrap()
                .unwrap()
                .0
        };
        // 16 m-blocks: sections of 16 pairs (256 tiles) over 128 of 132 SMs.
        assert_eq!(causal(2048, 32, 132), 128);
        // 4 m-blocks: 66 pairs, every SM.
        assert_eq!(causal(512, 32, 132), 132);
        // 128 m-blocks: 2 pairs per section.
        assert_eq!(causal(16384, 32, 132), 128);
        // 5 m-blocks (odd sections): 52 pairs of 5 tiles, 130 blocks; the kernel's
        // ceil(2 * 130 / 5) gives back 52.
        assert_eq!(causal(640, 32, 132), 130);
        assert_eq!((2 * 130u32).div_ceil(5), 52);
        // One m-block: every block, as unmasked.
        assert_eq!(causal(100, 32, 132), 132);
        // Never more blocks than tiles: one head of one sequence has 16.
        let one = FwdParams {
            seqlen_q: 2048,
            heads_q: 1,
            heads_kv: 1,
            batch: 1,
            ..good()
        };
        assert_eq!(
            launch_grid(MaskKind::Causal, &persistent, &one, 132).unwrap(),
            Some((16, 1, 1))
        );
        assert_eq!(
            launch_grid(MaskKind::None, &fp, &FwdParams { batch: 0, ..good() }, 132).unwrap(),
            None
        );
    }

    /// `grid_tile` of `schedule.cuh` for a causal grid in sections, block by block in
    /// launch order: (batch, head, m-block), or None for a spare block (no rows).
    fn sectioned_tiles(
        grid: (u32, u32, u32),
        p: &FwdParams,
        pack_gqa: bool,
        block_m: u32,
    ) -> Vec<Option<(i32, i32, i32)>> {
        let (heads, m_blocks) = tile_shape(p, pack_gqa, block_m);
        let mut out = Vec::new();
        for y in 0..grid.1 as i32 {
            for x in 0..grid.0 as i32 {
                let section_pairs = grid.0 as i32 / m_blocks;
                let first_pair = y * section_pairs;
                let n_pairs = section_pairs.min(heads * p.batch - first_pair);
                if x >= n_pairs * m_blocks {
                    out.push(None);
                    continue;
                }
                let pair = first_pair + x % n_pairs;
                out.push(Some((
                    pair / heads,
                    pair % heads,
                    m_blocks - 1 - x / n_pairs,
                )));
            }
        }
        out
    }

    /// (heads of the grid, m-blocks per pair): KV heads over all their query heads' rows
    /// with pack-GQA, as the kernel counts them.
    fn tile_shape(p: &FwdParams, pack_gqa: bool, block_m: u32) -> (i32, i32) {
        let (heads, rows) = if pack_gqa {
            (p.heads_kv, p.seqlen_q * (p.heads_q / p.heads_kv))
        } else {
            (p.heads_q, p.seqlen_q)
        };
        (heads, (rows as u32).div_ceil(block_m) as i32)
    }

    /// A causal d128 bf16 Hopper kernel of one block per 128-row tile.
    fn sectioned_footprint() -> Footprint {
        Footprint {
            threads: 384,
            block_m: 128,
            smem_bytes: 0,
            est_registers: 0,
            pack_gqa: false,
            tma_rows: 128,
            persistent_per_sm: 0,
            section_key_bytes: 2 * (128 + 128),
            causal_m_blocks_in_y: false,
            split_head_dim_v: 0,
            cluster_m: 0,
        }
    }

    #[test]
    fn causal_grids_in_sections_cover_every_tile_once_heaviest_first() {
        let fp = sectioned_footprint();
        let cases = [
            // (seqlen, heads_q, heads_kv, batch, pack_gqa)
            (512, 16, 16, 32, false), // the FA3 grid at d128: 512 pairs of 4 m-blocks
            (4096, 16, 16, 4, false), // 64 pairs of 32
            (16384, 16, 16, 1, false), // 128 m-blocks fill most of a wave: pair by pair
            (1000, 7, 7, 3, false),   // 21 pairs, ragged rows
            (777, 32, 8, 5, false),   // GQA
            (777, 32, 8, 5, true),    // packed GQA: 8 x 5 pairs of 4 x 777 rows
            (100, 1, 1, 1, false),    // one tile
            (300, 3, 1, 67, false),   // 201 pairs: sections evened, a spare pair or none
        ];
        for (seqlen, heads_q, heads_kv, batch, pack_gqa) in cases {
            let p = FwdParams {
                seqlen_q: seqlen,
                seqlen_k: seqlen,
                heads_q,
                heads_kv,
                batch,
                ..good()
            };
            let fp = Footprint { pack_gqa, ..fp };
            let grid = launch_grid(MaskKind::Causal, &fp, &p, 132)
                .unwrap()
                .unwrap();
            assert_eq!(grid.2, 1, "{grid:?}");
            let tiles = sectioned_tiles(grid, &p, pack_gqa, fp.block_m);
            let (heads, m_blocks) = tile_shape(&p, pack_gqa, fp.block_m);
            let mut seen = std::collections::BTreeSet::new();
            for t in tiles.iter().flatten() {
                assert!(seen.insert(*t), "tile {t:?} twice in {grid:?}");
                assert!(t.0 < batch && t.1 < heads && (0..m_blocks).contains(&t.2));
            }
            assert_eq!(seen.len() as i32, batch * heads * m_blocks, "{grid:?}");
            // Spare blocks are fewer than one per section and m-block.
            let spare = tiles.iter().filter(|t| t.is_none()).count() as u32;
            assert!(
                spare < grid.1 * m_blocks as u32,
                "{spare} spare blocks in {grid:?}"
            );
            // Within a section no tile comes before a heavier one.
            for section in tiles.chunks(grid.0 as usize) {
                let ms: Vec<i32> = section.iter().flatten().map(|t| t.2).collect();
                assert!(ms.windows(2).all(|w| w[0] >= w[1]), "{ms:?}");
            }
        }
        // Unmasked kernels and kernels without sections keep (m-blocks, heads, batch).
        let p = FwdParams {
            seqlen_q: 512,
            seqlen_k: 512,
            ..good()
        };
        assert_eq!(
            launch_grid(MaskKind::None, &fp, &p, 132).unwrap(),
            Some((4, 8, 2))
        );
        let plain = Footprint {
            section_key_bytes: 0,
            causal_m_blocks_in_y: false,
            split_head_dim_v: 0,
            ..fp
        };
        assert_eq!(
            launch_grid(MaskKind::Causal, &plain, &p, 132).unwrap(),
            Some((4, 8, 2))
        );
    }

    #[test]
    fn causal_grids_with_m_blocks_in_y_cover_every_tile_once_heaviest_first() {
        let fp = Footprint {
            causal_m_blocks_in_y: true,
            split_head_dim_v: 0,
            ..plain_footprint(64)
        };
        for (seqlen, heads_q, batch) in [(512, 8, 32), (4096, 16, 4), (1000, 7, 3), (100, 1, 1)] {
            let p = FwdParams {
                seqlen_q: seqlen,
                seqlen_k: seqlen,
                heads_q,
                heads_kv: 1,
                batch,
                ..good()
            };
            let grid = launch_grid(MaskKind::Causal, &fp, &p, 132)
                .unwrap()
                .unwrap();
            let m_blocks = (seqlen as u32).div_ceil(64);
            assert_eq!(grid, (heads_q as u32, m_blocks, batch as u32));
            // The kernel's decode in launch order (x fastest): head x, m-block y reversed,
            // sequence z. Every tile once; within a sequence never a lighter one first.
            let mut seen = std::collections::BTreeSet::new();
            let mut last = (-1, u32::MAX);
            for z in 0..grid.2 {
                for y in 0..grid.1 {
                    for x in 0..grid.0 {
                        let m_block = grid.1 - 1 - y;
                        assert!(seen.insert((z, x, m_block)));
                        assert!(last.0 != z as i32 || m_block <= last.1, "{grid:?}");
                        last = (z as i32, m_block);
                    }
                }
            }
            assert_eq!(seen.len() as u32, grid.0 * grid.1 * grid.2);
        }
        // Pack-GQA, unmasked and local grids keep (m-blocks, heads, batch).
        let p = FwdParams {
            seqlen_q: 512,
            seqlen_k: 512,
            ..good()
        };
        let packed = Footprint {
            pack_gqa: true,
            causal_m_blocks_in_y: false,
            split_head_dim_v: 0,
            ..fp
        };
        assert_eq!(
            launch_grid(MaskKind::Causal, &packed, &p, 132).unwrap(),
            Some((32, 2, 2))
        );
        assert_eq!(
            launch_grid(MaskKind::None, &fp, &p, 132).unwrap(),
            Some((8, 8, 2))
        );
        assert_eq!(
            launch_grid(MaskKind::Local, &fp, &p, 132).unwrap(),
            Some((8, 8, 2))
        );
        // y stops at 65535 m-blocks: longer sequences are refused before launch, with the
        // way to split them.
        let long = FwdParams {
            seqlen_q: 65535 * 64 + 1,
            ..p
        };
        let msg = launch_grid(MaskKind::Causal, &fp, &long, 132)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("seqlen_q is 4194241") && msg.contains("split the queries"),
            "{msg}"
        );
        launch_grid(MaskKind::Causal, &packed, &long, 132).unwrap();
        launch_grid(MaskKind::None, &fp, &long, 132).unwrap();
    }

    #[test]
    fn causal_sections_hold_few_pairs_whose_kv_fits_in_l2() {
        const MIB: u64 = 1 << 20;
        // 16 pairs at most, evened: 512 pairs of 128 KiB go in 32 sections of 16.
        assert_eq!(causal_section_pairs(512, 4, MIB / 8, 1, 132), 16);
        // 20 pairs: two sections of 10, not 16 and 4.
        assert_eq!(causal_section_pairs(20, 4, MIB / 8, 1, 132), 10);
        // K/V of 8 MiB per pair: 4 fit in 32 MiB; query heads sharing a KV head count once.
        assert_eq!(causal_section_pairs(64, 64, 8 * MIB, 1, 132), 4);
        assert_eq!(causal_section_pairs(64, 64, 8 * MIB, 4, 132), 16);
        // A pair larger than the budget still makes a section of one.
        assert_eq!(causal_section_pairs(8, 64, 64 * MIB, 1, 132), 1);
        // A pair whose m-blocks fill 7/8 of a wave or more goes alone.
        assert_eq!(causal_section_pairs(16, 128, MIB, 1, 132), 1);
        assert_eq!(causal_section_pairs(16, 115, MIB, 1, 132), 16);
        assert_eq!(causal_section_pairs(1, 4, MIB, 1, 132), 1);
        // Past 65535 sections the grid takes more pairs per section.
        let p = FwdParams {
            seqlen_q: 128,
            seqlen_k: 128,
            heads_q: 64,
            heads_kv: 64,
            batch: 40000,
            ..good()
        };
        let (x, y, z) = launch_grid(MaskKind::Causal, &sectioned_footprint(), &p, 132)
            .unwrap()
            .unwrap();
        assert!(y <= 65535 && z == 1, "{x} {y} {z}");
        assert!(u64::from(x) * u64::from(y) >= 64 * 40000);
    }

    #[test]
    fn empty_problems_need_no_pointers() {
        let p = FwdParams {
            batch: 0,
            q: 0,
            k: 0,
            v: 0,
            o: 0,
            lse: 0,
            ..good()
        };
        assert_eq!(check_problem(&p), Ok(()));
        // Queries without keys: the output is still written (zeros, LSE -inf).
        let p = FwdParams {
            seqlen_k: 0,
            k: 0,
            v: 0,
            ..good()
        };
        assert_eq!(check_problem(&p), Ok(()));
    }

    #[test]
    fn a_split_workspace_is_checked_before_the_launch() {
        let need = max_split_workspace_bytes(132);
        let good_ws = SplitWorkspace {
            ptr: 0x20_0000,
            bytes: need,
        };
        assert_eq!(check_split_workspace(Some(good_ws), 132), Ok(Some(good_ws)));
        // None, or a null pointer (the C ABI's "none"), is no workspace at all.
        assert_eq!(check_split_workspace(None, 132), Ok(None));
        let null = SplitWorkspace { ptr: 0, bytes: 0 };
        assert_eq!(check_split_workspace(Some(null), 132), Ok(None));
        // Misaligned: named, with the alignment it needs.
        let odd = SplitWorkspace {
            ptr: 0x20_0080,
            ..good_ws
        };
        let e = check_split_workspace(Some(odd), 132).unwrap_err();
        assert_eq!(
            e,
            ProblemError::Misaligned {
                tensor: "split workspace",
                addr: 0x20_0080,
                align: 256
            }
        );
        // Too small for the largest kernel: an error that says what to allocate, even
        // where this shape's kernel would not split (it would fail on the next shape).
        let small = SplitWorkspace {
            bytes: need - 256,
            ..good_ws
        };
        let msg = check_split_workspace(Some(small), 132)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains(&format!("{} bytes", need - 256))
                && msg.contains("fa4gen_split_workspace_bytes(132)"),
            "{msg}"
        );
        // A device with more SMs needs more.
        assert!(check_split_workspace(Some(good_ws), 144).is_err());
    }

    #[test]
    fn the_split_tail_takes_long_dense_unmasked_grids_with_idle_blocks_in_the_last_round() {
        // d128, 128-row persistent tiles, one block per SM: the FA3 grid's 16 heads at 16k
        // tokens are 2048 tiles, 15 whole rounds of 132 and 68 over.
        let fp = Footprint {
            threads: 384,
            block_m: 128,
            smem_bytes: 0,
            est_registers: 168,
            pack_gqa: false,
            tma_rows: 128,
            persistent_per_sm: 1,
            section_key_bytes: 0,
            causal_m_blocks_in_y: false,
            split_head_dim_v: 128,
            cluster_m: 0,
        };
        let p = FwdParams {
            batch: 1,
            seqlen_q: 16384,
            seqlen_k: 16384,
            heads_q: 16,
            heads_kv: 16,
            ..good()
        };
        let need = split_workspace_bytes(132, 128, 128);
        // counters, then 132 slots x 2 pieces x 2 consumers x 128 threads x (64 + 2) floats
        assert_eq!(need, 4096 + 132 * 2 * 2 * 128 * 66 * 4);
        assert!(need <= max_split_workspace_bytes(132));
        let full = SplitWorkspace {
            ptr: 0x10_0000,
            bytes: need,
        };
        let ws = Some(full);
        // The last round's 68 tiles and one round more.
        assert_eq!(split_tail(&fp, &p, 132, ws), 132 + 68);
        // Not without a workspace, nor with one too small or misaligned.
        assert_eq!(split_tail(&fp, &p, 132, None), 0);
        let small = SplitWorkspace {
            bytes: need - 1,
            ..full
        };
        assert_eq!(split_tail(&fp, &p, 132, Some(small)), 0);
        let odd = SplitWorkspace {
            ptr: 0x10_0010,
            ..full
        };
        assert_eq!(split_tail(&fp, &p, 132, Some(odd)), 0);
        // Not for kernels built without it, nor O wider than 128 columns.
        for split_head_dim_v in [0, 256] {
            let other = Footprint {
                split_head_dim_v,
                ..fp
            };
            assert_eq!(split_tail(&other, &p, 132, ws), 0);
        }
        // Not for varlen batches, whose tiles see different keys.
        let varlen = FwdParams {
            cu_seqlens_q: 0x8000,
            ..p
        };
        assert_eq!(split_tail(&fp, &varlen, 132, ws), 0);
        // Not under SPLIT_MIN_KEYS keys.
        let short = FwdParams {
            seqlen_k: SPLIT_MIN_KEYS - 1,
            ..p
        };
        assert_eq!(split_tail(&fp, &short, 132, ws), 0);
        // Not when the rounds come out even (2112 tiles), nor when fewer than an eighth
        // of the blocks would idle (2048 tiles over 137 blocks: 130 in the last round).
        let even = FwdParams {
            heads_q: 33,
            heads_kv: 33,
            ..p
        };
        assert_eq!(split_tail(&fp, &even, 132, ws), 0);
        let big = SplitWorkspace {
            bytes: max_split_workspace_bytes(137),
            ..full
        };
        assert_eq!(split_tail(&fp, &p, 137, Some(big)), 0);
        // Nor with no more tiles than blocks.
        let few = FwdParams {
            heads_q: 1,
            heads_kv: 1,
            ..p
        };
        assert_eq!(split_tail(&fp, &few, 132, ws), 0);

        // The TMA argument block takes the decision and, only with a split, the workspace.
        // SAFETY: TmaFwdParams is plain integers, for which zero bits are a value.
        let mut arg: TmaFwdParams = unsafe { std::mem::zeroed() };
        arg.fwd = p;
        arg.set_split_tail(&fp, 132, ws);
        assert_eq!((arg.split_tail, arg.split_workspace), (132 + 68, 0x10_0000));
        arg.set_split_tail(&fp, 132, None);
        assert_eq!((arg.split_tail, arg.split_workspace), (0, 0));
        arg.fwd = short;
        arg.set_split_tail(&fp, 132, ws);
        assert_eq!((arg.split_tail, arg.split_workspace), (0, 0));
    }
}
