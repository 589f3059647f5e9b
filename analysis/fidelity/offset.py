"""The offset column: each whole-run check with every profile pass 1% faster and 1% slower.

Two H200s running the same code differ by about 1-3% per pass kind (docs/backends.md, *Machines
differ*), and on a queue a whole-run percentile can move by several points per 1% of step time
(*Saturation on today's runs*). A check that passes at the profile's own speed and fails with
every pass 1% slower rests on the machines' agreement, not on the model. :func:`offset_checks`
re-runs the profile side twice, each pass's latency times ``1 - pct / 100`` and ``1 + pct / 100``
(:class:`ScaledExecutor`), and gives each whole-run check its value at both; :func:`apply_offset`
marks the checks whose verdict either run changes (``offset_flips``).

The jitter floor (``analysis.fidelity.jitter``) is independent noise on each pass; this is one
shift of all of them, the form a machine difference takes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["OFFSET_PCT", "RULE", "ScaledExecutor", "apply_offset", "offset_checks"]

#: the offset ``specsched fidelity`` applies, in percent of every pass's latency
OFFSET_PCT = 1.0

RULE = ("offset: the profile side re-run with every pass's latency x (1 - d) and x (1 + d); each "
        "whole-run check's value against the reference at both, and whether either changes its "
        "verdict")


class ScaledExecutor:
    """A profile executor whose every pass takes ``inner``'s latency times ``factor``.

    It offers no latency table (``latency_table()`` is None), so the engine asks it for each
    pass, as it asks a live executor."""

    def __init__(self, inner, factor: float):
        self.inner, self.factor = inner, float(factor)
        self.name = inner.name

    def _factor(self) -> float:
        """The factor of the next pass (one call per pass; the jitter floor's subclass draws it)."""
        return self.factor

    def latency_table(self):
        return None

    def set_kv_lookup(self, kv_lookup: str) -> None:
        """The engine's ``backend.kv_lookup``, passed on to ``inner`` (if it looks passes up)."""
        self._pass_on("set_kv_lookup", kv_lookup)

    def set_bs_interp(self, bs_interp: str) -> None:
        """The engine's ``backend.bs_interp``, passed on to ``inner`` (if it looks passes up)."""
        self._pass_on("set_bs_interp", bs_interp)

    def _pass_on(self, hook: str, value: str) -> None:
        f = getattr(self.inner, hook, None)
        if callable(f):
            f(value)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "latency_factor": self.factor}

    def prefill(self, batch) -> float:
        return self.inner.prefill(batch) * self._factor()

    def draft(self, batch) -> float:
        return self.inner.draft(batch) * self._factor()

    def draft_extend(self, batch) -> float:
        return self.inner.draft_extend(batch) * self._factor()

    def verify(self, batch):
        t = self.inner.verify(batch)
        return dataclasses.replace(t, latency_s=t.latency_s * self._factor())


def offset_checks(run_profile, inner, ref_summary: dict, *, pct: float = OFFSET_PCT
                  ) -> dict[str, Any]:
    """The offset section of a fidelity report.

    ``run_profile(executor) -> summary`` runs the profile side with another executor, ``inner``
    is the profile's executor and ``ref_summary`` the reference run's summary. Returns ``{"pct",
    "rule", "values_pct": {check: [value at x (1 - d), value at x (1 + d)]}}`` for each whole-run
    check (``report.WHOLE_RUN_CHECKS``), values as the checks give them (profile against
    reference, %)."""
    from analysis.fidelity.report import WHOLE_RUN_CHECKS
    from analysis.fidelity.stats import compare_runs, run_diff

    values: dict[str, list] = {name: [] for name in WHOLE_RUN_CHECKS}
    for factor in (1 - pct / 100, 1 + pct / 100):
        cmp = compare_runs(ref_summary, run_profile(ScaledExecutor(inner, factor)))
        for name, (metric, q) in WHOLE_RUN_CHECKS.items():
            values[name].append(run_diff(cmp, metric, q))
    return {"pct": float(pct), "rule": RULE, "values_pct": values}


def apply_offset(report: dict, offset: dict) -> None:
    """Put the offset section into ``report`` and, on each whole-run check, ``offset_pct`` (its
    values at the two scales) and ``offset_flips``: true when the check passes at one of them
    and not at the profile's own speed, or the other way round."""
    report["offset"] = offset
    for name, vals in offset["values_pct"].items():
        c = report["checks"].get(name)
        if c is None or c["pass"] is None:
            continue
        c["offset_pct"] = vals
        c["offset_flips"] = any(v is None or (abs(v) <= c["target_pct"]) != c["pass"]
                                for v in vals)
