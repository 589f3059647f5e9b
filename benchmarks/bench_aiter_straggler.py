"""Batches with stragglers against uniform batches, on the GPU: the straggler-aware KV rule.

For each case (a captured verify graph of ``bs`` requests at width ``w``, or a draft graph;
``nlong`` requests at ``long`` tokens of KV, the rest at ``short``; ``real`` < ``bs`` leaves the
graph's last rows padded) the batch is timed as the profile times a point (graph replay queued
behind a hold kernel, median of ``--reps``), and so are uniform batches of the same launch at
several KV lengths.  The KV at which the uniform batch takes as long as the mixed one (``K_eq``,
linear between the measured uniform points) is compared with the mean KV and with
``backends.attention_kv.effective_kv`` (the engine's lookup rule, with this GPU's occupancy),
and each coordinate's latency (read off the same measured uniform curve) with the mixed batch's.
Everything is measured in one process on one GPU, so no profile and no other machine enters.
``--score JSON`` re-scores the rule against a recorded run on any machine. The rule scored here
is the waves and tail rule (``effective_kv``); on the 2D verify kernel the engine uses the
lone-straggler form instead, which ``benchmarks/straggler_2d_tail.py`` scores on the same files.
An MLA model's cases run the MLA decode kernel, whose occupancy ``attention_occupancy`` measures
as ``kernel: mla_decode``.

    python benchmarks/bench_aiter_straggler.py --model llama-3.1-8b --json straggler.json
    python benchmarks/bench_aiter_straggler.py --model llama-3.1-70b --tp 8 --eager --cases ...
    python benchmarks/bench_aiter_straggler.py --model deepseek-v2-lite --cases ...  # MLA decode
    python benchmarks/bench_aiter_straggler.py --score benchmarks/results/h200-2026-11-29d/straggler_holdout.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: kind:bs[/real]:width:short:long:nlong[:first|:last] (where the stragglers sit among the real
#: requests; first unless told: a launch dispatches its rows in order, so on a multi-wave launch
#: the rows placed last make the tail wave)
DEFAULT_CASES = (
    # one straggler, width 6, across the wave counts (1 wave up to bs 4, 2 for 5-8, ...)
    "verify:2:6:1500:6000:1", "verify:4:6:1500:6000:1", "verify:5:6:1500:6000:1",
    "verify:6:6:1500:6000:1", "verify:8:6:1500:6000:1", "verify:10:6:1500:6000:1",
    "verify:12:6:1500:6000:1", "verify:16:6:1500:6000:1", "verify:24:6:1500:6000:1",
    "verify:32:6:1500:6000:1", "verify:64:6:1500:6000:1",
    # other widths, a longer straggler, several stragglers, graph padding
    "verify:4:4:1000:8000:1", "verify:8:4:1000:8000:1", "verify:16:4:1000:8000:1",
    "verify:32:2:1000:8000:1", "verify:8:6:500:16000:1", "verify:8:6:1500:6000:2",
    "verify:8:6:1500:6000:4", "verify:16:6:1000:4000:4", "verify:8/6:6:1500:6000:1",
    "verify:16/12:4:1000:8000:1",
    # draft steps (one query row per request): the 2D decode kernel from 53 requests up
    "draft:8:1:1600:7450:1", "draft:48:1:1600:7450:1", "draft:56:1:1600:7450:1",
    "draft:128:1:1600:7450:1",
)


def parse_case(spec: str) -> dict:
    parts = spec.split(":")
    order = parts.pop() if len(parts) == 7 else "first"
    if len(parts) != 6 or order not in ("first", "last"):
        raise SystemExit(f"error: case {spec!r}: expected kind:bs[/real]:width:short:long:nlong"
                         "[:first|:last]")
    kind, bs, w, short, long_, nlong = parts
    bs_pad, _, real = bs.partition("/")
    return {"spec": spec, "kind": kind, "bs": int(bs_pad), "real": int(real or bs_pad),
            "width": int(w), "short": int(short), "long": int(long_), "nlong": int(nlong),
            "order": order}


def case_kv(c: dict) -> np.ndarray:
    """The real requests' KV lengths of a case, in launch order: the stragglers first, or last
    for ``order: last`` (graph padding rows follow them)."""
    longs, shorts = [c["long"]] * c["nlong"], [c["short"]] * (c["real"] - c["nlong"])
    kv = shorts + longs if c.get("order", "first") == "last" else longs + shorts
    return np.array(kv, dtype=np.int64)


def lookups(c: dict, att: np.ndarray) -> tuple[float, float]:
    """(mean KV, the lookup rule's KV) of a case, as the engine would look it up."""
    from backends.attention_kv import effective_kv

    kv = case_kv(c)
    nseq = float(c["bs"])
    rows = nseq * (1 if c["kind"] == "draft" else c["width"])
    rule = effective_kv(float(kv.sum()), float(kv.max()), nseq, float(c["real"]), rows,
                        c["kind"] == "draft", att)
    return float(kv.sum()) / nseq, float(rule)


def score(c: dict, mixed: float, ks: list[int], uni: np.ndarray, att: np.ndarray) -> dict:
    """A case's row: ``K_eq`` and each coordinate's latency error on the measured uniform curve."""
    mean, rule = lookups(c, att)
    uni = np.maximum.accumulate(np.asarray(uni))  # the uniform curve is monotone in KV; noise is not

    def at(k: float) -> float:
        return float(np.interp(k, ks, uni))

    keq = float(np.interp(mixed, uni, ks)) if uni[-1] > uni[0] else mean
    row = {**c, "mixed_s": mixed, "k_eq": keq, "mean_kv": mean, "rule_kv": rule,
           "mean_err_pct": (at(mean) / mixed - 1) * 100, "rule_err_pct": (at(rule) / mixed - 1) * 100,
           "uniform": {str(k): float(u) for k, u in zip(ks, uni)},
           "beyond_longest": bool(mixed > uni[-1])}
    print(f"{c['spec']:<26} | {mixed * 1e3:8.3f} | {keq:6.0f}{'+' if row['beyond_longest'] else ' '}"
          f"| {mean:6.0f} {row['mean_err_pct']:+5.1f}% | {rule:6.0f} {row['rule_err_pct']:+5.1f}% | "
          + " ".join(f"{k}:{u * 1e3:.3f}" for k, u in zip(ks, uni)))
    return row


HEADER = (f"{'case':<26} | {'mixed ms':>8} | {'K_eq':>6} | {'mean':>6} {'err':>6} | "
          f"{'rule':>6} {'err':>6} | uniform points (KV:ms)")


def summarize(results: list[dict], att: np.ndarray, occ: dict) -> dict:
    from backends.attention_kv import ATT_G2D, ATT_G2DD, ATT_G3D, ATT_S3D, ATT_SMS

    me = np.array([r["mean_err_pct"] for r in results])
    re_ = np.array([r["rule_err_pct"] for r in results])
    summary = {"cases": len(results), "mean_lookup_mape_pct": float(np.mean(np.abs(me))),
               "rule_mape_pct": float(np.mean(np.abs(re_))),
               "mean_lookup_worst_pct": float(me[np.argmax(np.abs(me))]),
               "rule_worst_pct": float(re_[np.argmax(np.abs(re_))]),
               "rule_within_3pct": int(np.sum(np.abs(re_) <= 3.0)),
               "tail_exponent": {"2d": float(att[ATT_G2D]), "2d_decode": float(att[ATT_G2DD]),
                                 "3d": float(att[ATT_G3D])},
               # the 3D kernel's programs per wave the rule took (WAVE_FILL_3D of the occupancy)
               "wave_programs_3d": float(att[ATT_S3D]) if att[ATT_SMS] else None,
               "occupancy": occ}
    print(f"latency error over {len(results)} cases (MAPE / worst): mean KV "
          f"{summary['mean_lookup_mape_pct']:.2f}% / {summary['mean_lookup_worst_pct']:+.1f}%; "
          f"straggler rule {summary['rule_mape_pct']:.2f}% / {summary['rule_worst_pct']:+.1f}%, "
          f"{summary['rule_within_3pct']} within 3%  (K_eq marked + lies beyond the longest "
          f"request's uniform batch)")
    return summary


def rescore(path: str) -> tuple[list[dict], np.ndarray, dict]:
    """Score the committed lookup rule against a recorded run's measurements (no GPU)."""
    from backends.attention_kv import attention_params

    d = json.loads(Path(path).read_text())
    occ = d["summary"]["occupancy"]
    att = attention_params(occ)
    print(HEADER)
    keys = ("spec", "kind", "bs", "real", "width", "short", "long", "nlong")
    results = []
    for r in d["cases"]:
        ks = [int(k) for k in r["uniform"]]
        results.append(score({k: r[k] for k in keys}, r["mixed_s"], ks,
                             np.array(list(r["uniform"].values())), att))
    return results, att, occ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--tp", type=int, default=None, help="tensor-parallel degree (one shard run)")
    ap.add_argument("--eager", action="store_true",
                    help="time eager launches instead of graph replays (verify cases only)")
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES),
                    help="kind:bs[/real]:width:short:long:nlong,... (kind verify or draft)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--json", default=None)
    ap.add_argument("--score", default=None, metavar="JSON",
                    help="no GPU: score the committed lookup rule against a recorded run's JSON")
    args = ap.parse_args()

    if args.score:
        results, att, occ = rescore(args.score)
    else:
        results, att, occ = measure(args)
    summary = summarize(results, att, occ)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "cases": results}, indent=1))


