"""The jitter floor: how far the profile side's whole-run figures move under per-pass noise.

A live pass of one shape does not take the same time twice; the profile records that spread
(each row's ``p10_s`` and ``p90_s``) but replays only the median.  On a queue the small per-pass
differences compound, so whole-run percentiles (TTFT p90 above all) carry a noise that the
per-step error does not show.  :func:`jitter_floors` re-runs the profile side ``runs`` times with
every pass's latency multiplied by an independent factor ``exp(sigma * z)``, ``z ~ N(0, 1)``
(one draw per executor call: a draft phase's passes, timed in one call, share theirs),
where ``sigma`` is the profile's own measured repeat spread (:func:`profile_sigma`), and reports
for each whole-run check the largest difference of a jittered run from the unjittered profile
run (:data:`RULE`).

The noise enters through :class:`JitterExecutor`, a wrapper around the profile's
``TableExecutor`` that offers no latency table, so the engine times its passes through the
executor (the path a live executor takes, which gives the table path's numbers: a test holds
them equal) and the default engine path is untouched.  Draws come from a seeded
``numpy.random.Generator(PCG64)`` per run, in the engine's (deterministic) order of calls, so the
same inputs give the same floors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis.fidelity.offset import ScaledExecutor

__all__ = ["FIGURES", "JitterExecutor", "P10_P90_SIGMAS", "RULE", "apply_jitter", "jitter_floors",
           "profile_sigma"]

#: the p10..p90 range of a normal distribution, in standard deviations (2 x 1.2816)
P10_P90_SIGMAS = 2.563

#: the whole-run figures that get a jitter floor: name -> (compare_runs metric, quantile or None);
#: the whole-run checks (``report.WHOLE_RUN_CHECKS``) are among them
FIGURES = {f"{m[:-2]}_{q}": (m, q)
           for m in ("ttft_s", "tpot_s", "e2e_s") for q in ("p50", "p90", "p99")}
FIGURES["throughput"] = ("throughput_tok_s", None)

#: a constant mixed into each jittered run's seed, so its draws differ from the engine's own
_SALT = 0x6A177E12

RULE = ("jitter floor = max over the jittered runs of |run_k / run_0 - 1|, run_0 the profile run "
        "itself, run_k the profile side re-run with each pass x exp(sigma z), z ~ N(0, 1), sigma "
        "the profile's median (p90 - p10) / latency / 2.563; a missed check is within noise when "
        "|value| <= target + jitter floor")


def profile_sigma(table) -> float | None:
    """The profile's own repeat spread as a log-normal sigma: the median over its grid rows of
    ``(p90_s - p10_s) / latency_s / 2.563``; None when the table has no file or no spread."""
    path = table.source.get("file") if isinstance(table.source, dict) else None
    if not path:
        return None
    from backends.profile import grid_rows, read_profile

    rows = grid_rows(read_profile(path)[0])
    names = set(rows.column_names)
    if not {"latency_s", "p10_s", "p90_s"} <= names:
        return None
    lat, p10, p90 = (np.asarray(rows.column(c).to_numpy(zero_copy_only=False), np.float64)
                     for c in ("latency_s", "p10_s", "p90_s"))
    rel = (p90 - p10) / lat
    rel = rel[np.isfinite(rel) & (lat > 0)]
    if not len(rel):
        return None
    return float(np.median(rel)) / P10_P90_SIGMAS


class JitterExecutor(ScaledExecutor):
    """A profile executor whose every pass takes ``inner``'s latency times ``exp(sigma * z)``.

    It offers no latency table (``latency_table()`` is None), so the engine asks it for each
    pass; one draw per call, from ``rng``."""

    def __init__(self, inner, sigma: float, rng: np.random.Generator):
        super().__init__(inner, 1.0)
        self.sigma, self.rng = float(sigma), rng

    def _factor(self) -> float:
        return float(np.exp(self.sigma * self.rng.standard_normal()))

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "jitter_sigma": self.sigma}


def _rng(seed: int, k: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [_SALT, int(seed) & 0xFFFFFFFF, k])))


def jitter_floors(run_profile, inner, table, profile_summary: dict, *, runs: int,
                  seed: int) -> dict[str, Any]:
    """The jitter section of a fidelity report.

    ``run_profile(executor) -> summary`` runs the profile side with another executor; ``inner``
    is the profile's executor, ``profile_summary`` its unjittered run.  Returns ``{"runs",
    "seed", "sigma_pct", "rule", "diffs_pct": {figure: [run_k's signed difference, ...]},
    "floor_pct": {figure: max |difference|}}`` for each of :data:`FIGURES` (``floor_pct`` empty
    and ``sigma_pct`` None when the profile records no spread)."""
    from analysis.fidelity.stats import compare_runs, run_diff

    sigma = profile_sigma(table)
    out: dict[str, Any] = {"runs": runs, "seed": int(seed), "rule": RULE,
                           "sigma_pct": None if sigma is None else sigma * 100,
                           "diffs_pct": {}, "floor_pct": {}}
    if sigma is None:
        return out
    diffs: dict[str, list] = {name: [] for name in FIGURES}
    for k in range(runs):
        summary = run_profile(JitterExecutor(inner, sigma, _rng(seed, k)))
        cmp = compare_runs(profile_summary, summary)
        for name, (metric, q) in FIGURES.items():
            diffs[name].append(run_diff(cmp, metric, q))
    out["diffs_pct"] = diffs
    for name, d in diffs.items():
        d = [abs(x) for x in d if x is not None]
        out["floor_pct"][name] = max(d) if d else None
    return out


def apply_jitter(report: dict, jitter: dict) -> None:
    """Put the jitter section into ``report`` and ``jitter_pct`` on each whole-run check; a
    missed check gets ``within_noise``: true when ``|value| <= target + jitter_pct``."""
    report["jitter"] = jitter
    for name, floor in jitter["floor_pct"].items():
        c = report["checks"].get(name)
        if c is None:
            continue
        c["jitter_pct"] = floor
        if c["pass"] is False and floor is not None:
            c["within_noise"] = bool(abs(c["value_pct"]) <= c["target_pct"] + floor)
