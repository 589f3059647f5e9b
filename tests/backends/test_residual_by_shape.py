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
