"""Fidelity: how well the profile backend reproduces live GPU replay.

``specsched fidelity --trace T --model M`` runs the same trace twice: with a *reference* executor
(the live ``aiter`` one on a GPU by default) and with the ``profile`` executor, and compares:

1. **Per step, paired by shape.**  The two runs drift apart in time (other latencies give other
   batch compositions), so steps are not paired by index.  Every forward pass of the reference
   run's ``steps.parquet`` is predicted with the profile table at *its* shape -- the same lookup
   the engine does (kind; padded batch size for graph replays; launch width, or tokens / batch for
   ragged launches; KV sum / looked-up batch; graph or eager; draft passes) -- and the relative
   error ``predicted / measured - 1`` is summarised: MAPE by kind and by shape bucket, over the
   steps whose lookup point is *not* a measured point of the profile (on measured points the
   profile is a replay of its own measurement), with the worst cases.
2. **Whole runs.**  TTFT, TPOT and E2E p50/p90/p99 of both runs side by side.
3. **What the profile model does not capture**, both in general and as found in this profile
   (holes filled, derived eager points, extrapolated lookups).

Targets (from the profile-backend issue): per-step MAPE <= 3% off the grid; TTFT and TPOT p50
and p99 within 3% of the reference run.  ``fidelity.json`` records each check.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from backends.latency_table import ATT_ON, attention_params, attention_rows, effective_kv
from traces.errors import SpecschedError

__all__ = ["predict_steps", "step_errors", "compare_runs", "run_fidelity", "fidelity",
           "TARGETS", "NOT_CAPTURED"]

TARGETS = {"step_mape_off_grid_pct": 3.0, "ttft_tpot_p50_p99_pct": 3.0}

NOT_CAPTURED = (
    "run-to-run GPU variation: the profile holds one median per shape, a live pass varies "
    "(the profile's p10..p90 spread is reported below)",
    "per-request KV-length spread inside a batch: the profile measures uniform batches; a batch "
    "is looked up at its straggler-aware KV (the attention kernel's programs in waves over the "
    "resident slots the profile measured, the longest request's tail faster alone; one "
    "straggler assumed, from kv_mean and kv_max), which leaves out where the GPU places each "
    "program and how the other requests' lengths spread",
    "ragged launches are interpolated between uniform widths (tokens / batch)",
    "prefill passes are looked up by total tokens and the attention-equivalent prefix (the same "
    "query-key pairs as one request); a profile measures one request per pass, so how several "
    "requests' GEMM and attention kernels differ from one request's is not captured",
    "the host's time to launch eager passes (prefill, widths or batches beyond the captured "
    "ones): the live executor and the profile both time the kernels queued, i.e. the GPU's time "
    "alone; an engine's own launch cost belongs in engine.scheduler_overhead_s",
    "host-side time between passes (scheduling, sampling, metadata building) beyond the engine's "
    "configured scheduler overhead",
    "clock and thermal state of the GPU while the profile was recorded versus now",
    "shapes outside the measured grid are extrapolated linearly",
)

_BS_EDGES = (0, 8, 32, 64, 128, 256, 10**9)
_KV_EDGES = (0, 1024, 4096, 16384, 65536, 10**12)
_TOKEN_EDGES = (0, 256, 1024, 4096, 16384, 10**9)  # prefill tokens


def _col(t: pa.Table, name: str) -> np.ndarray:
    c = t.column(name)
    if pa.types.is_dictionary(c.type):
        c = c.cast(pa.string())
    return np.asarray(c.to_pylist() if pa.types.is_string(c.type) else c.to_numpy(zero_copy_only=False))


def _lookup_points(steps: pa.Table, attention: dict | None = None) -> dict[str, np.ndarray]:
    """The table coordinates of every step: the engine's lookup rule (latency_table module).

    With the table's ``attention`` metadata the KV coordinate of draft and verify steps is
    recomputed as the engine would look them up (``backends.latency_table.effective_kv``), so a
    live run (recorded without a table, at mean KV) is predicted at the coordinate a profile run
    uses."""
    kind = _col(steps, "kind")
    graph = _col(steps, "graph").astype(bool)
    bs = _col(steps, "bs").astype(np.float64)
    bs_pad = _col(steps, "bs_padded").astype(np.float64)
    width = _col(steps, "width").astype(np.float64)
    tokens = _col(steps, "tokens").astype(np.float64)
    kv_mean = _col(steps, "kv_mean").astype(np.float64)
    mode = (_col(steps, "mode") if "mode" in steps.column_names
            else np.full(len(kind), "uniform", dtype=object))
    bs_ax = np.where(graph, bs_pad, bs)
    with np.errstate(invalid="ignore", divide="ignore"):
        at_mean = np.where(kind == "prefill", kv_mean, kv_mean * bs / np.maximum(bs_ax, 1))
        if "lookup_kv" in steps.column_names:  # the coordinate the engine itself looked up
            kv_ax = _col(steps, "lookup_kv").astype(np.float64)
        else:
            kv_ax = at_mean.copy()
        uniform = np.array([m is None or m == "uniform" for m in mode], dtype=bool)
        w_ax = np.where(uniform, width, tokens / np.maximum(bs, 1))
    att = attention_params(attention)
    if att[ATT_ON] and "kv_max" in steps.column_names:
        kv_max = _col(steps, "kv_max").astype(np.float64)
        for i in np.flatnonzero(kind != "prefill"):
            draft = kind[i] == "draft"
            rows = attention_rows(draft, bool(graph[i]), bs_ax[i], width[i], tokens[i])
            kv_ax[i] = effective_kv(kv_mean[i] * bs[i], kv_max[i], bs_ax[i], bs[i], rows, draft, att)
    return {"kind": kind, "graph": graph, "bs": bs_ax, "width": w_ax, "kv": kv_ax,
            "tokens": tokens, "passes": _col(steps, "passes").astype(np.float64),
            "kv_at_mean": at_mean, "kv_mean": kv_mean}


def predict_steps(steps: pa.Table, table) -> tuple[np.ndarray, np.ndarray]:
    """Latency the table predicts for every step of a run, and whether it was outside the grid."""
    return _predict(_lookup_points(steps, getattr(table, "attention", None)), table)


def _predict(p: dict[str, np.ndarray], table) -> tuple[np.ndarray, np.ndarray]:
    """:func:`predict_steps` at lookup points already computed (:func:`_lookup_points`)."""
    n = len(p["kind"])
    pred = np.empty(n)
    oog = np.zeros(n, dtype=bool)
    for i in range(n):
        k = p["kind"][i]
        if k == "prefill":
            v, o = table.prefill_s(p["tokens"][i], p["kv"][i])
        elif k == "draft":
            v, o = table.draft_pass_s(p["bs"][i], p["kv"][i], bool(p["graph"][i]))
            v *= p["passes"][i]
        else:
            v, o = table.verify_s(p["bs"][i], p["width"][i], p["kv"][i], bool(p["graph"][i]))
        pred[i], oog[i] = v, o
    return pred, oog


def _measured_points(table) -> dict[str, set]:
    """The profile's measured lookup points, from its source rows (when it is a profile)."""
    path = table.source.get("file") if isinstance(table.source, dict) else None
    if not path:
        return {}
    from backends.profile import read_profile

    rows, _ = read_profile(path)
    c = {k: _col(rows, k) for k in ("kind", "graph", "bs", "width", "kv_len", "tokens")}
    out: dict[str, set] = {"verify": set(), "draft": set(), "prefill": set()}
    for i in range(rows.num_rows):
        k = c["kind"][i]
        if k == "verify":
            out[k].add((bool(c["graph"][i]), float(c["bs"][i]), float(c["width"][i]), float(c["kv_len"][i])))
        elif k == "draft":
            out[k].add((bool(c["graph"][i]), float(c["bs"][i]), float(c["kv_len"][i])))
        else:
            out[k].add((float(c["tokens"][i]), float(c["kv_len"][i])))
    return out


