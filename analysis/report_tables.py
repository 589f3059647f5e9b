"""The report's tables as data: the headline summary, the differences against a baseline run,
the per-category / per-tenant rows, and which runs misattributed query rows.

Everything here works on :func:`analysis.metrics.summarize` dicts; ``analysis.report`` turns
the rows into HTML and terminal tables.
"""

from __future__ import annotations

import math
from typing import Any, Callable

__all__ = ["SUMMARY_ROWS", "fmt_value", "summary_table", "misattributed", "baseline_differences",
           "fmt_difference", "class_rows", "CLASS_HEAD"]


def _get(*path: str) -> Callable[[dict], Any]:
    def g(s: dict):
        for p in path:
            if s is None:
                return None
            s = s.get(p) if isinstance(s, dict) else None
        return s
    return g


def _launches(kind: str, how: str) -> Callable[[dict], Any]:
    return lambda s: s["verify"]["launches_by_kind"][kind][how]


#: (label, getter over a summarize() dict, unit), in display order.  Units: ``s`` (shown in ms
#: below one second), ``ms`` (always ms), ``frac`` (shown as %), ``f1``/``f3`` (decimals),
#: ``int``, ``text`` (already a string; no difference against a baseline).
SUMMARY_ROWS: list[tuple[str, Callable[[dict], Any], str]] = [
    ("requests finished", lambda s: f"{s['finished']}/{s['requests']}", "text"),
    ("duration", _get("duration_s"), "s"),
    ("throughput (output tok/s)", _get("throughput_tok_s"), "f1"),
    ("throughput (req/s)", _get("throughput_req_s"), "f3"),
    ("goodput (req/s)", _get("goodput", "req_s"), "f3"),
    ("goodput (fraction)", _get("goodput", "fraction"), "frac"),
    ("TTFT p50", _get("ttft_s", "p50"), "s"),
    ("TTFT p90", _get("ttft_s", "p90"), "s"),
    ("TTFT p99", _get("ttft_s", "p99"), "s"),
    ("TPOT p50", _get("tpot_s", "p50"), "ms"),
    ("TPOT p90", _get("tpot_s", "p90"), "ms"),
    ("TPOT p99", _get("tpot_s", "p99"), "ms"),
    ("inter-token gap p50 (per token)", _get("itl_s", "p50"), "ms"),
    ("inter-token gap p99 (per token)", _get("itl_s", "p99"), "ms"),
    ("inter-token gap p50 (per step)", _get("step_gap_s", "p50"), "ms"),
    ("inter-token gap p99 (per step)", _get("step_gap_s", "p99"), "ms"),
    ("longest gap per request, p99", _get("max_gap_s", "p99"), "s"),
    ("E2E p50", _get("e2e_s", "p50"), "s"),
    ("E2E p99", _get("e2e_s", "p99"), "s"),
    ("queueing delay p50", _get("queue_s", "p50"), "s"),
    ("queueing delay p99", _get("queue_s", "p99"), "s"),
    ("acceptance length (tokens/step)", _get("verify", "accept_len_mean"), "f3"),
    ("draft acceptance rate", _get("acceptance_rate"), "frac"),
    ("verify efficiency (committed/slots)", _get("verify", "verify_efficiency"), "frac"),
    ("padding waste", _get("verify", "padding_waste"), "frac"),
    ("  width padding", _get("verify", "width_pad_frac"), "frac"),
    ("  graph padding", _get("verify", "graph_pad_frac"), "frac"),
    ("verify launches / iteration", _get("iterations", "verify_launches_per_iter"), "f3"),
    ("all launches / iteration", _get("iterations", "launches_per_iter"), "f3"),
    ("iterations mixing widths", _get("iterations", "mixed_iter_frac"), "frac"),
    ("verify graph replays", _launches("verify", "graph"), "int"),
    ("verify eager launches", _launches("verify", "eager"), "int"),
    ("draft graph replays", _launches("draft", "graph"), "int"),
    ("draft eager launches", _launches("draft", "eager"), "int"),
    ("retractions", _get("retractions"), "int"),
    ("retracted requests", _get("retracted_requests"), "int"),
    ("truncated drafts", _get("truncated_drafts"), "int"),
    ("uniformity violations (rows)", _get("verify", "violations"), "int"),
]

#: Label of the row that flags misattributed query rows (red when > 0).
VIOLATIONS_ROW = "uniformity violations (rows)"
_SHOWN_KINDS = ("verify", "draft")


def _kind_rows(summaries: list[dict]) -> list[tuple[str, Callable[[dict], Any], str]]:
    """Graph/eager rows for pass kinds beyond verify and draft (prefill is always eager): a kind
    steps.parquet has that this table does not name (e.g. draft_extend) still gets its rows."""
    kinds: list[str] = []
    for s in summaries:
        for k in ((s.get("verify") or {}).get("launches_by_kind") or {}):
            if k not in _SHOWN_KINDS and k != "prefill" and k not in kinds:
                kinds.append(k)
    rows = []
    for k in sorted(kinds):
        rows.append((f"{k} graph replays", _launches(k, "graph"), "int"))
        rows.append((f"{k} eager launches", _launches(k, "eager"), "int"))
    return rows


