"""The live MLA executor's measured step times against the estimate from its kernels' rates (CPU).

Reads a rates file (``benchmarks/bench_aiter_rates.py --json``) and a profile (default: the
shipped DeepSeek-V2-Lite one), estimates every row's pass with ``backends/aiter/estimate.py``
(the kernels' bytes and FLOPs from the model's shapes, nothing fitted) and prints, per pass group
and over all rows, ``measured / estimate`` and the share of rows within 15%; ``--rows`` prints
every row, ``--json`` writes them.  ``--run DIR`` also scores a recorded live run's decode steps
(verify, draft, draft-extend; each at its padded batch, launch width and mean KV, a draft step as
its ``passes`` passes), the workload's own mix of shapes, with the share of GPU time within 15%.
``--curves`` prints the rates file's launch-size curves (``backends/aiter/rate_curves.py``) as
tables, each coordinate's points merged (total bytes or FLOPs over total seconds); ``--without
CURVE`` (repeatable) prices that curve's class with its single rate instead, as a file without it.

    python benchmarks/aiter_estimate_vs_profile.py --rates rates.json [--profile P] [--run DIR] [--curves] [--without moe_bw_curve] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rates_without(rates_path: str, without: tuple = ()) -> dict:
    """The rates file's rates (:func:`backends.aiter.estimate.load_rates`) less the curves named
    in ``without`` (refused when not a curve's name)."""
    from backends.aiter.estimate import load_rates
    from backends.aiter.rate_curves import CURVE_FIELDS
    from traces.errors import SpecschedError

    for k in without:
        if k not in CURVE_FIELDS:
            raise SpecschedError(f"--without {k}: not a curve ({', '.join(CURVE_FIELDS)})")
    return {k: v for k, v in load_rates(rates_path).items() if k not in without}


def run(rates_path: str, profile_path: str | None, *, within: float, without: tuple = ()) -> dict:
    """The comparison (library entry point, also for the tests)."""
    from backends.aiter.estimate import compare_rows, summarize
    from backends.models import ModelShape, load_model
    from backends.profile import read_profile
    from backends.shipped import default_profile

    from backends.aiter.rate_curves import CURVE_FIELDS

    rates = rates_without(rates_path, without)
    curves = {k: len(rates[k]) for k in CURVE_FIELDS if k in rates}
    path = Path(profile_path) if profile_path else default_profile("deepseek-v2-lite", "H200")
    table, meta = read_profile(path)
    model = ModelShape.from_dict(meta["model"]) if isinstance(meta.get("model"), dict) else \
        load_model("deepseek-v2-lite")
    rows = compare_rows(model, table.to_pylist(), rates)
    return {"profile": str(path), "rates": rates_path, "curves": curves, "model": model.name,
            "summary": summarize(rows, within), "rows": rows}


def run_steps(rates_path: str, run_dir: str, *, within: float, without: tuple = ()) -> dict:
    """A live run's decode steps against the estimate: per kind, the share of steps and of GPU
    time within ``within``, and the median ratio."""
    import numpy as np
    import pyarrow.parquet as pq

    from backends.aiter.estimate import step_kernels, step_time
    from backends.models import ModelShape, load_model
    from traces.errors import SpecschedError

    rates = rates_without(rates_path, without)
    d = Path(run_dir)
    try:
        summary = json.loads((d / "summary.json").read_text())
        steps = pq.read_table(d / "steps.parquet", columns=[
            "kind", "graph", "bs_padded", "width", "kv_mean", "passes", "latency_s"]).to_pylist()
    except (OSError, ValueError, KeyError) as exc:
        raise SpecschedError(f"{run_dir}: not a recorded run ({exc})") from None
    m = summary.get("model")
    if not isinstance(m, (str, dict)):
        raise SpecschedError(f"{run_dir}/summary.json: no model recorded")
    model = ModelShape.from_dict(m) if isinstance(m, dict) else load_model(m)
    cache: dict[tuple, float] = {}
    out: dict[str, dict] = {}
    for s in steps:
        if s["kind"] not in ("verify", "draft", "draft_extend"):
            continue
        key = (s["kind"], bool(s["graph"]), int(s["bs_padded"]), int(s["width"]),
               int(round(s["kv_mean"])))
        if key not in cache:
            cache[key] = step_time(step_kernels(model, key[0], bs=key[2], width=key[3],
                                                kv_len=key[4], tokens=0), rates, graph=key[1])
        est = cache[key] * (max(int(s["passes"]), 1) if s["kind"] == "draft" else 1)
        g = out.setdefault(s["kind"], {"ratio": [], "time": []})
        g["ratio"].append(s["latency_s"] / est)
        g["time"].append(s["latency_s"])
    res = {}
    for k, g in out.items():
        r, t = np.asarray(g["ratio"]), np.asarray(g["time"])
        ok = np.abs(r - 1.0) <= within
        res[k] = {"steps": int(len(r)), "median_ratio": float(np.median(r)),
                  "p10_ratio": float(np.percentile(r, 10)), "p90_ratio": float(np.percentile(r, 90)),
                  "share_within": float(ok.mean()), "time_share_within": float(t[ok].sum() / t.sum()),
                  "total_ratio": float(t.sum() / (t / r).sum())}
    return {"run": run_dir, "kinds": res}


#: how --curves prints each curve: title, row key ("": one row), column key, amount, scale
CURVE_TABLES = {
    "mla_decode_curve": ("MLA decode stage 1, TB/s (one decode row per request)", "keys_per_row",
                         "rows", "bytes", 1e12),
    "flash_curve": ("flash prefill, TFLOP/s (one request)", "prefix", "q", "flops", 1e12),
    "moe_bw_curve": ("fused MoE (both calls), TB/s", "", "tokens", "bytes", 1e12),
    "gemm_bw_curve": ("cuBLAS GEMM, M 1 and 16 merged, TB/s; weight MB", "", "weight_bytes",
                      "bytes", 1e12),
}


def curve_lines(rates: dict) -> list[str]:
    """The rates file's curves as text tables: a line per row-key value, a column per
    column-key value, each cell the merged rate of the points there."""
    lines = []
    for key, (title, yk, xk, nk, scale) in CURVE_TABLES.items():
        if key not in rates:
            continue
        acc: dict[tuple, list[float]] = {}
        for p in rates[key]:
            a = acc.setdefault((p[yk] if yk else "", p[xk]), [0.0, 0.0])
            a[0] += p[nk]
            a[1] += p["seconds"]
        xs = sorted({x for _, x in acc})
        head = [f"{x / 1e6:7.1f}" if xk == "weight_bytes" else f"{x:7g}" for x in xs]
        lines += [f"\n{key}: {title}", f"{(yk + ' / ' if yk else '') + xk:>20s} " + " ".join(head)]
        for y in sorted({y for y, _ in acc}):
            lines.append(f"{y!s:>20s} " + " ".join(
                f"{acc[(y, x)][0] / acc[(y, x)][1] / scale:7.3f}" if (y, x) in acc else f"{'-':>7s}"
                for x in xs))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", required=True, help="rates JSON of bench_aiter_rates.py")
    ap.add_argument("--profile", default=None, help="profile parquet (default: the shipped V2-Lite)")
    ap.add_argument("--within", type=float, default=0.15)
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--run", default=None, help="a recorded live run's folder (steps.parquet)")
    ap.add_argument("--curves", action="store_true", help="print the rates file's curves")
    ap.add_argument("--without", action="append", default=[], metavar="CURVE",
                    help="price this curve's class with its single rate (repeatable)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from traces.errors import SpecschedError

    try:
        without = tuple(args.without)
        out = run(args.rates, args.profile, within=args.within, without=without)
        if args.run:
            out["live"] = run_steps(args.rates, args.run, within=args.within, without=without)
    except SpecschedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    s = out["summary"]
    print(f"{out['model']}: {out['profile']} against {out['rates']} "
          f"(ratio = measured / estimate; within {s['within']:.0%})")
    print("rates: " + (", ".join(f"{k} ({n} points)" for k, n in out["curves"].items())
                       or "single rates (no curves)"))
    print(f"{'group':20s} {'rows':>5s} {'median':>8s} {'min':>7s} {'max':>7s} {'within':>7s}")
    for name, g in list(s["groups"].items()) + [("all", s["all"])]:
        print(f"{name:20s} {g['rows']:5d} {g['median_ratio']:8.3f} {g['min_ratio']:7.3f} "
              f"{g['max_ratio']:7.3f} {g['share_within']:7.1%}")
    if args.curves:
        print("\n".join(curve_lines(rates_without(args.rates, tuple(args.without)))))
    if args.rows:
        print(f"\n{'kind':13s} {'graph':5s} {'bs':>4s} {'w':>2s} {'kv':>6s} {'tokens':>6s} "
              f"{'measured ms':>11s} {'estimate ms':>11s} {'ratio':>6s}")
        for r in out["rows"]:
            print(f"{r['kind']:13s} {str(bool(r['graph'])):5s} {r['bs']:4d} {r['width']:2d} "
                  f"{r['kv_len']:6d} {r['tokens']:6d} {r['latency_s'] * 1e3:11.3f} "
                  f"{r['estimate_s'] * 1e3:11.3f} {r['ratio']:6.3f}")
    if args.run:
        print(f"\nlive decode steps of {args.run} (each at its padded bs, width and mean KV)")
        print(f"{'kind':13s} {'steps':>6s} {'median':>7s} {'p10':>6s} {'p90':>6s} {'sum':>6s} "
              f"{'within':>7s} {'of time':>7s}")
        for k, g in out["live"]["kinds"].items():
            print(f"{k:13s} {g['steps']:6d} {g['median_ratio']:7.3f} {g['p10_ratio']:6.3f} "
                  f"{g['p90_ratio']:6.3f} {g['total_ratio']:6.3f} {g['share_within']:7.1%} "
                  f"{g['time_share_within']:7.1%}")
    if args.json:
        from traces.atomic import atomic_output_file

        with atomic_output_file(args.json, inputs=[args.rates, out["profile"]]) as tmp:
            Path(tmp).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
