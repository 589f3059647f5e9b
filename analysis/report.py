"""``specsched report``: one self-contained HTML file (and a terminal table) for one or more runs.

The HTML embeds every figure as inline SVG and its style inline: no scripts or fonts are
fetched, so the file opens offline and can be mailed around.  A few lines of inline JavaScript
only mark, on the ``<body>``, how many figures the browser laid out (``data-figures-rendered``),
which the screenshot check (benchmarks/screenshot_report.py) reads.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Callable

from analysis.metrics import summarize
from analysis.results import RunResults
from analysis.slo import Slo, SloCheck
from traces.atomic import HTML_GENERATOR, atomic_output_file

__all__ = ["readable", "SUMMARY_ROWS", "summary_table", "build_html", "write_report", "print_summary"]


def readable(path: str | Path) -> None:
    """Give a finished output the usual permissions (temporaries are created 0600/0700)."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~mask)


def _ms(x):
    if x is None:
        return "n/a"
    if not math.isfinite(x):
        return "inf"
    return f"{x * 1000:.1f} ms" if abs(x) < 1 else f"{x:.3f} s"


def _num(fmt: str) -> Callable[[Any], str]:
    def f(x):
        if x is None:
            return "n/a"
        return format(x, fmt)
    return f


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.2f}%"


def _get(*path: str) -> Callable[[dict], Any]:
    def g(s: dict):
        for p in path:
            if s is None:
                return None
            s = s.get(p) if isinstance(s, dict) else None
        return s
    return g


#: (label, getter over a summarize() dict, formatter), in display order.
SUMMARY_ROWS: list[tuple[str, Callable[[dict], Any], Callable[[Any], str]]] = [
    ("requests finished", lambda s: f"{s['finished']}/{s['requests']}", str),
    ("duration", _get("duration_s"), _ms),
    ("throughput (output tok/s)", _get("throughput_tok_s"), _num(".1f")),
    ("throughput (req/s)", _get("throughput_req_s"), _num(".3f")),
    ("goodput (req/s)", _get("goodput", "req_s"), _num(".3f")),
    ("goodput (fraction)", _get("goodput", "fraction"), _pct),
    ("TTFT p50", _get("ttft_s", "p50"), _ms),
    ("TTFT p90", _get("ttft_s", "p90"), _ms),
    ("TTFT p99", _get("ttft_s", "p99"), _ms),
    ("TPOT p50", _get("tpot_s", "p50"), _ms),
    ("TPOT p90", _get("tpot_s", "p90"), _ms),
    ("TPOT p99", _get("tpot_s", "p99"), _ms),
    ("inter-token gap p50 (per token)", _get("itl_s", "p50"), _ms),
    ("inter-token gap p99 (per token)", _get("itl_s", "p99"), _ms),
    ("inter-token gap p50 (per step)", _get("step_gap_s", "p50"), _ms),
    ("inter-token gap p99 (per step)", _get("step_gap_s", "p99"), _ms),
    ("longest gap per request, p99", _get("max_gap_s", "p99"), _ms),
    ("E2E p50", _get("e2e_s", "p50"), _ms),
    ("E2E p99", _get("e2e_s", "p99"), _ms),
    ("queueing delay p50", _get("queue_s", "p50"), _ms),
    ("queueing delay p99", _get("queue_s", "p99"), _ms),
    ("acceptance length (tokens/step)", _get("verify", "accept_len_mean"), _num(".3f")),
    ("draft acceptance rate", _get("acceptance_rate"), _pct),
    ("verify efficiency (committed/slots)", _get("verify", "verify_efficiency"), _pct),
    ("padding waste (all)", _get("verify", "padding_waste"), _pct),
    ("  width padding", _get("verify", "width_pad_frac"), _pct),
    ("  graph batch padding", _get("verify", "graph_pad_frac"), _pct),
    ("verify launches / iteration", _get("iterations", "verify_launches_per_iter"), _num(".3f")),
    ("all launches / iteration", _get("iterations", "launches_per_iter"), _num(".3f")),
    ("iterations mixing widths", _get("iterations", "mixed_iter_frac"), _pct),
    ("verify graph replays / eager", lambda s: "{}/{}".format(
        s["verify"]["launches_by_kind"]["verify"]["graph"],
        s["verify"]["launches_by_kind"]["verify"]["eager"]), str),
    ("draft graph replays / eager", lambda s: "{}/{}".format(
        s["verify"]["launches_by_kind"]["draft"]["graph"],
        s["verify"]["launches_by_kind"]["draft"]["eager"]), str),
    ("retractions (requests)", lambda s: f"{s['retractions']} ({s['retracted_requests']})", str),
    ("truncated drafts", _get("truncated_drafts"), str),
    ("uniformity violations (rows)", _get("verify", "violations"), str),
]


