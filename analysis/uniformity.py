"""``specsched uniformity``: how often verify batches mix widths, and what each remedy costs.

The same trace and configuration are simulated once per verify policy (``pad``, ``split``,
``bucket``, ``truncate``, ``fixed``, ``ragged``, ``unsafe-derived``) and compared:

- **Mixing**, from the ``ragged`` run (the what-if that alters nothing): the fraction of decode
  iterations whose running set proposed more than one width (``iter_distinct_widths`` > 1, one
  value per iteration, from steps.parquet's verify rows) and the distribution of distinct widths
  per iteration.  Every policy's own figure is in its row too (schedules differ slightly).
- **Cost of each policy**, against ``ragged``: padded slots (width padding and graph batch-size
  padding), extra verify launches per iteration, accepted draft tokens lost (``accepted_tokens``
  summed over requests, ragged minus the policy: truncation loses them, widening with real
  drafts can gain some), and the change in throughput, TTFT and TPOT.
- **What unsafe-derived misattributes**: the query rows its ``T // bs`` metadata hands to the
  wrong request (steps.parquet ``violations``), as a fraction of all verified rows, and how many
  verify launches had any.
- With ``gpu_batches`` > 0 (``--backend aiter``): mixed launches of the unsafe-derived run are
  rebuilt from their recorded shape and run on the GPU by
  ``backends.aiter.uniformity.uniformity_check``, which measures the output error the wrong
  metadata causes against the exact metadata.
- **MLA models** (DeepSeek-style): SGLang's MLA path fixes the verify width at start-up to one
  the kernels take, so ``fixed`` runs once per supported width (``fixed@1``, ``fixed@2``,
  ``fixed@3`` -- padded to 4 and timed as 4 -- and ``fixed@4``); the other policies launch
  widths the MLA kernels lack and are reported as what-ifs (``report["mla"]``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from analysis.runner import RunSpec, file_digest, load_trace, simulate_summary
from simulator.registry import VERIFY_POLICIES
from traces.errors import SpecschedError

__all__ = ["POLICIES", "REFERENCE", "uniformity", "rebuild_batch", "pick_launches"]

#: every registered verify policy (simulator.registry), in registry order
POLICIES = VERIFY_POLICIES.names()
REFERENCE = "ragged"


def _rel(a, b):
    if a is None or b is None or not b:
        return None
    return a / b - 1.0


def _row(policy: str, s: dict, ref: dict | None) -> dict[str, Any]:
    v, it = s["verify"], s["iterations"]
    row = {
        "policy": policy,
        "verify_launches": v["launches"],
        "iterations": it["iterations"],
        "verify_launches_per_iter": it["verify_launches_per_iter"],
        "extra_launches": (v["launches"] - it["iterations"]) if it["iterations"] else 0,
        "extra_launches_per_iter": (None if it["verify_launches_per_iter"] is None
                                    else it["verify_launches_per_iter"] - 1.0),
        "mixed_iter_frac": it["mixed_iter_frac"],
        "slots": v["slots"],
        "padded_slots": v["padded_slots"],
        "graph_pad_slots": v["graph_pad_slots"],
        "padding_waste": v["padding_waste"],
        "verify_efficiency": v["verify_efficiency"],
        "accept_len_mean": v["accept_len_mean"],
        "accepted_tokens": s["accepted_tokens"],
        "truncated_drafts": s["truncated_drafts"],
        "throughput_tok_s": s["throughput_tok_s"],
        "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"],
        "tpot_p50_s": s["tpot_s"]["p50"], "tpot_p99_s": s["tpot_s"]["p99"],
        "itl_p99_s": (s.get("itl_s") or {}).get("p99"),
        "violations": v["violations"],
        "retractions": s["retractions"],
    }
    if ref is not None:
        row["lost_accepted_tokens"] = ref["accepted_tokens"] - s["accepted_tokens"]
        row["throughput_change"] = _rel(s["throughput_tok_s"], ref["throughput_tok_s"])
        for k in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99"):
            key = k.split("_")
            row[f"{k}_change"] = _rel(s[f"{key[0]}_s"][key[1]], ref[f"{key[0]}_s"][key[1]])
    return row


def rebuild_batch(bs: int, min_w: int, max_w: int, distinct: int, tokens: int, kv_mean: float,
                  kv_max: int) -> tuple[list[int], list[int]]:
    """Widths and KV lengths of a verify launch rebuilt from the shape steps.parquet records.

    Widths: ``distinct`` values from ``min_w`` to ``max_w`` (evenly spaced), one request each,
    the other requests at values of that set chosen so the total comes as close to ``tokens``
    as the set allows.  KV lengths: one request at ``kv_max``, the others equal so the mean is
    ``kv_mean``.
    """
    bs, distinct = int(bs), max(1, min(int(distinct), int(bs)))
    if distinct == 1 or min_w == max_w:
        vals = [int(min_w)]
    else:
        vals = sorted({int(round(x)) for x in np.linspace(min_w, max_w, distinct)})
    widths = list(vals)
    rest = bs - len(widths)
    total = sum(widths) + rest * vals[0]
    extra = [vals[0]] * rest
    for i in range(rest):  # raise the extras greedily towards the recorded total
        for v in reversed(vals):
            if total - extra[i] + v <= tokens:
                total += v - extra[i]
                extra[i] = v
                break
    widths = sorted(widths + extra)
    kv_max = max(1, int(kv_max))
    if bs == 1:
        kvs = [kv_max]
    else:
        other = max(1, int(round((kv_mean * bs - kv_max) / (bs - 1))))
        kvs = [min(other, kv_max)] * (bs - 1) + [kv_max]
    return widths, kvs


def pick_launches(steps, n: int) -> list[int]:
    """Row indices of up to ``n`` violating verify launches: the worst, then evenly spaced."""
    from analysis.metrics import col, kind_mask

    v = kind_mask(steps, "verify")
    viol = col(steps, "violations", np.int64, 0)
    rows = np.flatnonzero(v & (viol > 0))
    if len(rows) == 0 or n <= 0:
        return []
    picked = [int(rows[np.argmax(viol[rows])])]
    for q in np.linspace(0, len(rows) - 1, n):
        r = int(rows[int(round(q))])
        if r not in picked and len(picked) < n:
            picked.append(r)
    return sorted(picked)


def _gpu_check(files: dict[str, bytes], model: str, n: int, page_size: int) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from analysis.metrics import col

    from backends.aiter.uniformity import uniformity_check

    steps = pq.read_table(pa.BufferReader(files["steps.parquet"]))
    idx = pick_launches(steps, n)
    batches = []
    for r in idx:
        g = lambda name, dt=np.int64: col(steps, name, dt, 0)[r]  # noqa: E731
        widths, kvs = rebuild_batch(g("bs"), g("min_width"), g("max_width"),
                                    g("distinct_widths"), g("tokens"),
                                    float(g("kv_mean", np.float64)), g("kv_max"))
        res = uniformity_check(model, widths=widths, kv_lens=kvs, page_size=page_size)
        res["step_row"] = int(r)
        res["recorded_violations"] = int(g("violations"))
        batches.append(res)
    errs = [b["max_abs_error"] for b in batches]
    return {
        "batches_checked": len(batches),
        "max_abs_error": max(errs) if errs else None,
        "median_max_abs_error": float(np.median(errs)) if errs else None,
        "misattributed_frac_mean": (float(np.mean([b["misattributed_frac"] for b in batches]))
                                    if batches else None),
        "rows_with_error_over_1e-2": int(sum(b["rows_with_error_over_1e-2"] for b in batches)),
        "batches": batches,
        "note": "batches rebuilt from each launch's recorded shape (bs, min/max width, distinct "
                "widths, rows, KV mean/max); see docs/analysis.md",
    }


def _labelled_configs(config, policies) -> tuple[list[tuple[str, Any]], dict | None]:
    """(label, config) per run: each policy once, and for an MLA model ``fixed`` once per width
    the MLA kernels take; the MLA note for the report (None for other models)."""
    from backends.models import load_model
    from simulator.config import MLA_WIDTHS

    model = load_model(config.model.name, tp=config.model.tp or None)
    runs = []
    for p in policies:
        if p == "fixed" and model.is_mla:
            for w in MLA_WIDTHS:
                runs.append((f"fixed@{w}", config.replace({
                    "engine.policy": "fixed", "engine.num_draft_tokens": w,
                    "engine.mla": True})))
            continue
        try:
            runs.append((p, config.replace({"engine.policy": p})))
        except SpecschedError as exc:
            raise SpecschedError(f"policy {p}: {exc}") from None
    if not model.is_mla:
        return runs, None
    return runs, {
        "fixed_widths": list(MLA_WIDTHS),
        "what_if_policies": [p for p in policies if p != "fixed"],
        "note": ("SGLang's MLA attention path fixes the verify width at start-up to one its "
                 "kernels take (1, 2 or 4 query rows per request; 3 runs padded to 4): only "
                 "fixed@w is something SGLang can run; the other policies launch widths the MLA "
                 "kernels lack and are what-ifs"),
    }


def uniformity(trace: str, *, config=None, acceptance: str | None = None,
               policies: tuple[str, ...] = POLICIES, jobs: int | None = None,
               ray: str | None = None, keep_files: bool = False, gpu_batches: int = 0,
               progress: Callable[[str], None] | None = None, backend=None) -> dict[str, Any]:
    """Run the trace under every policy and compare (see the module docstring).

    ``config``'s own ``engine.policy`` is replaced per run.  ``gpu_batches`` > 0 runs the GPU
    check (needs a CUDA/ROCm GPU; raises SpecschedError at once without one).  With
    ``keep_files`` the result has ``files[policy]`` = each run's results folder as bytes.
    """
    from analysis.parallel import make_backend
    from simulator.config import SimConfig

    config = config or SimConfig.load(None, {})
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        raise SpecschedError(f"--policies: unknown policy '{bad[0]}' (choose from "
                             f"{', '.join(POLICIES)})")
    if not policies:
        raise SpecschedError("--policies: give at least one policy")
    if gpu_batches > 0:
        from backends.aiter import bridge

        if bridge.runtime() == "none":
            bridge.require_gpu()
        if "unsafe-derived" not in policies:
            raise SpecschedError("the GPU check measures the unsafe-derived policy: keep it in "
                                 "--policies")
    order = list(dict.fromkeys(list(policies) + ([REFERENCE] if REFERENCE not in policies else [])))
    arrays = load_trace(trace, acceptance, config.seed)
    digest = file_digest(trace)
    runs, mla = _labelled_configs(config, order)
    jobs_list = [(label, RunSpec(trace, cfg, acceptance, digest)) for label, cfg in runs]
    shown = [label for label, _ in runs
             if label in policies or (label.startswith("fixed@") and "fixed" in policies)]
    order = [label for label, _ in runs]
    need_files = {p for p in order if keep_files or (gpu_batches > 0 and p == "unsafe-derived")}
    results: dict[str, dict] = {}
    owned = backend is None
    if backend is None and not ray and config.backend.name == "aiter":
        jobs = 1  # the live GPU executor: one simulation at a time, timings undisturbed
    backend = backend or make_backend(jobs=jobs, ray=ray)
    try:
        # two calls so each job knows whether to bring its files back
        for keep in (True, False):
            batch = [(p, s) for p, s in jobs_list if (p in need_files) == keep]
            if not batch:
                continue
            for p, res in backend.run(batch, fn=simulate_summary, extra=(keep,)):
                if isinstance(res, BaseException):
                    if isinstance(res, SpecschedError):
                        raise SpecschedError(f"policy {p}: {res}") from None
                    raise res
                results[p] = res
                if progress:
                    progress(f"{p}: done")
    finally:
        if owned:
            backend.close()
    ref = results[REFERENCE]["summary"]
    rows = [_row(p, results[p]["summary"], ref) for p in order if p in shown]
    mix = ref["iterations"]
    dist = {int(k): int(v) for k, v in mix["iter_distinct_widths"].items()}
    total = sum(dist.values()) or 1
    report: dict[str, Any] = {
        "trace": trace,
        "requests": int(len(arrays.arrival_s)),
        "acceptance": (arrays.acceptance or {}).get("kind"),
        "backend": results[REFERENCE]["engine"].get("backend"),
        "model": results[REFERENCE]["engine"].get("model"),
        "reference_policy": REFERENCE,
        "mixing": {
            "iterations": mix["iterations"],
            "mixed_iter_frac": mix["mixed_iter_frac"],
            "distinct_widths_per_iter": {str(k): dist[k] for k in sorted(dist)},
            "distinct_widths_per_iter_frac": {str(k): dist[k] / total for k in sorted(dist)},
            "mean_distinct_widths": float(sum(k * c for k, c in dist.items()) / total),
        },
        "policies": rows,
        "unsafe_derived": None,
        "gpu_check": None,
        "mla": mla,
    }
    if "unsafe-derived" in results:
        s = results["unsafe-derived"]["summary"]["verify"]
        report["unsafe_derived"] = {
            "misattributed_rows": s["violations"],
            "verified_rows": s["real_rows"],
            "misattributed_row_frac": s["violation_row_frac"],
            "violating_launches": s["violating_launches"],
            "verify_launches": s["launches"],
            "violating_launch_frac": (s["violating_launches"] / s["launches"]
                                      if s["launches"] else 0.0),
        }
        if gpu_batches > 0:
            cfg = dict(jobs_list)["unsafe-derived"].config
            report["gpu_check"] = _gpu_check(results["unsafe-derived"]["files"], cfg.model.name,
                                             gpu_batches, cfg.engine.page_size)
    if keep_files:
        report["files"] = {p: results[p]["files"] for p in order}
    return _finite(report)


def _finite(x):
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
