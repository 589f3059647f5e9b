"""The live executor's wall-time account (``describe()["wall"]``) under the Triton interpreter:
every call booked by kind, graph captures counted once per distinct key, start-up captures apart,
the timed runs' GPU seconds equal to what the calls returned less the modelled communication."""

from __future__ import annotations

import json

from tests.aiter.conftest import run_interpreted

# A CPU has no CUDA graphs: the stand-in capture runs the graph's eager warm-up and books it
# through the runner's own bookkeeping (Runner._note_capture), as Runner.capture does on a GPU;
# a "replay" then runs eagerly.  The real capture path is covered by test_aiter_gpu.py.
CODE = """
import json, time, numpy as np
from backends.models import ModelShape
from backends.aiter.runner import Runner
from backends.aiter.executor import AiterExecutor
from backends.protocol import DraftBatch, DraftExtendBatch, PrefillBatch, VerifyBatch

def capture(self, key):
    if key in self.graphs:
        return self.graphs[key]
    t0 = time.perf_counter()
    st = self._new_static(key)
    self._stage(st, self._warm_launch(st))
    self._body(st)
    t1 = time.perf_counter()
    self.graphs[key] = st
    self._note_capture(key, t0, t1, t1)
    return st
Runner.capture = capture
eager_run = Runner.run
def run(self, key, launch, *, graph, **kw):
    if graph:
        self.capture(key)
    return eager_run(self, key, launch, graph=False, **kw)
Runner.run = run

m = ModelShape(name='tiny', layers=1, hidden=64, heads=4, kv_heads=2, head_dim=32,
               intermediate=128, vocab=96, tp=2)
r = Runner(m, device='cpu', dtype='float16', max_context=512, capture_bs=[1, 2, 4],
           kv_pool_bytes=8 << 20)
r.capture(('verify', 1, 2))                    # at start-up, as capture='all' does
ex = AiterExecutor(r, model=m, gpu='H200', setup_s=0.5)
before = ex.describe()['wall']

def vb(bs, pad, graph):
    return VerifyBatch(bs_real=bs, bs_padded=pad, widths=np.full(bs, 2),
                       kv_lens=np.arange(bs) * 10 + 20, launch_width=2, mode='uniform', graph=graph)
lat = [ex.verify(vb(1, 1, True)).latency_s,    # captured at start-up: no capture
       ex.verify(vb(3, 4, True)).latency_s,    # captures ('verify', 4, 2)
       ex.verify(vb(3, 4, True)).latency_s,    # the same key: no capture
       ex.verify(vb(3, 4, False)).latency_s,   # eager
       ex.draft(DraftBatch(bs_real=2, bs_padded=2, kv_lens=np.array([7, 9]), passes=2,
                           graph=True)),       # captures ('draft', 2) once for both passes
       ex.draft_extend(DraftExtendBatch(bs_real=1, bs_padded=1, width=2,
                                        kv_lens=np.array([30]), graph=True)),  # ('extend', 1, 2)
       ex.prefill(PrefillBatch(tokens=np.array([8, 5]), prefix=np.array([0, 0])))]
ex.prefill(PrefillBatch(tokens=np.array([0]), prefix=np.array([0])))  # nothing to run
d = ex.describe()
print(json.dumps({'before': before, 'wall': d['wall'], 'calls': d['calls'], 'lat': lat,
                  'timing': d['runner']['timing']}))
"""


def test_live_executor_accounts_for_its_wall_time():
    out = json.loads(run_interpreted(CODE).strip().splitlines()[-1])
    before, w = out["before"], out["wall"]
    # before any call: nothing booked but the start-up capture and the setup time given
    assert before["span_s"] == 0 and before["calls_s"] == 0 and before["engine_s"] == 0
    assert before["captures"]["count"] == 0 and before["captures"]["at_setup"]["count"] == 1
    assert before["setup_s"] == 0.5 and before["gpu_s"] == 0
    assert all(v == {"calls": 0, "wall_s": 0, "gpu_s": 0, "comm_s": 0}
               for v in before["by_call"].values())
    # captures during calls: one per distinct key; by_kind counts the start-up one too
    cap = w["captures"]
    assert cap["count"] == 3 and cap["at_setup"]["count"] == 1
    assert {k: v["count"] for k, v in cap["by_kind"].items()} == {"draft": 1, "extend": 1,
                                                                  "verify": 2}
    assert cap["s"] > 0 and cap["at_setup"]["s"] > 0
    assert all(v >= 0 for v in cap["phase_s"].values())
    # every call booked under its kind, with wall time
    assert {k: v["calls"] for k, v in w["by_call"].items()} == {"verify": 4, "draft": 1,
                                                                "draft_extend": 1, "prefill": 2}
    assert all(v["wall_s"] > 0 for v in w["by_call"].values())
    # (graph / eager count verify and draft-extend launches: 3 + 1 replayed, 1 eager)
    assert out["calls"]["graph"] == 4 and out["calls"]["eager"] == 1
    # the GPU (here: host) seconds of the timed runs plus the modelled all-reduces (tp 2) are
    # what the calls returned (each figure rounded to 1 us)
    assert w["comm_s"] > 0
    assert abs(w["gpu_s"] + w["comm_s"] - sum(out["lat"])) < 3e-6
    # the timed runs' wall holds their measured part; a CPU runs every eager shape's first
    # launch untimed and holds nothing
    assert w["timed_s"] >= w["gpu_s"] and w["warmup_s"] > 0 and w["hold_s"] == 0
    assert w["rerun_s"] == 0
    # the parts of the calls' wall leave a non-negative remainder, the calls fit in the span
    assert w["executor_other_s"] >= -2e-6
    assert w["span_s"] >= w["calls_s"] > 0 and w["engine_s"] >= 0
    assert abs(w["span_s"] - w["calls_s"] - w["engine_s"]) <= 2e-6
    # the runner's own record agrees
    assert out["timing"]["wall_s"]["capture"] >= cap["s"] + cap["at_setup"]["s"] - 2e-3  # 1 ms
