"""benchmarks/residual_by_shape.py: cells of (kind, padded batch size, KV band), worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_cells_take_the_median_of_each_shape_and_skip_thin_ones():
    """20 verify steps at bs 4 and KV 1,000 with residuals 0..19 (median 9.5); 15 draft steps at
    bs 4 and KV 9,000, all +2; 14 verify steps at bs 8 (under MIN_STEPS, left out); NaN residuals
    (a kind the profile cannot predict) are not counted."""
    import residual_by_shape as m

    kind = ["verify"] * 20 + ["draft"] * 15 + ["verify"] * 14 + ["verify"]
    bs = [4] * 35 + [8] * 14 + [4]
    kv = [1000] * 20 + [9000] * 15 + [1000] * 14 + [1000]
    resid = list(range(20)) + [2.0] * 15 + [5.0] * 14 + [np.nan]
    s = {"kind": np.array(kind), "bs_padded": np.array(bs, float), "kv_mean": np.array(kv, float),
         "resid": np.array(resid, float), "start_s": np.arange(len(kind), dtype=float)}
    got = m.cells(s)
    assert got == {("verify", 4, 0): (pytest.approx(9.5), 20), ("draft", 4, 8192): (2.0, 15)}


def test_capture_intervals_cut_at_each_graphs_first_use_and_restart_in_a_new_process():
    """A run's steps: verify graphs at padded bs 2 (20 steps, residual 0), then the first use of
    bs 24 (one step, large: not counted at small batches), then bs 2 again (16 steps, +3), then a
    new sitting from step 37 whose first bs-2 step is a capture again (16 steps, -1); eager steps
    and prefills never capture and are not counted. Worked by hand: rows at steps 0, 20 and 37."""
    import residual_by_shape as m

    kind = ["verify"] * 20 + ["verify"] + ["verify"] * 16 + ["verify"] * 16 + ["prefill", "verify"]
    bs = [2] * 20 + [24] + [2] * 16 + [2] * 16 + [1, 3]
    graph = [True] * 53 + [False, False]
    resid = [0.0] * 20 + [9.0] + [3.0] * 16 + [-1.0] * 16 + [50.0, 50.0]
    n = len(kind)
    s = {"kind": np.array(kind), "bs_padded": np.array(bs, float), "width": np.full(n, 4),
         "graph": np.array(graph), "resid": np.array(resid), "start_s": np.arange(n, dtype=float),
         "kv_mean": np.zeros(n)}
    rows = m.capture_intervals(s, resets=(37,))
    assert [(r["from_step"], r["captured"], r["median"]) for r in rows] == [
        (0, ["verify 2 4"], {"verify": (0.0, 20)}),
        (20, ["verify 24 4"], {"verify": (3.0, 16)}),
        (37, ["(new process)", "verify 2 4"], {"verify": (-1.0, 16)})]


def test_machine_state_takes_small_graph_replays_and_every_prefill():
    """benchmarks/machine_state.py, worked by hand: 20 verify graphs at bs 4 (residual +2), 16
    draft graphs at bs 8 (0..15, median 7.5), 10 draft-extend graphs (under MIN_STEPS: none), an
    eager verify and a verify graph at bs 16 (both +50, not small graph replays: left out), 15
    prefills (-1, eager, counted). Over steps 20:36 only the draft graphs remain."""
    import machine_state as m

    kind = (["verify"] * 20 + ["draft"] * 16 + ["draft_extend"] * 10 + ["verify", "verify"]
            + ["prefill"] * 15)
    n = len(kind)
    bs = [4] * 20 + [8] * 16 + [2] * 10 + [4, 16] + [1] * 15
    graph = [True] * 46 + [False, True] + [False] * 15
    resid = [2.0] * 20 + list(range(16)) + [0.0] * 10 + [50.0, 50.0] + [-1.0] * 15
    s = {"kind": np.array(kind), "bs_padded": np.array(bs, float), "graph": np.array(graph),
         "resid": np.array(resid, float)}
    assert m.state(s, 0, n) == {"verify": (2.0, 20), "draft": (7.5, 16), "draft_extend": None,
                                "prefill": (-1.0, 15)}
    assert m.state(s, 20, 36) == {"verify": None, "draft": (7.5, 16), "draft_extend": None,
                                  "prefill": None}


def test_machine_state_cuts_a_run_into_its_sittings(tmp_path):
    """Two journal segments on two GPUs whose calls add up to the steps: two sittings, each with
    its GPU; calls that do not add up: one sitting, on ``several`` GPUs; one segment: one
    sitting on the summary's GPU."""
    import json

    import machine_state as m

    segs = [{"first_call": 0, "gpu": {"uuid": "aaaaaaaa-1"}},
            {"first_call": 30, "gpu": {"uuid": "bbbbbbbb-2"}}]
    detail = {"gpu": {"uuid": "bbbbbbbb-2"},
              "journal": {"replayed_calls": 30, "live_calls": 20, "segments": segs}}
    (tmp_path / "summary.json").write_text(json.dumps({"backend_detail": detail}))
    assert m.sittings(tmp_path, 50) == [(0, 30, "aaaaaaaa"), (30, 50, "bbbbbbbb")]
    assert m.sittings(tmp_path, 51) == [(0, 51, "several")]
    detail["journal"] = {"replayed_calls": 0, "live_calls": 50, "segments": segs[1:]}
    (tmp_path / "summary.json").write_text(json.dumps({"backend_detail": detail}))
    assert m.sittings(tmp_path, 50) == [(0, 50, "bbbbbbbb")]