#: Columns of the one-row-per-run terminal table (many runs): summary row label -> header.
_COMPACT = {
    "throughput (output tok/s)": "tok/s",
    "goodput (fraction)": "goodput",
    "TTFT p90": "TTFT p90",
    "TPOT p99": "TPOT p99",
    "inter-token gap p99 (per token)": "ITL p99",
    "acceptance length (tokens/step)": "accept",
    "padding waste (all)": "padding",
    "verify launches / iteration": "launch/it",
    "iterations mixing widths": "mixed",
}


def summary_table(summaries: list[dict]) -> list[tuple[str, list[str]]]:
    """[(label, [formatted value per run])] -- the one table both the terminal and HTML show."""
    rows = []
    for label, get, fmt in SUMMARY_ROWS:
        vals = []
        for s in summaries:
            try:
                v = get(s)
            except (KeyError, TypeError):
                v = None
            vals.append(fmt(v) if v is not None else "n/a")
        rows.append((label, vals))
    return rows


def _meta(run: RunResults) -> dict[str, str]:
    s = run.summary or {}
    cfg = s.get("config") if isinstance(s.get("config"), dict) else {}
    trace = s.get("trace")
    if isinstance(trace, dict):
        trace = trace.get("path") or trace.get("source") or json.dumps(trace, sort_keys=True)
    backend = s.get("backend")
    if isinstance(backend, dict):
        backend = backend.get("backend") or backend.get("name") or json.dumps(backend, sort_keys=True)
    return {
        "folder": str(run.path) if run.path else "(in memory)",
        "trace": str(trace) if trace is not None else "n/a",
        "backend": str(backend) if backend is not None else "n/a",
        "policy": str(s.get("policy", cfg.get("policy", "n/a")) if cfg else s.get("policy", "n/a")),
        "warnings": "; ".join(map(str, s.get("warnings") or [])) or "none",
    }


