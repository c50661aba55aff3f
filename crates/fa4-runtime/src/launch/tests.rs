use super::*;
use fa4_spec::MaskKind;

#[test]
fn arguments_resolve_to_the_spec_they_need() {
    let args = PrefillArgs {
        dtype: Dtype::Fp16,
        head_dim: 64,
        head_dim_v: 64,
        causal: true,
        params: FwdParams {
            seqlen_q: 300,
            seqlen_k: 500,
            softmax_scale: 0.125,
            window_left: 128,
            window_right: -1,
            sinks: 0x1000,
            softcap: 0.0,
            ..FwdParams::default()
        },
        descale: Descales::default(),
        split: None,
    };
    let (q, p) = args.resolve(Arch::Sm90);
    assert_eq!(
        (q.mask, q.max_seqlen_q, q.dtype),
        (MaskKind::Local, 300, Dtype::Fp16)
    );
    assert_eq!(q.features, "sinks".parse().unwrap());
    assert_eq!((p.window_left, p.window_right), (128, 0));
    assert_eq!(p.scale_log2, 0.125 * std::f32::consts::LOG2_E);
    let paged = PrefillArgs {
        causal: false,
        params: FwdParams {
            softcap: 30.0,
            page_table: 0x2000,
            sinks: 0,
            window_left: -1,
            ..args.params
        },
        ..args
    };
    let (q, p) = paged.resolve(Arch::Sm80);
    assert_eq!((q.mask, q.arch), (MaskKind::None, Arch::Sm80));
    assert_eq!(q.features, "softcap+paged".parse().unwrap());
    assert_eq!(p.softcap, 30.0);
}

#[test]
fn cubin_headers_name_their_sm() {
    // The ELF header fields cubin_sm reads, as NVRTC 13 writes them for sm_90.
    let mut elf = vec![0u8; 64];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2;
    (elf[7], elf[8]) = (0x41, 8);
    elf[18..20].copy_from_slice(&190u16.to_le_bytes());
    elf[48..52].copy_from_slice(&0x0a00_5a04u32.to_le_bytes());
    assert_eq!(cubin_sm(&elf), Some(90));
    elf[48..52].copy_from_slice(&0x0a00_6402u32.to_le_bytes());
    assert_eq!(cubin_sm(&elf), Some(100));
    // The older ABI: SM in the low byte.
    elf[8] = 7;
    elf[48..52].copy_from_slice(&0x0050_0550u32.to_le_bytes());
    assert_eq!(cubin_sm(&elf), Some(0x50));
    elf[18] = 62; // x86-64
    assert_eq!(cubin_sm(&elf), None);
    assert_eq!(cubin_sm(b"not an elf"), None);
}

#[test]
fn cubins_for_another_gpu_or_changed_since_the_build_are_refused() {
    let mut elf = vec![0u8; 64];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2;
    (elf[7], elf[8]) = (0x41, 8);
    elf[18..20].copy_from_slice(&190u16.to_le_bytes());
    let with_sm = |sm: u32| {
        let mut e = elf.clone();
        e[48..52].copy_from_slice(&(0x0a00_0004 | (sm << 8)).to_le_bytes());
        let hash = format!("{:016x}", fnv1a64(&e));
        (e, hash)
    };
    let h200 = Device {
        ctx: 1,
        ordinal: 0,
        name: "NVIDIA H200".into(),
        compute_capability: (9, 0),
        arch: Arch::Sm90,
        sm_count: 132,
        gpu: "NVIDIA H200 (132 SMs)".into(),
    };
    let (sm90, hash) = with_sm(90);
    assert_eq!(check_cubin(&sm90, &hash, &h200), Ok(()));
    let (sm100, hash) = with_sm(100);
    let why = check_cubin(&sm100, &hash, &h200).unwrap_err();
    assert!(
        why.contains("machine code for sm_100, and this device is sm_90"),
        "{why}"
    );
    // sm_80 code runs on sm_86, not the other way round.
    let a6000 = Device {
        compute_capability: (8, 6),
        arch: Arch::Sm86,
        ..h200.clone()
    };
    let (sm80, hash80) = with_sm(80);
    assert_eq!(check_cubin(&sm80, &hash80, &a6000), Ok(()));
    let (sm89, hash89) = with_sm(89);
    assert!(check_cubin(&sm89, &hash89, &a6000).is_err());
    let why = check_cubin(&sm90, "0000000000000000", &h200).unwrap_err();
    assert!(why.contains("does not match the manifest"), "{why}");
}

#[test]
fn without_a_driver_a_call_is_an_error_not_a_crash() {
    // SAFETY: only probes for the library.
    if unsafe { sys::is_culib_present() } {
        eprintln!("skipped: this machine has a CUDA driver (tests/gpu.rs covers it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(fa4_spec::manifest::MANIFEST_FILE),
        serde_json::to_string(&crate::test_manifest::manifest()).unwrap(),
    )
    .unwrap();
    let runtime = Runtime::new(KernelCache::open(dir.path()).unwrap());
    let args = PrefillArgs {
        dtype: Dtype::Bf16,
        head_dim: 128,
        head_dim_v: 128,
        causal: true,
        params: FwdParams::default(),
        descale: Descales::default(),
        split: None,
    };
    // SAFETY: no driver: the call fails before anything is launched.
    let e = unsafe { runtime.prefill(&args, std::ptr::null_mut()) }.unwrap_err();
    assert!(matches!(e, PrefillError::NoDriver), "{e}");
    assert!(e.to_string().contains("libcuda.so.1"));
    assert!(runtime.preload().is_err());
}
