"""The fidelity statistics: per-step error by kind, grid position and shape; whole runs side by
side; how far two recorded runs' passes of the same shape differ; held-out profile points.

Every function here takes tables and dicts and returns JSON-able dicts; nothing reads files
except :func:`heldout_errors` (the profile's own held-out rows) and nothing is printed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from analysis.fidelity.lookup import (AXES, col, grid_position, kinds_present, lookup_points,
                                      measured_points, predict)
from backends.calibrate import DECODE_KINDS
from traces.errors import SpecschedError

__all__ = ["step_errors", "compare_runs", "run_diff", "matched_shape_ratio", "shape_keys", "shape_floor",
           "heldout_errors", "summarize", "STRAGGLER_RATIO", "STRAGGLER_MIN_KV"]

_BS_EDGES = (0, 8, 32, 64, 128, 256, 10**9)
_KV_EDGES = (0, 1024, 4096, 16384, 65536, 10**12)
_TOKEN_EDGES = (0, 256, 1024, 4096, 16384, 10**9)  # prefill tokens

#: a batch "has a straggler" when its longest request holds this many times the batch's mean KV
#: (and at least STRAGGLER_MIN_KV tokens)
STRAGGLER_RATIO = 1.5
STRAGGLER_MIN_KV = 1024


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


def summarize(err: np.ndarray) -> dict[str, Any]:
    """Steps, MAPE, mean signed error and 90th percentile absolute error of relative errors."""
    n = len(err)
    return {"steps": int(n), "mape_pct": _mape(err),
            "mean_signed_pct": float(np.mean(err) * 100) if n else None,
            "p90_abs_pct": float(np.percentile(np.abs(err), 90) * 100) if n else None}


def _shape_band(p: dict, i: int) -> tuple:
    """The report's shape band of step ``i``: a sort key ending with its label."""
    k = str(p["kind"][i])
    if k == "prefill":
        j, lab = _bucket(p["tokens"][i], _TOKEN_EDGES)
        return (k, 0, j, 0.0, 0, f"prefill tokens {lab}")
    g = "graph" if p["graph"][i] else "eager"
    jb, lb = _bucket(p["bs"][i], _BS_EDGES)
    jk, lk = _bucket(p["kv"][i], _KV_EDGES)
    w = float(p["width"][i]) if k == "verify" else 0.0
    ws = f" w {w:g}" if k == "verify" else ""
    return (k, g, jb, w, jk, f"{k} {g} bs {lb}{ws} kv {lk}")


def step_errors(steps: pa.Table, table, *, worst: int = 20, _full: bool = False,
                kv_lookup: str = "straggler") -> dict[str, Any]:
    """Per-step error of ``table`` against the measured latencies in ``steps``, paired by shape.

    ``on_grid`` steps sit on a measured profile point (the prediction replays a measurement);
    the others are off the grid in at least one way (:data:`~analysis.fidelity.lookup.AXES`),
    scored overall (``mape_off_grid_pct``), per way (``off_grid_axes``), per kind and per shape
    band (both over the off-grid steps).  Steps of a kind the table cannot look up are counted
    in ``not_predicted``.  ``_full``: also return the per-step arrays (for noise floors).
    ``kv_lookup``: the profile side's ``backend.kv_lookup`` (``fluid`` looks MLA verify and
    draft-extend steps up from their recorded members; ``fluid_steps`` counts them)."""
    if steps.num_rows == 0:
        raise SpecschedError("the reference run has no steps to compare")
    p = lookup_points(steps, table, kv_lookup)
    measured = col(steps, "latency_s").astype(np.float64)
    pred, oog = predict(p, table)
    pos = grid_position(p, table, measured_points(table))
    on = pos["on_grid"]
    known = np.isfinite(pred)
    ok = known & np.isfinite(measured) & (measured > 0)
    err = np.where(ok, pred / np.where(ok, measured, 1.0) - 1.0, np.nan)
    off = ok & ~on
    kinds = kinds_present(p["kind"][ok])
    by_kind = {k: summarize(err[off & (p["kind"] == k)]) for k in kinds}
    for k in kinds:  # the kind's total time: what a queue sees (long passes weigh more)
        m = off & (p["kind"] == k)
        by_kind[k]["time_signed_pct"] = (float((pred[m].sum() / measured[m].sum() - 1) * 100)
                                         if m.any() else None)
    axes = {a: summarize(err[off & pos[a]]) for a in AXES}
    bands: dict[tuple, list[int]] = {}
    for i in np.flatnonzero(off):
        bands.setdefault(_shape_band(p, int(i)), []).append(int(i))
    by_shape = [{"shape": key[-1], "steps": len(ix), "mape_pct": _mape(err[ix]),
                 "mean_signed_pct": float(np.mean(err[ix]) * 100)}
                for key, ix in sorted(bands.items())]
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
    unknown = ~known
    out = {
        "steps": int(ok.sum()), "on_grid_steps": int((ok & on).sum()),
        "off_grid_steps": int(off.sum()), "out_of_grid_steps": int((ok & oog).sum()),
        "mape_off_grid_pct": _mape(err[off]), "mape_on_grid_pct": _mape(err[ok & on]),
        "mape_all_pct": _mape(err[ok]),
        "off_grid_axes": axes, "by_kind": by_kind, "by_shape": by_shape, "worst": worst_rows,
    }
    if kv_lookup == "fluid":
        out["fluid_steps"] = int((ok & p["fluid"]).sum())
    out["stragglers"], strag = _straggler_errors(steps, table, p, err, ok, measured)
    if unknown.any():
        out["not_predicted"] = {k: int(np.sum(unknown & (p["kind"] == k)))
                                for k in kinds_present(p["kind"][unknown])}
    if _full:
        out["_arrays"] = {"ok": ok, "off": off, "on": on, "kind": p["kind"], "pos": pos, "err": err,
                          "bands": {key[-1]: ix for key, ix in bands.items()},
                          "stragglers": strag}
    return out


