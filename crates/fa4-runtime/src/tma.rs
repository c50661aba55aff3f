//! Tensor maps for the kernels that load Q/K/V by TMA (the Hopper template's
//! warp-specialised producer): encoded on the host for each call and passed by value
//! after the common parameters, as `fa4::hopper::TmaFwdParams` lays them out; e4m3
//! kernels take the same block followed by their descales (`Fp8TmaFwdParams`).

use cudarc::driver::sys::{
    self, CUresult, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill,
    CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use fa4_spec::{Dtype, Footprint, FwdParams, KernelSpec};

use crate::grid::{split_tail, SplitWorkspace};

/// The argument block of a TMA kernel.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy)]
pub struct TmaFwdParams {
    pub fwd: FwdParams,
    /// The split tail (`tma.cuh`'s SplitArgs, in what was padding before the maps): the
    /// workspace and the tiles whose keys the blocks share, 0 for none (`split_tail`).
    pub split_workspace: u64,
    pub split_tail: i32,
    /// Paged kernels: the rows of the K and V maps' boxes over the page pool
    /// ([`page_box_rows`]), 0 where the pages fit no box (every tile by copies).
    pub page_box_rows: i32,
    pub q_map: [u64; 16],
    pub k_map: [u64; 16],
    pub v_map: [u64; 16],
    pub o_map: [u64; 16],
}

const _: () = assert!(std::mem::size_of::<TmaFwdParams>() == 768);
const _: () = assert!(std::mem::offset_of!(TmaFwdParams, q_map) == 256);

/// The f32 factors that scale e4m3 Q, K and V back (FlashAttention-3's `q_descale`,
/// `k_descale`, `v_descale`): one per (sequence, KV head), at
/// `b * batch_stride + h_kv * head_stride`. A null pointer means 1.0. Mirrors
/// `fa4::hopper::Descales`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Descales {
    /// Device pointers to f32, or 0.
    pub q: u64,
    pub k: u64,
    pub v: u64,
    /// In floats: FA3's `(batch, heads_kv)` tensors have `heads_kv` and 1.
    pub batch_stride: i64,
    pub head_stride: i64,
}

const _: () = assert!(std::mem::size_of::<Descales>() == 40);

/// The argument block of an e4m3 kernel: the TMA block as for 16-bit kernels (its
/// `fwd` holding the strides `kernel_params` gives e4m3 kernels), then the descales.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy)]
pub struct Fp8TmaFwdParams {
    pub tma: TmaFwdParams,
    pub descale: Descales,
}

const _: () = assert!(std::mem::size_of::<Fp8TmaFwdParams>() == 832);
const _: () = assert!(std::mem::offset_of!(Fp8TmaFwdParams, descale) == 768);

/// Rows of Q (and O) per box: one consumer warpgroup's.
const Q_BOX_ROWS: u32 = 64;

/// The page count a map over the page pool is bounded by: the table's i32 page ids
/// reach no further, and the kernels read only pages the table names.
const PAGES_BOUND: u64 = i32::MAX as u64;

/// The rows of a TMA box over pages of `page_size` keys for key tiles of `block_n`: the
/// tile's rows of one page where pages hold whole tiles, else one whole page where a tile
/// holds whole pages of whole 128-byte swizzle atoms (8 rows), so that every box lands on
/// an atom. None: the kernel gathers every tile by copies (pages of fewer than 8 keys, or
/// sizes that cut a tile's rows across pages).
pub fn page_box_rows(page_size: i32, block_n: u32) -> Option<u32> {
    let page = u32::try_from(page_size).ok().filter(|&p| p > 0)?;
    if block_n == 0 {
        None
    } else if page % block_n == 0 {
        Some(block_n)
    } else if block_n % page == 0 && page % 8 == 0 {
        Some(page)
    } else {
        None
    }
}

/// One map's arguments to `cuTensorMapEncodeTiled`: a tensor of rank 4, innermost
/// dimension first ([columns, rows, heads, batches]), strides in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MapLayout {
    data_type: CUtensorMapDataType,
    ptr: u64,
    dims: [u64; 4],
    strides: [u64; 3],
    boxes: [u32; 4],
}

