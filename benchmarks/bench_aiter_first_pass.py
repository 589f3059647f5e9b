"""Find which state of the live loop makes a verify graph slower than the profile's timing of it.

In every live run of Llama-3.1-70B tp 8 the first verify at one request takes what the profile
measured (8.51 against 8.48 ms) and every later one is 4.6% slower (8.87-8.93 ms); Llama-3.1-8B
shows no such jump (benchmarks/results/h200-2026-12-02b/README.md).  In one process this script
times the one-request verify graph

- ``profile``: as ``specsched profile`` does (one launch replayed ``--reps`` times back to back,
  after warm-up runs), before and after everything below;
- ``loop``: as a live run does, through the executor: each round a draft phase, a verify and a
  draft-extend at one request whose KV grows by the accepted tokens, ``--gap-ms`` of host time
  between calls (the engine's own time);
- ``verify-only``: the verify alone each round, the KV still growing (so its layout changes);
- ``same-launch``: the verify alone each round at a fixed KV, one run per call, with the gap
  and without;

The loop runs first as a live run starts (no hold estimate yet, so its first verify warms up
untimed and runs unheld). Then all of them run with the GPU holds on (the default) and off, so
that a gap between the phases names the
state: a difference between ``profile`` and ``same-launch`` is the per-call path, between
``same-launch`` and ``verify-only`` a changing layout, between ``verify-only`` and ``loop`` the
draft model's passes.  A ``profile`` after the loops slower than before it is a lasting state.
Every figure is the GPU time between the replay's events, in milliseconds.

    python3 benchmarks/bench_aiter_first_pass.py --model llama-3.1-70b --tp 8 --json out.json

``--stages`` times verify graphs after each capture a live run's start makes (it found that
the last capture sets the replay time); ``--sweep 1,2,4,8`` compares a profile sweep's old
timing of verify graphs with ``Runner.capture_for_timing``'s (docs/aiter.md, Timing).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _ms(timings) -> list[float]:
    return [round(float(t.gpu_s) * 1e3, 4) for t in timings]


def _summary(xs: list[float]) -> dict:
    a = np.asarray(xs, dtype=float)
    return {"n": int(a.size), "first": float(a[0]), "median": float(np.median(a)),
            "median_after_first": float(np.median(a[1:])) if a.size > 1 else float(a[0]),
            "min": float(a.min()), "max": float(a.max())}


def _executor(a, capture_bs: list[int]):
    """The live executor of ``a.model`` (tp ``a.tp``) with an 8 GiB KV pool, capturing graphs
    lazily at the batch sizes ``capture_bs``."""
    from backends.aiter import make_executor
    from backends.models import load_model

    return make_executor(load_model(a.model, tp=a.tp), capture_bs=capture_bs, kv_pool_gib=8,
                         max_context=16384)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--tp", type=int, default=None)
    ap.add_argument("--width", type=int, default=4, help="verify width (drafts + 1)")
    ap.add_argument("--kv", type=int, default=200, help="the request's KV at the first round")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--gap-ms", type=float, default=1.0)
    ap.add_argument("--stages", action="store_true",
                    help="instead: time the verify graph after each step of a live run's start "
                         "(captures, first runs, an allocation), with the GPU's clocks")
    ap.add_argument("--keep-memsets", action="store_true",
                    help="with --stages: capture graphs with their memset nodes (no "
                         "backends/aiter/graphfix.py)")
    ap.add_argument("--kv-fill", action="store_true",
                    help="with --stages: the steps write the KV pool (zeros, random values) "
                         "between graph captures instead")
    ap.add_argument("--private-pools", action="store_true",
                    help="with --stages: every graph captured into its own memory pool")
    ap.add_argument("--sweep", default=None, metavar="BS_LIST",
                    help="instead: time verify graphs of these batch sizes (e.g. 1,2,4,8) the "
                         "way profile sweeps did (right after their own capture) and the way "
                         "they do now (Runner.capture_for_timing: after a draft-extend capture), "
                         "alternately, at --kv and 4x --kv")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.stages:
        return stages(a)
    if a.sweep:
        return sweep_check(a)

    from backends.protocol import DraftBatch, DraftExtendBatch, VerifyBatch

    t0 = time.perf_counter()
    ex = _executor(a, [1])  # the loop and the profile's way replay the one-request graphs only
    r = ex.runner
    w, gap = a.width, a.gap_ms / 1e3
    res: dict = {"model": a.model, "tp": a.tp, "width": w, "kv": a.kv, "gap_ms": a.gap_ms,
                 "build_s": round(time.perf_counter() - t0, 1), "phases": []}

    def verify(kv: int):
        return VerifyBatch(bs_real=1, bs_padded=1, widths=np.array([w]), kv_lens=np.array([kv]),
                           launch_width=w, mode="uniform", graph=True)

    def profile_way(label: str) -> None:
        launch, key = r.verify_launch(np.array([w]), np.array([a.kv]), mode="uniform",
                                      padded_bs=1, launch_width=w)
        ms = _ms(r.run(key, launch, graph=True, reps=a.reps, warmup=3))
        record(label, ms)

    def record(label: str, ms: list[float], extra: dict | None = None) -> None:
        row = {"phase": label, "hold_gpu": r.hold_gpu, "ms": ms, **_summary(ms), **(extra or {})}
        res["phases"].append(row)
        print(f"{label:28s} hold={int(r.hold_gpu)} first {row['first']:.3f}  median "
              f"{row['median']:.3f}  rest {row['median_after_first']:.3f}  "
              f"[{row['min']:.3f}, {row['max']:.3f}]", flush=True)

    def loop(label: str, draft: bool, grow: bool, pause: float = gap) -> None:
        kv, ms = a.kv, []
        held0, starved0 = r.held_runs, r.starved_runs
        for _ in range(a.rounds):
            if draft:
                ex.draft(DraftBatch(bs_real=1, bs_padded=1, kv_lens=np.array([kv]), passes=w - 1,
                                    graph=True))
                time.sleep(pause)
            t = ex.verify(verify(kv))
            ms.append(round(float(t.extra["gpu_s"]) * 1e3, 4))
            time.sleep(pause)
            if draft:
                ex.draft_extend(DraftExtendBatch(bs_real=1, bs_padded=1, width=w,
                                                 kv_lens=np.array([kv]), graph=True))
                time.sleep(pause)
            if grow:
                kv += w - 1
        record(label, ms, {"held_runs": r.held_runs - held0,
                           "starved_runs": r.starved_runs - starved0})

    # first, as a live run starts: no hold estimate yet, so the first verify warms up untimed
    loop("loop (fresh process)", draft=True, grow=True)
    for hold in (True, False):
        r.hold_gpu = hold
        profile_way("profile (before)")
        loop("loop (draft+verify+extend)", draft=True, grow=True)
        loop("verify-only (KV grows)", draft=False, grow=True)
        loop("same-launch (fixed KV)", draft=False, grow=False)
        loop("same-launch, no gap", draft=False, grow=False, pause=0.0)
        profile_way("profile (after)")
    r.hold_gpu = True
    res["timing"] = r.timing_describe()
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))


def _clocks() -> dict:
    """The GPU's SM clock (MHz), power (W) and temperature (C) from nvidia-smi, {} without it."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                              "--format=csv,noheader,nounits", "-i", "0"], capture_output=True,
                             text=True, timeout=10).stdout.strip().splitlines()[0]
        sm, pw, tc = (x.strip() for x in out.split(","))
        return {"sm_mhz": float(sm), "power_w": float(pw), "temp_c": float(tc)}
    except Exception:  # noqa: BLE001 - no nvidia-smi (ROCm, a CPU): the clocks are optional
        return {}


