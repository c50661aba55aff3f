use super::*;
use crate::checks::kernel_params;
use fa4_spec::{Arch, MaskKind};
use std::mem::{align_of, offset_of, size_of};

use CUtensorMapDataType::{
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 as BF16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16 as F16,
    CU_TENSOR_MAP_DATA_TYPE_UINT16 as U16,
};

#[test]
fn argument_blocks_are_laid_out_as_tma_cuh_reads_them() {
    assert_eq!(
        (size_of::<TmaFwdParams>(), align_of::<TmaFwdParams>()),
        (768, 64)
    );
    assert_eq!(offset_of!(TmaFwdParams, split_workspace), 240);
    assert_eq!(offset_of!(TmaFwdParams, split_tail), 248);
    assert_eq!(offset_of!(TmaFwdParams, page_box_rows), 252);
    assert_eq!(
        (size_of::<Fp8TmaFwdParams>(), align_of::<Fp8TmaFwdParams>()),
        (832, 64)
    );
    assert_eq!(offset_of!(Fp8TmaFwdParams, tma), 0);
    assert_eq!(offset_of!(Fp8TmaFwdParams, descale), 768);
    assert_eq!(size_of::<Descales>(), 40);
    assert_eq!(
        [
            offset_of!(Descales, q),
            offset_of!(Descales, k),
            offset_of!(Descales, v),
            offset_of!(Descales, batch_stride),
            offset_of!(Descales, head_stride),
        ],
        [0, 8, 16, 24, 32]
    );
}

/// A dense batch of 3 sequences of 100 queries and 300 keys, 8 query heads on 2 KV heads,
/// laid out [batch, seqlen, heads, d] with `pad` extra elements per token row; element
/// strides, as a caller passes them.
fn dense(d: i64, pad: i64) -> FwdParams {
    let (hq, hkv, sq, sk) = (8, 2, 100, 300);
    FwdParams {
        q: 0x10000,
        k: 0x20000,
        v: 0x30000,
        o: 0x40000,
        q_batch_stride: sq * (hq * d + pad),
        q_row_stride: hq * d + pad,
        q_head_stride: d,
        k_batch_stride: sk * (hkv * d + pad),
        k_row_stride: hkv * d + pad,
        k_head_stride: d,
        v_batch_stride: sk * (hkv * d + pad),
        v_row_stride: hkv * d + pad,
        v_head_stride: d,
        o_batch_stride: sq * hq * d,
        o_row_stride: hq * d,
        o_head_stride: d,
        batch: 3,
        seqlen_q: sq as i32,
        seqlen_k: sk as i32,
        heads_q: hq as i32,
        heads_kv: hkv as i32,
        ..FwdParams::default()
    }
}

#[test]
fn e4m3_inputs_are_mapped_as_16_bit_pairs_and_o_as_bf16() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::E4m3, 128, MaskKind::Causal);
    let caller = dense(128, 32);
    let [q, k, v, o] = map_layouts(&spec, &kernel_params(spec.dtype, &caller).unwrap(), 128);
    // Q, K, V: 64 columns of 2 bytes per head row; the byte strides are the caller's
    // element strides, since an e4m3 element is a byte.
    assert_eq!(q.data_type, U16);
    assert_eq!(q.ptr, 0x10000);
    assert_eq!(q.dims, [64, 100, 8, 3]);
    assert_eq!(q.strides, [1056, 128, 100 * 1056]);
    assert_eq!(q.boxes, [64, 64, 1, 1]);
    for (m, ptr) in [(k, 0x20000), (v, 0x30000)] {
        assert_eq!((m.data_type, m.ptr), (U16, ptr));
        assert_eq!(m.dims, [64, 300, 2, 3]);
        assert_eq!(m.strides, [288, 128, 300 * 288]);
        assert_eq!(m.boxes, [64, 128, 1, 1]);
    }
    // O: bf16, the real head dim, its strides 2 bytes an element.
    assert_eq!(o.data_type, BF16);
    assert_eq!(o.dims, [128, 100, 8, 3]);
    assert_eq!(o.strides, [2048, 256, 100 * 2048]);
    assert_eq!(o.boxes, [64, 64, 1, 1]);

    // d64: 32 columns; the 64-column box runs past them (TMA zero-fills).
    let d64 = KernelSpec::new(Arch::Sm90, Dtype::E4m3, 64, MaskKind::None);
    let [q, _, v, o] = map_layouts(&d64, &kernel_params(d64.dtype, &dense(64, 0)).unwrap(), 64);
    assert_eq!((q.dims[0], v.dims[0], o.dims[0]), (32, 32, 64));
    assert_eq!((q.boxes[0], v.boxes[0]), (64, 64));
    assert_eq!(q.strides[..2], [512, 64]);
}

