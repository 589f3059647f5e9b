"""Service-level objectives: parse ``'ttft_p90<=2s,tpot_p99<=200ms,goodput>=0.9'`` and check runs.

Grammar (terms separated by commas, spaces ignored)::

    METRIC_STAT OP VALUE UNIT     latency bound: METRIC in ttft, tpot, e2e, queue, itl, step_gap;
                                  STAT = pNN (0 < NN <= 100, decimals allowed: p99.9), mean or max;
                                  OP = <= or <; UNIT = s or ms (required)
    METRIC OP VALUE UNIT          no STAT: a per-request threshold, used only to decide which
                                  requests count as good for goodput (ttft and tpot only)
    goodput OP FRACTION           OP = >= or >; FRACTION in [0, 1], or a percentage (90%)

Goodput counts a request as good when it finished and met its TTFT and TPOT thresholds: the
per-request ``ttft_slo_s``/``tpot_slo_s`` columns where present, else the global threshold,
which is the bare term's value when one is given, else the loosest bound among that metric's
percentile terms (``ttft_p90<=2s`` -> 2 s).  A metric with no threshold at all does not restrict
goodput.

Percentiles are over all requests (unfinished ones count as +inf), with linear interpolation.
The *slack* of a term is its relative distance to the bound, positive when met: ``(bound -
value) / bound`` for upper bounds, ``(value - bound) / bound`` for goodput; the *margin* of a
check is the smallest slack.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.metrics import goodput, inter_token_gaps, quantile, request_latencies
from analysis.results import RunResults
from traces.errors import SpecschedError

__all__ = ["Term", "Slo", "SloCheck", "parse_slo"]

_LAT_METRICS = ("ttft", "tpot", "e2e", "queue", "itl", "step_gap")
_TERM = re.compile(
    r"^(?P<metric>[a-z][a-z0-9_]*?)(?:_(?P<stat>p\d+(?:\.\d+)?|mean|max))?"
    r"(?P<op><=|>=|<|>|==|=)(?P<value>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
    r"(?P<unit>[a-z%]*)$")


@dataclass(frozen=True)
class Term:
    """One SLO term.  ``stat`` is None for a bare per-request threshold (goodput only)."""

    metric: str          # ttft, tpot, e2e, queue, itl, step_gap, goodput
    stat: str | None     # "p90", "mean", "max", None
    op: str              # "<=", "<", ">=", ">"
    bound: float         # seconds, or a fraction for goodput
    text: str            # as written (normalised: no spaces)

    @property
    def percentile(self) -> float | None:
        if self.stat is None:
            return None
        if self.stat == "max":
            return 100.0
        if self.stat == "mean":
            return None
        return float(self.stat[1:])

    @property
    def is_constraint(self) -> bool:
        return self.metric == "goodput" or self.stat is not None


@dataclass(frozen=True)
class TermResult:
    term: Term
    value: float
    ok: bool
    slack: float

    def to_dict(self) -> dict[str, Any]:
        return {"term": self.term.text, "value": _num(self.value), "bound": self.term.bound,
                "ok": self.ok, "slack": _num(self.slack)}


def _num(x: float):
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class SloCheck:
    """The outcome of checking one run against an SLO."""

    ok: bool
    terms: tuple[TermResult, ...]
    goodput: dict[str, Any] | None = None

    @property
    def margin(self) -> float:
        """Smallest slack over the constraint terms (positive: every term met)."""
        s = [t.slack for t in self.terms]
        return min(s) if s else math.inf

    def failed(self) -> list[str]:
        return [f"{t.term.text} (got {_fmt(t.value, t.term)})" for t in self.terms if not t.ok]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "margin": _num(self.margin),
                "terms": [t.to_dict() for t in self.terms]}


def _fmt(value: float, term: Term) -> str:
    if term.metric == "goodput":
        return f"{value:.4g}"
    if not math.isfinite(value):
        return "inf (unfinished requests)"
    return f"{value * 1000:.4g}ms" if value < 1 else f"{value:.4g}s"


@dataclass(frozen=True)
class Slo:
    """A parsed SLO: constraint terms plus the global goodput thresholds they imply."""

    terms: tuple[Term, ...]
    text: str = ""
    ttft_s: float | None = None     # global goodput threshold for TTFT
    tpot_s: float | None = None

    @property
    def constraints(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if t.is_constraint)

    @property
    def needs_gaps(self) -> bool:
        return any(t.metric in ("itl", "step_gap") for t in self.constraints)

    def check(self, run: RunResults) -> SloCheck:
        """Evaluate every constraint term on one run's tables."""
        lat = request_latencies(run)
        samples: dict[str, np.ndarray] = dict(lat)
        if self.needs_gaps:
            gaps = inter_token_gaps(run)
            if gaps is None:
                raise SpecschedError("the SLO names itl/step_gap but the results have no "
                                     "request_steps.parquet", path=str(run.path or run.name))
            samples["step_gap"], samples["itl"] = gaps
        gp = goodput(run, ttft_s=self.ttft_s, tpot_s=self.tpot_s, lat=lat)
        results = []
        for t in self.constraints:
            if t.metric == "goodput":
                if gp is None:
                    raise SpecschedError(
                        f"'{t.text}': goodput needs TTFT/TPOT thresholds: add a term such as "
                        f"ttft_p90<=2s or ttft<=2s, or give the trace ttft_slo_s/tpot_slo_s "
                        f"columns", path=str(run.path or run.name))
                value = gp["fraction"]
            else:
                v = samples[t.metric]
                v = np.sort(v[~np.isnan(v)])
                if len(v) == 0:
                    value = 0.0
                elif t.stat == "mean":
                    value = float(np.mean(v)) if np.all(np.isfinite(v)) else math.inf
                else:
                    value = quantile(v, t.percentile / 100.0)
            results.append(_judge(t, value))
        return SloCheck(ok=all(r.ok for r in results), terms=tuple(results), goodput=gp)


