"""The roofline's time ratio between two GPU models: the prior a calibration to another model fits.

``specsched calibrate`` fits one scale per pass group (``backends.calibrate``), which is all a
profile needs on another GPU of its own model: there every group's ratio is flat within 1-3%.
On another GPU model it is not. Measured on an H100 against the H200 profiles (2026-12-05,
``benchmarks/results/h100-2026-12-05``), measured / base runs from 1.28-1.41 for passes of 1-60
tokens (they read weights: the H200 has 4.8 TB/s, the H100 3.35) down to 1.00-1.06 from 512
tokens (they compute: both 989 TFLOP/s), within one group; a median per group then errs by up
to 9% on whichever shapes its anchors did not sit near.

The prior gives each shape the roofline backend's ratio (:mod:`backends.roofline`: weights,
KV and activations read at the sheet's bandwidth, GEMMs at its FLOP/s, whichever is longer per
kernel class): ``prior(row) = roofline(row, this GPU's sheet) / roofline(row, the base's
sheet)``. The fit then takes, per group, the median of ``measured / (base x prior)`` over its
anchors, and scales each row by that factor times its own prior. Between two GPUs of one sheet
the prior is 1 and nothing changes; it is used (``specsched calibrate --prior roofline``, and
with attention's part raised to a fitted power by ``--prior fitted``, the default since
2026-12-06: :func:`fit_attention_power`) only when both GPUs have a sheet
(:data:`backends.hardware.GPUS`) and the sheets differ.

Measured on two H100s against the H200 profiles (``benchmarks/results/h100-2026-12-05`` and
``-05b``; the second GPU's calibrations and live runs recorded after this form was fixed), with the
default anchors it brought per-step MAPE down on six of seven live runs: the 8B's conversation runs
2.08 -> 1.72% and 1.74 -> 1.63%, its ``split`` runs 5.78 -> 2.18% and 5.46 -> 1.82%, the 70B's 1.76
-> 1.03% and 1.62 -> 0.92% (16 of 16 checks); and up on the 8B's long-context run, 3.03 -> 3.32%,
where the roofline reads attention over long KV as bandwidth-bound while the H100 ran it about as
fast as the H200. With anchors chosen by ``--trace`` (a conversation run's: graphs only) it moved
the conversation run by under 0.1 point and first made the ``split`` run worse (1.64 -> 3.53%):
eager verify had no anchor of its own and took the median residual of all anchors, 0.92 (17 of the
25 were the verify graph's, whose own was 0.903), where the four default calibrations' eager groups
had 0.963-0.995. A group without anchors now takes the prior alone
(``backends.calibrate.fit_factors``): that run 1.79%, the same requests on the second H100 1.76%
(against 1.64% and 1.44% with ``--prior none``). ``--prior none`` fits one scale per group.

``--prior fitted`` (the default since 2026-12-06) raises the attention part of the ratio to the
power its anchors choose (:func:`fit_attention_power`). It also records how well one factor per
group and no prior at all would fit them (``no_prior_cost``, :func:`anchor_cost`), but does not
choose that: from 5c51b30 to this change it did when that cost was lower, and the first live runs
to judge it said no. On DeepSeek-V2-Lite's H100 anchors no prior fitted them a little better
(cost 1.14 against 1.21 at power 0, ``h100-2026-12-06c``), but against three live runs on that GPU
(two of them recorded twice) no prior erred 4.57-4.85% per step and power 0 2.05-2.45%
(``benchmarks/calibrate_prior_whatif.py``). The cost weighs every group alike, and what favoured
no prior was the prefill group; the verify graph, where the runs spend most time, fitted about
as well either way, and its one factor without a prior left their verify graphs 9-11% too fast.

The power is kept only when the anchors resolve it (:func:`attention_resolved`); otherwise
attention keeps the base's time (power 0). The 70B shard's ``calibrate --trace`` anchors on its
conversation trace under ``fixed`` (decode KV to 2,048) chose power 1 on two H100s by a cost
6-7% below power 0's, while moving the power shifts their verify anchors apart by 1.2% and they
scatter by 6%; the long-context runs then erred 2.48-2.50% per step, and 1.26-1.32% at power 0
(``h100-2026-12-06j``, ``-06l``, ``-06m``; the second GPU's runs recorded before this rule was
written, which was written after seeing them).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import numpy as np

from backends.calibrate import fit_factors, group_name, settle_prefill

__all__ = ["PRIOR_MODES", "sheet_of", "other_models", "roofline_prior", "anchor_cost",
           "fit_attention_power", "attention_resolved", "prior_for", "fit_with_prior", "prior_text", "prior_summary"]


#: device-name words of parts other than the sheets' (every sheet is an SXM or OAM part: an
#: H100 PCIe or NVL has other bandwidth and clocks than the H100 sheet)
OTHER_PARTS = ("PCIe", "NVL")


def sheet_of(device: Any) -> str | None:
    """The GPU sheet (a key of :data:`backends.hardware.GPUS`) whose name is a word of
    ``device`` (a device name such as ``"NVIDIA H100 80GB HBM3"``, or a dict with ``name``), the
    longest such; None when none is, or when the name is of another part of that GPU
    (:data:`OTHER_PARTS`)."""
    from backends.hardware import GPUS

    name = device.get("name") if isinstance(device, dict) else device
    if not name or any(re.search(rf"\b{p}\b", str(name), re.I) for p in OTHER_PARTS):
        return None
    hits = [k for k in GPUS if re.search(rf"(?<![\w]){re.escape(k)}(?![\w])", str(name), re.I)]
    return max(hits, key=len) if hits else None


def roofline_parts(model: Any, base_sheet: str, here_sheet: str
                   ) -> Callable[[dict], tuple[float, float, float, float]]:
    """``row -> (rest on base_sheet, attention on base_sheet, rest on here_sheet, attention on
    here_sheet)``, the roofline's time of a row's attention and of everything else
    (``backends.roofline.breakdown``), for rows with ``kind``, ``graph``, ``bs``, ``width``,
    ``kv_len`` and ``tokens``; memoised by shape."""
    from backends import roofline as rl

    memo: dict[tuple, tuple[float, float, float, float]] = {}

    def parts(r: dict) -> tuple[float, float, float, float]:
        key = tuple(r[k] for k in ("kind", "graph", "bs", "width", "kv_len", "tokens"))
        if key not in memo:
            kw = dict(kind=str(r["kind"]), bs=int(r["bs"]), width=int(r["width"]),
                      kv=int(r["kv_len"]), tokens=int(r["tokens"]), prefix=int(r["kv_len"]),
                      graph=bool(r["graph"]))
            a, b = rl.breakdown(model, base_sheet, **kw), rl.breakdown(model, here_sheet, **kw)
            aa, ba = a.get("attention", 0.0), b.get("attention", 0.0)
            memo[key] = (sum(a.values()) - aa, aa, sum(b.values()) - ba, ba)
        return memo[key]

    return parts


def roofline_prior(model: Any, base_sheet: str, here_sheet: str, attention_power: float = 1.0
                   ) -> Callable[[dict], float]:
    """``row -> roofline(row, here_sheet) / roofline(row, base_sheet)`` for rows with ``kind``,
    ``graph``, ``bs``, ``width``, ``kv_len`` and ``tokens`` (a profile's grid rows, or anchors),
    ``model`` being the profile's :class:`~backends.models.ModelShape`, from the roofline's
    parts (:func:`roofline_parts`). ``attention_power`` (below 1): the attention part scales
    by its own ratio to that power (0: attention at the base sheet's time), the rest of the
    pass by the roofline's,
    ``(rest_here + attn_base x (attn_here / attn_base) ** power) / (rest_base + attn_base)``;
    ``benchmarks/calibrate_prior_whatif.py`` scores it and :func:`fit_attention_power` picks
    the power from a calibration's own anchors."""
    parts = roofline_parts(model, base_sheet, here_sheet)

    def prior(r: dict) -> float:
        rest_a, att_a, rest_b, att_b = parts(r)
        att = att_a * (att_b / att_a) ** attention_power if att_a > 0 else att_b
        return (rest_b + att) / (rest_a + att_a)

    return prior


#: ``specsched calibrate --prior``: ``fitted`` (the default: the roofline's ratio with attention's
#: own ratio raised to the power the anchors choose, :func:`fit_attention_power`), ``roofline`` (that power fixed at 1) or ``none``
#: (one scale per group)
PRIOR_MODES = ("fitted", "roofline", "none")


def _by_group(anchors: list[dict], value: Callable[[dict], float]) -> dict[str, list[float]]:
    """``value`` of each anchor, listed under its pass group, groups in first-seen order."""
    by: dict[str, list[float]] = {}
    for a in anchors:
        by.setdefault(group_name(a["kind"], a["graph"]), []).append(value(a))
    return by


def _log_residuals(anchors: list[dict], prior: Callable[[dict], float] | None
                   ) -> dict[str, list[float]]:
    """``log(measured / (base x prior))`` of each anchor by group (None: no prior)."""
    return _by_group(anchors, lambda a: math.log(
        float(a["measured_s"]) / float(a["base_s"]) / (prior(a) if prior else 1.0)))


def anchor_cost(anchors: list[dict], prior: Callable[[dict], float] | None) -> float:
    """How far a calibration's anchors are from one factor per group against ``prior`` (None:
    no prior): the sum, over the anchors, of ``|log(measured / (base x prior)) - its group's
    median|``. Zero when every group's anchors share one ratio."""
    return float(sum(np.abs(np.asarray(v) - np.median(v)).sum()
                     for v in _log_residuals(anchors, prior).values()))


def fit_attention_power(model: Any, anchors: list[dict], base_sheet: str, here_sheet: str,
                        powers: Sequence[float] = tuple(i / 10 for i in range(11))
                        ) -> tuple[float, dict[float, float]]:
    """The ``attention_power`` of :func:`roofline_prior` under which a calibration's anchors
    (dicts with the shape columns, ``base_s`` and ``measured_s``) agree best with one factor per
    group (the least :func:`anchor_cost`); ties to the larger power (nearer the roofline).
    Returns it and the cost at each power."""
    cost = {p: anchor_cost(anchors, roofline_prior(model, base_sheet, here_sheet, p))
            for p in powers}
    best = min(cost.values())
    return max(p for p, c in cost.items() if c <= best + 1e-12), cost


#: groups with fewer anchors do not count in :func:`attention_resolved`: one power can put two
#: anchors of a group on one ratio whatever they measured, so their scatter says nothing
RESOLVE_MIN_ANCHORS = 3


def attention_resolved(model: Any, anchors: list[dict], base_sheet: str, here_sheet: str,
                       power: float) -> dict:
    """Whether a calibration's anchors can tell attention powers apart at all.

    Per group of at least :data:`RESOLVE_MIN_ANCHORS` anchors, the ``lever`` is how far apart
    moving the power from 0 to 1 can shift two of its anchors (the span of ``log(prior at 1 /
    prior at 0)`` over them: a shift shared by all is absorbed by the group's factor), and the
    ``scatter`` is the span of their ``log(measured / (base x prior))`` at ``power``, what one
    factor leaves unexplained. The power is resolved when some group's lever is larger than its
    scatter; otherwise whatever the power explains lies within the anchors' own spread (decode
    anchors that stop at KV 2,048 see little attention on a dense model), and the fit's choice
    among powers is noise. Returns ``{"resolved": bool, "groups": {group: {"lever", "scatter"}}}``
    (log spans, rounded to 1e-6)."""
    p0, p1, at = (roofline_prior(model, base_sheet, here_sheet, p) for p in (0.0, 1.0, power))
    levers = _by_group(anchors, lambda a: math.log(p1(a) / p0(a)))
    residuals = _log_residuals(anchors, at)
    groups = {g: {"lever": round(max(lever) - min(lever), 6),
                  "scatter": round(max(residuals[g]) - min(residuals[g]), 6)}
              for g, lever in sorted(levers.items()) if len(lever) >= RESOLVE_MIN_ANCHORS}
    return {"resolved": any(x["lever"] > x["scatter"] for x in groups.values()),
            "groups": groups}


def other_models(base_gpu: Any, here_gpu: Any) -> tuple[str, str] | None:
    """The two GPUs' sheets (base's, here's) when both have one and they differ: a calibration
    to another GPU model than its base's; None otherwise."""
    base, here = sheet_of(base_gpu), sheet_of(here_gpu)
    return (base, here) if base and here and base != here else None


def prior_for(model: Any, base_gpu: Any, here_gpu: Any, mode: str = "fitted",
              anchors: list[dict] | None = None
              ) -> tuple[Callable[[dict], float] | None, dict | None]:
    """The prior a calibration of a profile recorded on ``base_gpu`` to ``here_gpu`` (device
    names or dicts) uses, and what its metadata records of it: ``(None, None)`` with ``mode``
    ``"none"``, or when either GPU has no sheet or both have the same one (the roofline's ratio
    is then 1).  ``fitted`` needs the calibration's ``anchors`` (with ``base_s`` and
    ``measured_s``): the attention power is chosen from them (:func:`fit_attention_power`); the
    note also records their cost with no prior (:func:`anchor_cost`), which is not a choice
    (the module's docstring says why)."""
    if mode not in PRIOR_MODES:
        raise ValueError(f"prior mode {mode!r}: choose one of {', '.join(PRIOR_MODES)}")
    sheets = other_models(base_gpu, here_gpu)
    if mode == "none" or sheets is None:
        return None, None
    base, here = sheets
    note = {"rule": mode, "base_sheet": base, "here_sheet": here,
            "how": "per group, the factor is the median of measured / (base x prior) over its "
                   "anchors; each row is scaled by the factor times its prior, prior = the "
                   "roofline backend's time of the row's shape on here_sheet over base_sheet"}
    if mode == "roofline":
        return roofline_prior(model, base, here), note
    if not anchors:
        raise ValueError("the fitted prior needs the calibration's anchors")
    best, cost = fit_attention_power(model, anchors, base, here)
    resolved = attention_resolved(model, anchors, base, here, best)
    power = best if resolved["resolved"] else 0.0
    note.update(attention_power_cost={f"{p:g}": round(c, 6) for p, c in cost.items()},
                no_prior_cost=round(anchor_cost(anchors, None), 6), attention_power=power,
                attention_power_best=best, attention_resolved=resolved)
    note["how"] += (", its attention part scaled by attention's own ratio to attention_power: "
                    "the power of 0, 0.1, ..., 1 under which the anchors agree best with one "
                    "factor per group (least sum of |log residual - its group's median|; ties "
                    "to the larger), attention_power_best, when the anchors resolve it "
                    "(attention_resolved: in some group of 3 or more anchors the power can move "
                    "two of them further apart than they scatter), else 0 (attention at the "
                    "base's measured time: the anchors did not measure its ratio); "
                    "no_prior_cost is that sum with no prior, recorded only")
    return roofline_prior(model, base, here, power), note


def fit_with_prior(model: Any, anchors: list[dict], groups: Any, base_gpu: Any, here_gpu: Any,
                   *, prior: str, prefill: str) -> tuple[Callable[[dict], float] | None,
                                                         dict | None, dict[str, dict]]:
    """A calibration's whole fit, as ``specsched calibrate`` and a re-fit (``--anchors-from``)
    make it: the prior (:func:`prior_for`, mode ``prior``), each group's factor over it
    (``backends.calibrate.fit_factors``) and the prefill group settled by ``prefill``
    (``backends.calibrate.settle_prefill``, told whether ``here_gpu`` is another GPU model than
    ``base_gpu``). Returns (the prior or None, its note or None, the factors)."""
    shape_prior, note = prior_for(model, base_gpu, here_gpu, prior, anchors)
    factors = settle_prefill(fit_factors(anchors, groups, shape_prior), prefill,
                             moe=model.is_moe,
                             other_model=other_models(base_gpu, here_gpu) is not None)
    return shape_prior, note, factors


def prior_text(note: dict | None) -> str:
    """What a calibration's notes add after its factors: `` x the roofline's H100 / H200 ratio
    per shape`` (its factors are over that prior; with a fitted prior ``, attention's to the
    power 0.1``), or nothing without one."""
    if not note:
        return ""
    power = note.get("attention_power")
    unresolved = (note.get("attention_resolved") or {}).get("resolved") is False
    return (f" x the roofline's {note['here_sheet']} / {note['base_sheet']} ratio per shape"
            + ("" if power is None else f", attention's to the power {power:g}")
            + (" (the anchors did not resolve a power)" if unresolved else ""))


def prior_summary(note: dict | None) -> dict | None:
    """The prior in a command's printed summary: ``{"rule", "base_sheet", "here_sheet"}`` (and
    ``attention_power`` when fitted, with ``attention_resolved``, whether the anchors resolved
    it, when the note records that), or None without one."""
    if not note:
        return note
    out = {k: note[k] for k in ("rule", "base_sheet", "here_sheet", "attention_power")
           if k in note}
    if isinstance(note.get("attention_resolved"), dict):
        out["attention_resolved"] = note["attention_resolved"]["resolved"]
    return out
