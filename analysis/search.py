"""Finding the highest arrival-rate scale at which a run still meets its SLO.

:class:`ScaleSearch` is the algorithm alone, with no simulation in it: it proposes scales to try
(:meth:`~ScaleSearch.propose`), is told the outcome of each (:meth:`~ScaleSearch.record`), and
stops with an answer that was checked at both bounds.  A driver (``analysis.plan``) runs the
proposed scales as simulations, several at once, and may advance several searches together.

1. **Bracket.**  Start at ``start`` (1.0: the trace's recorded rate).  While every scale tried
   meets the SLO, try higher ones (x2 per probe); while none does, lower ones (/2 per probe).
   The bracket is ``lo`` (highest scale known to meet the SLO below the lowest failing one)
   and ``hi`` (lowest failing scale).
2. **Narrow.**  Try scales spaced evenly in log space inside ``(lo, hi)``, as many per round as
   the driver runs at once, until ``hi / lo <= 1 + rel_tol``.
3. **Check the bounds.**  The answer is ``lo``, which was simulated and met the SLO.  Then
   ``lo * margin`` (``margin`` = 1.1 by default) is simulated too and must *miss* the SLO.  If it
   meets it (the outcome is not monotone in the rate, e.g. through retraction or graph-ladder
   effects), the search goes on above it and the notes say so; failures below a scale that met
   the SLO are then ignored.

The answer therefore always satisfies: ``ok(scale)`` and ``not ok(scale * margin)``, both
simulated, and (when the outcome is monotone) lies within ``rel_tol`` below the true boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ScaleSearch", "Probe"]


@dataclass(frozen=True)
class Probe:
    """One simulated scale: whether the SLO was met, and whatever the driver attached."""

    scale: float
    ok: bool
    info: dict[str, Any] = field(default_factory=dict, compare=False)


def _key(x: float) -> float:
    return float(f"{x:.10g}")


class ScaleSearch:
    """Bracket, narrow, and check the highest scale meeting an SLO (see the module docstring)."""

    def __init__(self, *, start: float = 1.0, rel_tol: float = 0.02, margin: float = 1.1,
                 growth: float = 2.0, min_scale: float = 1e-3, max_scale: float = 1e4,
                 max_probes: int = 80):
        if not (start > 0 and rel_tol > 0 and margin > 1 and growth > 1):
            raise ValueError("start, rel_tol must be > 0; margin, growth > 1")
        if margin - 1 <= rel_tol:
            raise ValueError("rel_tol must be smaller than margin - 1")
        self.start = _key(start)
        self.rel_tol = rel_tol
        self.margin = margin
        self.growth = growth
        self.min_scale = min_scale
        self.max_scale = max_scale
        self.max_probes = max_probes
        self.probes: list[Probe] = []
        self._known: dict[float, bool] = {}
        self._pending: set[float] = set()
        self._floor = 0.0         # failures at or below this scale are ignored (non-monotone)
        self.status: str | None = None   # "ok", "unattainable", "unbounded", "budget"
        self.notes: list[str] = []
        self.rounds = 0

    # ------------------------------------------------------------------ state
    @property
    def done(self) -> bool:
        return self.status is not None

    def bracket(self) -> tuple[float | None, float | None]:
        """(lo, hi): highest met scale below the lowest failing one above the floor, and that one."""
        fails = [s for s, ok in self._known.items() if not ok and s > self._floor]
        hi = min(fails) if fails else None
        oks = [s for s, ok in self._known.items() if ok and (hi is None or s < hi)]
        lo = max(oks) if oks else None
        return lo, hi

    @property
    def answer(self) -> float | None:
        """The checked scale (status "ok"), the highest one tried (unbounded), or None."""
        lo, _ = self.bracket()
        if self.status in ("ok", "unbounded"):
            return lo
        if self.status == "budget":
            return lo if lo is not None and self._known.get(_key(lo * self.margin)) is False else None
        return None

    @property
    def above(self) -> float | None:
        """``answer * margin``, simulated and missing the SLO (status "ok")."""
        a = self.answer
        return _key(a * self.margin) if a is not None and self.status == "ok" else None

    # ------------------------------------------------------------------ protocol
    def record(self, scale: float, ok: bool, info: dict[str, Any] | None = None) -> None:
        s = _key(scale)
        self._pending.discard(s)
        if s in self._known:
            return
        self._known[s] = bool(ok)
        self.probes.append(Probe(s, bool(ok), dict(info or {})))

    def propose(self, k: int = 1) -> list[float]:
        """Up to ``k`` new scales to simulate (fewer, or none, when the next step needs fewer or
        waits on pending ones).  Sets :attr:`status` when the search is over."""
        if self.done:
            return []
        if self._pending:
            return []
        k = max(1, int(k))
        if len(self.probes) >= self.max_probes:
            self.status = "budget"
            self.notes.append(f"stopped after {len(self.probes)} simulations without a checked "
                              f"answer")
            return []
        out = self._next(k)
        out = [s for s in dict.fromkeys(_key(x) for x in out) if s not in self._known]
        if out:
            self.rounds += 1
            self._pending.update(out)
        elif not self.done:  # nothing new to try (cannot happen with sane parameters)
            self.status = "budget"
            self.notes.append("the search stalled: no new scale to try")
        return out

    def _next(self, k: int) -> list[float]:
        if not self._known:
            return [self.start * self.growth ** i for i in range(k)]
        lo, hi = self.bracket()
        if hi is None:  # everything above the floor met the SLO: go up
            top = max(s for s, ok in self._known.items() if ok)
            if top >= self.max_scale:
                self.status = "unbounded"
                self.notes.append(f"the SLO is still met at {top:g}x the recorded rate (the "
                                  f"search's ceiling): the trace is too small to load a replica")
                return []
            return [min(top * self.growth ** (i + 1), self.max_scale) for i in range(k)]
        if lo is None:  # nothing met the SLO below the lowest failure: go down
            bottom = min(s for s in self._known if s > self._floor)
            if bottom <= self.min_scale:
                self.status = "unattainable"
                self.notes.append(f"the SLO is missed even at {bottom:g}x the recorded rate: "
                                  f"it cannot be met by load alone")
                return []
            return [max(bottom / self.growth ** (i + 1), self.min_scale) for i in range(k)]
        if hi / lo > 1 + self.rel_tol:
            r = math.log(hi / lo)
            return [lo * math.exp(r * (i + 1) / (k + 1)) for i in range(k)]
        # narrow enough: check the bound above the answer
        target = _key(lo * self.margin)
        if target in self._known:
            if not self._known[target]:
                self.status = "ok"
                return []
            # met at lo*margin although something failed in between: not monotone
            self.notes.append(f"not monotone: the SLO was missed at {hi:g}x but met at "
                              f"{target:g}x; searching above {target:g}x")
            self._floor = target
            return self._next(k)
        return [target]
