use super::*;
use fa4_spec::manifest::MANIFEST_FILE;

fn message() -> String {
    // SAFETY: fa4gen_last_error returns a NUL-terminated thread-local string.
    unsafe { CStr::from_ptr(fa4gen_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn d128(seqlen: u32) -> Fa4genQuery {
    Fa4genQuery {
        arch: 90,
        dtype: 0,
        head_dim: 128,
        head_dim_v: 128,
        mask: 1,
        features: 0,
        max_seqlen_q: seqlen,
        window_left: -1,
        window_right: -1,
        max_seqlen_k: 0,
    }
}

#[test]
fn the_query_carries_a_local_window_to_the_dispatcher() {
    let q = query(&Fa4genQuery {
        mask: 2,
        window_left: 1000,
        window_right: 0,
        ..d128(16384)
    })
    .unwrap();
    assert_eq!((q.mask, q.window), (MaskKind::Local, (1000, 0)));
    assert_eq!(
        fa4_spec::Bucket::of_call(q.mask, q.window, q.max_seqlen_q).seqlen,
        1024,
        "a window of 1000 keys is served by the width-1024 bucket"
    );
    // Over 512 keys (max_seqlen_k 0: as many as queries) the same window reaches past
    // every key: the lookup names the causal kernel that a prefill launches.
    let q = query(&Fa4genQuery {
        mask: 2,
        window_left: 1000,
        window_right: 0,
        ..d128(512)
    })
    .unwrap();
    assert_eq!((q.mask, q.window), (MaskKind::Causal, (-1, -1)));
    let q = query(&Fa4genQuery {
        mask: 2,
        window_left: 1000,
        window_right: 0,
        max_seqlen_k: 4096,
        ..d128(512)
    })
    .unwrap();
    assert_eq!((q.mask, q.window), (MaskKind::Local, (1000, 0)));
}

#[test]
fn the_c_abi_opens_selects_and_reports_errors() {
    let dir = tempfile::tempdir().unwrap();
    let m = crate::test_manifest::manifest();
    std::fs::write(
        dir.path().join(MANIFEST_FILE),
        serde_json::to_string(&m).unwrap(),
    )
    .unwrap();
    let path = CString::new(dir.path().to_str().unwrap()).unwrap();
    let mut cache: *mut Fa4genCache = std::ptr::null_mut();
    // SAFETY: valid pointers throughout; the handle is closed once at the end.
    unsafe {
        assert_eq!(fa4gen_cache_open(path.as_ptr(), &mut cache), FA4GEN_OK);
        let mut sel: Fa4genSelection = std::mem::zeroed();
        assert_eq!(fa4gen_select(cache, &d128(3000), &mut sel), FA4GEN_OK);
        let id = CStr::from_ptr(sel.kernel_id.as_ptr()).to_str().unwrap();
        assert_eq!(
            (id, sel.reason, sel.bucket, sel.is_default),
            ("b_d128_tuned", 0, 4096, 0)
        );
        assert!(sel.threads > 0 && sel.smem_bytes > 0 && sel.block_m > 0);

        // Unsupported problem, bad enum, null pointers: codes and messages.
        let q = Fa4genQuery {
            head_dim: 80,
            head_dim_v: 80,
            ..d128(512)
        };
        assert_eq!(fa4gen_select(cache, &q, &mut sel), FA4GEN_ERR_UNSUPPORTED);
        assert!(message().contains("head dim 80"), "{}", message());
        let q = Fa4genQuery {
            dtype: 7,
            ..d128(512)
        };
        assert_eq!(
            fa4gen_select(cache, &q, &mut sel),
            FA4GEN_ERR_INVALID_ARGUMENT
        );
        assert!(message().contains("dtype 7"), "{}", message());
        let q = Fa4genQuery {
            features: 16,
            ..d128(512)
        };
        assert_eq!(
            fa4gen_select(cache, &q, &mut sel),
            FA4GEN_ERR_INVALID_ARGUMENT
        );
        assert!(message().contains("features 0x10"), "{}", message());
        // Bit 3: a ragged varlen batch, served its bucket's ragged choice.
        let q = Fa4genQuery {
            features: 8,
            ..d128(3000)
        };
        assert_eq!(fa4gen_select(cache, &q, &mut sel), FA4GEN_OK);
        assert_eq!((sel.reason, sel.bucket), (4, 4096));
        assert_eq!(
            fa4gen_select(cache, std::ptr::null(), &mut sel),
            FA4GEN_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            fa4gen_select(std::ptr::null(), &d128(1), &mut sel),
            FA4GEN_ERR_INVALID_ARGUMENT
        );
        fa4gen_cache_close(cache);
        fa4gen_cache_close(std::ptr::null_mut());

        // A missing cache: an error code and the fix, no handle.
        let nowhere = CString::new("/nonexistent/fa4gen-cache").unwrap();
        let mut none: *mut Fa4genCache = std::ptr::null_mut();
        assert_eq!(
            fa4gen_cache_open(nowhere.as_ptr(), &mut none),
            FA4GEN_ERR_CACHE
        );
        assert!(none.is_null());
        assert!(message().contains("fa4-gen build-cache"), "{}", message());
        assert_eq!(
            fa4gen_cache_open(std::ptr::null(), &mut none),
            FA4GEN_ERR_INVALID_ARGUMENT
        );
        let v = CStr::from_ptr(fa4gen_version()).to_str().unwrap();
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
    }
}

#[test]
fn a_panic_becomes_an_error_code() {
    let code = guarded(|| panic!("boom"));
    assert_eq!(code, FA4GEN_ERR_INTERNAL);
    assert!(message().contains("boom"));
}

#[test]
fn dtype_code_2_is_e4m3() {
    assert_eq!(dtype(0), Ok(Dtype::Bf16));
    assert_eq!(dtype(1), Ok(Dtype::Fp16));
    assert_eq!(dtype(2), Ok(Dtype::E4m3));
    assert_eq!(
        dtype(3).unwrap_err(),
        "dtype 3 is not 0 (bf16), 1 (fp16) or 2 (e4m3)"
    );
    let q = query(&Fa4genQuery {
        dtype: 2,
        ..d128(4096)
    })
    .unwrap();
    assert_eq!(
        (q.dtype, q.head_dim, q.mask),
        (Dtype::E4m3, 128, MaskKind::Causal)
    );
}

#[test]
fn the_prefill_args_end_with_the_descales() {
    use std::mem::{offset_of, size_of};
    // What fa4gen.h (and tests/c/select.c) lay out.
    assert_eq!(offset_of!(Fa4genPrefillArgs, params), 16);
    assert_eq!(offset_of!(Fa4genPrefillArgs, split_workspace), 256);
    assert_eq!(offset_of!(Fa4genPrefillArgs, split_workspace_bytes), 264);
    assert_eq!(
        [
            offset_of!(Fa4genPrefillArgs, q_descale),
            offset_of!(Fa4genPrefillArgs, k_descale),
            offset_of!(Fa4genPrefillArgs, v_descale),
            offset_of!(Fa4genPrefillArgs, descale_batch_stride),
            offset_of!(Fa4genPrefillArgs, descale_head_stride),
        ],
        [272, 280, 288, 296, 304]
    );
    assert_eq!(size_of::<Fa4genPrefillArgs>(), 312);
}

/// The bytes of a prefill call's struct, packed as a C or Python caller packs it:
/// dtype, head dims, causal, FwdParams with `q` set, the split workspace, then (where
/// `descales`) the five descale fields.
fn packed_args(dtype: u32, descales: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    for v in [dtype, 128, 128, 1] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let params = FwdParams {
        q: 0x1000,
        softmax_scale: 0.125,
        ..FwdParams::default()
    };
    // SAFETY: FwdParams is #[repr(C)] plain old data without padding.
    bytes.extend_from_slice(unsafe {
        std::slice::from_raw_parts((&params as *const FwdParams).cast::<u8>(), 240)
    });
    for v in [0x2000u64, 4096] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    if descales {
        for v in [0x3000u64, 0x3100, 0x3200, 8, 1] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    bytes
}

#[test]
fn a_16_bit_call_is_read_without_the_descales() {
    // A bf16 caller of the earlier 272-byte struct, followed by bytes that are not its
    // own: none of them is read.
    let mut bytes = packed_args(0, false);
    assert_eq!(bytes.len(), 272);
    bytes.extend_from_slice(&[0xff; 40]);
    // SAFETY: 312 readable bytes; the function reads unaligned.
    let a = unsafe { read_prefill_args(bytes.as_ptr().cast()) };
    assert_eq!((a.dtype, a.head_dim, a.causal), (0, 128, 1));
    assert_eq!((a.params.q, a.params.softmax_scale), (0x1000, 0.125));
    assert_eq!((a.split_workspace, a.split_workspace_bytes), (0x2000, 4096));
    assert_eq!(
        (a.q_descale, a.k_descale, a.v_descale),
        (0, 0, 0),
        "a bf16 call's descales are not read"
    );
    assert_eq!((a.descale_batch_stride, a.descale_head_stride), (0, 0));

    // An e4m3 call: the whole struct, at any alignment.
    let mut bytes = vec![0u8];
    bytes.extend_from_slice(&packed_args(2, true));
    // SAFETY: 312 readable bytes from offset 1.
    let a = unsafe { read_prefill_args(bytes[1..].as_ptr().cast()) };
    assert_eq!((a.dtype, a.params.q), (2, 0x1000));
    assert_eq!(
        (a.q_descale, a.k_descale, a.v_descale),
        (0x3000, 0x3100, 0x3200)
    );
    assert_eq!((a.descale_batch_stride, a.descale_head_stride), (8, 1));
}

#[test]
fn an_e4m3_query_without_e4m3_kernels_is_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(MANIFEST_FILE),
        serde_json::to_string(&crate::test_manifest::manifest()).unwrap(),
    )
    .unwrap();
    let path = CString::new(dir.path().to_str().unwrap()).unwrap();
    let mut cache: *mut Fa4genCache = std::ptr::null_mut();
    // SAFETY: valid pointers; the handle is closed once.
    unsafe {
        assert_eq!(fa4gen_cache_open(path.as_ptr(), &mut cache), FA4GEN_OK);
        let mut sel: Fa4genSelection = std::mem::zeroed();
        let q = Fa4genQuery {
            dtype: 2,
            ..d128(3000)
        };
        assert_eq!(fa4gen_select(cache, &q, &mut sel), FA4GEN_ERR_UNSUPPORTED);
        assert!(message().contains("e4m3"), "{}", message());
        fa4gen_cache_close(cache);
    }
}
