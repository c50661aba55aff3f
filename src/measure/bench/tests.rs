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

#[test]
fn serving_mixes_are_ragged_batches_of_the_sizes_they_name() {
    let mixes = super::serving_mixes();
    let by_name = |n: &str| mixes.iter().find(|m| m.name == n).expect(n);
    for m in mixes {
        assert!(
            m.seqlens.iter().all(|&(q, k)| q >= 1 && k >= q),
            "{}",
            m.name
        );
        eprintln!(
            "{:8} {:3} seqs, {:6} queries, max {:5}: {:?}",
            m.name,
            m.seqlens.len(),
            m.total_q(),
            m.max_q(),
            &m.seqlens[..m.seqlens.len().min(12)]
        );
    }
    let mixed = by_name("mixed");
    assert_eq!(mixed.total_q(), 20480);
    assert_eq!(mixed.seqlens.iter().map(|s| s.0).min(), Some(37));
    assert_eq!(mixed.max_q(), 7000);
    let short = by_name("short");
    assert_eq!(short.total_q(), 16384);
    assert!(short.max_q() <= 1500 && short.seqlens.len() > 20);
    assert_eq!(by_name("trace").total_q(), 16384);
    let chunked = by_name("chunked");
    assert_eq!(chunked.total_q(), 8192);
    assert!(
        chunked.seqlens.iter().any(|&(q, k)| k > q) && chunked.seqlens.iter().any(|&(q, k)| k == q)
    );
    // Lengths drawn in arrival order: neither sorted up nor down.
    let lens: Vec<i32> = by_name("trace").seqlens.iter().map(|s| s.0).collect();
    assert!(lens.windows(2).any(|w| w[0] < w[1]) && lens.windows(2).any(|w| w[0] > w[1]));
}

#[test]
fn serving_cells_cover_every_mix_of_the_models_asked_for() {
    let all = super::serving_cells(&["all".into()]).unwrap();
    assert_eq!(all.len(), 2 * super::serving_mixes().len());
    let llama = super::serving_cells(&["llama-3-8b".into()]).unwrap();
    assert!(llama
        .iter()
        .all(|c| c.head_dim == 128 && c.heads == 32 && c.heads_kv == 8));
    let c = &llama[0];
    let case = c.case();
    assert_eq!(case.seqlens, c.mix.unwrap().seqlens);
    assert_eq!((case.batch, case.seqlen_q), (c.batch, c.seqlen));
    let err = super::serving_cells(&["llama-2".into()]).unwrap_err();
    assert!(
        err.contains("llama-3-8b") && err.contains("llama-2"),
        "{err}"
    );
}

#[test]
fn a_serving_rows_flops_count_the_pairs_a_prefix_leaves_visible() {
    let cells = super::serving_cells(&["llama-3-8b".into()]).unwrap();
    let chunked = cells
        .iter()
        .find(|c| c.mix.unwrap().name == "chunked")
        .unwrap();
    let spec = fa4_spec::KernelSpec::new(
        fa4_spec::Arch::Sm90,
        fa4_spec::Dtype::Bf16,
        128,
        MaskKind::Causal,
    );
    let exact: f64 = chunked
        .mix
        .unwrap()
        .seqlens
        .iter()
        .map(|&(q, k)| {
            let (q, k) = (q as f64, k as f64);
            q * k - q * (q - 1.0) / 2.0
        })
        .sum::<f64>()
        * 4.0
        * 128.0
        * 32.0;
    let flops = super::cell_flops(&spec, chunked);
    assert!((flops - exact).abs() / exact < 1e-12, "{flops} vs {exact}");
    // More than the convention's half square, since the prefixes are visible whole.
    assert!(flops > crate::measure::problems::attention_flops(&spec, &chunked.case()));
}
