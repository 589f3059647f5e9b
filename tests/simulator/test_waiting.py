"""The waiting queue's ring buffers, by hand: taking a request out of the middle (lpm)."""

from __future__ import annotations

import numpy as np

from simulator import layout as L
from simulator.waiting import _waiting_remove


def _state():
    E = np.zeros((1, L.NE), np.int64)
    Q = np.full((1, 4), -1, np.int64)
    W = np.full((1, 4), -1, np.int64)
    WT = np.zeros((1, 4))
    # arrivals 7, 8, 9 from slot 3 (wrapping); retracted 4, 5 at times 1.5, 2.5 from slot 2
    Q[0, [3, 0, 1]] = [7, 8, 9]
    E[0, L.E_QHEAD], E[0, L.E_QLEN] = 3, 3
    W[0, [2, 3]] = [4, 5]
    WT[0, [2, 3]] = [1.5, 2.5]
    E[0, L.E_WHEAD], E[0, L.E_WLEN] = 2, 2
    return Q, W, WT, E


def test_an_arrival_taken_from_the_middle_leaves_the_others_in_order():
    Q, W, WT, E = _state()
    _waiting_remove(0, 9, False, Q, W, WT, E)  # the third of 7, 8, 9: 7 and 8 move back one
    assert (E[0, L.E_QHEAD], E[0, L.E_QLEN]) == (0, 2)
    assert [Q[0, (0 + k) % 4] for k in range(2)] == [7, 8]
    assert list(W[0, [2, 3]]) == [4, 5]  # the other queue is untouched


def test_a_retracted_request_taken_out_moves_its_entry_time_with_it():
    Q, W, WT, E = _state()
    _waiting_remove(0, 5, True, Q, W, WT, E)  # the second of 4, 5: 4 moves back one
    assert (E[0, L.E_WHEAD], E[0, L.E_WLEN]) == (3, 1)
    assert W[0, 3] == 4 and WT[0, 3] == 1.5
    assert list(Q[0, [3, 0, 1]]) == [7, 8, 9]
