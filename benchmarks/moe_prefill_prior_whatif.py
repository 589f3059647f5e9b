"""Per-step MAPE of DeepSeek-V2-Lite's H100 calibration with its prefill group fitted four ways.

The calibration of ``benchmarks/results/h100-2026-12-06c`` (its measured anchors, re-fitted on a
CPU) is scored against each live V2-Lite run recorded on its GPU (``analysis.fidelity.stats.
step_errors`` with the ``straggler`` KV rule, as ``calibrate_prior_whatif.py`` scores them;
prefill steps do not depend on the KV rule), all steps and prefill steps apart:

- ``power 0``: what ``specsched calibrate`` does today (``--prior fitted`` chose power 0 there);
- ``power 0, prefill without prior``: the same, but the prefill group fitted and scaled with no
  prior (its three anchors measured 1.09-1.10 x the H200 rows at 1, 256 and 8,192 tokens, where
  the roofline's ratio reads small prefills as bandwidth-bound at up to 1.43);
- ``power 0, prefill kept``: the H200's prefill rows (``--prefill keep``);
- ``no prior``: one factor per group (what ``fitted`` chose from 5c51b30 until it was reverted).

Written after seeing these runs, so every figure is in sample: a what-if for the next V2-Lite
calibration on another GPU model to judge, not a rule. CPU only, about 5 s.

    python benchmarks/moe_prefill_prior_whatif.py
"""

from __future__ import annotations

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

DAY = ROOT / "benchmarks/results/h100-2026-12-06c"


def main() -> int:
    model = load_model("deepseek-v2-lite")
    cal = read_profile(str(DAY / "deepseek-v2-lite__H200.calibrated.parquet"))[1]["calibration"]
    grid, line, bmeta, anchors, groups = refit_inputs(model, cal, "H200")
    p0 = roofline_prior(model, "H200", "H100", 0.0)

    def p0_but_prefill(r: dict) -> float:
        return 1.0 if r["kind"] == "prefill" else p0(r)

    fits = {"power 0": (p0, "auto"), "power 0, prefill without prior": (p0_but_prefill, "auto"),
            "power 0, prefill kept": (p0, "keep"), "no prior": (None, "auto")}
    runs = sorted(DAY.glob("live_v2lite_*"))
    print("| fit | prefill factor | " + " | ".join(f"`{r.name}` all / prefill" for r in runs)
          + " |")
    print("|---|---|" + "---|" * len(runs))
    with tempfile.TemporaryDirectory() as tmp:
        for name, (prior, prefill) in fits.items():
            factors = settle_prefill(fit_factors(anchors, groups, prior), prefill, moe=True,
                                     other_model=True)
            table = fitted_table(grid, line, bmeta, factors, prior, Path(tmp) / "fit.parquet")
            cells = []
            for run in runs:
                e = step_errors(pq.read_table(run / "steps.parquet"), table,
                                kv_lookup="straggler")
                pre = e["by_kind"]["prefill"]["mape_pct"]
                cells.append(f"{e['mape_all_pct']:.2f}% / {pre:.2f}%")
            print(f"| {name} | {factors['prefill']['factor']:.3f} | " + " | ".join(cells) + " |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
