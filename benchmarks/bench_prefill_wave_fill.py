"""How much a partly filled last wave of the prefill attention costs, against a full one.

The prefill lookup's wave term (backends/prefill_waves.py) counts a launch's waves of programs
on the GPU's slots (two per SM).  A last wave whose programs fit one per SM runs each program
alone on its SM, which may be faster than two sharing it.  This measures that, apart from the
profiles and the prefill sweeps it is scored on: two-layer models with each shipped model's head
layout (Llama-3.1-8B: 32 query heads over 8 KV heads; the Llama-3.1-70B tp-8 shard: 8 over 1;
DeepSeek-V2-Lite: MLA with 16 heads) are timed as a profile times a prefill (one request, the
median of ``--reps``) at prefix ``--prefix`` and at prefix 0, over token counts stepping one
program at a time through three waves.  The prefix's share ``d(T) = t(T, P) - t(T, 0)`` is the
attention's reading of the prefix; on a CPU (``--compare``) it is fitted as ``u + v x
(full waves before the last + g)`` on the points whose last wave is over 90% full (g = 1), and
each other point's ``g`` (its last wave's cost in full waves) is printed against that wave's
programs, with the median ``g`` where the last wave holds at most one program per SM and where
it holds more.

    python3 benchmarks/bench_prefill_wave_fill.py --measure --json OUT/prefill_wave_fill.json
    python3 benchmarks/bench_prefill_wave_fill.py --compare OUT/prefill_wave_fill.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LAYOUTS = {"llama-3.1-8b": None, "llama-3.1-70b": 8, "deepseek-v2-lite": None}


def _tokens(prm, sms: int, waves: int = 3) -> list[int]:
    """Token counts from one full wave to ``waves``, one program-granule apart (at most ~40)."""
    from backends.prefill_waves import _programs

    slots = 2 * sms
    out, last = [], -1
    for t in range(256, 16384, 16):
        p = _programs(float(t), prm)
        if p < slots:
            continue
        if p > waves * slots:
            break
        if p != last:
            out.append(t)
            last = p
    step = max(1, len(out) // 40)
    return out[::step]


def measure(a) -> None:
    from backends.aiter import make_executor
    from backends.aiter.executor import gpu_info
    from backends.models import load_model
    from backends.prefill_waves import wave_params, wave_spec

    res = {"gpu": gpu_info(), "prefix": a.prefix, "reps": a.reps, "layouts": {}}
    for name, tp in LAYOUTS.items():
        m = dataclasses.replace(load_model(name, tp=tp), layers=2, name=f"{name}-2l")
        ex = make_executor(m, capture_bs=[1], max_context=a.prefix + 16384, kv_pool_gib=4)
        sms = int(res["gpu"]["multiprocessors"])
        spec = wave_spec(m, {"sms": sms})
        prm = wave_params(spec)
        rows = []
        for t in _tokens(prm, sms):
            med = []
            for pre in (0, a.prefix):
                times = [x.latency_s for x in ex.runner.prefill(np.array([t]), np.array([pre]),
                                                                reps=a.reps, warmup=1)]
                med.append(float(np.median(times)))
            rows.append({"tokens": t, "t0_s": med[0], "tp_s": med[1]})
            print(f"{name} {t} {med[0] * 1e3:.3f} {med[1] * 1e3:.3f} ms", flush=True)
        res["layouts"][name] = {"spec": spec, "points": rows}
        Path(a.json).write_text(json.dumps(res, indent=1))
        del ex


def compare(a) -> None:
    from backends.prefill_waves import _programs, wave_params

    data = json.loads(Path(a.compare).read_text())
    sms = int(data["gpu"]["multiprocessors"])
    print(f"GPU {data['gpu'].get('uuid', '?')[:8]}, prefix {data['prefix']}, {sms} SMs")
    for name, lay in data["layouts"].items():
        # working programs, as the lookup counts them: a JSON measured before the dense count
        # changed (2026-12-04) recorded AITER's grid, whose one more block per sequence is empty
        spec = {**lay["spec"], "add": lay["spec"]["block_q"] - 1, "extra": 0}
        prm = wave_params(spec)
        slots = lay["spec"]["slots"]
        pts = []
        for p in lay["points"]:
            n = _programs(float(p["tokens"]), prm)
            w = int(np.ceil(n / slots))
            last = n - (w - 1) * slots
            pts.append((p["tokens"], n, w, last, p["tp_s"] - p["t0_s"]))
        full = [(w, d) for _, _, w, last, d in pts if last > 0.9 * slots]
        if len({w for w, _ in full}) < 2:
            print(f"{name}: fewer than two full-wave counts; skipped")
            continue
        v, u = np.polyfit([w for w, _ in full], [d for _, d in full], 1)
        print(f"\n{name}: prefix share u + v x waves over {len(full)} full-wave points: "
              f"u {u * 1e3:.3f} ms, v {v * 1e3:.3f} ms per wave")
        print("tokens programs waves last_wave_programs  share_ms  g (last wave in full waves)")
        lone, shared = [], []
        for t, n, w, last, d in pts:
            g = (d - u) / v - (w - 1)
            (lone if last <= sms else shared).append(g)
            print(f"{t:6d} {n:8.0f} {w:5d} {last:10.0f}  {d * 1e3:9.3f}  {g:6.3f}")
        print(f"{name}: median g, last wave at most one program per SM: "
              f"{np.median(lone):.3f} ({len(lone)} points); more: {np.median(shared):.3f} "
              f"({len(shared)} points)")


def main() -> None:
    from bench_prefill_sweep import gpu_cpu_main

    def args(ap) -> None:
        ap.add_argument("--prefix", type=int, default=16384)
        ap.add_argument("--reps", type=int, default=5)

    gpu_cpu_main(__doc__, measure, compare, "prefill_wave_fill.json", args)


if __name__ == "__main__":
    main()
