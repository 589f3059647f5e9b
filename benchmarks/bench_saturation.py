"""Where the saturated code run's whole-run bias comes from: per-step error, amplified by queueing.

Re-simulates the whole ``azure_code_sps_2k`` sample (2,000 requests) with the profile backend
under executors derived from the profile and from the live AITER run recorded on an H200
(``benchmarks/results/h200-2026-11-29c/live_code``), and prints each run's TTFT, TPOT and E2E
percentiles relative to the live run, plus the per-kind signed errors and the two runs' decisions.

That run was recorded under the engine's earlier admission rule (a fixed per-request reserve),
which today's engine no longer has (``fidelity --reference-run`` refuses it), so this script
runs against a tree of the commit that matched it, given as ``--tree``:

    git archive d1f91a5 | (mkdir -p /tmp/specsched-d1f91a5 && tar -x -C /tmp/specsched-d1f91a5)
    .venv/bin/python benchmarks/bench_saturation.py --tree /tmp/specsched-d1f91a5

CPU only; about 10 s on two cores.  docs/backends.md ("Saturation") has the figures.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
LIVE = HERE / "results" / "h200-2026-11-29c" / "live_code"


def metrics(req: dict) -> dict[str, float]:
    """TTFT, TPOT and E2E percentiles of a requests table (as a dict of columns)."""
    a, f, e = (np.asarray(req[k], float) for k in ("arrival_s", "first_token_s", "finish_s"))
    o = np.asarray(req["output_tokens"])
    ttft, tpot = f - a, (e - f) / np.maximum(o - 1, 1)
    return {"ttft_p50": np.percentile(ttft, 50), "ttft_p90": np.percentile(ttft, 90),
            "ttft_p99": np.percentile(ttft, 99), "tpot_p50": np.percentile(tpot, 50),
            "tpot_p90": np.percentile(tpot, 90), "tpot_p99": np.percentile(tpot, 99),
            "e2e_p50": np.percentile(e - a, 50)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", required=True, help="a tree of commit d1f91a5 (see the docstring)")
    ap.add_argument("--live", default=str(LIVE))
    args = ap.parse_args()
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))
    from analysis.fidelity import predict_steps
    from backends.latency_table import TableExecutor
    from backends.profile import default_profile, load_profile
    from backends.protocol import VerifyTiming
    from simulator.config import SimConfig
    from specsched.setup import load_trace, simulate_to

    table = load_profile(default_profile("llama-3.1-8b", "H200"))
    cfg = SimConfig.load(None, {"model.name": "llama-3.1-8b", "backend.name": "profile"})
    trace = load_trace(tree / "traces/samples/azure_code_sps_2k.parquet", seed=cfg.seed)
    steps = pq.read_table(Path(args.live) / "steps.parquet")
    live = metrics(pq.read_table(Path(args.live) / "requests.parquet").to_pydict())

    def col(name):
        c = steps.column(name)
        return np.asarray(c.cast("string").to_pylist() if "dictionary" in str(c.type) else c)

    kind, graph = col("kind"), col("graph").astype(bool)
    meas, bs, bsp, w = col("latency_s"), col("bs"), col("bs_padded"), col("width")
    kvm, kvx, tok = col("kv_mean"), col("kv_max").astype(float), col("tokens").astype(float)
    pred, _ = predict_steps(steps, table)
    ratio = meas / pred  # what multiplies the profile to give the live pass

    print("Per kind, the profile at the live run's own shapes (error = profile / live - 1):")
    print(f"  {'kind':16s} {'steps':>6s} {'share of GPU time':>18s} {'mean signed':>12s} "
          f"{'time-weighted':>14s}")
    for k in ("verify", "draft", "prefill"):
        for g in (True, False):
            m = (kind == k) & (graph == g)
            if m.any():
                print(f"  {k + (' graph' if g else ' eager'):16s} {m.sum():6d} "
                      f"{100 * meas[m].sum() / meas.sum():17.1f}% "
                      f"{100 * np.mean(pred[m] / meas[m] - 1):+11.2f}% "
                      f"{100 * (pred[m].sum() / meas[m].sum() - 1):+13.2f}%")
    print(f"  all: {100 * (pred.sum() / meas.sum() - 1):+.2f}% in total GPU time")
    pf = kind == "prefill"
    for lo, hi in ((0, 256), (256, 1024), (1024, 4096), (4096, 8192)):
        m = pf & (tok > lo) & (tok <= hi)
        print(f"  prefill {lo + 1}-{hi} tokens: {m.sum()} passes, "
              f"{100 * (pred[m].sum() / meas[m].sum() - 1):+.2f}% in time")

    class Scaled:
        """A live-path executor: the profile's latency times ``fac(kind, batch)``."""

        name = "profile"

        def __init__(self, fac):
            self.inner, self.fac = TableExecutor("profile", table), fac

        def latency_table(self):
            return None

        def describe(self):
            return self.inner.describe()

        def prefill(self, b):
            return self.inner.prefill(b) * self.fac("prefill", b)

        def draft(self, b):
            return self.inner.draft(b) * self.fac("draft", b)

        def verify(self, b):
            t = self.inner.verify(b)
            return VerifyTiming(latency_s=t.latency_s * self.fac("verify", b),
                                out_of_grid=t.out_of_grid)

    sims = {}

    def run(label, ex):
        res = simulate_to(trace, cfg, None, executor=ex)
        sims[label] = res
        got = metrics(res.requests.to_pydict())
        print(f"  {label:46s} " + " ".join(f"{100 * (got[k] / live[k] - 1):+7.2f}"
                                            for k in got), flush=True)

    print("\nWhole runs against the live run (%):")
    print(f"  {'profile side':46s} " + " ".join(f"{k:>7s}" for k in live))
    run("profile as shipped", TableExecutor("profile", table))
    tw = {k: meas[kind == k].sum() / pred[kind == k].sum() for k in ("verify", "draft", "prefill")}
    mean = {k: float(np.mean(ratio[kind == k])) for k in tw}
    run("per kind, mean per-step ratio divided out", Scaled(lambda k, b: mean[k]))
    run("per kind, time-weighted ratio divided out", Scaled(lambda k, b: tw[k]))

    # the live run's own residual at the nearest live pass of the same kind and launch
    idx = defaultdict(list)
    for i in range(len(ratio)):
        key = ((kind[i], int(bs[i])) if kind[i] == "prefill" else
               (kind[i], bool(graph[i]), int(bsp[i])) if kind[i] == "draft" else
               (kind[i], bool(graph[i]), int(bsp[i]), int(w[i])))
        idx[key].append(i)
    idx = {k: np.asarray(v) for k, v in idx.items()}

    def residual(k, b):
        if k == "prefill":
            c = idx.get((k, b.bs))
            c = np.flatnonzero(pf) if c is None else c
            d = (4 * np.abs(np.log1p(tok[c]) - np.log1p(b.total_tokens))
                 + np.abs(np.log1p(kvm[c]) - np.log1p(np.mean(b.prefix))))
        else:
            key = ((k, b.graph, b.bs_padded) if k == "draft"
                   else (k, b.graph, b.bs_padded, b.launch_width))
            c = idx.get(key)
            if c is None:
                return tw[k]
            d = (np.abs(np.log1p(kvm[c]) - np.log1p(np.mean(b.kv_lens)))
                 + 0.5 * np.abs(np.log1p(kvx[c]) - np.log1p(np.max(b.kv_lens))))
        return float(ratio[c[np.argmin(d)]])

    run("live residual of the nearest live pass", Scaled(residual))
    for s in (0.98, 0.99, 1.01, 1.02):
        run(f"every latency x{s}", Scaled(lambda k, b, s=s: s))
    for k0 in ("verify", "draft", "prefill"):
        run(f"{k0} only x0.98", Scaled(lambda k, b, k0=k0: 0.98 if k == k0 else 1.0))
    for sig in (0.01, 0.02):
        for seed in range(4):
            g = np.random.default_rng(seed)
            run(f"iid noise sigma {sig:.0%}, seed {seed}",
                Scaled(lambda k, b, g=g, sig=sig: float(np.exp(g.normal(0.0, sig)))))

    print("\nDecisions, live run vs the shipped profile's:")
    sim = sims["profile as shipped"]
    ssteps = sim.steps if sim.steps is not None else None
    for label, t in (("live", steps), ("profile", ssteps)):
        if t is None:
            continue
        k = np.asarray(t.column("kind").cast("string").to_pylist())
        st, lat = np.asarray(t.column("start_s")), np.asarray(t.column("latency_s"))
        gap = st[1:] - (st + lat)[:-1]
        print(f"  {label:8s} passes {len(k)} (verify {np.sum(k == 'verify')}, prefill "
              f"{np.sum(k == 'prefill')}), iterations {len(np.unique(t.column('iteration')))}, "
              f"GPU busy {lat.sum():.2f} s of {(st + lat)[-1]:.2f} s, idle between passes "
              f"{gap[gap > 0].sum():.2f} s")


if __name__ == "__main__":
    main()
