"""How long a decided iteration takes: each pass looked up in the latency table (at its
straggler-aware KV coordinate) and the passes combined with the scheduler's host time."""

from __future__ import annotations

import numpy as np

from backends.jit import njit
from backends.attention_kv import (ATT_DLAYERS, ATT_FNSAT, ATT_FOVH, ATT_LAYERS, ATT_ON,
                                   attention_params,
                                   attention_rows, effective_kv, verify_kv)
from backends.latency_table import prefill_lookup
from backends.mla_fluid import fluid_kv
from backends.mla_waves import interp2_waves, interp3_waves, kernel_rows
from simulator.layout import *  # noqa: F401,F403  (the state layout's column names)


def set_attention(CF: np.ndarray, att, model=None) -> bool:
    """Put a profile's ``attention`` metadata (and its model's layers, for the 2D kernel's
    lone-straggler form) into ``CF[CF_ATT:]``; without it (``None``, or an older profile) lookups
    use the mean KV.  True when set."""
    CF[CF_ATT:] = attention_params(att, model)
    return bool(CF[CF_ATT + ATT_ON])


@njit
def verify_width(r, p, PI):
    """The width a verify pass is looked up at: the launch width of a uniform launch, tokens per
    request of a ragged or unsafe-derived one (``backends.latency_table.verify_axes``)."""
    if PI[r, p, P_MODE] == MODE_UNIFORM:
        return float(PI[r, p, P_WIDTH])
    return PI[r, p, P_TOKENS] / float(PI[r, p, P_BS])


@njit
def pass_kv(r, p, PI, PF, CF, tab):
    """The KV coordinate pass ``p`` is looked up at (prefill: its attention-equivalent prefix).

    Verify and draft-extend launches read the grid they are looked up on in ``tab``
    (:func:`backends.attention_kv.verify_kv`); draft passes use the waves and tail rule."""
    kind = PI[r, p, P_KIND]
    if kind == KIND_PREFILL:
        return PF[r, p, PF_PREFIX]
    nseq = float(PI[r, p, P_BSPAD])
    draft = kind == KIND_DRAFT  # a draft-extend pass has `width` query rows, like a verify
    graph = PI[r, p, P_GRAPH] == 1
    rows = attention_rows(draft, graph, nseq, float(PI[r, p, P_WIDTH]), float(PI[r, p, P_TOKENS]))
    kvsum = PF[r, p, PF_KVSUM]
    kvmax = float(PI[r, p, P_KVMAX])
    nreal = float(PI[r, p, P_BS])
    att = CF[CF_ATT:]
    if draft:
        return effective_kv(kvsum, kvmax, nseq, nreal, rows, True, att)
    (vg0, vg1, vg2, vgv, ve0, ve1, ve2, vev, dg0, dg1, dgv, de0, de1, dev, pf0, pf1, pfv,
     xg0, xg1, xg2, xgv, xe0, xe1, xe2, xev, pfc, pfm, pfw, pfwp, plt, plv) = tab
    if kind == KIND_EXTEND:
        w = float(PI[r, p, P_WIDTH])
        layers = att[ATT_DLAYERS]
        if graph:
            return verify_kv(kvsum, kvmax, nseq, nreal, rows, layers, att, xg0, xg1, xg2, xgv,
                             nseq, w)
        return verify_kv(kvsum, kvmax, nseq, nreal, rows, layers, att, xe0, xe1, xe2, xev, nseq, w)
    w = verify_width(r, p, PI)
    layers = att[ATT_LAYERS]
    if graph:
        return verify_kv(kvsum, kvmax, nseq, nreal, rows, layers, att, vg0, vg1, vg2, vgv, nseq, w)
    return verify_kv(kvsum, kvmax, nseq, nreal, rows, layers, att, ve0, ve1, ve2, vev, nseq, w)


@njit
def _fluid_lookups(r, PI, PF, E, CF, tab, MB, fs):
    """``backend.kv_lookup = fluid`` on an MLA profile: each verify and draft-extend pass's KV
    from its members' KV in launch order (:func:`backends.mla_fluid.fluid_kv`, ``fs`` its
    scratch), where it applies; the rule's coordinate stays where it does not."""
    (vg0, vg1, vg2, vgv, ve0, ve1, ve2, vev, dg0, dg1, dgv, de0, de1, dev, pf0, pf1, pfv,
     xg0, xg1, xg2, xgv, xe0, xe1, xe2, xev, pfc, pfm, pfw, pfwp, plt, plv) = tab
    att = CF[CF_ATT:]
    for p in range(E[r, E_NPASS]):
        kind = PI[r, p, P_KIND]
        if kind != KIND_VERIFY and kind != KIND_EXTEND:
            continue
        graph = PI[r, p, P_GRAPH] == 1
        j0 = PI[r, p, P_MSTART]
        n = PI[r, p, P_MCOUNT]
        kv = MB[r, j0:j0 + n, M_KV]
        bs = PI[r, p, P_BSPAD]
        if kind == KIND_EXTEND:
            w = float(PI[r, p, P_WIDTH])
            g0, g1, g2, gv = (xg0, xg1, xg2, xgv) if graph else (xe0, xe1, xe2, xev)
        else:
            w = verify_width(r, p, PI)
            g0, g1, g2, gv = (vg0, vg1, vg2, vgv) if graph else (ve0, ve1, ve2, vev)
        k = fluid_kv(kv, n, bs, w, kernel_rows(w), att, att[ATT_FNSAT], att[ATT_FOVH],
                     g0, g1, g2, gv, fs)
        if k >= 0.0:
            PF[r, p, PF_LOOKUP] = k


