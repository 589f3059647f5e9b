"""One prefill shape timed as a profile times it and as a live run does, on one GPU.

A profile times a prefill point as ``runner.prefill(..., reps=5, warmup=1)`` back to back and
keeps the median; a live run times each prefill once through ``AiterExecutor.prefill``, between
decode passes and host work. DeepSeek-V2-Lite's long-context live runs took 410-413 ms for an
8,192-token prefill at prefix 0 on two GPUs and 385 ms on a third, against 377 ms in the
profile; this separates the protocol from the machine. For each shape it prints the median and
spread (ms) of

* ``profile``: the profile's protocol (``runner.prefill``, 1 warm-up, 5 reps);
* ``live``: the executor's call, 5 in a row;
* ``live+decode``: the executor's call with a decode verify (4 requests, width 4, KV 8,192)
  replayed between prefills, as in a live run;
* ``live+idle``: the executor's call after 50 ms of host time with the GPU idle.

    python3 benchmarks/bench_prefill_protocols.py --model deepseek-v2-lite --shapes 8192@0,8192@8192
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v2-lite")
    ap.add_argument("--shapes", default="8192@0,8192@8192", help="TOKENS@PREFIX,...")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    from backends.aiter import make_executor
    from backends.aiter.executor import gpu_info
    from backends.models import load_model
    from backends.protocol import PrefillBatch, VerifyBatch

    ex = make_executor(load_model(a.model), capture_bs=[4])
    runner = ex.runner
    decode = VerifyBatch(bs_real=4, bs_padded=4, widths=np.full(4, 4),
                         kv_lens=np.full(4, 8192), launch_width=4, mode="uniform", graph=True)
    ex.verify(decode)  # capture the decode graph before anything is timed
    out = {"model": a.model, "gpu": gpu_info(), "shapes": {}}
    for spec in a.shapes.split(","):
        tok, pre = (int(x) for x in spec.split("@"))
        tokens, prefix = np.array([tok]), np.array([pre])
        batch = PrefillBatch(tokens=tokens, prefix=prefix)
        ex.prefill(batch)  # the first call of a length warms up untimed
        res: dict[str, list[float]] = {}
        res["profile"] = [t.latency_s for t in runner.prefill(tokens, prefix, reps=a.n, warmup=1)]
        res["live"] = [ex.prefill(batch) for _ in range(a.n)]
        res["live+decode"] = []
        for _ in range(a.n):
            ex.verify(decode)
            res["live+decode"].append(ex.prefill(batch))
        res["live+idle"] = []
        for _ in range(a.n):
            time.sleep(0.05)
            res["live+idle"].append(ex.prefill(batch))
        res["profile_again"] = [t.latency_s for t in runner.prefill(tokens, prefix, reps=a.n,
                                                                       warmup=1)]
        row = {k: {"median_ms": float(np.median(v)) * 1e3, "min_ms": float(np.min(v)) * 1e3,
                   "max_ms": float(np.max(v)) * 1e3} for k, v in res.items()}
        out["shapes"][spec] = row
        print(spec, " ".join(f"{k} {r['median_ms']:.1f} ({r['min_ms']:.1f}-{r['max_ms']:.1f})"
                             for k, r in row.items()), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
