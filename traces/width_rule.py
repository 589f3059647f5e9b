"""The width rule's prediction: accepted drafts when steps recorded at one draft count are verified
at another (docs/traces.md, "Verifying more or fewer drafts than recorded").

For a recorded step ``(d, a)`` verified with ``r`` drafts: ``r <= d`` gives ``min(a, r)``;
``r > d`` after a rejection (``a < d``) gives ``a``; ``r > d`` with every recorded draft
accepted continues at position ``d + 1`` with ``position_accept_prob`` (position ``j`` accepted
with ``p[j - 1]`` given the ones before it), up to ``r``.  :func:`predicted_accepted` is the
distribution of the accepted count over a set of steps (the engine draws from the same rule per
step); :func:`truncated` gives the ground truth when the data were recorded deeper than ``r``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["predicted_accepted", "truncated", "total_variation"]


def predicted_accepted(drafted, accepted, r: int, p) -> np.ndarray:
    """P(accepted = j), j = 0..r, over the steps ``(drafted, accepted)`` verified at ``r``
    drafts by the width rule with per-position probabilities ``p`` (``p[j - 1]`` for position
    j; positions past the list repeat its last value)."""
    d = np.asarray(drafted, dtype=np.int64)
    a = np.asarray(accepted, dtype=np.int64)
    if d.shape != a.shape or d.size == 0:
        raise ValueError("drafted and accepted: equal, non-empty lengths")
    p = list(p)
    out = np.zeros(r + 1, np.float64)
    full = (a == d) & (d < r)
    np.add.at(out, np.minimum(a[~full], r), 1.0)
    for dd, n in zip(*np.unique(d[full], return_counts=True)):
        reach = 1.0                                    # P(positions dd+1 .. j-1 all accepted)
        for j in range(int(dd) + 1, r + 1):
            pj = p[min(j, len(p)) - 1]
            out[j - 1] += n * reach * (1.0 - pj)
            reach *= pj
        out[r] += n * reach
    return out / d.size


def truncated(accepted, r: int) -> np.ndarray:
    """P(min(accepted, r) = j), j = 0..r: what ``r`` drafts accept when the steps were recorded
    at ``r`` or more (exact for a chain or a depth-limited tree: positions up to ``r`` do not
    depend on deeper drafts)."""
    a = np.minimum(np.asarray(accepted, dtype=np.int64), r)
    return np.bincount(a, minlength=r + 1).astype(np.float64) / a.size


def total_variation(x, y) -> float:
    """Half the L1 distance between two distributions on the same support."""
    return 0.5 * float(np.abs(np.asarray(x) - np.asarray(y)).sum())
