"""Does ``specsched fidelity`` fail a bad profile?  The shipped profile and its degraded copies
(``analysis.fidelity.degrade``) judged against a shipped live run.

Prints one row per profile: the checks it fails, with their values and, given a repeat run, the
floor beside each, and the per-step figures.  Runs on a CPU in about 20 s per profile.

    .venv/bin/python benchmarks/bench_fidelity_degraded.py \\
        [--reference-run benchmarks/results/h200-2026-12-01/live_split150] \\
        [--repeat-run DIR] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.fidelity import run_fidelity  # noqa: E402
from analysis.fidelity.degrade import DEGRADATIONS, write_degraded  # noqa: E402

PROFILE = ROOT / "backends" / "profiles" / "llama-3.1-8b__H200.parquet"
TRACE = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"
RESULTS = ROOT / "benchmarks" / "results" / "h200-2026-12-01"


def judge(profile: Path, reference_run: Path, repeats: tuple, limit: int) -> dict:
    rep = run_fidelity(TRACE, "llama-3.1-8b", profile=str(profile), limit=limit,
                       reference_run=reference_run, repeat_runs=repeats)
    return {"checks": rep["checks"], "all_pass": rep["all_pass"],
            "by_kind": {k: d["mape_pct"] for k, d in rep["steps"]["by_kind"].items()}}


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.2f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference-run", default=str(RESULTS / "live_split150"))
    ap.add_argument("--repeat-run", action="append", default=[])
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--json", help="write every profile's checks here")
    a = ap.parse_args(argv)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        profiles = {"shipped (undegraded)": PROFILE}
        for name in DEGRADATIONS:
            profiles[name] = write_degraded(PROFILE, Path(tmp) / f"{name}.parquet", name)
        for label, path in profiles.items():
            out[label] = judge(path, Path(a.reference_run), tuple(a.repeat_run), a.limit)
            print(f"{label}: done", file=sys.stderr)
    print("| profile | what it does | checks failed (value; a repeat differs by) | step MAPE "
          "all / off grid / per kind / worst band |")
    print("|---|---|---|---|")
    for label, r in out.items():
        c = r["checks"]
        failed = [f"{n} {_pct(d['value_pct'])}"
                  + (f" ({d['repeat_pct']:.2f}%)" if d.get("repeat_pct") is not None else "")
                  for n, d in c.items() if d["pass"] is False]
        kinds = " / ".join(f"{k} {v:.2f}%" for k, v in r["by_kind"].items() if v is not None)
        wb = c.get("step_mape_worst_band", {})
        steps = (f"{c['step_mape_all']['value_pct']:.2f}% / "
                 f"{c['step_mape_off_grid']['value_pct']:.2f}% / {kinds} / "
                 f"{wb.get('value_pct', 0):.2f}% ({wb.get('band')}, {wb.get('steps')} steps)")
        what = DEGRADATIONS[label][0] if label in DEGRADATIONS else str(PROFILE.relative_to(ROOT))
        n_ok = sum(1 for d in c.values() if d["pass"])
        n = sum(1 for d in c.values() if d["pass"] is not None)
        print(f"| {label} | {what} | {n - n_ok} of {n}: {'; '.join(failed) or 'none'} | {steps} |")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
