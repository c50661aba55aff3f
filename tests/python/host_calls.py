"""fa4gen's Python calls on the host, without torch or a GPU: the arguments each call
packs for the C ABI, and the errors it raises before any launch.

    python3 tests/python/host_calls.py        (from the repository root; `cargo test` runs it)

torch is replaced by `fake_torch` (shapes, strides, dtypes and addresses, no values) and
the launch by a recorder that packs the fields as `fa4gen_prefill` receives them.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import fake_torch as torch  # noqa: E402

torch.install()
import fa4gen  # noqa: E402

# fa4gen_prefill_args in order, as fa4gen.h declares them (before the split workspace),
# and the e4m3 descales that follow the split workspace.
FIELDS = ("dtype head_dim head_dim_v causal q k v o lse "
          "q_batch q_row q_head k_batch k_row k_head v_batch v_row v_head o_batch o_row o_head "
          "batch seqlen_q seqlen_k heads_q heads_kv scale scale_log2 window_left window_right softcap sinks "
          "cu_seqlens_q cu_seqlens_k seqused_k page_table lse_batch lse_head table_stride page_size").split()
DESCALE_FIELDS = "q_descale k_descale v_descale descale_batch descale_head".split()
BF16, I32, F32, E4M3 = torch.bfloat16, torch.int32, torch.float32, torch.float8_e4m3fn


class Launches:
    """Records every launch instead of making it."""

    def __enter__(self):
        self.calls, self._saved = [], fa4gen._launch
        fa4gen._launch = self._record
        return self

    def _record(self, torch_, device, cache, fields, split=False, descale=(0, 0, 0, 0, 0)):
        fa4gen._ARGS.pack(*fields, 0, 0, *descale)  # what the C ABI would receive: the count and types hold
        named = dict(zip(FIELDS, fields, strict=True))
        named.update(zip(DESCALE_FIELDS, descale, strict=True))
        self.calls.append((named, split))

    def __exit__(self, *exc):
        fa4gen._launch = self._saved

    def one(self):
        assert len(self.calls) == 1, self.calls
        return self.calls[0]


def launch(fn):
    with Launches() as rec:
        result = fn()
    fields, split = rec.one()
    return fields, split, result


def without_outputs(fields):
    """The fields that describe the problem: out and LSE are fresh buffers every call."""
    return {k: v for k, v in fields.items() if k not in ("o", "lse")}


def packed_extend(batch=3, page_size=1, pages=600, width=512, hq=16, hkv=2, d=128):
    """An SGLang extend batch: packed queries, a paged cache, per-sequence key counts."""
    return dict(
        q=torch.empty((700, hq, d), BF16),
        k_cache=torch.empty((pages, page_size, hkv, d), BF16),
        v_cache=torch.empty((pages, page_size, hkv, d), BF16),
        page_table=torch.empty((batch, width), I32),
        cache_seqlens=torch.empty((batch,), I32),
        cu_seqlens_q=torch.empty((batch + 1,), I32),
        max_seqlen_q=400,
    )


class KvcacheCall(unittest.TestCase):
    def test_sglang_extend_packs_what_the_varlen_call_packs(self):
        a = packed_extend()
        sinks = torch.empty((16,), torch.float32)
        fields, split, (o, lse) = launch(lambda: fa4gen.flash_attn_with_kvcache(
            a["q"], a["k_cache"], a["v_cache"], page_table=a["page_table"], cache_seqlens=a["cache_seqlens"],
            cu_seqlens_q=a["cu_seqlens_q"], cu_seqlens_k_new=torch.empty((4,), I32), max_seqlen_q=400,
            softmax_scale=0.07, causal=True, window_size=(127, 0), softcap=30.0, return_softmax_lse=True,
            num_splits=1, sinks=sinks))
        twin, twin_split, _ = launch(lambda: fa4gen.flash_attn_varlen_func(
            a["q"], a["k_cache"], a["v_cache"], a["cu_seqlens_q"], None, 400, 512, softmax_scale=0.07,
            causal=True, window_size=(127, 0), softcap=30.0, block_table=a["page_table"],
            seqused_k=a["cache_seqlens"], sinks=sinks))
        self.assertEqual(without_outputs(fields), without_outputs(twin))
        self.assertEqual(split, twin_split)
        self.assertEqual(fields["seqused_k"], a["cache_seqlens"].data_ptr())
        self.assertEqual(fields["cu_seqlens_k"], 0)  # cu_seqlens_k_new describes refused new keys
        self.assertEqual((fields["page_size"], fields["table_stride"], fields["seqlen_k"]), (1, 512, 512))
        self.assertEqual((o.shape, lse.shape), ((700, 16, 128), (16, 700)))
        self.assertEqual((fields["o"], fields["lse"]), (o.data_ptr(), lse.data_ptr()))

    def test_returns_out_alone_without_lse(self):
        a = packed_extend()
        _, _, o = launch(lambda: fa4gen.flash_attn_with_kvcache(
            a["q"], a["k_cache"], a["v_cache"], page_table=a["page_table"], cache_seqlens=a["cache_seqlens"],
            cu_seqlens_q=a["cu_seqlens_q"], max_seqlen_q=400, causal=True))
        self.assertIsInstance(o, torch.Tensor)
        self.assertEqual(o.shape, (700, 16, 128))

    def test_paged_without_cache_seqlens_reads_whole_table_rows(self):
        a = packed_extend(page_size=16, width=40)
        fields, _, _ = launch(lambda: fa4gen.flash_attn_with_kvcache(
            a["q"], a["k_cache"], a["v_cache"], page_table=a["page_table"], cu_seqlens_q=a["cu_seqlens_q"],
            max_seqlen_q=400))
        self.assertEqual((fields["seqused_k"], fields["seqlen_k"], fields["page_size"]), (0, 640, 16))
        # max_seqlen_k bounds the keys below the rows' width (never above it).
        for given, read in ((300, 300), (5000, 640)):
            fields, _, _ = launch(lambda: fa4gen.flash_attn_with_kvcache(
                a["q"], a["k_cache"], a["v_cache"], page_table=a["page_table"], cache_seqlens=a["cache_seqlens"],
                cu_seqlens_q=a["cu_seqlens_q"], max_seqlen_q=400, max_seqlen_k=given))
            self.assertEqual(fields["seqlen_k"], read)
        with Launches() as rec, self.assertRaisesRegex(ValueError, "max_seqlen_k=-1"):
            fa4gen.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], page_table=a["page_table"],
                                           cu_seqlens_q=a["cu_seqlens_q"], max_seqlen_q=400, max_seqlen_k=-1)
        self.assertEqual(rec.calls, [])

    def test_dense_cache_with_one_length_for_every_sequence(self):
        q = torch.empty((2, 5, 8, 64), BF16)
        kc, vc = torch.empty((4, 1000, 2, 64), BF16), torch.empty((4, 1000, 2, 64), BF16)
        fields, split, o = launch(lambda: fa4gen.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=700))
        self.assertEqual((fields["batch"], fields["seqlen_q"], fields["seqlen_k"]), (2, 5, 700))
        self.assertEqual((fields["k_batch"], fields["k_row"], fields["k_head"]), (1000 * 2 * 64, 128, 64))
        self.assertEqual((fields["seqused_k"], fields["page_table"], fields["cu_seqlens_q"]), (0, 0, 0))
        self.assertTrue(split, "a dense unmasked batch over the same keys may split its last round")
        self.assertEqual(o.shape, (2, 5, 8, 64))
        # A length past the cache's rows reads the rows it has, never more.
        fields, _, _ = launch(lambda: fa4gen.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=5000))
        self.assertEqual(fields["seqlen_k"], 1000)

    def test_dense_cache_with_per_sequence_lengths_does_not_split(self):
        q = torch.empty((2, 5, 8, 64), BF16)
        kc, vc = torch.empty((2, 1000, 2, 64), BF16), torch.empty((2, 1000, 2, 64), BF16)
        used = torch.empty((2,), I32)
        fields, split, (o, lse) = launch(lambda: fa4gen.flash_attn_with_kvcache(
            q, kc, vc, cache_seqlens=used, return_softmax_lse=True))
        self.assertEqual((fields["seqused_k"], fields["seqlen_k"]), (used.data_ptr(), 1000))
        self.assertFalse(split)
        self.assertEqual(lse.shape, (2, 8, 5))
        self.assertEqual((fields["lse_batch"], fields["lse_head"]), (8 * 5, 5))

    def test_cache_batch_idx_reads_cache_rows_as_pages(self):
        q = torch.empty((3, 7, 8, 128), BF16)
        kc, vc = torch.empty((10, 2048, 2, 128), BF16), torch.empty((10, 2048, 2, 128), BF16)
        idx, used = torch.empty((3,), I32), torch.empty((3,), I32)
        fields, _, _ = launch(lambda: fa4gen.flash_attn_with_kvcache(
            q, kc, vc, cache_seqlens=used, cache_batch_idx=idx, causal=True))
        self.assertEqual((fields["page_table"], fields["table_stride"], fields["page_size"]),
                         (idx.data_ptr(), 1, 2048))
        self.assertEqual((fields["k_batch"], fields["seqlen_k"], fields["seqused_k"]),
                         (2048 * 2 * 128, 2048, used.data_ptr()))

    def test_hints_do_not_change_the_launch(self):
        a = packed_extend()
        call = lambda **hints: launch(lambda: fa4gen.flash_attn_with_kvcache(  # noqa: E731
            a["q"], a["k_cache"], a["v_cache"], page_table=a["page_table"], cache_seqlens=a["cache_seqlens"],
            cu_seqlens_q=a["cu_seqlens_q"], max_seqlen_q=400, causal=True, **hints))[0]
        plain = without_outputs(call())
        for hints in (dict(num_splits=1), dict(pack_gqa=True), dict(scheduler_metadata=object()),
                      dict(rotary_interleaved=False), dict(ver=4)):
            self.assertEqual(without_outputs(call(**hints)), plain, hints)

    def test_block_table_is_page_tables_other_name(self):
        a = packed_extend()
        by_page = launch(lambda: fa4gen.flash_attn_with_kvcache(
            a["q"], a["k_cache"], a["v_cache"], page_table=a["page_table"], cu_seqlens_q=a["cu_seqlens_q"],
            max_seqlen_q=400))[0]
        by_block = launch(lambda: fa4gen.flash_attn_with_kvcache(
            a["q"], a["k_cache"], a["v_cache"], block_table=a["page_table"], cu_seqlens_q=a["cu_seqlens_q"],
            max_seqlen_q=400))[0]
        self.assertEqual(without_outputs(by_page), without_outputs(by_block))
        with self.assertRaisesRegex(ValueError, "pass one of them"):
            fa4gen.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], page_table=a["page_table"],
                                           block_table=a["page_table"], cu_seqlens_q=a["cu_seqlens_q"],
                                           max_seqlen_q=400)

    def test_work_fa4gen_does_not_do_is_refused_by_name(self):
        a = packed_extend()
        t = torch.empty((700, 2, 128), BF16)
        for name, value in (("k", t), ("v", t), ("qv", t), ("rotary_cos", t), ("rotary_sin", t),
                            ("rotary_seqlens", a["cache_seqlens"]), ("cache_leftpad", a["cache_seqlens"]),
                            ("attention_chunk", 256), ("sm_margin", 4)):
            with Launches() as rec, self.assertRaisesRegex(NotImplementedError, "^%s" % name):
                fa4gen.flash_attn_with_kvcache(
                    a["q"], a["k_cache"], a["v_cache"], page_table=a["page_table"],
                    cache_seqlens=a["cache_seqlens"], cu_seqlens_q=a["cu_seqlens_q"], max_seqlen_q=400,
                    **{name: value})
            self.assertEqual(rec.calls, [], name)

    def test_inconsistent_arguments_are_named(self):
        a = packed_extend()
        base = dict(page_table=a["page_table"], cache_seqlens=a["cache_seqlens"], cu_seqlens_q=a["cu_seqlens_q"],
                    max_seqlen_q=400)
        cases = (
            (dict(base, max_seqlen_q=None), ValueError, "max_seqlen_q"),
            (dict(base, page_table=torch.empty((2, 512), I32)), ValueError, "page_table must be int32 \\[batch=3"),
            (dict(base, page_table=torch.empty((3, 512), torch.int64)), ValueError, "page_table must be int32"),
            (dict(base, cache_seqlens=torch.empty((4,), I32)), ValueError, "cache_seqlens has 4 entries, 3"),
            (dict(base, cache_seqlens=-1), ValueError, "cache_seqlens=-1"),
            (dict(base, cache_batch_idx=torch.empty((3,), I32)), ValueError, "cache_batch_idx"),
        )
        for kwargs, kind, words in cases:
            with Launches() as rec, self.assertRaisesRegex(kind, words):
                fa4gen.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], **kwargs)
            self.assertEqual(rec.calls, [], words)
        with self.assertRaisesRegex(TypeError, "k is torch.float16 and q is torch.bfloat16"):
            fa4gen.flash_attn_with_kvcache(a["q"], a["k_cache"].to(torch.float16), a["v_cache"], **base)
        with self.assertRaisesRegex(ValueError, "q's head dim is 128 and k's 64"):
            fa4gen.flash_attn_with_kvcache(a["q"], torch.empty((600, 1, 2, 64), BF16),
                                           torch.empty((600, 1, 2, 64), BF16), **base)
        with self.assertRaisesRegex(ValueError, "q has shape \\(700, 16, 128\\)"):
            fa4gen.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], page_table=a["page_table"])
        with self.assertRaisesRegex(ValueError, "k_cache and v_cache are"):
            fa4gen.flash_attn_with_kvcache(a["q"], a["q"], a["q"], **base)
        q = torch.empty((2, 5, 8, 64), BF16)
        small = torch.empty((1, 100, 2, 64), BF16)
        with self.assertRaisesRegex(ValueError, "hold 1 sequences and the batch has 2"):
            fa4gen.flash_attn_with_kvcache(q, small, small)
        with self.assertRaisesRegex(ValueError, "is on cpu"):
            fa4gen.flash_attn_with_kvcache(q, small, torch.empty((1, 100, 2, 64), BF16, device="cpu"))


def fa3_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, seqused_q=None,
               seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
               v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1, pack_gqa=None,
               deterministic=False, sm_margin=0, return_softmax_lse=False, sinks=None, ver=3):
    """FlashAttention-3's flash_attn_varlen_func as sgl_kernel exports it (its signature:
    the positional order differs from FlashAttention-2's), recording its calls."""
    fa3_varlen.calls.append(dict(locals()))
    return "fa3"


