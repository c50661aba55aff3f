//! The host-side checks of a launch: a bad argument is named before it reaches the
//! device.

use fa4_spec::{Dtype, FwdParams, KernelSpec};

use crate::tma::Descales;

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
    #[error("{what} = {value} elements is not a multiple of {multiple} (16 bytes): the kernels load 16 bytes at a time")]
    Stride {
        what: &'static str,
        value: i64,
        multiple: i64,
    },
    #[error("{what} = {value} elements is odd: e4m3 kernels read Q, K and V in pairs of elements, so their strides must be even; lay the tensor out with even strides (pad its rows)")]
    OddStride { what: &'static str, value: i64 },
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

/// The host-side checks of a forward launch on 16-bit tensors (bf16, fp16): shapes,
/// pointers, alignment, strides.
pub fn check_problem(p: &FwdParams) -> Result<(), ProblemError> {
    check_problem_as(Dtype::Bf16, p)
}

/// The checks of [`check_problem`] for Q, K and V of `dtype` (and O of `dtype.output()`):
/// each stride a whole number of 16-byte steps.
pub fn check_problem_as(dtype: Dtype, p: &FwdParams) -> Result<(), ProblemError> {
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
    // Elements per 16 bytes: of the inputs for Q, K and V, of the output for O.
    let (input, output) = (
        16 / i64::from(dtype.size()),
        16 / i64::from(dtype.output().size()),
    );
    let strides = [
        ("q_batch_stride", p.q_batch_stride, input),
        ("q_row_stride", p.q_row_stride, input),
        ("q_head_stride", p.q_head_stride, input),
        ("k_batch_stride", p.k_batch_stride, input),
        ("k_row_stride", p.k_row_stride, input),
        ("k_head_stride", p.k_head_stride, input),
        ("v_batch_stride", p.v_batch_stride, input),
        ("v_row_stride", p.v_row_stride, input),
        ("v_head_stride", p.v_head_stride, input),
        ("o_batch_stride", p.o_batch_stride, output),
        ("o_row_stride", p.o_row_stride, output),
        ("o_head_stride", p.o_head_stride, output),
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
    for (what, value, multiple) in strides {
        if value % multiple != 0 {
            return Err(ProblemError::Stride {
                what,
                value,
                multiple,
            });
        }
        at_least(what, value, 0)?;
    }
    Ok(())
}

/// The checks of FP8 descales: each pointer set 4-byte aligned (f32), the strides not
/// negative; none set for a 16-bit kernel, which would not read them.
pub fn check_descales(dtype: Dtype, d: &Descales) -> Result<(), ProblemError> {
    let pointers = [("q_descale", d.q), ("k_descale", d.k), ("v_descale", d.v)];
    if !dtype.is_fp8() {
        return match pointers.iter().find(|(_, addr)| *addr != 0) {
            Some(&(what, _)) => Err(ProblemError::Unexpected(
                what,
                "descales scale e4m3 inputs; bf16 and fp16 kernels take none",
            )),
            None => Ok(()),
        };
    }
    for (tensor, addr) in pointers {
        if addr % 4 != 0 {
            return Err(ProblemError::Misaligned {
                tensor,
                addr,
                align: 4,
            });
        }
    }
    for (what, value) in [
        ("descale_batch_stride", d.batch_stride),
        ("descale_head_stride", d.head_stride),
    ] {
        if value < 0 {
            return Err(ProblemError::TooSmall {
                what,
                value,
                min: 0,
            });
        }
    }
    Ok(())
}

/// The arguments as a kernel of `dtype` reads them, from the caller's (strides in
/// elements; already checked). e4m3 kernels move Q, K and V as pairs of bytes, so they
/// take those strides in 2-byte units: halved, and an odd one refused, never rounded (a
/// pair would straddle two rows). O's strides count `dtype.output()` elements and LSE's
/// floats, as given. Every launch of a kernel passes what this returns.
pub fn kernel_params(dtype: Dtype, p: &FwdParams) -> Result<FwdParams, ProblemError> {
    match dtype {
        Dtype::Bf16 | Dtype::Fp16 => Ok(*p),
        Dtype::E4m3 => {
            let half = |what, value: i64| {
                if value % 2 != 0 {
                    Err(ProblemError::OddStride { what, value })
                } else {
                    Ok(value / 2)
                }
            };
            Ok(FwdParams {
                q_batch_stride: half("q_batch_stride", p.q_batch_stride)?,
                q_row_stride: half("q_row_stride", p.q_row_stride)?,
                q_head_stride: half("q_head_stride", p.q_head_stride)?,
                k_batch_stride: half("k_batch_stride", p.k_batch_stride)?,
                k_row_stride: half("k_row_stride", p.k_row_stride)?,
                k_head_stride: half("k_head_stride", p.k_head_stride)?,
                v_batch_stride: half("v_batch_stride", p.v_batch_stride)?,
                v_row_stride: half("v_row_stride", p.v_row_stride)?,
                v_head_stride: half("v_head_stride", p.v_head_stride)?,
                ..*p
            })
        }
    }
}

/// The checks of [`check_problem_as`] for the spec's dtype plus those of its mask and
/// score features: a window for local masks, a cap for softcap kernels, sink logits for
/// sink kernels.
pub fn check_problem_for(spec: &KernelSpec, p: &FwdParams) -> Result<(), ProblemError> {
    check_problem_as(spec.dtype, p)?;
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
