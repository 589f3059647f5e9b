"""The 3D split-KV kernel's tail exponent and wave fill, fitted over the recorded straggler runs (CPU).

``backends.attention_kv.TAIL_EXPONENT["3d"]`` says how much faster a straggler's last programs
run once they are nearly alone on their SMs, and ``WAVE_FILL_3D`` how many of the kernel's
resident slots one wave of its programs fills. This script fits both: for each fill (7 to 8
programs per SM of the occupancy's 8, in quarters) and each exponent from 0 to 1 in steps of
0.05 it reads every 3D-kernel case of the recorded ``bench_aiter_straggler.py`` runs off the
case's *measured* uniform curve at the KV the rule gives, and prints the rule's MAPE per run and
pooled. The fit uses the runs recorded up to 2026-12-02 (:data:`FIT`); the runs recorded after
it (:data:`LATER`: eager and graph launches shaped like the 8B long-context runs' bands) score
it. It then fits on all fit runs but one and scores the one left out, for each in turn.

The runs cover two head layouts on six H200s: Llama-3.1-8B (8 KV heads, tp 1; 2026-11-29,
2026-12-02 and 2026-12-04) and the Llama-3.1-70B tp-8 shard (1 KV head per GPU; two GPUs,
2026-12-02).

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
#: (recorded run, model, tp): the runs the fit uses
FIT = (("h200-2026-11-29d/straggler.json", "llama-3.1-8b", None),
       ("h200-2026-11-29d/straggler_holdout.json", "llama-3.1-8b", None),
       ("h200-2026-12-02b/straggler3d.json", "llama-3.1-8b", None),
       ("h200-2026-12-02f/straggler70b.json", "llama-3.1-70b", 8),
       ("h200-2026-12-02g/straggler70b.json", "llama-3.1-70b", 8))
#: runs recorded after the fit, which score it
LATER = (("h200-2026-12-04d/straggler8b_eager.json", "llama-3.1-8b", None),
         ("h200-2026-12-04d/straggler8b_bs4.json", "llama-3.1-8b", None))
RUNS = FIT + LATER
#: programs per SM one wave holds, tried (the occupancy query says 8)
SLOTS = (7.0, 7.25, 7.5, 7.75, 8.0)


def load_runs():
    """(run, model, shipped table, cases) for each of :data:`RUNS`."""
    for name, model_name, tp in RUNS:
        model = load_model(model_name, tp=tp)
        table = ProfileExecutor(default_profile(model.name, "H200"), model=model).latency_table()
        cases = json.loads((RESULTS / name).read_text())["cases"]
        for c in cases:
            c.setdefault("graph", True)
        yield name, model, table, cases


def run_fits() -> dict[str, tuple[int, dict[tuple[float, float], float]]]:
    """Per run: its number of 3D-kernel cases and the rule's MAPE at each (programs per SM one
    wave holds, exponent)."""
    out = {}
    for name, _, table, cases in load_runs():
        c3 = svp.cases_3d(cases, table)
        grid = {}
        for slots in SLOTS:
            fill = slots / table.attention["slots_per_sm"]["3d"]
            with svp.attention_set(table, "wave_fill_3d", fill):
                for g, m in svp.fit_tail(c3, table):
                    grid[(slots, g)] = m
        out[name] = (len(c3), grid)
    return out


def pooled(fits, names) -> dict[tuple[float, float], float]:
    """The case-weighted MAPE at each (slots, exponent) over the runs ``names``."""
    total = sum(fits[n][0] for n in names)
    grid = next(iter(fits.values()))[1]
    return {k: sum(fits[n][0] * fits[n][1][k] for n in names) / total for k in grid}


def main() -> None:
    fits = run_fits()
    fit, later = [n for n, _, _ in FIT], [n for n, _, _ in LATER]
    allp, latp = pooled(fits, fit), pooled(fits, later)
    print(f"{'slots/SM':>8} {'exponent':>8} {'fit runs':>9} {'later':>7}   per run")
    for k in sorted(allp, key=allp.get)[:12]:
        runs = " ".join(f"{100 * fits[n][1][k]:5.2f}" for n in fits)
        print(f"{k[0]:8.2f} {k[1]:8.2f} {100 * allp[k]:8.2f}% {100 * latp[k]:6.2f}%   {runs}")
    best = min(allp, key=allp.get)
    cur = (8.0, 0.4)
    n_fit, n_later = sum(fits[n][0] for n in fit), sum(fits[n][0] for n in later)
    print(f"fitted on {n_fit} cases: {best[0]:.2f} programs per SM, exponent {best[1]:.2f}: "
          f"{100 * allp[best]:.2f}% (the occupancy's 8 and 0.4: {100 * allp[cur]:.2f}%)")
    alone = min((k for k in allp if k[0] == 8.0), key=allp.get)  # the exponent fitted alone
    print(f"scored on the {n_later} later cases: {100 * latp[best]:.2f}% (8 and 0.4: "
          f"{100 * latp[cur]:.2f}%; 8 and the exponent fitted alone, {alone[1]:.2f}: "
          f"{100 * latp[alone]:.2f}%)")
    print("left out: fitted on the other fit runs, scored on this one (MAPE at that fit)")
    for n in fit:
        rest = pooled(fits, [m for m in fit if m != n])
        k = min(rest, key=rest.get)
        print(f"  {n:<42} fit {k[0]:.2f}/{k[1]:.2f}: {100 * fits[n][1][k]:.2f}%   "
              f"at 8/0.4: {100 * fits[n][1][cur]:.2f}%")


if __name__ == "__main__":
    main()
