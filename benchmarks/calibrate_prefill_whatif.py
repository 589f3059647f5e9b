"""Every report on a kept calibrated profile, re-run with that profile's prefill rows unscaled.

``specsched calibrate`` scales each pass group of the base profile by the median of its anchors'
measured / base ratios, prefill included. Over the recorded pairings of a calibration with a
live run on its GPU (``benchmarks/calibration_vs_live.py``), the prefill factor moves the
profile's prefills further from the live run's more often than nearer. This re-runs each
fidelity report whose profile is a calibrated file kept under ``benchmarks/results/`` (as
``regenerate_reports.py --calibrated`` does, writing nothing) with a copy of that file whose
prefill rows are divided by its prefill factor (every other group as calibrated), and prints per
report the checks met, the prefill and the overall per-step MAPE both ways, then the totals:
what calibrating without a prefill factor would have scored on every calibrated comparison
shipped.

    python benchmarks/calibrate_prefill_whatif.py            # all (about 2 min on two CPUs)
    python benchmarks/calibrate_prefill_whatif.py --model deepseek-v2-lite
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.profile import read_profile  # noqa: E402
from backends.profile_file import write_profile  # noqa: E402
from benchmarks.regenerate_reports import kept_profile, met, rerun  # noqa: E402


def unscaled_prefill(calibrated: Path, out: Path) -> float:
    """Write ``calibrated`` with its prefill rows divided by its prefill factor to ``out``;
    return the factor."""
    table, meta = read_profile(calibrated)
    f = float(meta["calibration"]["factors"]["prefill"]["factor"])
    rows = [dict(r, **{k: r[k] / f for k in ("latency_s", "p10_s", "p90_s")})
            if r["kind"] == "prefill" else r for r in table.to_pylist()]
    meta = {k: v for k, v in meta.items() if k != "profile_version"}
    meta["notes"] = list(meta.get("notes") or []) + [
        f"what-if: prefill rows divided by the calibration's prefill factor {f:.4f}"]
    write_profile(rows, out, meta)
    return f


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="only this model's reports")
    a = ap.parse_args(argv)
    todo = []
    for f in sorted((ROOT / "benchmarks" / "results").glob("*/fidelity_*.json")):
        d = json.loads(f.read_text())
        if "calibration" not in (d.get("profile") or {}) or kept_profile(d) is None:
            continue
        if a.model and d.get("model") != a.model:
            continue
        todo.append((f, d))
    print("| report | prefill factor | checks, as calibrated | prefill unscaled | prefill MAPE "
          "| per-step MAPE | missed, prefill unscaled |")
    print("|---|---|---|---|---|---|---|")
    met_before = met_after = all_before = all_after = 0
    for f, d in todo:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "unscaled.parquet"
            fac = unscaled_prefill(kept_profile(d), copy)
            new, _ = rerun(d, d["model"], f.with_suffix(".md"), write=False, profile=copy)
        b, bm = met(d["checks"])
        n, nm = met(new["checks"])
        met_before += len(d["checks"]) - len(bm)
        met_after += len(new["checks"]) - len(nm)
        all_before += not bm
        all_after += not nm
        pb = d["checks"]["step_mape_prefill"]["value_pct"]
        pn = new["checks"]["step_mape_prefill"]["value_pct"]
        ab = d["checks"]["step_mape_all"]["value_pct"]
        an = new["checks"]["step_mape_all"]["value_pct"]
        missed = ", ".join(f"{k} {new['checks'][k]['value_pct']:+.2f}%" for k in nm)
        print(f"| {f.parent.name}/{f.stem} | {fac:.4f} | {b} | {n} | {pb:.2f} -> {pn:.2f}% "
              f"| {ab:.2f} -> {an:.2f}% | {missed or '-'} |", flush=True)
    print(f"\n{len(todo)} reports: checks met {met_before} as calibrated, {met_after} with "
          f"prefill unscaled; every check met in {all_before} and {all_after}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
