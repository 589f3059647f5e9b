"""Every report on a kept calibrated profile, re-run with its prefill rows the other way.

``specsched calibrate`` scales each pass group of the base profile by the median of its anchors'
measured / base ratios; the prefill group's factor is applied on dense models and recorded but
not applied on MoE ones (``backends.calibrate.settle_prefill``, ``--prefill``). This re-runs each
fidelity report whose profile is a calibrated file kept under ``benchmarks/results/`` (as
``regenerate_reports.py --calibrated`` does, writing nothing) with a copy of that file whose
prefill rows are the other way round (divided by the applied factor, or multiplied by the
anchors' factor where it was not applied; every other group as calibrated), and prints per
report the checks met, the prefill and the overall per-step MAPE both ways, then the totals per
model: what the other choice would have scored on every calibrated comparison shipped.

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
from benchmarks.fidelity_table import on_profile_gpu  # noqa: E402
from benchmarks.regenerate_reports import kept_profile, met, rerun  # noqa: E402


def other_prefill(calibrated: Path, out: Path) -> tuple[float, bool]:
    """Write ``calibrated`` with its prefill rows the other way to ``out``: divided by the
    prefill factor it applied, or multiplied by its anchors' factor if it applied none; return
    (the anchors' factor, whether ``calibrated`` applied it)."""
    table, meta = read_profile(calibrated)
    p = meta["calibration"]["factors"]["prefill"]
    applied = p.get("applied", True)
    f = float(p.get("measured", p["factor"]))
    m = 1 / f if applied else f
    rows = [dict(r, **{k: r[k] * m for k in ("latency_s", "p10_s", "p90_s")})
            if r["kind"] == "prefill" else r for r in table.to_pylist()]
    meta = dict(meta)
    meta["notes"] = list(meta.get("notes") or []) + [
        f"what-if: prefill rows {'divided' if applied else 'multiplied'} by the calibration's "
        f"prefill factor {f:.4f}"]
    write_profile(rows, out, meta)
    return f, applied


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="only this model's reports")
    a = ap.parse_args(argv)
    todo = []
    for f in sorted((ROOT / "benchmarks" / "results").glob("*/fidelity_*.json")):
        d = json.loads(f.read_text())
        if "calibration" not in (d.get("profile") or {}) or kept_profile(d) is None:
            continue
        if on_profile_gpu(d) is False:  # calibrated on another GPU model than its base's
            continue
        if a.model and d.get("model") != a.model:
            continue
        todo.append((f, d))
    print("| report | prefill factor | applied | checks, as calibrated | the other way | "
          "prefill MAPE | per-step MAPE | missed, the other way |")
    print("|---|---|---|---|---|---|---|---|")
    tot: dict[str, list[int]] = {}
    for f, d in todo:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "other.parquet"
            fac, applied = other_prefill(kept_profile(d), copy)
            new, _ = rerun(d, d["model"], f.with_suffix(".md"), write=False, profile=copy)
        b, bm = met(d["checks"])
        n, nm = met(new["checks"])
        # per model: reports, checks met scaled / unscaled, every check met scaled / unscaled
        t = tot.setdefault(d["model"], [0, 0, 0, 0, 0])
        ms, mu = (b, n) if applied else (n, b)
        ok_s, ok_u = (not bm, not nm) if applied else (not nm, not bm)
        t[0] += 1
        t[1] += int(ms.split()[0])
        t[2] += int(mu.split()[0])
        t[3] += ok_s
        t[4] += ok_u
        pb = d["checks"]["step_mape_prefill"]["value_pct"]
        pn = new["checks"]["step_mape_prefill"]["value_pct"]
        ab = d["checks"]["step_mape_all"]["value_pct"]
        an = new["checks"]["step_mape_all"]["value_pct"]
        missed = ", ".join(f"{k} {new['checks'][k]['value_pct']:+.2f}%" for k in nm)
        print(f"| {f.parent.name}/{f.stem} | {fac:.4f} | {'yes' if applied else 'no'} | {b} | {n} "
              f"| {pb:.2f} -> {pn:.2f}% | {ab:.2f} -> {an:.2f}% | {missed or '-'} |", flush=True)
    print()
    for model, (k, ms, mu, ok_s, ok_u) in sorted(tot.items()):
        print(f"{model}: {k} reports, checks met {ms} with the prefill factor applied, {mu} "
              f"without; every check met in {ok_s} and {ok_u}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
