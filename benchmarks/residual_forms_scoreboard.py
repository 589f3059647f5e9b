"""Tally how each opt-in ``calibrate --residual`` form scored on live runs recorded after it.

``benchmarks/ingest_call.py --residual-refit`` re-fits every calibration a GPU call brings with
each form of its ``REFIT_FORMS`` (``STEM_residual.parquet`` for ``tokens``, ...) and scores the
call's runs against the calibration and against each re-fit, so every such twin report is a
judge recorded after its form was written. This script reads those reports
(``fidelity_NAME_calibrated.json`` and ``fidelity_NAME_calibrated{SUFFIX}.json`` in each folder
of ``benchmarks/results``) and prints, per form, each run's per-step MAPE and checks met under
the default fit and under the form, then a line per form and one per form and model: runs,
checks default -> form, runs better / worse per step, mean per-step MAPE. Reads only; under a
second.

    python benchmarks/residual_forms_scoreboard.py
    python benchmarks/residual_forms_scoreboard.py --in h100-2026-12-07g
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.ingest_call import REFIT_FORMS  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def score(d: dict) -> tuple[float, int, int]:
    """A fidelity report's per-step MAPE over all steps, checks met, and checks in all."""
    checks = d["checks"].values()
    return float(d["steps"]["mape_all_pct"]), sum(bool(c["pass"]) for c in checks), len(checks)


def defaults(folders: list[Path]) -> list[tuple[Path, str, str, tuple]]:
    """(path, run, model, score) of each report against a default-fit calibration, each read
    once."""
    out = []
    for folder in folders:
        for base in sorted(folder.glob("fidelity_*_calibrated.json")):
            d = json.loads(base.read_text())
            out.append((base, base.stem.removeprefix("fidelity_").removesuffix("_calibrated"),
                        str(d.get("model") or "?"), score(d)))
    return out


def pairs(bases: list[tuple[Path, str, str, tuple]], suffix: str
          ) -> list[tuple[str, str, str, tuple, tuple]]:
    """(folder, run, model, default's score, the form's score) for each report of ``bases``
    (:func:`defaults`) with a twin of ``suffix`` beside it."""
    out = []
    for base, run, model, s0 in bases:
        twin = base.with_name(base.stem + suffix + ".json")
        if twin.exists():
            out.append((base.parent.name, run, model, s0, score(json.loads(twin.read_text()))))
    return out


def tally(label: str, rows: list) -> str:
    """One table row: runs, checks default -> form, per step better / worse, mean per step."""
    if not rows:
        return f"| {label} | 0 | - | - | - |"
    c0, c1 = sum(r[3][1] for r in rows), sum(r[4][1] for r in rows)
    better = sum(r[4][0] < r[3][0] for r in rows)
    worse = sum(r[4][0] > r[3][0] for r in rows)
    m0 = sum(r[3][0] for r in rows) / len(rows)
    m1 = sum(r[4][0] for r in rows) / len(rows)
    return f"| {label} | {len(rows)} | {c0} -> {c1} | {better} / {worse} | {m0:.2f} -> {m1:.2f}% |"


def main(argv: list[str] | None = None) -> int:
    """Print the table and the tally of every form."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--in", dest="folders", nargs="+", metavar="FOLDER", default=None,
                    help="only these folders of benchmarks/results (default: all)")
    a = ap.parse_args(argv)
    folders = ([RESULTS / f for f in a.folders] if a.folders
               else sorted(p for p in RESULTS.iterdir() if p.is_dir()))
    for f in folders:
        if not f.is_dir():
            print(f"error: {f}: no such folder", file=sys.stderr)
            return 2
    tallies = []
    bases = defaults(folders)
    print("| form | folder | live run | default fit | the form |")
    print("|---|---|---|---|---|")
    for form, suffix in REFIT_FORMS:
        rows = pairs(bases, suffix)
        for folder, run, _, (m0, c0, n0), (m1, c1, n1) in rows:
            print(f"| `{form}` | {folder} | {run} | {m0:.2f}%, {c0} of {n0} | "
                  f"{m1:.2f}%, {c1} of {n1} |")
        tallies.append((form, rows))
    print()
    print("| form | runs | checks default -> form | per step better / worse | "
          "mean per step default -> form |")
    print("|---|---|---|---|---|")
    for form, rows in tallies:
        print(tally(f"`{form}`", rows))
    for form, rows in tallies:
        for model in sorted({r[2] for r in rows}):
            print(tally(f"`{form}`, {model}", [r for r in rows if r[2] == model]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
