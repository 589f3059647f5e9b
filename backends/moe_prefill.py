"""The fused-MoE kernel's block staircase in prefill lookups.

A prefill of ``T`` tokens on a MoE model sends ``T x top_k`` (token, expert) pairs to the fused-MoE
kernel, which pads each expert's pairs to whole blocks of ``BLOCK_SIZE_M`` rows and runs one
program per block and output tile: its time follows the *number of blocks*, and that count is a
staircase in ``T``.  On DeepSeek-V2-Lite at tp 1 (64 experts, 6 per token, 26 MoE layers, 256-row
blocks from 1,024 rows) every expert holds one block up to about 2,400 tokens (about 224 pairs
each), then the experts cross 256 pairs one by one until about 2,900 tokens, where each holds two
(the count goes from 1,664 to 3,058 blocks between 2,396 and 2,903 tokens, and then hardly moves
to 4,096).  The profile measures prefills at 2,048 and 3,072 tokens, 109.0 and 201.9 ms: a line
between them put a 2,522-token prefill at 152 ms, which ran in 122.5 ms live.

So a MoE table's prefill lookup is the grid's bilinear value plus ``c x (B(T) - chord B(T))``:
``B(T)`` the expected block count at ``T`` tokens, ``chord B(T)`` its line between the two grid
tokens around ``T`` (the same segment the bilinear lookup uses), and ``c`` the seconds one block
costs.  On a grid point the term is 0, so measured points stay exact; between them the latency
follows the blocks instead of a line.  The term is 0 outside the tokens axis and in a segment
whose ends take different tiles (the profile measures both sides of each tile threshold, so no
measured segment does).

**The block count** ``B(T)`` is the expectation under the executor's routing (uniform: each token
takes ``top_k`` distinct experts at random, ``backends.aiter.moe.routing_plan``), so an expert's
pairs are Binomial(T, top_k / E) and ``E[ceil(n / M)] = sum_j P(n > j M)``: ``1 - (1 -
p)^T`` for ``j = 0``, a normal tail with continuity correction beyond.  Times the experts this GPU
holds and the MoE layers.  The executor seeds each layer's plan apart, so its realised count is a
sum over 26 or 58 layers of draws; on DeepSeek-V2-Lite it is within 1.5% of the expectation at
every token count tested (1-8,192).  The tile -- and so ``M`` -- is the one AITER's table picks
for the kernel's rows (``backends.aiter.moe.moe_config``): ``T`` without expert parallelism, the
pairs on this GPU (``T x top_k x E_local / E``) with it.

**The block cost** ``c`` is fitted per tile from the grid itself: on each prefix line, the value
that leaves the line's latency minus ``c x B`` straightest (least squares of the second divided
differences of the latency on those of ``B`` over the line's grid tokens in the tile, at least
three), clipped at 0; the tile takes the smallest of its lines' values, since the kernel does not
read the prefix while a long prefix brings the attention's own steps into the same segments (the
table fits it on the grid with :mod:`backends.prefill_waves`'s share taken out).  A
tile keeps its cost only if the blocks at that cost take less than the whole pass at every grid
point, and if, left out one at a time, the grid's interior tokens are predicted better with the
term than by their neighbours' line.  On the shipped DeepSeek-V2-Lite profile the 256-row tile
costs 51.6 us a block (leave-one-out 5.0% against the line's 23.7%) and the 64-row tile 3.3 us;
DeepSeek-V3's FP8 shard, whose prefill is nearly a line in ``T``, keeps no cost in any tile.

Measured (``benchmarks/bench_prefill_sweep.py``, GPU ``25e51672``, 2026-12-03): 38
DeepSeek-V2-Lite prefills between grid tokens err 0.98% at prefix 0 with the term against 9.8%
by the line (worst 2.4% against 24.6%); at prefix 16,384 both erred 4.9%, where the prefill
attention's programs cross a wave of the GPU's slots between 2,048 and 2,240 tokens (a 28 ms
step), which :mod:`backends.prefill_waves` now adds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from backends.interp import _locate
from backends.jit import njit

__all__ = ["MOE_ON", "moe_spec", "moe_params", "expected_blocks", "block_costs", "describe",
           "prefill_block_term", "NPRM"]

# the parameter vector the compiled lookups read (zeros: no MoE, no term)
MOE_ON, MOE_P, MOE_SCALE, MOE_ROWS, MOE_THR0, MOE_THR1, MOE_BM0, MOE_BM1, MOE_BM2 = range(9)
NPRM = 9


def moe_spec(model: Any) -> dict[str, Any] | None:
    """The routed-expert facts a prefill lookup needs, from a profile's model record (a dict or a
    ``ModelShape``); ``None`` for a dense model."""
    get = (model.get if isinstance(model, dict) else (lambda k, d=None: getattr(model, k, d)))
    experts = int(get("experts", 0) or 0)
    if experts <= 0:
        return None
    from backends.aiter.moe import MOE_TILES, TILE_THRESHOLDS, moe_config

    tp = int(get("tp", 1) or 1)
    ep = tp if experts % tp == 0 else 1          # the MLA runner's shard: ep = tp
    fp8 = int(get("dtype_bytes", 2) or 2) == 1
    layers = int(get("layers", 0)) - int(get("dense_layers", 0) or 0)
    return {"experts": experts, "top_k": int(get("experts_per_token")), "ep": ep,
            "experts_local": experts // ep, "moe_layers": layers, "fp8": fp8,
            "routing": "uniform", "tiles": list(MOE_TILES),
            "tile_thresholds": [int(t) for t in TILE_THRESHOLDS],
            "block_m": [moe_config(t, fp8)["BLOCK_SIZE_M"]
                        for t in (0, TILE_THRESHOLDS[0], TILE_THRESHOLDS[1])]}


def moe_params(spec: dict[str, Any] | None) -> np.ndarray:
    """The vector the compiled lookups read (:data:`NPRM` floats; zeros without MoE)."""
    out = np.zeros(NPRM)
    if not spec:
        return out
    E, k = float(spec["experts"]), float(spec["top_k"])
    out[MOE_ON] = 1.0
    out[MOE_P] = k / E
    out[MOE_SCALE] = float(spec["experts_local"]) * float(spec["moe_layers"])
    out[MOE_ROWS] = k * float(spec["experts_local"]) / E if spec["ep"] > 1 else 1.0
    out[MOE_THR0], out[MOE_THR1] = spec["tile_thresholds"]
    out[MOE_BM0], out[MOE_BM1], out[MOE_BM2] = spec["block_m"]
    return out


@njit
def _tile(tokens, prm):
    """The fused-MoE tile (0, 1, 2) AITER's table picks for a pass of ``tokens`` tokens."""
    rows = math.floor(tokens * prm[MOE_ROWS] + 0.5)
    if rows < prm[MOE_THR0]:
        return 0
    if rows < prm[MOE_THR1]:
        return 1
    return 2