def sweep_check(a) -> None:
    """Verify graphs timed as ``specsched profile`` times them, with and without the
    draft-extend capture ``Runner.capture_for_timing`` adds before the timing: per batch size
    and KV, both ways twice, in the order plain, companion, plain, companion (so that a drift
    over time shows as a difference between the two rounds, not between the ways)."""
    bs_list = sorted({int(b) for b in a.sweep.split(",")})
    ex = _executor(a, bs_list)
    r, w = ex.runner, a.width
    res: dict = {"model": a.model, "tp": a.tp, "width": w, "rows": []}
    ways = {"capture": r.capture, "capture_for_timing": r.capture_for_timing}
    for b in bs_list:
        key = ("verify", b, w)
        for kv in (a.kv, 4 * a.kv):
            launch, _ = r.verify_launch(np.full(b, w), np.full(b, kv), mode="uniform",
                                        padded_bs=b, launch_width=w)
            row: dict = {"bs": b, "kv": kv}
            for rnd in (1, 2):
                for way, capture in ways.items():
                    r.release(key)
                    capture(key)
                    ms = _ms(r.run(key, launch, graph=True, reps=a.reps, warmup=3))
                    row[f"{way}_{rnd}"] = float(np.median(ms))
            r.release(key)
            base = (row["capture_1"] + row["capture_2"]) / 2
            new = (row["capture_for_timing_1"] + row["capture_for_timing_2"]) / 2
            row["ratio"] = round(new / base, 4)
            res["rows"].append({**row, **_clocks()})
            print(f"bs {b:3d} kv {kv:6d}  after own capture {row['capture_1']:.3f} "
                  f"{row['capture_2']:.3f}  after draft-extend capture "
                  f"{row['capture_for_timing_1']:.3f} {row['capture_for_timing_2']:.3f} ms  "
                  f"ratio {row['ratio']:.4f}", flush=True)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))