fa3_varlen.__name__ = "flash_attn_varlen_func"


class RoutedCalls(unittest.TestCase):
    def setUp(self):
        fa3_varlen.calls = []
        self.q, self.k = torch.empty((900, 16, 128), BF16), torch.empty((1500, 4, 128), BF16)
        self.cq, self.ck = torch.empty((4,), I32), torch.empty((4,), I32)

    def test_prefill_goes_to_fa4gen_with_positional_arguments_kept(self):
        route = fa4gen.routed(fa3_varlen)
        # softmax_scale is FA3's 10th positional argument (FA2's 9th is softmax_scale too,
        # but its 8th is dropout_p where FA3's is seqused_q).
        fields, _, out = launch(lambda: route(self.q, self.k, self.k, self.cq, self.ck, 500, 900, None, None,
                                              0.05, True))
        self.assertEqual((fields["scale"], fields["causal"], fields["seqlen_q"]), (0.05, 1, 500))
        self.assertEqual(out.shape, (900, 16, 128))
        self.assertEqual((fa3_varlen.calls, route.fallbacks), ([], {}))

    def test_decode_and_refused_work_go_to_the_fallback(self):
        route = fa4gen.routed(fa3_varlen)
        with Launches() as rec:
            self.assertEqual(route(self.q, self.k, self.k, self.cq, self.ck, max_seqlen_q=1, max_seqlen_k=900), "fa3")
            self.assertEqual(route(self.q, self.k, self.k, self.cq, self.ck, 500, 900, qv=self.q), "fa3")
            self.assertEqual(route(self.q, self.k, self.k, self.cq, self.ck, 500, 900, seqused_q=self.cq), "fa3")
        self.assertEqual(rec.calls, [])
        self.assertEqual(route.fallbacks, {"fewer than 64 queries a sequence": 1, "qv": 1, "seqused_q": 1})
        self.assertEqual(fa3_varlen.calls[1]["qv"], self.q)
        # The threshold is the caller's.
        fields, _, _ = launch(lambda: fa4gen.routed(fa3_varlen, min_queries=1)(
            self.q, self.k, self.k, self.cq, self.ck, max_seqlen_q=1, max_seqlen_k=900))
        self.assertEqual(fields["seqlen_q"], 1)

    def test_a_problem_no_cubin_serves_goes_to_the_fallback_other_errors_are_raised(self):
        route = fa4gen.routed(fa3_varlen)

        def refuse(code):
            def launch_(*a, **kw):
                raise fa4gen.Fa4genError(code, "head dim 192 (V 128) on sm90: ...")
            return launch_

        saved = fa4gen._launch
        try:
            fa4gen._launch = refuse(fa4gen.ERR_UNSUPPORTED)
            self.assertEqual(route(self.q, self.k, self.k, self.cq, self.ck, 500, 900), "fa3")
            self.assertEqual(list(route.fallbacks), ["unsupported: head dim 192 (V 128) on sm90: ..."])
            fa4gen._launch = refuse(fa4gen.ERR_CUDA)
            with self.assertRaises(fa4gen.Fa4genError):
                route(self.q, self.k, self.k, self.cq, self.ck, 500, 900)
        finally:
            fa4gen._launch = saved
        # A bad shape is the caller's error, whichever kernel would run.
        with self.assertRaisesRegex(ValueError, "head dim is 128 and k's 64"):
            route(self.q, torch.empty((1500, 4, 64), BF16), self.k, self.cq, self.ck, 500, 900)

    def test_a_call_routed_needs_a_name_or_ours(self):
        with self.assertRaisesRegex(ValueError, "name the fa4-gen call"):
            fa4gen.routed(lambda q: q)
        route = fa4gen.routed(lambda q, k, v, **kw: "fa3", ours=fa4gen.flash_attn_func)
        q = torch.empty((2, 300, 8, 64), BF16)
        fields, _, _ = launch(lambda: route(q, q, q, causal=True))
        self.assertEqual(fields["causal"], 1)


