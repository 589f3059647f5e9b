"""Statistics of a trace: what ``specsched trace inspect`` prints (every key in docs/traces.md).

The file is validated while it streams (a broken file is refused like everywhere else); the
statistics are accumulated per batch, so memory holds a few numbers per request, not the lists.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from traces.io import _list_numpy
from traces.schema import META_ACCEPTANCE, META_NOTES, META_SOURCE
from traces.validate import TraceChecker, open_trace, read_batches

__all__ = ["inspect_trace", "render_inspect"]

_PCTS = (50, 90, 99)


def _dist(x: np.ndarray) -> dict[str, float]:
    if x.size == 0:
        return {"min": None, "p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    q = np.percentile(x, _PCTS)
    return {"min": _num(x.min()), "p50": _num(q[0]), "p90": _num(q[1]), "p99": _num(q[2]),
            "max": _num(x.max()), "mean": _num(x.mean())}


def _num(v) -> float | int:
    v = float(v)
    return int(v) if v.is_integer() and abs(v) < 2**53 else round(v, 6)


class _Pairs:
    """Pooled Pearson correlation of within-request-demeaned consecutive values."""

    def __init__(self) -> None:
        self.n = 0
        self.sx = self.sy = self.sxx = self.syy = self.sxy = 0.0

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        self.n += x.size
        self.sx += float(x.sum())
        self.sy += float(y.sum())
        self.sxx += float((x * x).sum())
        self.syy += float((y * y).sum())
        self.sxy += float((x * y).sum())

    def corr(self) -> float | None:
        if self.n < 3:
            return None
        mx, my = self.sx / self.n, self.sy / self.n
        vx = self.sxx / self.n - mx * mx
        vy = self.syy / self.n - my * my
        if vx <= 0 or vy <= 0:
            return None
        return round((self.sxy / self.n - mx * my) / np.sqrt(vx * vy), 4)


def inspect_trace(path: str | os.PathLike) -> dict[str, Any]:
    """Validate ``path`` and return its statistics as one JSON-serialisable dict."""
    pf = open_trace(path)
    checker = TraceChecker(str(path), pf.schema_arrow, pf.metadata.metadata)
    checker.raise_if_problems()
    prompt: list[np.ndarray] = []
    output: list[np.ndarray] = []
    steps_per_req: list[np.ndarray] = []
    width_hist = np.zeros(1, np.int64)
    distinct_per_req: list[np.ndarray] = []
    sum_d = sum_a = n_steps = 0
    pairs = _Pairs()
    cats: dict[str, int] = {}
    tenants: dict[str, int] = {}
    prefix_lens: list[np.ndarray] = []
    prefix_ids: list[np.ndarray] = []
    for batch in read_batches(pf, str(path), batch_size=65536):
        b = checker.feed(batch)
        if checker.fatal:
            continue
        prompt.append(b.column("prompt_tokens").to_numpy().astype(np.int64))
        if checker.has_prefix:
            col = b.column("prefix_hashes")
            prefix_lens.append(np.diff(np.asarray(col.offsets.to_numpy(), np.int64)))
            prefix_ids.append(np.asarray(col.values.to_numpy(zero_copy_only=False), np.int64))
        output.append(b.column("output_tokens").to_numpy().astype(np.int64))
        for name, acc in (("category", cats), ("tenant", tenants)):
            if name in b.schema.names:
                vc = b.column(name).value_counts()
                for item in vc.to_pylist():
                    key = "(null)" if item["values"] is None else item["values"]
                    acc[key] = acc.get(key, 0) + item["counts"]
        if not checker.has_lists:
            continue
        off, d = _list_numpy(b.column("draft_tokens"))
        _, a = _list_numpy(b.column("accepted_tokens"))
        d = d.astype(np.int64)
        a = a.astype(np.int64)
        lens = np.diff(off)
        steps_per_req.append(lens)
        n_steps += int(d.size)
        sum_d += int(d.sum())
        sum_a += int(a.sum())
        w = d + 1
        if w.size:
            h = np.bincount(w)
            if h.size > width_hist.size:
                width_hist = np.concatenate([width_hist, np.zeros(h.size - width_hist.size, np.int64)])
            width_hist[: h.size] += h
        # distinct proposed widths per request (0 for requests without steps)
        rid = np.repeat(np.arange(lens.size), lens)
        if rid.size:
            key = np.unique(rid * (int(w.max()) + 1) + w)
            distinct_per_req.append(np.bincount(key // (int(w.max()) + 1), minlength=lens.size))
            mean = np.bincount(rid, a, minlength=lens.size) / np.maximum(lens, 1)
            x = a - mean[rid]
            same = rid[1:] == rid[:-1]
            pairs.add(x[:-1][same], x[1:][same])
        else:
            distinct_per_req.append(np.zeros(lens.size, np.int64))
    moved = checker.finish()
    arrivals = np.sort(checker.arrivals(), kind="stable")
    n = checker.rows
    span = float(arrivals[-1] - arrivals[0]) if n else 0.0
    gaps = np.diff(arrivals)
    meta = checker.metadata
    acc = meta.get(META_ACCEPTANCE) if isinstance(meta.get(META_ACCEPTANCE), dict) else None
    out: dict[str, Any] = {
        "path": str(path),
        "rows": n,
        "format_version": meta.get("specsched.format_version"),
        "columns": list(checker.columns),
        "row_groups": pf.metadata.num_row_groups,
        "sorted": moved == 0,
        "rows_moved_by_sort": moved,
        "first_arrival_s": _num(arrivals[0]) if n else None,
        "last_arrival_s": _num(arrivals[-1]) if n else None,
        "span_s": round(span, 6),
        "rate_per_s": round((n - 1) / span, 6) if span > 0 else None,
        "interarrival_mean_s": round(float(gaps.mean()), 6) if gaps.size else None,
        "interarrival_cv": (round(float(gaps.std() / gaps.mean()), 4)
                            if gaps.size and gaps.mean() > 0 else None),
        "prompt_tokens": _dist(np.concatenate(prompt)) if prompt else _dist(np.zeros(0)),
        "output_tokens": _dist(np.concatenate(output)) if output else _dist(np.zeros(0)),
        "total_output_tokens": int(sum(int(o.sum()) for o in output)),
    }
    if checker.has_lists:
        spr = np.concatenate(steps_per_req) if steps_per_req else np.zeros(0, np.int64)
        distinct = np.concatenate(distinct_per_req) if distinct_per_req else np.zeros(0, np.int64)
        nz_widths = {str(w): round(int(c) / n_steps, 6) for w, c in enumerate(width_hist) if c}
        proposed_d = [w - 1 for w, c in enumerate(width_hist) if c]
        with_steps = distinct > 0
        out.update({
            "steps": n_steps,
            "steps_per_request": _dist(spr),
            "drafts_per_step_mean": round(sum_d / n_steps, 6) if n_steps else None,
            "drafts_per_step_min": min(proposed_d) if proposed_d else None,
            "drafts_per_step_max": max(proposed_d) if proposed_d else None,
            "accepted_per_step_mean": round(sum_a / n_steps, 6) if n_steps else None,
            "committed_per_step_mean": round((sum_a + n_steps) / n_steps, 6) if n_steps else None,
            "acceptance_rate": round(sum_a / sum_d, 6) if sum_d else None,
            "width_share": nz_widths,
            "distinct_widths": len(nz_widths),
            "mixed_widths": len(nz_widths) > 1,
            "requests_with_varying_width": (round(float((distinct[with_steps] > 1).mean()), 6)
                                            if with_steps.any() else None),
            "accept_lag1_autocorr": pairs.corr(),
        })
    else:
        out.update({"steps": None})
    total_c = sum(cats.values())
    total_t = sum(tenants.values())
    out["category_share"] = ({k: round(v / total_c, 6) for k, v in sorted(cats.items())}
                             if cats else None)
    out["tenant_share"] = ({k: round(v / total_t, 6) for k, v in sorted(tenants.items())}
                           if tenants else None)
    out.update(_prefix_section(checker, prompt, prefix_lens, prefix_ids))
    out["acceptance"] = ({k: acc.get(k) for k in ("kind", "params", "seed")} if acc else None)
    if acc and acc.get("position_accept_prob"):
        out["position_accept_prob"] = acc["position_accept_prob"]
        out["position_accept_prob_source"] = "metadata"
    elif checker.has_lists:
        from traces.io import read_trace_arrays
        ta = read_trace_arrays(path)
        out["position_accept_prob"] = ta.acceptance["position_accept_prob"]
        out["position_accept_prob_source"] = "estimated from the lists"
    else:
        out["position_accept_prob"] = None
        out["position_accept_prob_source"] = None
    out["source"] = meta.get(META_SOURCE)
    out["notes"] = list(meta.get(META_NOTES) or [])
    if moved:
        out["notes"].append(f"arrivals are not sorted: readers sort them stably ({moved} rows moved)")
    return out


def _prefix_section(checker, prompt, lens, ids) -> dict[str, Any]:
    """The ``prefix_*`` keys: the ideal (infinite-cache) hit rate, in arrival order."""
    if not checker.has_prefix:
        return {k: None for k in ("prefix_block_tokens", "prefix_ids", "prefix_distinct_ids",
                                  "prefix_requests_without_ids", "prefix_ideal_hit_tokens",
                                  "prefix_ideal_hit_rate", "prefix_requests_with_hit")}
    from traces.acceptance import multi_range
    from traces.prefix import prefix_stats

    p = np.concatenate(prompt) if prompt else np.zeros(0, np.int64)
    n_ids = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    flat = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    starts = np.concatenate([[0], np.cumsum(n_ids)[:-1]]).astype(np.int64)
    order = np.argsort(checker.arrivals(), kind="stable")      # arrival order, ties in file order
    flat = flat[multi_range(starts[order], n_ids[order])]
    off = np.concatenate([[0], np.cumsum(n_ids[order])]).astype(np.int64)
    return prefix_stats(p[order], off, flat, int(checker.prefix_block))


def render_inspect(stats: dict[str, Any], console) -> None:
    """Print ``stats`` as readable rich tables."""
    from rich.table import Table

    head = Table(title=f"trace {stats['path']}", show_header=False, title_justify="left")
    head.add_column(style="bold")
    head.add_column()

    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    head.add_row("rows", fmt(stats["rows"]))
    head.add_row("columns", ", ".join(stats["columns"]))
    head.add_row("span", f"{fmt(stats['span_s'])} s")
    head.add_row("rate", f"{fmt(stats['rate_per_s'])} req/s")
    head.add_row("inter-arrival", f"mean {fmt(stats['interarrival_mean_s'])} s, "
                                  f"CV {fmt(stats['interarrival_cv'])}")
    head.add_row("sorted", "yes" if stats["sorted"] else f"no ({stats['rows_moved_by_sort']} rows move)")
    if stats.get("steps") is not None:
        head.add_row("verify steps", fmt(stats["steps"]))
        head.add_row("drafts / step", f"mean {fmt(stats['drafts_per_step_mean'])} "
                                      f"(min {fmt(stats['drafts_per_step_min'])}, "
                                      f"max {fmt(stats['drafts_per_step_max'])})")
        head.add_row("accepted / step", fmt(stats["accepted_per_step_mean"]))
        head.add_row("committed / step", fmt(stats["committed_per_step_mean"]))
        head.add_row("acceptance rate", fmt(stats["acceptance_rate"]))
        head.add_row("mixed widths", f"{'yes' if stats['mixed_widths'] else 'no'} "
                                     f"({stats['distinct_widths']} widths; "
                                     f"{fmt(stats['requests_with_varying_width'])} of requests vary)")
        head.add_row("lag-1 autocorr", fmt(stats["accept_lag1_autocorr"]))
    else:
        head.add_row("verify steps", "no per-step lists (give --acceptance when simulating)")
    if stats.get("acceptance"):
        a = stats["acceptance"]
        head.add_row("acceptance", f"{a.get('kind')} (seed {a.get('seed')})")
    if stats.get("prefix_block_tokens") is not None:
        head.add_row("prefix blocks", f"{fmt(stats['prefix_ids'])} ids of "
                                      f"{fmt(stats['prefix_block_tokens'])} tokens "
                                      f"({fmt(stats['prefix_distinct_ids'])} distinct)")
        head.add_row("ideal prefix hit rate",
                     f"{fmt(stats['prefix_ideal_hit_rate'])} of prompt tokens "
                     f"({fmt(stats['prefix_requests_with_hit'])} of requests hit; infinite cache)")
    src = stats.get("source")
    if isinstance(src, dict):
        head.add_row("source", ", ".join(f"{k}={src[k]}" for k in ("format", "file", "rows")
                                          if k in src))
    console.print(head)

    lengths = Table(title="lengths (tokens)", title_justify="left")
    lengths.add_column("")
    for k in ("min", "p50", "p90", "p99", "max", "mean"):
        lengths.add_column(k, justify="right")
    rows = [("prompt", stats["prompt_tokens"]), ("output", stats["output_tokens"])]
    if stats.get("steps") is not None:
        rows.append(("steps/request", stats["steps_per_request"]))
    for name, d in rows:
        lengths.add_row(name, *[fmt(d[k]) for k in ("min", "p50", "p90", "p99", "max", "mean")])
    console.print(lengths)

    if stats.get("width_share"):
        widths = Table(title="verify widths (drafts + 1), share of steps", title_justify="left")
        widths.add_column("width", justify="right")
        widths.add_column("share", justify="right")
        for w, s in stats["width_share"].items():
            widths.add_row(w, f"{s:.2%}")
        console.print(widths)
    if stats.get("position_accept_prob"):
        probs = stats["position_accept_prob"]
        console.print("P(position j accepted | earlier accepted): " +
                      ", ".join(f"{j + 1}:{p:.3f}" for j, p in enumerate(probs)) +
                      f"  [{stats['position_accept_prob_source']}]")
    for name in ("category_share", "tenant_share"):
        if stats.get(name):
            console.print(f"{name.replace('_', ' ')}: " +
                          ", ".join(f"{k} {v:.1%}" for k, v in stats[name].items()))
    for note in stats.get("notes") or []:
        console.print(f"note: {note}")
