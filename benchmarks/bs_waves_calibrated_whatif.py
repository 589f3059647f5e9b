"""The dense models' calibrated reports re-run under ``backend.bs_interp = waves`` (what-if).

``waves`` (docs/backends.md, *Batch sizes between grid points on unified attention*;
``backends/dense_waves.py``) places batch sizes between two grid points of AITER's unified
attention by its 3D kernel's waves instead of the straight line. It was written on 2026-12-04
and stayed a what-if. That day it was judged on five H200 live runs, against the shipped
profiles. Every calibrated report kept under ``benchmarks/results/`` of Llama-3.1-8B or the
70B shard (one per live run and calibration, with today's backend defaults) is re-run here
twice: as it is, and with ``--set backend.bs_interp=waves``. Both use today's code and the
report's own trace, requests, repeat runs and calibrated profile. The runs recorded after
2026-12-04 (every H100 run among them) were not seen when the rule was written. An H100 has
the same 132 SMs as an H200, so the kernel's waves fall at the same batch sizes.

It prints one row per report and totals per GPU model and model: per-step MAPE and whole-run
checks met both ways. It writes nothing.

    python benchmarks/bs_waves_calibrated_whatif.py [--model llama-3.1-70b] [--in FOLDER ...]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.calibrate_anchor_surface_whatif import reports_of  # noqa: E402
from benchmarks.ingest_call import REFIT_FORMS  # noqa: E402
from benchmarks.regenerate_reports import backend_overrides, met, rerun  # noqa: E402

DENSE = ("llama-3.1-8b", "llama-3.1-70b")
#: the day ``waves`` was written: folders of later days hold runs it was not written from
WRITTEN = "2026-12-04"
WAVES = ("--set=backend.bs_interp=waves",)
#: kept re-fits of a calibration under another rule or base (each beside its measured file),
#: with those ``ingest_call.py --residual-refit`` writes
REFITS = ("_prior", "_fitted", "_roofline", "_resolved", "_line") + tuple(
    suffix for _, suffix in REFIT_FORMS)


def calibrations(models, folders) -> list[tuple[str, Path]]:
    """(model, calibrated profile) kept under benchmarks/results/ for ``models``, the files
    ``specsched calibrate`` measured (not their kept re-fits, :data:`REFITS`)."""
    out = []
    for m in models:
        for f in sorted((ROOT / "benchmarks" / "results").glob(f"*/{m}__H200.calibrated*.parquet")):
            if (folders and f.parent.name not in folders) or f.stem.endswith(REFITS):
                continue
            out.append((m, f))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", choices=DENSE, default=None)
    ap.add_argument("--in", dest="folders", nargs="+", metavar="FOLDER", default=None)
    a = ap.parse_args(argv)
    totals: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, 0, 0])
    print("| calibration | live run | unseen | per step line -> waves | checks line -> waves |")
    print("|---|---|---|---|---|")
    for model, path in calibrations(a.model or DENSE, a.folders):
        for run, rep in reports_of(path).items():
            if backend_overrides(rep):
                continue  # a what-if report already: only today's defaults are compared
            line, _ = rerun(rep, model, path, write=False, profile=path)
            waves, _ = rerun(rep, model, path, write=False, profile=path, extra=WAVES)
            folder = path.parent.name
            unseen = folder.split("-", 1)[1][:10] > WRITTEN
            ml, mw = line["steps"]["mape_all_pct"], waves["steps"]["mape_all_pct"]
            (cl, missed_l), (cw, missed_w) = met(line["checks"]), met(waves["checks"])
            print(f"| {folder}/{path.name} | {run} | {'yes' if unseen else 'no'} | "
                  f"{ml:.2f} -> {mw:.2f}% | {cl} -> {cw} |", flush=True)
            t = totals[(folder[:4], model, unseen)]
            t[0] += 1
            t[1] += mw < ml - 1e-9
            t[2] += mw > ml + 1e-9
            t[3] += len(line["checks"]) - len(missed_l)
            t[4] += len(waves["checks"]) - len(missed_w)
    print("\n| GPU | model | unseen | reports | per step better / worse | checks line -> waves |")
    print("|---|---|---|---|---|---|")
    for (gpu, model, unseen), t in sorted(totals.items()):
        print(f"| {gpu} | {model} | {'yes' if unseen else 'no'} | {t[0]} | {t[1]} / {t[2]} | "
              f"{t[3]} -> {t[4]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