_CLASS_HEAD = ("requests", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p99", "goodput",
               "acceptance length")

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1240px;
color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 8px}
th{background:#f4f4f4;text-align:left} td.v{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37;font-weight:600} .fail{color:#c62828;font-weight:600}
figure{margin:14px 0;border:1px solid #eee;padding:8px} figcaption{font-size:13px;color:#555}
figure svg{max-width:100%;height:auto;display:block} .small{font-size:12px;color:#666}
"""

_JS = """
(function(){var figs=document.querySelectorAll('figure.plot');var ok=0;
figs.forEach(function(f){var s=f.querySelector('svg');if(!s)return;var r=s.getBoundingClientRect();
var drawn=s.querySelectorAll('path,line,rect,image,use').length;
f.setAttribute('data-box',[Math.round(r.left+window.scrollX),Math.round(r.top+window.scrollY),
Math.round(r.width),Math.round(r.height)].join(','));
if(r.width>50&&r.height>50&&drawn>3){ok++;f.setAttribute('data-rendered','1');}
else{f.setAttribute('data-rendered','0');}});
document.body.setAttribute('data-figures-rendered',ok+'/'+figs.length);})();
"""


def build_html(runs: list[RunResults], *, slo: Slo | None = None,
               title: str = "specsched report") -> tuple[str, list[dict]]:
    """The report as one HTML string, and the per-run summaries it shows."""
    from analysis.plots import render_all

    summaries = [summarize(r, ttft_s=slo.ttft_s if slo else None,
                           tpot_s=slo.tpot_s if slo else None) for r in runs]
    checks: list[SloCheck] = [slo.check(r) for r in runs] if slo else []
    e = html.escape
    out = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>", HTML_GENERATOR,
           f"<title>{e(title)}</title>", f"<style>{_CSS}</style></head><body>",
           f"<h1>{e(title)}</h1>",
           f"<p class='small'>{len(runs)} run{'s' if len(runs) != 1 else ''}. Every figure is "
           f"computed from the results tables (requests.parquet, steps.parquet, "
           f"request_steps.parquet); definitions are in docs/analysis.md.</p>"]
    out.append("<h2>Runs</h2><table><tr><th></th>"
               + "".join(f"<th>{e(r.name)}</th>" for r in runs) + "</tr>")
    metas = [_meta(r) for r in runs]
    for key in ("folder", "trace", "backend", "policy", "warnings"):
        out.append(f"<tr><th>{key}</th>" + "".join(f"<td>{e(m[key])}</td>" for m in metas)
                   + "</tr>")
    out.append("</table>")
    out.append("<h2>Summary</h2><table><tr><th>metric</th>"
               + "".join(f"<th>{e(r.name)}</th>" for r in runs) + "</tr>")
    for label, vals in summary_table(summaries):
        out.append(f"<tr><th>{e(label)}</th>" + "".join(f"<td class='v'>{e(v)}</td>" for v in vals)
                   + "</tr>")
    out.append("</table>")
    if slo is not None:
        out.append(f"<h2>SLO <code>{e(slo.text)}</code></h2><table><tr><th>term</th>"
                   + "".join(f"<th>{e(r.name)}</th>" for r in runs) + "</tr>")
        for j, term in enumerate(slo.constraints):
            cells = []
            for c in checks:
                tr = c.terms[j]
                cls = "ok" if tr.ok else "fail"
                val = f"{tr.value:.4g}" if term.metric == "goodput" else _ms(tr.value)
                cells.append(f"<td class='v {cls}'>{e(val)} {'met' if tr.ok else 'missed'}</td>")
            out.append(f"<tr><th>{e(term.text)}</th>{''.join(cells)}</tr>")
        out.append("<tr><th>all terms</th>" + "".join(
            f"<td class='v {'ok' if c.ok else 'fail'}'>{'met' if c.ok else 'missed'}</td>"
            for c in checks) + "</tr></table>")
    for key, title_ in (("by_category", "category"), ("by_tenant", "tenant")):
        for r, s in zip(runs, summaries):
            rows = s.get(key)
            if not rows:
                continue
            out.append(f"<h2>Per {title_}: {e(r.name)}</h2><table><tr><th>{title_}</th>"
                       + "".join(f"<th>{h}</th>" for h in _CLASS_HEAD) + "</tr>")
            for row in rows:
                cells = [str(row["requests"]), _ms(row["ttft_p50_s"]), _ms(row["ttft_p99_s"]),
                         _ms(row["tpot_p50_s"]), _ms(row["tpot_p99_s"]), _ms(row["e2e_p99_s"]),
                         _pct(row["goodput_frac"]),
                         "n/a" if row["accept_len_mean"] is None else f"{row['accept_len_mean']:.3f}"]
                out.append(f"<tr><th>{e(row[title_])}</th>"
                           + "".join(f"<td class='v'>{e(c)}</td>" for c in cells) + "</tr>")
            out.append("</table>")
    out.append("<h2>Figures</h2>")
    for fid, ftitle, caption, svg in render_all(runs, summaries):
        out.append(f"<figure class='plot' id='{fid}'><figcaption><b>{e(ftitle)}.</b> "
                   f"{e(caption)}</figcaption>{svg}</figure>")
    out.append(f"<script>{_JS}</script></body></html>")
    return "\n".join(out) + "\n", summaries


def write_report(runs: list[RunResults], out: str | Path, *, slo: Slo | None = None,
                 title: str = "specsched report", inputs=()) -> list[dict]:
    """Write the HTML report atomically; returns the per-run summaries.  ``out`` may replace an
    earlier specsched report, never one of ``inputs`` or another file."""
    text, summaries = build_html(runs, slo=slo, title=title)
    with atomic_output_file(out, inputs=inputs, kind="html") as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
        readable(tmp)
    return summaries


def print_summary(runs: list[RunResults], summaries: list[dict], *, console=None,
                  checks: list[SloCheck] | None = None) -> None:
    """The summary table on the terminal (rich), one column per run."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    if len(runs) > 4:  # many runs: one row per run, the headline metrics only
        table = Table(title="specsched summary")
        table.add_column("run")
        rows = [r for r in SUMMARY_ROWS if r[0] in _COMPACT]
        for label, _, _ in rows:
            table.add_column(_COMPACT[label], justify="right")
        if checks:
            table.add_column("SLO")
        for i, (r, s) in enumerate(zip(runs, summaries)):
            cells = []
            for _, get, fmt in rows:
                try:
                    v = get(s)
                except (KeyError, TypeError):
                    v = None
                cells.append(fmt(v) if v is not None else "n/a")
            if checks:
                cells.append("[green]met[/]" if checks[i].ok else "[red]missed[/]")
            table.add_row(r.name, *cells)
        console.print(table)
        return
    table = Table(title="specsched summary", show_lines=False)
    table.add_column("metric")
    for r in runs:
        table.add_column(r.name, justify="right")
    for label, vals in summary_table(summaries):
        table.add_row(label, *vals)
    if checks:
        table.add_row("SLO", *[("[green]met[/]" if c.ok else "[red]missed: " + ", ".join(c.failed())
                                + "[/]") for c in checks])
    console.print(table)
