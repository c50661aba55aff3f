//! Attention problems on the device, laid out the way serving engines hand them over.
//!
//! A [`Case`] describes a problem's shape: a dense batch (`[batch, seqlen, heads, d]`) or
//! a varlen one (sequences of their own lengths packed with `cu_seqlens`, FlashAttention's
//! varlen layout), GQA/MQA heads, padded token rows, a window and a cap. A [`Problem`]
//! is that case on the GPU for one kernel spec: random inputs, K/V dense or behind a page
//! table (paged kernels), e4m3 inputs with their descales, and the kernel arguments
//! pointing into it. `verify` checks kernels on problems, `bench` times them.

use cudarc::driver::CudaSlice;
use fa4_spec::{fnv1a64, Dtype, FwdParams, KernelSpec, MaskKind};
use serde::Serialize;

use crate::measure::gpu::{Gpu, GpuError, LaunchArgs};
use crate::measure::support::{Channels, Support};
use fa4_runtime::{max_split_workspace_bytes, Descales, SplitWorkspace};

/// How an e4m3 problem's inputs are drawn; 16-bit problems ignore it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fp8Inputs {
    /// N(0,1) quantised to e4m3, descales random in [0.5, 2] per (sequence, KV head).
    #[default]
    Normal,
    /// The same with a few channels of K and V 20 times larger
    /// (`support::OUTLIER_SCALE`): large scores and values next to small ones.
    Outliers,
    /// N(0,1) with null descale pointers, which the kernels read as 1.0.
    NullDescales,
}

impl Fp8Inputs {
    fn is_normal(&self) -> bool {
        *self == Fp8Inputs::Normal
    }
}

/// One problem shape.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    pub name: String,
    /// Sequences in the batch.
    pub batch: i32,
    /// Queries (keys) per sequence; for a varlen batch the longest sequence's
    /// (`max_seqlen_q`, `max_seqlen_k`).
    pub seqlen_q: i32,
    pub seqlen_k: i32,
    pub heads_q: i32,
    pub heads_kv: i32,
    /// Extra elements at the end of every token row of Q, K, V and O (a strided layout).
    pub row_pad: i64,
    /// Sliding window (left, right) for local-mask kernels (-1: unbounded).
    pub window: (i32, i32),
    /// Soft-capping value for softcap kernels.
    pub softcap: f32,
    /// Also time this case.
    pub timed: bool,
    /// A varlen batch: (queries, keys) of each sequence, packed with `cu_seqlens`.
    /// Empty for a dense batch.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub seqlens: Vec<(i32, i32)>,
    /// Keys per page when the kernel reads K/V through a page table.
    pub page_size: i32,
    /// How inputs are drawn when the kernel takes e4m3.
    #[serde(skip_serializing_if = "Fp8Inputs::is_normal")]
    pub fp8: Fp8Inputs,
}

/// A small cap, so that tanh bends most scores of random inputs.
pub const DEFAULT_SOFTCAP: f32 = 1.5;
/// Keys per page where a case does not choose.
pub const DEFAULT_PAGE_SIZE: i32 = 16;

impl Case {
    /// A dense batch of `batch` sequences of `seqlen_q` queries and `seqlen_k` keys.
    pub fn new(
        name: &str,
        batch: i32,
        seqlen_q: i32,
        seqlen_k: i32,
        heads_q: i32,
        heads_kv: i32,
    ) -> Self {
        Case {
            name: name.to_string(),
            batch,
            seqlen_q,
            seqlen_k,
            heads_q,
            heads_kv,
            row_pad: 0,
            window: (-1, -1),
            softcap: DEFAULT_SOFTCAP,
            timed: false,
            seqlens: Vec::new(),
            page_size: DEFAULT_PAGE_SIZE,
            fp8: Fp8Inputs::Normal,
        }
    }

    /// A varlen batch: one (queries, keys) pair per sequence; lengths may be 0.
    pub fn varlen(name: &str, seqlens: &[(i32, i32)], heads_q: i32, heads_kv: i32) -> Self {
        let max = |f: fn(&(i32, i32)) -> i32| seqlens.iter().map(f).max().unwrap_or(0);
        Case {
            seqlens: seqlens.to_vec(),
            ..Case::new(
                name,
                seqlens.len() as i32,
                max(|s| s.0),
                max(|s| s.1),
                heads_q,
                heads_kv,
            )
        }
    }

