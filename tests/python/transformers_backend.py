"""fa4gen.transformers on the host, without a GPU: the mask, window and unpadding logic
against transformers' own mask code, and small random-weight Llama, Qwen2, gpt-oss and
Gemma 2 models run end to end with the kernels replaced by a reference of their semantics
(FlashAttention's: causal and windows bottom-right per sequence, sinks, softcap, GQA),
compared with the same models on transformers' eager attention in f32.

    python3 tests/python/transformers_backend.py      (from the repository root; `cargo test` runs it
                                                       with FA4GEN_TEST_PYTHON's interpreter, else python3)

Without torch and transformers only the import and window tests run; the others are
skipped, saying so.
"""

import copy
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")
sys.path.insert(0, PYTHON_DIR)

import fa4gen.transformers as ft  # noqa: E402

try:
    import torch
    from transformers import masking_utils as mu
    MISSING = None
except ImportError as e:  # CI has neither
    MISSING = "torch and transformers are not installed (%s)" % e

needs_torch = unittest.skipIf(MISSING is not None, MISSING or "")


class WithoutTorch(unittest.TestCase):
    def test_import_needs_nothing_and_register_names_the_fix(self):
        # torch and transformers made unimportable, whether installed or not
        code = r"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError("No module named %r (blocked)" % name)
sys.meta_path.insert(0, Block())
import fa4gen.transformers as ft
assert ft.stats() == {"fa4gen": 0, "fallbacks": {}, "masks": {}}
assert ft.flash_window(128) == (127, 0)
try:
    ft.register()
except ImportError as e:
    print(e)
else:
    raise SystemExit("register() without torch did not raise")