#[test]
fn sixteen_bit_inputs_keep_their_own_maps() {
    let caller = dense(128, 32);
    for (dtype, data_type) in [(Dtype::Bf16, BF16), (Dtype::Fp16, F16)] {
        let spec = KernelSpec::new(Arch::Sm90, dtype, 128, MaskKind::Causal);
        let params = kernel_params(dtype, &caller).unwrap();
        assert_eq!(params, caller, "16-bit kernels read the caller's strides");
        let [q, k, _, o] = map_layouts(&spec, &params, 176);
        assert_eq!(
            (q.data_type, k.data_type, o.data_type),
            (data_type, data_type, data_type)
        );
        assert_eq!(q.dims, [128, 100, 8, 3]);
        assert_eq!(q.strides, [2112, 256, 100 * 2112]);
        assert_eq!(k.dims, [128, 300, 2, 3]);
        assert_eq!(k.boxes, [64, 176, 1, 1]);
        assert_eq!(o.dims, [128, 100, 8, 3]);
    }
}

#[test]
fn a_packed_batch_is_one_batch_of_rows() {
    let spec = KernelSpec::new(Arch::Sm90, Dtype::E4m3, 128, MaskKind::Causal);
    let caller = FwdParams {
        cu_seqlens_q: 0x9000,
        cu_seqlens_k: 0x9100,
        q_batch_stride: 0,
        k_batch_stride: 0,
        v_batch_stride: 0,
        o_batch_stride: 0,
        ..dense(128, 0)
    };
    let [q, k, _, o] = map_layouts(&spec, &kernel_params(spec.dtype, &caller).unwrap(), 128);
    assert_eq!(q.dims, [64, 300, 8, 1]);
    assert_eq!(k.dims, [64, 900, 2, 1]);
    assert_eq!(o.dims, [128, 300, 8, 1]);
    // The batch dimension is never stepped: a legal stride stands in for the 0.
    assert_eq!(q.strides[2], q.strides[0]);
}

/// A paged e4m3 kernel whose pages fit no box (pages of one key here; a kernel of a cache
/// built before paged kernels had maps, `box_rows` 0) gathers K/V by copies and reads no
/// map: its block carries the parameters and the descales with the maps zeroed and no
/// page boxes, and encoding it asks the driver for nothing (this test runs without one).
#[test]
fn a_paged_e4m3_kernel_gets_its_parameters_and_descales_without_maps() {
    let spec = KernelSpec {
        features: "paged".parse().unwrap(),
        ..KernelSpec::new(Arch::Sm90, Dtype::E4m3, 128, MaskKind::Causal)
    };
    let params = kernel_params(
        spec.dtype,
        &FwdParams {
            page_size: 1,
            ..dense(128, 0)
        },
    )
    .unwrap();
    let descale = Descales {
        q: 0x50000,
        k: 0x60000,
        v: 0x70000,
        batch_stride: 2,
        head_stride: 1,
    };
    for box_rows in [0, 128] {
        let block = Fp8TmaFwdParams::encode(&spec, &params, box_rows, descale).unwrap();
        assert_eq!(block.tma.fwd, params);
        assert_eq!(block.descale, descale);
        assert_eq!(
            (
                block.tma.split_workspace,
                block.tma.split_tail,
                block.tma.page_box_rows
            ),
            (0, 0, 0)
        );
        for map in [
            block.tma.q_map,
            block.tma.k_map,
            block.tma.v_map,
            block.tma.o_map,
        ] {
            assert_eq!(map, [0; 16]);
        }
    }
}

