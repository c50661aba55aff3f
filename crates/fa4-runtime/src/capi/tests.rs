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