def _on_grid(p: dict[str, np.ndarray], measured: dict[str, set]) -> np.ndarray:
    n = len(p["kind"])
    on = np.zeros(n, dtype=bool)
    if not measured:
        return on
    for i in range(n):
        k = p["kind"][i]
        kv = round(float(p["kv"][i]), 6)
        if k == "verify":
            key = (bool(p["graph"][i]), float(p["bs"][i]), round(float(p["width"][i]), 6), kv)
        elif k == "draft":
            key = (bool(p["graph"][i]), float(p["bs"][i]), kv)
        else:
            key = (float(p["tokens"][i]), kv)
        on[i] = key in measured.get(k, ())
    return on


def _bucket(x: float, edges) -> tuple[int, str]:
    """(bucket index, label) of ``x`` among ``edges`` (first bucket: <= edges[1])."""
    for j, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        if x <= hi:
            if j == 0:
                return j, f"<={hi}"
            return j, (f"{lo + 1}-{hi}" if hi < edges[-1] else f">{lo}")
    return len(edges) - 2, f">{edges[-2]}"


def _mape(err: np.ndarray) -> float | None:
    return float(np.mean(np.abs(err)) * 100) if len(err) else None


def step_errors(steps: pa.Table, table, *, worst: int = 20) -> dict[str, Any]:
    """Per-step error of ``table`` against the measured latencies in ``steps``, paired by shape."""
    if steps.num_rows == 0:
        raise SpecschedError("the reference run has no steps to compare")
    p = _lookup_points(steps, getattr(table, "attention", None))
    measured = _col(steps, "latency_s").astype(np.float64)
    pred, oog = _predict(p, table)
    on = _on_grid(p, _measured_points(table))
    ok = np.isfinite(measured) & (measured > 0)
    err = np.where(ok, pred / np.where(ok, measured, 1.0) - 1.0, np.nan)
    off = ok & ~on
    by_kind = {}
    for k in ("verify", "draft", "prefill"):
        m = off & (p["kind"] == k)
        by_kind[k] = {"steps": int(m.sum()), "mape_pct": _mape(err[m]),
                      "mean_signed_pct": float(np.mean(err[m]) * 100) if m.any() else None,
                      "p90_abs_pct": float(np.percentile(np.abs(err[m]), 90) * 100) if m.any() else None}
    buckets: dict[tuple, list[int]] = {}
    for i in np.nonzero(off)[0]:
        k = str(p["kind"][i])
        if k == "prefill":
            j, lab = _bucket(p["tokens"][i], _TOKEN_EDGES)
            key = (k, 0, j, 0.0, 0, f"prefill tokens {lab}")
        else:
            g = "graph" if p["graph"][i] else "eager"
            jb, lb = _bucket(p["bs"][i], _BS_EDGES)
            jk, lk = _bucket(p["kv"][i], _KV_EDGES)
            w = float(p["width"][i]) if k == "verify" else 0.0
            ws = f" w {w:g}" if k == "verify" else ""
            key = (k, g, jb, w, jk, f"{k} {g} bs {lb}{ws} kv {lk}")
        buckets.setdefault(key, []).append(int(i))
    by_shape = [{"shape": key[-1], "steps": len(ix), "mape_pct": _mape(err[ix]),
                 "mean_signed_pct": float(np.mean(err[ix]) * 100)}
                for key, ix in sorted(buckets.items())]
    order = np.argsort(-np.nan_to_num(np.abs(err), nan=-1.0), kind="stable")
    worst_rows = []
    for i in order[:worst]:
        if not ok[i]:
            continue
        worst_rows.append({"step": int(i), "kind": str(p["kind"][i]), "graph": bool(p["graph"][i]),
                           "bs": float(p["bs"][i]), "width": float(p["width"][i]),
                           "kv": round(float(p["kv"][i]), 3), "tokens": float(p["tokens"][i]),
                           "measured_s": float(measured[i]), "predicted_s": float(pred[i]),
                           "error_pct": float(err[i] * 100), "on_grid": bool(on[i]),
                           "out_of_grid": bool(oog[i])})
    return {
        "steps": int(ok.sum()), "on_grid_steps": int((ok & on).sum()),
        "off_grid_steps": int(off.sum()), "out_of_grid_steps": int((ok & oog).sum()),
        "mape_off_grid_pct": _mape(err[off]), "mape_all_pct": _mape(err[ok]),
        "by_kind": by_kind, "by_shape": by_shape, "worst": worst_rows,
        "stragglers": _straggler_errors(steps, table, p, err, ok, measured),
    }