impl TmaFwdParams {
    /// Encodes the maps over Q, K, V and O for `params` (already checked by
    /// `check_problem_for`, then converted by `kernel_params`): boxes of 64 columns (one
    /// 128-byte swizzle row) by 64 query rows or `box_rows` keys. A packed varlen batch
    /// is one batch of `batch * max_seqlen` rows at most; the kernels only ask for whole
    /// boxes inside a sequence by TMA (the Q and O rows and the key tile past a
    /// sequence's end go by cp.async and plain stores), so the row bound never clips a
    /// copy and none leaves the tensors.
    ///
    /// Paged kernels (K/V through a page table, Q by copies, O by stores) get maps over
    /// the page pool for K and V alone, in boxes of [`page_box_rows`], or no maps where
    /// the pages fit no box or the driver declines the pool's layout: their kernels then
    /// gather every tile by copies, as they did before they had maps.
    pub fn encode(spec: &KernelSpec, params: &FwdParams, box_rows: u32) -> Result<Self, CUresult> {
        if spec.features.paged_kv {
            return Ok(Self::over_pages(spec, params, box_rows));
        }
        let [q, k, v, o] = map_layouts(spec, params, box_rows);
        Ok(TmaFwdParams {
            fwd: *params,
            split_workspace: 0,
            split_tail: 0,
            page_box_rows: 0,
            q_map: encode_map(&q)?,
            k_map: encode_map(&k)?,
            v_map: encode_map(&v)?,
            o_map: encode_map(&o)?,
        })
    }

    /// A paged kernel's block: the maps over the page pool for K and V where they encode.
    fn over_pages(spec: &KernelSpec, params: &FwdParams, block_n: u32) -> Self {
        let mut arg = Self::without_maps(params);
        let Some(rows) = page_box_rows(params.page_size, block_n) else {
            return arg;
        };
        let [k, v] = page_map_layouts(spec, params, rows);
        if let (Ok(k_map), Ok(v_map)) = (encode_map(&k), encode_map(&v)) {
            arg.k_map = k_map;
            arg.v_map = v_map;
            arg.page_box_rows = rows as i32;
        }
        arg
    }

    /// The block of a kernel that loads and stores nothing by TMA: `params` and zeroed
    /// maps (no split tail either).
    pub fn without_maps(params: &FwdParams) -> Self {
        TmaFwdParams {
            fwd: *params,
            split_workspace: 0,
            split_tail: 0,
            page_box_rows: 0,
            q_map: [0; 16],
            k_map: [0; 16],
            v_map: [0; 16],
            o_map: [0; 16],
        }
    }

    /// Hands a launch of `blocks` blocks the split tail `split_tail` decides for it, and
    /// the workspace with it; nothing where it does not split.
    pub fn set_split_tail(
        &mut self,
        footprint: &Footprint,
        blocks: u32,
        workspace: Option<SplitWorkspace>,
    ) {
        self.split_tail = split_tail(footprint, &self.fwd, blocks, workspace);
        self.split_workspace = match workspace {
            Some(ws) if self.split_tail > 0 => ws.ptr,
            _ => 0,
        };
    }
}

impl Fp8TmaFwdParams {
    /// The TMA block over `params` (what an e4m3 kernel reads: `kernel_params`), and the
    /// descales. Every e4m3 kernel takes this block; one that loads no key tile by TMA
    /// (`box_rows` 0: a paged kernel of a cache built before paged kernels had maps)
    /// reads no map, and gets none.
    pub fn encode(
        spec: &KernelSpec,
        params: &FwdParams,
        box_rows: u32,
        descale: Descales,
    ) -> Result<Self, CUresult> {
        Ok(Fp8TmaFwdParams {
            tma: if box_rows == 0 {
                TmaFwdParams::without_maps(params)
            } else {
                TmaFwdParams::encode(spec, params, box_rows)?
            },
            descale,
        })
    }
}

/// What a map over a tensor of `dtype` moves, and how many of the tensor's elements
/// make one of its columns. e4m3 data moves as 16-bit pairs, never converted: the
/// kernels' every load path is the 16-bit one. Every map's columns are thus 2 bytes,
/// and a 64-column box one 128-byte swizzle row.
fn map_data(dtype: Dtype) -> (CUtensorMapDataType, u32) {
    match dtype {
        Dtype::Bf16 => (CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 1),
        Dtype::Fp16 => (CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 1),
        Dtype::E4m3 => (CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16, 2),
    }
}

/// One Q, K, V or O tensor as TMA sees it: [batch, rows, heads, columns], strides in
/// its 16-bit columns.
struct Tensor {
    ptr: u64,
    columns: u32,
    row_stride: i64,
    head_stride: i64,
    batch_stride: i64,
}

impl Tensor {
    /// The map over `rows` x `heads` x `batches` of this tensor, in boxes of 64 columns by
    /// `box_rows` rows.
    fn layout(
        &self,
        data_type: CUtensorMapDataType,
        (rows, heads, batches): (u64, u64, u64),
        box_rows: u32,
    ) -> MapLayout {
        let bytes = |stride: i64, dim: u64| {
            // A dimension of one is never stepped: any legal stride will do for it.
            if dim == 1 || stride <= 0 {
                (self.row_stride.max(8) * 2) as u64
            } else {
                (stride * 2) as u64
            }
        };
        MapLayout {
            data_type,
            ptr: self.ptr,
            dims: [u64::from(self.columns), rows, heads, batches],
            strides: [
                bytes(self.row_stride, rows),
                bytes(self.head_stride, heads),
                bytes(self.batch_stride, batches),
            ],
            boxes: [64, box_rows, 1, 1],
        }
    }
}

