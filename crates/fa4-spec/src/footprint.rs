use serde::{Deserialize, Serialize};

/// The entry point every forward kernel exports (`extern "C" __global__`).
pub const KERNEL_ENTRY: &str = "fa4_fwd";
/// The entry of a kernel's varlen cubin (`Footprint::varlen_tiles`), which varlen batches
/// launch: the same kernel built apart, with its tiles numbered sequence by sequence.
pub const VARLEN_KERNEL_ENTRY: &str = "fa4_fwd_varlen";

/// Where a kernel's varlen cubin lies: beside its cubin, `<name>.varlen.cubin`.
pub fn varlen_cubin_path(cubin: &str) -> String {
    format!(
        "{}.varlen.cubin",
        cubin.strip_suffix(".cubin").unwrap_or(cubin)
    )
}

/// What launching a config takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    /// Threads per block.
    pub threads: u32,
    /// Rows per block: the grid is `ceil(seqlen_q / block_m) x heads_q x batch`.
    pub block_m: u32,
    /// Dynamic shared memory per block, bytes.
    pub smem_bytes: u32,
    /// Registers per thread the pruning model expects (ptxas has the last word).
    pub est_registers: u32,
    /// Pack-GQA: a block's rows are (query, head) pairs of the query heads that share one
    /// KV head, so the grid is `ceil(seqlen_q * heads_q / heads_kv / block_m) x heads_kv x
    /// batch`.
    #[serde(default)]
    pub pack_gqa: bool,
    /// Kernels that load by TMA: the key rows of one K/V tile (block_n), which the host
    /// encodes into the tensor maps over Q, K and V it passes with the arguments
    /// (the runtime's `TmaFwdParams`; paged kernels: maps over the page pool for K and V,
    /// in boxes of a page's rows); 0 for kernels that take `FwdParams` alone.
    #[serde(default)]
    pub tma_rows: u32,
    /// Persistent kernels: blocks per SM of a grid that strides over the work tiles
    /// (`launch_grid`); 0 for one block per tile.
    #[serde(default)]
    pub persistent_per_sm: u32,
    /// Causal kernels with one block per tile whose grid `launch_grid` lays out in
    /// sections of (head, sequence) pairs sized to L2, heaviest m-blocks first
    /// (`schedule.cuh`): the bytes of K and V per key, which size the sections. 0 for the
    /// `m-blocks x heads x batch` grid.
    #[serde(default)]
    pub section_key_bytes: u32,
    /// Causal kernels with one block per tile whose grid is `heads x m-blocks x batch`,
    /// the m-blocks reversed in y (`launch_grid`, `portable/kernel.cuh`): every head of
    /// a sequence takes its heaviest m-block first. false for `m-blocks x heads x batch`.
    #[serde(default)]
    pub causal_m_blocks_in_y: bool,
    /// Unmasked persistent kernels that share out their last rounds' tiles by keys when
    /// the launch brings a workspace (the runtime's `split_tail`, `schedule.cuh`): the O columns
    /// (head_dim_v) a piece leaves there; 0 for kernels that never split.
    #[serde(default)]
    pub split_head_dim_v: u32,
    /// Blocks per cluster along m (`launch_grid` rounds the m-blocks up to a multiple):
    /// consecutive m-blocks of one head share their K/V loads by TMA multicast
    /// (`hopper/kernel_ws.cuh`); 0 or 1 for no cluster.
    #[serde(default)]
    pub cluster_m: u32,
    /// The kernel has a varlen build (`VARLEN_KERNEL_ENTRY`): a varlen batch (cu_seqlens_q)
    /// launched there takes its work tiles sequence by sequence from a grid of one
    /// dimension (`launch_grid`, `hopper/tile_scheduler.cuh`). false, or no varlen cubin:
    /// the dense grid, the longest sequence's m-blocks for every sequence.
    #[serde(default)]
    pub varlen_tiles: bool,
}

#[cfg(test)]
mod tests {
    use super::varlen_cubin_path;

    #[test]
    fn a_varlen_cubin_lies_beside_its_kernels_cubin() {
        // scripts/build_wheel.py and bench/cache_subset.py name it the same way
        assert_eq!(
            varlen_cubin_path("sm90/k_ab12.cubin"),
            "sm90/k_ab12.varlen.cubin"
        );
        assert_eq!(
            varlen_cubin_path("cubin/sm90/k.cubin"),
            "cubin/sm90/k.varlen.cubin"
        );
    }
}