    pub fn window(self, left: i32, right: i32) -> Self {
        Case {
            window: (left, right),
            ..self
        }
    }

    pub fn page_size(self, page_size: i32) -> Self {
        Case { page_size, ..self }
    }

    pub fn softcap(self, softcap: f32) -> Self {
        Case { softcap, ..self }
    }

    pub fn fp8(self, fp8: Fp8Inputs) -> Self {
        Case { fp8, ..self }
    }

    pub fn is_varlen(&self) -> bool {
        !self.seqlens.is_empty()
    }

    /// (queries, keys) of every sequence.
    pub fn sequences(&self) -> Vec<(i32, i32)> {
        if self.is_varlen() {
            self.seqlens.clone()
        } else {
            vec![(self.seqlen_q, self.seqlen_k); self.batch.max(0) as usize]
        }
    }

    /// Query rows in Q and O: `batch * seqlen_q`, or the varlen total.
    pub fn total_q(&self) -> i64 {
        self.sequences().iter().map(|s| i64::from(s.0)).sum()
    }

    /// (query, key) pairs the mask leaves visible, summed over rows and sequences.
    pub fn visible_pairs(&self, mask: MaskKind) -> f64 {
        let (left, right) = (i64::from(self.window.0), i64::from(self.window.1));
        let per_seq = |(sq, sk): (i32, i32)| -> i64 {
            let (sq, sk) = (i64::from(sq), i64::from(sk));
            let per_row = |i: i64| -> i64 {
                let diag = i + sk - sq;
                let (lo, hi) = match mask {
                    MaskKind::None => (0, sk),
                    MaskKind::Causal => (0, (diag + 1).clamp(0, sk)),
                    MaskKind::Local => (
                        if left < 0 {
                            0
                        } else {
                            (diag - left).clamp(0, sk)
                        },
                        if right < 0 {
                            sk
                        } else {
                            (diag + right + 1).clamp(0, sk)
                        },
                    ),
                };
                (hi - lo).max(0)
            };
            (0..sq).map(per_row).sum()
        };
        self.sequences().into_iter().map(per_seq).sum::<i64>() as f64
    }
}

/// FLOPs by FlashAttention's convention: 2·h·s_q·s_k·(d + d_v) per sequence, halved when
/// causal (the exact count of visible pairs differs slightly for s_q != s_k; the
/// convention keeps figures comparable with every peer's). A sliding window counts the
/// pairs it leaves: the work a kernel must do, not the square it skips.
pub fn attention_flops(spec: &KernelSpec, case: &Case) -> f64 {
    let per_pair = 2.0 * (spec.head_dim + spec.head_dim_v) as f64 * case.heads_q as f64;
    let square: f64 = case
        .sequences()
        .iter()
        .map(|&(q, k)| q as f64 * k as f64)
        .sum();
    match spec.mask {
        MaskKind::None => square * per_pair,
        MaskKind::Causal => square * per_pair / 2.0,
        MaskKind::Local => case.visible_pairs(MaskKind::Local) * per_pair,
    }
}

/// How a problem's output is laid out, for the comparison kernels.
#[derive(Debug, Clone, Copy)]
pub struct OutputLayout {
    /// Token rows of O (all sequences).
    pub rows: u64,
    /// Elements from one token row of O to the next.
    pub row_stride: u64,
    /// Logical elements per token row: heads_q x head_dim_v.
    pub row_elems: u64,
    /// Elements allocated for O (rows plus a tail guard).
    pub o_alloc: u64,
    /// Logical LSE entries (heads_q x rows) and the allocation with its tail guard.
    pub lse_logical: u64,
    pub lse_alloc: u64,
}

/// Elements past the end of O and LSE that must stay untouched.
pub const TAIL_GUARD: usize = 4096;