@njit
def expected_blocks(tokens, prm):
    """Expected fused-MoE blocks of one pass of ``tokens`` tokens over all MoE layers (module
    docstring); 0 without MoE."""
    if prm[MOE_ON] == 0.0 or tokens <= 0.0:
        return 0.0
    p = prm[MOE_P]
    m = prm[MOE_BM0 + _tile(tokens, prm)]
    mu = tokens * p
    sd = math.sqrt(tokens * p * (1.0 - p))
    s = 1.0 - (1.0 - p) ** tokens
    if sd > 0.0:
        j = 1.0
        while True:
            edge = j * m
            q = 0.5 * math.erfc((edge + 0.5 - mu) / (sd * math.sqrt(2.0)))
            if edge > mu and q < 1e-12:
                break
            s += q
            j += 1.0
    return s * prm[MOE_SCALE]


def _curvature_cost(t: np.ndarray, y: np.ndarray, b: np.ndarray) -> float:
    """The per-block cost that leaves ``y - c b`` straightest along ``t`` (least squares of the
    second divided differences), clipped at 0; 0 with fewer than three points or a straight
    ``b``."""
    if len(t) < 3:
        return 0.0
    d2b = np.diff(np.diff(b) / np.diff(t))
    den = float(np.sum(d2b * d2b))
    if den <= 0.0:
        return 0.0
    d2y = np.diff(np.diff(y) / np.diff(t))
    return max(float(np.sum(d2y * d2b)) / den, 0.0)


def _tile_cost(t: np.ndarray, y: np.ndarray, b: np.ndarray) -> float:
    """One tile's cost: the smallest of its prefix lines' (``y`` ``[point, line]``) -- one cost
    for every line, as the MoE kernel does not read the prefix, while a longer prefix brings the
    attention's own steps into the same segments (its programs crossing a wave of the GPU's
    slots: DeepSeek-V2-Lite at prefix 16,384 steps by 28 ms between 2,048 and 2,240 tokens, with
    the block count flat), which a line's own fit takes for blocks."""
    return min(_curvature_cost(t, y[:, j], b) for j in range(y.shape[1]))


