"""Tally how each opt-in ``calibrate --residual`` form scored on live runs recorded after it.

``benchmarks/ingest_call.py --residual-refit`` re-fits every calibration a GPU call brings with
each form of its ``REFIT_FORMS`` (``STEM_residual.parquet`` for ``tokens``, ...) and scores the
call's runs against the calibration and against each re-fit, so every such twin report is a
judge recorded after its form was written. This script reads those reports
(``fidelity_NAME_calibrated.json`` and ``fidelity_NAME_calibrated{SUFFIX}.json`` in each folder
of ``benchmarks/results``) and prints, per form, each run's per-step MAPE and checks met under
the default fit and under the form, then a line per form and one per form and model: runs,
checks default -> form, runs better / worse per step, mean per-step MAPE, and the same two for
the prefill steps alone (two of the forms move only prefill and verify rows, and prefill steps
are a few percent of a run's steps, so the all-steps figure can hide them: on the 8B's runs of
2026-12-07 the forms left all steps within 0.05 points and made prefill worse on every run).
Reads only; under a second.

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


def score(d: dict) -> tuple[float, int, int, float | None]:
    """A fidelity report's per-step MAPE over all steps, checks met, checks in all, and the
    prefill steps' MAPE (None when the run had none)."""
    checks = d["checks"].values()
    pre = d["steps"].get("by_kind", {}).get("prefill", {}).get("mape_pct")
    return (float(d["steps"]["mape_all_pct"]), sum(bool(c["pass"]) for c in checks), len(checks),
            None if pre is None else float(pre))


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


def _direction(pairs_: list[tuple[float, float]]) -> str:
    """``better / worse | mean default -> mean form`` over (default, form) MAPE pairs."""
    if not pairs_:
        return "- | -"
    better = sum(b < a for a, b in pairs_)
    worse = sum(b > a for a, b in pairs_)
    m0 = sum(a for a, _ in pairs_) / len(pairs_)
    m1 = sum(b for _, b in pairs_) / len(pairs_)
    return f"{better} / {worse} | {m0:.2f} -> {m1:.2f}%"


def tally(label: str, rows: list) -> str:
    """One table row: runs, checks default -> form, per step better / worse and mean per step,
    then the same two over the prefill steps of the runs that had any."""
    if not rows:
        return f"| {label} | 0 | - | - | - | - | - |"
    c0, c1 = sum(r[3][1] for r in rows), sum(r[4][1] for r in rows)
    every = _direction([(r[3][0], r[4][0]) for r in rows])
    pre = _direction([(r[3][3], r[4][3]) for r in rows
                      if r[3][3] is not None and r[4][3] is not None])
    return f"| {label} | {len(rows)} | {c0} -> {c1} | {every} | {pre} |"


def _pre(s: tuple) -> str:
    return "-" if s[3] is None else f"{s[3]:.2f}%"


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
    print("| form | folder | live run | default fit | the form | prefill steps default -> form |")
    print("|---|---|---|---|---|---|")
    for form, suffix in REFIT_FORMS:
        rows = pairs(bases, suffix)
        for folder, run, _, s0, s1 in rows:
            print(f"| `{form}` | {folder} | {run} | {s0[0]:.2f}%, {s0[1]} of {s0[2]} | "
                  f"{s1[0]:.2f}%, {s1[1]} of {s1[2]} | {_pre(s0)} -> {_pre(s1)} |")
        tallies.append((form, rows))
    print()
    print("| form | runs | checks default -> form | per step better / worse | "
          "mean per step default -> form | prefill steps better / worse | "
          "mean prefill default -> form |")
    print("|---|---|---|---|---|---|---|")
    for form, rows in tallies:
        print(tally(f"`{form}`", rows))
    for form, rows in tallies:
        for model in sorted({r[2] for r in rows}):
            print(tally(f"`{form}`, {model}", [r for r in rows if r[2] == model]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
