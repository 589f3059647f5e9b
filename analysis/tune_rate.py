"""The highest arrival rate at which a tuned setting still meets tune-spec's SLO.

"Meets the SLO" here is tune-spec's per-request form: at least ``attainment`` of the requests
finish within the TTFT and TPOT thresholds.  One :class:`analysis.search.ScaleSearch` per setting,
all advanced together (one simulation each per round, so two settings use two workers), each
seeded with the outcome already known at the tuned rate and stepping first by the factor the
run's busy fraction suggests (a replica busy 80% of the time has about 1/0.8 of headroom),
at least ``MIN_GROWTH``, the step squared after every scale that still meets the SLO (at most
x4); below the tuned rate it halves.
"""

from __future__ import annotations

from typing import Any, Callable

from analysis.runner import RunSpec, load_trace
from analysis.search import ScaleSearch

__all__ = ["max_rates", "recorded_rate", "first_growth"]

REL_TOL = 0.04       # the answer lies within 4% below the boundary (when monotone)
MARGIN = 1.1         # and answer x 1.1 was simulated and missed the SLO
MIN_GROWTH = 1.15
MAX_PROBES = 12


def recorded_rate(trace) -> float:
    """Requests per second of the trace as recorded (count over the arrival span)."""
    a = trace.arrival_s
    span = float(a[-1] - a[0]) if len(a) > 1 else 0.0
    return len(a) / span if span > 0 else 0.0


def first_growth(busy_fraction: float, ok: bool) -> float:
    """The factor of the first step: 1 / busy fraction (at least ``MIN_GROWTH``, at most 4)
    upwards when the tuned rate meets the SLO, else 2 (downwards)."""
    if not ok:
        return 2.0
    if busy_fraction <= 0:
        return 4.0
    return min(4.0, max(MIN_GROWTH, 1.0 / busy_fraction))


def max_rates(trace_path: str, base, targets: dict[str, dict], known: dict[str, dict], *,
              ttft_s, tpot_s, attainment: float, acceptance, backend,
              config_of: Callable, same: bool = False) -> dict[str, Any]:
    """``{name: {"rate_scale", "rate_req_s", "status", "probes", "notes"}}`` for each setting in
    ``targets`` (name -> setting), ``known`` holding each one's result at ``base.rate_scale``;
    ``same``: the settings run identically (the first one's search answers both)."""
    from analysis.tune_spec import score

    scale0 = base.rate_scale
    rate = recorded_rate(load_trace(trace_path, acceptance, base.seed))
    names = list(targets)[:1] if same else list(targets)
    searches: dict[str, ScaleSearch] = {}
    for n in names:
        ok = known[n]["good_fraction"] >= attainment
        s = ScaleSearch(start=scale0, rel_tol=REL_TOL, margin=MARGIN,
                        growth=first_growth(known[n]["busy_fraction"], ok),
                        min_scale=scale0 / 64, max_scale=scale0 * 1e3, max_probes=MAX_PROBES)
        s.record(scale0, ok, {"good_fraction": known[n]["good_fraction"]})
        searches[n] = s
    sims = 0
    while True:
        todo = []
        for n, s in searches.items():
            for x in s.propose(1):
                cfg = config_of(base.replace({"rate_scale": x}), targets[n])
                todo.append(((n, x), RunSpec(trace_path, cfg, acceptance)))
        if not todo:
            break
        for (n, x), res in backend.run(todo, fn=score, extra=(ttft_s, tpot_s)):
            if isinstance(res, Exception):
                raise res
            sims += 1
            s = searches[n]
            s.record(x, res["good_fraction"] >= attainment,
                     {"good_fraction": res["good_fraction"]})
            if s.bracket()[1] is None:   # still below the boundary: step faster
                s.growth = min(4.0, s.growth ** 2)
    out: dict[str, Any] = {"simulations": sims}
    for n in targets:
        s = searches[names[0] if same else n]
        a = s.answer
        out[n] = {"rate_scale": a, "rate_req_s": a * rate if a is not None else None,
                  "status": s.status,
                  "probes": [{"rate_scale": p.scale, "ok": p.ok, **p.info} for p in s.probes],
                  "notes": list(s.notes)}
    return out