def _loo_gain(t: np.ndarray, y: np.ndarray, b: np.ndarray) -> tuple[float, float, int]:
    """Leave-one-out on one tile: each interior grid token's latencies (every line) predicted
    from its two neighbours, by their line and by the line plus the block term at the tile's
    cost fitted without that token.  Returns the two sums of absolute relative errors (line,
    with the term) and the points scored."""
    line = term = 0.0
    n = 0
    for i in range(1, len(t) - 1):
        keep = np.arange(len(t)) != i
        c = _tile_cost(t[keep], y[keep], b[keep])
        w = (t[i] - t[i - 1]) / (t[i + 1] - t[i - 1])
        chord_b = b[i - 1] + w * (b[i + 1] - b[i - 1])
        for j in range(y.shape[1]):
            chord_y = y[i - 1, j] + w * (y[i + 1, j] - y[i - 1, j])
            line += abs(chord_y / y[i, j] - 1.0)
            term += abs((chord_y + c * (b[i] - chord_b)) / y[i, j] - 1.0)
            n += 1
    return line, term, n


def block_costs(tokens: np.ndarray, values: np.ndarray, prm: np.ndarray,
                report: dict | None = None) -> np.ndarray:
    """Seconds per block for each tile, fitted from a prefill grid (its tokens axis and values
    ``[token, prefix line]``; module docstring): a tile keeps its cost only where the blocks at
    that cost take less than the whole pass at every grid point, and where, left out one at a
    time, the grid's own interior points are predicted better with the term than by the line
    between their neighbours (``report``, when given, receives each tile's two leave-one-out
    errors and the first test)."""
    a0 = np.asarray(tokens, dtype=np.float64)
    out = np.zeros(3)
    if prm[MOE_ON] == 0.0:
        return out
    tiles = np.array([_tile(float(t), prm) for t in a0])
    blocks = np.array([expected_blocks(float(t), prm) for t in a0])
    for tile in range(3):
        idx = np.flatnonzero(tiles == tile)
        if len(idx) < 3:
            continue
        t, b, y = a0[idx], blocks[idx], values[idx, :]
        cost = _tile_cost(t, y, b)
        line, term, points = _loo_gain(t, y, b)
        # the blocks cannot take longer than the whole pass: a larger cost fits noise on a
        # nearly flat count (DeepSeek-V3's 128-row tile: 18 ms a block)
        physical = bool(np.all(cost * b[:, None] <= y))
        if report is not None:
            report[tile] = {"loo_mape_line": line / points, "loo_mape_term": term / points,
                            "within_pass_time": physical}
        if physical and term < line:
            out[tile] = cost
    return out


def describe(spec: dict[str, Any], cost: np.ndarray, fit: dict) -> dict[str, Any]:
    """What a table's ``source["prefill_moe_blocks"]`` says: the rule, each tile's cost and
    the two tests :func:`block_costs` put in ``fit``."""
    names = spec["tiles"]
    return {"rule": "bilinear + per-block cost x (expected fused-MoE blocks - their chord "
                    "between grid tokens) (backends/moe_prefill.py)",
            "us_per_block": {f"{n} ({m}-row blocks)": round(float(c) * 1e6, 2)
                             for n, m, c in zip(names, spec["block_m"], cost)},
            "leave_one_out": {names[k]: {"mape_line": round(float(v["loo_mape_line"]), 5),
                                         "mape_term": round(float(v["loo_mape_term"]), 5),
                                         "within_pass_time": bool(v["within_pass_time"])}
                              for k, v in fit.items()}}


@njit
def prefill_block_term(a0, cost, prm, tokens):
    """Seconds to add to the bilinear prefill lookup at ``tokens`` on the tokens axis ``a0``:
    ``c x (B(T) - chord B(T))`` (module docstring); 0 without MoE, on or outside the axis, and
    in a segment whose ends take different tiles."""
    n = a0.shape[0]
    if prm[MOE_ON] == 0.0 or n < 2 or tokens <= a0[0] or tokens >= a0[n - 1]:
        return 0.0
    lo, w, _ = _locate(a0, tokens)
    t0 = a0[lo]
    t1 = a0[lo + 1]
    tile = _tile(tokens, prm)
    if _tile(t0, prm) != tile or _tile(t1, prm) != tile:
        return 0.0
    b0 = expected_blocks(t0, prm)
    b1 = expected_blocks(t1, prm)
    return cost[tile] * (expected_blocks(tokens, prm) - (b0 + w * (b1 - b0)))
