"""``specsched tune-spec``: search speculation-controller settings for the best goodput.

Each candidate setting is one simulation of the trace (in a process pool); the score is goodput
(requests per second meeting the TTFT and TPOT thresholds).  Settings that run identically (a
schedule or an adaptive config that always picks one draft count, a threshold above every batch
the run reaches) are simulated once (:func:`canonical`).  The search, in stages:

1. static draft counts ``k = 0 .. max_k`` (``k = 0``: no speculation, the baseline).  Each run
   also reports, per batch-size range of ``RANGES``, its decode rounds' throughput and the time
   per committed token a request sees there (:func:`range_stats`);
2. ``schedule`` (vLLM): start from the per-range ``k`` with the lowest time per token among the
   static runs (ranges with under 1% of the rounds keep the best static ``k``), then hill-climb
   ``k +- 1`` range by range (at most ``CLIMB_ROUNDS`` rounds, while it improves);
3. ``threshold``: the best static ``k`` up to ``THRESHOLDS``, none above, skipping the ones above
   the largest batch the best static run reached (those are the best static run);
4. ``sglang-adaptive``: candidate step sets around the best static ``k`` (and, when the schedule
   varies by range, one per-range config around it) with up-hysteresis 0.25, then the best set
   with up-hysteresis 0 and 0.5.

Then the highest rate scale meeting the SLO (at least ``attainment`` of the requests within the
thresholds) for the winner and the best static setting, with :class:`analysis.search.ScaleSearch`
started at the rate the run's busy fraction suggests.  The winner comes back as ready-to-paste
engine settings (SGLang flags plus adaptive-config JSON; vLLM ``speculative_config``).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.runner import RunSpec, cached_executor, load_trace
from simulator.controller_config import (ControllerConfig, candidate_widths, parse_adaptive,
                                         parse_schedule, sglang_args, vllm_speculative_config)
from traces.errors import SpecschedError

__all__ = ["tune_spec", "RANGES", "score", "range_stats", "canonical", "per_range_best"]

#: batch-size ranges of the schedule search and the figure (inclusive)
RANGES = ((1, 8), (9, 32), (33, 4096))
THRESHOLDS = (8, 16, 32)
HYSTERESIS_UP = (0.25, 0.0, 0.5)   # the first is tried on every set, the others on the best
CLIMB_ROUNDS = 2
MIN_RANGE_SHARE = 0.01             # a range with fewer of the rounds keeps the best static k


def range_stats(steps) -> list[dict[str, Any]]:
    """Per range of ``RANGES``: the decode rounds whose verify batch falls in it, their time,
    committed tokens, throughput (tokens / s) and the time per committed token a request sees
    (sum of round time x batch size over tokens); None where no round fell in the range.
    A round's time is every pass of its iteration (draft, verify, draft-extend)."""
    rep = steps["replica"].to_numpy().astype(np.int64)
    it = steps["iteration"].to_numpy().astype(np.int64)
    lat = steps["latency_s"].to_numpy()
    ver = pc.equal(steps["kind"].cast(pa.string()), "verify").to_numpy(zero_copy_only=False)
    key = rep * (int(it.max()) + 1 if len(it) else 1) + it
    uniq, inv = np.unique(key, return_inverse=True)
    t = np.bincount(inv, weights=lat, minlength=len(uniq))
    bs = np.bincount(inv[ver], weights=steps["bs"].to_numpy()[ver], minlength=len(uniq))
    tok = np.bincount(inv[ver], weights=steps["committed_tokens"].to_numpy()[ver],
                      minlength=len(uniq))
    dec = bs > 0
    out = []
    for lo, hi in RANGES:
        m = dec & (bs >= lo) & (bs <= hi)
        n, time_s, tokens = int(m.sum()), float(t[m].sum()), float(tok[m].sum())
        out.append({"bs": [lo, hi], "rounds": n, "time_s": time_s, "tokens": tokens,
                    "throughput_tok_s": tokens / time_s if n else None,
                    "tpot_s": float((t[m] * bs[m]).sum()) / tokens if n and tokens else None})
    return out


def score(spec: RunSpec, ttft_s: float | None, tpot_s: float | None) -> dict[str, Any]:
    """Simulate one setting; goodput, throughput, TPOT quantiles and per-range figures."""
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
    s = res.summary
    bs = res.steps["bs"].to_numpy()
    return {"goodput_req_s": float(ok.sum() / dur) if dur > 0 else 0.0,
            "good_fraction": float(ok.mean()) if len(ok) else 0.0,
            "throughput_tok_s": s["throughput_tok_s"],
            "tpot_p50_s": float(np.quantile(tp, 0.5)) if len(tp) else None,
            "tpot_p99_s": float(np.quantile(tp, 0.99)) if len(tp) else None,
            "busy_fraction": s["busy_s"] / s["duration_s"] if s["duration_s"] > 0 else 0.0,
            "max_bs": int(bs.max()) if len(bs) else 0,
            "switches_per_s": ctl["switches_per_s"],
            "rounds_by_draft_tokens": ctl["rounds_by_draft_tokens"],
            "ranges": range_stats(res.steps)}


