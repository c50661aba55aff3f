"""fa4gen.sglang on the host, without SGLang, torch or a GPU: which of SGLang's FlashAttention
calls it routes in each layout the backend module has had, what reaches fa4-gen and what
falls back, and that `python -m fa4gen.sglang` routes the calls in the processes SGLang
spawns.

    python3 tests/python/sglang_route.py        (from the repository root; `cargo test` runs it)

SGLang is a package of stand-ins written to a temporary folder: the backend module in
its layouts, sgl_kernel's two calls (recording, returning "fa3"), and a launch_server
that spawns a scheduler process as SGLang's does.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.path.join(HERE, "..", "..", "python")
sys.path.insert(0, HERE)
sys.path.insert(0, PYTHON)

from host_calls import BF16, I32, Launches, packed_extend, torch  # noqa: E402  (installs fake torch)

import fa4gen  # noqa: E402
import fa4gen.sglang  # noqa: E402


def fa3_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None, cu_seqlens_q=None,
                cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None, q_descale=None, k_descale=None,
                v_descale=None, softmax_scale=None, causal=False, window_size=(-1, -1), attention_chunk=None,
                softcap=0.0, rotary_interleaved=True, scheduler_metadata=None, num_splits=0, pack_gqa=None,
                only_qv=False, sm_margin=0, return_softmax_lse=False, sinks=None, score_mod=None, aux_tensors=None,
                sfq=None, sfk=None, sfv=None, rel_bias=None, rel_bias_prep_cache=None, ver=3, out=None,
                max_seqlen_k=None, mask_mod=None):
    """The flash_attn_with_kvcache SGLang 0.5.23's backend module imports (its dispatcher
    over FA3 and FA4, by ``ver``): FA3's parameters and newer ones."""
    CALLED.append("fa3")
    return "fa3"


def dispatcher(*args, ver=3, **kwargs):
    """SGLang's own dispatcher (from April 2026): FA3 or FA4 by ``ver``."""
    CALLED.append("fa%d" % ver)
    return "fa%d" % ver


def fa4_kvcache(*args, **kwargs):
    CALLED.append("fa4")
    return "fa4"


CALLED = []


def backend(**calls):
    """A stand-in of SGLang's backend module holding `calls` as module globals."""
    module = types.ModuleType("flashattention_backend")
    for name, fn in calls.items():
        setattr(module, name, fn)
    return module


def extend_call(route, **extra):
    """SGLang's extend call (forward_extend's keywords) through `route`."""
    a = packed_extend()
    return route(q=a["q"], k_cache=a["k_cache"], v_cache=a["v_cache"], page_table=a["page_table"],
                 cache_seqlens=a["cache_seqlens"], cu_seqlens_q=a["cu_seqlens_q"],
                 cu_seqlens_k_new=torch.empty((4,), I32), max_seqlen_q=a["max_seqlen_q"], softmax_scale=0.08,
                 causal=True, window_size=(-1, -1), softcap=0.0, k_descale=None, v_descale=None,
                 return_softmax_lse=True, num_splits=0, **extra)


