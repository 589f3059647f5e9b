"""benchmarks/mla_dispatch_replay.py: the list-scheduled makespan of the MLA decode's programs,
worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_a_uniform_launch_pays_a_whole_program_for_its_partial_wave():
    """5 rows x 2 splits of KV 100 on 4 slots: 10 programs of 50, in waves of 4, 4, 2: 150."""
    import mla_dispatch_replay as m

    assert m.makespan(np.full(5, 100.0), 2, 4) == pytest.approx(150.0)


def test_short_programs_free_slots_for_the_rest():
    """KV 160, 20, 20, 20, 20 (the same sum, 240, as 5 x 48) x 2 splits on 4 slots: programs 80,
    80 and eight of 10, in order. The two 80s hold two slots; the eight 10s share the other two
    (40 each): 80. The uniform batch at the mean (48) takes three waves of 24: 72."""
    import mla_dispatch_replay as m

    assert m.makespan(np.array([160.0, 20, 20, 20, 20]), 2, 4) == pytest.approx(80.0)
    assert m.makespan(np.full(5, 48.0), 2, 4) == pytest.approx(72.0)
