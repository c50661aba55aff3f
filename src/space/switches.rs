//! The names of the tile switches a config may carry (`TileConfig::switches`), the
//! templates' knobs that the tuner decides. A switch is set only when on, so configs
//! without it keep their names.

// ---- both templates ------------------------------------------------------------------

/// Switch: pack the query heads that share a KV head into the rows of one block
/// (FlashAttention's pack-GQA). Short query sequences then still fill 64- or 128-row
/// tiles, and each K/V tile loaded serves the whole group. Set only when on, so configs
/// without it keep their names.
pub const PACK_GQA: &str = "packgqa";

/// Switch (bf16 soft-capped specs, both templates): the exponent's offset fixed by the cap. A
/// soft-capped score is at most the cap, so one offset per launch keeps every p normal
/// and below 2^48 (`portable/softmax.cuh`): the row max, its shuffles and O's rescale
/// go, and each score's tanh and exp2 are independent of the others'. Caps above 51.9
/// take the max-offset path that the kernel also holds; fp16's P would overflow. Set
/// only when on.
pub const CAP_OFFSET: &str = "capoffset";

/// Switch: FA4's lazy rescaling, O rescaled only when a row's max grows by more than 2^8
/// (without it, whenever a row's max grows at all): it saves one FMUL per accumulator on
/// most key blocks at a warp vote per block (`portable/softmax.cuh`, `hopper/fragments.cuh`).
pub const LAZY_RESCALE: &str = "lazy";

/// Switch (warp-specialised): FA4's exp2 emulation, every k-th 8-column fragment of P
/// exponentiated by a polynomial on the FMA pipes instead of the MUFU (value k; 0 off).
///
/// On the portable template (soft-capped specs):
/// relieve the MUFU: FA4's exp2 emulation, every k-th
/// 8-column fragment of P exponentiated by a polynomial on the FMA pipes instead of the
/// MUFU (value k; absent: none), and the cap's multiply folded into the exponent's FMA.
/// The tanh of soft-capping is a second MUFU op per score, but relieving the MUFU bought
/// nothing at d64 (0.99 to 1.00x its twin at k = 8): offered by `check()`, not enumerated.
pub const EXP2_EMU: &str = "exp2emu";

// ---- the Hopper template -------------------------------------------------------------

/// Switch: the warp-specialised schedule (`kernel_ws.cuh`): a producer warpgroup loads
/// Q and K/V into mbarrier-guarded slots, the others compute.
pub const WARP_SPECIALIZED: &str = "ws";

/// Switch (warp-specialised): the consumers issue their GEMMs in turn, so one's softmax
/// runs under the others' GEMMs.
pub const PINGPONG: &str = "pingpong";

/// Switch (warp-specialised): issue QK(j) and PV(j - 1) together, softmax(j) under PV(j - 1).
pub const OVERLAP: &str = "overlap";

/// Switch (warp-specialised): a persistent grid whose blocks walk the work tiles, so the
/// producer loads the next tile's Q and K/V while the consumers finish this one.
pub const PERSISTENT: &str = "persistent";

/// Switch (pingpong): the consumers take turns at the MUFU (around each block's
/// exponentials) instead of at the tensor cores (around each GEMM issue).
pub const MUFU_TURNS: &str = "mufuturn";

/// Switch (masked tiles with turns at the MUFU and no half first block, value 1): a
/// consumer that sees none of its tile's first key block (the first of two consumers under
/// causal's diagonal with 64- or 80-key blocks) skips that block's GEMMs and softmax and
/// only takes and passes its turn at the MUFU, which keeps the pair's softmaxes in turn.
pub const HIDDEN_FIRST: &str = "hidden";

/// Switch (unmasked warp-specialised TMA tiles, one block per tile): blocks per cluster
/// along m (value 2; 0 off). The cluster's blocks hold consecutive m-blocks of one head,
/// so they read the same K/V tiles: each loads a share of every tile and multicasts it
/// into both, halving the K/V reads from L2 (FA3 clusters its d128+ unmasked tiles so).
pub const CLUSTER: &str = "cluster";

// ---- the portable template -----------------------------------------------------------

/// Switch: pad shared-memory rows instead of swizzling them (head dims that are
/// multiples of 64 swizzle by default; others are always padded). Set only when on.
pub const PADDED: &str = "pad";

/// Switch (causal and local masks): on the key blocks that cross a mask edge, a warp
/// whose rows see none of the block's keys skips its GEMMs and softmax. It costs a
/// branch that splits the loop body, so it is a switch the measurements decide (faster
/// d128 causal 1.11x at 512 keys to 0.97x at 16k; d64 and d256 slower at every length). Set only when on.
pub const WARP_SKIP: &str = "warpskip";

/// Switch: the blocks per SM the kernel's registers must leave room for
/// (`__launch_bounds__`' second argument; absent: 1, and ptxas takes up to 255). At 1 a
/// 16-rows-per-warp d64 tile takes 130 to 190 registers, so one block of 8 warps or
/// three of 4 share an SM; capped at 128 most compile without spills, with twice the
/// warps. Measured: the tuner picks them on short sequences (128 to
/// 512 tokens, up to 1.11x), where a small grid leaves SMs short of blocks, and never
/// from 1024 on, where 32 rows a warp win. Where the cap spills, the resource report
/// prunes the config. Set only when above 1.
pub const MIN_BLOCKS: &str = "minblocks";

/// Switch: the staggered schedule (`portable/kernel.cuh`), for warps of two m-tiles
/// (32 rows): each m-tile is multiplied, soft-capped, masked and exponentiated in turn,
/// and V is waited for with K, so that one m-tile's softmax and the other's GEMMs are
/// independent work in one basic block for ptxas to interleave; a block that needs a
/// mask runs its own copy of the body. Needs a K/V ring (2 stages or more) and no warp
/// skipping; offered on soft-capped specs (0 to 2% alone, 5 to 8% over the plain loop
/// with the fixed offset). Set only when
/// on.
pub const STAGGER: &str = "stagger";