/// The maps over Q, K, V and O, in that order, for `params` as the kernel reads them
/// (for e4m3 inputs, the halved strides of `kernel_params`). O is in `dtype.output()`.
fn map_layouts(spec: &KernelSpec, params: &FwdParams, box_rows: u32) -> [MapLayout; 4] {
    let packed = |cu_seqlens: u64, seqlen: i32| {
        let seqlen = i64::from(seqlen.max(1));
        if cu_seqlens != 0 {
            (i64::from(params.batch.max(1)) * seqlen, 1)
        } else {
            (seqlen, params.batch.max(1))
        }
    };
    let (rows_q, batches_q) = packed(params.cu_seqlens_q, params.seqlen_q);
    let (rows_k, batches_k) = packed(params.cu_seqlens_k, params.seqlen_k);
    let (input, per_column) = map_data(spec.dtype);
    let (output, _) = map_data(spec.dtype.output());
    let q = Tensor {
        ptr: params.q,
        columns: spec.head_dim / per_column,
        row_stride: params.q_row_stride,
        head_stride: params.q_head_stride,
        batch_stride: params.q_batch_stride,
    };
    let [k, v] = kv_tensors(spec, params);
    let o = Tensor {
        ptr: params.o,
        columns: spec.head_dim_v,
        row_stride: params.o_row_stride,
        head_stride: params.o_head_stride,
        batch_stride: params.o_batch_stride,
    };
    let dims_q = (
        rows_q as u64,
        params.heads_q.max(1) as u64,
        batches_q as u64,
    );
    let dims_kv = (
        rows_k as u64,
        params.heads_kv.max(1) as u64,
        batches_k as u64,
    );
    [
        q.layout(input, dims_q, Q_BOX_ROWS),
        k.layout(input, dims_kv, box_rows),
        v.layout(input, dims_kv, box_rows),
        o.layout(output, dims_q, Q_BOX_ROWS),
    ]
}

/// The maps over K's and V's page pools for a paged kernel (FlashAttention's
/// `(num_pages, page_size, heads_kv, head_dim)` caches, any strides): [columns, a page's
/// rows, heads, pages], the page stride being the batch stride `kernel_params` passes
/// paged kernels, in boxes of `box_rows` rows of one page.
fn page_map_layouts(spec: &KernelSpec, params: &FwdParams, box_rows: u32) -> [MapLayout; 2] {
    let (input, _) = map_data(spec.dtype);
    let dims = (
        params.page_size.max(1) as u64,
        params.heads_kv.max(1) as u64,
        PAGES_BOUND,
    );
    kv_tensors(spec, params).map(|t| t.layout(input, dims, box_rows))
}

/// K and V as TMA sees them, in their 16-bit columns: [batch (or page), rows, heads,
/// columns] with the caller's strides.
fn kv_tensors(spec: &KernelSpec, params: &FwdParams) -> [Tensor; 2] {
    let (_, per_column) = map_data(spec.dtype);
    [
        Tensor {
            ptr: params.k,
            columns: spec.head_dim / per_column,
            row_stride: params.k_row_stride,
            head_stride: params.k_head_stride,
            batch_stride: params.k_batch_stride,
        },
        Tensor {
            ptr: params.v,
            columns: spec.head_dim_v / per_column,
            row_stride: params.v_row_stride,
            head_stride: params.v_head_stride,
            batch_stride: params.v_batch_stride,
        },
    ]
}

fn encode_map(m: &MapLayout) -> Result<[u64; 16], CUresult> {
    let element_strides = [1u32; 4];
    let mut map = std::mem::MaybeUninit::<CUtensorMap>::zeroed();
    // SAFETY: every array holds the rank's entries (strides rank - 1); the driver only
    // writes the map. No device memory is touched: the address is recorded, not read.
    let result = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            m.data_type,
            4,
            m.ptr as *mut std::ffi::c_void,
            m.dims.as_ptr(),
            m.strides.as_ptr(),
            m.boxes.as_ptr(),
            element_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if result != CUresult::CUDA_SUCCESS {
        return Err(result);
    }
    // SAFETY: the driver filled the map.
    Ok(unsafe { map.assume_init() }.opaque)
}

#[cfg(test)]
mod tests;
