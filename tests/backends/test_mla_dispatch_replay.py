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


def test_fluid_makespan_shares_the_bandwidth_worked_by_hand():
    """Work 100 and 50 on two slots with one program's worth of bandwidth (nsat 1): both run at
    half speed until the 50 is done at t = 100, then the 100's last 50 at full speed: 150, the
    total work. With nsat 2 both run at full speed: 100, the list schedule. Four programs of
    100 on four slots at nsat 2: each at 2/4, 200."""
    import mla_dispatch_replay as m

    assert m.fluid_makespan(np.array([100.0, 50.0]), 2, 1.0) == pytest.approx(150.0)
    assert m.fluid_makespan(np.array([100.0, 50.0]), 2, 2.0) == pytest.approx(100.0)
    assert m.fluid_makespan(np.full(4, 100.0), 4, 2.0) == pytest.approx(200.0)
    # one slot: one after another at full speed, whatever nsat
    assert m.fluid_makespan(np.array([30.0, 20.0]), 1, 1.0) == pytest.approx(50.0)


def test_program_work_splits_rows_in_launch_order_with_padding_last():
    """2 requests (KV 264 and 32) padded to 3 at width 1: 3 rows, min(16, ceil(264 / 3)) = 16
    splits each; a program of the first row does 264 / 16 = 16.5 tokens plus the overhead 1,
    of the second 2 + 1, of the padding row the overhead alone. At width 2 the rows double
    (6 rows, 16 splits), each request's two rows adjacent."""
    import mla_dispatch_replay as m

    w = m.program_work(np.array([264.0, 32.0]), 3, 1, 1.0)
    assert list(w) == [17.5] * 16 + [3.0] * 16 + [1.0] * 16
    w2 = m.program_work(np.array([264.0, 32.0]), 3, 2, 0.0)
    assert list(w2) == [16.5] * 32 + [2.0] * 32 + [0.0] * 32
