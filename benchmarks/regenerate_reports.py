"""Re-run, on a CPU, every fidelity report the shipped profiles' validation record names.

``backends/profiles/validation.json`` rests each profile's status on fidelity reports in
``benchmarks/results/``, each comparing a shipped profile with a recorded live run. When the
profile backend's lookup changes (a straggler rule, a fill rule), those reports must be computed
again, or the record would cite figures the code no longer gives. This script re-runs each report
whose profile is the shipped file as it is now (the sha256 the report recorded equals the file's;
reports of earlier versions of a profile stay as they were: they record what that version did),
with the trace, request count, live run and repeat runs the report recorded, and writes the
report (``.md`` and ``.json``) in place. It prints each report's checks before and after and the
checks it misses, so the record's ``checks_met`` and ``missed`` (and the prose that cites them)
can be brought up to date; ``tests/backends/test_shipped.py`` fails until they are. A report's
"Profile status" line quotes the record, so run it again after editing the record.

    python benchmarks/regenerate_reports.py            # every report of a current profile
    python benchmarks/regenerate_reports.py --dry-run  # list them, change nothing
    python benchmarks/regenerate_reports.py --profile deepseek-v3__H200.parquet  # one profile's
    python benchmarks/regenerate_reports.py --report benchmarks/results/X/fidelity_Y.md  # and this
    python benchmarks/regenerate_reports.py --calibrated   # and every report on a kept calibrated profile
    python benchmarks/regenerate_reports.py --calibrated --check  # which reports today's code
                                                                  # would write otherwise (exit 1)

``--add-repeats`` also gives each report every other recording of its live run under
``benchmarks/results/`` that it does not list yet as a repeat run (``ingest_call.find_repeats``:
the same trace, requests, model, configuration and capture setting), so its "a repeat differs
by" column shows how far two recordings differ.

``--check`` writes nothing: it re-runs each report in a temporary folder and names every report
whose ``.md`` would change (its checks, floors or wording), so a change to the lookup, the
fidelity report or the defaults that leaves a shipped report stale is seen before it is cited.
About 3 minutes for all 77 on two CPUs (2026-12-05).

A report run with a backend setting other than today's default (``--set
backend.kv_lookup=fluid``) is re-run with it (:func:`backend_overrides`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.shipped import PROFILES_DIR, VALIDATION_FILE, file_sha256  # noqa: E402
from traces.errors import SpecschedError  # noqa: E402


def reports() -> list[tuple[str, Path]]:
    """(profile file name, report path) for every report the record names, evidence first."""
    record = json.loads(VALIDATION_FILE.read_text())["profiles"]
    out = []
    for name, entry in record.items():
        for ev in ([entry["evidence"]] if "evidence" in entry else []) + entry.get("other_reports", []):
            out.append((name, ROOT / ev["report"]))
    return out


def met(checks: dict) -> tuple[str, list[str]]:
    missed = sorted(k for k, c in checks.items() if not c["pass"])
    return f"{len(checks) - len(missed)} of {len(checks)}", missed


def backend_overrides(report: dict) -> dict:
    """The profile side's backend settings the report ran under that differ from today's
    defaults (``--set backend.kv_lookup=straggler`` on an MLA model): the engine's settings come from the
    recorded run, the backend's only from the command line, so they are passed again."""
    from simulator.config import SimConfig, resolve_kv_lookup

    default = SimConfig.load(None, {}).to_dict()["backend"]
    got = dict((report.get("config") or {}).get("backend") or {})
    # kv_lookup compared as the model resolves it (auto: fluid on an MLA model, else straggler),
    # so a report recorded under "straggler" before auto existed is a default one on a dense model
    mla = bool(((report.get("config") or {}).get("engine") or {}).get("mla"))
    if "kv_lookup" in got and "kv_lookup" in default:
        got["kv_lookup"] = resolve_kv_lookup(got["kv_lookup"], mla)
        default["kv_lookup"] = resolve_kv_lookup(default["kv_lookup"], mla)
    return {k: v for k, v in sorted(got.items())
            if k not in ("name", "profile", "gpu") and k in default and v != default[k]}


def kept_profile(report: dict) -> Path | None:
    """The profile a report compared when it is a file kept in this repository (a calibrated
    profile under ``benchmarks/results/``) whose bytes are still the ones the report recorded;
    None for a shipped profile or one that is gone or changed."""
    rec = Path(report["profile"]["file"])
    f = ROOT / rec
    if rec.is_absolute() or rec.parts[:2] != ("benchmarks", "results") or not f.is_file():
        return None  # a shipped profile (or one named by a path outside this repository)
    return f if file_sha256(f) == report["profile"]["sha256"] else None


def rerun(report: dict, model: str, dest: Path, *, write: bool = True,
          profile: Path | None = None, extra: tuple[str, ...] = ()) -> tuple[dict, str]:
    """Run ``specsched fidelity`` with a report's recorded arguments (and its kept profile,
    :func:`kept_profile`, or ``profile`` instead when given: a what-if copy of it) and any
    ``extra`` arguments (a what-if's ``--set``); write its .md and .json at ``dest`` (the
    report's .md path) unless ``write`` is false; return the new report and its markdown."""
    args = ["--trace", report["trace"], "--model", model, "--limit", str(report["requests"]),
            "--reference-run", report["reference"]["recorded_run"]]
    for rep in report.get("reference_repeats") or []:
        args += ["--repeat-run", rep["run"]]
    args += [f"--set=backend.{k}={v}" for k, v in backend_overrides(report).items()]
    kept = kept_profile(report)
    if profile is not None:
        args += ["--profile", str(profile)]
    elif kept is not None:
        args += ["--profile", str(kept.relative_to(ROOT))]
    try:
        js, md = fidelity_report(args + list(extra))
    except SpecschedError as exc:
        raise SystemExit(f"error: {dest}: {exc}") from None
    if write:
        dest.write_text(md)
        dest.with_suffix(".json").write_text(js)
    return json.loads(js), md