class RouteBackend(unittest.TestCase):
    def setUp(self):
        CALLED.clear()

    def test_module_level_fa3_calls_are_routed_once(self):
        module = backend(flash_attn_with_kvcache=fa3_kvcache, flash_attn_varlen_func=fa3_kvcache)
        routes = fa4gen.sglang.route_backend(module=module)
        self.assertEqual(sorted(routes), ["flash_attn_varlen_func", "flash_attn_with_kvcache"])
        self.assertIs(module.flash_attn_with_kvcache, routes["flash_attn_with_kvcache"])
        self.assertIs(module.flash_attn_with_kvcache.__wrapped__, fa3_kvcache)
        # Routing again keeps the first routes (and their counts).
        again = fa4gen.sglang.route_backend(module=module)
        self.assertIs(again["flash_attn_with_kvcache"], routes["flash_attn_with_kvcache"])
        self.assertIs(module.flash_attn_with_kvcache.__wrapped__, fa3_kvcache)

    def test_extend_reaches_fa4gen_and_the_new_arguments_asking_nothing_are_left_out(self):
        module = backend(flash_attn_with_kvcache=fa3_kvcache)
        fa4gen.sglang.route_backend(module=module)
        with Launches() as rec:
            out, lse = extend_call(module.flash_attn_with_kvcache, sinks=None, score_mod=None, aux_tensors=None,
                                   only_qv=False, rel_bias_prep_cache=None, mask_mod=None, attention_chunk=None,
                                   ver=3, max_seqlen_k=450)
        fields, _ = rec.one()
        self.assertEqual((fields["seqlen_q"], fields["seqlen_k"], fields["causal"], fields["scale"]),
                         (400, 450, 1, 0.08))
        self.assertEqual((out.shape, lse.shape), ((700, 16, 128), (16, 700)))
        self.assertEqual((CALLED, module.flash_attn_with_kvcache.fallbacks), ([], {}))

    def test_decode_and_arguments_that_ask_for_work_go_to_sglangs_call(self):
        module = backend(flash_attn_with_kvcache=fa3_kvcache)
        route = fa4gen.sglang.route_backend(module=module)["flash_attn_with_kvcache"]
        q = torch.empty((8, 1, 16, 128), BF16)
        cache = torch.empty((600, 1, 2, 128), BF16)
        with Launches() as rec:
            self.assertEqual(route(q, cache, cache, page_table=torch.empty((8, 512), I32),
                                   cache_seqlens=torch.empty((8,), I32), causal=True), "fa3")
            self.assertEqual(extend_call(route, score_mod=len), "fa3")
            self.assertEqual(extend_call(route, only_qv=True), "fa3")
            self.assertEqual(extend_call(route, mask_mod=len), "fa3")
        self.assertEqual(rec.calls, [])
        self.assertEqual(route.fallbacks, {"fewer than 64 queries a sequence": 1, "argument 'score_mod'": 1,
                                           "argument 'only_qv'": 1, "argument 'mask_mod'": 1})
        self.assertEqual(fa4gen.sglang.fallbacks(), {})  # the real backend module was never routed

    def test_the_dispatcher_taking_ver_is_routed_by_fa3s_positions(self):
        module = backend(flash_attn_with_kvcache=dispatcher, flash_attn_varlen_func=dispatcher)
        routes = fa4gen.sglang.route_backend(module=module)
        with Launches() as rec:
            extend_call(routes["flash_attn_with_kvcache"], ver=4, sinks=None)
        self.assertEqual(rec.one()[0]["seqlen_q"], 400)
        # Positional calls keep FlashAttention-3's order (softmax_scale is varlen's 10th).
        a = packed_extend()
        k = torch.empty((1500, 2, 128), BF16)
        with Launches() as rec:
            routes["flash_attn_varlen_func"](a["q"], k, k, a["cu_seqlens_q"], torch.empty((4,), I32), 400, 900, None,
                                             None, 0.05, True, ver=3)
        fields = rec.one()[0]
        self.assertEqual((fields["scale"], fields["causal"], fields["seqlen_k"]), (0.05, 1, 900))
        self.assertEqual(CALLED, [])

    def test_aliases_beside_fa4s_route_fa3s_alone(self):
        module = backend(flash_attn_with_kvcache_fa3=fa3_kvcache, flash_attn_with_kvcache_fa4=fa4_kvcache,
                         flash_attn_varlen_func_fa3=fa3_kvcache)
        routes = fa4gen.sglang.route_backend(module=module)
        self.assertEqual(sorted(routes), ["flash_attn_varlen_func_fa3", "flash_attn_with_kvcache_fa3"])
        self.assertIs(module.flash_attn_with_kvcache_fa4, fa4_kvcache)

    def test_a_backend_without_the_calls_is_named(self):
        with self.assertRaisesRegex(RuntimeError, "holds none of flash_attn_with_kvcache.*fa4gen.routed"):
            fa4gen.sglang.route_backend(module=backend(forward=len))
        with self.assertRaises(ImportError):
            fa4gen.sglang.route_backend(module="fa4gen_no_such_sglang.backend")


