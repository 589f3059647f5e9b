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
