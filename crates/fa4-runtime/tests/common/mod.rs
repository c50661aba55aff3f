//! What the runtime's tests share.

use fa4_spec::FwdParams;

/// A well-formed problem: 2 sequences of 100 tokens, 8 query heads over 2 KV heads, d128.
pub fn good() -> FwdParams {
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