def _judge(t: Term, value: float) -> TermResult:
    ok = {"<=": value <= t.bound, "<": value < t.bound,
          ">=": value >= t.bound, ">": value > t.bound}[t.op]
    if t.op in ("<=", "<"):
        slack = (t.bound - value) / t.bound if math.isfinite(value) else -math.inf
    else:
        slack = (value - t.bound) / t.bound if t.bound > 0 else (math.inf if ok else -math.inf)
    return TermResult(t, float(value), bool(ok), float(slack))


def parse_slo(text: str, *, option: str = "--slo") -> Slo:
    """Parse an SLO string; errors name ``option`` and the offending part."""
    if text is None or not str(text).strip():
        raise SpecschedError(f"{option}: empty SLO (example: 'ttft_p90<=2s,tpot_p99<=200ms')")
    terms: list[Term] = []
    seen: set[tuple[str, str | None]] = set()
    for raw in str(text).split(","):
        part = "".join(raw.split())
        if not part:
            raise SpecschedError(f"{option}: empty term in '{text}' (two commas, or a trailing "
                                 f"comma?)")
        terms.append(_parse_term(part, option))
        key = (terms[-1].metric, terms[-1].stat)
        if key in seen:
            raise SpecschedError(f"{option}: '{part}': {key[0]}"
                                 f"{'_' + key[1] if key[1] else ''} is given twice")
        seen.add(key)
    thresholds: dict[str, float | None] = {"ttft": None, "tpot": None}
    for metric in thresholds:
        bare = [t for t in terms if t.metric == metric and t.stat is None]
        pct = [t for t in terms if t.metric == metric and t.stat is not None]
        if bare:
            thresholds[metric] = bare[0].bound
        elif pct:
            thresholds[metric] = max(t.bound for t in pct)
    if not any(t.is_constraint for t in terms):
        raise SpecschedError(f"{option}: '{text}' has no constraint, only per-request thresholds;"
                             f" add a percentile term (ttft_p90<=2s) or goodput>=FRACTION")
    return Slo(tuple(terms), ",".join(t.text for t in terms), thresholds["ttft"],
               thresholds["tpot"])


def _parse_term(part: str, option: str) -> Term:
    m = _TERM.match(part.lower())
    if not m:
        raise SpecschedError(f"{option}: '{part}': expected METRIC_STAT<=VALUE (e.g. "
                             f"ttft_p90<=2s, tpot_p99<=200ms) or goodput>=FRACTION")
    metric, stat, op, value, unit = m["metric"], m["stat"], m["op"], float(m["value"]), m["unit"]
    if op in ("=", "=="):
        raise SpecschedError(f"{option}: '{part}': use <= or < for latencies, >= or > for goodput")
    if metric == "goodput":
        if stat is not None:
            raise SpecschedError(f"{option}: '{part}': goodput takes no statistic "
                                 f"(write goodput>=0.9)")
        if op not in (">=", ">"):
            raise SpecschedError(f"{option}: '{part}': goodput is a lower bound: use >= or >")
        if unit == "%":
            value /= 100.0
        elif unit:
            raise SpecschedError(f"{option}: '{part}': goodput is a fraction (0.9) or a "
                                 f"percentage (90%), not '{unit}'")
        if not 0.0 <= value <= 1.0:
            raise SpecschedError(f"{option}: '{part}': goodput must be between 0 and 1 "
                                 f"(or 0% and 100%)")
        return Term("goodput", None, op, value, f"goodput{op}{value:g}")
    if metric not in _LAT_METRICS:
        raise SpecschedError(f"{option}: '{part}': unknown metric '{metric}' (known: "
                             f"{', '.join(_LAT_METRICS)}, goodput)")
    if op not in ("<=", "<"):
        raise SpecschedError(f"{option}: '{part}': a latency bound is an upper bound: use <= or <")
    if stat is None and metric not in ("ttft", "tpot"):
        raise SpecschedError(f"{option}: '{part}': name a statistic, e.g. {metric}_p99 or "
                             f"{metric}_mean")
    if stat is not None and stat.startswith("p"):
        p = float(stat[1:])
        if not 0.0 < p <= 100.0:
            raise SpecschedError(f"{option}: '{part}': percentile must be in (0, 100]")
    if unit not in ("s", "ms"):
        raise SpecschedError(f"{option}: '{part}': "
                             + ("give a unit, s or ms" if not unit
                                else f"unknown unit '{unit}' (use s or ms)"))
    seconds = value / 1000.0 if unit == "ms" else value
    if not seconds > 0 or not math.isfinite(seconds):
        raise SpecschedError(f"{option}: '{part}': the bound must be a positive time")
    name = metric if stat is None else f"{metric}_{stat}"
    return Term(metric, stat, op, seconds, f"{name}{op}{_unit_text(value, unit)}")


def _unit_text(value: float, unit: str) -> str:
    return f"{value:g}{unit}"
