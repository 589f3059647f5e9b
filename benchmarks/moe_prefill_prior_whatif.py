"""Per-step MAPE of DeepSeek-V2-Lite's H100 calibration with its prefill group fitted four ways.

A calibration's measured anchors are re-fitted on a CPU and scored against each live V2-Lite run
recorded on its GPU (``analysis.fidelity.stats.step_errors`` with the ``straggler`` KV rule, as
``calibrate_prior_whatif.py`` scores them; prefill steps do not depend on the KV rule): all steps,
prefill steps, and the prefill and verify steps' summed time (predicted over live, signed: what
a queue sees, long passes weighing more):

- ``power 0``: what ``specsched calibrate`` does (``--prior fitted`` chose power 0 there);
- ``power 0, prefill without prior``: the same, but the prefill group fitted and scaled with no
  prior (its three anchors measured 1.09-1.10 x the H200 rows at 1, 256 and 8,192 tokens, where
  the roofline's ratio reads small prefills as bandwidth-bound at up to 1.43);
- ``power 0, prefill kept``: the H200's prefill rows (``--prefill keep``);
- ``no prior``: one factor per group (what ``fitted`` chose from 5c51b30 until it was reverted).

Written after seeing the runs of ``h100-2026-12-06c`` (the default ``--day``) and ``-06d``, so
their figures are in sample. ``h100-2026-12-06e`` (another H100, ``0246c185``, calibrated and
recorded after the what-if was written) and its repeats in ``-06f`` judged it: prefill per step
8.4-9.1% -> 4.1-4.8%, all steps 2.21-2.57% -> 2.13-2.50%, but the prefill steps' summed time
went from +3.2-3.4% to -2.8-3.0% (as far off, the other side), and the whole-run checks of those
six runs, re-scored with it (``fidelity_v2lite_*_calibrated_prefill_own``), met 44 of 96 against
51 at power 0: the verify passes' time is 2.5-3.1% short either way, and the prior's slow
prefills had offset part of it. Not adopted. CPU only, about 5 s a folder.

On the first long-context V2-Lite runs on an H100 (``h100-2026-12-06l``, 80 requests under
``bucket``, ``pad`` and ``split``), recorded after it was written: prefill per step 10.2% ->
3.2%, all steps 2.14-2.23% -> 1.99-2.09%, prefill summed time -10.8% -> -3.2%; checks 6, 6, 6
-> 6, 8, 7 of 16 (``--write``).

    python benchmarks/moe_prefill_prior_whatif.py [--day h100-2026-12-06e --runs-from h100-2026-12-06f]
    python benchmarks/moe_prefill_prior_whatif.py --day h100-2026-12-06l --runs 'live_longv2lite_*' --write
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.fidelity.stats import step_errors  # noqa: E402
from backends.calibrate import fit_factors, settle_prefill  # noqa: E402
from backends.calibrate_prior import roofline_prior  # noqa: E402
from backends.models import load_model  # noqa: E402
from backends.profile import read_profile  # noqa: E402
from benchmarks.calibrate_prior_whatif import fitted_table, refit_inputs  # noqa: E402

RESULTS = ROOT / "benchmarks/results"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--day", default="h100-2026-12-06c",
                    help="the folder under benchmarks/results with the calibration and live runs")
    ap.add_argument("--runs-from", action="append", default=[], metavar="FOLDER",
                    help="score the live runs of this folder too (repeats; may be given again)")
    ap.add_argument("--runs", default="live_v2lite_*", metavar="GLOB",
                    help="which live runs of each folder to score (default: the conversation "
                         "runs; live_longv2lite_* for the long-context ones)")
    ap.add_argument("--write", action="store_true",
                    help="also write the 'prefill without prior' fit beside the calibration "
                         "(deepseek-v2-lite__H200.calibrated_prefill_own.parquet; refused when "
                         "it exists) and score each run's calibrated report against it "
                         "(fidelity_RUN_calibrated_prefill_own.md)")
    a = ap.parse_args(argv)
    day = RESULTS / a.day
    model = load_model("deepseek-v2-lite")
    cal = read_profile(str(day / "deepseek-v2-lite__H200.calibrated.parquet"))[1]["calibration"]
    grid, line, bmeta, anchors, groups = refit_inputs(model, cal, "H200")
    p0 = roofline_prior(model, "H200", "H100", 0.0)

    def p0_but_prefill(r: dict) -> float:
        return 1.0 if r["kind"] == "prefill" else p0(r)

    own_file = day / "deepseek-v2-lite__H200.calibrated_prefill_own.parquet"
    if a.write and own_file.exists():
        raise SystemExit(f"error: {own_file}: exists; not written over")
    fits = {"power 0": (p0, "auto"), "power 0, prefill without prior": (p0_but_prefill, "auto"),
            "power 0, prefill kept": (p0, "keep"), "no prior": (None, "auto")}
    runs = [r for d in [a.day, *a.runs_from] for r in sorted((RESULTS / d).glob(a.runs))]
    print("| fit | prefill factor | " + " | ".join(f"`{r.parent.name}/{r.name}` all / prefill / "
                                                   "prefill time / verify time"
                                                   for r in runs)
          + " |")
    print("|---|---|" + "---|" * len(runs))
    fitted = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (prior, prefill) in fits.items():
            factors = fitted[name] = settle_prefill(fit_factors(anchors, groups, prior), prefill,
                                                    moe=True, other_model=True)
            table = fitted_table(grid, line, bmeta, factors, prior, Path(tmp) / "fit.parquet")
            cells = []
            for run in runs:
                e = step_errors(pq.read_table(run / "steps.parquet"), table,
                                kv_lookup="straggler")
                pre, ver = e["by_kind"]["prefill"], e["by_kind"]["verify"]
                cells.append(f"{e['mape_all_pct']:.2f}% / {pre['mape_pct']:.2f}% / "
                             f"{pre['time_signed_pct']:+.1f}% / {ver['time_signed_pct']:+.1f}%")
            print(f"| {name} | {factors['prefill']['factor']:.3f} | " + " | ".join(cells) + " |",
                  flush=True)
    if a.write:
        return write_prefill_own(day, own_file, runs, grid, line,
                                 fitted["power 0, prefill without prior"], p0_but_prefill)
    return 0


def write_prefill_own(day: Path, out: Path, runs: list[Path], grid: list, line: list,
                      factors: dict, prior) -> int:
    """Write the what-if calibration (the calibration's metadata, its factors replaced and
    ``prior.prefill_prior: "none"``, so ``benchmarks/fidelity_table.py`` counts it as not
    current) and each run's calibrated report re-run against it; print their checks."""
    import copy
    import json

    from backends.calibrate import calibrated_copy
    from backends.profile import write_profile
    from benchmarks.regenerate_reports import met, rerun

    src = day / "deepseek-v2-lite__H200.calibrated.parquet"
    meta = copy.deepcopy(read_profile(str(src))[1])
    cal = meta["calibration"]
    cal["factors"] = factors
    cal["prior"] = dict(cal.get("prior") or {}, prefill_prior="none")
    meta.setdefault("notes", []).append(
        f"a what-if of benchmarks/moe_prefill_prior_whatif.py: {src.name}'s anchors re-fitted "
        f"with the prefill group fitted and scaled without the prior (prefill "
        f"{factors['prefill']['factor']:.4f}); not what specsched calibrate does")
    write_profile(calibrated_copy(grid, line, factors, prior=prior), str(out), meta)
    print(f"\nwrote {out.relative_to(ROOT)}\n\n| report | checks | per-step MAPE |\n|---|---|---|")
    for run in runs:
        stem = f"fidelity_{run.name.removeprefix('live_')}_calibrated"
        report = json.loads((day / f"{stem}.json").read_text())
        dest = day / f"{stem}_prefill_own.md"
        new, _ = rerun(report, report["model"], dest, profile=out.relative_to(ROOT))
        print(f"| `{dest.name}` | {met(new['checks'])[0]} | "
              f"{new['steps']['mape_all_pct']:.2f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
