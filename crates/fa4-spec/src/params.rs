/// The argument block of every forward kernel, passed by value as its one parameter.
///
/// Mirrored by `struct FwdParams` in `templates/include/fa4/common/params.cuh`; both
/// sides assert the same size, and a test checks the offsets the device side expects.
///
/// Layout of the tensors (FlashAttention's): Q is `[batch, seqlen_q, heads_q, head_dim]`,
/// K is `[batch, seqlen_k, heads_kv, head_dim]`, V is `[batch, seqlen_k, heads_kv,
/// head_dim_v]`, O is like Q with `head_dim_v`, each with arbitrary batch, row (token) and
/// head strides counted in elements; the last dim is contiguous. LSE is f32
/// `[batch, heads_q, seqlen_q]` with its own batch and head strides. Query head `h` reads
/// KV head `h / (heads_q / heads_kv)` (GQA/MQA without repeating K and V).
///
/// Varlen batches (FlashAttention's `flash_attn_varlen_func`), read by every kernel:
/// - `cu_seqlens_q` set: Q and O are packed `[total_q, heads, d]`, sequence `b` owns
///   rows `cu_seqlens_q[b] .. cu_seqlens_q[b+1]`, `seqlen_q` is the longest sequence
///   (`max_seqlen_q`, it sizes the grid) and the batch strides are ignored; LSE is
///   `[heads_q, total_q]`: the LSE of row `t` is at `head * lse_head_stride + t`.
/// - `cu_seqlens_k` set: K and V are packed the same way; `seqlen_k` is `max_seqlen_k`.
/// - `seqused_k` set: sequence `b` uses only its first `seqused_k[b]` keys.
///
/// Paged kernels (`features.paged_kv`) read K and V as `[num_pages, page_size,
/// heads_kv, d]` (`k/v_batch_stride` is the page stride): key `j` of sequence `b` is row
/// `j % page_size` of page `page_table[b * page_table_batch_stride + j / page_size]`.
/// Sequence `b` has `seqused_k[b]` keys (SGLang's `cache_seqlens`), clamped to what its
/// page-table row can address.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FwdParams {
    /// Device pointers.
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,

    /// Strides in elements.
    pub q_batch_stride: i64,
    pub q_row_stride: i64,
    pub q_head_stride: i64,
    pub k_batch_stride: i64,
    pub k_row_stride: i64,
    pub k_head_stride: i64,
    pub v_batch_stride: i64,
    pub v_row_stride: i64,
    pub v_head_stride: i64,
    pub o_batch_stride: i64,
    pub o_row_stride: i64,
    pub o_head_stride: i64,

    pub batch: i32,
    pub seqlen_q: i32,
    pub seqlen_k: i32,
    pub heads_q: i32,
    pub heads_kv: i32,
    /// Multiplies QKᵀ before the softmax.
    pub softmax_scale: f32,
    /// `softmax_scale * log2(e)`: the kernels compute `exp2`, one FFMA per element.
    pub scale_log2: f32,
    /// Sliding window (local masks only): keys visible to a query reach `window_left`
    /// before and `window_right` after its diagonal; -1 leaves that side unbounded.
    pub window_left: i32,
    pub window_right: i32,
    /// Soft-capping value (softcap kernels only): scores become `cap * tanh(s / cap)`.
    pub softcap: f32,
    /// f32 `[heads_q]` sink logits (sink kernels only).
    pub sinks: u64,

    /// i32 `[batch + 1]` prefix sums of query lengths, or 0 for a dense batch.
    pub cu_seqlens_q: u64,
    /// i32 `[batch + 1]` prefix sums of key lengths, or 0 for a dense batch.
    pub cu_seqlens_k: u64,
    /// i32 `[batch]` keys used per sequence, or 0 (all of them).
    pub seqused_k: u64,
    /// i32 page ids (paged kernels only), `page_table_batch_stride` per sequence.
    pub page_table: u64,
    /// LSE strides in elements (the batch stride is unused with `cu_seqlens_q`).
    pub lse_batch_stride: i64,
    pub lse_head_stride: i64,
    pub page_table_batch_stride: i32,
    /// Keys per page (paged kernels only), 1 to 256 or more.
    pub page_size: i32,
}

impl FwdParams {
    /// Size in bytes; `params.cuh` asserts the same number.
    pub const SIZE: usize = 240;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn layout_matches_device_mirror() {
        // The offsets params.cuh relies on (a static_assert there checks the size).
        assert_eq!(size_of::<FwdParams>(), FwdParams::SIZE);
        assert_eq!(align_of::<FwdParams>(), 8);
        assert_eq!(offset_of!(FwdParams, lse), 32);
        assert_eq!(offset_of!(FwdParams, q_batch_stride), 40);
        assert_eq!(offset_of!(FwdParams, o_head_stride), 128);
        assert_eq!(offset_of!(FwdParams, batch), 136);
        assert_eq!(offset_of!(FwdParams, softmax_scale), 156);
        assert_eq!(offset_of!(FwdParams, scale_log2), 160);
        assert_eq!(offset_of!(FwdParams, window_left), 164);
        assert_eq!(offset_of!(FwdParams, softcap), 172);
        assert_eq!(offset_of!(FwdParams, sinks), 176);
        assert_eq!(offset_of!(FwdParams, cu_seqlens_q), 184);
        assert_eq!(offset_of!(FwdParams, page_table), 208);
        assert_eq!(offset_of!(FwdParams, lse_batch_stride), 216);
        assert_eq!(offset_of!(FwdParams, lse_head_stride), 224);
        assert_eq!(offset_of!(FwdParams, page_table_batch_stride), 232);
        assert_eq!(offset_of!(FwdParams, page_size), 236);
    }
}