class VarlenAndDenseCalls(unittest.TestCase):
    def test_varlen_strides_come_from_the_tensors(self):
        qkv = torch.empty((1200, 3, 8, 64), BF16)  # one packed [tokens, 3, heads, d] buffer
        q, k, v = qkv[:1000, 0], qkv[:, 1, :2], qkv[:, 2, :2]
        cq, ck = torch.empty((4,), I32), torch.empty((4,), I32)
        fields, split, _ = launch(lambda: fa4gen.flash_attn_varlen_func(q, k, v, cq, ck, 500, 600))
        self.assertEqual((fields["q_batch"], fields["q_row"], fields["q_head"]), (0, 3 * 8 * 64, 64))
        self.assertEqual((fields["k_row"], fields["v_row"]), (3 * 8 * 64, 3 * 8 * 64))
        self.assertEqual((fields["q"], fields["k"]), (q.data_ptr(), k.data_ptr()))
        self.assertEqual((fields["batch"], fields["seqlen_q"], fields["seqlen_k"]), (3, 500, 600))
        self.assertEqual((fields["cu_seqlens_q"], fields["cu_seqlens_k"]), (cq.data_ptr(), ck.data_ptr()))
        self.assertEqual((fields["lse_batch"], fields["lse_head"]), (0, 1000))
        self.assertFalse(split)

    def test_varlen_paged_lengths_from_cu_seqlens_k(self):
        a = packed_extend(page_size=16, width=40)
        ck = torch.empty((4,), I32)
        fields, _, _ = launch(lambda: fa4gen.flash_attn_varlen_func(
            a["q"], a["k_cache"], a["v_cache"], a["cu_seqlens_q"], ck, 400, 640, block_table=a["page_table"]))
        # The lengths are cu_seqlens_k's differences, a new tensor; the kernel gets no cu_seqlens_k.
        self.assertEqual(fields["cu_seqlens_k"], 0)
        self.assertNotIn(fields["seqused_k"], (0, ck.data_ptr()))

    def test_dense_windows_scale_and_split(self):
        q, k, v = (torch.empty((2, 300, 8, 128), BF16) for _ in range(3))
        fields, split, _ = launch(lambda: fa4gen.flash_attn_func(q, k, v, window_size=(10, 5)))
        self.assertEqual((fields["window_left"], fields["window_right"]), (10, 5))
        self.assertAlmostEqual(fields["scale"], 128 ** -0.5)
        self.assertTrue(split)
        fields, split, _ = launch(lambda: fa4gen.flash_attn_func(q, k, v, causal=True, softmax_scale=0.5))
        self.assertEqual((fields["causal"], fields["scale"]), (1, 0.5))
        self.assertFalse(split)

    def test_packed_calls_read_their_parts_in_place(self):
        qkv = torch.empty((2, 300, 3, 8, 64), BF16)
        packed, _, _ = launch(lambda: fa4gen.flash_attn_qkvpacked_func(qkv, causal=True))
        views, _, _ = launch(lambda: fa4gen.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True))
        self.assertEqual(without_outputs(packed), without_outputs(views))
        self.assertEqual((packed["q"], packed["k"] - packed["q"], packed["q_row"]), (qkv.data_ptr(), 8 * 64 * 2,
                                                                                    3 * 8 * 64))
        q, kv = torch.empty((2, 100, 8, 64), BF16), torch.empty((2, 300, 2, 2, 64), BF16)
        packed, _, _ = launch(lambda: fa4gen.flash_attn_kvpacked_func(q, kv, return_lse=True))
        views, _, _ = launch(lambda: fa4gen.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], return_lse=True))
        self.assertEqual(without_outputs(packed), without_outputs(views))
        self.assertEqual((packed["heads_kv"], packed["seqlen_k"], packed["k_row"]), (2, 300, 2 * 2 * 64))
        cu = torch.empty((4,), I32)
        qkv = torch.empty((900, 3, 8, 128), BF16)
        packed, _, _ = launch(lambda: fa4gen.flash_attn_varlen_qkvpacked_func(qkv, cu, 400, causal=True))
        views, _, _ = launch(lambda: fa4gen.flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, 400,
                                                                   400, causal=True))
        self.assertEqual(without_outputs(packed), without_outputs(views))
        q, kv, ck = torch.empty((500, 8, 128), BF16), torch.empty((900, 2, 4, 128), BF16), torch.empty((4,), I32)
        packed, _, _ = launch(lambda: fa4gen.flash_attn_varlen_kvpacked_func(q, kv, cu, ck, 300, 400))
        views, _, _ = launch(lambda: fa4gen.flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu, ck, 300, 400))
        self.assertEqual(without_outputs(packed), without_outputs(views))
        self.assertEqual((packed["cu_seqlens_k"], packed["v_row"]), (ck.data_ptr(), 2 * 4 * 128))
        with self.assertRaisesRegex(ValueError, "qkv has shape \\(900, 2, 8, 128\\): \\[total, 3, heads"):
            fa4gen.flash_attn_varlen_qkvpacked_func(torch.empty((900, 2, 8, 128), BF16), cu, 400)
        with self.assertRaisesRegex(ValueError, "kv has shape \\(2, 300, 8, 64\\)"):
            fa4gen.flash_attn_kvpacked_func(q, torch.empty((2, 300, 8, 64), BF16))

    def test_return_attn_probs_returns_the_lse_as_flashattention_2_does(self):
        # FlashAttention-2 callers ask for the LSE with return_attn_probs=True and take
        # (out, lse, S_dmask), S_dmask being None without dropout.
        q, k, v = (torch.empty((2, 300, 8, 128), BF16) for _ in range(3))
        fields, _, (o, lse, probs) = launch(lambda: fa4gen.flash_attn_func(q, k, v, return_attn_probs=True))
        self.assertIsNone(probs)
        self.assertEqual((fields["o"], fields["lse"]), (o.data_ptr(), lse.data_ptr()))
        self.assertEqual(lse.shape, (2, 8, 300))
        cq = torch.empty((3,), I32)
        _, _, result = launch(lambda: fa4gen.flash_attn_varlen_func(q[0], k[0], v[0], cq, cq, 300, 300,
                                                                    return_attn_probs=True))
        self.assertEqual((len(result), result[1].shape, result[2]), (3, (8, 300), None))
        _, _, result = launch(lambda: fa4gen.flash_attn_varlen_func(q[0], k[0], v[0], cq, cq, 300, 300,
                                                                    return_lse=True))
        self.assertEqual(len(result), 2)

    def test_flashattention_3_keywords_as_sglang_passes_them(self):
        # SGLang's DeepSeek prefill over a chunk of cached prefix: Q/K at 192, V at 128,
        # flash_attn_varlen_func by keyword with return_softmax_lse (then merge_state).
        q, k = torch.empty((900, 16, 192), BF16), torch.empty((1500, 16, 192), BF16)
        v = torch.empty((1500, 16, 128), BF16)
        cq, ck = torch.empty((4,), I32), torch.empty((4,), I32)
        call = lambda **kw: launch(lambda: fa4gen.flash_attn_varlen_func(  # noqa: E731
            q=q, k=k, v=v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=500, max_seqlen_k=900,
            softmax_scale=0.08, causal=False, **kw))
        fields, _, (o, lse, *rest) = call(return_softmax_lse=True)
        self.assertEqual((fields["head_dim"], fields["head_dim_v"], o.shape, lse.shape, rest),
                         (192, 128, (900, 16, 128), (16, 900), []))
        for hints in (dict(num_splits=1), dict(pack_gqa=False), dict(ver=3)):
            self.assertEqual(without_outputs(call(**hints)[0]), without_outputs(fields), hints)
        for name, value in (("seqused_q", cq), ("qv", q), ("attention_chunk", 128), ("sm_margin", 8)):
            with Launches() as rec, self.assertRaisesRegex(NotImplementedError, "^%s" % name):
                fa4gen.flash_attn_varlen_func(q, k, v, cq, ck, 500, 900, **{name: value})
            self.assertEqual(rec.calls, [], name)
        qd, kd = torch.empty((2, 300, 8, 128), BF16), torch.empty((2, 300, 8, 128), BF16)
        _, _, (o, lse) = launch(lambda: fa4gen.flash_attn_func(qd, kd, kd, causal=True, return_softmax_lse=True))
        self.assertEqual(lse.shape, (2, 8, 300))
        with self.assertRaisesRegex(ValueError, "^q_descale given with torch.bfloat16 inputs"):
            fa4gen.flash_attn_func(qd, kd, kd, q_descale=torch.empty((2, 8), F32))

    def test_bad_arguments_are_named_before_any_launch(self):
        q, k, v = (torch.empty((2, 300, 8, 128), BF16) for _ in range(3))
        cq = torch.empty((3,), I32)
        cases = (
            (lambda: fa4gen.flash_attn_func(q, k, v, dropout_p=0.1), NotImplementedError, "dropout_p"),
            (lambda: fa4gen.flash_attn_func(q, k[:1], v[:1]), ValueError, "q has batch 2, k 1"),
            (lambda: fa4gen.flash_attn_func(q, torch.Tensor(k.shape, BF16, strides=(1, 2, 600, 4800)), v),
             ValueError, "k's last dim has stride 4800"),
            (lambda: fa4gen.flash_attn_func(q, k, v, out=torch.empty((2, 300, 8, 64), BF16)), ValueError,
             "out is"),
            (lambda: fa4gen.flash_attn_func(q, k, v, sinks=torch.empty((4,), torch.float32)), ValueError,
             "one logit per query head"),
            (lambda: fa4gen.flash_attn_func(q.to(torch.float32), k, v), TypeError, "torch.bfloat16 or"),
            (lambda: fa4gen.flash_attn_varlen_func(q[0], k[0], v[0], cq, None, 300, 300), ValueError,
             "cu_seqlens_k is None"),
            (lambda: fa4gen.flash_attn_varlen_func(q[0], k, v, cq, None, 300, 300,
                                                   block_table=torch.empty((2, 4), I32)), ValueError,
             "needs the key lengths"),
            (lambda: fa4gen.flash_attn_varlen_func(q[0], k[0], v[0], torch.empty((3,), torch.int64), cq, 300,
                                                   300), ValueError, "cu_seqlens_q must be a contiguous"),
        )
        for fn, kind, words in cases:
            with Launches() as rec, self.assertRaisesRegex(kind, words):
                fn()
            self.assertEqual(rec.calls, [], words)


