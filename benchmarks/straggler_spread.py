"""The one-wave straggler rule against a form that uses every request's KV, on live runs (CPU).

The engine's rule (``backends.attention_kv.effective_kv``) sees a batch as its mean and longest
KV: one straggler among requests of one length. A live batch's lengths spread. This script
rebuilds each live decode step's KV list from the run's tables (a request commits at the end of
its iteration's draft-extend, ``request_steps.parquet``; its KV at the step is its prompt plus
what it committed before, less one, as the steps table counts it; steps whose rebuilt mean and
longest differ from the recorded ones are left out) and scores, on the steps with a straggler
that run AITER's 3D split-KV kernel in one wave:

- the rule, at each tail exponent;
- a **processor-sharing** form: the programs of the requests still running share the SMs, so
  while ``m`` requests remain, a KV tile takes ``(programs per SM / the uniform batch's) **
  exponent`` of the uniform batch's time (at least one program per SM); the batch takes
  ``sum_j (k_j - k_{j-1}) f(n - j + 1)`` over its sorted KV. With one straggler it is the
  rule's tail, but it takes the others at their own length rather than at the batch's mean.

    python benchmarks/straggler_spread.py            # the four long-context live runs
    python benchmarks/straggler_spread.py --gammas 0.4,0.3,0.25
    python benchmarks/straggler_spread.py --bench --gammas 0.2,0.25,0.3,0.4   # the benchmarks
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_aiter_straggler as bench  # noqa: E402  (its case layout)
import straggler_vs_profile as svp  # noqa: E402
from straggler_tail_fit import load_runs  # noqa: E402

from analysis.fidelity.lookup import lookup_points, predict  # noqa: E402
from analysis.fidelity.stats import STRAGGLER_MIN_KV, STRAGGLER_RATIO  # noqa: E402
from backends.attention_kv import (ATT_BQ, ATT_KVH, ATT_S3D, ATT_SMS, KERNEL_3D,  # noqa: E402
                                   attention_kernel, attention_params, attention_rows,
                                   kv_segments)
from backends.models import load_model  # noqa: E402
from backends.profile import ProfileExecutor  # noqa: E402
from backends.shipped import default_profile  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
#: (live run, model, tp): the long-context live runs of the 8B and the 70B shard
RUNS = (("h200-2026-12-01d/live_long_fixed", "llama-3.1-8b", None),
        ("h200-2026-12-02b/live_long_bucket", "llama-3.1-8b", None),
        ("h200-2026-12-02c/live_long_pad", "llama-3.1-8b", None),
        ("h200-2026-12-02e/live_long70b_pad", "llama-3.1-70b", 8))


def batch_kvs(run: Path) -> list[list[float] | None]:
    """Per row of the run's steps table: the KV of each request in the step's batch (draft,
    verify and draft-extend steps), or None where it cannot be rebuilt or does not match the
    recorded mean and longest."""
    steps = pq.read_table(run / "steps.parquet").to_pandas()
    rs = pq.read_table(run / "request_steps.parquet").to_pandas().sort_values("time_s",
                                                                              kind="stable")
    rq = pq.read_table(run / "requests.parquet").to_pandas()
    prompt = dict(zip(rq.request_id.astype(int), rq.prompt_tokens.astype(int)))
    done: Counter = Counter()
    at: dict[float, list[float]] = {}
    for t, g in rs.groupby("time_s", sort=True):
        at[round(float(t), 9)] = [float(prompt[int(r)] + done[int(r)] - 1) for r in g.request]
        for r, n in zip(g.request, g.tokens):
            done[int(r)] += int(n)
    kind = steps.kind.astype(str).to_numpy()
    ends = (steps.start_s + steps.latency_s).round(9).to_numpy()
    it_kv = {int(i): at.get(float(e)) for i, e, k in zip(steps.iteration, ends, kind)
             if k == "draft_extend"}
    out: list[list[float] | None] = []
    for i, it in enumerate(steps.iteration):
        kv = it_kv.get(int(it)) if kind[i] in ("draft", "verify", "draft_extend") else None
        if (kv is None or len(kv) != int(steps.bs.iat[i])
                or abs(np.mean(kv) - steps.kv_mean.iat[i]) >= 1.0
                or abs(max(kv) - steps.kv_max.iat[i]) >= 1.0):
            kv = None
        out.append(kv)
    return out


def shared_kv(kvs, nseq: float, rows: float, att: np.ndarray, gamma: float) -> float | None:
    """The processor-sharing form's KV for one launch of ``nseq`` sequences (the real ones'
    KV in ``kvs``) and ``rows`` query rows on the 3D split-KV kernel; None when the launch takes
    more than one wave of the resident slots."""
    k = np.sort(np.asarray(kvs, dtype=np.float64))
    n = len(k)
    p = np.ceil(rows / nseq / att[ATT_BQ]) * att[ATT_KVH] * kv_segments(nseq, rows, att)
    slots, sms = att[ATT_S3D], att[ATT_SMS]
    if nseq * p > slots:
        return None
    n_ref = nseq * p / sms
    t, prev = 0.0, 0.0
    for j in range(n):
        f = 1.0 if j == 0 else min((max((n - j) * p / sms, 1.0) / n_ref) ** gamma, 1.0)
        t += (k[j] - prev) * f
        prev = k[j]
    return max(t, float(k.sum()) / nseq)


def score(run: Path, model_name: str, tp: int | None, gammas) -> dict:
    """Per exponent: (steps, the rule's MAPE, the shared form's MAPE, their mean signed errors)
    over the run's one-wave 3D-kernel steps with a straggler whose batch could be rebuilt."""
    model = load_model(model_name, tp=tp)
    table = ProfileExecutor(default_profile(model.name, "H200"), model=model).latency_table()
    steps = pq.read_table(run / "steps.parquet")
    df = steps.to_pandas()
    kvs = batch_kvs(run)
    kind = df.kind.astype(str).to_numpy()
    strag = ((df.kv_max >= STRAGGLER_RATIO * df.kv_mean) & (df.kv_max >= STRAGGLER_MIN_KV)).to_numpy()
    meas = df.latency_s.to_numpy()
    out = {}
    for g in gammas:
        with svp.tail_exponent_3d(table, g):
            att = attention_params(table.attention, model)
            pts = lookup_points(steps, table)
            rule, _ = predict(pts, table)
            kv2, sel = pts["kv"].copy(), np.zeros(len(df), dtype=bool)
            for i in np.flatnonzero(strag):
                if kvs[i] is None:
                    continue
                rows = attention_rows(kind[i] == "draft", bool(pts["graph"][i]), pts["bs"][i],
                                      df.width.iat[i], df.tokens.iat[i])
                if attention_kernel(pts["bs"][i], rows, kind[i] == "draft", att) != KERNEL_3D:
                    continue
                v = shared_kv(kvs[i], pts["bs"][i], rows, att, g)
                if v is not None:
                    kv2[i], sel[i] = v, True
            shared, _ = predict({**pts, "kv": kv2}, table)
        e0, e1 = rule[sel] / meas[sel] - 1, shared[sel] / meas[sel] - 1
        out[float(g)] = (int(sel.sum()), float(np.abs(e0).mean()), float(np.abs(e1).mean()),
                         float(e0.mean()), float(e1.mean()))
    return out


