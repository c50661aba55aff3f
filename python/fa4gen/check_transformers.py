"""Checks fa4gen's Hugging Face transformers backend on a GPU: small random-weight models
with ``attn_implementation="fa4gen"`` in bf16 against the same weights in f32 on
transformers' ``eager`` attention, beside ``eager`` in bf16.

    python3 -m fa4gen.check_transformers [--json FILE] [--cache DIR] [--slack 1.1] [--models llama,qwen2,gpt_oss]

Models, built in code from their configs (nothing downloaded), weights seeded: Llama at
head dim 64 (GQA 4:2) and 128 (MQA 4:1); Qwen2 at head dim 64 with sliding-window layers
(window 64) and 128; gpt-oss at head dim 64 and 128, alternating sliding (window 64) and
full layers, with sinks (set to N(0, 1): the initialiser's are too small to matter), every
expert on every token (no top-k routing to flip between dtypes). Weights are initialised
at std 0.05 (transformers' 0.02 gives near-uniform attention).

Cases per model: a batch without padding; the same prompts right-padded and left-padded
(lengths 200, 131, 77); a 64-token chunk after a cache of 128 (fewer queries than keys)
for 4 sequences, unpadded and left-padded (prompts of 150, 96, 130, 70); and one decode
step after each chunk. Each compares the logits at the real tokens, relative L2 error
against f32 eager. A case passes when fa4gen's error is at most ``slack`` (1.1) times
eager bf16's (``decode_slack``, 1.25, for a decode step: the fallback's call over the
cache fa4-gen's calls made, four tokens' logits, a noisier figure), and the calls went
where they should: every layer of a prompt or chunk on fa4-gen (no fallback), every layer
of a decode step on the fallback ("fewer than 64 queries a sequence"). Prints a table;
with ``--json`` writes every number and the counts of fa4-gen calls and fallbacks.

Exit status 0 when every case passes.
"""

import argparse
import copy
import json
import math
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, GptOssConfig, LlamaConfig, Qwen2Config

from . import transformers as ft

DEV = "cuda"
VOCAB = 512
WINDOW = 64
INIT = 0.05


def configs():
    common = dict(vocab_size=VOCAB, intermediate_size=512, max_position_embeddings=4096, initializer_range=INIT,
                  rms_norm_eps=1e-6)
    oss = dict(common, max_position_embeddings=32 * 4096, num_local_experts=4, num_experts_per_tok=4,
               intermediate_size=256, sliding_window=WINDOW)
    return {
        "llama-d64": LlamaConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 head_dim=64, **common),
        "llama-d128": LlamaConfig(hidden_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                                  head_dim=128, **common),
        "qwen2-d64": Qwen2Config(hidden_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                 use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1, **common),
        "qwen2-d128": Qwen2Config(hidden_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  **common),
        "gpt_oss-d64": GptOssConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=64, **oss),
        "gpt_oss-d128": GptOssConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=1, head_dim=128, **oss),
    }


def build(name, cfg, seed):
    """(f32 eager, bf16 eager, bf16 fa4gen) with the same weights."""
    extra = {"experts_implementation": "eager"} if name.startswith("gpt_oss") else {}

    def make(attn, dtype):
        return AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=attn, dtype=dtype,
                                                **extra).to(DEV).eval()

    torch.manual_seed(seed)
    ref = make("eager", torch.float32)
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    with torch.no_grad():
        for module in ref.modules():
            if isinstance(getattr(module, "sinks", None), torch.nn.Parameter):
                module.sinks.copy_(torch.randn(module.sinks.shape, generator=g))
    state = ref.state_dict()
    models = [ref]
    for attn in ("eager", "fa4gen"):
        m = make(attn, torch.bfloat16)
        m.load_state_dict(state)
        models.append(m)
    return models


def batch(lengths, side, seed, total=None):
    g = torch.Generator(device="cpu").manual_seed(seed)
    total = total or max(lengths)
    ids = torch.randint(0, VOCAB, (len(lengths), total), generator=g)
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    for b, n in enumerate(lengths):
        if side == "left":
            mask[b, total - n:] = 1
        else:
            mask[b, :n] = 1
    return ids.to(DEV), mask.to(DEV)


def rel_l2(out, ref):
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def forward(model, ids, mask, cache):
    """Logits (f32) of one forward over ``ids`` (after ``cache``), and the cache after it;
    positions from the mask, as generate makes them."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1]:]
    with torch.no_grad():
        out = model(ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)
    return out.logits.float(), out.past_key_values


def run_stages(models, stages):
    """Runs ``stages`` [(ids, mask)] one after the other over one cache per model.
    Returns per stage: the logits of each model, and what fa4gen's run counted."""
    results = [[] for _ in stages]
    counts = []
    for i, model in enumerate(models):
        cache = None
        for s, (ids, mask) in enumerate(stages):
            if i == 2:
                ft.reset_stats()
            logits, cache = forward(model, ids, mask, cache)
            results[s].append(logits)
            if i == 2:
                torch.cuda.synchronize()
                counts.append(ft.stats())
    return results, counts


