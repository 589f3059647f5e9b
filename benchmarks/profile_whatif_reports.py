"""Every recorded fidelity report of a shipped profile, re-run on a candidate profile of its model.

Before a shipped profile is replaced (a prefill line added, a grid re-measured), this says what
the replacement would score on every live run the validation record
(``backends/profiles/validation.json``) compares the current file with: each report whose
profile is that file as it is now is re-run (``regenerate_reports.rerun``: the report's trace,
request count, live run, repeat runs and backend settings) with ``--profile CANDIDATE`` instead,
and the checks met both ways are printed per report and in total, with each report's prefill
and overall per-step MAPE.

With ``--write SUFFIX`` each new report is written beside the old one as
``fidelity_<name>_<SUFFIX>.md`` / ``.json`` (the old one stays: it records what the file it
compared did), and with ``--calibrated`` the re-fitted profile beside the calibrated one it
came from, as ``<its name>_<SUFFIX>.parquet``, so the report can be re-run. Run it with ``--write`` only once the candidate is the shipped file, so the new
reports name the shipped path and its sha256; they then go into the record's ``other_reports``.

    python benchmarks/profile_whatif_reports.py llama-3.1-8b__H200.parquet /tmp/line8b.parquet
    python benchmarks/profile_whatif_reports.py llama-3.1-8b__H200.parquet \\
        backends/profiles/llama-3.1-8b__H200.parquet --old-sha SHA --write line

``--old-sha`` picks the reports of an earlier version of the file (the one they recorded) when
the file has already been replaced.

``--calibrated`` runs instead every report under ``benchmarks/results/`` on a calibrated profile
of the model kept beside it (``regenerate_reports --calibrated``'s): that file's anchors are
re-fitted to the candidate (``specsched calibrate --anchors-from``, on a CPU) and the report re-run
on the result, so each live run is judged against the candidate calibrated to its own GPU.
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

from backends.shipped import PROFILES_DIR, file_sha256  # noqa: E402
from benchmarks.regenerate_reports import kept_profile, met, reports, rerun  # noqa: E402


def _mape(rep: dict, kind: str | None = None) -> float | None:
    """The report's per-step MAPE overall, or of one pass kind (None where it has none)."""
    steps = rep.get("steps") or {}
    if kind is None:
        return steps.get("mape_all_pct")
    return ((steps.get("by_kind") or {}).get(kind) or {}).get("mape_pct")


def _refitted(calibrated: Path, candidate: Path, model: str, out: Path) -> Path:
    """``candidate`` calibrated by the anchors ``calibrated`` keeps, written to ``out``."""
    from backends.calibrate_refit import refit_calibration
    from backends.models import load_model

    tp = (_meta(calibrated).get("model") or {}).get("tp")
    refit_calibration(load_model(model, tp=tp), str(calibrated), str(candidate), str(out))
    return out


def _rel(path: Path) -> Path:
    """``path`` relative to the repository when it is inside it (reports record it so)."""
    path = path.resolve()
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def _meta(path: Path) -> dict:
    from backends.profile import read_profile

    return read_profile(path)[1]


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="the shipped profile's file name, e.g. llama-3.1-8b__H200.parquet")
    ap.add_argument("candidate", type=Path, help="the profile to re-run its reports on")
    ap.add_argument("--old-sha", default=None,
                    help="the sha256 the reports recorded (default: the shipped file's now)")
    ap.add_argument("--write", metavar="SUFFIX", default=None,
                    help="write each new report beside the old as fidelity_<name>_<SUFFIX>.md")
    ap.add_argument("--calibrated", action="store_true",
                    help="the model's reports on kept calibrated profiles, their anchors "
                         "re-fitted to the candidate")
    ap.add_argument("--only", default=None, metavar="TEXT",
                    help="only the reports whose path contains TEXT")
    a = ap.parse_args(argv)
    if not a.candidate.is_file():
        print(f"error: {a.candidate}: no such file", file=sys.stderr)
        return 2
    if not a.old_sha and not (PROFILES_DIR / a.name).is_file():
        print(f"error: {a.name}: not a shipped profile in {_rel(PROFILES_DIR)}", file=sys.stderr)
        return 2
    sha = a.old_sha or file_sha256(PROFILES_DIR / a.name)
    candidate = _rel(a.candidate)
    os.chdir(ROOT)  # reports record paths relative to the repository
    todo = []
    if a.calibrated:
        model = a.name.split("__")[0]
        for js in sorted((ROOT / "benchmarks" / "results").glob("*/fidelity*.json")):
            old = json.loads(js.read_text())
            if old.get("model") == model and isinstance(old.get("profile"), dict) \
                    and "calibration" in old["profile"] and kept_profile(old) is not None:
                todo.append((js.with_suffix(".md"), old))
    else:
        for name, md in reports():
            old = json.loads(md.with_suffix(".json").read_text())
            if name == a.name and old["profile"]["sha256"] == sha:
                todo.append((md, old))
    if a.only:
        todo = [(md, old) for md, old in todo if a.only in str(md.relative_to(ROOT))]
    if not todo:
        print(f"error: no report of {a.name} at sha256 {sha[:12]}"
              + (f" matches --only {a.only!r}" if a.only else " in the record"), file=sys.stderr)
        return 2
    tmp = tempfile.TemporaryDirectory()
    plan = []  # (report, its JSON, new report or None, refitted profile or None)
    for md, old in todo:
        dest = md.with_name(f"{md.stem}_{a.write}.md") if a.write else None
        out = None
        if a.calibrated:
            cal = kept_profile(old)
            out = (cal.with_name(f"{cal.stem}_{a.write}.parquet") if a.write
                   else Path(tmp.name) / f"{cal.parent.name}_{cal.name}")
        for f in (dest, dest.with_suffix(".json") if dest else None, out):
            if f is not None and f.exists():  # checked for all before anything is written
                print(f"error: {_rel(f)}: exists; not written over", file=sys.stderr)
                return 2
        plan.append((md, old, dest, out))
    print("| report | checks before | checks on the candidate | prefill MAPE | step MAPE | "
          "missed on the candidate |")
    print("|---|---|---|---|---|---|")
    tot = [0, 0, 0, 0]
    refitted: dict[Path, Path] = {}  # reports that share a calibration share its re-fit
    for md, old, dest, out in plan:
        profile = candidate
        if out is not None:
            if out not in refitted:
                refitted[out] = _rel(_refitted(kept_profile(old), candidate, old["model"], out))
            profile = refitted[out]
        new, _ = rerun(old, old["model"], dest or md, write=dest is not None, profile=profile)
        before, _ = met(old["checks"])
        after, missed = met(new["checks"])
        for i, c in enumerate((old["checks"], new["checks"])):
            tot[2 * i] += sum(1 for v in c.values() if v["pass"])
            tot[2 * i + 1] += len(c)
        print(f"| {md.relative_to(ROOT)} | {before} | {after} | "
              f"{_fmt(_mape(old, 'prefill'))} -> {_fmt(_mape(new, 'prefill'))} | "
              f"{_fmt(_mape(old))} -> {_fmt(_mape(new))} | {', '.join(missed) or '-'} |",
              flush=True)
    tmp.cleanup()
    print(f"\n{len(todo)} reports: checks met {tot[0]} of {tot[1]} -> {tot[2]} of {tot[3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