def _straggler_errors(steps: pa.Table, table, p: dict, err: np.ndarray, ok: np.ndarray,
                      measured: np.ndarray) -> tuple[dict[str, Any] | None, np.ndarray]:
    """Verify and draft steps with a straggler: their error at the coordinate the profile looks
    them up at, and looked up at the mean KV instead (what the straggler rule is worth here);
    ``None`` when the run has no ``kv_max`` column.  And which steps those are."""
    if "kv_max" not in steps.column_names:
        return None, np.zeros(len(ok), dtype=bool)
    kv_max = col(steps, "kv_max").astype(np.float64)
    m = (ok & np.isin(p["kind"], DECODE_KINDS) & (kv_max >= STRAGGLER_RATIO * p["kv_mean"])
         & (kv_max >= STRAGGLER_MIN_KV))
    out: dict[str, Any] = {"rule": f"kv_max >= {STRAGGLER_RATIO} x mean and >= {STRAGGLER_MIN_KV}",
                           "steps": int(m.sum()),
                           "share_of_steps_pct": float(m.sum() / max(ok.sum(), 1) * 100)}
    if not m.any():
        return out, m
    sub = {k: v[m] for k, v in p.items()}
    sub["kv"] = sub["kv_at_mean"]
    pred_mean, _ = predict(sub, table)
    err_mean = pred_mean / measured[m] - 1.0
    out.update({"mape_pct": _mape(err[m]), "mean_signed_pct": float(np.mean(err[m]) * 100),
                "mape_at_mean_kv_pct": _mape(err_mean),
                "mean_signed_at_mean_kv_pct": float(np.mean(err_mean) * 100)})
    return out, m


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


def run_diff(runs: dict, metric: str, q: str | None) -> float | None:
    """One figure's relative difference (%) in a :func:`compare_runs` result: ``metric`` at
    quantile ``q``, or the metric itself when ``q`` is None (throughput)."""
    return (runs[metric][q] if q else runs[metric])["diff_pct"]


def shape_keys(t: pa.Table) -> tuple[list[tuple], np.ndarray]:
    """Each step's shape bucket (kind, graph, padded bs, width, KV bucket; prefill by token
    bucket) and its latency per pass: what two runs of one trace can be matched on."""
    kind = col(t, "kind")
    graph = col(t, "graph").astype(bool)
    bs = np.where(graph, col(t, "bs_padded"), col(t, "bs")).astype(np.float64)
    width = col(t, "width").astype(np.float64)
    tokens = col(t, "tokens").astype(np.float64)
    kv = col(t, "kv_mean").astype(np.float64)
    lat = col(t, "latency_s").astype(np.float64) / np.maximum(col(t, "passes"), 1)
    keys = []
    for i in range(len(kind)):
        k = str(kind[i])
        if k == "prefill":
            keys.append((k, _bucket(tokens[i], _TOKEN_EDGES)[0]))
        else:
            keys.append((k, bool(graph[i]), bs[i], width[i] if k == "verify" else 0.0,
                         _bucket(kv[i], _KV_EDGES)[0]))
    return keys, lat


def _groups(t: pa.Table) -> dict[tuple, list[float]]:
    keys, lat = shape_keys(t)
    out: dict[tuple, list[float]] = {}
    for key, x in zip(keys, lat):
        out.setdefault(key, []).append(float(x))
    return out


