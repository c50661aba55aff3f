use super::*;

#[test]
fn paper_grid_matches_the_anchor_shapes() {
    let grid = paper_grid(
        &[64, 128, 256],
        &[512, 1024, 2048, 4096, 8192, 16384],
        &[MaskKind::None, MaskKind::Causal],
        16384,
        2048,
    );
    assert_eq!(grid.len(), 36);
    let c = grid
        .iter()
        .find(|c| c.head_dim == 128 && c.seqlen == 512)
        .unwrap();
    assert_eq!((c.batch, c.heads), (32, 16));
    let c = grid
        .iter()
        .find(|c| c.head_dim == 64 && c.seqlen == 16384)
        .unwrap();
    assert_eq!((c.batch, c.heads), (1, 32));
}

/// A row carries compare.py's keys, the median of the sorted times with their
/// spread, and the commit its kernels were built from.
#[test]
fn a_row_is_the_median_with_its_spread_and_provenance() {
    let cell = &paper_grid(&[128], &[16384], &[MaskKind::Causal], 16384, 2048)[0];
    let spec = KernelSpec::new(fa4_spec::Arch::Sm90, Dtype::Bf16, 128, MaskKind::Causal);
    let r = row(
        &spec,
        cell,
        &[1.0, 2.0, 4.0],
        "k",
        "c",
        true,
        "fa4-gen-hopper",
    );
    assert_eq!((r.ms, r.ms_min, r.ms_max, r.runs), (2.0, 1.0, 4.0, 3));
    // 4 b h s^2 d, halved for causal: 16 heads, one sequence of 16384 tokens.
    let flops = 4.0 * 16.0 * 16384f64.powi(2) * 128.0 / 2.0;
    assert!(
        (r.tflops - flops / 2e-3 / 1e12).abs() < 1e-6,
        "{}",
        r.tflops
    );
    let json = serde_json::to_value(&r).unwrap();
    for key in [
        "backend", "hdim", "seqlen", "causal", "ms", "tflops", "commit",
    ] {
        assert!(json.get(key).is_some(), "no {key} in {json}");
    }
    assert_eq!(json["causal"], 1);
    assert!(!r.commit.is_empty());
    assert_eq!(r.commit, env!("FA4_GEN_COMMIT"));
    assert!(json.get("hdim_v").is_none(), "{json}");
}

/// DeepSeek-V3's layer: Q and K at 192, V at 128, counted as 2 h s^2 (d + d_v),
/// its rows naming V's head dim.
#[test]
fn the_deepseek_layer_has_its_own_v_head_dim() {
    let cells = model_layers(&["deepseek".to_string()]).unwrap();
    let [cell] = cells[..] else {
        panic!("{cells:?}")
    };
    assert_eq!(
        (cell.head_dim, cell.head_dim_v, cell.heads, cell.heads_kv),
        (192, 128, 16, 16)
    );
    assert!(cell.varlen && cell.mask == MaskKind::Causal);
    let spec = KernelSpec {
        head_dim_v: 128,
        ..KernelSpec::new(fa4_spec::Arch::Sm90, Dtype::Bf16, 192, MaskKind::Causal)
    };
    let r = row(&spec, &cell, &[1.0], "k", "c", true, "fa4-gen-hopper");
    let flops = 2.0 * 4.0 * 16.0 * 4096f64.powi(2) * (192.0 + 128.0) / 2.0;
    assert!(
        (r.tflops - flops / 1e-3 / 1e12).abs() < 1e-6,
        "{}",
        r.tflops
    );
    assert_eq!(serde_json::to_value(&r).unwrap()["hdim_v"], 128);
    // `all` takes it beside the others.
    assert_eq!(model_layers(&["all".to_string()]).unwrap().len(), 4);
}
