"""``specsched tune-spec``: search speculation-controller settings for the best goodput.

Each candidate setting is one simulation of the trace (in a process pool); the score is goodput
(requests per second meeting the TTFT and TPOT thresholds).  The search, in stages:

1. static draft counts ``k = 0 .. max_k`` (``k = 0``: no speculation, the baseline);
2. ``threshold``: the best static ``k`` up to a batch size, none above, for a few batch sizes;
3. ``schedule`` (vLLM): batch-size ranges ``RANGES``, starting from the best static ``k`` in
   each, then, range by range, every other ``k`` (one pass of coordinate search);
4. ``sglang-adaptive``: candidate step sets around the best static ``k`` with up-hysteresis 0,
   0.25 and 0.5.

The winner comes back as ready-to-paste engine settings (SGLang flags plus adaptive-config
JSON; vLLM ``speculative_config``).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

import numpy as np

from analysis.runner import RunSpec, cached_executor, load_trace
from simulator.controller_config import (ControllerConfig, sglang_args,
                                         vllm_speculative_config)
from traces.errors import SpecschedError

__all__ = ["tune_spec", "RANGES", "score"]

#: batch-size ranges of the schedule search (inclusive)
RANGES = ((1, 8), (9, 32), (33, 4096))
THRESHOLDS = (8, 16, 32)
HYSTERESIS_UP = (0.0, 0.25, 0.5)


def score(spec: RunSpec, ttft_s: float | None, tpot_s: float | None) -> dict[str, Any]:
    """Simulate one setting; goodput, throughput and TPOT quantiles from its requests."""
    from specsched.setup import simulate_to

    trace = load_trace(spec.trace, spec.acceptance, spec.config.seed)
    res = simulate_to(trace, spec.config, None, executor=cached_executor(spec.config))
    r = res.requests
    arr = r["arrival_s"].to_numpy()
    first = r["first_token_s"].to_numpy()
    fin = r["finish_s"].to_numpy()
    out = r["output_tokens"].to_numpy()
    ttft = first - arr
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (fin - first) / np.maximum(out - 1, 1), np.nan)
    ok = np.isfinite(fin)
    if ttft_s is not None:
        ok &= ttft <= ttft_s
    if tpot_s is not None:
        ok &= np.isnan(tpot) | (tpot <= tpot_s)
    dur = float(np.nanmax(fin) - np.nanmin(arr)) if len(arr) else 0.0
    tp = tpot[np.isfinite(tpot)]
    ctl = res.summary["controller"]
    return {"goodput_req_s": float(ok.sum() / dur) if dur > 0 else 0.0,
            "good_fraction": float(ok.mean()),
            "throughput_tok_s": res.summary["throughput_tok_s"],
            "tpot_p50_s": float(np.quantile(tp, 0.5)) if len(tp) else None,
            "tpot_p99_s": float(np.quantile(tp, 0.99)) if len(tp) else None,
            "switches_per_s": ctl["switches_per_s"],
            "rounds_by_draft_tokens": ctl["rounds_by_draft_tokens"]}


def _setting(name: str, k: int, **ctl) -> dict[str, Any]:
    return {"controller": name, "num_draft_tokens": k + 1, "settings": ctl}


def _config(base, s: dict):
    over = {"engine.controller": s["controller"], "engine.num_draft_tokens": s["num_draft_tokens"],
            "engine.policy": "fixed"}
    over.update({f"controller.{k}": v for k, v in s["settings"].items()})
    return base.replace(over)


def _schedule_text(ks: tuple[int, ...]) -> str:
    return json.dumps({f"{lo}-{hi}": k for (lo, hi), k in zip(RANGES, ks)})


def _adaptive_text(steps: list[int], up: float) -> str:
    return json.dumps({"1": {"candidate_steps": steps, "up_hysteresis": up,
                             "down_hysteresis": -0.25}})


def tune_spec(trace_path: str, base, *, ttft_s: float | None = None,
              tpot_s: float | None = None, max_k: int = 7, acceptance: str | None = None,
              backend=None, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Search controller settings for the best goodput under the SLO (see the module text).
    ``base`` is the SimConfig every setting starts from; ``backend`` an ``analysis.parallel``
    backend (inline when None)."""
    from analysis.parallel import InlineBackend

    if ttft_s is None and tpot_s is None:
        raise SpecschedError("tune-spec needs an SLO: --slo ttft=...,tpot=... (seconds)")
    if not 1 <= max_k <= 15:
        raise SpecschedError(f"--max-k: must be in 1..15 (got {max_k})")
    backend = backend or InlineBackend()
    results: dict[str, tuple[dict, dict]] = {}

    def batch(settings: list[dict]) -> None:
        todo = []
        for s in settings:
            key = json.dumps(s, sort_keys=True)
            if key not in results:
                todo.append((key, RunSpec(trace_path, _config(base, s), acceptance)))
                results[key] = (s, {})
        for key, res in backend.run(todo, fn=score, extra=(ttft_s, tpot_s)):
            if isinstance(res, Exception):
                raise res
            results[key] = (results[key][0], res)
            if progress:
                progress(f"{results[key][0]['controller']} {results[key][0]['settings']} "
                         f"k={results[key][0]['num_draft_tokens'] - 1}: "
                         f"{res['goodput_req_s']:.3f} req/s")

    def best_of(pred) -> tuple[dict, dict]:
        cands = [v for v in results.values() if pred(v[0])]
        # highest goodput; ties (every request within the SLO): lower median TPOT, then fewer
        # drafts, then the simpler controller (search order)
        return max(cands, key=lambda v: (round(v[1]["goodput_req_s"], 9),
                                         -(v[1]["tpot_p50_s"] or math.inf),
                                         -v[0]["num_draft_tokens"]))

    batch([_setting("static", k) for k in range(max_k + 1)])
    static_best, static_res = best_of(lambda s: s["controller"] == "static")
    kb = static_best["num_draft_tokens"] - 1
    no_spec = results[json.dumps(_setting("static", 0), sort_keys=True)][1]
    if kb > 0:
        batch([_setting("threshold", kb, max_bs=t) for t in THRESHOLDS])
        ks = [kb] * len(RANGES)
        for g in range(len(RANGES)):
            trial = []
            for k in range(max_k + 1):
                cand = list(ks)
                cand[g] = k
                trial.append(_setting("schedule", max_k, schedule=_schedule_text(tuple(cand))))
            batch(trial)
            best_s, _ = best_of(lambda s: s["controller"] == "schedule")
            ks = [int(v) for v in json.loads(best_s["settings"]["schedule"]).values()]
        steps_sets = sorted({tuple(sorted({max(1, kb - 1), kb, min(max_k, kb + 2)})),
                             tuple(sorted({1, kb, max_k}))})
        batch([_setting("sglang-adaptive", max(st), adaptive_config=_adaptive_text(list(st), up))
               for st in steps_sets for up in HYSTERESIS_UP])
    best, best_res = best_of(lambda s: True)
    cc = ControllerConfig(**best["settings"])
    args, adaptive_json = sglang_args(best["controller"], cc, best["num_draft_tokens"])
    return {
        "trace": trace_path,
        "slo": {"ttft_s": ttft_s, "tpot_s": tpot_s},
        "rate_scale": base.rate_scale,
        "best": best,
        "best_goodput": best_res["goodput_req_s"],
        "best_result": best_res,
        "no_spec_goodput": no_spec["goodput_req_s"],
        "best_static": {"k": kb, "goodput": static_res["goodput_req_s"],
                        "result": static_res},
        "sglang_args": args,
        "sglang_adaptive_config": adaptive_json,
        "vllm_speculative_config": vllm_speculative_config(best["controller"], cc,
                                                           best["num_draft_tokens"]),
        "simulations": len(results),
        "all": sorted(({**s, **r} for s, r in results.values()),
                      key=lambda x: -x["goodput_req_s"] if not math.isnan(x["goodput_req_s"])
                      else 0.0),
    }