def matched_shape_ratio(a: pa.Table, b: pa.Table) -> dict[str, Any]:
    """How much slower run ``b``'s passes are than run ``a``'s of the same shape, per kind: the
    median latency of each shape bucket (:func:`shape_keys`) in both runs, their ratio, averaged
    over the buckets both runs have, weighted by the smaller step count.  Two live runs of one
    trace differ in schedule, so their steps cannot be paired one to one; shapes can.
    ``mean_abs_pct``: the same average of ``|ratio - 1|``, in percent."""
    ga, gb = _groups(a), _groups(b)
    res: dict[str, Any] = {}
    kinds = kinds_present(np.array([k[0] for k in (*ga, *gb)], dtype=object))
    for kind in kinds:
        num = den = dev = 0.0
        shapes = 0
        for key in sorted(ga.keys() & gb.keys()):  # a fixed order: the same sums every run
            if key[0] != kind:
                continue
            w = min(len(ga[key]), len(gb[key]))
            r = np.median(gb[key]) / np.median(ga[key])
            num += w * r
            dev += w * abs(r - 1.0)
            den += w
            shapes += 1
        res[kind] = {"ratio": num / den if den else None, "shapes": shapes, "weight": int(den),
                     "mean_abs_pct": dev / den * 100 if den else None}
    return res


def shape_floor(reference: pa.Table, repeat: pa.Table) -> np.ndarray:
    """For every step of ``reference``: ``|ratio - 1|`` in percent of its shape bucket's median
    latency in ``repeat`` over that in ``reference`` (NaN where ``repeat`` has no such shape).
    Averaged over a set of steps it is how far a repeat of the run moves passes like those: the
    noise floor under a per-step figure on that set."""
    keys, _ = shape_keys(reference)
    ga, gb = _groups(reference), _groups(repeat)
    med = {k: abs(np.median(gb[k]) / np.median(ga[k]) - 1.0) * 100 for k in ga.keys() & gb.keys()}
    return np.array([med.get(k, np.nan) for k in keys])


def heldout_errors(table, *, worst: int = 10) -> dict[str, Any] | None:
    """The table's error on its profile's held-out rows (``split == "heldout"``: measured, not
    in the grids), or ``None`` when there are none.  ``spread_pct`` is the held-out
    measurements' own median p10..p90 spread (the floor under a single point's error)."""
    path = table.source.get("file") if isinstance(table.source, dict) else None
    if not path:
        return None
    from backends.latency_table import prefill_axes
    from backends.profile import heldout_rows, read_profile
    from backends.protocol import PrefillBatch

    rows = heldout_rows(read_profile(path)[0])
    if rows.num_rows == 0:
        return None
    c = {k: col(rows, k) for k in ("kind", "graph", "bs", "width", "kv_len", "tokens",
                                   "latency_s", "p10_s", "p90_s")}
    n = rows.num_rows
    pred = np.full(n, np.nan)
    for i in range(n):
        k, g = str(c["kind"][i]), bool(c["graph"][i])
        bs, kv = float(c["bs"][i]), float(c["kv_len"][i])
        if k == "verify":
            pred[i] = table.verify_s(bs, float(c["width"][i]), kv, g)[0]
        elif k == "draft":
            pred[i] = table.draft_pass_s(bs, kv, g)[0]
        elif k == "draft_extend":
            pred[i] = table.extend_s(bs, float(c["width"][i]), kv, g)[0]
        elif k == "prefill":
            per = float(c["tokens"][i]) / bs  # bs requests of equal length after the same prefix
            batch = PrefillBatch(tokens=np.full(int(bs), per), prefix=np.full(int(bs), kv))
            pred[i] = table.prefill_s(*prefill_axes(batch))[0]
    lat = c["latency_s"].astype(np.float64)
    err = pred / lat - 1.0
    kind = c["kind"]
    order = np.argsort(-np.abs(err), kind="stable")[:worst]
    return {"points": int(n), **{k: v for k, v in summarize(err).items() if k != "steps"},
            "spread_pct": float(np.median((c["p90_s"] - c["p10_s"]) / lat) * 100),
            "by_kind": {k: summarize(err[kind == k]) for k in kinds_present(kind)},
            "worst": [{"kind": str(kind[i]), "graph": bool(c["graph"][i]), "bs": int(c["bs"][i]),
                       "width": int(c["width"][i]), "kv": int(c["kv_len"][i]),
                       "tokens": int(c["tokens"][i]), "measured_s": float(lat[i]),
                       "predicted_s": float(pred[i]), "error_pct": float(err[i] * 100)}
                      for i in order]}