def bench_errors(gammas) -> dict[float, tuple[int, float, float]]:
    """Per exponent, over the one-wave 3D-kernel cases of the recorded straggler benchmarks
    (``straggler_tail_fit.RUNS``): (cases, the rule's MAPE, the shared form's MAPE), each
    case's KV read off its measured uniform curve."""
    errs: dict[float, tuple[list, list]] = {float(g): ([], []) for g in gammas}
    for _, model, table, cases in load_runs():
        c3 = svp.cases_3d(cases, table)
        for g in gammas:
            with svp.tail_exponent_3d(table, g):
                att = attention_params(table.attention, model)
                rule = svp.compare(c3, table)
            for c, r in zip(c3, rule):
                rows = float(c["bs"] * (1 if c["kind"] == "draft" else c["width"]))
                kv = bench.case_kv(c).astype(np.float64)[:int(c["real"])]
                v = shared_kv(kv, float(c["bs"]), rows, att, g)
                if v is None:
                    continue
                mixed = c["mixed_s"] + float(c.get("comm_s", 0.0))
                errs[float(g)][0].append(abs(r["rule_err_measured_curve"]))
                errs[float(g)][1].append(abs(svp.measured_at(c, v) / mixed - 1))
    return {g: (len(a), float(np.mean(a)), float(np.mean(b))) for g, (a, b) in errs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gammas", default="0.4,0.3,0.25", help="tail exponents to score")
    ap.add_argument("--bench", action="store_true",
                    help="score both forms on the straggler benchmarks' one-wave cases instead")
    args = ap.parse_args()
    try:
        gammas = [float(x) for x in args.gammas.split(",")]
    except ValueError:
        print(f"error: --gammas {args.gammas}: not a comma-separated list of numbers",
              file=sys.stderr)
        sys.exit(2)
    if args.bench:
        for g, (n, r, sh) in bench_errors(gammas).items():
            print(f"benchmark one-wave 3D cases, exponent {g:.2f}: {n} cases, rule {100 * r:.2f}%, "
                  f"shared {100 * sh:.2f}%")
        return
    print(f"{'run':<36} {'exponent':>8} {'steps':>6} {'rule':>16} {'shared':>16}")
    for name, model, tp in RUNS:
        for g, (n, r, s, rs, ss) in score(RESULTS / name, model, tp, gammas).items():
            print(f"{name:<36} {g:8.2f} {n:6d} {100 * r:6.2f}% ({100 * rs:+5.2f}) "
                  f"{100 * s:6.2f}% ({100 * ss:+5.2f})")


if __name__ == "__main__":
    main()
