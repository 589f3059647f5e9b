"""AITER's Triton kernels through the bridge, on the CPU with the Triton interpreter.

The interpreter runs the very kernels the GPU runs, element by element, so these are real tests
of the bridge, of the attention metadata and of the executor's forward pass -- in float16
(bfloat16 is mis-handled by Triton 3.9's interpreter) and on tiny shapes.  Each runs in its own
process because ``TRITON_INTERPRET`` must be set before Triton compiles anything.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.aiter.conftest import INTERPRETED_MARKS, ROOT, cpu_profiler_prelude, run_interpreted

pytestmark = INTERPRETED_MARKS

PRELUDE = """
import json, math, numpy as np, torch
from backends.aiter import bridge
k = bridge.load_kernels()
torch.manual_seed(0)
"""


def test_bridge_loads_triton_kernels_without_the_package_init():
    out = run_interpreted(PRELUDE + """
import sys
m = sys.modules['aiter']
print(json.dumps({'runtime': k.runtime, 'arch': k.arch, 'stub': getattr(m, '__specsched_bridge__', False),
                  'ops_stub': getattr(sys.modules['aiter.ops'], '__specsched_bridge__', False),
                  'versions': bridge.versions()}))
""")
    d = json.loads(out.strip().splitlines()[-1])
    assert d["runtime"] == "interpreter" and d["arch"] == "interpreter"
    assert d["stub"] is True and d["ops_stub"] is True      # aiter/__init__.py never ran
    assert d["versions"]["aiter"] != "unknown"


def test_amd_only_launch_keywords_are_dropped_for_aiter_kernels():
    code = """
import triton
from triton.runtime import jit
seen = []
def recorder(self, *args, **kwargs):
    seen.append(sorted(kwargs))
jit.JITFunction.run = recorder
from backends.aiter import bridge
bridge._patch_launches()
bridge._patch_launches()  # idempotent
class F: pass
aiter_fn = F(); aiter_fn.module = 'aiter.ops.triton._triton_kernels.x'
own_fn = F(); own_fn.module = 'backends.aiter.model'
jit.JITFunction.run(aiter_fn, grid=(1,), warmup=False, num_warps=2, waves_per_eu=2, kpack=2, matrix_instr_nonkdim=16)
jit.JITFunction.run(own_fn, grid=(1,), warmup=False, num_warps=2, waves_per_eu=2)
print(seen)
"""
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    seen = eval(res.stdout.strip().splitlines()[-1])  # noqa: S307 - our own printed list
    assert seen[0] == ["grid", "num_warps", "warmup"]
    assert "waves_per_eu" in seen[1]                      # other kernels are left alone


def test_unified_attention_matches_reference_uniform_ragged_and_unsafe():
    out = run_interpreted(PRELUDE + """
from backends.aiter.uniformity import reference_attention
dt = torch.float16
H, KH, D, page, pages = 4, 2, 32, 16, 96
kc = torch.randn(pages, page, KH, D, dtype=dt); vc = torch.randn_like(kc)
res = {}
for name, widths, kv in (('uniform', [4, 4, 4], [20, 70, 5]), ('ragged', [1, 5, 3, 8], [33, 2, 64, 17])):
    bs = len(widths); T = sum(widths)
    bt = torch.randperm(pages)[: bs * 8].view(bs, 8).to(torch.int32)
    q = torch.randn(T, H, D, dtype=dt)
    cu = torch.tensor([0] + list(np.cumsum(widths)), dtype=torch.int32)
    sk = torch.tensor([a + b for a, b in zip(kv, widths)], dtype=torch.int32)
    out = torch.full_like(q, float('nan'))
    k.unified_attention(q, kc, vc, out, cu, max(widths), sk, 8 * page, D ** -0.5, True, (-1, -1), bt, 0, None, None, None)
    ref = reference_attention(q, kc, vc, bt, cu, sk, D ** -0.5)
    res[name] = [float((out.float() - ref).abs().max()), float(ref.abs().max())]
print(json.dumps(res))
""")
    d = json.loads(out.strip().splitlines()[-1])
    for name, (err, scale) in d.items():
        assert err < 2e-3 * max(1.0, scale), (name, err)


def test_uniformity_check_measures_the_error_of_derived_metadata():
    out = run_interpreted("""
