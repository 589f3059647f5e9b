"""A calibration's residual by pass size: what its anchors say beyond one factor per group.

``specsched calibrate`` scales each pass group (verify graph, prefill, ...) by one factor, the
median of its anchors' measured / base over the prior (``backends.calibrate.fit_factors``).
Within a group the anchors can disagree with that factor in a pattern: on H100s under the H200
profiles, DeepSeek-V2-Lite's verify graph anchors sit at x0.92-0.93 of the scaled rows at one
token and x1.02-1.07 at 32-192 tokens, its prefill anchors at x0.85 at 256 tokens and x1.11-1.13
at 8,192. The form ``tokens`` (``specsched calibrate --residual tokens``, when measuring or with
``--anchors-from``; opt-in) scales every row by its group's median anchor residual at its token
count, straight between the anchors' counts in ``log2(tokens)`` and flat beyond them; a group
whose anchors measured one count, or whose factor is not applied, keeps its one factor. The
form ``prefill`` does the same for the prefill group alone; every other group keeps its factor.

Evidence (docs/aiter.md, *Each group's residual by pass size*, *On a thirteenth H100* and *On
a fourteenth H100*): on H100s it gained whole-run checks in sample (424 -> 468 over 40 reports)
and on two GPUs' runs recorded after it was written (V2-Lite's long context 6 -> 14-15 of 16 on
all six runs, the 70B +0 / +1 / +1). On the H200s, the profiles' own GPU model, it lost (224 ->
216), and on H100s the 8B lost too (110 -> 104), both through one odd shipped row. So it stays
opt-in. A fifteenth H100 judged it on the 8B and on V2-Lite's conversation runs and it lost there
too, through the draft group (*On a fifteenth H100*). ``prefill`` was written after that, in
sample: over every kept calibration it met 661 checks where ``tokens`` met 665 and the default 560
(H100s, default anchors, 55 pairings), better per step on 39 of them where ``tokens`` was on 19,
and 224 on the H200s where ``tokens`` met 216 (``benchmarks/calibrate_anchor_surface_whatif.py
--checks --only prefill``). The first run recorded after it (a sixteenth H100, V2-Lite's
conversation ``split`` run) left it at 6 of 16 where ``tokens`` met 10: that run's misses were
the verify group's. ``verify-prefill`` was written after that run, in sample: it draws the
verify groups' lines too, where ``tokens`` lost through the draft group's. Over every kept
calibration it met 703 checks where the default met 566 (H100s, default anchors, 56 pairings;
more on 35, fewer on 8; V2-Lite 259 -> 388 over all its 34 H100 pairings), and 320 over all 24
H200 pairings where the default met 317 (``calibrate_anchor_surface_whatif.py --checks --only
verify_graph verify_eager prefill``). Its first judges, a seventeenth H100's four runs, gave 54
checks where the default met 39, but cost the 70B 0.56 points per step through its verify line;
there ``prefill`` was better per step on all four (``benchmarks/residual_forms_scoreboard.py``
tallies every form's judges). A nineteenth H100's runs showed what the all-steps figure hid:
every form's prefill line made the 8B's prefill steps worse on all four of its runs (1.40-2.50
-> 1.78-3.02%; its anchors' line x0.98 at 32 tokens, x1.01 at 8,192) while halving V2-Lite's
(9.9 -> 4.7%); the scoreboard now tallies prefill steps apart. All three forms stay opt-in.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Collection

import numpy as np

from backends.calibrate import group_name

__all__ = ["FORM_GROUPS", "RESIDUAL_FORMS", "apply_residual", "residual_by_size", "residual_note",
           "residual_line", "residual_prior", "residual_text", "tokens_of"]

#: ``specsched calibrate --residual``: ``group`` (one factor per pass group, the default),
#: ``tokens`` (that factor times the group's anchor residual at the row's token count),
#: ``prefill`` (the same for the prefill group alone) or ``verify-prefill`` (for the verify
#: groups, graph and eager, and prefill; the draft and draft-extend groups keep their factor)
RESIDUAL_FORMS = ("group", "tokens", "prefill", "verify-prefill")
#: the groups each form gives a residual line (None: every group whose anchors allow one)
FORM_GROUPS: dict[str, tuple[str, ...] | None] = {
    "tokens": None, "prefill": ("prefill",),
    "verify-prefill": ("verify_graph", "verify_eager", "prefill")}
#: whose rows a form moves, as its notes say it (a form not here: every group's)
_WHOSE = {"prefill": "the prefill group", "verify-prefill": "the verify and prefill groups"}


def tokens_of(r: dict) -> int:
    """A row's or anchor's token count (at least 1): the size ``tokens`` interpolates over."""
    return max(int(r["tokens"]), 1)


def residual_by_size(anchors: list[dict], factors: dict[str, dict],
                     prior: Callable[[dict], float] | None,
                     size: Callable[[dict], int] = tokens_of,
                     groups: Collection[str] | None = None) -> dict[str, dict[int, float]]:
    """``{group: {size: median residual}}``: each anchor's measured / base over its group's
    factor and the prior, the median at each size, for the groups whose factor is applied and
    whose anchors measured two sizes or more (with ``groups``, only those among them)."""
    by: dict[str, dict[int, list[float]]] = {}
    for a in anchors:
        g = group_name(a["kind"], a["graph"])
        f = factors.get(g)
        if f is None or f.get("applied") is False or (groups is not None and g not in groups):
            continue
        rho = (float(a["measured_s"]) / float(a["base_s"]) / float(f["factor"])
               / (prior(a) if prior else 1.0))
        by.setdefault(g, {}).setdefault(size(a), []).append(math.log(rho))
    return {g: {s: math.exp(float(np.median(at[s]))) for s in sorted(at)}
            for g, at in sorted(by.items()) if len(at) >= 2}


def residual_prior(table: dict[str, dict[int, float]], prior: Callable[[dict], float] | None,
                   size: Callable[[dict], int] = tokens_of) -> Callable[[dict], float]:
    """``row -> ratio``: ``prior`` (1 without one) times the row's group residual at its size in
    ``table`` (:func:`residual_by_size`), interpolated in ``log2(size)`` and flat beyond the
    group's sizes; 1 for a group not in it."""
    lines = {g: (np.log2(list(at)), np.log(list(at.values()))) for g, at in table.items()}

    def ratio(r: dict) -> float:
        base = prior(r) if prior else 1.0
        line = lines.get(group_name(r["kind"], r["graph"]))
        if line is None:
            return base
        return base * math.exp(float(np.interp(math.log2(size(r)), *line)))

    return ratio


