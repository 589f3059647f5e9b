"""The prefill attention's waves in prefill lookups between grid tokens.

A prefill's attention launch has one program per block of 128 query rows and head (group), and
the GPU holds two of them per SM at once (both kernels below, measured with the driver's occupancy
API: ``backends.aiter.occupancy.prefill_occupancy``), so the launch runs in ``W(T) = ceil(programs
/ slots)`` waves.  After a cached prefix of ``P`` tokens every program reads the whole prefix,
so each wave costs about the same ``v(P)``, growing with ``P``, and the prefix's share of a
prefill's time is a staircase in ``T``: on the shipped profiles the difference between a prefix
line and prefix 0 is ``u(P) + v(P) W(T)`` to within a few percent (Llama-3.1-8B at prefix 16,384:
28-31 ms at 512-1,024 tokens, one wave; 60-61 ms at 1,536-2,048, two; 92, 122, 181 and 245 ms at
3, 4, 6 and 8 waves).  The grid measures few tokens, and a line between two of them in different
waves spreads the step over the segment: DeepSeek-V2-Lite at prefix 16,384 measured 173.7 ms at
2,240 tokens (two waves, as at 3,072) where the line from 2,048 (one wave) put 151.6 ms.

So a prefill lookup adds ``v(P) x (W(T) - chord W(T))`` to the grid's bilinear value (and the
fused-MoE block term, :mod:`backends.moe_prefill`): the chord is ``W``'s line between the two grid
tokens around ``T``, so the term is 0 on grid tokens and between two tokens in the same wave.
``W`` counts in full waves, except a last wave whose programs fit one per SM: each runs alone
on its SM and the wave takes :data:`LONE_WAVE` of a full one (0.75-0.88, measured per head
layout), so ``W`` is the waves before the last plus 1 or that fraction (:func:`wave_units`).

**Programs** (the single request a profile measures; a pass of several requests is looked up at
its total tokens and attention-equivalent prefix, ``backends.latency_table.prefill_axes``):

- MLA models (the prefill runs AITER's varlen flash forward, ``backends.aiter.mla_kernels``,
  128-row tile): ``heads per GPU x ceil(T / 128)``.
- Other models (AITER's ``unified_attention``, whose 2D kernel takes a 128-row tile from 256
  query rows: ``select_2d_config``): ``KV heads per GPU x ceil(T / (128 / query heads per KV
  head))``; its grid has one more block per sequence (``T // block_q + 1``), which holds no rows
  when ``block_q`` divides ``T`` and exits at once (measured: 1,056 tokens of the 8B layout
  take one wave, as 1,024 do, though the grid has 272 programs).  Segments starting below 256 tokens, or below the
  2D kernel's own threshold, get no term: after a prefix of more than 512 keys AITER takes the
  2D kernel only when its 16-row tile's grid exceeds 4 programs per SM (``use_2d_kernel``), and
  runs the split-KV 3D kernel below that (Llama-3.1-8B: from 264 tokens; the 70B tp-8 shard,
  one KV head: from 1,056).

**The wave cost** ``v`` is fitted per prefix line from the grid: the least-squares line of the
prefix's share ``y(T, P) - y(T, 0)`` on ``W(T)`` over the grid tokens whose launch fills at least
half a wave (with fewer programs a launch runs faster per program; the 70B shard's one KV head
gives 33 programs at 512 tokens), whose slope is ``v`` (clipped at 0; its intercept ``u(P)``
is the prefix's cost outside the waves, e.g. MLA's up-projection of the cached latents, which
the bilinear value carries already).  Prefix 0 has no term (its first line), and ``v`` is linear
in the prefix between lines (beyond the last, its last segment extended; below the first, 0).
A line with fewer than two wave counts among those tokens keeps ``v = 0``.  The term is kept
only if, left out one at a time, the grid's interior tokens on the prefix lines are predicted
better with it than by their neighbours' line (``describe`` records both errors).

Fitted on the shipped profiles (ms per wave at the prefix lines): Llama-3.1-8B 3.8 / 15.1 / 30.4
at 2,048 / 8,192 / 16,384; Llama-3.1-70B (tp 8) 7.8 / 38.8 / 78.8; DeepSeek-V2-Lite 13.8 / 27.6 /
56.6 at 8,192 / 16,384 / 32,768; DeepSeek-V3 (tp 8) 16.1 / 31.6 / 63.0 / 95.2 at 4,096 / 8,192 /
16,384 / 24,576.  Leave-one-out on the grids: 4.31% -> 0.84% (8B), 1.51 -> 1.01% (70B), 1.51 ->
0.63% (V2-Lite), 1.06 -> 0.41% (V3).  Scored on prefills measured off the grid on GPUs the
profiles never ran on (``benchmarks/bench_prefill_sweep.py --compare``; docs/backends.md,
*Prefill attention waves*): 8B 4.04% by the line -> 1.15%, 70B 3.12 -> 2.32%, V2-Lite 4.08 ->
0.92% (with the block term).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.interp import _lerp, _locate
from backends.jit import njit

__all__ = ["PREFILL_SLOTS_PER_SM", "LONE_WAVE", "NWPRM", "wave_spec", "wave_params", "waves",
           "wave_units", "wave_costs", "wave_staircase", "describe", "prefill_wave_term"]

#: programs of the prefill attention kernel an SM holds at once (both kernels' 128-row tile:
#: cuOccupancyMaxActiveBlocksPerMultiprocessor on an H200, bench_prefill_sweep.py records it)
PREFILL_SLOTS_PER_SM = 2
#: the 2D unified-attention kernel takes its 128-row tile from this many query rows
DENSE_BIG_TILE_FROM = 256
TILE_ROWS = 128

#: a last wave whose programs fit one per SM, in full waves, by head layout (kernel, programs'
#: head groups, query tokens per program): its programs run alone on their SMs.  Measured on an
#: H200 (GPU d8629476, 2026-12-04, ``benchmarks/bench_prefill_wave_fill.py``: two-layer models,
#: prefix 16,384, the median over last waves of at most 132 programs; over 132 the median is
#: 0.98-1.01): the 8B layout 0.882, the 70B tp-8 shard's 0.752, DeepSeek's MLA 0.854.  Another
#: layout counts a full wave.
LONE_WAVE = {("dense", 8, 32): 0.882, ("dense", 1, 16): 0.752, ("mla", 16, 128): 0.854}

# the parameter vector the compiled lookups read (zeros: no term)
W_ON, W_GROUPS, W_BQ, W_ADD, W_EXTRA, W_SLOTS, W_MINTOK, W_SMS, W_LONE = range(9)
NWPRM = 9


def wave_spec(model: Any, attention: dict | None) -> dict[str, Any] | None:
    """The prefill attention launch's program count and slots, from a profile's model record
    and its attention metadata (for the GPU's SM count); ``None`` without either."""
    if not model or not attention or not attention.get("sms"):
        return None
    get = model.get if isinstance(model, dict) else (lambda k, d=None: getattr(model, k, d))
    tp = int(get("tp", 1) or 1)
    heads, kv_heads = int(get("heads", 0) or 0), int(get("kv_heads", 0) or 0)
    if heads <= 0 or kv_heads <= 0:
        return None
    sms = int(attention["sms"])
    slots = PREFILL_SLOTS_PER_SM * sms
    if get("attention") == "mla":
        groups = max(1, heads // tp)
        return {"kernel": "flash varlen forward (AITER _attn_fwd, 128-row tile)",
                "programs": "heads per GPU x ceil(T / 128)", "groups": groups,
                "block_q": TILE_ROWS, "add": TILE_ROWS - 1, "extra": 0, "slots": slots,
                "sms": sms, "lone_wave": LONE_WAVE.get(("mla", groups, TILE_ROWS), 1.0),
                "min_tokens": 1}
    from backends.aiter.occupancy import attention_grid

    groups = max(1, kv_heads // tp)
    # unified_attention runs its 2D kernel when its decode tile's grid (block_q tokens a
    # program) exceeds target_programs (or the keys are at most 512): the smallest T with
    # groups x (T // block_q + 1) > target_programs
    grid = attention_grid(max(1, heads // tp), groups, 16, sms)
    two_d = grid["block_q"] * (grid["target_programs"] // groups)
    bq = max(1, TILE_ROWS // max(1, heads // kv_heads))
    return {"kernel": "unified_attention 2D (AITER, 128-row tile from 256 query rows)",
            "programs": "KV heads per GPU x ceil(T / block_q) (the grid's one more block per "
                        "sequence holds no rows and exits at once)",
            "groups": groups, "block_q": bq, "add": bq - 1, "extra": 0, "slots": slots,
            "sms": sms, "lone_wave": LONE_WAVE.get(("dense", groups, bq), 1.0),
            "min_tokens": max(DENSE_BIG_TILE_FROM, two_d)}


def wave_params(spec: dict[str, Any] | None) -> np.ndarray:
    """The vector the compiled lookups read (:data:`NWPRM` floats; zeros without a spec)."""
    out = np.zeros(NWPRM)
    if not spec:
        return out
    out[W_ON] = 1.0
    out[W_GROUPS], out[W_BQ] = spec["groups"], spec["block_q"]
    out[W_ADD], out[W_EXTRA] = spec["add"], spec["extra"]
    out[W_SLOTS], out[W_MINTOK] = spec["slots"], spec["min_tokens"]
    out[W_SMS], out[W_LONE] = spec.get("sms", spec["slots"] / 2), spec.get("lone_wave", 1.0)
    return out


@njit
def _programs(tokens, prm):
    return prm[W_GROUPS] * (np.floor((np.floor(tokens) + prm[W_ADD]) / prm[W_BQ]) + prm[W_EXTRA])


@njit
def waves(tokens, prm):
    """Waves of the prefill attention launch of one request of ``tokens`` tokens (at least 1)."""
    if prm[W_ON] == 0.0:
        return 1.0
    return max(1.0, np.ceil(_programs(tokens, prm) / prm[W_SLOTS]))


@njit
def wave_units(tokens, prm):
    """The launch's time in full waves: the waves before the last, and the last one as a full
    wave, or as :data:`LONE_WAVE` of one when its programs fit one per SM."""
    w = waves(tokens, prm)
    if prm[W_ON] == 0.0:
        return w
    last = _programs(tokens, prm) - (w - 1.0) * prm[W_SLOTS]
    return w - 1.0 + (prm[W_LONE] if last <= prm[W_SMS] else 1.0)


def _line_cost(d: np.ndarray, w: np.ndarray) -> float:
    """The slope of ``d`` on ``w`` by least squares with an intercept, clipped at 0; 0 with
    fewer than two distinct ``w``."""
    if len(np.unique(w)) < 2:
        return 0.0
    slope = np.polyfit(w, d, 1)[0]
    return max(float(slope), 0.0)


def _fit(a0: np.ndarray, values: np.ndarray, prm: np.ndarray, skip: int = -1) -> np.ndarray:
    """``v`` per prefix line (0 on the first), from the grid tokens filling half a wave."""
    v = np.zeros(values.shape[1])
    use = np.array([i != skip and t >= prm[W_MINTOK]
                    and _programs(float(t), prm) >= 0.5 * prm[W_SLOTS] for i, t in enumerate(a0)])
    if use.sum() < 2:
        return v
    w = np.array([wave_units(float(t), prm) for t in a0[use]])
    for j in range(1, values.shape[1]):
        v[j] = _line_cost(values[use, j] - values[use, 0], w)
    return v


def _loo(a0: np.ndarray, values: np.ndarray, prm: np.ndarray) -> tuple[float, float, int]:
    """Leave-one-out over the interior grid tokens (segments of the big tile) on the prefix
    lines: each one's prefix share from its neighbours' line, and that plus the term at the
    costs fitted without it.  Returns the two sums of absolute relative errors and the count."""
    line = term = 0.0
    n = 0
    for i in range(1, len(a0) - 1):
        if a0[i - 1] < prm[W_MINTOK]:
            continue
        v = _fit(a0, values, prm, skip=i)
        w = (a0[i] - a0[i - 1]) / (a0[i + 1] - a0[i - 1])
        w0, w1, wi = (wave_units(float(a0[k]), prm) for k in (i - 1, i + 1, i))
        for j in range(1, values.shape[1]):
            d0 = values[i - 1, j] - values[i - 1, 0]
            d1 = values[i + 1, j] - values[i + 1, 0]
            chord = values[i, 0] + d0 + w * (d1 - d0)
            line += abs(chord / values[i, j] - 1.0)
            term += abs((chord + v[j] * (wi - (w0 + w * (w1 - w0)))) / values[i, j] - 1.0)
            n += 1
    return line, term, n


def wave_costs(a0: np.ndarray, a1: np.ndarray, values: np.ndarray, prm: np.ndarray,
               report: dict | None = None) -> np.ndarray:
    """Seconds per wave at each prefix line of a prefill grid (tokens axis ``a0``, prefix axis
    ``a1``, values ``[token, prefix line]``; module docstring); all 0 when the grid has no
    prefix-0 line, when leave-one-out does not favour the term, or without a spec.  ``report``,
    when given, receives the fitted costs and the two leave-one-out errors."""
    a0 = np.asarray(a0, dtype=np.float64)
    v = np.zeros(len(a1))
    if prm[W_ON] == 0.0 or len(a1) < 2 or float(a1[0]) != 0.0:
        return v
    fitted = _fit(a0, values, prm)
    line, term, n = _loo(a0, values, prm)
    keep = bool(n > 0 and term < line and fitted.any())
    if report is not None:
        report.update({"fitted": fitted, "loo_mape_line": line / n if n else None,
                       "loo_mape_term": term / n if n else None, "points": n, "kept": keep})
    return fitted if keep else v


def wave_staircase(a0: np.ndarray, cost: np.ndarray, prm: np.ndarray) -> np.ndarray:
    """``v(P) x W(T)`` on the grid (``[token, prefix line]``): the waves' share of each grid
    value, taken out before the MoE block cost is fitted along the tokens axis."""
    w = np.array([wave_units(float(t), prm) for t in a0])
    return w[:, None] * np.asarray(cost)[None, :]


def describe(spec: dict[str, Any], a1: np.ndarray, cost: np.ndarray, fit: dict) -> dict[str, Any]:
    """What a table's ``source["prefill_attention_waves"]`` says: the rule, the launch, the cost
    per wave at each prefix line and the leave-one-out test."""
    def pct(x):
        return None if x is None else round(float(x) * 100, 3)

    return {"rule": "bilinear + v(prefix) x (attention waves - their chord between grid tokens) "
                    "(backends/prefill_waves.py)",
            "kernel": spec["kernel"], "programs": spec["programs"],
            "slots": spec["slots"], "block_q": spec["block_q"], "groups": spec["groups"],
            "lone_wave": spec.get("lone_wave", 1.0),
            "ms_per_wave": {str(int(p)): round(float(c) * 1e3, 3) for p, c in zip(a1, cost)},
            "leave_one_out": {"mape_line_pct": pct(fit.get("loo_mape_line")),
                              "mape_term_pct": pct(fit.get("loo_mape_term")),
                              "points": fit.get("points", 0), "kept": fit.get("kept", False)},
            # what the grid gave when the test refused it (``ms_per_wave`` is then all 0)
            **({} if fit.get("kept") else {"fitted_ms_per_wave": {
                str(int(p)): round(float(c) * 1e3, 3)
                for p, c in zip(a1, fit.get("fitted", cost))}})}


@njit
def prefill_wave_term(a0, a1, cost, prm, tokens, prefix):
    """Seconds to add to the prefill lookup at (``tokens``, ``prefix``) on the grid axes
    ``a0`` (tokens), ``a1`` (prefix): ``v(prefix) x (W(T) - chord W(T))`` (module docstring);
    0 without the term, at prefix 0 or below, on or outside the tokens axis, and in a segment
    starting below the big tile."""
    n = a0.shape[0]
    if prm[W_ON] == 0.0 or n < 2 or a1.shape[0] < 2 or prefix <= 0.0:
        return 0.0
    if tokens <= a0[0] or tokens >= a0[n - 1]:
        return 0.0
    lo, w, _ = _locate(a0, tokens)
    t0 = a0[lo]
    t1 = a0[lo + 1]
    if t0 < prm[W_MINTOK]:
        return 0.0
    j, u, _ = _locate(a1, prefix)
    v = _lerp(cost[j], cost[j + 1], u)
    w0 = wave_units(t0, prm)
    w1 = wave_units(t1, prm)
    return v * (wave_units(tokens, prm) - (w0 + w * (w1 - w0)))
