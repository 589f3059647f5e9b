"""Timing sweeps replay each graph in the state a default live run replays it in, after the
draft-extend capture SGLang makes last at start-up (``Runner.capture_for_timing``; docs/aiter.md,
Timing): checked on the CPU by the order of captures and timed runs in a tiny profile sweep with
held-out points, and by what a runner keeps and frees."""

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


def test_every_timed_graph_replays_after_the_live_runs_last_start_up_capture(tmp_path):
    """A tiny sweep (graph bs 1 and 3, verify width 1, draft, draft-extend width 2) with 4
    held-out points, on a runner whose ladder is 1-3. Worked out from the rule: a default live
    run captures SGLang's start-up graphs from the largest batch size down, draft-extend last,
    at simulate's default of 4 draft tokens last, so its last capture is ('extend', 1, 4). Each
    timed graph key is captured, then ('extend', 1, 4) is, and every graph run of that key
    comes after both and before any other capture; the runner ends holding none of the sweep's
    graphs and no companion."""
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
                  'left': [list(k) for k in r.graphs if k[0] in ('verify', 'draft', 'extend')],
                  'companions': [list(k) for k in r._companions]}}))
""")
    d = json.loads(out.strip().splitlines()[-1])
    ev = d["events"]
    state = ["extend", 1, 4]
    graph_runs = [i for i, e in enumerate(ev) if e[0] == "run" and e[2]]
    kinds = {ev[i][1][0] for i in graph_runs}
    assert kinds == {"verify", "draft", "extend"}, kinds
    assert sum(ev[i][1][0] == "verify" for i in graph_runs) >= 4  # 2 graphs x 2 KV at least
    for i in graph_runs:
        key = ev[i][1]
        caps = [e[1] for e in ev[:i] if e[0] == "capture"]
        assert caps[-2:] == [key, state], (i, key, caps[-3:])
    # every capture of a timed key is followed at once by the state's
    caps = [e[1] for e in ev if e[0] == "capture"]
    for j, c in enumerate(caps):
        if c != state:
            assert caps[j + 1] == state, (j, c)
    assert d["left"] == [] and d["companions"] == []


def test_capture_for_timing_keeps_and_frees_the_companion():
    """Directly on a runner with ladder 1-2: SGLang's last start-up capture is the draft-extend
    of 1 request at 4 rows. A verify key captures verify, then that graph afresh; the fresh one
    is not left among the replayable graphs (the executor's own capture of it is restored
    untouched); a second call captures nothing; release frees both. A draft key does the same;
    the state's own key captures only itself. Without a draft model the last start-up capture
    is the verify graph of 1 request and 1 row. The ladder's smallest size sets the state."""
    out = run_interpreted(f"""
import json
from backends.aiter.runner import Runner
from backends.models import ModelShape
{LOGGED}
m = ModelShape(name='tiny', layers=1, hidden=64, heads=4, kv_heads=2, head_dim=32,
               intermediate=128, vocab=96)
kw = dict(device='cpu', dtype='float16', max_context=512, kv_pool_bytes=8 << 20)
r = Runner(m, capture_bs=[1, 2], **kw)
x = ('extend', 1, 4)
kept = r.capture(x)
r.capture_for_timing(('verify', 2, 3))
r.capture_for_timing(('verify', 2, 3))
res = {{'events': list(events), 'kept_same': r.graphs.get(x) is kept,
        'companion': ('verify', 2, 3) in r._companions}}
r.release(('verify', 2, 3))
res['after_release'] = [list(k) for k in r.graphs] + [list(k) for k in r._companions]
events.clear()
r.capture_for_timing(('draft', 1))
res['draft'] = list(events)
events.clear()
f = Runner(m, capture_bs=[1, 2], **kw)
f.capture_for_timing(x)
res['state_itself'] = list(events)
events.clear()
n = Runner(m, capture_bs=[1], draft=False, **kw)
res['no_draft'] = n.draft is None
n.capture_for_timing(('verify', 1, 2))
res['other'] = events
res['ladder'] = list(Runner(m, capture_bs=[8, 2, 4], **kw).timing_state_key())
print(json.dumps(res))
""")
    d = json.loads(out.strip().splitlines()[-1])
    x = ["extend", 1, 4]
    assert d["events"] == [["capture", x], ["capture", ["verify", 2, 3]], ["capture", x]]
    assert d["kept_same"] and d["companion"]
    assert d["after_release"] == [x]
    assert d["draft"] == [["capture", ["draft", 1]], ["capture", x]]
    assert d["state_itself"] == [["capture", x]]
    assert d["no_draft"]
    assert d["other"] == [["capture", ["verify", 1, 2]], ["capture", ["verify", 1, 1]]]
    assert d["ladder"] == ["extend", 2, 4]


def test_the_state_width_is_simulates_default_draft_count():
    """The state's width is the draft count a default ``simulate`` run starts at."""
    from backends.aiter.graph_capture import STARTUP_NUM_DRAFT_TOKENS
    from simulator.config import EngineConfig

    assert STARTUP_NUM_DRAFT_TOKENS == EngineConfig().num_draft_tokens == 4