#: a batch "has a straggler" when its longest request holds this many times the batch's mean KV
#: (and at least STRAGGLER_MIN_KV tokens)
STRAGGLER_RATIO = 1.5
STRAGGLER_MIN_KV = 1024


def _straggler_errors(steps: pa.Table, table, p: dict, err: np.ndarray, ok: np.ndarray,
                      measured: np.ndarray) -> dict[str, Any] | None:
    """Verify and draft steps with a straggler: their error at the coordinate the profile looks
    them up at, and looked up at the mean KV instead (what the straggler rule is worth here).
    ``None`` when the run has no ``kv_max`` column."""
    if "kv_max" not in steps.column_names:
        return None
    kv_max = _col(steps, "kv_max").astype(np.float64)
    m = (ok & (p["kind"] != "prefill") & (kv_max >= STRAGGLER_RATIO * p["kv_mean"])
         & (kv_max >= STRAGGLER_MIN_KV))
    out: dict[str, Any] = {"rule": f"kv_max >= {STRAGGLER_RATIO} x mean and >= {STRAGGLER_MIN_KV}",
                           "steps": int(m.sum()), "share_of_steps_pct": float(m.sum() / max(ok.sum(), 1) * 100)}
    if not m.any():
        return out
    sub = {k: v[m] for k, v in p.items()}
    sub["kv"] = sub["kv_at_mean"]
    pred_mean, _ = _predict(sub, table)
    err_mean = pred_mean / measured[m] - 1.0
    out.update({"mape_pct": _mape(err[m]), "mean_signed_pct": float(np.mean(err[m]) * 100),
                "mape_at_mean_kv_pct": _mape(err_mean),
                "mean_signed_at_mean_kv_pct": float(np.mean(err_mean) * 100)})
    return out


def _pct(a, b):
    if a is None or b is None or not b:
        return None
    return (a / b - 1.0) * 100.0