def stages(a) -> None:
    """In a fresh process: verify graphs (one request, and 8 and 16) timed the profile's way
    after each step a live run takes before its second verify (capturing and running the draft
    and draft-extend graphs, more verify graphs, a large allocation), to find the step after
    which they are slow; with each step, whether the one-request verify still computes the same
    logits (a graph whose inputs were overwritten would not), and at the end the same graph
    captured again."""
    import torch

    ex = _executor(a, [1, 2, 3, 4, 5, 6, 7, 8, 16])
    r, w, kv = ex.runner, a.width, np.array([a.kv])
    r.replace_memsets = not a.keep_memsets
    if a.private_pools:
        r.mempool = None  # torch.cuda.graph then gives each capture a private pool
    res: dict = {"model": a.model, "tp": a.tp, "width": w, "kv": a.kv, "stages": [],
                 "memsets_replaced": r.replace_memsets, "private_pools": a.private_pools}
    launches = {b: r.verify_launch(np.full(b, w), np.full(b, a.kv), mode="uniform", padded_bs=b,
                                   launch_width=w) for b in (1, 8, 16)}
    keep: list = []
    ref: dict = {}

    def logits_now():
        launch, key = launches[1]
        r.run(key, launch, graph=True)
        torch.cuda.synchronize()
        st = r.graphs.get(key) or r.graphs[("eager",) + key]  # eager: a CPU dry run
        return st.logits[: st.rows].float().clone()

    def timed(label: str) -> None:
        row: dict = {"stage": label, "graphs": len(r.graphs)}
        for b, (launch, key) in launches.items():
            ms = _ms(r.run(key, launch, graph=True, reps=a.reps, warmup=3))
            row[f"bs{b}"] = _summary(ms)
        out = logits_now()
        if "logits" not in ref:
            ref["logits"] = out
        row["logits_max_abs_diff"] = float((out - ref["logits"]).abs().max())
        row.update({"allocated_gib": round(torch.cuda.memory_allocated() / 2**30, 2),
                    "reserved_gib": round(torch.cuda.memory_reserved() / 2**30, 2), **_clocks()})
        res["stages"].append(row)
        print(f"{label:34s} graphs {row['graphs']:3d} " + "  ".join(
            f"bs{b} {row[f'bs{b}']['median']:.3f}" for b in launches) +
            f"  logits diff {row['logits_max_abs_diff']:.3g}  {row.get('sm_mhz', '?')} MHz "
            f"{row['reserved_gib']} GiB reserved", flush=True)

    dl, dkey = r.draft_launch(kv, 1)
    xl, xkey = r.extend_launch(kv, 1, w)

    def recapture() -> None:
        for _, key in launches.values():
            r.graphs.pop(key, None)
            r.capture(key)

    def fill(how: str) -> None:
        for t in (r.pool.k, r.pool.v):
            t.zero_() if how == "zeros" else t.normal_(0.0, 1.0)

    none = ("verify graphs captured", lambda: None)
    again = ("again (no change)", lambda: None)
    bs2 = ("+ verify graph bs 2 captured", lambda: r.capture(("verify", 2, w)))
    extend = ("+ draft-extend graph captured", lambda: r.capture(xkey))
    more = ("+ verify graphs bs 3-7 captured",
            lambda: [r.capture(("verify", b, w)) for b in range(3, 8)])
    if a.kv_fill:
        steps = [none, again,
                 ("+ KV pool zeroed", lambda: fill("zeros")),
                 ("+ KV pool random normal", lambda: fill("normal")),
                 ("+ KV pool zeroed again", lambda: fill("zeros")),
                 bs2, extend,
                 ("+ KV pool random normal again", lambda: fill("normal")),
                 more]
    else:
        steps = [none, again, bs2,
                 ("+ it ran once", lambda: r.run(*r.verify_launch(
                     np.full(2, w), np.full(2, a.kv), mode="uniform", padded_bs=2,
                     launch_width=w)[::-1], graph=True)),
                 ("+ draft graph bs 1 captured", lambda: r.capture(dkey)),
                 ("+ it ran once", lambda: r.run(dkey, dl, graph=True)),
                 extend,
                 ("+ it ran once", lambda: r.run(xkey, xl, graph=True)),
                 more,
                 ("+ 4 GiB allocated and written",
                  lambda: keep.append(torch.ones(2**30, device="cuda"))),
                 ("+ it freed, cache emptied", lambda: (keep.clear(), torch.cuda.empty_cache())),
                 ("+ the timed verify graphs recaptured", recapture)]
    for label, step in steps:
        step()
        torch.cuda.synchronize()
        timed(label)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
