"""How far a live run's decode passes go past the KV lengths a calibration's anchors measured.

``specsched calibrate`` measures a few anchors and scales every row of a pass group by one
factor (times, on another GPU model, the roofline's ratio with attention's part raised to a
power the anchors choose: ``backends.calibrate_prior``). Rows at KV lengths longer than any
anchor's take that scaling untested. With ``--trace`` on a conversation trace the anchors stop
at KV 2,048-8,192, and how attention scales beyond is then read from anchors where attention is
a small part of each pass: on one H100 (``benchmarks/results/h100-2026-12-06j``) the 70B shard's
conversation anchors (KV up to 2,048) chose power 1 from costs 6% apart, and its long-context run
erred 2.49% per step against 1.45% with the default anchors (KV up to 32,768, power 0.5).

:func:`kv_reach` splits a fidelity report's per-step errors at the anchors' longest KV, by the
longest KV in each step's batch (what attention's time follows), so a report says how much of a
run was judged beyond what its calibration measured, and how the error differs there. It splits
the prefill steps the same way at the longest prefill anchor's new tokens, so a prefill error
within that reach (DeepSeek-V2-Lite's long-context runs on ``h100-2026-12-06l``: -9% signed,
every prefill within its anchors' 8,192 tokens) is told apart from an extrapolation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from analysis.fidelity.lookup import col
from analysis.fidelity.stats import summarize
from backends.calibrate import DECODE_KINDS, decode_kv_reach, prefill_tokens_reach

__all__ = ["kv_reach", "reach_text"]


def kv_reach(cal: dict | None, steps: pa.Table, arrays: dict) -> dict[str, Any] | None:
    """The per-step errors (``arrays``: ``step_errors(..., _full=True)["_arrays"]``) of the
    decode steps of ``steps`` within and beyond the longest KV of the calibration ``cal``'s
    decode anchors; None when ``cal`` is not a calibration with decode anchors or the steps
    record no ``kv_max``.

    Returns ``anchors_kv_max``, the prior's ``attention_power``, whether the anchors resolved it
    (``attention_resolved``: None where the calibration predates that record) and the relative
    spread of the anchors' cost over the powers tried (None without a fitted prior), ``within`` and
    ``beyond`` (:func:`analysis.fidelity.stats.summarize` of the scored steps),
    ``beyond_time_share``: the share of the scored decode steps' measured time beyond, and
    ``prefill``: the same split of the scored prefill steps at the longest prefill anchor's new
    tokens (``anchors_tokens_max``, by each step's new tokens; None without a prefill anchor)."""
    cal = cal or {}
    reach = decode_kv_reach(cal.get("anchors") or [])
    if reach is None or "kv_max" not in steps.column_names:
        return None
    kv = col(steps, "kv_max").astype(np.float64)
    measured = col(steps, "latency_s").astype(np.float64)
    scored = arrays["ok"] & np.isin(arrays["kind"], DECODE_KINDS) & np.isfinite(kv)
    prior = cal.get("prior") or {}
    pre_reach = prefill_tokens_reach(cal.get("anchors") or [])
    prefill = None
    if pre_reach is not None and "tokens" in steps.column_names:
        tokens = col(steps, "tokens").astype(np.float64)
        prefill = {"anchors_tokens_max": pre_reach,
                   **_split(arrays["err"], measured, arrays["ok"] & (arrays["kind"] == "prefill"),
                            tokens > pre_reach)}
    cost = [float(c) for c in (prior.get("attention_power_cost") or {}).values()]
    resolved = prior.get("attention_resolved")
    return {"anchors_kv_max": reach,
            "attention_power": prior.get("attention_power"),
            "attention_resolved": (resolved.get("resolved") if isinstance(resolved, dict)
                                   else None),
            "power_cost_spread_pct": ((max(cost) / min(cost) - 1) * 100
                                      if cost and min(cost) > 0 else None),
            **_split(arrays["err"], measured, scored, kv > reach),
            "prefill": prefill}


def _split(err: np.ndarray, measured: np.ndarray, scored: np.ndarray, past: np.ndarray
           ) -> dict[str, Any]:
    """The ``scored`` steps' errors ``within`` and ``beyond`` (``past``) a reach, and the share
    of their measured time beyond."""
    total = float(measured[scored].sum())
    return {"within": summarize(err[scored & ~past]),
            "beyond": summarize(err[scored & past]),
            "beyond_time_share": (float(measured[scored & past].sum()) / total
                                  if total > 0 else 0.0)}


def _fig(d: dict) -> str:
    return (f"per-step MAPE {d['mape_pct']:.2f}% (mean signed {d['mean_signed_pct']:+.2f}%) "
            f"over {d['steps']:,} steps")


def _past_text(d: dict[str, Any], scored: str, past: str) -> str:
    """The sentence on a :func:`_split` with steps beyond: how many of the ``scored`` steps
    ``past`` (what they have beyond the reach), their error, and the error within."""
    b, w = d["beyond"], d["within"]
    return (f"{b['steps']:,} of this run's {b['steps'] + w['steps']:,} scored {scored} "
            f"({d['beyond_time_share']:.0%} of their time) {past}: {_fig(b)}"
            + (f"; within it, {_fig(w)}." if w["steps"] else "."))


def _prefill_text(p: dict[str, Any] | None) -> str:
    """The sentence on the prefill split of :func:`kv_reach` (empty without one)."""
    if not p or not p["within"]["steps"] + p["beyond"]["steps"]:
        return ""
    head = f" Its prefill anchors measured up to {p['anchors_tokens_max']:,} new tokens"
    if not p["beyond"]["steps"]:
        return (head + "; every scored prefill of this run is within that "
                f"({p['within']['steps']:,} steps).")
    return head + ". " + _past_text(p, "prefill steps", "have more")


def reach_text(r: dict[str, Any]) -> str:
    """One paragraph of a fidelity report on :func:`kv_reach`'s figures."""
    power = r.get("attention_power")
    text = f"Its decode anchors measured KV lengths up to {r['anchors_kv_max']:,}"
    if power is not None:
        spread = r.get("power_cost_spread_pct")
        cost = (f"their cost over powers 0 to 1 differs by {spread:.0f}%" if spread is not None
                else "")
        if r.get("attention_resolved") is False:
            text += (f" (attention's ratio between the GPU models taken to the power {power:g}: "
                     "they did not resolve a power, the power moving them apart by less than "
                     "they scatter" + (f"; {cost}" if cost else "") + ")")
        else:
            text += (f" (attention's ratio between the GPU models taken to the power {power:g}, "
                     "chosen from them" + (f": {cost}" if cost else "") + ")")
    pre = _prefill_text(r.get("prefill"))
    if not r["beyond"]["steps"]:
        return (text + f"; every scored decode step of this run is within that "
                f"({r['within']['steps']:,} steps)." + pre)
    return (text + ". " + _past_text(r, "decode steps", "have a longer KV in the batch, where "
                                     "the calibration is extrapolated") + pre)
