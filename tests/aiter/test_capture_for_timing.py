"""Timing sweeps replay each verify graph as a live run does, after a draft-extend capture at its
batch size (``Runner.capture_for_timing``; docs/aiter.md, Timing): checked on the CPU by the
order of captures and timed runs in a tiny profile sweep with held-out points, and by what a
runner keeps and frees."""

from __future__ import annotations

import json

from tests.aiter.conftest import INTERPRETED_MARKS, TINY_PROFILE, cpu_profiler_prelude, run_interpreted

pytestmark = INTERPRETED_MARKS

# After the CPU prelude: a capture books its key in a log and keeps a stand-in graph (a CPU has
# none); every run is logged with its key and whether it asked for the graph.
LOGGED = """
events = []
def capture(self, key):
    if key in self.graphs:
        return self.graphs[key]
    events.append(['capture', list(key)])
    self.graphs[key] = ('stand-in', key)
    return self.graphs[key]
Runner.capture = capture
plain_run = Runner.run
def logged_run(self, key, launch, graph, **kw):
    events.append(['run', list(key), bool(graph)])
    return plain_run(self, key, launch, graph=graph, **kw)
Runner.run = logged_run
"""


def test_every_timed_verify_replay_follows_a_draft_extend_capture_of_its_batch_size(tmp_path):
    """A tiny sweep (graph bs 1 and 3, width 1) with 4 held-out points. Worked out from the
    rule: each verify graph (bs, w) is captured, then ('extend', bs, max(2, w)) is, and every graph run of that verify key comes after both and before
    any other capture; the runner ends holding no verify graph and no companion."""
    out = run_interpreted(f"""
import json
from backends.aiter import bridge, executor
from backends.aiter.runner import Runner
from backends.aiter.profiling import ProfileSpec, run_profile
from backends.models import ModelShape

{cpu_profiler_prelude('[1, 2, 3]')}
{LOGGED}
made = []
make0 = executor.make_executor
executor.make_executor = lambda model, **kw: made.append(make0(model, **kw)) or made[-1]
{TINY_PROFILE}
run_profile(m, {str(tmp_path / 'tiny.parquet')!r}, spec, command='pytest', heldout=4, heldout_seed=5)
r = made[0].runner
print(json.dumps({{'events': events,
                  'left': [list(k) for k in r.graphs if k[0] == 'verify'],
                  'companions': [list(k) for k in r._companions]}}))
""")
    d = json.loads(out.strip().splitlines()[-1])
    ev = d["events"]
    verify_runs = [i for i, e in enumerate(ev) if e[0] == "run" and e[1][0] == "verify" and e[2]]
    assert len(verify_runs) >= 4  # the grid's 2 graphs x 2 KV points at least
    for i in verify_runs:
        key = ev[i][1]
        caps = [e[1] for e in ev[:i] if e[0] == "capture"]
        assert caps[-2:] == [key, ["extend", key[1], max(2, key[2])]], (i, key, caps[-3:])
    # both captures of a verify key happen once per stretch of its runs, verify first
    caps = [e[1] for e in ev if e[0] == "capture"]
    for j, c in enumerate(caps):
        if c[0] == "verify":
            assert caps[j + 1] == ["extend", c[1], max(2, c[2])]
    assert d["left"] == [] and d["companions"] == []


def test_capture_for_timing_keeps_and_frees_the_companion():
    """Directly on a runner: a verify key captures verify then draft-extend; the draft-extend
    graph is not left among the replayable graphs (the live executor's own capture of it is
    untouched: one kept before is captured afresh and then restored); a second call captures
    nothing; release frees both; other kinds and a runner without a draft capture only the key."""
    out = run_interpreted(f"""
import json
from backends.aiter.runner import Runner
from backends.models import ModelShape
{LOGGED}
m = ModelShape(name='tiny', layers=1, hidden=64, heads=4, kv_heads=2, head_dim=32,
               intermediate=128, vocab=96)
r = Runner(m, device='cpu', dtype='float16', max_context=512, capture_bs=[1, 2], kv_pool_bytes=8 << 20)
x = ('extend', 2, 3)
kept = r.capture(x)
r.capture_for_timing(('verify', 2, 3))
r.capture_for_timing(('verify', 2, 3))
res = {{'events': list(events), 'kept_same': r.graphs.get(x) is kept,
        'companion': ('verify', 2, 3) in r._companions}}
r.release(('verify', 2, 3))
res['after_release'] = [list(k) for k in r.graphs] + [list(k) for k in r._companions]
events.clear()
r.capture_for_timing(('draft', 1))
n = Runner(m, device='cpu', dtype='float16', max_context=512, capture_bs=[1], kv_pool_bytes=8 << 20,
           draft=False)
res['no_draft'] = n.draft is None
n.capture_for_timing(('verify', 1, 2))
res['other'] = events
print(json.dumps(res))
""")
    d = json.loads(out.strip().splitlines()[-1])
    x = ["extend", 2, 3]
    assert d["events"] == [["capture", x], ["capture", ["verify", 2, 3]], ["capture", x]]
    assert d["kept_same"] and d["companion"]
    assert d["after_release"] == [x]
    assert d["no_draft"]
    assert d["other"] == [["capture", ["draft", 1]], ["capture", ["verify", 1, 2]]]
