/// The argument block of every forward kernel, passed by value as its one parameter.
///
/// Mirrored by `struct FwdParams` in `templates/include/fa4/common/params.cuh`; both
/// sides assert the same size, and a test checks the offsets the device side expects.
///
/// Layout of the tensors (FlashAttention's): Q is `[batch, seqlen_q, heads_q, head_dim]`,
/// K is `[batch, seqlen_k, heads_kv, head_dim]`, V is `[batch, seqlen_k, heads_kv,
/// head_dim_v]`, O is like Q with `head_dim_v`, each with arbitrary batch, row (token) and
/// head strides counted in elements; the last dim is contiguous. LSE is f32
/// `[batch, heads_q, seqlen_q]`, contiguous. Query head `h` reads KV head
/// `h / (heads_q / heads_kv)` (GQA/MQA without repeating K and V).
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
}

impl FwdParams {
    /// Size in bytes; `params.cuh` asserts the same number.
    pub const SIZE: usize = 184;
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
    }
}
