"""``specsched report``: one self-contained HTML file (and a terminal table) for one or more runs.

The HTML embeds every figure as inline SVG and its style inline: no scripts or fonts are
fetched, so the file opens offline and can be mailed around.  A few lines of inline JavaScript
only mark, on the ``<body>``, how many figures the browser laid out (``data-figures-rendered``),
which the screenshot check (benchmarks/screenshot_report.py) reads.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from analysis.metrics import summarize
from analysis.report_tables import (CLASS_HEAD, SUMMARY_ROWS, VIOLATIONS_ROW, baseline_differences,
                                    class_rows, fmt_difference, fmt_value, misattributed, rows_for,
                                    summary_table)
from analysis.results import RunResults
from analysis.slo import Slo, SloCheck
from traces.atomic import HTML_GENERATOR, atomic_output_file

__all__ = ["readable", "SUMMARY_ROWS", "summary_table", "build_html", "write_report",
           "print_summary", "slo_verdict"]


def readable(path: str | Path) -> None:
    """Give a finished output the usual permissions (temporaries are created 0600/0700)."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~mask)


#: Columns of the one-row-per-run terminal table (many runs): summary row label -> header.
_COMPACT = {
    "throughput (output tok/s)": "tok/s",
    "goodput (fraction)": "goodput",
    "TTFT p90": "TTFT p90",
    "TPOT p99": "TPOT p99",
    "inter-token gap p99 (per token)": "ITL p99",
    "acceptance length (tokens/step)": "accept",
    "padding waste": "padding",
    "verify launches / iteration": "launch/it",
    "iterations mixing widths": "mixed",
    VIOLATIONS_ROW: "misattr.",
}


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


def slo_verdict(check: SloCheck, summary: dict) -> tuple[bool, str]:
    """(met, words) for a run's SLO check: a run that misattributed query rows (unsafe-derived
    launches mixing widths) never "meets" an SLO, since its outputs would be wrong."""
    bad = misattributed(summary)
    if bad:
        return False, f"invalid: {bad} rows misattributed"
    return check.ok, "met" if check.ok else "missed: " + ", ".join(check.failed())


def _e(x: Any) -> str:
    return html.escape(str(x))


def _run_header(runs: list[RunResults], summaries: list[dict], first: str = "metric") -> str:
    cells = []
    for r, s in zip(runs, summaries):
        bad = misattributed(s)
        flag = (f"<br><span class='fail'>unsafe: {bad} rows misattributed</span>" if bad else "")
        cells.append(f"<th>{_e(r.name)}{flag}</th>")
    return f"<tr><th>{_e(first)}</th>{''.join(cells)}</tr>"


def _summary_html(runs, summaries) -> list[str]:
    out = ["<h2>Summary</h2><table>", _run_header(runs, summaries)]
    for label, vals in summary_table(summaries):
        cls = ["v"] * len(vals)
        if label == VIOLATIONS_ROW:
            cls = ["v fail" if misattributed(s) else "v" for s in summaries]
        out.append(f"<tr><th>{_e(label)}</th>"
                   + "".join(f"<td class='{c}'>{_e(v)}</td>" for c, v in zip(cls, vals)) + "</tr>")
    out.append("</table>")
    return out


def _slo_html(slo: Slo, runs, summaries, checks) -> list[str]:
    out = [f"<h2>SLO <code>{_e(slo.text)}</code></h2><table>", _run_header(runs, summaries, "term")]
    for j, term in enumerate(slo.constraints):
        cells = []
        for c, s in zip(checks, summaries):
            tr = c.terms[j]
            ok = tr.ok and not misattributed(s)
            val = f"{tr.value:.4g}" if term.metric == "goodput" else fmt_value(
                tr.value, "ms" if term.metric in ("tpot", "itl", "step_gap") else "s")
            word = ("met" if tr.ok else "missed") if not misattributed(s) else "invalid run"
            cells.append(f"<td class='v {'ok' if ok else 'fail'}'>{_e(val)} {word}</td>")
        out.append(f"<tr><th>{_e(term.text)}</th>{''.join(cells)}</tr>")
    verdicts = [slo_verdict(c, s) for c, s in zip(checks, summaries)]
    out.append("<tr><th>all terms</th>" + "".join(
        f"<td class='v {'ok' if ok else 'fail'}'>{_e(words)}</td>" for ok, words in verdicts)
        + "</tr></table>")
    return out