def compare_runs(reference: dict, model: dict) -> dict[str, Any]:
    """TTFT/TPOT/E2E percentiles of two runs' summaries side by side, with relative differences."""
    out = {}
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        ref, mod = reference.get(metric) or {}, model.get(metric) or {}
        out[metric] = {q: {"reference": ref.get(q), "profile": mod.get(q),
                           "diff_pct": _pct(mod.get(q), ref.get(q))}
                       for q in ("p50", "p90", "p99", "mean")}
    for key in ("throughput_tok_s", "duration_s"):
        out[key] = {"reference": reference.get(key), "profile": model.get(key),
                    "diff_pct": _pct(model.get(key), reference.get(key))}
    return out


def matched_shape_ratio(a: pa.Table, b: pa.Table) -> dict[str, Any]:
    """How much slower run ``b``'s passes are than run ``a``'s of the same shape, per kind: the
    median latency of each shape bucket (kind, graph, padded bs, width, KV bucket; prefill by
    token bucket) in both runs, their ratio, averaged over the buckets both runs have, weighted
    by the smaller step count.  Two live runs of one trace differ in schedule, so their steps
    cannot be paired one to one; shapes can."""
    def groups(t: pa.Table) -> dict[tuple, list[float]]:
        kind = _col(t, "kind")
        graph = _col(t, "graph").astype(bool)
        bs = np.where(graph, _col(t, "bs_padded"), _col(t, "bs")).astype(np.float64)
        width = _col(t, "width").astype(np.float64)
        tokens = _col(t, "tokens").astype(np.float64)
        kv = _col(t, "kv_mean").astype(np.float64)
        lat = _col(t, "latency_s").astype(np.float64) / np.maximum(_col(t, "passes"), 1)
        out: dict[tuple, list[float]] = {}
        for i in range(len(kind)):
            k = str(kind[i])
            if k == "prefill":
                key = (k, _bucket(tokens[i], _TOKEN_EDGES)[0])
            else:
                key = (k, bool(graph[i]), bs[i], width[i] if k == "verify" else 0.0,
                       _bucket(kv[i], _KV_EDGES)[0])
            out.setdefault(key, []).append(float(lat[i]))
        return out

    ga, gb = groups(a), groups(b)
    res: dict[str, Any] = {}
    for kind in ("verify", "draft", "prefill"):
        num = den = 0.0
        shapes = 0
        for key in ga.keys() & gb.keys():
            if key[0] != kind:
                continue
            w = min(len(ga[key]), len(gb[key]))
            num += w * (np.median(gb[key]) / np.median(ga[key]))
            den += w
            shapes += 1
        res[kind] = {"ratio": num / den if den else None, "shapes": shapes, "weight": int(den)}
    return res


def add_repeats(report: dict, reference_summary: dict, reference_steps: pa.Table,
                repeats: list[tuple[str, dict, pa.Table]]) -> None:
    """Put recorded repeats of the reference run (same trace and configuration, another run on
    the GPU) next to the report: their whole-run differences from the reference, their
    per-kind matched-shape ratio, and, on every whole-run check, ``repeat_pct``: the largest
    difference between the reference and a repeat -- the noise floor of that check."""
    if not repeats:
        return
    out = []
    for path, summary, steps in repeats:
        out.append({"run": path, "runs": compare_runs(reference_summary, summary),
                    "matched_shape_ratio": matched_shape_ratio(reference_steps, steps)})
    report["reference_repeats"] = out
    for name, c in report["checks"].items():
        if name == "step_mape_off_grid":
            continue
        metric, q = name.rsplit("_", 1)
        diffs = [r["runs"][f"{metric}_s"][q]["diff_pct"] for r in out]
        diffs = [abs(d) for d in diffs if d is not None]
        c["repeat_pct"] = max(diffs) if diffs else None


def _not_captured(table, steps_report: dict) -> list[str]:
    items = list(NOT_CAPTURED)
    if not getattr(table, "attention", None):
        items[1] = ("per-request KV-length spread inside a batch: this profile carries no "
                    "attention-kernel occupancy, so batches are looked up at their mean KV "
                    "length, while the attention kernel's time follows the longest sequence when "
                    "its grid fits in one wave")
    src = table.source if isinstance(table.source, dict) else {}
    notes = src.get("notes")
    if notes and not any(isinstance(n, str) and "queued" in n for n in notes):
        items.append("this profile was recorded before queued timing: its eager and prefill rows "
                     "include the recording host's launch rate (about 30-60 us per kernel "
                     "launch), which a live run today does not; re-record it with `specsched profile`")
    holes = {k: v for k, v in (src.get("holes_filled") or {}).items() if v}
    if holes:
        items.append(f"grid points not measured, filled by rule: {holes}")
    for k, d in (src.get("eager_derived") or {}).items():
        if d.get("derived_points"):
            items.append(f"eager {k}: {d['derived_points']} points derived as graph + "
                         f"{d.get('overhead_s', 0) * 1e6:.1f} us overhead"
                         + (f" ({d['overhead_rule']})" if d.get("overhead_rule") else ""))
    for w in src.get("warnings", []) or []:
        items.append(w)
    if steps_report.get("out_of_grid_steps"):
        items.append(f"{steps_report['out_of_grid_steps']} reference steps lie outside the "
                     "profile's grid (extrapolated)")
    if src.get("monotone_adjusted"):
        items.append("measured points moved by the isotonic fit along KV / prefill tokens: "
                     f"{src['monotone_adjusted']}")
    return items


