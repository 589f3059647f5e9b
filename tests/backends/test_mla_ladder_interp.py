"""benchmarks/mla_ladder_interp.py: each interior batch size left out and predicted from its
neighbours, worked by hand on small grids."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_a_grid_linear_in_batch_size_is_predicted_exactly():
    import mla_ladder_interp as m

    g = {(b, w, kv): 1e-3 * (1 + 0.5 * b + 0.01 * w + kv / 1e4)
         for b in (1, 2, 4, 8) for w in (1, 4) for kv in (512, 2048, 8192)}
    e = m.left_out_errors(g)
    assert len(e) == 2 * 2 * 2  # bs 2 and 4, two widths, the two longest KV lines
    np.testing.assert_allclose(e, 0.0, atol=1e-9)


def test_a_kink_is_the_left_out_size_against_its_neighbours_line():
    """bs 1, 2, 3 at 10, 30, 30 ms: bs 2 is predicted (10 + 30) / 2 = 20 ms, -33.3%."""
    import mla_ladder_interp as m

    g = {(b, 4, kv): t for b, t in ((1, 0.010), (2, 0.030), (3, 0.030)) for kv in (1, 2)}
    e = m.left_out_errors(g)
    assert e == pytest.approx([-100 / 3, -100 / 3])
