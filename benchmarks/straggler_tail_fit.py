"""The 3D split-KV kernel's tail exponent, fitted over every recorded straggler run (CPU).

``backends.attention_kv.TAIL_EXPONENT["3d"]`` says how much faster a straggler's last programs
run once they are nearly alone on their SMs. This script fits it: for each exponent from 0 to 1
in steps of 0.05 it reads every 3D-kernel case of the recorded ``bench_aiter_straggler.py`` runs
off the case's *measured* uniform curve at the KV the rule gives (``straggler_vs_profile.py
--fit-tail`` on each run), and prints the rule's MAPE per run and pooled over the cases. It then
fits on all runs but one and scores the one left out, for each run in turn: an exponent that
only fits the runs it was fitted on shows there.

The runs cover two head layouts on five H200s: Llama-3.1-8B (8 KV heads, tp 1; 2026-11-29 and
2026-12-02) and the Llama-3.1-70B tp-8 shard (1 KV head per GPU; two GPUs, 2026-12-02).

    python benchmarks/straggler_tail_fit.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import straggler_vs_profile as svp  # noqa: E402
from backends.models import load_model  # noqa: E402
from backends.profile import ProfileExecutor  # noqa: E402
from backends.shipped import default_profile  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
#: (recorded run, model, tp)
RUNS = (("h200-2026-11-29d/straggler.json", "llama-3.1-8b", None),
        ("h200-2026-11-29d/straggler_holdout.json", "llama-3.1-8b", None),
        ("h200-2026-12-02b/straggler3d.json", "llama-3.1-8b", None),
        ("h200-2026-12-02f/straggler70b.json", "llama-3.1-70b", 8),
        ("h200-2026-12-02g/straggler70b.json", "llama-3.1-70b", 8))


def load_runs():
    """(run, model, shipped table, cases) for each of :data:`RUNS`."""
    for name, model_name, tp in RUNS:
        model = load_model(model_name, tp=tp)
        table = ProfileExecutor(default_profile(model.name, "H200"), model=model).latency_table()
        cases = json.loads((RESULTS / name).read_text())["cases"]
        for c in cases:
            c.setdefault("graph", True)
        yield name, model, table, cases


def run_fits() -> dict[str, tuple[int, dict[float, float]]]:
    """Per run: its number of 3D-kernel cases and the rule's MAPE at each exponent."""
    out = {}
    for name, _, table, cases in load_runs():
        c3 = svp.cases_3d(cases, table)
        out[name] = (len(c3), dict(svp.fit_tail(c3, table)))
    return out


def pooled(fits: dict[str, tuple[int, dict[float, float]]], names) -> dict[float, float]:
    """The case-weighted MAPE at each exponent over the runs ``names``."""
    total = sum(fits[n][0] for n in names)
    grid = next(iter(fits.values()))[1]
    return {g: sum(fits[n][0] * fits[n][1][g] for n in names) / total for g in grid}


def main() -> None:
    fits = run_fits()
    names = list(fits)
    short = [f"{Path(n).parent.name[5:]}/{Path(n).stem}" for n in names]
    print(f"{'exponent':>8} {'pooled':>7} " + " ".join(f"{s:>26}" for s in short))
    allp = pooled(fits, names)
    for g, m in allp.items():
        runs = " ".join(f"{100 * fits[n][1][g]:25.2f}%" for n in names)
        print(f"{g:8.2f} {100 * m:6.2f}% {runs}")
    best = min(allp, key=allp.get)
    ncases = sum(f[0] for f in fits.values())
    print(f"least pooled: {best:.2f} ({100 * allp[best]:.2f}% over {ncases} cases)")
    print("left out: fitted on the other runs, scored on this one (MAPE at that fit; at its own "
          "best)")
    for n in names:
        rest = pooled(fits, [m for m in names if m != n])
        g = min(rest, key=rest.get)
        own = min(fits[n][1], key=fits[n][1].get)
        print(f"  {n:<42} fit {g:.2f}: {100 * fits[n][1][g]:.2f}%   own best {own:.2f}: "
              f"{100 * fits[n][1][own]:.2f}%")


if __name__ == "__main__":
    main()