@njit
def _set_lookups(r, PI, PF, E, CF, tab, MB, fs):
    """The lookup coordinate of every pending pass, once (both timing paths record it); under
    ``backend.kv_lookup = fluid`` (``CF[CF_ATT + ATT_FNSAT] > 0``, an MLA profile) verify and
    draft-extend passes then take :func:`_fluid_lookups`'s."""
    for p in range(E[r, E_NPASS]):
        PF[r, p, PF_LOOKUP] = pass_kv(r, p, PI, PF, CF, tab)
    if CF[CF_ATT + ATT_FNSAT] > 0.0:
        _fluid_lookups(r, PI, PF, E, CF, tab, MB, fs)


@njit
def _time_passes(r, PI, PF, E, CF, tab):
    """Latency of every pending pass from the latency table (the fast path); on an MLA profile a
    batch size between grid points is interpolated in decode waves (``backends.mla_waves``)."""
    (vg0, vg1, vg2, vgv, ve0, ve1, ve2, vev, dg0, dg1, dgv, de0, de1, dev, pf0, pf1, pfv,
     xg0, xg1, xg2, xgv, xe0, xe1, xe2, xev, pfc, pfm, pfw, pfwp, plt, plv) = tab
    att = CF[CF_ATT:]
    for p in range(E[r, E_NPASS]):
        kind = PI[r, p, P_KIND]
        oog = False
        if kind == KIND_PREFILL:
            tok = float(PI[r, p, P_TOKENS])
            lat, oog = prefill_lookup(pf0, pf1, pfv, pfc, pfm, pfw, pfwp, plt, plv, tok,
                                      PF[r, p, PF_LOOKUP])
        elif kind == KIND_DRAFT:
            bs = float(PI[r, p, P_BSPAD])
            kv = PF[r, p, PF_LOOKUP]
            if PI[r, p, P_GRAPH] == 1:
                lat, oog = interp2_waves(dg0, dg1, dgv, bs, kv, att)
            else:
                lat, oog = interp2_waves(de0, de1, dev, bs, kv, att)
            lat = lat * PI[r, p, P_PASSES]
        elif kind == KIND_EXTEND:
            bs = float(PI[r, p, P_BSPAD])
            w = float(PI[r, p, P_WIDTH])
            kv = PF[r, p, PF_LOOKUP]
            if PI[r, p, P_GRAPH] == 1:
                lat, oog = interp3_waves(xg0, xg1, xg2, xgv, bs, w, kv, w, att)
            else:
                lat, oog = interp3_waves(xe0, xe1, xe2, xev, bs, w, kv, w, att)
        else:
            bs = float(PI[r, p, P_BSPAD])
            kv = PF[r, p, PF_LOOKUP]
            w = verify_width(r, p, PI)
            if PI[r, p, P_GRAPH] == 1:
                lat, oog = interp3_waves(vg0, vg1, vg2, vgv, bs, w, kv, w, att)
            else:
                lat, oog = interp3_waves(ve0, ve1, ve2, vev, bs, w, kv, w, att)
        PF[r, p, PF_LAT] = lat
        PF[r, p, PF_ERR] = np.nan
        PI[r, p, P_OOG] = 1 if oog else 0
    E[r, E_TIMED] = 1


@njit
def iteration_time(r, E, EF, PF, CI, CF):
    """Wall time of the pending iteration: its passes back to back, plus the scheduler's host
    time between iterations, or, with overlap scheduling, the longer of the two (the host
    prepares the next batch while the GPU runs this one); plus the controller's switching cost
    when the round changed its draft count."""
    gpu = 0.0
    for p in range(E[r, E_NPASS]):
        gpu += PF[r, p, PF_LAT]
    if CI[C_OVERLAP] == 1:
        return max(gpu, CF[CF_OVERHEAD]) + EF[r, EF_SWITCH]
    return gpu + CF[CF_OVERHEAD] + EF[r, EF_SWITCH]
