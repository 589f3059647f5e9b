"""Find what makes an eager pass outrun its timing hold: host syncs, a full launch queue, host time.

An eager prefill is timed behind a spin kernel that should outlast the host's queueing of the
pass (docs/aiter.md, *Timing*).  If the pass waits for the GPU (a synchronizing copy, an
``.item()``, a ``cudaFree`` inside the caching allocator, or a launch call blocked because the
GPU's launch queue is full), no hold is long enough: the run is starved however long the hold.
For each prefill length this script

1. times the prefill as the executor does, three times (the first compiles), printing each run's
   GPU and host milliseconds, whether it ended held, its re-runs and the segments learned;
2. runs it behind a 3 s hold (far above any host queueing time): still starved means the pass
   waits for the GPU somewhere;
3. runs the pass body once with ``torch.cuda.set_sync_debug_mode("error")`` and prints the first
   synchronizing call's stack, and once under "warn" counting them;
4. reports the caching allocator's driver calls (allocations, frees, all-stream syncs) per run;
5. profiles the host (cProfile) through one whole pass behind a 3 s hold: the calls that waited
   for the GPU hold about 3 s, and their callers are printed.

Once per run it also measures how many one-element adds queue behind a 0.5 s hold before a launch
blocks (``queue``).  On the H200 (2026-12-02) DeepSeek-V3's prefill blocked inside Triton's
launches (step 5) with no synchronizing call (step 3); ``backends/aiter/segments.py`` is the fix.

    python3 benchmarks/bench_aiter_eager_sync.py --model deepseek-v3 --tokens 64,203,1315 \\
        --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ALLOC_KEYS = ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_sync_all_streams")


def _alloc_stats(torch) -> dict:
    s = torch.cuda.memory_stats()
    return {k: int(s.get(k, 0)) for k in ALLOC_KEYS}


def _delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in a if b[k] != a[k]}


def _body_runner(runner, torch, mode: str, out: dict):
    """A replacement for ``runner._time_eager`` that stages the launch and runs its body once
    under sync-debug ``mode``, recording the first error's stack or the warnings' count."""
    def run(st, launch, body, **_):
        runner._stage(st, launch)
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode(mode)
            try:
                with torch.no_grad():
                    body()
            except RuntimeError as exc:
                out["error"] = str(exc).splitlines()[0]
                out["stack"] = [ln.strip() for ln in traceback.format_tb(exc.__traceback__)
                                if "site-packages" in ln or "backends" in ln][-8:]
            finally:
                torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
        msgs = [str(w.message).splitlines()[0] for w in caught]
        out["warnings"] = len(msgs)
        out["warning_kinds"] = sorted(set(msgs))[:6]
        return []
    return run


def _profiled_runner(runner, torch, out: dict, hold_s: float = 3.0, top: int = 8):
    """A replacement for ``runner._time_eager`` that queues a ``hold_s`` spin kernel and runs the
    body once under cProfile: the functions with the most host time of their own, with callers."""
    import cProfile
    import io
    import pstats

    def run(st, launch, body, **_):
        runner._stage(st, launch)
        torch.cuda.synchronize()
        cps = runner._cycles_per_s or runner._calibrate_spin()
        prof = cProfile.Profile()
        torch.cuda._sleep(int(hold_s * cps))
        t0 = time.perf_counter()
        with torch.no_grad():
            prof.runcall(body)
        out["host_s"] = round(time.perf_counter() - t0, 4)
        torch.cuda.synchronize()
        st_ = pstats.Stats(prof)
        rows = sorted(st_.stats.items(), key=lambda kv: -kv[1][2])[:top]
        out["top_self_s"] = []
        for (fn, line, name), (cc, nc, tt, ct, callers) in rows:
            who = sorted(callers.items(), key=lambda kv: -kv[1][2])[:3]
            out["top_self_s"].append({
                "fn": f"{Path(fn).name}:{line}:{name}", "calls": nc, "self_s": round(tt, 4),
                "callers": [f"{Path(c[0]).name}:{c[1]}:{c[2]} ({v[2]:.3f}s)" for c, v in who]})
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_callers(4)
        out["callers_text"] = buf.getvalue()[-6000:]
        return []
    return run


def queue_capacity(torch, cps: float, hold_s: float = 0.5, n: int = 4096) -> dict:
    """Kernels the host can queue behind a ``hold_s`` spin kernel (``cps``: its cycles per
    second) before a launch blocks: the index of the first of ``n`` one-element adds whose
    launch took over half the hold."""
    x = torch.zeros(1, device="cuda")
    x.add_(1)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(hold_s * cps))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        x.add_(1)
        times.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    blocked = next((i for i, d in enumerate(times) if d > hold_s / 2), None)
    return {"hold_s": hold_s, "launches": n, "first_blocked_launch": blocked,
            "median_launch_us": round(1e6 * sorted(times)[n // 2], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v3")
    ap.add_argument("--tokens", default="64,203,1315")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch

    import backends.aiter.timing as timing
    from backends.aiter import make_executor

    t0 = time.perf_counter()
    ex = make_executor(a.model, capture_bs=[1], kv_pool_gib=8, max_context=16384)
    r = ex.runner
    res: dict = {"model": a.model, "build_s": round(time.perf_counter() - t0, 1), "cases": [],
                 "queue": queue_capacity(torch, r._calibrate_spin())}
    print(json.dumps(res["queue"]), flush=True)
    for n in (int(x) for x in a.tokens.split(",")):
        case: dict = {"tokens": n, "runs": []}
        tok, pre = np.array([n]), np.array([0])
        for label in ("first", "again", "again2"):
            s0, rr0, sv0 = _alloc_stats(torch), r.rerun_starved, r.starved_runs
            w0 = time.perf_counter()
            t = r.prefill(tok, pre)[0]
            case["runs"].append({
                "run": label, "gpu_ms": round(t.gpu_s * 1e3, 3),
                "host_ms": round(t.host_s * 1e3, 3),
                "held": t.held, "reruns": r.rerun_starved - rr0,
                "starved": r.starved_runs - sv0, "wall_s": round(time.perf_counter() - w0, 3),
                "lead_s": round(r.lead_estimate(("eager", "prefill", 1, n)) or 0, 4),
                "driver": _delta(s0, _alloc_stats(torch))})
        # a 3 s hold: far more than queueing any pass takes
        s0, rr0, sv0 = _alloc_stats(torch), r.rerun_starved, r.starved_runs
        with mock.patch.dict(r._lead, {("eager", "prefill", 1, n): 2.0}), \
                mock.patch.object(timing, "MAX_LEAD_S", 2.0):
            t = r.prefill(tok, pre)[0]
        case["hold_3s"] = {"gpu_ms": round(t.gpu_s * 1e3, 3), "host_ms": round(t.host_s * 1e3, 3),
                           "held": t.held, "reruns": r.rerun_starved - rr0,
                           "starved": r.starved_runs - sv0,
                           "driver": _delta(s0, _alloc_stats(torch))}
        for mode in ("error", "warn"):
            out: dict = {}
            with mock.patch.object(r, "_time_eager", _body_runner(r, torch, mode, out)):
                r.prefill(tok, pre)
            case[f"sync_debug_{mode}"] = out
        out = {}
        with mock.patch.object(r, "_time_eager", _profiled_runner(r, torch, out)):
            r.prefill(tok, pre)
        text = out.pop("callers_text", "")
        case["host_profile"] = out
        print(text, flush=True)
        case["segments"] = r.eager_segments.describe()
        print(json.dumps(case), flush=True)
        res["cases"].append(case)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