/// One case's tensors on the device for one spec. `params` (and `descale`) point into
/// the buffers, so they are valid for as long as this value lives.
pub struct Problem {
    /// Q, K and V in the spec's dtype and O in its output dtype (`Dtype::output`), as
    /// bytes: the kernels take raw pointers.
    pub q: CudaSlice<u8>,
    pub k: CudaSlice<u8>,
    pub v: CudaSlice<u8>,
    pub o: CudaSlice<u8>,
    pub lse: CudaSlice<f32>,
    pub o_ref: Option<CudaSlice<f32>>,
    _sinks: CudaSlice<f32>,
    _index_arrays: Vec<CudaSlice<i32>>,
    /// The descales of e4m3 inputs ([batch, heads_kv] each), which `descale` points at.
    _descales: Vec<CudaSlice<f32>>,
    /// The split tail's workspace, zeroed, for specs whose persistent kernels may split
    /// (`gpu::split_tail`); every launch leaves its counters zero again.
    pub split_workspace: Option<CudaSlice<u8>>,
    /// The same, as launches take it.
    pub split: Option<SplitWorkspace>,
    /// Element strides, as a caller passes them (e4m3 bytes too).
    pub params: FwdParams,
    /// An e4m3 spec's descales; all zero for 16-bit specs.
    pub descale: Descales,
    pub layout: OutputLayout,
}

