"""Which graph captured last sets how fast DeepSeek-V2-Lite's graphs replay?  Probes after each.

DeepSeek-V2-Lite's long-context live runs met the profile at small batches until the run first
captured graphs of 22-26 requests, and ran every decode kind 3-4% slower from then to the end;
a sitting resumed in a fresh process, whose last captures were of 1-8 requests, met it again
(docs/aiter_mla.md, *Long context*). On the Llama-3.1-70B shard the graph captured last set
every replay's time (docs/aiter.md, Timing). This times a fixed set of probes (graph replays
of verify, draft and draft-extend at several batch sizes, KV ``--kv`` per request, through the
executor as a live run calls it, median of ``--n``)

* after SGLang's start-up captures (``capture_order``: verify graphs from the largest batch size
  down, then draft, then draft-extend; the draft-extend of one request captured last), the state
  a live run with ``backend.capture = all`` replays in;
* then after each capture in ``--then`` (``kind:bs``, e.g. ``extend:24``), in that order.

Each capture replaces the graph of that key, as a lazy live run's first use of it would make it.

Probes are ``kind:bs`` (``verify``, ``draft``, ``extend``) or ``prefill:TOKENS`` (one request, no
prefix, eager). ``--fresh`` first times the prefill probes before any graph is captured, the
state a profile sitting of prefills alone measured them in. ``--model`` and ``--tp`` choose the
shard (``--model llama-3.1-70b --tp 8``: the 70B shard, where the graph captured last was first
seen; docs/aiter.md, Timing).

    python3 benchmarks/bench_capture_state.py --json capture_state.json

GPU only; 31 s on 2026-12-03 after a live run in the same call had compiled the kernels (the
69 start-up captures took 7.5 s), about 2 minutes from a cold kernel cache. That run
(``benchmarks/results/h200-2026-12-03c/capture_state.json``): after capturing a verify or
draft-extend graph of 22, 24 or 40 requests every probe replays slower (verify by 0.24-0.37 ms,
draft by 2.8-5.0%); after one of 1, 8 or 16, or a draft of 24, as at start-up within 0.3% (the
draft of 24 within 1.1%).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

THEN = ("extend:24,extend:1,verify:24,extend:8,extend:16,extend:22,verify:1,draft:24,extend:40,"
        "extend:1")
PROBES = "verify:1,verify:4,verify:16,verify:24,verify:40,draft:1,draft:4,draft:24,extend:4,extend:24"


def batch(kind: str, bs: int, kv: int, width: int):
    """The probe's batch; for ``prefill`` ``bs`` is the tokens of one request with no prefix."""
    from backends.protocol import DraftBatch, DraftExtendBatch, PrefillBatch, VerifyBatch

    if kind == "prefill":
        return PrefillBatch(tokens=np.array([bs]), prefix=np.array([0]))
    kvs = np.full(bs, kv)
    if kind == "verify":
        return VerifyBatch(bs_real=bs, bs_padded=bs, widths=np.full(bs, width), kv_lens=kvs,
                           launch_width=width, mode="uniform", graph=True)
    if kind == "draft":
        return DraftBatch(bs_real=bs, bs_padded=bs, kv_lens=kvs, passes=width - 2, graph=True)
    return DraftExtendBatch(bs_real=bs, bs_padded=bs, width=width, kv_lens=kvs, graph=True)


def key(kind: str, bs: int, width: int) -> tuple:
    return ("draft", bs) if kind == "draft" else (kind, bs, width)


def call(ex, kind: str, b) -> float:
    r = {"verify": ex.verify, "draft": ex.draft, "extend": ex.draft_extend,
         "prefill": ex.prefill}[kind](b)
    return float(getattr(r, "latency_s", r))


def parse_probes(spec: str, kv: int, width: int) -> dict[str, tuple[str, object]]:
    """``kind:bs,...`` as ``{"kind:bs": (kind, batch)}`` (:func:`batch`), in that order."""
    out = {}
    for p in spec.split(","):
        kind, bs = p.split(":")
        out[p] = (kind, batch(kind, int(bs), kv, width))
    return out


def probe_round(ex, probes: dict[str, tuple[str, object]], n: int) -> dict[str, float]:
    """Median latency (ms) of ``n`` calls of each probe, the probes interleaved."""
    got: dict[str, list[float]] = {name: [] for name in probes}
    for _ in range(n):
        for name, (kind, b) in probes.items():
            got[name].append(call(ex, kind, b))
    return {k: float(np.median(v)) * 1e3 for k, v in got.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v2-lite")
    ap.add_argument("--tp", type=int, default=None, help="tensor-parallel degree (default: the preset's)")
    ap.add_argument("--kv", type=int, default=8192)
    ap.add_argument("--width", type=int, default=4, help="verify and draft-extend width")
    ap.add_argument("--n", type=int, default=12, help="calls of each probe per state")
    ap.add_argument("--probes", default=PROBES)
    ap.add_argument("--then", default=THEN, help="captures after the start-up ones, in order")
    ap.add_argument("--ladder", default="1,2,3,4,5,6,7,8,10,12,14,16,18,20,22,24,26,28,30,32,40,44,48",
                    help="the start-up captures' batch sizes (SGLang's ladder at 48 requests)")
    ap.add_argument("--fresh", action="store_true",
                    help="first time the eager probes (prefill) before any graph is captured")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    from backends.aiter import make_executor
    from backends.aiter.executor import capture_all, gpu_info
    from backends.models import load_model

    ladder = [int(x) for x in a.ladder.split(",")]
    probes = parse_probes(a.probes, a.kv, a.width)
    ex = make_executor(load_model(a.model, tp=a.tp), capture_bs=ladder, capture_widths=[a.width])
    runner = ex.runner
    states = []

    def measure(label: str, which: dict | None = None) -> None:
        ms = probe_round(ex, which or probes, a.n)
        states.append({"after": label, "ms": ms})
        print(f"{label:14s} " + " ".join(f"{k} {v:.4f}" for k, v in ms.items()), flush=True)

    if a.fresh:  # a new process before any capture, as a profile sitting of prefills alone was
        eager = {k: v for k, v in probes.items() if v[0] == "prefill"}
        if eager:
            measure("no capture", eager)
    t0 = time.time()
    capture_all(runner)
    print(f"start-up captures: {len(runner.graphs)} graphs in {time.time() - t0:.1f}s", flush=True)
    measure("start-up")
    for spec in a.then.split(","):
        kind, bs = spec.split(":")
        k = key(kind, int(bs), a.width)
        runner.graphs.pop(k, None)
        runner.capture(k)
        measure(f"{kind} {bs}")
    base = next(s["ms"] for s in states if s["after"] == "start-up")
    print("ratio to start-up:")
    for s in states:
        if s["after"] != "start-up":
            print(f"{s['after']:14s} " + " ".join(f"{k} {v / base[k]:.4f}" for k, v in s["ms"].items()),
                  flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"model": a.model, "tp": a.tp, "gpu": gpu_info(), "kv": a.kv,
                                            "width": a.width, "n": a.n, "ladder": ladder,
                                            "states": states}, indent=1))


if __name__ == "__main__":
    main()