import json
from backends.models import ModelShape
from backends.aiter.uniformity import uniformity_check
m = ModelShape(name='tiny', layers=1, hidden=64, heads=4, kv_heads=2, head_dim=32, intermediate=64, vocab=64)
mixed = uniformity_check(m, widths=[4, 4, 2], kv_lens=[20, 37, 50], max_context=256)
same = uniformity_check(m, widths=[3, 3, 3], kv_lens=[20, 37, 50], max_context=256)
print(json.dumps({'mixed': mixed, 'same': same}))
""")
    d = json.loads(out.strip().splitlines()[-1])
    mixed, same = d["mixed"], d["same"]
    assert mixed["misattributed_rows"] == 4 and mixed["misattributed_frac"] == pytest.approx(0.4)
    assert mixed["rows_not_computed"] == 1                 # row 9 is past bs x width
    assert mixed["max_abs_error_exact_vs_reference"] < 2e-3
    assert mixed["max_abs_error"] > 0.1                    # measurably wrong
    assert mixed["max_abs_error_derived_vs_reference"] > 0.1
    assert same["max_abs_error"] == 0.0 and same["misattributed_rows"] == 0 and not same["mixed"]


def test_runner_forward_passes_and_executor_protocol():
    out = run_interpreted("""
import json, numpy as np, torch
from backends.models import ModelShape
from backends.aiter.runner import Runner, _fill_meta_numpy, _fill_meta_jit
from backends.aiter.executor import AiterExecutor
from backends.protocol import VerifyBatch, DraftBatch, PrefillBatch, Executor
m = ModelShape(name='tiny', layers=2, hidden=64, heads=4, kv_heads=2, head_dim=32, intermediate=128, vocab=96)
r = Runner(m, device='cpu', dtype='float16', max_context=512, capture_bs=[1, 2, 4], kv_pool_bytes=8 << 20)
ex = AiterExecutor(r, model=m, gpu='H200', check_unsafe=True)
res = {'protocol': isinstance(ex, Executor)}
v = ex.verify(VerifyBatch(bs_real=3, bs_padded=4, widths=np.array([3, 3, 3]), kv_lens=np.array([10, 40, 100]),
                          launch_width=3, mode='uniform', graph=False))
st = r.graphs[('eager', 'verify', 3, 3)]
res['uniform'] = [v.latency_s, bool(torch.isfinite(st.out).all()), list(st.out.shape)]
res['uniform_meta'] = [st.qo.tolist(), st.seqused_k.tolist(), st.positions.tolist(), st.slots.tolist(),
                       st.block_table[:, :3].tolist()]
u = ex.verify(VerifyBatch(bs_real=3, bs_padded=4, widths=np.array([4, 4, 2]), kv_lens=np.array([10, 40, 100]),
                          launch_width=3, mode='unsafe-derived', graph=False))
res['unsafe'] = [u.misattributed_rows, u.max_abs_error]
g = ex.verify(VerifyBatch(bs_real=3, bs_padded=4, widths=np.array([4, 1, 2]), kv_lens=np.array([10, 40, 100]),
                          launch_width=2, mode='ragged', graph=False))
st = r.graphs[('eager', 'ragged', 3, 3)]
res['ragged'] = [g.latency_s, bool(torch.isfinite(st.out).all()), st.qo.tolist(), st.positions.tolist()]
res['draft'] = ex.draft(DraftBatch(bs_real=2, bs_padded=2, kv_lens=np.array([7, 9]), passes=2, graph=False))
res['prefill'] = ex.prefill(PrefillBatch(tokens=np.array([12, 0]), prefix=np.array([0, 3])))
res['table'] = ex.latency_table()
res['describe'] = sorted(ex.describe())
# the compiled and numpy metadata fillers agree
rng = np.random.default_rng(0)
for _ in range(50):
    n = int(rng.integers(1, 40))
    kv = rng.integers(1, 5000, n); aw = rng.integers(1, 9, n); qw = rng.integers(0, 9, n)
    outs = []
    for f in (_fill_meta_numpy, _fill_meta_jit):
        sk = np.zeros(n, np.int32); stt = np.zeros(n + 1, np.int32); sl = np.zeros(n + 1, np.int32)
        f(kv, aw, qw, 16, 1000, sk, stt, sl)
        outs.append((sk.tolist(), stt.tolist(), sl.tolist()))
    assert outs[0] == outs[1], outs