impl Problem {
    /// Allocates and fills the case's tensors for `spec` (random normal Q/K/V from
    /// `seed`, quantised to e4m3 with descales for e4m3 specs as `case.fp8` says; sink
    /// logits in [-2, 6]); O and LSE are left for the caller to fill.
    pub fn new(
        gpu: &Gpu,
        support: &Support,
        spec: &KernelSpec,
        case: &Case,
        seed: u64,
    ) -> Result<Self, GpuError> {
        let (d, dv) = (i64::from(spec.head_dim), i64::from(spec.head_dim_v));
        let (hq, hkv) = (i64::from(case.heads_q), i64::from(case.heads_kv));
        let seqs = case.sequences();
        let paged = spec.features.paged_kv;
        // FP8 rows of Q/K/V start on 16 bytes, as the kernels load them: the padding
        // rounds up to 16 elements there (a strided layout all the same).
        let row_pad = if spec.dtype.is_fp8() {
            (case.row_pad + 15) / 16 * 16
        } else {
            case.row_pad
        };
        let q_row = hq * d + row_pad;
        let k_row = hkv * d + row_pad;
        let v_row = hkv * dv + row_pad;
        let o_row = hq * dv + row_pad;
        let total_q = case.total_q();
        let mut index_arrays = Vec::new();
        let mut ptr_of = |data: Vec<i32>| -> Result<u64, GpuError> {
            let buf = gpu.to_device(&data)?;
            let ptr = gpu.ptr(&buf);
            index_arrays.push(buf);
            Ok(ptr)
        };

        // Key rows: dense [batch, seqlen_k], packed [total_k], or pages of page_size rows.
        let (key_rows, page_table) = if paged {
            let (rows, table) = page_layout(&seqs, case.page_size, seed);
            (rows, Some(table))
        } else {
            let keys: i64 = seqs.iter().map(|s| i64::from(s.1)).sum();
            (keys, None)
        };
        let (in_bytes, out_bytes) = (
            spec.dtype.size() as usize,
            spec.dtype.output().size() as usize,
        );
        let q = gpu.alloc::<u8>((total_q * q_row) as usize * in_bytes)?;
        let k = gpu.alloc::<u8>((key_rows * k_row) as usize * in_bytes)?;
        let v = gpu.alloc::<u8>((key_rows * v_row) as usize * in_bytes)?;
        let o_alloc = (total_q * o_row) as usize + TAIL_GUARD;
        let o = gpu.alloc::<u8>(o_alloc * out_bytes)?;
        let lse_logical = (total_q * hq) as usize;
        let lse = gpu.alloc::<f32>(lse_logical + TAIL_GUARD)?;
        let inputs = [
            (&q, q_row, d, false),
            (&k, k_row, d, true),
            (&v, v_row, dv, true),
        ];
        for (i, (buf, row_stride, head_dim, outliers)) in inputs.into_iter().enumerate() {
            let tensor_seed = seed ^ (0x1234_5678_9abc_def1u64.wrapping_mul(i as u64 + 1));
            match spec.dtype {
                Dtype::Bf16 | Dtype::Fp16 => {
                    support.fill_normal(gpu, buf, tensor_seed, spec.dtype == Dtype::Bf16)?
                }
                Dtype::E4m3 => support.fill_e4m3(
                    gpu,
                    buf,
                    tensor_seed,
                    Channels {
                        row_stride: row_stride as u64,
                        head_dim: head_dim as u32,
                    },
                    outliers && case.fp8 == Fp8Inputs::Outliers,
                )?,
            }
        }
        // Descales per (sequence, KV head) in [0.5, 2], log-uniform (as likely to halve
        // as to double), laid out as FlashAttention-3's [batch, heads_kv].
        let mut descales = Vec::new();
        let mut descale = Descales::default();
        if spec.dtype.is_fp8() && case.fp8 != Fp8Inputs::NullDescales {
            let per_tensor = (i64::from(case.batch.max(0)) * hkv) as usize;
            for (t, ptr) in
                ["q", "k", "v"]
                    .into_iter()
                    .zip([&mut descale.q, &mut descale.k, &mut descale.v])
            {
                let values: Vec<f32> = (0..per_tensor)
                    .map(|i| {
                        let u = (fnv1a64(format!("{seed}/descale/{t}/{i}").as_bytes()) >> 40)
                            as f32
                            / (1u64 << 24) as f32;
                        (2.0 * u - 1.0).exp2()
                    })
                    .collect();
                let buf = gpu.to_device(&values)?;
                *ptr = gpu.ptr(&buf);
                descales.push(buf);
            }
            (descale.batch_stride, descale.head_stride) = (hkv, 1);
        }
        // Sink logits in [-2, 6]: from below to well above the typical row max, so they
        // take anything from nothing to most of the denominator.
        let sink_values: Vec<f32> = (0..hq as u64)
            .map(|h| {
                -2.0 + 8.0
                    * ((fnv1a64(format!("{seed}/sink/{h}").as_bytes()) >> 40) as f32
                        / (1u64 << 24) as f32)
            })
            .collect();
        let sinks = gpu.to_device(&sink_values)?;

        let prefix = |f: fn(&(i32, i32)) -> i32| -> Vec<i32> {
            std::iter::once(0)
                .chain(seqs.iter().scan(0, |acc, s| {
                    *acc += f(s);
                    Some(*acc)
                }))
                .collect()
        };
        let (sq, sk) = (i64::from(case.seqlen_q), i64::from(case.seqlen_k));
        let mut params = FwdParams {
            q: gpu.ptr(&q),
            k: gpu.ptr(&k),
            v: gpu.ptr(&v),
            o: gpu.ptr(&o),
            lse: gpu.ptr(&lse),
            q_batch_stride: sq * q_row,
            q_row_stride: q_row,
            q_head_stride: d,
            k_batch_stride: sk * k_row,
            k_row_stride: k_row,
            k_head_stride: d,
            v_batch_stride: sk * v_row,
            v_row_stride: v_row,
            v_head_stride: dv,
            o_batch_stride: sq * o_row,
            o_row_stride: o_row,
            o_head_stride: dv,
            batch: case.batch,
            seqlen_q: case.seqlen_q,
            seqlen_k: case.seqlen_k,
            heads_q: case.heads_q,
            heads_kv: case.heads_kv,
            lse_batch_stride: hq * sq,
            lse_head_stride: sq,
            ..FwdParams::default()
        };
        set_scores(&mut params, spec, case);
        if spec.features.sinks {
            params.sinks = gpu.ptr(&sinks);
        }
        if case.is_varlen() {
            params.cu_seqlens_q = ptr_of(prefix(|s| s.0))?;
            params.lse_head_stride = total_q;
            (
                params.q_batch_stride,
                params.o_batch_stride,
                params.lse_batch_stride,
            ) = (0, 0, 0);
            if !paged {
                params.cu_seqlens_k = ptr_of(prefix(|s| s.1))?;
                (params.k_batch_stride, params.v_batch_stride) = (0, 0);
            }
        }
        if let Some(table) = page_table {
            params.page_table = ptr_of(table.entries)?;
            params.page_table_batch_stride = table.stride;
            params.page_size = case.page_size;
            params.seqused_k = ptr_of(seqs.iter().map(|s| s.1).collect())?;
            params.k_batch_stride = i64::from(case.page_size) * k_row;
            params.v_batch_stride = i64::from(case.page_size) * v_row;
        }
        // Sized for any kernel of the device, so one problem serves every config.
        let split_workspace = if spec.mask == MaskKind::None && !spec.features.sinks && !paged {
            let bytes = max_split_workspace_bytes(gpu.info.sm_count);
            Some(gpu.zeros::<u8>(bytes as usize)?)
        } else {
            None
        };
        let split = split_workspace.as_ref().map(|buf| SplitWorkspace {
            ptr: gpu.ptr(buf),
            bytes: buf.len() as u64,
        });
        Ok(Problem {
            split_workspace,
            split,
            q,
            k,
            v,
            o,
            lse,
            o_ref: None,
            _sinks: sinks,
            _index_arrays: index_arrays,
            _descales: descales,
            params,
            descale,
            layout: OutputLayout {
                rows: total_q as u64,
                row_stride: o_row as u64,
                row_elems: (hq * dv) as u64,
                o_alloc: o_alloc as u64,
                lse_logical: lse_logical as u64,
                lse_alloc: (lse_logical + TAIL_GUARD) as u64,
            },
        })
    }