def _spread(table) -> float | None:
    path = table.source.get("file") if isinstance(table.source, dict) else None
    if not path:
        return None
    from backends.profile import read_profile

    rows, _ = read_profile(path)
    lat = _col(rows, "latency_s")
    return float(np.median((_col(rows, "p90_s") - _col(rows, "p10_s")) / lat) * 100)


def build_report(reference_steps: pa.Table, reference_summary: dict, profile_summary: dict,
                 table, *, worst: int = 20) -> dict[str, Any]:
    """The fidelity report (a JSON-able dict) from the two runs and the profile's table."""
    steps = step_errors(reference_steps, table, worst=worst)
    runs = compare_runs(reference_summary, profile_summary)
    checks = {"step_mape_off_grid": {
        "value_pct": steps["mape_off_grid_pct"], "target_pct": TARGETS["step_mape_off_grid_pct"],
        "pass": (steps["mape_off_grid_pct"] is not None
                 and steps["mape_off_grid_pct"] <= TARGETS["step_mape_off_grid_pct"])}}
    for metric in ("ttft_s", "tpot_s"):
        for q in ("p50", "p99"):
            d = runs[metric][q]["diff_pct"]
            checks[f"{metric[:-2]}_{q}"] = {"value_pct": d,
                                            "target_pct": TARGETS["ttft_tpot_p50_p99_pct"],
                                            "pass": d is not None and abs(d) <= TARGETS["ttft_tpot_p50_p99_pct"]}
    spread = _spread(table)
    not_captured = _not_captured(table, steps)
    if spread is not None:
        not_captured.insert(1, f"median p10..p90 spread of the profile's measurements: {spread:.2f}%")
    return {"steps": steps, "runs": runs, "checks": checks,
            "all_pass": all(c["pass"] for c in checks.values()),
            "not_captured": not_captured,
            "profile": {k: table.source.get(k) for k in ("file", "sha256", "gpu", "versions", "kernels")}
            if isinstance(table.source, dict) else {}}


def _fmt(x, nd=2, pct=False):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:+.{nd}f}%" if pct else f"{x * 1e3:.{nd}f} ms"


def _diff_rows(runs: dict, metrics, quantiles) -> list[str]:
    """Table rows ``| TTFT p50 | reference | other | difference |`` from :func:`compare_runs`."""
    labels = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}
    return [f"| {labels[m]} {q} | {_fmt(runs[m][q]['reference'])} | {_fmt(runs[m][q]['profile'])} | "
            f"{_fmt(runs[m][q]['diff_pct'], pct=True)} |" for m in metrics for q in quantiles]


