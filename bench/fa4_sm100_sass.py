"""FA4's sm100 forward kernel compiled without a GPU, for `fa4-gen sass --cubin` to read
beside the Blackwell template's kernels (no sm100 GPU is at hand to time either).

FA4 (flash_attn/cute, CuTe DSL) compiles and skips the launch when called on fake
tensors (torch's FakeTensorMode); FLASH_ATTENTION_ARCH picks its sm100 path and
CUTE_DSL_ARCH the target, so no device is queried. Needs, in one environment:
`pip install nvidia-cutlass-dsl einops "apache-tvm-ffi>=0.1.12,<0.2" torch-c-dlpack-ext
"quack-kernels>=0.5.3"` (torch comes with them; its CUDA build runs without a GPU) and a
checkout of flash-attention whose root is given as --fa-src.

    python bench/fa4_sm100_sass.py --fa-src ~/flash-attention --out /tmp/fa4 [--head-dim 128]
    fa4-gen sass --arch sm100 --out build --cubin /tmp/fa4/fa4_sm100_d128_causal.cubin
"""
import argparse
import glob
import os
import shutil
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fa-src", required=True, help="flash-attention checkout (holds flash_attn/cute)")
    ap.add_argument("--out", required=True, help="folder for the cubin and PTX")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096, help="FA4 picks two Q stages past 128 rows")
    ap.add_argument("--no-causal", action="store_true")
    a = ap.parse_args()
    dump = tempfile.mkdtemp(prefix="fa4-dump-")
    os.environ.update(
        FLASH_ATTENTION_ARCH="sm_100",
        CUTE_DSL_ARCH="sm_100a",
        FLASH_ATTENTION_NUM_SMS="148",  # a B200's; only its split heuristic reads it
        CUTE_DSL_KEEP="ptx,cubin",
        CUTE_DSL_DUMP_DIR=dump,
        CUTE_DSL_NO_CACHE="1",
    )
    sys.path.insert(0, a.fa_src)
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from flash_attn.cute import interface

    causal = not a.no_causal
    with FakeTensorMode():
        q, k, v = (
            torch.empty(4, a.seqlen, 16, a.head_dim, dtype=torch.bfloat16, device="cuda") for _ in range(3)
        )
        interface._flash_attn_fwd(q, k, v, causal=causal, return_lse=True)
    name = f"fa4_sm100_d{a.head_dim}_{'causal' if causal else 'none'}"
    os.makedirs(a.out, exist_ok=True)
    for ext in ("cubin", "ptx"):
        found = glob.glob(f"{dump}/*FlashAttentionForwardSm100*.{ext}")
        if len(found) != 1:
            sys.exit(f"expected one forward {ext} in {dump}, found {found}")
        shutil.copy(found[0], os.path.join(a.out, f"{name}.{ext}"))
    print(os.path.join(a.out, f"{name}.cubin"))


if __name__ == "__main__":
    main()
