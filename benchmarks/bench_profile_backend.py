"""How fast the CPU executors are: building their tables, looking shapes up, and whole runs.

Prints (seconds, and calls per second):
  1. load_profile of a realistic profile (SGLang's speculative capture ladder x widths 1-8 x
     12 KV lengths, eager points, draft and prefill sweeps; ~6k rows) -- a one-off per run;
  2. roofline table build per model (cached per process after the first);
  3. per-lookup cost through the Python executor methods (the slow path) and through the compiled
     interpolation the engine's fast path calls;
  4. if the engine is importable: one simulation of a synthetic trace with the profile and the
     roofline executors, wall time and simulated requests per wall second.

    .venv/bin/python benchmarks/bench_profile_backend.py [--requests 2000]

The profile is built from roofline latencies (no GPU profile ships yet); lookup speed does not
depend on the values.  Figures depend on the machine; the target is that a profile lookup costs
no more than a roofline lookup, and that the engine's speed is the same with either.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends import roofline as R  # noqa: E402
from backends.jit import jit_status, njit  # noqa: E402
from backends.interp import interp3
from backends.models import load_model  # noqa: E402
from backends.profile import ProfileExecutor, load_profile, profile_metadata, write_profile  # noqa: E402
from backends.protocol import VerifyBatch  # noqa: E402

LADDER = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
KVS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144]


def realistic_rows(model):
    m = load_model(model)
    rows = []

    def add(kind, graph, bs, w, kv, tok, lat):
        lat = float(lat)
        rows.append(dict(kind=kind, graph=graph, bs=bs, width=w, kv_len=kv, tokens=tok,
                         latency_s=lat, p10_s=lat * 0.99, p90_s=lat * 1.02, reps=20))

    bs = np.array(LADDER, dtype=float)[:, None, None]
    w = np.arange(1, 9, dtype=float)[None, :, None]
    kv = np.array(KVS, dtype=float)[None, None, :]
    lat = R.verify_time(m, "H200", bs, w, kv)
    for i, b in enumerate(LADDER):
        for j in range(8):
            for k, L in enumerate(KVS):
                if b * L <= 256 * 65536:  # what fits: large bs x long KV is skipped
                    add("verify", True, b, j + 1, L, b * (j + 1), lat[i, j, k])
    for b in (1, 16, 64, 256, 320, 384, 512):
        for j in (1, 4, 8):
            for L in (1024, 8192):
                add("verify", False, b, j, L, b * j, R.verify_time(m, "H200", b, j, L, graph=False))
    for b in LADDER:
        for L in KVS:
            if b * L <= 256 * 65536:
                add("draft", True, b, 1, L, b, R.draft_pass_time(m, "H200", b, L))
    for t in (64, 256, 1024, 2048, 4096, 8192, 16384, 32768):
        for p in (0, 1024, 8192, 32768, 131072):
            add("prefill", False, 1, 0, p, t, R.prefill_time(m, "H200", t, p))
    return m, rows


@njit
def _lookup_loop(a0, a1, a2, v, xs0, xs1, xs2):
    s = 0.0
    for i in range(xs0.shape[0]):
        val, _ = interp3(a0, a1, a2, v, xs0[i], xs1[i], xs2[i])
        s += val
    return s


def bench_lookups(table, n=200_000, seed=0):
    rng = np.random.default_rng(seed)
    g = table.verify_graph
    xs0 = rng.uniform(1, 256, n)
    xs1 = rng.integers(1, 9, n).astype(float)
    xs2 = rng.uniform(0, 200_000, n)
    _lookup_loop(g.axes[0], g.axes[1], g.axes[2], g.values, xs0[:10], xs1[:10], xs2[:10])
    t = time.perf_counter()
    _lookup_loop(g.axes[0], g.axes[1], g.axes[2], g.values, xs0, xs1, xs2)
    compiled = (time.perf_counter() - t) / n
    return compiled


def bench_executor_calls(ex, n=20_000, seed=0):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(200):
        bs = int(rng.integers(1, 65))
        w = int(rng.integers(1, 9))
        batches.append(VerifyBatch(bs_real=bs, bs_padded=bs, widths=np.full(bs, w),
                                   kv_lens=rng.integers(100, 20000, bs), launch_width=w,
                                   mode="uniform", graph=True))
    ex.verify(batches[0])
    t = time.perf_counter()
    for i in range(n):
        ex.verify(batches[i % 200])
    return (time.perf_counter() - t) / n


def bench_engine(executors, n_requests):
    try:
        import simulator
        from simulator.config import SimConfig
        from traces import read_trace_arrays
        from traces.synth import synth
    except ImportError as exc:  # the engine is optional for this script
        print(f"engine: skipped ({exc})")
        return
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "synth.parquet"
        synth(path, n=n_requests, rate=20.0, acceptance="geometric:k=4,alpha=0.7", seed=1)
        trace = read_trace_arrays(path)
        model = load_model("llama-3.1-8b")
        cap = model.kv_capacity_tokens("H200")
        for name, ex in executors.items():
            cfg = SimConfig.load(None, {"backend.name": name})
            walls = []
            for _ in range(3):  # the first run includes compilation; report the best
                t = time.perf_counter()
                res = simulator.run(trace, cfg, ex, kv_capacity_tokens=cap)
                walls.append(time.perf_counter() - t)
            wall = min(walls)
            print(f"engine [{name:8s}] {n_requests} requests, {res.steps.num_rows} passes: "
                  f"{wall:.2f} s wall, {n_requests / wall:,.0f} requests/s, "
                  f"{res.steps.num_rows / wall:,.0f} passes/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    print(f"jit: {jit_status()}")
    with tempfile.TemporaryDirectory() as d:
        m, rows = realistic_rows("llama-3.1-8b")
        path = Path(d) / "llama-3.1-8b__H200.parquet"
        t = time.perf_counter()
        write_profile(rows, path, profile_metadata(m, {"name": "H200"}, command="benchmark"))
        print(f"write_profile: {len(rows)} rows in {time.perf_counter() - t:.3f} s "
              f"({path.stat().st_size / 1024:.0f} KiB)")
        t = time.perf_counter()
        table = load_profile(path)
        print(f"load_profile: {time.perf_counter() - t:.3f} s; grids "
              f"{table.source['grid_points']}; holes filled {table.source['holes_filled']}")
        prof = ProfileExecutor(path)
        for name in ("llama-3.1-8b", "llama-3.1-70b", "deepseek-v3"):
            R._CACHE.clear()
            t = time.perf_counter()
            R.make_roofline_executor(name, "H200")
            print(f"roofline table build [{name}]: {time.perf_counter() - t:.3f} s")
        roof = R.make_roofline_executor("llama-3.1-8b", "H200")
        for label, ex in (("profile", prof), ("roofline", roof)):
            c = bench_lookups(ex.latency_table())
            p = bench_executor_calls(ex)
            print(f"lookup [{label:8s}] compiled interp3: {c * 1e9:.0f} ns/lookup "
                  f"({1 / c:,.0f}/s); executor.verify(): {p * 1e6:.1f} us/call ({1 / p:,.0f}/s)")
        bench_engine({"profile": prof, "roofline": roof}, args.requests)


if __name__ == "__main__":
    main()