def _baseline_html(summaries: list[dict], base: int) -> list[str]:
    diffs = baseline_differences(summaries, base)
    others = [s["name"] for i, s in enumerate(summaries) if i != base]
    if not others:
        return []
    out = [f"<h2>Difference against the baseline <code>{_e(summaries[base]['name'])}</code></h2>",
           "<p class='small'>Each run's value minus the baseline's (fractions in percentage "
           "points, pp), and that difference as a percentage of the baseline's value.</p>",
           "<table id='baseline'><tr><th rowspan='2'>metric</th><th rowspan='2'>baseline</th>"
           + "".join(f"<th colspan='2'>{_e(n)}</th>" for n in others) + "</tr><tr>"
           + "<th>&Delta;</th><th>&Delta;%</th>" * len(others) + "</tr>"]
    for label, d in diffs.items():
        cells = [f"<td class='v'>{_e(fmt_value(d['baseline'], d['unit']))}</td>"]
        for n in others:
            a, r = fmt_difference(d["runs"][n]["abs"], d["runs"][n]["pct"], d["unit"])
            cells.append(f"<td class='v'>{_e(a)}</td><td class='v'>{_e(r)}</td>")
        out.append(f"<tr><th>{_e(label)}</th>{''.join(cells)}</tr>")
    out.append("</table>")
    return out


def _class_html(runs, summaries) -> list[str]:
    out = []
    names = [r.name for r in runs]
    many = len(runs) > 1
    for key, column in (("by_category", "category"), ("by_tenant", "tenant")):
        rows = class_rows(names, summaries, key, column)
        if not rows:
            continue
        out.append(f"<h2>Per {column}</h2><table><tr>" + ("<th>run</th>" if many else "")
                   + f"<th>{column}</th>" + "".join(f"<th>{h}</th>" for h in CLASS_HEAD) + "</tr>")
        for name, value, cells in rows:
            out.append("<tr>" + (f"<td>{_e(name)}</td>" if many else "") + f"<th>{_e(value)}</th>"
                       + "".join(f"<td class='v'>{_e(c)}</td>" for c in cells) + "</tr>")
        out.append("</table>")
    return out


def build_html(runs: list[RunResults], *, slo: Slo | None = None, title: str = "specsched report",
               baseline: int | None = None) -> tuple[str, list[dict]]:
    """The report as one HTML string, and the per-run summaries it shows.

    ``baseline``: index of the run the other runs are compared against (a table of differences).
    """
    from analysis.plots import render_all

    summaries = [summarize(r, ttft_s=slo.ttft_s if slo else None,
                           tpot_s=slo.tpot_s if slo else None) for r in runs]
    checks: list[SloCheck] = [slo.check(r) for r in runs] if slo else []
    figures = render_all(runs, summaries)
    out = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>", HTML_GENERATOR,
           f"<title>{_e(title)}</title>", f"<style>{_CSS}</style></head><body>",
           f"<h1>{_e(title)}</h1>",
           f"<p class='small'>{len(runs)} run{'s' if len(runs) != 1 else ''}, {len(figures)} "
           f"figures. Every figure is computed from the results tables (requests.parquet, "
           f"steps.parquet, request_steps.parquet); definitions are in docs/analysis.md.</p>"]
    out.append("<h2>Runs</h2><table>" + _run_header(runs, summaries, ""))
    metas = [_meta(r) for r in runs]
    for key in ("folder", "trace", "backend", "policy", "warnings"):
        out.append(f"<tr><th>{key}</th>" + "".join(f"<td>{_e(m[key])}</td>" for m in metas)
                   + "</tr>")
    out.append("</table>")
    out += _summary_html(runs, summaries)
    if baseline is not None:
        out += _baseline_html(summaries, baseline)
    if slo is not None:
        out += _slo_html(slo, runs, summaries, checks)
    out += _class_html(runs, summaries)
    out.append("<h2>Figures</h2>")
    for fid, ftitle, caption, svg in figures:
        out.append(f"<figure class='plot' id='{fid}'><figcaption><b>{_e(ftitle)}.</b> "
                   f"{_e(caption)}</figcaption>{svg}</figure>")
    out.append(f"<script>{_JS}</script></body></html>")
    return "\n".join(out) + "\n", summaries