def measure(args) -> tuple[list[dict], np.ndarray, dict]:
    from backends.aiter import make_executor
    from backends.aiter.occupancy import attention_occupancy
    from backends.attention_kv import attention_params

    cases = [parse_case(c) for c in args.cases.split(",")]
    from backends.models import load_model

    if args.eager and any(c["kind"] != "verify" for c in cases):
        raise SystemExit("error: --eager times verify cases only")
    ex = make_executor(load_model(args.model, tp=args.tp),
                       capture_bs=sorted({c["bs"] for c in cases}))
    runner = ex.runner
    occ = attention_occupancy(runner)
    att = attention_params(occ)
    print(f"attention occupancy: {occ['slots_per_sm']} per SM, {occ['sms']} SMs")

    def timed(c: dict, kv: np.ndarray) -> float:
        if c["kind"] == "draft":
            launch, key = runner.draft_launch(kv, c["bs"])
        else:
            launch, key = runner.verify_launch(np.full(len(kv), c["width"]), kv, mode="uniform",
                                               padded_bs=c["bs"], launch_width=c["width"])
        ts = runner.run(key, launch, graph=not args.eager, reps=args.reps, warmup=2)
        comm[c["spec"]] = float(ts[0].comm_s)  # modelled tp all-reduce: the same for the case
        return float(np.median([t.gpu_s for t in ts]))

    results, comm = [], {}
    print(HEADER)
    for c in cases:
        mean, rule = lookups(c, att)
        mixed = timed(c, case_kv(c))
        ks = sorted({int(round(x)) for x in (c["short"] * c["real"] / c["bs"], mean, rule,
                                               (mean + c["long"]) / 2, c["long"])})
        uni = np.array([timed(c, np.full(c["bs"], k, dtype=np.int64)) for k in ks])
        results.append({**score(c, mixed, ks, uni, att), "comm_s": comm[c["spec"]],
                        "graph": not args.eager})
    return results, att, occ


if __name__ == "__main__":
    main()