"""
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=PYTHON_DIR))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("fa4gen.transformers.register() needs torch and Hugging Face transformers", out.stdout)
        self.assertIn("pip install", out.stdout)

    def test_window(self):
        self.assertEqual(ft.flash_window(None), (-1, -1))
        self.assertEqual(ft.flash_window(0), (-1, -1))
        self.assertEqual(ft.flash_window(1), (0, 0))  # the diagonal alone
        self.assertEqual(ft.flash_window(4096), (4095, 0))
        with self.assertRaises(ValueError):
            ft.flash_window(-3)


def flash_visible(q_length, kv_length, left):
    """FlashAttention's causal mask with window_size=(left, 0), bottom-right aligned:
    bool [q_length, kv_length]."""
    i = torch.arange(q_length)[:, None] + kv_length - q_length
    j = torch.arange(kv_length)[None, :]
    seen = j <= i
    if left >= 0:
        seen &= j >= i - left
    return seen


def hf_mask(q_length, kv_length, q_offset=0, kv_offset=0, window=None, padding=None, batch=1):
    """transformers' own 4D boolean mask (sdpa's), materialised."""
    fn = mu.causal_mask_function if window is None else mu.sliding_window_causal_mask_function(window)
    return mu.sdpa_mask(batch_size=batch, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                        kv_offset=kv_offset, mask_function=fn, attention_mask=padding, allow_is_causal_skip=False)


@needs_torch
class Masks(unittest.TestCase):
    def test_sliding_window_is_flash_window(self):
        # transformers' sliding_window=w, as its sdpa mask builds it, against
        # FlashAttention's window_size=flash_window(w), prompts and chunks after a cache
        for w in (1, 2, 3, 7, 16, 64):
            for q_length, past in ((9, 0), (33, 0), (5, 20), (1, 40), (17, 3)):
                kv_length = past + q_length
                got = hf_mask(q_length, kv_length, q_offset=past, window=w)[0, 0]
                want = flash_visible(q_length, kv_length, ft.flash_window(w)[0])
                self.assertTrue(torch.equal(got, want), (w, q_length, past))

    def test_dense_mask_is_transformers_mask(self):
        g = torch.Generator().manual_seed(1)
        for window in (None, 1, 4, 9):
            for q_length, past in ((12, 0), (3, 10), (1, 14)):
                kv_length = past + q_length
                padding = torch.rand(3, kv_length, generator=g) > 0.3
                padding[0] = True
                got = ft.dense_causal_mask(padding, q_length, kv_length, window)
                want = hf_mask(q_length, kv_length, q_offset=past, window=window, padding=padding, batch=3)
                self.assertTrue(torch.equal(got.expand_as(want), want), (window, q_length, past))
                alone = ft.dense_causal_mask(None, q_length, kv_length, window, device="cpu")
                self.assertTrue(torch.equal(alone[0, 0], hf_mask(q_length, kv_length, past, 0, window)[0, 0]))

    def test_dynamic_sliding_cache_offsets(self):
        # a DynamicSlidingWindowLayer keeps w - 1 keys: the mask's keys start at kv_offset
        w, past, q_length = 8, 30, 5
        kv_offset = past - w + 1
        kv_length = w - 1 + q_length
        got = hf_mask(q_length, kv_length, q_offset=past, kv_offset=kv_offset, window=w)[0, 0]
        self.assertTrue(torch.equal(got, flash_visible(q_length, kv_length, w - 1)))

    def test_mask_pattern(self):
        self.assertEqual(ft.mask_pattern(mu.causal_mask_function, 2, 0, 30, 0, 30), "causal")
        self.assertEqual(ft.mask_pattern(mu.sliding_window_causal_mask_function(8), 2, 0, 30, 0, 30, [8]), 8)
        self.assertEqual(ft.mask_pattern(mu.sliding_window_causal_mask_function(8), 2, 20, 4, 13, 11, [8]), 8)
        # a window that hides nothing here is causal; a window not the config's is neither
        self.assertEqual(ft.mask_pattern(mu.sliding_window_causal_mask_function(64), 1, 0, 30, 0, 30, [64]), "causal")
        self.assertIsNone(ft.mask_pattern(mu.sliding_window_causal_mask_function(8), 1, 0, 30, 0, 30, [16]))
        self.assertIsNone(ft.mask_pattern(mu.bidirectional_mask_function, 1, 0, 30, 0, 30))
        chunked = mu.chunked_causal_mask_function(4, torch.zeros(2, dtype=torch.long))
        self.assertIsNone(ft.mask_pattern(chunked, 2, 0, 30, 0, 30))
        packed = torch.tensor([[0] * 10 + [1] * 20, [0] * 30])
        fn = mu.and_masks(mu.causal_mask_function, mu.packed_sequence_mask_function(packed))
        self.assertIsNone(ft.mask_pattern(fn, 2, 0, 30, 0, 30))
        # small budgets evaluate row by row
        self.assertEqual(ft.mask_pattern(mu.sliding_window_causal_mask_function(3), 2, 0, 30, 0, 30, [3],
                                         budget=7), 3)

    def test_padding_runs(self):
        p = torch.tensor([[1, 1, 1, 0], [0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 1], [0, 1, 0, 0]]).bool()
        self.assertEqual(ft.padding_runs(p).tolist(), [True, True, True, True, False, True])

    def test_unpad(self):
        g = torch.Generator().manual_seed(2)
        for _ in range(20):
            batch = int(torch.randint(1, 5, (1,), generator=g))
            kv_length = int(torch.randint(1, 20, (1,), generator=g))
            q_length = int(torch.randint(1, kv_length + 1, (1,), generator=g))
            padding = torch.rand(batch, kv_length, generator=g) > 0.4
            queries, cu_q, cu_k, max_q, max_k = ft.unpad(padding, q_length)
            lq = [int(padding[b, kv_length - q_length:].sum()) for b in range(batch)]
            lk = [int(padding[b].sum()) for b in range(batch)]
            self.assertEqual(cu_q.dtype, torch.int32)
            self.assertEqual(cu_q.tolist(), [sum(lq[:b]) for b in range(batch + 1)])
            self.assertEqual(cu_k.tolist(), [sum(lk[:b]) for b in range(batch + 1)])
            self.assertEqual((max_q, max_k), (max(lq), max(lk)))
            self.assertTrue(torch.equal(queries, padding[:, kv_length - q_length:]))
            # t[mask] packs row by row, as cu_seqlens says
            t = torch.arange(batch * kv_length).view(batch, kv_length)
            packed = t[padding]
            for b in range(batch):
                self.assertEqual(packed[cu_k[b]:cu_k[b + 1]].tolist(), t[b][padding[b]].tolist())


class Config:
    sliding_window = 6


@needs_torch
class MaskFunction(unittest.TestCase):
    """The mask function as create_causal_mask / create_sliding_window_causal_mask call it."""

    def call(self, q_length, kv_length, padding=None, window=None, q_offset=0, kv_offset=0, **kw):
        ft.reset_stats()
        fn = mu.causal_mask_function if window is None else mu.sliding_window_causal_mask_function(window)
        args = dict(batch_size=2 if padding is None else padding.shape[0], q_length=q_length, kv_length=kv_length,
                    q_offset=q_offset, kv_offset=kv_offset, mask_function=fn, attention_mask=padding,
                    allow_is_causal_skip=True, dtype=torch.float32, config=Config(), use_vmap=False, device="cpu")
        args.update(kw)
        return ft._mask_function(**args)

    def test_causal_prompt(self):
        self.assertIsNone(self.call(10, 10))
        self.assertIsNone(self.call(10, 10, padding=torch.ones(2, 10, dtype=torch.bool)))
        self.assertIsNone(self.call(10, 10, window=6))
        self.assertEqual(ft.stats()["masks"], {"causal": 1})

    def test_padding(self):
        right = torch.tensor([[1] * 10, [1] * 7 + [0] * 3]).bool()
        left = right.flip(-1)
        for pad in (right, left):
            for window in (None, 6):
                got = self.call(10, 10, padding=pad, window=window)
                self.assertTrue(torch.equal(got, pad))
        # a cache's keys before the queries: the mask's absolute columns, sliced
        pad = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [1] * 8]).bool()
        got = self.call(3, 6, padding=pad, window=6, q_offset=5, kv_offset=2)
        self.assertTrue(torch.equal(got, pad[:, 2:]))
        self.assertEqual(ft.stats()["masks"], {"padding": 1})

    def test_what_falls_back_gets_transformers_mask(self):
        hole = torch.tensor([[1] * 10, [1, 1, 1, 0, 0, 1, 1, 1, 1, 1]]).bool()
        self.assertTrue(torch.equal(self.call(10, 10, padding=hole), hole))  # causal: holes unpad fine
        got = self.call(10, 10, padding=hole, window=6)
        self.assertEqual(got.dim(), 4)
        self.assertTrue(torch.equal(got, hf_mask(10, 10, window=6, padding=hole, batch=2)))
        self.assertEqual(ft.stats()["masks"], {"4D: padding within a sliding window's rows": 1})
        # a static cache: keys past the queries
        self.assertEqual(self.call(4, 16, q_offset=3).dim(), 4)
        self.assertEqual(self.call(4, 16, q_offset=3, use_vmap=True).dim(), 4)
        packed = torch.tensor([[0] * 4 + [1] * 6, [0] * 10])
        fn = mu.and_masks(mu.causal_mask_function, mu.packed_sequence_mask_function(packed))
        got = self.call(10, 10, mask_function=fn)
        self.assertEqual(got.dim(), 4)
        self.assertEqual(ft.stats()["masks"], {"4D: neither causal nor a sliding window": 1})

    def test_older_interface(self):
        # transformers before q_length/q_offset passed the queries' positions
        ft.reset_stats()
        pad = torch.tensor([[1] * 12, [0] * 2 + [1] * 10]).bool()
        got = ft._mask_function(batch_size=2, cache_position=torch.arange(8, 12), kv_length=12, kv_offset=0,
                                mask_function=mu.causal_mask_function, attention_mask=pad, config=Config())
        self.assertTrue(torch.equal(got, pad))
        self.assertIsNone(ft._mask_function(batch_size=2, cache_position=torch.arange(0, 12), kv_length=12,
                                            mask_function=mu.causal_mask_function, attention_mask=None))


class Reference:
    """FlashAttention's semantics in f32, on any device and dtype: what the attention
    function would launch, computed per sequence."""

    dtypes = ("bfloat16", "float16", "float32")

    def __init__(self):
        self.calls = []

    def usable(self, t):
        return True

    @staticmethod
    def one(q, k, v, scale, window, softcap, sinks):
        sq, h, d = q.shape
        sk, hkv, _ = v.shape
        g = h // hkv
        kf, vf = k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1)
        s = torch.einsum("qhd,khd->hqk", q.float(), kf) * (d ** -0.5 if scale is None else scale)
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        s = s.masked_fill(~flash_visible(sq, sk, window[0]), float("-inf"))
        if sinks is not None:
            s = torch.cat([s, sinks.float()[:, None, None].expand(h, sq, 1)], -1)
        p = torch.softmax(s, -1).nan_to_num(0.0)[..., :sk]
        return torch.einsum("hqk,khd->qhd", p, vf).to(q.dtype)

    def dense(self, q, k, v, softmax_scale=None, causal=True, window_size=(-1, -1), softcap=0.0, sinks=None,
              cache=None):
        assert causal and window_size[1] in (0, -1)
        self.calls.append(("dense", tuple(q.shape), tuple(k.shape), window_size, sinks is not None))
        return torch.stack([self.one(q[b], k[b], v[b], softmax_scale, window_size, softcap, sinks)
                            for b in range(q.shape[0])])

    def varlen(self, q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=None, causal=True, window_size=(-1, -1),
               softcap=0.0, sinks=None, cache=None):
        assert causal and cu_q.dtype == torch.int32 and cu_k.dtype == torch.int32
        self.calls.append(("varlen", tuple(q.shape), tuple(k.shape), window_size, sinks is not None))
        outs = []
        for b in range(cu_q.numel() - 1):
            qb = q[cu_q[b]:cu_q[b + 1]]
            kb, vb = k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]]
            assert qb.shape[0] <= max_q and kb.shape[0] <= max_k
            outs.append(self.one(qb, kb, vb, softmax_scale, window_size, softcap, sinks))
        return torch.cat(outs)


def tiny_configs():
    from transformers import Gemma2Config, GptOssConfig, LlamaConfig, Qwen2Config

    common = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256, initializer_range=0.1)
    return {
        "llama": LlamaConfig(num_hidden_layers=2, head_dim=16, **common),
        "qwen2": Qwen2Config(num_hidden_layers=3, use_sliding_window=True, sliding_window=6, max_window_layers=1,
                             **common),
        # every expert on every token: no top-k choice to flip between runs
        "gpt_oss": GptOssConfig(num_hidden_layers=2, head_dim=16, sliding_window=6, num_local_experts=4,
                                num_experts_per_tok=4, **dict(common, intermediate_size=64,
                                                              max_position_embeddings=32 * 4096)),
        # a logit softcap low enough to bite, alternating sliding (w = 6) and full layers
        "gemma2": Gemma2Config(num_hidden_layers=2, head_dim=16, sliding_window=6, attn_logit_softcapping=2.0,
                               query_pre_attn_scalar=16, **common),
    }


@needs_torch
class Models(unittest.TestCase):
    """Each model's logits at its real tokens, fa4gen (reference kernels) against eager, in f32."""

    @classmethod
    def setUpClass(cls):
        ft.register("fa4gen-test", min_queries=4)
        cls.saved = ft._kernels
        ft._kernels = cls.kernels = Reference()

    @classmethod
    def tearDownClass(cls):
        ft._kernels = cls.saved

    def models(self, name):
        from transformers import AutoModelForCausalLM

        cfg = tiny_configs()[name]
        torch.manual_seed(0)
        # from_config sets the implementation on the config it is given: one copy each
        ref = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager",
                                               dtype=torch.float32).eval()
        ours = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="fa4gen-test",
                                                dtype=torch.float32).eval()
        ours.load_state_dict(ref.state_dict())
        return ref, ours

    @staticmethod
    def batch(lengths, side, total=None, seed=0):
        g = torch.Generator().manual_seed(seed)
        total = total or max(lengths)
        ids = torch.randint(1, 97, (len(lengths), total), generator=g)
        mask = torch.zeros(len(lengths), total, dtype=torch.long)
        for b, n in enumerate(lengths):
            if side == "left":
                mask[b, total - n:] = 1
            else:
                mask[b, :n] = 1
        return ids, mask

    def close(self, got, want, where):
        err = (got[where] - want[where]).abs().max().item()
        self.assertLess(err, 2e-4 * max(1.0, want[where].abs().max().item()), err)

    def prompt(self, name, lengths, side):
        ref, ours = self.models(name)
        ids, mask = self.batch(lengths, side)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        ft.reset_stats()
        self.kernels.calls.clear()
        with torch.no_grad():
            want = ref(ids, attention_mask=mask, position_ids=position_ids).logits
            got = ours(ids, attention_mask=mask, position_ids=position_ids).logits
        self.close(got, want, mask.bool())
        layers = ref.config.num_hidden_layers
        self.assertEqual(ft.stats()["fa4gen"], layers, ft.stats())
        self.assertEqual(ft.stats()["fallbacks"], {})
        padded = len(set(lengths)) > 1
        self.assertEqual({c[0] for c in self.kernels.calls}, {"varlen" if padded else "dense"})
        return ours

    def test_prompts(self):
        for name in ("llama", "qwen2", "gpt_oss", "gemma2"):
            for side in ("right", "left"):
                with self.subTest(name=name, side=side):
                    self.prompt(name, [23, 15, 9], side)
            with self.subTest(name=name, side="none"):
                self.prompt(name, [20, 20], "right")

    def test_windows_and_sinks_reach_the_kernels(self):
        self.prompt("gpt_oss", [23, 15], "left")
        windows = [c[3] for c in self.kernels.calls]
        self.assertEqual(windows, [(5, 0), (-1, -1)])  # layer 0 sliding (w = 6), layer 1 full
        self.assertTrue(all(c[4] for c in self.kernels.calls))  # sinks every layer
        self.prompt("qwen2", [20, 20], "right")
        self.assertEqual([c[3] for c in self.kernels.calls], [(-1, -1), (5, 0), (5, 0)])
        self.assertFalse(any(c[4] for c in self.kernels.calls))

    def test_chunk_and_decode_after_a_cache(self):
        # a prompt, a chunk of it after the cache (fewer queries than keys), then one decode
        # step: the chunk on the kernels bottom-right aligned, the step on the fallback
        for name in ("llama", "qwen2", "gpt_oss", "gemma2"):
            for side in ("left", "right"):
                with self.subTest(name=name, side=side):
                    self.chunk_and_decode(name, side)

    def chunk_and_decode(self, name, side):
        from transformers import DynamicCache

        ref, ours = self.models(name)
        ids, mask = self.batch([18, 15], side)
        more, _ = self.batch([7, 7], "right", seed=1)
        step, _ = self.batch([1, 1], "right", seed=2)
        mask_more = torch.cat([mask, torch.ones(2, 7, dtype=torch.long)], -1)
        mask_step = torch.cat([mask_more, torch.ones(2, 1, dtype=torch.long)], -1)
        results = []
        ft.reset_stats()
        for model in (ref, ours):
            cache = DynamicCache(config=model.config)
            out = []
            with torch.no_grad():
                for chunk, m in ((ids, mask), (more, mask_more), (step, mask_step)):
                    pos = (m.cumsum(-1) - 1).clamp(min=0)[:, -chunk.shape[1]:]
                    out.append(model(chunk, attention_mask=m, position_ids=pos, past_key_values=cache,
                                     use_cache=True).logits)
            results.append(out)
        (want0, want1, want2), (got0, got1, got2) = results
        self.close(got0, want0, mask.bool())
        self.close(got1, want1, torch.ones(2, 7, dtype=torch.bool))
        self.close(got2, want2, torch.ones(2, 1, dtype=torch.bool))
        s = ft.stats()
        layers = ref.config.num_hidden_layers
        # right padding then more tokens leaves pads between a row's tokens, which a window
        # counts: the sliding layers' chunk goes to the fallback with transformers' mask
        holes = getattr(ref.config, "layer_types", []).count("sliding_attention") if side == "right" else 0
        want = {"fewer than 4 queries a sequence": layers}
        if holes:
            want["a mask that is not a padding mask"] = holes
        self.assertEqual(s["fallbacks"], want, s)
        self.assertEqual(s["fa4gen"], 2 * layers - holes, s)

    def test_what_the_kernels_do_not_take_falls_back(self):
        ref, ours = self.models("gpt_oss")
        ids, mask = self.batch([12, 9], "left")
        ft.reset_stats()
        with torch.no_grad():
            want = ref(ids, attention_mask=mask).logits
            got = ours(ids, attention_mask=mask, output_attentions=True)
        self.close(got.logits, want, mask.bool())
        self.assertEqual(len(got.attentions), 2)  # the model's eager attention gave its weights
        self.assertEqual(ft.stats()["fallbacks"], {"output_attentions": 2})
        # gradients: forward-only kernels never serve a call that needs them
        ft.reset_stats()
        out = ours(ids, attention_mask=mask).logits
        self.assertTrue(out.requires_grad)
        self.assertEqual(ft.stats()["fallbacks"], {"gradients (fa4-gen's kernels are forward only)": 2})
        # a dtype the kernels do not take
        ft.reset_stats()
        saved = self.kernels.dtypes
        self.kernels.dtypes = ("bfloat16",)
        try:
            with torch.no_grad():
                self.close(ours(ids, attention_mask=mask).logits, want, mask.bool())
        finally:
            self.kernels.dtypes = saved
        self.assertEqual(ft.stats()["fallbacks"], {"dtype float32": 2})

    def test_generate(self):
        ref, ours = self.models("qwen2")
        ids, mask = self.batch([14, 9], "left")
        ft.reset_stats()
        with torch.no_grad():
            want = ref.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
            got = ours.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
        self.assertTrue(torch.equal(got, want))
        s = ft.stats()
        self.assertEqual(s["fa4gen"], 3)
        self.assertEqual(s["fallbacks"], {"fewer than 4 queries a sequence": 6})


def main():
    if MISSING:
        print("fa4gen.transformers: %s; the tests that need them are skipped" % MISSING, file=sys.stderr)
    unittest.main(verbosity=1)


if __name__ == "__main__":
    main()