print(json.dumps(res))
""")
    d = json.loads(out.strip().splitlines()[-1])
    assert d["protocol"] is True
    lat, finite, shape = d["uniform"]
    assert lat > 0 and finite and shape == [9, 96]
    qo, sk, pos, slots, bt = d["uniform_meta"]
    assert qo == [0, 3, 6, 9] and sk == [13, 43, 103]
    assert pos == [10, 11, 12, 40, 41, 42, 100, 101, 102]
    # request i owns pages starting at start_i; slot = page * 16 + pos % 16
    starts = [row[0] for row in bt]
    assert bt[1] == [starts[1], starts[1] + 1, starts[1] + 2]
    assert slots[0] == starts[0] * 16 + 10
    assert slots[3] == (starts[1] + 40 // 16) * 16 + 40 % 16
    assert d["unsafe"][0] == 4 and d["unsafe"][1] > 0.05
    lat, finite, qo, pos = d["ragged"]
    assert finite and qo == [0, 4, 5, 7, 9]                # eager: 9 rows, 2 owned by an extra sequence
    assert pos[:7] == [10, 11, 12, 13, 40, 100, 101]
    assert d["draft"] > 0 and d["prefill"] > 0 and d["table"] is None
    assert {"backend", "gpu", "versions", "kernels", "caveats"} <= set(d["describe"])


def test_draft_extend_forward_under_the_interpreter():
    """The draft-extend pass of both EAGLE drafts at a tiny shape: its metadata (``width`` rows
    per request after each request's KV, padded rows at the fill length), finite logits for each
    request's last row, equal to those rows of a run computing every row's logits."""
    out = run_interpreted("""
import json, numpy as np, torch
from backends.models import ModelShape
from backends.aiter.runner import Runner
from backends.aiter.executor import AiterExecutor
from backends.protocol import DraftBatch, DraftExtendBatch, Executor
res = {}
for kind in ('eagle', 'eagle3'):
    m = ModelShape(name='tiny', layers=2, hidden=64, heads=4, kv_heads=2, head_dim=32,
                   intermediate=128, vocab=96, draft_kind=kind)
    logits = {}
    for lg in ('last', 'all'):
        r = Runner(m, device='cpu', dtype='float16', max_context=512, capture_bs=[1, 2, 4],
                   kv_pool_bytes=8 << 20, extend_logits=lg)
        ex = AiterExecutor(r, model=m, gpu='H200')
        t = ex.draft_extend(DraftExtendBatch(bs_real=3, bs_padded=4, width=3,
                                             kv_lens=np.array([10, 40, 100]), graph=False))
        st = r.graphs[('eager', 'extend', 3, 3)]
        logits[lg] = st.out.float()
        res[kind + '_' + lg] = [t, list(st.out.shape), bool(torch.isfinite(st.out).all()),
                                st.qo.tolist(), st.seqused_k.tolist(), st.positions.tolist(),
                                list(st.hidden.shape), r.describe()['draft_role'], ex.calls['draft_extend']]
    res[kind + '_match'] = float((logits['last'] - logits['all'][[2, 5, 8]]).abs().max())
    # the padded launch a graph replays (run eagerly here: no graphs on a CPU)
    launch, key = r.extend_launch(np.array([10, 40, 100]), 4, 3)
    tp = r.run(key, launch, graph=False)[0]
    st = r.graphs[('eager', 'extend', 4, 3)]
    res[kind + '_padded'] = [key, tp.latency_s, st.seq_lens[:4].tolist(), st.seqused_k.tolist(),
                             st.positions[9:].tolist(), bool(torch.isfinite(st.out).all()), r.fill]
    res[kind + '_decode'] = ex.draft(DraftBatch(bs_real=2, bs_padded=2, kv_lens=np.array([7, 9]),
                                                passes=2, graph=False))
    res[kind + '_protocol'] = isinstance(ex, Executor)
print(json.dumps(res))
""")
    d = json.loads(out.strip().splitlines()[-1])
    for kind, hidden in (("eagle", 64), ("eagle3", 3 * 64)):
        for lg, rows in (("last", 3), ("all", 9)):
            lat, shape, finite, qo, sk, pos, hid, role, calls = d[f"{kind}_{lg}"]
            assert lat > 0 and finite and shape == [rows, 96] and role == kind and calls == 1
            assert qo == [0, 3, 6, 9] and sk == [13, 43, 103]
            assert pos == [10, 11, 12, 40, 41, 42, 100, 101, 102]
            assert hid == [9, hidden]   # EAGLE-3 reads the target's 3 layers, fused by fc
        assert d[f"{kind}_match"] == 0.0
        key, lat, seq_lens, sk, pos_pad, finite, fill = d[f"{kind}_padded"]
        assert key == ["extend", 4, 3] and lat > 0 and finite
        assert seq_lens == [10, 40, 100, fill] and sk == [13, 43, 103, fill + 3]
        assert pos_pad == [fill, fill + 1, fill + 2]
        assert d[f"{kind}_decode"] > 0 and d[f"{kind}_protocol"] is True


def test_profile_sweep_records_draft_extend_rows_under_the_interpreter(tmp_path):
    """``run_profile`` end to end at a tiny shape: every section runs (graph sections launched
    eagerly -- a CPU has no graphs), the file holds draft_extend rows and loads with measured
    draft-extend grids."""
    out_file = tmp_path / "tiny.parquet"
    out = run_interpreted(f"""
import json
from backends.aiter import bridge, executor
from backends.aiter.runner import Runner
from backends.aiter.profiling import ProfileSpec, run_profile
from backends.models import ModelShape
from backends.profile import load_profile, read_profile

{cpu_profiler_prelude('[1, 2]')}
m = ModelShape(name='tiny', layers=1, hidden=64, heads=4, kv_heads=2, head_dim=32,
               intermediate=128, vocab=96, draft_kind='eagle3')
spec = ProfileSpec(bs=(1, 2), widths=(1,), kv=(16, 64), eager_bs=(1, 2), eager_widths=(1,),
                   eager_kv=(16, 64), extend_widths=(2,), extend_eager_widths=(1,),
                   prefill_tokens=(8,), prefill_prefix=(0,), reps=1, warmup=0, eager_reps=1,
                   settle_s=0.0)
summary = run_profile(m, {str(out_file)!r}, spec, command='pytest')
rows, meta = read_profile({str(out_file)!r})
t = load_profile({str(out_file)!r})
ext = [r for r in rows.to_pylist() if r['kind'] == 'draft_extend']
print(json.dumps({{'rows': summary['rows'], 'ext': [[r['graph'], r['bs'], r['width'], r['kv_len'], r['tokens']] for r in ext],
                  'measured': t.extend_measured, 'src': t.source['draft_extend'],
                  'axes': [a.tolist() for a in t.extend_graph.axes],
                  'notes': [n for n in meta['notes'] if isinstance(n, str) and 'draft' in n],
                  'kind': meta['model']['draft_kind'], 'timing': [sorted(n['timing_s']) for n in meta['notes'] if isinstance(n, dict) and 'timing_s' in n][0]}}))
""")
    d = json.loads(out.strip().splitlines()[-1])
    graph = [[True, b, 2, kv, 2 * b] for b in (1, 2) for kv in (16, 64)]
    eager = [[False, b, 1, kv, b] for b in (1, 2) for kv in (16, 64)]
    assert sorted(d["ext"]) == sorted(graph + eager)
    assert d["measured"] and d["src"] == "measured: 4 graph and 4 eager rows"
    assert d["axes"] == [[1.0, 2.0], [2.0], [16.0, 64.0]]
    assert d["kind"] == "eagle3" and "draft_extend_s" in d["timing"]
    assert any("EAGLE-3 draft decode step" in n for n in d["notes"])
    assert any(n.startswith("draft_extend rows") and "fusion GEMM" in n and "last row" in n
               for n in d["notes"])
