"""``specsched plan``: the highest arrival rate one replica sustains under an SLO, and the
replicas a target rate needs.

The trace's arrivals are scaled (``rate_scale``: 2 = twice as fast; the requests themselves are
unchanged) and each candidate scale is simulated with the engine; :class:`analysis.search.ScaleSearch`
brackets and narrows the scale and checks its answer at both bounds: the reported rate met the
SLO, and ``margin`` (1.1) times it did not, both simulated.  Several scales are simulated at once
(two per round for each configuration, whatever the number of workers, so the answer does
not depend on where the simulations ran).

The trace's *recorded rate* is ``requests / (last arrival - first arrival)``; a scale ``x``
means ``x`` times that rate.

``--search`` runs the same search for every configuration in the product of the given axes
(verify policy, maximum draft length, capture ladder, running-request cap, or any configuration
key) and ranks them by the rate they sustain; the *margin* of the best is how much more rate it
sustains than the runner-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from analysis.grid import Axis, expand, resolve_overrides
from analysis.runner import RunSpec, file_digest, load_trace, simulate
from analysis.search import ScaleSearch
from analysis.slo import Slo
from traces.errors import SpecschedError

__all__ = ["probe", "plan", "PlanResult", "ConfigPlan", "recorded_rate"]


#: Scales each search simulates per round.  Fixed (not the number of workers) so the answer
#: does not depend on --jobs or on the Ray cluster: two at once suit a 2-core machine; more
#: workers serve several configurations (--search) at once.
PROBES_PER_ROUND = 2


def recorded_rate(arrival_s: np.ndarray) -> float:
    """Requests per second of a trace as recorded: n / (last arrival - first arrival)."""
    n = len(arrival_s)
    if n < 2:
        raise SpecschedError("a trace needs at least 2 requests to have an arrival rate")
    span = float(arrival_s[-1] - arrival_s[0])
    if not span > 0:
        raise SpecschedError("every request arrives at the same instant: the trace has no arrival "
                             "rate to scale")
    return n / span


def _headline(summary: dict) -> dict[str, Any]:
    keep = ("throughput_tok_s", "throughput_req_s", "retractions", "truncated_drafts")
    out = {k: summary.get(k) for k in keep}
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        v = summary.get(k) or {}
        out[k] = {q: v.get(q) for q in ("p50", "p90", "p99")}
    return out


def probe(spec: RunSpec, slo: Slo, *, trace_bytes: bytes | None = None) -> dict[str, Any]:
    """Simulate one spec and check the SLO; returns a small picklable dict (runs in workers)."""
    from analysis.results import from_tables
    from analysis.runner import shipped_trace

    result = simulate(spec, local_trace=shipped_trace(spec, trace_bytes))
    run = from_tables("probe", result.requests, result.steps, result.request_steps,
                      result.summary)
    check = slo.check(run)
    return {"ok": check.ok, "check": check.to_dict(), "headline": _headline(result.summary),
            "warnings": list(result.summary.get("warnings", []))}


@dataclass
class ConfigPlan:
    """The search for one configuration."""

    params: dict[str, Any]
    config: Any
    search: ScaleSearch
    base_rate: float

    @property
    def rate(self) -> float | None:
        a = self.search.answer
        return None if a is None else a * self.base_rate

    def probe_info(self, scale: float) -> dict[str, Any] | None:
        for p in self.search.probes:
            if abs(p.scale - scale) <= 1e-12 * max(1.0, scale):
                return p.info
        return None

    def to_dict(self) -> dict[str, Any]:
        s = self.search
        a = s.answer
        return {
            "params": self.params,
            "status": s.status,
            "max_rate_req_s": self.rate,
            "rate_scale": a,
            "checked": None if a is None else {
                "at": {"rate_scale": a, "rate_req_s": a * self.base_rate, "meets_slo": True,
                       **(self.probe_info(a) or {})},
                "above": None if s.above is None else {
                    "rate_scale": s.above, "rate_req_s": s.above * self.base_rate,
                    "meets_slo": False, **(self.probe_info(s.above) or {})},
            },
            "simulations": len(s.probes),
            "probes": [{"rate_scale": p.scale, "rate_req_s": p.scale * self.base_rate,
                        "meets_slo": p.ok} for p in s.probes],
            "notes": list(s.notes),
        }


@dataclass
class PlanResult:
    trace: str
    requests: int
    base_rate: float
    slo: Slo
    tolerance: float
    margin: float
    plans: list[ConfigPlan]
    replicas: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> ConfigPlan | None:
        ranked = self.ranked()
        return ranked[0] if ranked and ranked[0].rate is not None else None

    def ranked(self) -> list[ConfigPlan]:
        """Best first; configurations with no answer last (stable: in grid order)."""
        return sorted(self.plans, key=lambda p: -(p.rate if p.rate is not None else -1.0))

    def best_margin(self) -> float | None:
        r = [p.rate for p in self.ranked() if p.rate is not None]
        if len(r) < 2:
            return None
        return r[0] / r[1] - 1.0 if r[1] > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        out = {
            "trace": self.trace,
            "requests": self.requests,
            "recorded_rate_req_s": self.base_rate,
            "slo": self.slo.text,
            "tolerance": self.tolerance,
            "check_margin": self.margin,
            "max_rate_req_s": best.rate if best else None,
            "rate_scale": best.search.answer if best else None,
            "best": best.to_dict() if best else None,
            "replicas": self.replicas,
            "notes": self.notes,
        }
        if len(self.plans) > 1:
            out["margin_over_runner_up"] = self.best_margin()
            out["configurations"] = [p.to_dict() for p in self.ranked()]
        return out


def plan(trace: str, slo: Slo, *, config=None, acceptance: str | None = None,
         search_axes: list[Axis] | None = None, target_rate: float | None = None,
         jobs: int | None = None, ray: str | None = None, tolerance: float = 0.02,
         margin: float = 1.1, start: float = 1.0, max_replicas: int = 1024,
         progress: Callable[[str], None] | None = None, backend=None) -> PlanResult:
    """Search the highest sustainable rate (see the module docstring).

    ``config``: the base SimConfig (defaults when None); its ``rate_scale`` is ignored (the
    search sets it) and ``cluster.replicas`` is forced to 1 for the search.  ``target_rate``
    (requests/s): also size the cluster for it, checked by simulating that many replicas.
    """
    from analysis.parallel import make_backend
    from simulator.config import SimConfig

    config = config or SimConfig.load(None, {})
    arrays = load_trace(trace, acceptance, config.seed)
    base_rate = recorded_rate(arrays.arrival_s)
    digest = file_digest(trace)
    notes: list[str] = []
    if config.rate_scale != 1.0:
        notes.append(f"the configuration's rate_scale {config.rate_scale:g} was ignored: the "
                     f"search sets the rate itself")
    if config.cluster.replicas != 1:
        notes.append(f"cluster.replicas {config.cluster.replicas} was set to 1 for the search")
    base = config.replace({"cluster.replicas": 1, "rate_scale": 1.0})
    if _live(base, search_axes) and backend is None and not ray and jobs != 1:
        jobs = 1
        notes.append("the live aiter backend times passes on this machine's GPU: one "
                     "simulation at a time, so they do not disturb each other's timings")
    points = expand(search_axes) if search_axes else []
    plans: list[ConfigPlan] = []
    if points:
        for p in points:
            try:
                cfg = base.replace(resolve_overrides(p.params, "--search"))
            except SpecschedError as exc:
                raise SpecschedError(f"--search {p.name}: {exc}") from None
            plans.append(ConfigPlan(dict(p.params), cfg, _new_search(start, tolerance, margin),
                                    base_rate))
    else:
        plans.append(ConfigPlan({}, base, _new_search(start, tolerance, margin), base_rate))

    owned = backend is None
    backend = backend or make_backend(jobs=jobs, ray=ray)
    try:
        _drive(plans, backend, trace, acceptance, digest, slo, progress)
        result = PlanResult(trace, len(arrays.arrival_s), base_rate, slo, tolerance, margin,
                            plans, notes=notes)
        if target_rate is not None:
            result.replicas = _size_cluster(result, target_rate, backend, trace, acceptance,
                                            digest, slo, max_replicas, progress)
    finally:
        if owned:
            backend.close()
    for p in plans:
        if p.search.status != "ok":
            for n in p.search.notes:
                note = f"{_label(p.params)}{n}"
                if note not in result.notes:
                    result.notes.append(note)
    return result


def _live(config, axes) -> bool:
    """Does any configuration of the search use the live GPU executor?"""
    names = {config.backend.name}
    for a in axes or []:
        if a.key in ("backend", "backend.name"):
            names.update(str(v) for v in a.values)
    return "aiter" in names


def _new_search(start, tolerance, margin) -> ScaleSearch:
    try:
        return ScaleSearch(start=start, rel_tol=tolerance, margin=margin)
    except ValueError as exc:
        raise SpecschedError(f"--tolerance/--margin: {exc}") from None


def _drive(plans: list[ConfigPlan], backend, trace, acceptance, digest, slo, progress) -> None:
    """Advance every search together, filling the backend's workers each round."""
    while True:
        active = [i for i, p in enumerate(plans) if not p.search.done]
        if not active:
            return
        jobs = []
        for i in active:
            for scale in plans[i].search.propose(PROBES_PER_ROUND):
                cfg = plans[i].config.replace({"rate_scale": float(scale)})
                jobs.append(((i, scale), RunSpec(trace, cfg, acceptance, digest)))
        if not jobs:
            continue
        done = dict(backend.run(jobs, fn=probe, extra=(slo,)))
        for key, _ in jobs:  # record in proposal order: the same answer whatever finished first
            (i, scale), res = key, done[key]
            _raise_failed(res, f"{_label(plans[i].params)}the simulation at "
                               f"{scale * plans[i].base_rate:.4g} req/s (x{scale:.4g})")
            plans[i].search.record(scale, res["ok"], {k: v for k, v in res.items() if k != "ok"})
            if progress:
                progress(f"{_label(plans[i].params)}{scale * plans[i].base_rate:.3f} req/s "
                         f"(x{scale:.4g}): {'meets' if res['ok'] else 'misses'} the SLO")


