"""MoE layers (DeepSeek-style: routed top-k experts plus always-on shared experts) from AITER's
Triton fused-MoE kernel.

One layer, in SGLang's order for DeepSeek-V2 (``DeepseekV2MoE``):

1. router logits ``x @ W_gate^T`` (cuBLAS), softmax, top-k (``aiter.ops.triton.topk``) -- greedy
   top-k of the softmax scores, weights not renormalised (V2-Lite: ``norm_topk_prob`` false,
   ``routed_scaling_factor`` 1);
2. ``aiter.ops.triton.moe_align_block_size.moe_align_block_size_triton`` sorts the (token, expert)
   pairs by expert into blocks of ``BLOCK_SIZE_M``;
3. ``aiter.ops.triton.moe_op.fused_moe`` for the gate/up GEMM of every routed expert, SiLU-and-mul,
   ``fused_moe`` again for the down GEMM with the routing weights folded in, and the sum over the
   top-k;
4. the shared experts as one dense MLP of width ``n_shared * moe_intermediate`` (cuBLAS), added.

**Expert parallelism** (``g["ep"] > 1``: DeepSeek-V3's shard at tp 8 / ep 8).  This GPU holds
``experts / ep`` routed experts (rank 0's: global ids ``0 .. E/ep - 1``) and the shared expert's
tp shard (``shared_intermediate`` is already divided by tp).  The router runs over every row and
all ``E`` experts, as on every rank; the (row, expert) pairs that fall on this GPU's experts are
then gathered into one row each (DeepEP's low-latency layout: one received row per pair), run
through ``fused_moe`` with one expert per row, weighted by the router's probability for that
pair, and added back to their rows (``index_add``).  Which pairs are local follows from the
routing plan, so the layout is built on the host at start-up (``src``/``lid``/``gid`` per local
pair, ``cum`` per row count): a forward of ``T`` rows takes the first ``cum[T]`` pairs, a static
shape for its graph.  The dispatch and combine all-to-alls that would move the pairs between
GPUs are not run; the runner models their time (:func:`ep_comm_time_s`).

**FP8** (``g["fp8"]``): expert weights are float8_e4m3fn with a float32 scale per 128 x 128
block, activations are quantised per row and 128-value group, and ``fused_moe`` runs with
``use_fp8_w8a8`` and ``block_shape=[128, 128]``; the shared expert is an
:class:`backends.aiter.fp8.Fp8Linear` pair (:mod:`backends.aiter.fp8`).

**Routing.**  Weights and activations are random, so a router's choice would depend on noise.
The layer therefore steers it: a static bias (+32) is added to the router logits at the experts
planned for each row, so the real softmax/top-k kernels run and return the planned experts.  The
plan is ``uniform`` by default -- each row draws ``top_k`` distinct experts uniformly at random
(seeded): a balanced router -- or ``skewed`` -- experts drawn without replacement with
probabilities ``~ 1 / rank^s`` (``s`` = ``skew``, Zipf-like; a fixed random permutation says which
expert has which rank): a router that favours a few experts, so fewer distinct experts' weights
are read.  Timing depends on how many rows each expert receives, not on which expert it is.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from traces.errors import SpecschedError

__all__ = ["ROUTINGS", "MOE_TILES", "TILE_THRESHOLDS", "align_blocks", "routing_plan", "moe_tile",
           "moe_config", "MoE", "ep_layout", "ep_comm_time_s"]

ROUTINGS = ("uniform", "skewed")

#: bias added to the router logits at the planned experts (far above any logit of random weights)
STEER = 32.0

#: AITER's MI300X fused-MoE table (``configs/moe/MI300X-MOE-DEFAULT.json``) by token count, without
#: the AMD-only launch keys; AITER ships no table for NVIDIA GPUs.
_MOE_CONFIGS = {
    "small_M": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 4,
                "num_warps": 8, "num_stages": 2},
    "medium_M": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 8,
                 "num_warps": 8, "num_stages": 2},
    "large_M": {"BLOCK_SIZE_M": 256, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8,
                "num_warps": 8, "num_stages": 2},
}


#: AITER's MI300X table for FP8 weights and activations (``MI300X-MOE-FP8_W8A8.json``, which
#: AITER's ``get_optimal_moe_config`` picks when ``use_fp8_w8a8``), without the AMD-only keys
_MOE_CONFIGS_FP8 = {
    "small_M": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 4,
                "num_warps": 8, "num_stages": 2},
    "medium_M": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                 "num_warps": 8, "num_stages": 2},
    "large_M": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                "num_warps": 8, "num_stages": 2},
}


#: AITER's tiles by row count, and the row counts from which the next larger one is used
MOE_TILES = ("small_M", "medium_M", "large_M")
TILE_THRESHOLDS = (256, 1024)


def moe_tile(tokens: int) -> str:
    """The fused-MoE tile AITER's table picks for ``tokens`` rows: ``small_M`` below 256,
    ``medium_M`` below 1024, ``large_M`` from there."""
    lo, hi = TILE_THRESHOLDS
    return MOE_TILES[0] if tokens < lo else (MOE_TILES[1] if tokens < hi else MOE_TILES[2])


def moe_config(tokens: int, fp8: bool = False) -> dict:
    """The fused-MoE tile's launch configuration for ``tokens`` rows (:func:`moe_tile`), from
    AITER's FP8 table when the weights are FP8, as AITER picks it."""
    return dict((_MOE_CONFIGS_FP8 if fp8 else _MOE_CONFIGS)[moe_tile(tokens)])