def render_markdown(report: dict, *, reference: str) -> str:
    s = report["steps"]
    lines = ["# Fidelity: profile backend vs " + reference, ""]
    lines.append(f"Steps compared: {s['steps']} ({s['off_grid_steps']} off the profile's measured "
                 f"points, {s['on_grid_steps']} on them, {s['out_of_grid_steps']} outside its grid).")
    lines.append(f"Per-step MAPE off the grid: **{_fmt(s['mape_off_grid_pct'], pct=True).lstrip('+')}**"
                 f" (all steps: {_fmt(s['mape_all_pct'], pct=True).lstrip('+')}).")
    lines += ["", "| kind | steps | MAPE | mean signed | p90 abs |", "|---|---|---|---|---|"]
    for k, d in s["by_kind"].items():
        lines.append(f"| {k} | {d['steps']} | {_fmt(d['mape_pct'], pct=True).lstrip('+')} | "
                     f"{_fmt(d['mean_signed_pct'], pct=True)} | {_fmt(d['p90_abs_pct'], pct=True).lstrip('+')} |")
    lines += ["", "## By shape", "", "| shape | steps | MAPE | mean signed |", "|---|---|---|---|"]
    for d in s["by_shape"]:
        lines.append(f"| {d['shape']} | {d['steps']} | {_fmt(d['mape_pct'], pct=True).lstrip('+')} | "
                     f"{_fmt(d['mean_signed_pct'], pct=True)} |")
    st = s.get("stragglers")
    if st and st["steps"]:
        lines += ["", "## Batches with a straggler", "",
                  f"{st['steps']} verify and draft steps ({st['share_of_steps_pct']:.1f}%) have a "
                  f"straggler ({st['rule']} tokens): MAPE {_fmt(st['mape_pct'], pct=True).lstrip('+')} "
                  f"(mean signed {_fmt(st['mean_signed_pct'], pct=True)}) at the coordinate the "
                  f"profile looks them up at; {_fmt(st['mape_at_mean_kv_pct'], pct=True).lstrip('+')} "
                  f"({_fmt(st['mean_signed_at_mean_kv_pct'], pct=True)}) looked up at the mean KV."]
    lines += ["", "## Worst steps", "", "| step | kind | graph | bs | width | KV | measured | "
              "predicted | error |", "|---|---|---|---|---|---|---|---|---|"]
    for d in s["worst"]:
        lines.append(f"| {d['step']} | {d['kind']} | {d['graph']} | {d['bs']:g} | {d['width']:g} | "
                     f"{d['kv']:g} | {_fmt(d['measured_s'], 3)} | {_fmt(d['predicted_s'], 3)} | "
                     f"{_fmt(d['error_pct'], pct=True)} |")
    lines += ["", "## Whole runs", "", f"| metric | {reference} | profile | difference |",
              "|---|---|---|---|"]
    lines += _diff_rows(report["runs"], ("ttft_s", "tpot_s", "e2e_s"), ("p50", "p90", "p99"))
    deb = report.get("runs_debiased")
    if deb:
        f = deb["factors"]
        lines += ["", "## Whole runs, the profile's mean per-kind bias removed (a what-if)", "",
                  "The profile's values scaled by "
                  + ", ".join(f"{k} x{v:.4f}" for k, v in f.items())
                  + ": what remains is not average per-step error but how it is distributed "
                  "(queueing, transients, shape mix).", "",
                  f"| metric | {reference} | profile, debiased | difference |", "|---|---|---|---|"]
        lines += _diff_rows(deb, ("ttft_s", "tpot_s"), ("p50", "p99"))
    reps = report.get("reference_repeats") or []
    for r in reps:
        lines += ["", f"## The {reference} run against a repeat of it", "",
                  f"`{r['run']}`: the same trace and configuration, run again on the GPU. How far "
                  "two runs of the reference differ is the floor under the whole-run checks.", "",
                  f"| metric | {reference} | repeat | difference |", "|---|---|---|---|"]
        lines += _diff_rows(r["runs"], ("ttft_s", "tpot_s"), ("p50", "p99"))
        ms = r["matched_shape_ratio"]
        lines += ["", "Passes of the same shape, repeat / " + reference + " (median per shape, "
                  "weighted): " + ", ".join(
                      f"{k} {_fmt((v['ratio'] - 1) * 100, pct=True)} over {v['shapes']} shapes"
                      for k, v in ms.items() if v["ratio"] is not None) + "."]
    head = "| check | value | target | pass |" + (" a repeat differs by |" if reps else "")
    lines += ["", "## Checks", "", head, "|---|---|---|---|" + ("---|" if reps else "")]
    for name, c in report["checks"].items():
        extra = ""
        if reps:
            rp = c.get("repeat_pct")
            extra = f" {'-' if rp is None else f'{rp:.2f}%'} |"
        lines.append(f"| {name} | {_fmt(c['value_pct'], pct=True)} | <= {c['target_pct']}% | "
                     f"{'yes' if c['pass'] else 'NO'} |{extra}")
    lines += ["", "## What the profile model does not capture", ""]
    lines += [f"- {x}" for x in report["not_captured"]]
    return "\n".join(lines) + "\n"


def debiased_table(table, by_kind: dict[str, dict]):
    """``table`` with each kind's values divided by ``1 + mean signed error`` of that kind (verify
    graph and eager, draft graph and eager, prefill): the same profile without its average per-kind
    bias against the reference.  Returns ``(table, factors)``."""
    from dataclasses import replace

    from backends.latency_table import Grid

    factors = {}
    for kind in ("verify", "draft", "prefill"):
        bias = (by_kind.get(kind) or {}).get("mean_signed_pct")
        factors[kind] = 1.0 if bias is None else 1.0 / (1.0 + bias / 100.0)

    def scaled(g, f):
        return Grid(axes=g.axes, values=g.values * f)

    t = replace(table,
                verify_graph=scaled(table.verify_graph, factors["verify"]),
                verify_eager=scaled(table.verify_eager, factors["verify"]),
                draft_graph=scaled(table.draft_graph, factors["draft"]),
                draft_eager=scaled(table.draft_eager, factors["draft"]),
                prefill=scaled(table.prefill, factors["prefill"]),
                source={**table.source, "debiased": factors})
    return t, factors


