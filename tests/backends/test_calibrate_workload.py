"""``specsched calibrate --trace``: anchors where a workload spends its time
(``backends.calibrate_workload`` and ``backends.calibrate.choose_anchors(weights=...)``), worked
by hand on a tiny grid and run on the shipped 8B profile (CPU, no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.calibrate import choose_anchors
from backends.calibrate_workload import grid_time_weights, workload_config, workload_weights
from backends.heldout import HeldoutPoint

ROOT = Path(__file__).resolve().parents[2]
CONV = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"


def _row(kind, graph, bs, width, kv, tokens):
    return dict(kind=kind, graph=graph, bs=bs, width=width, kv_len=kv, tokens=tokens,
                latency_s=1e-3, p10_s=1e-3, p90_s=1e-3, reps=5, split="grid")


def grid():
    """verify graphs (bs 1, 2, 4, 8) x width 4 x (KV 512, 2048, 8192); draft graphs (bs 1, 8) x
    (KV 512, 8192); prefills of 256, 1,024 and 4,096 tokens at prefix 0."""
    rows = [_row("verify", True, b, 4, kv, 4 * b) for b in (1, 2, 4, 8) for kv in (512, 2048, 8192)]
    rows += [_row("draft", True, b, 1, kv, b) for b in (1, 8) for kv in (512, 8192)]
    rows += [_row("prefill", False, 1, 0, 0, t) for t in (256, 1024, 4096)]
    return rows


def P(kind, graph, bs, width, kv, tokens):
    return HeldoutPoint(kind, graph, bs, width, kv, tokens)


def test_each_pass_lands_on_its_nearest_grid_row_by_time():
    """In log space: a verify graph of 2 requests at KV 600 is nearest (2, 4, 512); one of 7 at
    KV 6,000 nearest (8, 4, 8192); a prefill of 1,000 tokens nearest 1,024.  An eager verify has
    no eager row in this grid and is left out.  Every pass's seconds land on one row."""
    passes = [dict(kind="verify", graph=True, bs=2, width=4, kv=600, tokens=8, latency_s=1.0),
              dict(kind="verify", graph=True, bs=2, width=4, kv=500, tokens=8, latency_s=0.5),
              dict(kind="verify", graph=True, bs=7, width=4, kv=6000, tokens=28, latency_s=2.0),
              dict(kind="prefill", graph=False, bs=1, width=0, kv=0, tokens=1000, latency_s=3.0),
              dict(kind="verify", graph=False, bs=3, width=6, kv=900, tokens=18, latency_s=9.0)]
    w = grid_time_weights(grid(), passes)
    assert w == {P("verify", True, 2, 4, 512, 8): 1.5, P("verify", True, 8, 4, 8192, 32): 2.0,
                 P("prefill", False, 1, 0, 0, 1024): 3.0}


def test_weighted_anchors_by_hand():
    """Weights: verify graphs (2,4,512) 1.0, (2,4,2048) 0.5, (8,4,8192) 0.9, (8,4,512) 0.4,
    (4,4,512) 0.2 (3.0 in all); the 1,024-token prefill 1.0; the draft graphs none.  8 anchors:
    verify 8 x 3/4 = 6, prefill 2; the draft group, unused, gets none.  Verify graph: the
    heaviest max(2, ceil(6/3)) = 2 graphs, (2, 4) at 1.5 and (8, 4) at 1.3, 3 anchors each: its
    weighted rows heaviest first, then its other KV line.  Prefill: only the row the workload
    uses, so 1 of the 2 asked."""
    w = {P("verify", True, 2, 4, 512, 8): 1.0, P("verify", True, 2, 4, 2048, 8): 0.5,
         P("verify", True, 8, 4, 8192, 32): 0.9, P("verify", True, 8, 4, 512, 32): 0.4,
         P("verify", True, 4, 4, 512, 16): 0.2, P("prefill", False, 1, 0, 0, 1024): 1.0}
    pts, rep = choose_anchors(grid(), 8, weights=w)
    assert pts == sorted([P("verify", True, 2, 4, kv, 8) for kv in (512, 2048, 8192)]
                         + [P("verify", True, 8, 4, kv, 32) for kv in (512, 2048, 8192)]
                         + [P("prefill", False, 1, 0, 0, 1024)])
    assert rep == {"verify_graph": {"asked": 6, "chosen": 6, "graphs": 2, "weight_share": 0.75},
                   "prefill": {"asked": 2, "chosen": 1, "graphs": 0, "weight_share": 0.25}}
    assert choose_anchors(list(reversed(grid())), 8, weights=w) == (pts, rep)


def test_weights_of_a_conversation_run_on_the_shipped_8b():
    """The first 40 conversation requests on the shipped 8B profile: every group the run uses
    has weight, the shares add to 1, the same call gives the same weights, and 24 anchors chosen
    by them include the verify graph row the run spends most time nearest."""
    from backends.profile import grid_rows, read_profile
    from backends.shipped import default_profile

    from specsched.setup import load_trace

    base = default_profile("llama-3.1-8b", "H200")
    rows = grid_rows(read_profile(base)[0]).to_pylist()
    cfg = workload_config("llama-3.1-8b", None, base)
    trace = load_trace(CONV, seed=cfg.seed, limit=40)
    w, info = workload_weights(trace, cfg, rows, trace_name=CONV.name)
    assert info["requests"] == 40 and info["trace"] == CONV.name and info["policy"] == "fixed"
    assert {"verify_graph", "draft_graph", "extend_graph", "prefill"} <= set(info["share_by_group"])
    assert sum(info["share_by_group"].values()) == pytest.approx(1.0, abs=1e-3)
    assert workload_weights(trace, cfg, rows, trace_name=CONV.name) == (w, info)
    pts, rep = choose_anchors(rows, 24, weights=w)
    heaviest = max((p for p in w if p.kind == "verify" and p.graph), key=lambda p: w[p])
    assert heaviest in pts
    assert all(w.get(p, 0.0) > 0 or p.graph for p in pts)
    assert sum(r["asked"] for r in rep.values()) >= 24


def test_a_prefill_of_several_requests_without_a_prefix_is_weighed_at_prefix_0():
    """A prefill pass of several requests has an attention-equivalent prefix below 0
    (``lookup_kv``, docs/simulator.md); it is weighed at prefix 0, the grid's lowest."""
    import pyarrow as pa

    from backends.calibrate_workload import _passes

    steps = pa.table({"kind": ["prefill", "verify"], "graph": [False, True], "bs": [3, 2],
                      "bs_padded": [3, 3], "width": [0, 4], "kv_mean": [0.0, 700.0],
                      "lookup_kv": [-918.7, 650.0], "tokens": [1100, 8],
                      "latency_s": [0.05, 0.01]})
    ps = _passes(steps)
    assert ps[0]["kv"] == 0.0 and ps[1] == dict(kind="verify", graph=True, bs=3.0, width=4.0,
                                                kv=650.0, tokens=8.0, latency_s=0.01)
    w = grid_time_weights(grid(), ps)
    assert w == {P("prefill", False, 1, 0, 0, 1024): 0.05, P("verify", True, 4, 4, 512, 16): 0.01}