def _raise_failed(res, what: str) -> None:
    """A probe that failed ends the search with the simulation's own message: a failed
    simulation is not a missed SLO (a bug keeps its traceback)."""
    if isinstance(res, SpecschedError):
        raise SpecschedError(f"{what} failed: {res}") from None
    if isinstance(res, BaseException):
        raise res


def _label(params: dict) -> str:
    return ("[" + ", ".join(f"{k}={v}" for k, v in params.items()) + "] ") if params else ""


def _size_cluster(result: PlanResult, target: float, backend, trace, acceptance, digest, slo,
                  max_replicas, progress) -> dict[str, Any]:
    if not target > 0:
        raise SpecschedError(f"--target-rate: must be > 0 (got {target})")
    best = result.best
    if best is None:
        return {"target_rate_req_s": target, "replicas": None,
                "reason": "no configuration meets the SLO at any rate"}
    n = max(1, math.ceil(target / best.rate - 1e-12))
    tried = []
    while n <= max_replicas:
        cfg = best.config.replace({"cluster.replicas": n, "rate_scale": target / result.base_rate})
        [(key, res)] = list(backend.run([(n, RunSpec(trace, cfg, acceptance, digest))],
                                        fn=probe, extra=(slo,)))
        _raise_failed(res, f"the simulation of {n} replicas at {target:g} req/s")
        tried.append({"replicas": n, "meets_slo": res["ok"], "check": res["check"]})
        if progress:
            progress(f"{n} replicas at {target:g} req/s: "
                     f"{'meets' if res['ok'] else 'misses'} the SLO")
        if res["ok"]:
            break
        n += 1
    ok = bool(tried and tried[-1]["meets_slo"])
    return {"target_rate_req_s": target, "rate_scale": target / result.base_rate,
            "estimate": max(1, math.ceil(target / best.rate - 1e-12)),
            "replicas": tried[-1]["replicas"] if ok else None,
            "router": best.config.cluster.router, "checked": tried}