/// A box over pages never crosses a page and lands on whole swizzle atoms: a tile's
/// slice of a page that holds whole tiles, a whole page of a tile that holds whole pages
/// of 8 rows or more, else none (copies).
#[test]
fn page_boxes_are_a_page_or_a_tile_and_never_cross_a_page() {
    // vLLM's 16-key blocks, SGLang's pages of 1, FA3's 256-key pages, sizes between
    for (page, block_n, rows) in [
        (16, 64, Some(16)),
        (16, 128, Some(16)),
        (16, 176, Some(16)),
        (32, 64, Some(32)),
        (8, 128, Some(8)),
        (64, 64, Some(64)),
        (256, 64, Some(64)),
        (256, 128, Some(128)),
        (256, 192, None),
        (128, 192, None),
        (1, 128, None),
        (4, 64, None),
        (24, 64, None),
        (48, 96, Some(48)),
        (40, 80, Some(40)),
        (0, 64, None),
        (-16, 64, None),
    ] {
        assert_eq!(
            page_box_rows(page, block_n),
            rows,
            "pages of {page}, tiles of {block_n}"
        );
        if let Some(r) = rows {
            assert_eq!(block_n % r, 0);
            assert_eq!(page as u32 % r, 0);
            assert_eq!(r % 8, 0);
            assert!(block_n / r <= 32, "one lane of the first warp per box");
        }
    }
}

/// The maps over a paged cache: FlashAttention's (num_pages, page_size, heads_kv, d) with
/// any strides, as [columns, a page's rows, heads, pages] in boxes of the page rows; e4m3
/// as 16-bit pairs, the pages bounded by what an i32 page id reaches.
#[test]
fn paged_caches_are_mapped_page_by_page() {
    let (page, hkv, d, pad) = (16i64, 2i64, 128i64, 64i64);
    let caller = FwdParams {
        k_row_stride: hkv * d + pad,
        k_head_stride: d,
        k_batch_stride: page * (hkv * d + pad),
        v_row_stride: hkv * d,
        v_head_stride: d,
        v_batch_stride: page * hkv * d + 512,
        page_table: 0x80000,
        page_table_batch_stride: 40,
        page_size: page as i32,
        ..dense(d, 0)
    };
    for (dtype, data_type, per_column, bytes) in
        [(Dtype::Bf16, BF16, 1, 2), (Dtype::E4m3, U16, 2, 1)]
    {
        let spec = KernelSpec {
            features: "paged".parse().unwrap(),
            ..KernelSpec::new(Arch::Sm90, dtype, d as u32, MaskKind::Causal)
        };
        let params = kernel_params(dtype, &caller).unwrap();
        let [k, v] = page_map_layouts(&spec, &params, 16);
        assert_eq!((k.data_type, k.ptr, v.ptr), (data_type, 0x20000, 0x30000));
        let columns = (d / per_column) as u64;
        assert_eq!(k.dims, [columns, 16, 2, PAGES_BOUND]);
        assert_eq!(v.dims, k.dims);
        let b = |elements: i64| (elements * bytes) as u64;
        assert_eq!(
            k.strides,
            [b(hkv * d + pad), b(d), b(page * (hkv * d + pad))]
        );
        assert_eq!(v.strides, [b(hkv * d), b(d), b(page * hkv * d + 512)]);
        assert_eq!(k.boxes, [64, 16, 1, 1]);
    }
}