def _setting(name: str, k: int, **ctl) -> dict[str, Any]:
    return {"controller": name, "num_draft_tokens": k + 1, "settings": ctl}


def _config(base, s: dict):
    over = {"engine.controller": s["controller"], "engine.num_draft_tokens": s["num_draft_tokens"],
            "engine.policy": "fixed"}
    over.update({f"controller.{k}": v for k, v in s["settings"].items()})
    return base.replace(over)


def canonical(s: dict) -> str:
    """A key shared by settings that run identically: the draft count as a step function of the
    batch size plus the captured widths (static, schedule, threshold, and adaptive configs whose
    every range has one candidate); other adaptive configs are keyed by their settings."""
    name, ndt = s["controller"], s["num_draft_tokens"]
    cc = ControllerConfig(**s["settings"])
    if name == "static":
        fn = [(1, ndt - 1)]
    elif name == "schedule":
        fn = [(1, ndt - 1)] + [(lo, min(k, ndt - 1)) for lo, _hi, k in
                               parse_schedule(cc.schedule)]
    elif name == "threshold":
        fn = [(1, ndt - 1), (cc.max_bs + 1, 0)]
    elif name == "sglang-adaptive" and all(len(x["candidate_steps"]) == 1 for x in
                                           parse_adaptive(cc.adaptive_config)):
        slots = parse_adaptive(cc.adaptive_config)
        if slots[0]["lo"] != 1:
            return json.dumps(s, sort_keys=True)
        fn = [(x["lo"], x["candidate_steps"][0]) for x in slots]
        ndt = max(k for _, k in fn) + 1
    else:
        return json.dumps(s, sort_keys=True)
    steps: list[tuple[int, int]] = []
    for lo, k in sorted(dict(fn).items()):          # a later row at the same lo wins
        if not steps or steps[-1][1] != k:
            steps.append((lo, k))
    widths = candidate_widths(name, cc, s["num_draft_tokens"])
    return json.dumps({"k_by_bs": steps, "widths": widths, "max_width": max(widths, default=ndt)})


def _schedule_setting(ks: tuple[int, ...]) -> dict:
    text = json.dumps({f"{lo}-{hi}": k for (lo, hi), k in zip(RANGES, ks)})
    return _setting("schedule", max(ks), schedule=text)


def _adaptive_setting(slots: dict[int, list[int]], up: float) -> dict:
    cfg = {str(lo): {"candidate_steps": st, "up_hysteresis": up, "down_hysteresis": -0.25}
           for lo, st in slots.items()}
    return _setting("sglang-adaptive", max(max(st) for st in slots.values()),
                    adaptive_config=json.dumps(cfg))


def per_range_best(statics: dict[int, dict], kb: int) -> list[int | None]:
    """Per range, the static ``k`` with the lowest time per committed token; None where the best
    static run has under ``MIN_RANGE_SHARE`` of its rounds (the range hardly matters)."""
    ref = statics[kb]["ranges"]
    total = sum(x["rounds"] for x in ref) or 1
    out: list[int | None] = []
    for g in range(len(RANGES)):
        if ref[g]["rounds"] < MIN_RANGE_SHARE * total:
            out.append(None)
            continue
        cands = [(res["ranges"][g]["tpot_s"], k) for k, res in sorted(statics.items())
                 if res["ranges"][g]["tpot_s"] is not None]
        out.append(min(cands)[1])
    return out


