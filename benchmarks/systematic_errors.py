"""Where is a shipped profile wrong on every machine?  Shape cells whose error has one sign on
every recorded live run of the model, on several GPUs.

A live run's per-step error mixes the profile's own error with the machine's (H200s differ by
about 1% per pass, and one GPU has two speeds of small decode graphs, docs/backends.md). An
error that keeps its sign and size over runs on different GPUs is the profile's: a grid point
measured in an odd state, or a rule that derives the points between measured ones badly. For
each live run under ``ROOT`` of ``--model`` it predicts every step with today's shipped profile
(the lookup fidelity uses), takes the median error per cell (kind, graph or eager, padded batch
size, launch width, KV band) over cells with at least ``--min-steps`` steps, and prints the cells
seen on at least ``--min-gpus`` GPUs whose every run's median has the same sign and whose
smallest is at least ``--min-pct`` in size, with the time they take in those runs. Needs no GPU.

    .venv/bin/python benchmarks/systematic_errors.py benchmarks/results --model llama-3.1-70b
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.fidelity.lookup import predict_steps  # noqa: E402
from analysis.fidelity.report import _run_gpus  # noqa: E402
from backends.profile import load_profile  # noqa: E402

KV_BANDS = (1024, 4096, 16384, 65536)


def kv_band(kv: float) -> str:
    lo = 0
    for hi in KV_BANDS:
        if kv <= hi:
            return f"{lo + 1 if lo else 0}-{hi}"
        lo = hi
    return f">{KV_BANDS[-1]}"


def run_gpus(summary: dict) -> list[str]:
    """The GPUs (uuid prefixes) a recorded live run's steps were measured on: every sitting
    of its journal that added calls (``analysis.fidelity.report._run_gpus``)."""
    return sorted({u[:8] for u in _run_gpus(summary) if u})


def live_runs(root: Path, model: str, gpu: str = "H200") -> list[Path]:
    """Results folders under ``root`` of live (aiter) runs of ``model`` on a ``gpu`` (the GPU
    sheet the shipped profiles are for; runs on another model, an H100's, are left out)."""
    from backends.calibrate_prior import sheet_of

    out = []
    for s in sorted(root.glob("*/live_*/summary.json")):
        d = json.loads(s.read_text())
        m = d.get("model")
        m = m if isinstance(m, str) else (m or {}).get("name")
        dev = sheet_of((d.get("backend_detail") or {}).get("gpu"))
        if (d.get("backend") == "aiter" and m == model and dev == gpu
                and (s.parent / "steps.parquet").exists()):
            out.append(s.parent)
    return out


def cell_medians(run: Path, table, min_steps: int) -> dict[tuple, tuple[float, int, float]]:
    """{cell: (median error %, steps, live seconds)} of one run's steps against ``table``."""
    import pyarrow.parquet as pq

    summary = json.loads((run / "summary.json").read_text())
    kv_lookup = ((summary.get("config") or {}).get("backend") or {}).get("kv_lookup") or "straggler"
    steps = pq.read_table(run / "steps.parquet")
    pred, _ = predict_steps(steps, table, kv_lookup)
    lat = steps.column("latency_s").to_numpy()
    err = (pred / lat - 1) * 100
    cols = {c: steps.column(c).to_pylist() for c in ("kind", "graph", "bs_padded", "kv_mean")}
    width = steps.column("width").to_pylist()
    cells: dict[tuple, list[int]] = {}
    for i in range(steps.num_rows):
        kind = cols["kind"][i]
        if kind == "prefill":
            continue
        key = (kind, "graph" if cols["graph"][i] else "eager", int(cols["bs_padded"][i]),
               int(width[i]) if kind != "draft" else 1, kv_band(float(cols["kv_mean"][i])))
        cells.setdefault(key, []).append(i)
    return {k: (float(np.median(err[ix])), len(ix), float(lat[ix].sum()))
            for k, ix in cells.items() if len(ix) >= min_steps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--model", required=True)
    ap.add_argument("--gpu", default="H200")
    ap.add_argument("--min-steps", type=int, default=10)
    ap.add_argument("--min-gpus", type=int, default=2)
    ap.add_argument("--min-pct", type=float, default=0.5)
    a = ap.parse_args(argv)
    profile = ROOT / "backends" / "profiles" / f"{a.model}__{a.gpu}.parquet"
    table = load_profile(profile)
    runs = live_runs(a.root, a.model)
    per_run = {}
    gpus = {}
    for r in runs:
        per_run[r] = cell_medians(r, table, a.min_steps)
        gpus[r] = run_gpus(json.loads((r / "summary.json").read_text()))
    cells: dict[tuple, list] = {}
    for r, cm in per_run.items():
        for k, v in cm.items():
            cells.setdefault(k, []).append((r, *v))
    rows = []
    for k, seen in cells.items():
        on = {g for r, *_ in seen for g in gpus[r]}
        meds = [m for _, m, _, _ in seen]
        if len(on) < a.min_gpus or len(seen) < 2:
            continue
        if not (all(m > 0 for m in meds) or all(m < 0 for m in meds)):
            continue
        if min(abs(m) for m in meds) < a.min_pct:
            continue
        rows.append((sum(s for *_, s in seen), k, meds, len(on), sum(n for _, _, n, _ in seen)))
    rows.sort(key=lambda r: -r[0])
    print(f"{a.model}: {len(runs)} live runs under {a.root}, scored with {profile.name}; "
          f"cells on >= {a.min_gpus} GPUs whose every run errs the same way by >= {a.min_pct}% "
          f"(+: the profile predicts slower than live)\n")
    print("| kind | launch | padded bs | width | KV | runs | GPUs | steps | live s | median error per run (%) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for secs, (kind, launch, bs, w, kv), meds, ngpu, n in rows:
        print(f"| {kind} | {launch} | {bs} | {w} | {kv} | {len(meds)} | {ngpu} | {n} | "
              f"{secs:.1f} | {', '.join(f'{m:+.2f}' for m in meds)} |")
    total = sum(v[2] for cm in per_run.values() for v in cm.values())
    print(f"\n{len(rows)} cells, {sum(r[0] for r in rows):.1f} of {total:.1f} live seconds "
          f"in the cells scored")
    return 0


if __name__ == "__main__":
    sys.exit(main())