def write_report(runs: list[RunResults], out: str | Path, *, slo: Slo | None = None,
                 title: str = "specsched report", baseline: int | None = None,
                 inputs=()) -> list[dict]:
    """Write the HTML report atomically; returns the per-run summaries.  ``out`` may replace an
    earlier specsched report, never one of ``inputs`` or another file."""
    text, summaries = build_html(runs, slo=slo, title=title, baseline=baseline)
    with atomic_output_file(out, inputs=inputs, kind="html") as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
        readable(tmp)
    return summaries


def _verdict_markup(check: SloCheck, summary: dict) -> str:
    ok, words = slo_verdict(check, summary)
    return f"[green]{words}[/]" if ok else f"[red]{words}[/]"


def print_summary(runs: list[RunResults], summaries: list[dict], *, console=None,
                  checks: list[SloCheck] | None = None, baseline: int | None = None) -> None:
    """The summary table on the terminal (rich), one column per run (and the differences
    against the baseline run when one is given)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    if len(runs) > 4:  # many runs: one row per run, the headline metrics only
        table = Table(title="specsched summary")
        table.add_column("run")
        rows = [r for r in rows_for(summaries) if r[0] in _COMPACT]
        for label, _, _ in rows:
            table.add_column(_COMPACT[label], justify="right")
        if checks:
            table.add_column("SLO")
        for i, (r, s) in enumerate(zip(runs, summaries)):
            cells = [fmt_value(_safe(get, s), unit) for _, get, unit in rows]
            if misattributed(s):
                cells[-1] = f"[red]{cells[-1]}[/]"
            if checks:
                cells.append(_verdict_markup(checks[i], s))
            table.add_row(r.name, *cells)
        console.print(table)
    else:
        table = Table(title="specsched summary", show_lines=False)
        table.add_column("metric")
        for r in runs:
            table.add_column(r.name, justify="right")
        for label, vals in summary_table(summaries):
            if label == VIOLATIONS_ROW:
                vals = [f"[red]{v}[/]" if misattributed(s) else v for v, s in zip(vals, summaries)]
            table.add_row(label, *vals)
        if checks:
            table.add_row("SLO", *[_verdict_markup(c, s) for c, s in zip(checks, summaries)])
        console.print(table)
    if baseline is not None and len(runs) > 1:
        _print_baseline(summaries, baseline, console)


def _safe(get, s):
    try:
        return get(s)
    except (KeyError, TypeError):
        return None


def _print_baseline(summaries: list[dict], base: int, console) -> None:
    from rich.table import Table

    diffs = baseline_differences(summaries, base)
    others = [s["name"] for i, s in enumerate(summaries) if i != base]
    table = Table(title=f"difference against {summaries[base]['name']}")
    table.add_column("metric")
    table.add_column("baseline", justify="right")
    for n in others:
        table.add_column(n, justify="right")
    for label, d in diffs.items():
        cells = []
        for n in others:
            a, r = fmt_difference(d["runs"][n]["abs"], d["runs"][n]["pct"], d["unit"])
            cells.append(f"{a} ({r})")
        table.add_row(label, fmt_value(d["baseline"], d["unit"]), *cells)
    console.print(table)
