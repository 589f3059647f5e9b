"""Print every fidelity report's verdict as a table, computed from the reports' JSON twins.

One row per ``benchmarks/results/*/fidelity_*.json`` (written beside its ``.md`` by ``specsched
fidelity``): model; trace kind (from the trace file's name); the policy the reference run
recorded (``config.engine.policy``, with the controller unless ``static``; ``*``: read from the
recorded run's ``summary.json``, the report predating its ``config`` key); requests; profile
kind (``calibrated``: it carries ``specsched calibrate`` metadata; ``shipped``: its recorded
status is a shipped one, or without a status it lies in ``backends/profiles/``, ``†`` when its
sha256 is not today's file's, or for a calibrated profile when it is not today's ``specsched
calibrate`` of today's file, :func:`calibration_current`; else ``other``); one GPU on both
sides (``machines.same_gpu``); the ``--set`` what-ifs (backend settings other than today's
defaults, the rule ``benchmarks/regenerate_reports.py`` re-runs them by); checks met ``N of M``
(a check without a value is not met) and the missed ones.  A second table gives, per model, trace, policy and
what-ifs, the best report on a calibrated and on the shipped profile (checks met as a fraction,
then as a count, then the latest path), ``none`` where there is none.

    python benchmarks/fidelity_table.py
    python benchmarks/fidelity_table.py --calibrated-only --json /tmp/fidelity_rows.json
    python benchmarks/fidelity_table.py --docs docs/backends.md   # rewrite the docs' table

A third table, the coverage matrix (:func:`matrix`), has one row per shipped model and one column
per trace (conversation, long-context) and policy (``fixed``, SGLang's default, and the what-ifs
``split``, ``bucket``, ``pad``): the best report against today's shipped profile with no backend
what-if, ``✓`` when it met every check, and the best against a calibrated profile (``cal``);
``-`` where no live run of that kind has been compared.

``--misses`` prints instead, over today's reports (a shipped profile as it is now, or a
calibration of it) that have a repeat run, per profile kind and per-step or whole-run check:
the checks, those missed, and those missed by no more than the target plus how far the two live
recordings differ on that figure (the report's ``repeat_pct``): misses a second recording of
the same run could not tell from noise (:func:`misses`).

``--docs FILE`` writes the summary table into FILE between the lines :data:`BEGIN` and
:data:`END`, and the matrix between :data:`MATRIX_BEGIN` and :data:`MATRIX_END` when FILE has
them; ``tests/backends/test_fidelity_table.py`` checks that docs/backends.md holds what the
shipped reports give, so a new report cannot leave the docs' tables behind.

Reports whose live run ran on another GPU model than the profile is for (an H200 profile, or a
calibration of one, against a run on an H100: :func:`on_profile_gpu`) are left out of every
table; ``--other-gpus`` prints the rows and summary of those alone.

A report that cannot be read or lacks a key prints ``error: FILE: ...`` and exits 2.

It is one file past 400 lines because every table (rows, summary, matrix, misses) reads the
reports through one reading of their layout, :func:`make_row`, and one notion of "today's
profile" (:func:`is_current`, :func:`calibration_current`).
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.shipped import PROFILES_DIR, file_sha256, shipped_profiles  # noqa: E402
from benchmarks.regenerate_reports import backend_overrides  # noqa: E402

SHIPPED_STATUSES = ("validated", "experimental")
TRACE_KINDS = (("conv", "conversation"), ("long", "long-context"), ("code", "code"))
KINDS = ("calibrated", "shipped")
BEGIN = "<!-- fidelity_table.py --docs: begin -->"
END = "<!-- fidelity_table.py --docs: end -->"
MATRIX_BEGIN = "<!-- fidelity_table.py --matrix: begin -->"
MATRIX_END = "<!-- fidelity_table.py --matrix: end -->"
MATRIX_TRACES = ("conversation", "long-context")
MATRIX_POLICIES = ("fixed", "split", "bucket", "pad")


class BadReport(Exception):
    """A report that cannot be tabulated: ``str()`` is ``FILE: what is wrong``."""


def need(d: dict, dotted: str, path: Path, types=None):
    """``d``'s value at the dotted key, else :class:`BadReport` naming the key."""
    cur = d
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise BadReport(f"{path}: lacks key '{dotted}'")
        cur = cur[part]
    if types is not None and not isinstance(cur, types):
        raise BadReport(f"{path}: '{dotted}' is {type(cur).__name__}, not {types.__name__}")
    return cur


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, not JSON
        raise BadReport(f"{path}: cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadReport(f"{path}: not a JSON object")
    return data


def trace_kind(trace: str) -> str:
    stem = Path(trace).stem.lower()
    return next((kind for key, kind in TRACE_KINDS if key in stem), stem)


def short_check(name: str) -> str:
    """``step_mape_worst_band`` -> ``MAPE worst band``, ``ttft_p99`` -> ``TTFT p99``."""
    if name.startswith("step_mape_"):
        return "MAPE " + name[len("step_mape_"):].replace("off_grid", "off-grid").replace("_", " ")
    if name == "heldout_mape":
        return "MAPE held-out"
    head, _, q = name.partition("_")
    return f"{head.upper()} {q}" if q else name


def policy(report: dict, path: Path) -> tuple[str, bool]:
    """(policy label, from the recorded run's summary.json rather than the report)."""
    config, recorded, where = report.get("config"), False, path
    if config is None:  # reports of 2026-11-29 predate the config key
        run = need(report, "reference.recorded_run", path)
        for cand in ([Path(run), path.parent / Path(run).name] if run else []):
            if (cand / "summary.json").is_file():
                where = cand / "summary.json"
                config, recorded = read_json(where).get("config"), True
                break
        if not isinstance(config, dict):
            return "?", False
    pol = need(config, "engine.policy", where, str)
    ctrl = (config.get("engine") or {}).get("controller") or "static"
    return (pol if ctrl == "static" else f"{pol} ({ctrl})"), recorded


def profile_kind(profile: dict, path: Path) -> str:
    if isinstance(profile.get("calibration"), dict):
        return "calibrated"
    status = (profile.get("validation") or {}).get("status")
    if status is not None:
        return "shipped" if status in SHIPPED_STATUSES else "other"
    parts = Path(str(need(profile, "file", path))).parts
    return "shipped" if parts[-3:-1] == ("backends", "profiles") else "other"


@lru_cache(maxsize=None)
def shipped_sha(name: str) -> str | None:
    f = PROFILES_DIR / name
    return file_sha256(f) if f.is_file() else None


def is_current(profile: dict) -> bool | None:
    """Whether a shipped profile's recorded sha256 is today's file's (None: cannot tell)."""
    today = shipped_sha(Path(str(profile.get("file") or "")).name)
    return None if today is None or "sha256" not in profile else profile["sha256"] == today


@lru_cache(maxsize=None)
def _calibration_meta(file: str) -> dict | None:
    from backends.profile import read_profile

    f = ROOT / file
    if Path(file).is_absolute() or not f.is_file():
        return None
    meta = read_profile(f)[1]
    cal = meta.get("calibration")
    return dict(cal, model_spec=meta.get("model")) if isinstance(cal, dict) else cal


def calibration_current(profile: dict, moe: bool) -> bool | None:
    """Whether a calibrated profile is what ``specsched calibrate`` makes today of today's
    shipped file: its base's sha256 is that file's; no ``--residual tokens`` table (an opt-in
    form, ``backends.calibrate_residual``); under the fitted prior, its attention power
    is the one today's rule takes from its own anchors (:func:`_prior_current`); and, on a MoE
    model, its prefill factor was settled by today's rule (``backends.calibrate.settle_prefill``:
    its ``applied`` recorded, and under ``--prefill auto`` applied exactly when calibrated on
    another GPU model than the base's). None when the calibrated file is not kept here or names
    no base."""
    from backends.calibrate_prior import other_models

    cal = _calibration_meta(str(profile.get("file") or ""))
    if not isinstance(cal, dict) or not cal.get("base") or "base_sha256" not in cal:
        return None
    today = shipped_sha(Path(str(cal["base"])).name)
    if today is None:
        return None
    pre = (cal.get("factors") or {}).get("prefill") or {}
    if cal["base_sha256"] != today or not _prior_current(cal) or cal.get("residual"):
        return False  # a --residual tokens re-fit is an opt-in form, not the default's
    if not moe:
        return True
    if "applied" not in pre:
        return False
    other = other_models(cal.get("base_gpu"), cal.get("machine")) is not None
    return pre.get("mode") != "auto" or pre["applied"] == other


def _prior_current(cal: dict) -> bool:
    """False for a calibration whose fitted prior today's rule would not make from its own
    anchors (``backends.calibrate_prior.prior_for``): one that took no prior (``"chosen":
    "none"``, the rule of 5c51b30, reverted when the first live runs judged it), recorded
    another attention power, or fitted its prefill group without the prior (``prefill_prior:
    "none"``, the what-if of ``benchmarks/moe_prefill_prior_whatif.py``, not adopted); True
    otherwise (no prior note, or ``roofline``: nothing chosen). ``cal`` is
    :func:`_calibration_meta`'s, with the profile's model as ``model_spec``."""
    from backends.calibrate_prior import prior_for
    from backends.models import load_model

    note = cal.get("prior") or {}
    if note.get("rule") != "fitted":
        return True
    if note.get("chosen") == "none" or not cal.get("anchors"):
        return False
    spec = cal.get("model_spec") or {}
    model = load_model(spec.get("name"), tp=spec.get("tp"))
    _, today = prior_for(model, cal.get("base_gpu"), cal.get("machine"), "fitted",
                         cal["anchors"])
    return today is not None and all(today.get(k) == note.get(k)
                                     for k in ("attention_power", "prefill_prior"))


def make_row(path: Path, report: dict) -> dict:
    checks = need(report, "checks", path, dict)
    missed = []
    for name, c in sorted(checks.items()):
        if not isinstance(c, dict) or "pass" not in c:
            raise BadReport(f"{path}: lacks key 'checks.{name}.pass'")
        if c["pass"] is not True:
            missed.append(name)
    pol, recorded = policy(report, path)
    whatifs = (None if report.get("config") is None else
               [f"backend.{k}={v}" for k, v in backend_overrides(report).items()])
    md, profile = path.with_suffix(".md"), need(report, "profile", path, dict)
    kind = profile_kind(profile, path)
    return {"model": need(report, "model", path, str),
            "trace": trace_kind(need(report, "trace", path, str)),
            "policy": pol, "policy_from_recorded_run": recorded,
            "requests": need(report, "requests", path, int),
            "profile": kind, "profile_current": (
                is_current(profile) if kind == "shipped" else
                calibration_current(profile, _is_moe(report["model"])) if kind == "calibrated"
                else None),
            "same_gpu": (report.get("machines") or {}).get("same_gpu"), "what_ifs": whatifs,
            "met": len(checks) - len(missed), "checks": len(checks), "missed": missed,
            "report": str(md if md.is_file() else path)}


@lru_cache(maxsize=None)
def _is_moe(model: str) -> bool:
    from backends.models import load_model

    return load_model(model).is_moe


def on_profile_gpu(report: dict) -> bool | None:
    """Whether the live run ran on the GPU model its profile is for (the ``__GPU`` of the
    profile's file name, or of its calibration's base, is the sheet of the run's device name,
    ``backends.calibrate_prior.sheet_of``); None when a side does not say. An H200 profile against an H100 run is another question than fidelity."""
    prof = report.get("profile") or {}
    name = (prof.get("calibration") or {}).get("base") or prof.get("file") or ""
    sheet = Path(str(name)).stem.partition("__")[2].split(".")[0]
    from backends.calibrate_prior import sheet_of

    dev = ((report.get("reference") or {}).get("detail") or {}).get("gpu")
    dev = dev.get("name") if isinstance(dev, dict) else None
    return None if not sheet or not dev else (sheet_of(dev) or "").lower() == sheet.lower()


def load_rows(results: Path, *, other_gpus: bool = False) -> list[dict]:
    """The rows of every report under ``results``; only those whose live run ran on another
    GPU model than its profile's (:func:`on_profile_gpu`) with ``other_gpus``, else the rest."""
    files = sorted(results.glob("*/fidelity_*.json"))
    if not files:
        raise BadReport(f"{results}: no */fidelity_*.json")
    rows = [make_row(f, rep) for f, rep in ((f, read_json(f)) for f in files)
            if (on_profile_gpu(rep) is False) == other_gpus]
    return sorted(rows, key=lambda r: (*group(r), r["profile"], r["report"]))


def whatif_label(r: dict) -> str:
    return "?" if r["what_ifs"] is None else (", ".join(r["what_ifs"]) or "-")


def group(r: dict) -> tuple[str, str, str, str]:
    """A summary line's key (a what-if's verdict is not the default's)."""
    return r["model"], r["trace"], r["policy"], whatif_label(r)


def score(r: dict) -> tuple:
    """A report's rank in its group: today's profile first, then checks met (fraction, count)."""
    return (r["profile_current"] is not False, r["met"] / r["checks"] if r["checks"] else 0.0,
            r["met"], r["report"])


def summarize(rows: list[dict], kinds=KINDS) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(group(r), []).append(r)
    out = []
    for (model, trace, pol, whatifs), rs in sorted(groups.items()):
        entry = {"model": model, "trace": trace, "policy": pol, "what_ifs": whatifs}
        for kind in kinds:
            of = [r for r in rs if r["profile"] == kind]
            best = max(of, key=score) if of else None
            entry[kind] = None if best is None else {
                "met": best["met"], "checks": best["checks"], "missed": best["missed"],
                "report": best["report"], "reports": len(of),
                "all_met": sum(r["met"] == r["checks"] for r in of),
                "profile_current": best["profile_current"]}
        out.append(entry)
    return out


def _short_path(report: str, results: Path) -> str:
    p = Path(report)
    return str(p.relative_to(results)) if p.is_relative_to(results) else report


def render(rows: list[dict], summary: list[dict], results: Path, kinds=KINDS) -> str:
    lines = ["| model | trace | policy | requests | profile | same GPU | what-ifs | checks met "
             "| missed | report |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pol = r["policy"] + ("*" if r["policy_from_recorded_run"] else "")
        prof = r["profile"] + ("†" if r["profile_current"] is False else "")
        gpu = {True: "yes", False: "no"}.get(r["same_gpu"], "?")
        lines.append(f"| {r['model']} | {r['trace']} | {pol} | {r['requests']} | {prof} | {gpu} "
                     f"| {whatif_label(r)} | {r['met']} of {r['checks']} "
                     f"| {', '.join(short_check(m) for m in r['missed']) or '-'} "
                     f"| {r['report']} |")
    lines += ["", f"{len(rows)} reports. `*`: policy read from the recorded reference run's "
              "summary.json (the report's JSON has no config). `†`: an earlier version of the "
              "shipped profile (its recorded sha256 is not today's file's). Same GPU `?`: a side "
              "of the report has no GPU UUID (recorded before 2026-12-01e). What-ifs `?`: the "
              "report records no configuration.", ""]
    return "\n".join(lines) + "\n" + render_summary(summary, results, kinds)


def render_summary(summary: list[dict], results: Path, kinds=KINDS) -> str:
    """The summary table: per model, trace, policy and what-ifs, the best report of each kind."""
    lines = ["| model | trace | policy | what-ifs | "
             + " | ".join(f"best on {k} profile" for k in kinds) + " |",
             "|---|---|---|---|" + "---|" * len(kinds)]
    for s in summary:
        cells = []
        for k in kinds:
            b = s[k]
            cells.append("none" if b is None else
                         f"{b['met']} of {b['checks']}{'†' * (b['profile_current'] is False)} "
                         f"({_short_path(b['report'], results)}; all met in {b['all_met']} "
                         f"of {b['reports']} report{'s' * (b['reports'] != 1)})")
        lines.append(f"| {s['model']} | {s['trace']} | {s['policy']} | {s['what_ifs']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def shipped_models() -> list[str]:
    """The models of the shipped profiles (:func:`backends.shipped.shipped_profiles`), sorted."""
    return sorted({model for model, _, _ in shipped_profiles()})


def matrix(rows: list[dict], models: list[str]) -> dict[tuple[str, str, str], dict]:
    """(model, trace, policy) -> {"shipped": best row or None, "calibrated": best row or None,
    "reports": how many}, over the reports with no backend what-if and, for ``shipped``, today's
    profile (:func:`score` ranks them)."""
    out = {}
    for m in models:
        for t in MATRIX_TRACES:
            for pol in MATRIX_POLICIES:
                rs = [r for r in rows if (r["model"], r["trace"], r["policy"]) == (m, t, pol)
                      and r["what_ifs"] == []]
                ship = [r for r in rs if r["profile"] == "shipped" and r["profile_current"]]
                cal = [r for r in rs if r["profile"] == "calibrated"]
                out[(m, t, pol)] = {"shipped": max(ship, key=score) if ship else None,
                                    "calibrated": max(cal, key=score) if cal else None,
                                    "reports": len(ship) + len(cal)}
    return out


def render_matrix(cells: dict[tuple[str, str, str], dict], models: list[str]) -> str:
    """The coverage matrix as a markdown table (module docstring)."""
    def cell(c: dict) -> str:
        parts = []
        for kind, label in (("shipped", ""), ("calibrated", "cal ")):
            b = c[kind]
            if b is not None:
                parts.append(f"{label}{b['met']}/{b['checks']}"
                             + ("†" if b["profile_current"] is False else "")
                             + (" ✓" if b["met"] == b["checks"] else ""))
        return " · ".join(parts) or "-"

    cols = [(t, p) for t in MATRIX_TRACES for p in MATRIX_POLICIES]
    lines = ["| model | " + " | ".join(f"{t} `{p}`" for t, p in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for m in models:
        lines.append(f"| {m} | " + " | ".join(cell(cells[(m, t, p)]) for t, p in cols) + " |")
    return "\n".join(lines) + "\n"


def docs_block(text: str, path: Path, begin: str = BEGIN, end: str = END) -> tuple[int, int]:
    """Where a table goes in a document's text: (end of the begin line, start of the end line)."""
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise BadReport(f"{path}: lacks the lines '{begin}' and '{end}' (in that order)")
    return text.index("\n", i) + 1, j


def write_docs(path: Path, table: str, matrix_table: str | None = None) -> None:
    """Write ``table`` between the summary markers and, when ``path`` has the matrix markers,
    ``matrix_table`` between those."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadReport(f"{path}: cannot be read ({exc.strerror})") from None
    i, j = docs_block(text, path)
    text = text[:i] + table + text[j:]
    if matrix_table is not None and MATRIX_BEGIN in text:
        i, j = docs_block(text, path, MATRIX_BEGIN, MATRIX_END)
        text = text[:i] + matrix_table + text[j:]
    try:
        path.write_text(text)
    except OSError as exc:
        raise BadReport(f"{path}: cannot be written ({exc.strerror})") from None


def misses(rows: list[dict]) -> dict[tuple[str, str], list[int]]:
    """(profile kind, ``per-step`` or ``whole-run``) -> [checks, missed, missed within the
    target plus the repeat run's difference], over the reports of today's profiles
    (``profile_current`` not False) that have a repeat run."""
    out: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        if r["profile"] not in ("shipped", "calibrated") or r["profile_current"] is False:
            continue
        rep = read_json(Path(r["report"]).with_suffix(".json"))
        if not rep.get("reference_repeats"):
            continue
        for name, c in rep["checks"].items():
            kind = "per-step" if name.startswith(("step_mape", "heldout")) else "whole-run"
            t = out.setdefault((r["profile"], kind), [0, 0, 0])
            t[0] += 1
            if c["pass"] is not True:
                t[1] += 1
                rp, v = c.get("repeat_pct"), c.get("value_pct")
                t[2] += rp is not None and v is not None and abs(v) <= c["target_pct"] + rp
    return out


def render_misses(stats: dict[tuple[str, str], list[int]]) -> str:
    lines = ["| profile | checks of | checks | missed | missed within target + repeat difference |",
             "|---|---|---|---|---|"]
    for (kind, check), (n, m, w) in sorted(stats.items()):
        lines.append(f"| {kind} | {check} | {n} | {m} | {w} |")
    return "\n".join(lines) + "\n"


def results_args(ap: argparse.ArgumentParser) -> None:
    """``--results`` and ``--other-gpus``, as each script that reads the reports takes them."""
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results"),
                    help="folder of results folders (default: benchmarks/results)")
    ap.add_argument("--other-gpus", action="store_true",
                    help="only the reports whose live run ran on another GPU model than the "
                         "profile is for (an H200 profile, or a calibration of one, on an H100; "
                         "left out otherwise)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    results_args(ap)
    ap.add_argument("--calibrated-only", action="store_true",
                    help="only reports on calibrated profiles (the summary keeps every "
                         "model/trace/policy, 'none' where none is calibrated)")
    ap.add_argument("--json", type=Path, metavar="PATH",
                    help="also write the rows and the summary as JSON here")
    ap.add_argument("--docs", type=Path, metavar="FILE",
                    help="write the summary table into FILE between its fidelity_table.py "
                         "markers instead of printing the tables")
    ap.add_argument("--misses", action="store_true",
                    help="print how many of today's misses lie within the repeat runs' "
                         "difference (misses)")
    args = ap.parse_args(argv)
    if args.docs and args.other_gpus:
        print("error: --docs writes the tables of profiles on their own GPU model; drop "
              "--other-gpus", file=sys.stderr)
        return 2
    try:
        rows = load_rows(args.results, other_gpus=args.other_gpus)
        if args.misses:
            sys.stdout.write(render_misses(misses(rows)))
            return 0
        if args.docs:
            models = shipped_models()
            write_docs(args.docs, render_summary(summarize(rows), args.results),
                       render_matrix(matrix(rows, models), models))
            print(f"wrote the summary of {len(rows)} reports into {args.docs}")
            return 0
    except BadReport as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kinds = ("calibrated",) if args.calibrated_only else KINDS
    summary = summarize(rows, kinds)
    if args.calibrated_only:
        rows = [r for r in rows if r["profile"] == "calibrated"]
    sys.stdout.write(render(rows, summary, args.results, kinds))
    if not args.calibrated_only:
        models = shipped_models()
        sys.stdout.write("\n" + render_matrix(matrix(rows, models), models))
    if args.json:
        try:
            args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=2,
                                            sort_keys=True) + "\n")
        except OSError as exc:
            print(f"error: {args.json}: cannot be written ({exc.strerror})", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