def run_fidelity(trace_path: str | Path, model: str, *, out_dir: str | Path | None = None,
                 reference: str = "aiter", gpu: str | None = None, profile: str | None = None,
                 config_path: str | None = None, overrides: dict[str, Any] | None = None,
                 worst: int = 20, progress=None, limit: int | None = None,
                 reference_run: str | Path | None = None,
                 repeat_runs: tuple = ()) -> dict[str, Any]:
    """Run ``trace_path`` with the ``reference`` backend and with ``profile``; compare them.

    ``reference_run``: a results folder of an earlier run of the same trace and configuration
    with the reference backend (e.g. a live ``simulate --backend aiter`` recorded on a GPU
    machine); it is read instead of running the reference again, after checking that its trace,
    request count, seed and engine configuration match this run's.

    ``repeat_runs``: results folders of further recorded reference runs of the same trace and
    configuration (checked the same way); the report shows how far each differs from the
    reference (:func:`add_repeats`).

    With ``out_dir``: writes ``<out>/reference/`` (unless ``reference_run``) and ``<out>/profile/``
    (results folders), ``fidelity.json`` and ``fidelity.md``, atomically.  Returns the report dict.
    """
    from backends.profile import ProfileExecutor
    from simulator.config import SimConfig
    from specsched.setup import input_files, load_trace, prepare, simulate_to
    from traces.atomic import atomic_output_dir

    if reference == "profile":
        raise SpecschedError("--reference must be another backend than profile (aiter, roofline)")
    ov = dict(overrides or {})
    ov["model.name"] = model
    if gpu:
        ov["backend.gpu"] = gpu
    if profile:
        ov["backend.profile"] = str(profile)
    base = SimConfig.load(config_path, ov)
    ref_cfg = base.replace({"backend.name": reference, "backend.profile": ""})
    prof_cfg = base.replace({"backend.name": "profile"})
    trace = load_trace(trace_path, seed=base.seed, limit=limit)
    prof_prep = prepare(prof_cfg)
    if not isinstance(prof_prep.executor, ProfileExecutor):
        raise SpecschedError("the profile backend did not yield a profile executor")
    table = prof_prep.executor.latency_table()
    recorded = (None if reference_run is None
                else read_reference_run(reference_run, trace_path, len(trace), ref_cfg, reference))
    repeats = [(str(r), *read_reference_run(r, trace_path, len(trace), ref_cfg, reference))
               for r in repeat_runs]

    def go(folder: Path | None):
        import pyarrow.parquet as pq

        if recorded is None:
            ref = simulate_to(trace, ref_cfg, folder / "reference" if folder else None,
                              progress=progress)
            ref_summary, steps = ref.summary, ref.steps
            if steps is None:  # the engine streamed the steps into the results folder
                steps = pq.read_table(folder / "reference" / "steps.parquet")
        else:
            ref_summary, steps = recorded
        mod = simulate_to(trace, prof_cfg, folder / "profile" if folder else None,
                          executor=prof_prep.executor)
        report = build_report(steps, ref_summary, mod.summary, table, worst=worst)
        add_repeats(report, ref_summary, steps, repeats)
        # what-if: the same profile without its mean per-kind bias -- how much of the whole-run
        # difference is per-step bias, and how much queueing, transients and shape mix
        from backends.latency_table import TableExecutor

        dtable, factors = debiased_table(table, report["steps"]["by_kind"])
        deb = simulate_to(trace, prof_cfg, None, executor=TableExecutor("profile", dtable))
        report["runs_debiased"] = {"factors": factors, **compare_runs(ref_summary, deb.summary)}
        report["reference"] = {"backend": reference, "describe": _jsonable(ref_summary.get("backend")),
                               "recorded_run": None if reference_run is None else str(reference_run),
                               "detail": _jsonable(ref_summary.get("backend_detail"))}
        report["trace"] = str(trace_path)
        report["requests"] = len(trace)
        report["model"] = model
        if folder:
            (folder / "fidelity.json").write_text(json.dumps(report, indent=2, sort_keys=True,
                                                             default=str) + "\n")
            (folder / "fidelity.md").write_text(render_markdown(report, reference=reference))
        return report

    if out_dir is None:
        return go(None)
    inputs = input_files(base, trace_path, config_path, reference_run, *repeat_runs)
    with atomic_output_dir(out_dir, inputs=inputs) as tmp:
        return go(Path(tmp))


def _jsonable(x):
    return json.loads(json.dumps(x, default=str))