def align_blocks(moe_align, ids, experts: int, block_m: int):
    """``fused_moe``'s block-aligned routing of ``ids`` ``[rows, k]``: (sorted pair ids padded
    per expert to ``block_m``, each block's expert, the padded count), as AITER's
    ``moe_align_block_size`` (passed in as ``moe_align``) fills them."""
    import torch

    pairs = int(ids.numel())
    cap = pairs + experts * (block_m - 1)
    sorted_ids = torch.full((cap,), pairs, dtype=torch.int32, device=ids.device)
    expert_ids = torch.empty((-(-cap // block_m),), dtype=torch.int32, device=ids.device)
    post_pad = torch.empty((1,), dtype=torch.int32, device=ids.device)
    moe_align(ids, experts, block_m, sorted_ids, expert_ids, post_pad)
    return sorted_ids, expert_ids, post_pad


def routing_plan(rows: int, experts: int, top_k: int, *, routing: str = "uniform",
                 skew: float = 1.0, seed: int = 0) -> np.ndarray:
    """Planned experts ``[rows, top_k]`` (int64, distinct per row), deterministic in the seed;
    row ``r``'s experts do not depend on ``rows`` (a longer plan extends a shorter one).

    Sampling without replacement by Gumbel top-k: ``argsort(log p + Gumbel)[:top_k]``.
    """
    if routing not in ROUTINGS:
        raise SpecschedError(f"MoE routing {routing!r}: choose one of {', '.join(ROUTINGS)}")
    if not 1 <= top_k <= experts:
        raise SpecschedError(f"MoE top_k {top_k} must be in 1..{experts}")
    rng = np.random.Generator(np.random.PCG64([int(seed), int(experts), int(top_k)]))
    if routing == "uniform":
        logp = np.zeros(experts)
    else:
        if not skew > 0:
            raise SpecschedError(f"MoE routing skew must be > 0, got {skew}")
        rank = rng.permutation(experts)          # expert e has popularity rank rank[e]
        logp = -float(skew) * np.log1p(rank.astype(np.float64))
    keys = -(logp[None, :] + rng.gumbel(size=(int(rows), experts)))
    # the top_k smallest of -keys in ascending order: argsort(-keys)[:, :top_k] without sorting
    # whole rows (256 experts x 16384 rows per layer for DeepSeek-V3)
    part = np.argpartition(keys, top_k - 1, axis=1)[:, :top_k]
    order = np.argsort(np.take_along_axis(keys, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1).astype(np.int64)


def ep_layout(plan: np.ndarray, experts_local: int, rank: int = 0):
    """The local (row, expert) pairs of a routing plan on EP rank ``rank``: ``(src, lid, gid,
    cum)`` -- each pair's row, local and global expert id, in (row, slot) order, and ``cum[T]``
    = the pairs among the first ``T`` rows (``len(cum) == rows + 1``)."""
    plan = np.asarray(plan, dtype=np.int64)
    lo = int(rank) * int(experts_local)
    mine = (plan >= lo) & (plan < lo + int(experts_local))
    rows, slots = np.nonzero(mine)                 # row-major: (row, slot) order
    gid = plan[rows, slots]
    cum = np.concatenate([[0], np.cumsum(mine.sum(axis=1))]).astype(np.int64)
    return rows.astype(np.int64), gid - lo, gid, cum


def ep_comm_time_s(tokens: int, *, ep: int, top_k: int, hidden: int, moe_layers: int,
                   latency_s: float, bus_bw: float, dispatch_bytes: float = 2.0,
                   combine_bytes: float = 2.0) -> float:
    """Modelled expert-parallel all-to-all of one forward: per MoE layer a dispatch and a
    combine, each ``latency + bytes / bus_bw``.

    Each of the ``ep`` GPUs sends its ``ceil(tokens / ep)`` tokens to each of their ``top_k``
    experts, ``(ep - 1) / ep`` of which live on other GPUs (uniform routing): ``ceil(T / ep) *
    top_k * (ep - 1) / ep * hidden`` values per GPU each way, ``dispatch_bytes`` per value out
    (1 + 4/128 for FP8 with per-128 scales, as DeepEP's FP8 dispatch) and ``combine_bytes`` back
    (bf16).  0 when ``ep <= 1`` or no rows.
    """
    if ep <= 1 or tokens <= 0 or moe_layers <= 0:
        return 0.0
    values = -(-int(tokens) // int(ep)) * int(top_k) * (ep - 1) / ep * int(hidden)
    one = (2 * latency_s + values * (dispatch_bytes + combine_bytes) / bus_bw)
    return float(moe_layers * one)


class _Fp8Experts:
    """Stacked FP8 expert weights ``q`` ``[E, N, K]`` + block scales ``s``; ``[e].float()`` is
    expert ``e`` dequantised (what the references read)."""

    def __init__(self, q, s) -> None:
        self.q, self.s = q, s

    def __getitem__(self, e: int):
        from backends.aiter import fp8

        q, s = self.q[e], self.s[e]

        class _One:
            def float(self_inner):
                return fp8.dequant_weight(q, s)

        return _One()


class MoE:
    """One MoE layer's weights (``w13`` ``[E_local, 2I, H]``, ``w2`` ``[E_local, H, I]``, router
    over all ``E``, shared experts) and its forward (see the module docstring)."""

    def __init__(self, g: dict, *, kernels: Any, silu_and_mul, w, routing: str = "uniform",
                 skew: float = 1.0, seed: int = 0, device: Any = None, dtype: Any = None,
                 generator: Any = None, plan_rows: int | None = None, lin=None) -> None:
        import torch

        h, E, I, k = g["hidden"], g["experts"], g["moe_intermediate"], g["experts_per_token"]
        if routing not in ROUTINGS:
            raise SpecschedError(f"MoE routing {routing!r}: choose one of {', '.join(ROUTINGS)}")
        self.g = g
        self.k = kernels
        self.silu_and_mul = silu_and_mul
        self.E, self.I, self.top_k, self.hidden = E, I, k, h
        self.ep = int(g.get("ep", 1))
        self.E_local = int(g.get("experts_local", E))
        self.first_expert = 0  # rank 0's experts
        self.fp8 = bool(g.get("fp8", False))
        self.routing, self.skew, self.seed = routing, float(skew), int(seed)

        if self.fp8:
            from backends.aiter.fp8 import random_block_weight

            self.w13 = _Fp8Experts(*random_block_weight((self.E_local,), 2 * I, h, device=device,
                                                        generator=generator))
            self.w2 = _Fp8Experts(*random_block_weight((self.E_local,), h, I, device=device,
                                                       generator=generator))
        else:
            def experts(rows, cols):
                t = torch.empty((self.E_local, rows, cols), device=device, dtype=dtype)
                return t.normal_(0.0, 1.0 / math.sqrt(cols), generator=generator)

            self.w13 = experts(2 * I, h)
            self.w2 = experts(h, I)
        self.gate = w(E, h)
        si = g["shared_intermediate"]
        lw = lin or w
        self.shared_gu = lw(2 * si, h) if si else None
        self.shared_down = lw(h, si) if si else None
        self._bias = None
        self._retired: list = []  # replaced biases stay alive: captured graphs may read them
        # rows planned at start-up: 16384 for 64 experts, 4096 for 256 (a plan row costs one
        # Gumbel draw per expert on the host); a longer forward extends the plan once
        self._steer(int(plan_rows or max(4096, (1 << 20) // E)))

    # -- routing --------------------------------------------------------------------------------
    def _steer(self, rows: int) -> None:
        """Build the steering bias (and, with EP, the local pairs' layout) for the first ``rows``
        rows (host plan, one copy to the GPU)."""
        import torch

        plan = routing_plan(rows, self.E, self.top_k, routing=self.routing, skew=self.skew,
                            seed=self.seed)
        host = np.zeros((rows, self.E), dtype=np.float32)
        np.put_along_axis(host, plan, STEER, axis=1)
        if self._bias is not None:
            self._retired.append(self._bias)
            if self.ep > 1:
                self._retired.extend([self.ep_src, self.ep_lid, self.ep_gid])
        dev = self.gate.device
        self._bias = torch.as_tensor(host).to(device=dev, dtype=self.gate.dtype)
        if self.ep > 1:
            src, lid, gid, cum = ep_layout(plan, self.E_local, 0)
            self.ep_src = torch.as_tensor(src).to(dev)
            self.ep_lid = torch.as_tensor(lid).to(dev)
            self.ep_gid = torch.as_tensor(gid).to(dev)
            self.ep_cum = cum

    def steer_bias(self, rows: int):
        """The ``[rows, E]`` bias that makes top-k return the plan: a view of one tensor built at
        start-up, so a forward (or a graph capture) never allocates or copies it; a longer
        forward than planned for (an eager prefill) extends it once."""
        if rows > self._bias.shape[0]:
            self._steer(max(rows, 2 * self._bias.shape[0]))
        return self._bias[:rows]

    def _probs(self, x):
        import torch
        import torch.nn.functional as F

        logits = F.linear(x, self.gate) + self.steer_bias(x.shape[0])
        return torch.softmax(logits.float(), dim=-1)

    def route(self, x):
        """(weights ``[rows, k]`` float32, expert ids ``[rows, k]`` int64) of the routed experts."""
        return self.k.topk(self._probs(x), self.top_k)

    def local_pairs(self, rows: int) -> int:
        """Pairs among the first ``rows`` rows routed to this GPU's experts (EP)."""
        self.steer_bias(rows)
        return int(self.ep_cum[rows])

    # -- experts --------------------------------------------------------------------------------
    def _run_experts(self, x, weights, ids, k: int):
        """``fused_moe`` over ``x`` ``[rows, H]`` with ``k`` experts per row (local ids):
        ``[rows, k, H]``, each expert's output times its routing weight."""
        import torch
        import triton.language as tl

        rows, E = x.shape[0], self.E_local
        cfg = moe_config(rows, self.fp8)
        pairs = rows * k
        sorted_ids, expert_ids, post_pad = align_blocks(self.k.moe_align, ids, E,
                                                        cfg["BLOCK_SIZE_M"])
        ctype = tl.bfloat16 if x.dtype == torch.bfloat16 else (
            tl.float16 if x.dtype == torch.float16 else tl.float32)
        up = torch.empty((rows, k, 2 * self.I), dtype=x.dtype, device=x.device)
        down = torch.empty((rows, k, self.hidden), dtype=x.dtype, device=x.device)
        if self.fp8:
            from backends.aiter.fp8 import BLOCK, quant_groups

            xq, xs = quant_groups(x.contiguous())
            self.k.fused_moe(xq, self.w13.q, up, xs, self.w13.s, None, weights, ids, sorted_ids,
                             expert_ids, post_pad, False, k, ctype, True, False, False,
                             [BLOCK, BLOCK], dict(cfg))
            aq, as_ = quant_groups(self.silu_and_mul(up.view(pairs, 2 * self.I)))
            self.k.fused_moe(aq, self.w2.q, down, as_, self.w2.s, None, weights, ids, sorted_ids,
                             expert_ids, post_pad, True, 1, ctype, True, False, False,
                             [BLOCK, BLOCK], dict(cfg))
            return down
        self.k.fused_moe(x, self.w13, up, None, None, None, weights, ids, sorted_ids, expert_ids,
                         post_pad, False, k, ctype, False, False, False, None, dict(cfg))
        act = self.silu_and_mul(up.view(pairs, 2 * self.I))
        self.k.fused_moe(act, self.w2, down, None, None, None, weights, ids, sorted_ids,
                         expert_ids, post_pad, True, 1, ctype, False, False, False, None, dict(cfg))
        return down

    def experts(self, x, weights, ids):
        """The routed experts' output ``[rows, H]`` (weighted sum over the top-k)."""
        return self._run_experts(x, weights, ids, self.top_k).sum(dim=1)

    def shared(self, x):
        if self.shared_gu is None:
            return None
        from backends.aiter.fp8 import linear

        return linear(self.silu_and_mul(linear(x, self.shared_gu)), self.shared_down)

    def _ep_forward(self, x):
        """Routed experts under expert parallelism: this GPU's pairs only (module docstring)."""
        import torch

        rows = x.shape[0]
        probs = self._probs(x)
        self.k.topk(probs, self.top_k)          # the router's choice (it equals the plan)
        n = self.local_pairs(rows)
        out = torch.zeros_like(x)
        if n == 0:                              # no pair of this batch lands on this GPU
            return out
        src = self.ep_src[:n]
        xs = x.index_select(0, src)            # dispatch (the all-to-all itself is modelled)
        wts = probs[src, self.ep_gid[:n]].view(n, 1)
        down = self._run_experts(xs, wts, self.ep_lid[:n].view(n, 1), 1)
        return out.index_add_(0, src, down.view(n, self.hidden))   # combine

    def forward(self, x):
        if self.ep > 1:
            out = self._ep_forward(x)
        else:
            weights, ids = self.route(x)
            out = self.experts(x, weights, ids)
        s = self.shared(x)
        return out if s is None else out + s