def rows_for(summaries: list[dict]) -> list[tuple[str, Callable[[dict], Any], str]]:
    """SUMMARY_ROWS with rows for any further pass kind after the draft rows."""
    rows = list(SUMMARY_ROWS)
    at = next(i for i, r in enumerate(rows) if r[0] == "draft eager launches") + 1
    return rows[:at] + _kind_rows(summaries) + rows[at:]


def fmt_value(x: Any, unit: str) -> str:
    """A value as the tables show it."""
    if x is None:
        return "n/a"
    if unit == "text":
        return str(x)
    x = float(x)
    if not math.isfinite(x):
        return "inf" if x > 0 else "n/a"
    if unit == "s" and abs(x) >= 1:
        return f"{x:.3f} s"
    if unit in ("s", "ms"):
        return _ms(x)
    if unit == "frac":
        return f"{100 * x:.2f}%"
    if unit == "int":
        return str(int(x))
    return format(x, ".1f" if unit == "f1" else ".3f")


def _ms(x: float, sign: str = "") -> str:
    """Seconds as milliseconds: two decimals below 10 ms, one above."""
    ms = x * 1000
    return format(ms, f"{sign}.{2 if abs(ms) < 10 else 1}f") + " ms"


def _raw(get, s: dict) -> Any:
    try:
        return get(s)
    except (KeyError, TypeError):
        return None


def summary_table(summaries: list[dict]) -> list[tuple[str, list[str]]]:
    """[(label, [formatted value per run])] -- the one table both the terminal and HTML show."""
    return [(label, [fmt_value(_raw(get, s), unit) for s in summaries])
            for label, get, unit in rows_for(summaries)]


def misattributed(summary: dict) -> int:
    """Query rows the run attributed to the wrong request (unsafe-derived launches that mixed
    widths); > 0 means the run's outputs would be wrong, whatever its latencies say."""
    return int(((summary.get("verify") or {}).get("violations")) or 0)


def baseline_differences(summaries: list[dict], base: int) -> dict[str, Any]:
    """Each numeric headline metric of every run against run ``base``: ``{metric: {"unit",
    "baseline", "runs": {name: {"value", "abs", "pct"}}}}``; ``abs`` = value - baseline, ``pct`` =
    100 * abs / |baseline| (None when the baseline is 0 or a value is missing)."""
    out: dict[str, Any] = {}
    b = summaries[base]
    for label, get, unit in rows_for(summaries):
        if unit == "text":
            continue
        bv = _raw(get, b)
        runs = {}
        for i, s in enumerate(summaries):
            if i == base:
                continue
            v = _raw(get, s)
            d = None if v is None or bv is None else float(v) - float(bv)
            pct = None if d is None or float(bv) == 0 else 100.0 * d / abs(float(bv))
            runs[s["name"]] = {"value": v, "abs": d, "pct": pct}
        out[label.strip()] = {"unit": unit, "baseline": bv, "runs": runs}
    return out


def fmt_difference(d: float | None, pct: float | None, unit: str) -> tuple[str, str]:
    """(absolute, relative) difference as the baseline table shows them."""
    if d is None or not math.isfinite(d):
        a = "n/a"
    elif unit in ("s", "ms"):
        a = _ms(d, "+") if unit == "ms" or abs(d) < 1 else f"{d:+.3f} s"
    elif unit == "frac":
        a = f"{100 * d:+.2f} pp"
    elif unit == "int":
        a = f"{int(round(d)):+d}"
    else:
        a = format(d, "+.1f" if unit == "f1" else "+.3f")
    r = "n/a" if pct is None or not math.isfinite(pct) else f"{pct:+.1f}%"
    return a, r


#: Columns of the per-category / per-tenant table (after the run and class columns).
CLASS_HEAD = ("requests", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p99", "goodput",
              "acceptance length")


def class_rows(names: list[str], summaries: list[dict], key: str, column: str
               ) -> list[tuple[str, str, list[str]]]:
    """[(run, class value, cells)] of every run's ``by_category``/``by_tenant`` rows, run by run."""
    out = []
    for name, s in zip(names, summaries):
        for row in s.get(key) or []:
            cells = [str(row["requests"]), fmt_value(row["ttft_p50_s"], "s"),
                     fmt_value(row["ttft_p99_s"], "s"), fmt_value(row["tpot_p50_s"], "ms"),
                     fmt_value(row["tpot_p99_s"], "ms"), fmt_value(row["e2e_p99_s"], "s"),
                     fmt_value(row["goodput_frac"], "frac"),
                     fmt_value(row["accept_len_mean"], "f3")]
            out.append((name, str(row[column]), cells))
    return out