def tune_spec(trace_path: str, base, *, ttft_s: float | None = None,
              tpot_s: float | None = None, max_k: int = 7, acceptance: str | None = None,
              backend=None, attainment: float = 0.9, max_rate: bool = True,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Search controller settings for the best goodput under the SLO (see the module text).
    ``base`` is the SimConfig every setting starts from; ``backend`` an ``analysis.parallel``
    backend (inline when None)."""
    from analysis.parallel import InlineBackend

    if ttft_s is None and tpot_s is None:
        raise SpecschedError("tune-spec needs an SLO: --slo ttft=...,tpot=... (seconds)")
    if not 1 <= max_k <= 15:
        raise SpecschedError(f"--max-k: must be in 1..15 (got {max_k})")
    if not 0 < attainment <= 1:
        raise SpecschedError(f"--attainment: must be in (0, 1] (got {attainment})")
    backend = backend or InlineBackend()
    results: dict[str, tuple[dict, dict]] = {}     # canonical key -> (setting, result)
    skipped: list[dict] = []

    def batch(settings: list[dict]) -> None:
        todo = []
        for s in settings:
            key = canonical(s)
            if key in results:
                if results[key][0] != s:
                    skipped.append({**s, "same_as": results[key][0]})
                continue
            todo.append((key, RunSpec(trace_path, _config(base, s), acceptance)))
            results[key] = (s, {})
        for key, res in backend.run(todo, fn=score, extra=(ttft_s, tpot_s)):
            if isinstance(res, Exception):
                raise res
            results[key] = (results[key][0], res)
            if progress:
                s = results[key][0]
                progress(f"{s['controller']} {s['settings']} k={s['num_draft_tokens'] - 1}: "
                         f"{res['goodput_req_s']:.3f} req/s")

    def rank(v: tuple[dict, dict]):
        # highest goodput; ties (every request within the SLO): lower median TPOT, then fewer
        # drafts, then the simpler controller (search order: max() keeps the first)
        return (round(v[1]["goodput_req_s"], 9), -(v[1]["tpot_p50_s"] or math.inf),
                -v[0]["num_draft_tokens"])

    def best_of(pred) -> tuple[dict, dict]:
        return max((v for v in results.values() if pred(v[0])), key=rank)

    def get(s: dict) -> tuple[dict, dict]:
        return results[canonical(s)]

    batch([_setting("static", k) for k in range(max_k + 1)])
    statics = {k: get(_setting("static", k))[1] for k in range(max_k + 1)}
    static_best, static_res = best_of(lambda s: s["controller"] == "static")
    kb = static_best["num_draft_tokens"] - 1
    no_spec = statics[0]
    per_range = per_range_best(statics, kb)
    sched = None
    if kb > 0:
        # 2. schedule: per-range start, then hill-climb k +- 1 where the range matters
        cur = tuple(kb if k is None else k for k in per_range)
        batch([_schedule_setting(cur)])
        for _ in range(CLIMB_ROUNDS):
            trial = [_schedule_setting(cur[:g] + (k,) + cur[g + 1:])
                     for g in range(len(RANGES)) if per_range[g] is not None
                     for k in (cur[g] - 1, cur[g] + 1) if 0 <= k <= max_k]
            batch(trial)
            nxt = max([get(_schedule_setting(cur))] + [get(s) for s in trial], key=rank)
            ks = json.loads(nxt[0]["settings"]["schedule"]).values() \
                if nxt[0]["controller"] == "schedule" else [nxt[0]["num_draft_tokens"] - 1] * 3
            ks = tuple(int(k) for k in ks)
            if ks == cur:
                break
            cur = ks
        sched = cur
        # 3. threshold (skipping those the best static run never exceeds)
        batch([_setting("threshold", kb, max_bs=t) for t in THRESHOLDS
               if t < static_res["max_bs"]])
        # 4. sglang-adaptive: sets at the first hysteresis, then the best set at the others
        sets = [{1: sorted({max(1, kb - 1), kb, min(max_k, kb + 2)})},
                {1: sorted({1, kb, max_k})}]
        if len(set(sched)) > 1:
            sets.append({lo: sorted({max(1, k - 1), max(k, 1), min(max_k, max(k, 1) + 1)})
                         for (lo, _), k in zip(RANGES, sched)})
        first = [_adaptive_setting(st, HYSTERESIS_UP[0]) for st in sets]
        batch(first)
        best_set = max(zip(sets, first), key=lambda v: rank(get(v[1])))[0]
        batch([_adaptive_setting(best_set, up) for up in HYSTERESIS_UP[1:]])
    best, best_res = best_of(lambda s: True)
    cc = ControllerConfig(**best["settings"])
    args, adaptive_json = sglang_args(best["controller"], cc, best["num_draft_tokens"])
    out = {
        "trace": trace_path,
        "slo": {"ttft_s": ttft_s, "tpot_s": tpot_s, "attainment": attainment},
        "rate_scale": base.rate_scale,
        "best": best,
        "best_goodput": best_res["goodput_req_s"],
        "best_result": best_res,
        "no_spec_goodput": no_spec["goodput_req_s"],
        "best_static": {"k": kb, "goodput": static_res["goodput_req_s"],
                        "result": static_res},
        "per_range_best_k": per_range,
        "sglang_args": args,
        "sglang_adaptive_config": adaptive_json,
        "vllm_speculative_config": vllm_speculative_config(best["controller"], cc,
                                                           best["num_draft_tokens"]),
        "simulations": len(results),
        "skipped_duplicates": len(skipped),
        "static_by_k": {str(k): statics[k] for k in sorted(statics)},
        "all": sorted(({**s, **r} for s, r in results.values()),
                      key=lambda x: -x["goodput_req_s"]),
    }
    if max_rate:
        from analysis.tune_rate import max_rates

        targets = {"best": best, "best_static": static_best}
        found = max_rates(trace_path, base, targets,
                          {"best": best_res, "best_static": static_res},
                          ttft_s=ttft_s, tpot_s=tpot_s, attainment=attainment,
                          acceptance=acceptance, backend=backend, config_of=_config,
                          same=canonical(best) == canonical(static_best))
        out["max_rate"] = found["best"]
        out["best_static"]["max_rate"] = found["best_static"]
        out["simulations"] += found["simulations"]
    return out