# The stand-in SGLang: its backend imports sgl_kernel's calls at module level (as through
# 2025), and launch_server spawns the scheduler, which runs one extend and one decode call
# through the backend's names and writes what happened to the file given as --out.
STAND_IN = {
    "sgl_kernel/__init__.py": "",
    "sgl_kernel/flash_attn.py": """
        def flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=None, page_table=None, cu_seqlens_q=None,
                                    max_seqlen_q=None, softmax_scale=None, causal=False, return_softmax_lse=False):
            return "fa3"

        def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                                   softmax_scale=None, causal=False):
            return "fa3"
        """,
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/layers/__init__.py": "",
    "sglang/srt/layers/attention/__init__.py": "",
    "sglang/srt/layers/attention/flashattention_backend.py": """
        from sgl_kernel.flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache

        def forward_extend(**kw):
            return flash_attn_with_kvcache(**kw)
        """,
    "sglang/scheduler.py": """
        import json

        def run_scheduler_process(out):
            import fake_torch as torch
            torch.install()
            import fa4gen
            import fa4gen.sglang
            from sglang.srt.layers.attention import flashattention_backend as fab
            launches = []
            fa4gen._launch = lambda torch_, device, cache, fields, **kw: launches.append(fields[22])  # seqlen_q
            cache = torch.empty((600, 1, 2, 128), torch.bfloat16)
            extend = dict(k_cache=cache, v_cache=cache, page_table=torch.empty((3, 512), torch.int32),
                          cache_seqlens=torch.empty((3,), torch.int32), causal=True)
            fab.forward_extend(q=torch.empty((700, 16, 128), torch.bfloat16),
                               cu_seqlens_q=torch.empty((4,), torch.int32), max_seqlen_q=400, **extend)
            decode = fab.forward_extend(q=torch.empty((3, 1, 16, 128), torch.bfloat16), **extend)
            json.dump(dict(routed=getattr(fab.flash_attn_with_kvcache, "fa4gen_routed", False),
                           launches=launches, decode=decode, fallbacks=fa4gen.sglang.fallbacks()), open(out, "w"))
        """,
    "sglang/launch_server.py": """
        import multiprocessing as mp
        import sys

        from sglang.scheduler import run_scheduler_process

        if __name__ == "__main__":
            assert sys.argv[1] == "--out", sys.argv
            mp.set_start_method("spawn", force=True)
            p = mp.Process(target=run_scheduler_process, args=(sys.argv[2],))
            p.start()
            p.join()
            sys.exit(p.exitcode)
        """,
}


class LaunchServer(unittest.TestCase):
    def test_the_spawned_scheduler_runs_prefill_on_fa4gen(self):
        with tempfile.TemporaryDirectory() as tmp:
            for path, text in STAND_IN.items():
                os.makedirs(os.path.dirname(os.path.join(tmp, path)), exist_ok=True)
                with open(os.path.join(tmp, path), "w") as f:
                    f.write(textwrap.dedent(text))
            out = os.path.join(tmp, "scheduler.json")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, PYTHON, HERE]))
            # The launching process has no torch: routing there imports the stand-in
            # backend only, as SGLang's server process would.
            run = subprocess.run([sys.executable, "-m", "fa4gen.sglang", "--out", out], env=env,
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stderr)
            with open(out) as f:
                seen = json.load(f)
        self.assertEqual(seen, dict(routed=True, launches=[400], decode="fa3",
                                    fallbacks={"flash_attn_with_kvcache": {"fewer than 64 queries a sequence": 1}}))


if __name__ == "__main__":
    unittest.main(verbosity=2)