def read_reference_run(folder: str | Path, trace_path: str | Path, requests: int, config,
                       reference: str) -> tuple[dict, pa.Table]:
    """(summary, steps) of a recorded reference run, refused unless it ran this trace (same file
    name, same number of requests), seed and engine configuration with the ``reference`` backend."""
    from analysis.results import load_run

    run = load_run(folder)
    summary = run.summary
    if not summary:
        raise SpecschedError("no summary.json: the recorded run's configuration is needed to check "
                             "that it matches this comparison", path=str(folder))
    got_cfg = summary.get("config") or {}
    want_cfg = config.to_dict()
    problems = []
    if summary.get("backend") != reference:
        problems.append(f"backend {summary.get('backend')!r}, expected {reference!r}")
    tr = summary.get("trace") or {}
    if Path(str(tr.get("path", ""))).name != Path(trace_path).name:
        problems.append(f"trace {tr.get('path')!r}, expected {Path(trace_path).name!r}")
    if int(summary.get("requests", -1)) != int(requests):
        problems.append(f"{summary.get('requests')} requests, expected {requests} (same --limit?)")
    for key in ("seed", "rate_scale", "engine", "cluster"):
        if got_cfg.get(key) != want_cfg.get(key):
            diff = key
            if isinstance(want_cfg.get(key), dict) and isinstance(got_cfg.get(key), dict):
                diff = ", ".join(f"{key}.{k}: {got_cfg[key].get(k)!r} != {v!r}"
                                 for k, v in want_cfg[key].items() if got_cfg[key].get(k) != v) or key
            problems.append(f"config differs: {diff}")
    if (got_cfg.get("model") or {}).get("name") != (want_cfg.get("model") or {}).get("name"):
        problems.append(f"model {(got_cfg.get('model') or {}).get('name')!r}, expected "
                        f"{(want_cfg.get('model') or {}).get('name')!r}")
    if problems:
        raise SpecschedError(f"{folder}: the recorded run does not match this comparison: "
                             + "; ".join(problems))
    return summary, run.steps


# ---- the command ---------------------------------------------------------------------------
import click  # noqa: E402


@click.command("fidelity")
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="Trace parquet to replay (e.g. a sample under traces/samples/).")
@click.option("--model", required=True, help="Model preset or config.json path.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder for reference/, profile/, fidelity.json and fidelity.md "
                   "(default runs/fidelity__<trace>__<model>).")
@click.option("--reference", default="aiter", show_default=True,
              type=click.Choice(["aiter", "roofline"]),
              help="Backend the profile is judged against (aiter = live GPU replay).")
@click.option("--gpu", default=None, help="GPU name (default: the config's, H200).")
@click.option("--profile", "profile", default=None, type=click.Path(dir_okay=False),
              help="Profile parquet (default: the shipped one for the model and GPU).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Simulation config TOML (same as simulate --config).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Any configuration key, e.g. --set engine.policy=split (repeatable).")
@click.option("--worst", default=20, show_default=True, type=int, help="Worst steps to list.")
@click.option("--limit", type=int, help="Only the first N requests of the trace.")
@click.option("--reference-run", "reference_run", type=click.Path(file_okay=False),
              help="Results folder of a recorded reference run (e.g. `simulate --backend aiter "
                   "--out DIR` on a GPU machine) to compare against instead of running it again.")
@click.option("--repeat-run", "repeat_runs", multiple=True, type=click.Path(file_okay=False),
              help="Results folder of another recorded reference run of the same trace and "
                   "configuration (repeatable): the report shows how far the reference runs "
                   "differ from each other, the floor under each whole-run check.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def fidelity(trace_path, model, out_dir, reference, gpu, profile, config_path, sets, worst, limit,
             reference_run, repeat_runs, as_json):
    """Compare the profile backend with live GPU replay on one trace.

    \b
    Example (on a GPU machine):
      specsched fidelity --trace traces/samples/azure_conv_eagle_2k.parquet \\
          --model llama-3.1-8b --out runs/fidelity

    Runs the trace with the live aiter executor and with the profile executor, predicts every
    live step with the profile at the same shape (MAPE by kind and shape, worst cases), compares
    TTFT/TPOT/E2E percentiles, lists what the profile does not capture, and checks the targets
    (step MAPE <= 3% off the grid; TTFT/TPOT p50 and p99 within 3%).
    """
    from simulator.config import parse_overrides

    overrides: dict[str, Any] = parse_overrides(sets)
    if out_dir is None:
        out_dir = Path("runs") / f"fidelity__{Path(trace_path).stem}__{Path(model).stem}"
    report = run_fidelity(trace_path, model, out_dir=out_dir, reference=reference, gpu=gpu,
                          profile=profile, config_path=config_path, overrides=overrides,
                          worst=worst, limit=limit, reference_run=reference_run,
                          repeat_runs=tuple(repeat_runs))
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        click.echo(render_markdown(report, reference=reference), nl=False)
        click.echo(f"\nwritten: {out_dir}/fidelity.json, fidelity.md, "
                   f"{'' if reference_run else 'reference/, '}profile/")