    /// What a launch of a kernel on this problem reads.
    pub fn launch_args(&self) -> LaunchArgs {
        LaunchArgs {
            params: self.params,
            descale: self.descale,
            split: self.split,
        }
    }
}

/// Softmax scale 1/sqrt(head_dim); the window and the cap where the spec uses them.
fn set_scores(p: &mut FwdParams, spec: &KernelSpec, case: &Case) {
    let scale = 1.0 / (spec.head_dim as f32).sqrt();
    p.softmax_scale = scale;
    p.scale_log2 = scale * std::f32::consts::LOG2_E;
    (p.window_left, p.window_right) = if spec.mask == MaskKind::Local {
        case.window
    } else {
        (-1, -1)
    };
    p.softcap = if spec.features.softcap {
        case.softcap
    } else {
        0.0
    };
}

/// A page table over shuffled pages.
#[derive(Debug, Clone, PartialEq)]
pub struct PageLayout {
    /// `stride` page ids per sequence.
    pub entries: Vec<i32>,
    pub stride: i32,
}

/// Pages for sequences of the given key counts: each sequence gets the pages it needs
/// from a seeded shuffle of all pages (so neighbouring keys rarely share neighbouring
/// pages), plus two spare pages nobody owns. A row's unused entries point at a spare
/// page, so a kernel reading past a sequence's keys reads valid but wrong data, which the
/// comparison catches. Returns the key rows to allocate and the table.
pub fn page_layout(seqs: &[(i32, i32)], page_size: i32, seed: u64) -> (i64, PageLayout) {
    let page_size = page_size.max(1);
    let pages: Vec<i32> = seqs
        .iter()
        .map(|s| (s.1.max(0) + page_size - 1) / page_size)
        .collect();
    let stride = pages.iter().copied().max().unwrap_or(0) + 1;
    let total = pages.iter().sum::<i32>() + 2;
    // Fisher-Yates with a hash-derived stream: reproducible from the seed.
    let mut order: Vec<i32> = (0..total).collect();
    for i in (1..order.len()).rev() {
        let r = fnv1a64(format!("{seed}/page/{i}").as_bytes()) as usize % (i + 1);
        order.swap(i, r);
    }
    let spare = order[order.len() - 1];
    let mut next = order.iter().copied();
    let mut entries = Vec::with_capacity(seqs.len() * stride as usize);
    for &n in &pages {
        for j in 0..stride {
            entries.push(if j < n {
                next.next().expect("enough pages")
            } else {
                spare
            });
        }
    }
    (
        i64::from(total) * i64::from(page_size),
        PageLayout { entries, stride },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use fa4_spec::Arch;

    #[test]
    fn flops_follow_the_convention() {
        let spec = KernelSpec::new(Arch::Sm90, Dtype::Bf16, 128, MaskKind::None);
        let case = Case::new("x", 2, 1024, 1024, 16, 16);
        assert_eq!(
            attention_flops(&spec, &case),
            4.0 * 2.0 * 16.0 * 1024.0 * 1024.0 * 128.0
        );
        let causal = KernelSpec {
            mask: MaskKind::Causal,
            ..spec
        };
        assert_eq!(
            attention_flops(&causal, &case),
            attention_flops(&spec, &case) / 2.0
        );
        // The work does not depend on the inputs' dtype.
        let e4m3 = KernelSpec {
            dtype: Dtype::E4m3,
            ..spec
        };
        assert_eq!(attention_flops(&e4m3, &case), attention_flops(&spec, &case));
        // A varlen batch counts each sequence's own square.
        let ragged = Case::varlen("r", &[(1024, 1024), (0, 7), (10, 30)], 16, 4);
        assert_eq!(
            attention_flops(&spec, &ragged),
            4.0 * 16.0 * (1024.0 * 1024.0 + 300.0) * 128.0
        );
    }

    #[test]
    fn only_e4m3_variants_show_in_a_case() {
        let case = Case::new("x", 1, 4, 6, 1, 1);
        let json = serde_json::to_value(&case).unwrap();
        assert!(json.get("fp8").is_none(), "{json}");
        let json = serde_json::to_value(case.fp8(Fp8Inputs::NullDescales)).unwrap();
        assert_eq!(json["fp8"], "null_descales");
    }

    #[test]
    fn visible_pairs_follow_the_masks() {
        // 4 queries, 6 keys: the diagonal of query i is key i + 2.
        let case = Case::new("x", 1, 4, 6, 1, 1).window(1, 0);
        assert_eq!(case.visible_pairs(MaskKind::None), 24.0);
        assert_eq!(case.visible_pairs(MaskKind::Causal), (3 + 4 + 5 + 6) as f64);
        // Keys diag-1 ..= diag: two each.
        assert_eq!(case.visible_pairs(MaskKind::Local), 8.0);
        // More queries than keys with a window: early rows see nothing.
        let case = Case::new("y", 1, 6, 2, 1, 1).window(0, 0);
        assert_eq!(case.visible_pairs(MaskKind::Local), 2.0);
        let unbounded = Case::new("z", 1, 4, 6, 1, 1).window(-1, -1);
        assert_eq!(unbounded.visible_pairs(MaskKind::Local), 24.0);
        // Per sequence in a varlen batch.
        let ragged = Case::varlen("r", &[(4, 6), (0, 3), (2, 2)], 1, 1);
        assert_eq!(ragged.visible_pairs(MaskKind::Causal), 18.0 + 3.0);
        assert_eq!((ragged.batch, ragged.seqlen_q, ragged.seqlen_k), (3, 4, 6));
        assert_eq!(ragged.total_q(), 6);
    }

    #[test]
    fn page_tables_give_each_key_its_own_slot() {
        let seqs = [(5, 33), (1, 0), (2, 16), (9, 1)];
        for page_size in [1, 7, 16, 256] {
            let (rows, table) = page_layout(&seqs, page_size, 42);
            let mut slots = std::collections::BTreeSet::new();
            for (b, &(_, keys)) in seqs.iter().enumerate() {
                for j in 0..keys {
                    let page = table.entries[b * table.stride as usize + (j / page_size) as usize];
                    let slot = i64::from(page) * i64::from(page_size) + i64::from(j % page_size);
                    assert!(slot < rows, "key {j} of sequence {b} lands outside K");
                    assert!(slots.insert(slot), "two keys share slot {slot}");
                }
            }
            assert!(table
                .entries
                .iter()
                .all(|&p| p >= 0 && i64::from(p) * i64::from(page_size) < rows));
            assert_eq!(table.entries.len(), seqs.len() * table.stride as usize);
        }
        // Deterministic in the seed, and the seed matters.
        assert_eq!(page_layout(&seqs, 1, 7), page_layout(&seqs, 1, 7));
        assert_ne!(page_layout(&seqs, 1, 7), page_layout(&seqs, 1, 8));
    }
}