def residual_note(table: dict[str, dict[int, float]], form: str = "tokens") -> dict[str, Any]:
    """What a calibration's metadata keeps of the form: ``{"form": FORM, "by_group":
    {group: [[tokens, residual], ...]}}``."""
    return {"form": form,
            "by_group": {g: [[int(s), round(v, 6)] for s, v in at.items()]
                         for g, at in table.items()}}


def apply_residual(form: str, anchors: list[dict], factors: dict[str, dict],
                   prior: Callable[[dict], float] | None
                   ) -> tuple[Callable[[dict], float] | None, dict[str, Any] | None]:
    """``(prior, note)`` of a fit under the form ``form``: ``group`` leaves ``prior`` as it is
    (note None); ``tokens`` multiplies it by each group's anchor residual by token count
    (:func:`residual_prior`), ``prefill`` by the prefill group's alone, ``verify-prefill`` by
    the verify groups' and the prefill group's, with the table the
    calibration records (:func:`residual_note`). Both calibrate paths, measuring and
    ``--anchors-from``, call this after the fit."""
    if form not in RESIDUAL_FORMS:
        raise ValueError(f"residual form must be one of {RESIDUAL_FORMS}, got {form!r}")
    if form == "group":
        return prior, None
    table = residual_by_size(anchors, factors, prior, groups=FORM_GROUPS[form])
    return residual_prior(table, prior), residual_note(table, form)


def _whose(note: dict[str, Any]) -> str:
    return _WHOSE.get(note.get("form", "tokens"), "each group")


def residual_text(note: dict[str, Any] | None) -> str:
    """What a calibration's note line says of the form: empty for ``group``."""
    return "" if note is None else f"; {_whose(note)} x the anchors' residual by token count"


def residual_line(note: dict[str, Any]) -> str:
    """One paragraph of a fidelity report on a calibration's residual table (its metadata's
    ``residual``, :func:`residual_note`)."""
    groups = "; ".join(f"{g} " + ", ".join(f"{int(t):,}: x{float(v):.3f}" for t, v in pts)
                       for g, pts in (note.get("by_group") or {}).items())
    who = _whose(note)
    who = who + ("'" if who.endswith("s") else "'s")
    form = note.get("form", "tokens")
    return (f"{who[0].upper()}{who[1:]} rows also take the anchors' residual by token "
            f"count (`calibrate --residual {form}`), straight between these counts in log2 "
            "and flat beyond: "
            + (groups or "no group had anchors at two counts") + ".")
