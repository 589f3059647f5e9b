"""Per-step MAPE of the H100 calibrations with attention given a factor of its own (a what-if).

``specsched calibrate --prior fitted`` scales each pass group by one factor over the roofline's
ratio between the two GPU models, attention's part raised to a power in 0..1 (0: attention at the
base's time). On DeepSeek-V2-Lite's H100 anchors that power is 0, and the group factor, set by
the anchors where the MoE weights dominate (H100 / H200 1.05-1.23), then scales attention too:
verify graph x0.80, so attention over long KV is predicted 20% faster on the H100 than on the
H200. The anchors where attention dominates say less than that (48 requests at KV 32,768: 1.00
measured, 0.94 predicted), and the first long-context ``fixed`` run on an H100
(``h100-2026-12-07``) erred -6.6% at 9-32 requests over KV 16,385-65,536.

``two-part``: a row's ratio is ``f_rest[group] x rest_share x rest_ratio + f_att x
attention_share``, the shares and ``rest_ratio`` from the roofline on the two sheets
(``backends.roofline.breakdown``), ``f_att`` one factor over every decode group (their attention
kernels read the same KV) and ``f_rest`` one per group. ``f_att`` is the one (0.50-1.60, step
0.01) under which the anchors agree best (the least sum of ``|log(measured / predicted)|``),
each group's ``f_rest`` the median its anchors give with it. Prefill keeps today's fit. It is
scored as ``calibrate_prior_whatif.py`` scores the prior's forms (``straggler`` KV rule).

Written on 2026-12-07 after seeing every H100 run kept here, so every figure is in sample
(CPU only, 61 s on this project's 2-core machine). Not adopted:

- V2-Lite: about even (today's run 2.06 -> 2.07%; the others within -0.3..+0.2 points). Its
  anchors give attention a factor of its own of 0.81-0.86, as low as the group factor put it,
  so the long-context run's -6.6% is not the group factor's reach into attention.
- The 70B shard's default anchors (KV to 32,768, attention x1.07-1.09): better on 13 of 15
  pairings, every long-context run among them (1.38-1.92 -> 1.19-1.63%).
- The 8B's default anchors: worse on 7 of 8 (e.g. long context 1.52 -> 1.98%).
- Anchors that do not resolve attention (``--trace`` on conversation traces, KV to 2,048-4,096)
  leave ``f_att`` free: 0.50-1.49, and the 70B's long-context runs go from 1.26-1.32% to
  2.61-3.13%. A form worth judging on the next H100 would at least apply only where
  ``backends.calibrate_prior.attention_resolved`` holds, and only on the 70B is there a sign
  of gain.

    python benchmarks/calibrate_attention_factor_whatif.py
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.fidelity.stats import step_errors  # noqa: E402
from backends.calibrate import group_name  # noqa: E402
from backends.calibrate_prior import roofline_parts  # noqa: E402
from benchmarks.calibrate_prior_whatif import fitted_table, refits, runs_on  # noqa: E402

F_ATT = np.round(np.arange(0.50, 1.6001, 0.01), 2)


def shares(model, base_sheet: str, here_sheet: str):
    """``row -> (rest share, attention share, rest's ratio here / base)`` from the roofline's
    parts on the two sheets (``backends.calibrate_prior.roofline_parts``)."""
    parts = roofline_parts(model, base_sheet, here_sheet)

    def of(r: dict) -> tuple[float, float, float]:
        rest_a, att_a, rest_b, _ = parts(r)
        return rest_a / (rest_a + att_a), att_a / (rest_a + att_a), rest_b / rest_a

    return of


def fit_two_part(anchors: list[dict], share) -> tuple[float, dict[str, float], float]:
    """``(f_att, {group: f_rest}, cost)`` over the decode anchors (prefill left out); an
    ``f_att`` that leaves some anchor no time for the rest is skipped."""
    decode = [(group_name(a["kind"], a["graph"]),
               float(a["measured_s"]) / float(a["base_s"]), *share(a))
              for a in anchors if a["kind"] != "prefill"]
    best = None
    for fa in F_ATT:
        if any(ratio - ats * fa <= 0 for _, ratio, _, ats, _ in decode):
            continue
        by: dict[str, list[float]] = {}
        for g, ratio, rs, ats, rr in decode:
            by.setdefault(g, []).append((ratio - ats * fa) / (rs * rr))
        f_rest = {g: float(np.median(xs)) for g, xs in by.items()}
        cost = sum(abs(math.log(ratio / (f_rest[g] * rs * rr + ats * fa)))
                   for g, ratio, rs, ats, rr in decode)
        if best is None or cost < best[2] - 1e-12:
            best = (float(fa), f_rest, cost)
    return best


def two_part_prior(share, f_att: float, f_rest: dict[str, float], prefill):
    """``row -> ratio`` under the two-part fit; prefill rows by ``prefill`` (today's fit,
    its factor included)."""
    def prior(r: dict) -> float:
        if r["kind"] == "prefill":
            return prefill(r)
        rs, ats, rr = share(r)
        return f_rest.get(group_name(r["kind"], r["graph"]), 1.0) * rs * rr + ats * f_att
    return prior


def main() -> int:
    results = ROOT / "benchmarks" / "results"
    print("| calibration | live run | fitted (today) | two-part (what-if) |")
    print("|---|---|---|---|")
    for f in refits(results):
        runs = runs_on([f.path.parent], f.model.name, f.uuid)
        if not runs:
            continue
        share = shares(f.model, f.base_sheet, f.here_sheet)
        f_att, f_rest, _ = fit_two_part(f.anchors, share)
        pf = f.factors["prefill"]["factor"] if "prefill" in f.factors else 1.0
        prior = two_part_prior(share, f_att, f_rest, lambda r: f.prior(r) * pf)
        ones = {g: dict(x, factor=1.0) for g, x in f.factors.items()}  # the prior holds them
        with tempfile.TemporaryDirectory() as tmp:
            t_today = fitted_table(f.grid, f.line, f.bmeta, f.factors, f.prior,
                                   Path(tmp) / "a.parquet")
            t_two = fitted_table(f.grid, f.line, f.bmeta, ones, prior, Path(tmp) / "b.parquet")
            for run in runs:
                steps = pq.read_table(run / "steps.parquet")
                a = step_errors(steps, t_today, kv_lookup="straggler")["mape_all_pct"]
                b = step_errors(steps, t_two, kv_lookup="straggler")["mape_all_pct"]
                print(f"| {f.path.parent.name}/{f.path.name} | {run.name} | {a:.2f}% "
                      f"(power {f.note['attention_power']:g}) | {b:.2f}% "
                      f"(attention x{f_att:.2f}) |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
