//! Tensor maps for the kernels that load Q/K/V by TMA (the Hopper template's
//! warp-specialised producer): encoded on the host for each call and passed by value
//! after the common parameters, as `fa4::hopper::TmaFwdParams` lays them out.

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
    split_reserved: i32,
    pub q_map: [u64; 16],
    pub k_map: [u64; 16],
    pub v_map: [u64; 16],
    pub o_map: [u64; 16],
}

const _: () = assert!(std::mem::size_of::<TmaFwdParams>() == 768);
const _: () = assert!(std::mem::offset_of!(TmaFwdParams, q_map) == 256);

/// Rows of Q (and O) per box: one consumer warpgroup's.
const Q_BOX_ROWS: u32 = 64;

/// One Q, K, V or O tensor as TMA sees it: [batch, rows, heads, head_dim], strides in
/// elements.
struct Tensor {
    ptr: u64,
    head_dim: u32,
    row_stride: i64,
    head_stride: i64,
    batch_stride: i64,
}

impl TmaFwdParams {
    /// Encodes the maps over Q, K, V and O for `params` (already checked by
    /// `check_problem_for`): boxes of 64 columns (one 128-byte swizzle row) by 64 query
    /// rows or `box_rows` keys. A packed varlen batch is one batch of `batch * max_seqlen`
    /// rows at most; the kernels only ask for whole boxes inside a sequence by TMA (the Q
    /// and O rows and the key tile past a sequence's end go by cp.async and plain
    /// stores), so the row bound never clips a copy and none leaves the tensors.
    pub fn encode(spec: &KernelSpec, params: &FwdParams, box_rows: u32) -> Result<Self, CUresult> {
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
        let q = Tensor {
            ptr: params.q,
            head_dim: spec.head_dim,
            row_stride: params.q_row_stride,
            head_stride: params.q_head_stride,
            batch_stride: params.q_batch_stride,
        };
        let k = Tensor {
            ptr: params.k,
            head_dim: spec.head_dim,
            row_stride: params.k_row_stride,
            head_stride: params.k_head_stride,
            batch_stride: params.k_batch_stride,
        };
        let v = Tensor {
            ptr: params.v,
            head_dim: spec.head_dim_v,
            row_stride: params.v_row_stride,
            head_stride: params.v_head_stride,
            batch_stride: params.v_batch_stride,
        };
        let o = Tensor {
            ptr: params.o,
            head_dim: spec.head_dim_v,
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
        Ok(TmaFwdParams {
            fwd: *params,
            split_workspace: 0,
            split_tail: 0,
            split_reserved: 0,
            q_map: encode_map(spec.dtype, &q, dims_q, Q_BOX_ROWS)?,
            k_map: encode_map(spec.dtype, &k, dims_kv, box_rows)?,
            v_map: encode_map(spec.dtype, &v, dims_kv, box_rows)?,
            o_map: encode_map(spec.dtype, &o, dims_q, Q_BOX_ROWS)?,
        })
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

fn encode_map(
    dtype: Dtype,
    t: &Tensor,
    (rows, heads, batches): (u64, u64, u64),
    box_rows: u32,
) -> Result<[u64; 16], CUresult> {
    let bytes = |stride: i64, dim: u64| {
        // A dimension of one is never stepped: any legal stride will do for it.
        if dim == 1 || stride <= 0 {
            (t.row_stride.max(8) * 2) as u64
        } else {
            (stride * 2) as u64
        }
    };
    let dims = [u64::from(t.head_dim), rows, heads, batches];
    let strides = [
        bytes(t.row_stride, rows),
        bytes(t.head_stride, heads),
        bytes(t.batch_stride, batches),
    ];
    let boxes = [64u32, box_rows, 1, 1];
    let element_strides = [1u32; 4];
    let data_type = match dtype {
        Dtype::Bf16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        Dtype::Fp16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    };
    let mut map = std::mem::MaybeUninit::<CUtensorMap>::zeroed();
    // SAFETY: every array holds the rank's entries (strides rank - 1); the driver only
    // writes the map. No device memory is touched: the address is recorded, not read.
    let result = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            data_type,
            4,
            t.ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
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