def fa3_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None, cu_seqlens_q=None,
                cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None, q_descale=None, k_descale=None,
                v_descale=None, softmax_scale=None, causal=False, **rest):
    """FlashAttention-3's flash_attn_with_kvcache (its leading arguments), recording its calls."""
    fa3_kvcache.calls.append(dict(locals()))
    return "fa3"


fa3_kvcache.__name__ = "flash_attn_with_kvcache"


class Fp8Calls(unittest.TestCase):
    """e4m3 q/k/v with FlashAttention-3's descales: dtype code 2, a bf16 out, the descale
    pointers and strides after the split workspace."""

    def dense(self, hq=8, hkv=2):
        q = torch.empty((2, 300, hq, 128), E4M3)
        k, v = torch.empty((2, 500, hkv, 128), E4M3), torch.empty((2, 500, hkv, 128), E4M3)
        return q, k, v

    def test_e4m3_packs_dtype_2_a_bf16_out_and_the_descales(self):
        q, k, v = self.dense()
        qd, kd, vd = (torch.empty((2, 2), F32) for _ in range(3))
        fields, split, (o, lse) = launch(lambda: fa4gen.flash_attn_func(
            q, k, v, causal=True, q_descale=qd, k_descale=kd, v_descale=vd, return_lse=True))
        self.assertEqual(fields["dtype"], 2)
        self.assertEqual((o.dtype, o.shape, lse.dtype, lse.shape), (BF16, (2, 300, 8, 128), F32, (2, 8, 300)))
        self.assertEqual((fields["o_row"], fields["o_head"]), (8 * 128, 128))
        # Q/K/V strides in elements, as for bf16: the runtime halves them for the kernel.
        self.assertEqual((fields["q_batch"], fields["q_row"], fields["k_row"]), (300 * 8 * 128, 8 * 128, 2 * 128))
        self.assertEqual((fields["q_descale"], fields["k_descale"], fields["v_descale"]),
                         (qd.data_ptr(), kd.data_ptr(), vd.data_ptr()))
        self.assertEqual((fields["descale_batch"], fields["descale_head"]), (2, 1))
        self.assertFalse(split)
        # out given: bf16 is taken, e4m3 refused.
        out = torch.empty((2, 300, 8, 128), BF16)
        fields, _, o = launch(lambda: fa4gen.flash_attn_func(q, k, v, out=out))
        self.assertEqual((fields["o"], fields["q_descale"]), (out.data_ptr(), 0))
        with self.assertRaisesRegex(ValueError, "out is torch.float8_e4m3fn .*: torch.bfloat16"):
            fa4gen.flash_attn_func(q, k, v, out=torch.empty((2, 300, 8, 128), E4M3))

    def test_a_descale_left_out_is_a_null_pointer(self):
        q, k, v = self.dense()
        kd = torch.empty((2, 2), F32)
        fields, _, _ = launch(lambda: fa4gen.flash_attn_func(q, k, v, k_descale=kd))
        self.assertEqual([fields[n] for n in DESCALE_FIELDS], [0, kd.data_ptr(), 0, 2, 1])
        fields, _, _ = launch(lambda: fa4gen.flash_attn_func(q, k, v))
        self.assertEqual([fields[n] for n in DESCALE_FIELDS], [0, 0, 0, 0, 0])

    def test_descale_strides_are_shared_or_made_so(self):
        q, k, v = self.dense()
        scalar = torch.empty((1,), F32)
        # SGLang's per-tensor scales, expanded: stride 0 both ways, passed as they are.
        per_tensor = scalar.expand(2, 2)
        fields, _, _ = launch(lambda: fa4gen.flash_attn_func(q, k, v, k_descale=per_tensor, v_descale=per_tensor))
        self.assertEqual([fields[n] for n in DESCALE_FIELDS], [0, scalar.data_ptr(), scalar.data_ptr(), 0, 0])
        # A transposed view and a contiguous tensor: the kernel reads one pair of strides,
        # so both are copied contiguous.
        kd, vd = torch.Tensor((2, 2), F32, strides=(1, 2)), torch.empty((2, 2), F32)
        fields, _, _ = launch(lambda: fa4gen.flash_attn_func(q, k, v, q_descale=per_tensor, k_descale=kd,
                                                             v_descale=vd))
        self.assertEqual((fields["descale_batch"], fields["descale_head"]), (2, 1))
        self.assertNotIn(fields["q_descale"], (0, scalar.data_ptr()))
        self.assertNotIn(fields["k_descale"], (0, kd.data_ptr()))
        self.assertEqual(fields["v_descale"], vd.data_ptr())

    def test_varlen_descales_have_a_row_per_sequence(self):
        q = torch.empty((700, 16, 128), E4M3)
        k = torch.empty((900, 2, 128), E4M3)
        cq, ck = torch.empty((4,), I32), torch.empty((4,), I32)
        d = torch.empty((3, 2), F32)
        fields, _, o = launch(lambda: fa4gen.flash_attn_varlen_func(q, k, k, cq, ck, 400, 500, causal=True,
                                                                    q_descale=d, k_descale=d, v_descale=d))
        self.assertEqual((fields["dtype"], fields["batch"], fields["q_descale"], o.dtype), (2, 3, d.data_ptr(), BF16))
        with self.assertRaisesRegex(ValueError, r"k_descale has shape \(4, 2\): .* = \(3, 2\) expected"):
            fa4gen.flash_attn_varlen_func(q, k, k, cq, ck, 400, 500, k_descale=torch.empty((4, 2), F32))

    def test_kvcache_over_dense_e4m3_caches(self):
        q = torch.empty((2, 5, 8, 64), E4M3)
        kc, vc = torch.empty((2, 1000, 2, 64), E4M3), torch.empty((2, 1000, 2, 64), E4M3)
        scale = torch.empty((1,), F32).expand(2, 2)
        fields, _, o = launch(lambda: fa4gen.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=700, k_descale=scale,
                                                                     v_descale=scale))
        self.assertEqual((fields["dtype"], fields["seqlen_k"], fields["k_descale"], o.dtype),
                         (2, 700, scale.data_ptr(), BF16))

    def test_bad_fp8_arguments_are_named_before_any_launch(self):
        q, k, v = self.dense()
        qb, kb = torch.empty((2, 300, 8, 128), BF16), torch.empty((2, 500, 2, 128), BF16)
        good = torch.empty((2, 2), F32)
        cases = (
            (lambda: fa4gen.flash_attn_func(qb, kb, kb, k_descale=good, v_descale=good), ValueError,
             "^k_descale and v_descale given with torch.bfloat16 inputs"),
            (lambda: fa4gen.flash_attn_func(q, k, v, q_descale=torch.empty((2, 2), torch.float16)), ValueError,
             "q_descale is torch.float16: descales are torch.float32"),
            (lambda: fa4gen.flash_attn_func(q, k, v, q_descale=torch.empty((2, 8), F32)), ValueError,
             r"q_descale has shape \(2, 8\): FlashAttention-3's \(batch, num_heads_kv\) = \(2, 2\)"),
            (lambda: fa4gen.flash_attn_func(q, k, v, v_descale=torch.empty((2,), F32)), ValueError,
             r"v_descale has shape \(2,\)"),
            (lambda: fa4gen.flash_attn_func(q, k, v, v_descale=torch.empty((2, 2), F32, device="cpu")), ValueError,
             "v_descale is on cpu"),
            (lambda: fa4gen.flash_attn_func(q, kb, kb), TypeError, "q, k and v are torch.float8_e4m3fn, "
             "torch.bfloat16 and torch.bfloat16: .* a bf16/fp16 q over e4m3 k and v"),
            (lambda: fa4gen.flash_attn_func(qb, k, kb), TypeError, "q, k and v are torch.bfloat16, "
             "torch.float8_e4m3fn and torch.bfloat16"),
            (lambda: fa4gen.flash_attn_func(qb, k, v, q_descale=torch.empty((2, 8), F32)), ValueError,
             r"q_descale has shape \(2, 8\): FlashAttention-3's \(batch, num_heads_kv\) = \(2, 2\)"),
        )
        for fn, kind, words in cases:
            with Launches() as rec, self.assertRaisesRegex(kind, words):
                fn()
            self.assertEqual(rec.calls, [], words)

    def test_a_16_bit_q_over_e4m3_k_and_v_is_quantised_on_the_call(self):
        _, k, v = self.dense()
        for qdtype in (BF16, torch.float16):
            qb = torch.empty((2, 300, 8, 128), qdtype)
            # Without q_descale: a fresh e4m3 q of q's shape and a descale per (sequence, KV head).
            fields, _, o = launch(lambda: fa4gen.flash_attn_func(qb, k, v, causal=True))
            self.assertEqual((fields["dtype"], o.dtype, o.shape), (2, BF16, (2, 300, 8, 128)))
            self.assertNotEqual(fields["q"], qb.data_ptr())
            self.assertNotEqual(fields["q_descale"], 0)
            self.assertEqual((fields["k_descale"], fields["v_descale"]), (0, 0))
            self.assertEqual((fields["q_batch"], fields["q_row"], fields["q_head"]), (300 * 8 * 128, 8 * 128, 128))
        # With one: q divided by it, which the kernel then takes as q's descale.
        qd = torch.empty((2, 2), F32)
        fields, _, _ = launch(lambda: fa4gen.flash_attn_func(qb, k, v, q_descale=qd))
        self.assertEqual((fields["dtype"], fields["q_descale"]), (2, qd.data_ptr()))
        # Packed with cu_seqlens: the descales have a row per sequence.
        q = torch.empty((700, 16, 128), BF16)
        kp = torch.empty((900, 2, 128), E4M3)
        cq, ck = torch.empty((4,), I32), torch.empty((4,), I32)
        fields, _, o = launch(lambda: fa4gen.flash_attn_varlen_func(q, kp, kp, cq, ck, 400, 500, causal=True))
        self.assertEqual((fields["dtype"], fields["batch"], fields["descale_batch"], fields["descale_head"]),
                         (2, 3, 2, 1))
        self.assertEqual(o.shape, (700, 16, 128))

    def test_paged_e4m3_reaches_the_cache_which_may_refuse_it_to_the_fallback(self):
        a = packed_extend()
        q8 = torch.empty((700, 16, 128), E4M3)
        kc8 = torch.empty((600, 1, 2, 128), E4M3)
        scale = torch.empty((1,), F32).expand(3, 2)
        extend = dict(page_table=a["page_table"], cache_seqlens=a["cache_seqlens"], cu_seqlens_q=a["cu_seqlens_q"],
                      max_seqlen_q=400, causal=True, k_descale=scale, v_descale=scale)
        # SGLang's FP8 KV cache: e4m3 over pages, packed as the bf16 call is (the kernel
        # reads the pages in pairs of bytes), with the descales.
        fields, _, o = launch(lambda: fa4gen.flash_attn_with_kvcache(q8, kc8, kc8, **extend))
        self.assertEqual((fields["dtype"], fields["page_table"], fields["page_size"], fields["k_descale"], o.dtype),
                         (2, a["page_table"].data_ptr(), 1, scale.data_ptr(), BF16))
        fields, _, _ = launch(lambda: fa4gen.flash_attn_varlen_func(
            q8, kc8, kc8, a["cu_seqlens_q"], None, 400, 512, block_table=a["page_table"],
            seqused_k=a["cache_seqlens"]))
        self.assertEqual((fields["dtype"], fields["page_table"]), (2, a["page_table"].data_ptr()))
        # A cache built without paged e4m3: the runtime's refusal is "unsupported", which
        # routed hands to the engine's FA3.
        saved = fa4gen._launch

        def not_built(*args, **kw):
            raise fa4gen.Fa4genError(fa4gen.ERR_UNSUPPORTED, "e4m3 causal mask with features paged is not in "
                                     "this cache for sm90 d128; this cache was built without e4m3 over paged K/V")
        try:
            fa4gen._launch = not_built
            fa3_kvcache.calls = []
            route = fa4gen.routed(fa3_kvcache)
            self.assertEqual(route(q8, kc8, kc8, **extend), "fa3")
        finally:
            fa4gen._launch = saved
        self.assertEqual(len(route.fallbacks), 1)
        self.assertIn("built without e4m3 over paged K/V", next(iter(route.fallbacks)))
        self.assertIs(fa3_kvcache.calls[0]["k_descale"], scale)

if __name__ == "__main__":
    unittest.main(verbosity=2)