def cases():
    """(name, stages, which stages to report, what each reported stage expects)."""
    prompt = [200, 131, 77]
    even, _ = batch([160, 160], "right", 10)
    right = batch(prompt, "right", 11)
    left = batch(prompt, "left", 11)
    chunk_ids, _ = batch([64] * 4, "right", 12)
    step_ids, _ = batch([1] * 4, "right", 13)
    p128 = batch([128] * 4, "right", 14)
    pleft = batch([150, 96, 130, 70], "left", 15)
    ones = lambda n: torch.ones(4, n, dtype=torch.long, device=DEV)  # noqa: E731

    def extend(first):
        ids, mask = first
        m1 = torch.cat([mask, ones(64)], -1)
        return [first, (chunk_ids, m1), (step_ids, torch.cat([m1, ones(1)], -1))]

    return [
        ("prompt", [(even, torch.ones_like(even))], [0]),
        ("prompt, right-padded", [right], [0]),
        ("prompt, left-padded", [left], [0]),
        ("chunk after a cache", extend(p128), [1, 2]),
        ("chunk after a cache, left-padded", extend(pleft), [1, 2]),
    ]


def check_model(name, cfg, slack, decode_slack, seed):
    models = build(name, cfg, seed)
    layers = cfg.num_hidden_layers
    rows = []
    for case, stages, report in cases():
        results, counts = run_stages(models, stages)
        for s in report:
            ref, bf16, ours = results[s]
            mask = stages[s][1][:, -stages[s][0].shape[1]:].bool()
            err_ours, err_eager = rel_l2(ours[mask], ref[mask]), rel_l2(bf16[mask], ref[mask])
            decode = stages[s][0].shape[1] == 1
            c = counts[s]
            if decode:
                where_ok = c["fa4gen"] == 0 and c["fallbacks"] == {"fewer than 64 queries a sequence": layers}
            else:
                where_ok = c["fa4gen"] == layers and not c["fallbacks"]
            bound = decode_slack if decode else slack
            ok = math.isfinite(err_ours) and err_ours <= bound * err_eager and where_ok
            rows.append({
                "model": name, "case": case + (", decode step" if decode else (", chunk" if s else "")),
                "queries": int(stages[s][0].shape[1]), "keys": int(stages[s][1].shape[1]),
                "err_fa4gen": err_ours, "err_eager_bf16": err_eager,
                "ratio": err_ours / err_eager if err_eager else math.inf,
                "max_abs_fa4gen": (ours[mask] - ref[mask]).abs().max().item(),
                "max_abs_eager_bf16": (bf16[mask] - ref[mask]).abs().max().item(),
                "fa4gen_calls": c["fa4gen"], "fallbacks": c["fallbacks"], "masks": c["masks"],
                "bound": bound, "routed_as_expected": where_ok, "pass": ok,
            })
    del models
    torch.cuda.empty_cache()
    return rows


def describe(cfg):
    return {
        "model_type": cfg.model_type, "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size,
        "heads": cfg.num_attention_heads, "heads_kv": cfg.num_key_value_heads,
        "head_dim": getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        "layer_types": list(getattr(cfg, "layer_types", None) or []),
        "sliding_window": getattr(cfg, "sliding_window", None),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--cache", help="kernel cache folder (default: FA4GEN_CACHE, the wheel's or the repository's)")
    p.add_argument("--slack", type=float, default=1.1,
                   help="on prompts and chunks (fa4-gen's calls), fa4gen's error may be this times eager bf16's")
    p.add_argument("--decode-slack", type=float, default=1.25,
                   help="the same for decode steps (the fallback's calls, four tokens' logits: a noisier figure)")
    p.add_argument("--models", default="llama,qwen2,gpt_oss", help="model types (prefixes of the configs' names)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: this check runs fa4-gen's kernels", file=sys.stderr)
        return 2
    ft.register(cache=args.cache)
    wanted = [m.strip() for m in args.models.split(",") if m.strip()]
    t0 = time.time()
    models, rows = {}, []
    for name, cfg in configs().items():
        if not any(name.startswith(w) for w in wanted):
            continue
        models[name] = describe(cfg)
        try:
            rows += check_model(name, cfg, args.slack, args.decode_slack, args.seed)
        except Exception as e:  # one model's failure is reported, the others still run
            rows.append({"model": name, "case": "build or run", "error": "%s: %s" % (type(e).__name__, e),
                         "pass": False})
    passed = bool(rows) and all(r["pass"] for r in rows)

    print("%-13s %-42s %6s %6s %10s %10s %6s %5s %s" % ("model", "case", "q", "k", "fa4gen", "eager-bf16",
                                                         "ratio", "calls", "fallbacks"))
    for r in rows:
        if "error" in r:
            print("%-13s %-42s FAIL %s" % (r["model"], r["case"], r["error"]))
            continue
        print("%-13s %-42s %6d %6d %10.3e %10.3e %6.3f %5d %s%s" % (
            r["model"], r["case"], r["queries"], r["keys"], r["err_fa4gen"], r["err_eager_bf16"], r["ratio"],
            r["fa4gen_calls"], json.dumps(r["fallbacks"]), "" if r["pass"] else "  FAIL"))
    print("%s: %d of %d cases pass (relative L2 of the logits at real tokens against f32 eager; "
          "fa4gen's at most %.2fx eager bf16's, %.2fx on decode steps), %.0f s"
          % ("PASS" if passed else "FAIL", sum(r["pass"] for r in rows), len(rows), args.slack, args.decode_slack,
             time.time() - t0))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "pass": passed, "slack": args.slack, "decode_slack": args.decode_slack, "min_queries": 64,
                "seed": args.seed, "init_std": INIT,
                "torch": torch.__version__, "transformers": transformers.__version__,
                "device": torch.cuda.get_device_name(), "models": models, "cases": rows,
                "totals": {"fa4gen_calls": sum(r.get("fa4gen_calls", 0) for r in rows),
                           "fallbacks": sum(sum(r.get("fallbacks", {}).values()) for r in rows)},
            }, f, indent=1)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