def fidelity_report(args: list[str]) -> tuple[str, str]:
    """``specsched fidelity ARGS`` run in this process, into a temporary folder: the report's
    JSON and markdown, as the command wrote them. A run that exits non-zero raises
    ``SpecschedError`` with its last output."""
    from click.testing import CliRunner

    from analysis.fidelity.cli import fidelity

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fid"
        res = CliRunner().invoke(fidelity, args + ["--out", str(out)], catch_exceptions=False)
        if res.exit_code != 0:
            raise SpecschedError(f"fidelity exited {res.exit_code}: {res.output[-400:]}")
        return (out / "fidelity.json").read_text(), (out / "fidelity.md").read_text()

def _more_repeats(report: dict) -> list[str]:
    """The other recordings of the report's live run (``ingest_call.find_repeats``) it does not
    list yet as repeat runs, as paths relative to the repository."""
    from benchmarks.ingest_call import find_repeats

    run = ROOT / report["reference"]["recorded_run"]
    if not (run / "summary.json").is_file():
        return []
    have = {str(Path(r["run"])) for r in report.get("reference_repeats") or []}
    found = [str(r.relative_to(ROOT)) for r in find_repeats(run, [ROOT / "benchmarks" / "results"])]
    return [r for r in found if r not in have]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="list the reports, change nothing")
    ap.add_argument("--check", action="store_true",
                    help="re-run each report without writing it; name those whose .md would "
                         "change and exit 1 if any would")
    ap.add_argument("--profile", action="append", default=[], metavar="FILE",
                    help="only the reports of this shipped profile (file name; repeatable; "
                         "--calibrated's reports run whatever it says)")
    ap.add_argument("--report", action="append", default=[], metavar="MD",
                    help="also this report outside the record (its .md path; repeatable), e.g. "
                         "a what-if's")
    ap.add_argument("--calibrated", action="store_true",
                    help="also every report under benchmarks/results/ that compared a calibrated "
                         "profile kept beside it, against that profile (whose bytes must be the "
                         "ones it recorded)")
    ap.add_argument("--add-repeats", action="store_true",
                    help="also add, as repeat runs, the other recordings of each report's live "
                         "run that it does not list yet")
    args = ap.parse_args()
    record = reports()
    names = {n for n, _ in record}
    for n in args.profile:
        if n not in names:
            raise SystemExit(f"error: --profile {n}: not in the validation record "
                             f"({', '.join(sorted(names))})")
    os.chdir(ROOT)  # reports record paths relative to the repository
    for extra in args.report:
        md = Path(extra).resolve()
        if not md.with_suffix(".json").is_file():
            raise SystemExit(f"error: --report {extra}: no {md.with_suffix('.json').name} beside it")
        name = Path(json.loads(md.with_suffix(".json").read_text())["profile"]["file"]).name
        record.append((name, md))
    if args.calibrated:
        listed = {md.resolve() for _, md in record}
        for js in sorted((ROOT / "benchmarks" / "results").glob("*/fidelity*.json")):
            rep = json.loads(js.read_text())
            md = js.with_suffix(".md").resolve()
            if md not in listed and isinstance(rep.get("profile"), dict) \
                    and kept_profile(rep) is not None:
                record.append((Path(rep["profile"]["file"]).name, md))
    stale = 0
    for name, md in record:
        old = json.loads(md.with_suffix(".json").read_text())
        rel = md.relative_to(ROOT)
        kept = kept_profile(old) is not None
        if args.profile and name not in args.profile and not kept:
            continue
        if not kept:
            sha = file_sha256(PROFILES_DIR / name)
            if old["profile"]["sha256"] != sha:
                print(f"{rel}: kept (it compared an earlier version of {name})")
                continue
        before, _ = met(old["checks"])
        if args.dry_run:
            against = f" against {old['profile']['file']}" if kept else ""
            print(f"{rel}: would re-run{against} ({before})")
            continue
        if args.add_repeats:
            more = _more_repeats(old)
            if not more:
                continue
            old = dict(old, reference_repeats=list(old.get("reference_repeats") or [])
                       + [{"run": r} for r in more])
            print(f"{rel}: adding repeat runs {', '.join(more)}", flush=True)
        new, text = rerun(old, old["model"], md, write=not args.check)
        after, missed = met(new["checks"])
        if args.check:
            same = text == md.read_text()
            stale += not same
            print(f"{rel}: {'current' if same else 'STALE'} ({before} -> {after})", flush=True)
            continue
        print(f"{rel}: {before} -> {after}; missed: {', '.join(missed) or 'none'}", flush=True)
    if args.check:
        print(f"{stale} report(s) would change" + (": run this script without --check, then "
                                                    "update backends/profiles/validation.json "
                                                    "and the docs that cite them" if stale else ""))
        sys.exit(1 if stale else 0)


if __name__ == "__main__":
    main()
