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

__all__ = ["ROUTINGS", "TILE_THRESHOLDS", "routing_plan", "moe_config", "MoE"]

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


#: the row counts from which the next larger tile is used (AITER's table)
TILE_THRESHOLDS = (256, 1024)


def moe_config(tokens: int) -> dict:
    """The fused-MoE tile for ``tokens`` rows (AITER's thresholds: < 256, < 1024, else)."""
    key = ("small_M" if tokens < TILE_THRESHOLDS[0] else
           ("medium_M" if tokens < TILE_THRESHOLDS[1] else "large_M"))
    return dict(_MOE_CONFIGS[key])


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
    keys = logp[None, :] + rng.gumbel(size=(int(rows), experts))
    return np.argsort(-keys, axis=1, kind="stable")[:, :top_k].astype(np.int64)


class MoE:
    """One MoE layer's weights (``w13`` ``[E, 2I, H]``, ``w2`` ``[E, H, I]``, router, shared
    experts) and its forward (see the module docstring)."""

    def __init__(self, g: dict, *, kernels: Any, silu_and_mul, w, routing: str = "uniform",
                 skew: float = 1.0, seed: int = 0, device: Any = None, dtype: Any = None,
                 generator: Any = None, plan_rows: int = 16384) -> None:
        import torch

        h, E, I, k = g["hidden"], g["experts"], g["moe_intermediate"], g["experts_per_token"]
        if routing not in ROUTINGS:
            raise SpecschedError(f"MoE routing {routing!r}: choose one of {', '.join(ROUTINGS)}")
        self.g = g
        self.k = kernels
        self.silu_and_mul = silu_and_mul
        self.E, self.I, self.top_k, self.hidden = E, I, k, h
        self.routing, self.skew, self.seed = routing, float(skew), int(seed)

        def experts(rows, cols):
            t = torch.empty((E, rows, cols), device=device, dtype=dtype)
            return t.normal_(0.0, 1.0 / math.sqrt(cols), generator=generator)

        self.w13 = experts(2 * I, h)
        self.w2 = experts(h, I)
        self.gate = w(E, h)
        si = g["shared_intermediate"]
        self.shared_gu = w(2 * si, h) if si else None
        self.shared_down = w(h, si) if si else None
        self._bias = None
        self._retired: list = []  # replaced biases stay alive: captured graphs may read them
        self._steer(int(plan_rows))

    # -- routing --------------------------------------------------------------------------------
    def _steer(self, rows: int) -> None:
        """Build the steering bias for the first ``rows`` rows (host plan, one copy to the GPU)."""
        import torch

        plan = routing_plan(rows, self.E, self.top_k, routing=self.routing, skew=self.skew,
                            seed=self.seed)
        host = np.zeros((rows, self.E), dtype=np.float32)
        np.put_along_axis(host, plan, STEER, axis=1)
        if self._bias is not None:
            self._retired.append(self._bias)
        self._bias = torch.as_tensor(host).to(device=self.gate.device, dtype=self.gate.dtype)

    def steer_bias(self, rows: int):
        """The ``[rows, E]`` bias that makes top-k return the plan: a view of one tensor built at
        start-up, so a forward (or a graph capture) never allocates or copies it; a longer
        forward than planned for (an eager prefill) extends it once."""
        if rows > self._bias.shape[0]:
            self._steer(max(rows, 2 * self._bias.shape[0]))
        return self._bias[:rows]

    def route(self, x):
        """(weights ``[rows, k]`` float32, expert ids ``[rows, k]`` int64) of the routed experts."""
        import torch
        import torch.nn.functional as F

        logits = F.linear(x, self.gate) + self.steer_bias(x.shape[0])
        probs = torch.softmax(logits.float(), dim=-1)
        return self.k.topk(probs, self.top_k)

    # -- experts --------------------------------------------------------------------------------
    def experts(self, x, weights, ids):
        """The routed experts' output ``[rows, H]`` (weighted sum over the top-k)."""
        import torch
        import triton.language as tl

        rows, k, E = x.shape[0], self.top_k, self.E
        cfg = moe_config(rows)
        bm = cfg["BLOCK_SIZE_M"]
        pairs = rows * k
        cap = pairs + E * (bm - 1)
        sorted_ids = torch.full((cap,), pairs, dtype=torch.int32, device=x.device)
        expert_ids = torch.empty((-(-cap // bm),), dtype=torch.int32, device=x.device)
        post_pad = torch.empty((1,), dtype=torch.int32, device=x.device)
        self.k.moe_align(ids, E, bm, sorted_ids, expert_ids, post_pad)
        ctype = tl.bfloat16 if x.dtype == torch.bfloat16 else (
            tl.float16 if x.dtype == torch.float16 else tl.float32)
        up = torch.empty((rows, k, 2 * self.I), dtype=x.dtype, device=x.device)
        self.k.fused_moe(x, self.w13, up, None, None, None, weights, ids, sorted_ids, expert_ids,
                         post_pad, False, k, ctype, False, False, False, None, dict(cfg))
        act = self.silu_and_mul(up.view(pairs, 2 * self.I))
        down = torch.empty((rows, k, self.hidden), dtype=x.dtype, device=x.device)
        self.k.fused_moe(act, self.w2, down, None, None, None, weights, ids, sorted_ids,
                         expert_ids, post_pad, True, 1, ctype, False, False, False, None, dict(cfg))
        return down.sum(dim=1)

    def shared(self, x):
        import torch.nn.functional as F

        if self.shared_gu is None:
            return None
        return F.linear(self.silu_and_mul(F.linear(x, self.shared_gu)), self.shared_down)

    def forward(self, x):
        weights, ids = self.route(x)
        out = self.experts(x, weights, ids)
        s = self.shared(x)
        return out if s is None else out + s
