"""The roofline backend: FLOPs and bytes of a model shape against a GPU spec sheet.

The least accurate backend.  It knows nothing of kernel efficiency beyond one "achievable"
fraction of peak bandwidth and FLOP/s (``hardware.GPU.achievable_basis``), so it misses, among
other things, that AITER's verify attention more than doubles in time from width 4 to 8 (shared
notes).  Use it for hardware without a profile, and for what-ifs; prefer ``profile``.

The model, per forward pass on one GPU (one tensor-parallel shard):

- **GEMMs**, one roofline each: ``time = max(2*T*K*N / F, (K*N*w_bytes + T*(K+N)*2) / B)``
  over the ``T`` token rows the pass computes (``bs_padded * width`` for a graph replay: padded
  rows compute too).  ``F`` is the achievable tensor rate for the weights' type (FP8 weights use
  the FP8 rate), ``B`` the achievable HBM bandwidth.  Weights are read once per pass.
  MoE layers: routed experts as two grouped GEMMs whose weight bytes are those of the experts the
  pass touches, ``E * (1 - (1 - k/E)**T)`` expected under uniform routing; shared experts and the
  router as ordinary GEMMs.  MLA's ``kv_b`` weights are used absorbed (``W_UK``/``W_UV``) in
  verify/draft, which costs the same FLOPs and bytes as the ``kv_b`` GEMM.
- **Attention**, one roofline per layer: verify of width ``w`` over KV length ``L`` per request:
  query ``i`` sees ``L + i + 1`` keys, so ``sum = w*L + w*(w+1)/2`` key positions per request.
  MHA/GQA FLOPs ``4 * heads_gpu * head_dim * sum``; MLA (absorbed) FLOPs
  ``2 * heads_gpu * (2*kv_lora_rank + qk_rope_head_dim) * sum``.  Bytes: the request's cached KV
  read once (``(L + w) * kv_bytes_per_token_layer``), the new KV written, the queries read and the
  outputs written.  Attention runs at the bf16 rate.
- **Prefill** of ``T`` tokens after a prefix ``P`` is one causal sequence (an upper bound when
  several requests share the pass): ``T*P + T*(T+1)/2`` key positions; MLA prefill runs
  un-absorbed (heads of ``qk_nope+qk_rope`` / ``v_head_dim``) and first decompresses the prefix's
  latent KV through ``kv_b``.  Logits only for the last token.
- **Element-wise** work (norms, RoPE, residuals, activation): ``T * 2 bytes * (6*hidden +
  3*mlp_width)`` per layer, bandwidth-bound.
- **Tensor parallelism**: two all-reduces per layer of ``T * hidden * 2`` bytes and one all-gather
  of the logits, each ``latency + 2*(tp-1)/tp * bytes / link`` (ring).
- **Launch**: a graph replay costs ``graph_launch_s`` (5 us, measured); an eager pass costs
  ``kernel_launch_s`` (4 us, estimated) per kernel: ``kernels per layer * layers + 6`` (see
  :func:`kernel_count`).
- **Draft passes** use the EAGLE draft's shape (``ModelShape.draft``: one layer, the LM head and
  the draft's fusion GEMM -- in every pass for EAGLE's ``fc`` and MTP's ``eh_proj``, in the
  draft-extend pass only for EAGLE-3's 3*hidden fusion).  A draft decode step computes one row
  per request.  The **draft-extend** pass after a verify computes ``width`` rows per request
  (``bs_padded * width`` for a graph replay) and attends like a verify of that width; its LM head
  covers one row per request (``extend_logits="last"``: SGLang's EAGLE worker, whose
  ``DRAFT_EXTEND`` logits keep each request's last accepted token) or every row
  (``"all"``: the overlap worker's ``DRAFT_EXTEND_V2``).

The executor evaluates these formulas on grids (batch sizes 1..256 at every integer, hence every
captured size, then every 8 to 1024 and 1280, 1536, 2048; widths 1..16 (verify, draft-extend); KV lengths 0 and a
geometric grid from 1 to 2**21 at 2**(1/4) spacing; prefill tokens 1..65536 and prefixes to
2**20) and returns a ``TableExecutor`` named ``"roofline"``.  Every operator's ridge point (where
it turns from bandwidth- to compute-bound) is added to the grid, so multilinear interpolation
reproduces the formula exactly between grid points for verify and draft (up to the smooth MoE
expert-coverage curve); prefill agrees within a fraction of a percent (the attention ridge moves
with the token count there).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from backends.hardware import GPU, get_gpu
from backends.latency_table import Grid, LatencyTable, TableExecutor
from backends.models import ModelShape, load_model
from traces.errors import SpecschedError

__all__ = ["verify_time", "draft_pass_time", "draft_extend_time", "prefill_time", "breakdown",
           "kernel_count", "build_table", "make_roofline_executor", "ROOFLINE_OPTIONS", "CAVEATS",
           "EXTEND_LOGITS"]

_A = 2.0  # activation / bf16 bytes

#: Which rows of a draft-extend pass the LM head computes: each request's last ("last", SGLang's
#: EAGLE worker) or every row ("all", its overlap worker).
EXTEND_LOGITS = ("last", "all")

#: Options ``make_roofline_executor`` accepts (they override the GPU sheet).
ROOFLINE_OPTIONS = ("achievable_bw_frac", "achievable_flops_frac", "achievable_link_frac",
                    "kernel_launch_s", "graph_launch_s", "allreduce_latency_s")

CAVEATS = (
    "roofline is the least accurate backend: one achievable fraction of peak for every kernel",
    "verify attention cost is modelled linear in width; real kernels are not (AITER at bs 32: "
    "width 8 took 2.15x width 4)",
    "no kernel-selection, tile-quantisation, wave-quantisation or cache effects",
    "eager launch overhead is a fixed per-kernel host cost added to GPU time (no overlap)",
    "prefill attention treats the whole pass as one causal sequence (an upper bound)",
)
#: only true of models with routed experts
MOE_CAVEAT = "MoE routing assumed uniform; expert parallelism and DP attention not modelled"


def caveats(model: ModelShape) -> list[str]:
    """The roofline's caveats that hold for ``model`` (the MoE one only for an MoE model)."""
    return list(CAVEATS) + ([MOE_CAVEAT] if model.is_moe else [])


@dataclass(frozen=True)
class _Rates:
    gemm_flops: float
    attn_flops: float
    bw: float
    link: float
    ar_latency: float
    kernel_launch: float
    graph_launch: float


def _rates(model: ModelShape, gpu: GPU) -> _Rates:
    return _Rates(gemm_flops=gpu.achievable_flops(model.dtype_bytes),
                  attn_flops=gpu.achievable_bf16_flops, bw=gpu.achievable_bw,
                  link=gpu.achievable_link_bw, ar_latency=gpu.allreduce_latency_s,
                  kernel_launch=gpu.kernel_launch_s, graph_launch=gpu.graph_launch_s)


# ---- the pieces ----------------------------------------------------------------------------
def _gemms(m: ModelShape, *, moe_layer: bool) -> list[tuple[int, int, float]]:
    """(K, N, weight bytes per element) of one layer's GEMMs except routed experts."""
    wb = float(m.dtype_bytes)
    out = []
    hq = m.heads_per_gpu
    if m.is_mla:
        if m.q_lora_rank:
            out += [(m.hidden, m.q_lora_rank, wb), (m.q_lora_rank, hq * m.qk_head_dim, wb)]
        else:
            out.append((m.hidden, hq * m.qk_head_dim, wb))
        out.append((m.hidden, m.kv_lora_rank + m.qk_rope_head_dim, wb))
        out.append((m.kv_lora_rank, hq * (m.qk_nope_head_dim + m.v_head_dim), wb))
        out.append((hq * m.v_head_dim, m.hidden, wb))
    else:
        out.append((m.attn_in or m.hidden, (hq + 2 * m.kv_heads_per_gpu) * m.head_dim, wb))
        out.append((hq * m.head_dim, m.hidden, wb))
    if moe_layer:
        out.append((m.hidden, m.experts, _A))  # router
        if m.shared_experts:
            inter = m.shared_experts * m.moe_intermediate // m.tp
            out += [(m.hidden, 2 * inter, wb), (inter, m.hidden, wb)]
    else:
        inter = m.intermediate // m.tp
        out += [(m.hidden, 2 * inter, wb), (inter, m.hidden, wb)]
    return out


def _gemm_time(T, K, N, wb, r: _Rates, flops_rate=None):
    f = 2.0 * T * K * N / (flops_rate or r.gemm_flops)
    b = (K * N * wb + T * (K + N) * _A) / r.bw
    return np.maximum(f, b)


def _gemm_ridge(K, N, wb, r: _Rates, flops_rate=None) -> float | None:
    """Token count at which a GEMM turns compute-bound (None if it never does)."""
    den = 2.0 * K * N / (flops_rate or r.gemm_flops) - (K + N) * _A / r.bw
    return K * N * wb / r.bw / den if den > 0 else None


def _moe_expert_time(m: ModelShape, T, r: _Rates):
    """Routed experts of one MoE layer over T tokens (two grouped GEMMs)."""
    E, k = m.experts, m.experts_per_token
    inter = m.moe_intermediate // m.tp
    touched = E * (1.0 - (1.0 - k / E) ** np.asarray(T, dtype=np.float64))
    t = 0.0
    for K, N in ((m.hidden, 2 * inter), (inter, m.hidden)):
        f = 2.0 * T * k * K * N / r.gemm_flops
        b = (touched * K * N * m.dtype_bytes + T * k * (K + N) * _A) / r.bw
        t = t + np.maximum(f, b)
    return t


def _mlp_width(m: ModelShape, *, moe_layer: bool) -> float:
    if moe_layer:
        return (m.experts_per_token + m.shared_experts) * m.moe_intermediate / m.tp
    return m.intermediate / m.tp


def _attn_coeffs(m: ModelShape, width: float, *, prefill: bool = False):
    """Per-request attention cost per layer as (flops per key position, bytes per cached token,
    bytes per query row): flops = c_f * positions, bytes = c_kv * (L + w) + c_q * w."""
    hq = m.heads_per_gpu
    kvdt = m.kv_dtype_bytes
    per_tok_kv = m.kv_heads_per_gpu * m.kv_cache_dim * kvdt  # one layer
    if m.is_mla:
        if prefill:
            c_f = 2.0 * hq * (m.qk_head_dim + m.v_head_dim)
            c_q = per_tok_kv + 2.0 * hq * (m.qk_head_dim + m.v_head_dim) * _A
        else:
            c_f = 2.0 * hq * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
            c_q = per_tok_kv + hq * (m.kv_lora_rank + m.qk_rope_head_dim + m.kv_lora_rank) * _A
    else:
        c_f = 4.0 * hq * m.head_dim
        c_q = per_tok_kv + 2.0 * hq * m.head_dim * _A
    return c_f, float(per_tok_kv), c_q


def _attn_time(m: ModelShape, r: _Rates, n_req, width, kv, *, prefill: bool = False):
    """Attention of one layer: ``n_req`` requests of ``width`` query rows after ``kv`` cached."""
    c_f, c_kv, c_q = _attn_coeffs(m, width, prefill=prefill)
    pos = width * kv + width * (width + 1) / 2.0
    flops = n_req * c_f * pos
    byts = n_req * (c_kv * (kv + width) + c_q * width)
    t = np.maximum(flops / r.attn_flops, byts / r.bw)
    if prefill and m.is_mla:  # decompress the prefix's latent KV through kv_b
        K, N = m.kv_lora_rank, m.heads_per_gpu * (m.qk_nope_head_dim + m.v_head_dim)
        t = t + np.maximum(2.0 * kv * K * N / r.gemm_flops, kv * (K + N) * _A / r.bw)
    return t


def _attn_ridge_kv(m: ModelShape, r: _Rates, width: int) -> float | None:
    """KV length at which verify/draft attention of this width turns compute-bound (or back)."""
    c_f, c_kv, c_q = _attn_coeffs(m, width)
    a1, a0 = c_f * width / r.attn_flops, c_f * width * (width + 1) / 2.0 / r.attn_flops
    b1, b0 = c_kv / r.bw, (c_kv * width + c_q * width) / r.bw
    if a1 == b1:
        return None
    x = (b0 - a0) / (a1 - b1)
    return x if x > 0 else None


def _allreduce_time(m: ModelShape, r: _Rates, nbytes):
    if m.tp == 1:
        return 0.0 * nbytes
    return r.ar_latency + 2.0 * (m.tp - 1) / m.tp * nbytes / r.link


def kernel_count(m: ModelShape, *, extend: bool = False) -> int:
    """Kernels one eager forward pass launches (for the launch overhead).

    Per layer: MHA attention block 6 (norm, QKV GEMM, RoPE, KV store, attention, O GEMM); MLA 11
    (norm, q_a, q_a norm, q_b, kv_a, kv_a norm, W_UK, RoPE + KV store, attention, W_UV, O GEMM);
    dense MLP 4 (fused add+norm, gate_up GEMM, SiLU*mul, down GEMM); MoE MLP 9 (norm, router,
    top-k, align/sort, two grouped GEMMs, activation, combine, shared expert); 2 all-reduces when
    tp > 1.  Per pass: 6 more (embedding, final norm, LM head, logits gather, sampling, copy),
    and a draft's fusion GEMM when the pass runs it (``extend``: the draft-extend pass).
    """
    attn = 11 if m.is_mla else 6
    ar = 2 if m.tp > 1 else 0
    per_dense = attn + 4 + ar
    per_moe = attn + 9 + (3 if m.shared_experts else 0) + ar
    fusion = 1 if _runs_fusion(m, extend) else 0
    return m.dense_mlp_layers * per_dense + m.moe_layers * per_moe + 6 + fusion


def _runs_fusion(m: ModelShape, extend: bool) -> bool:
    """Whether a pass of ``m`` runs its fusion GEMM (a draft's: see ``ModelShape.fusion_on_decode``)."""
    return bool(m.fusion_in) and (extend or m.fusion_on_decode)


def _forward(m: ModelShape, r: _Rates, *, T, n_req, width, kv, lm_tokens, graph: bool,
             prefill: bool = False, extend: bool = False, parts: dict | None = None):
    """Seconds of one forward pass (broadcasting over arrays)."""
    T = np.asarray(T, dtype=np.float64)
    total = 0.0
    pieces: dict[str, Any] = {}

    def add(name, t):
        nonlocal total
        total = total + t
        pieces[name] = pieces.get(name, 0.0) + t

    for moe_layer, nl in ((False, m.dense_mlp_layers), (True, m.moe_layers)):
        if nl == 0:
            continue
        g = sum(_gemm_time(T, K, N, wb, r) for K, N, wb in _gemms(m, moe_layer=moe_layer))
        add("gemm", nl * g)
        if moe_layer:
            add("moe_experts", nl * _moe_expert_time(m, T, r))
        add("attention", nl * _attn_time(m, r, n_req, width, kv, prefill=prefill))
        ew = T * _A * (6 * m.hidden + 3 * _mlp_width(m, moe_layer=moe_layer)) / r.bw
        add("elementwise", nl * ew)
        add("allreduce", nl * 2 * _allreduce_time(m, r, T * m.hidden * _A))
    if _runs_fusion(m, extend):
        add("gemm", _gemm_time(T, m.fusion_in, m.hidden, _A, r, r.attn_flops))
    lm = np.asarray(lm_tokens, dtype=np.float64)
    add("lm_head", _gemm_time(lm, m.hidden, m.vocab_per_gpu, _A, r, r.attn_flops))
    add("allreduce", _allreduce_time(m, r, lm * m.vocab_per_gpu * _A))
    add("elementwise", (T * m.hidden * _A + lm * m.vocab_per_gpu * 4.0) / r.bw)
    add("launch", r.graph_launch if graph else kernel_count(m, extend=extend) * r.kernel_launch)
    if parts is not None:
        parts.update(pieces)
    return total


# ---- public formulas -----------------------------------------------------------------------
def _resolve(model, gpu, opts) -> tuple[ModelShape, GPU]:
    m = load_model(model)
    g = get_gpu(gpu)
    bad = sorted(set(opts) - set(ROOFLINE_OPTIONS))
    if bad:
        raise SpecschedError(f"unknown roofline option(s) {bad}; valid: {', '.join(ROOFLINE_OPTIONS)}")
    for k, v in opts.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v) or v < 0:
            raise SpecschedError(f"roofline option {k} must be a non-negative number, got {v!r}")
        if k.endswith("_frac") and not 0 < v <= 1:
            raise SpecschedError(f"roofline option {k} must be in (0, 1], got {v!r}")
    return m, (replace(g, **opts) if opts else g)


def verify_time(model, gpu, bs, width, kv, *, graph: bool = True, **opts):
    """Seconds of one verify launch of ``bs`` rows (the padded size for graphs) at ``width`` query
    rows each, every request after ``kv`` cached tokens.  Broadcasts over arrays."""
    m, g = _resolve(model, gpu, opts)
    bs = np.asarray(bs, dtype=np.float64)
    width = np.asarray(width, dtype=np.float64)
    return _forward(m, _rates(m, g), T=bs * width, n_req=bs, width=width, kv=kv,
                    lm_tokens=bs * width, graph=graph)


def draft_pass_time(model, gpu, bs, kv, *, graph: bool = True, **opts):
    """Seconds of one draft-model pass (``model`` is the *target*; its EAGLE draft is timed)."""
    m, g = _resolve(model, gpu, opts)
    d = m.draft
    bs = np.asarray(bs, dtype=np.float64)
    return _forward(d, _rates(d, g), T=bs, n_req=bs, width=1.0, kv=kv, lm_tokens=bs, graph=graph)


def _extend_lm_rows(bs, width, extend_logits: str):
    if extend_logits not in EXTEND_LOGITS:
        raise SpecschedError(f"extend_logits must be one of {', '.join(EXTEND_LOGITS)}, "
                             f"got {extend_logits!r}")
    return bs * width if extend_logits == "all" else bs


def _extend(d: ModelShape, r: _Rates, bs, width, kv, graph: bool, extend_logits: str,
            parts: dict | None = None):
    bs = np.asarray(bs, dtype=np.float64)
    width = np.asarray(width, dtype=np.float64)
    return _forward(d, r, T=bs * width, n_req=bs, width=width, kv=kv,
                    lm_tokens=_extend_lm_rows(bs, width, extend_logits), graph=graph,
                    extend=True, parts=parts)


def draft_extend_time(model, gpu, bs, width, kv, *, graph: bool = True,
                      extend_logits: str = "last", **opts):
    """Seconds of one draft-extend pass (``model`` is the *target*; its EAGLE draft is timed):
    ``bs`` requests (the padded size for graphs) of ``width`` rows each after ``kv`` cached
    tokens; logits for one row per request (``extend_logits="last"``) or every row (``"all"``).
    Broadcasts over arrays."""
    m, g = _resolve(model, gpu, opts)
    d = m.draft
    return _extend(d, _rates(d, g), bs, width, kv, graph, extend_logits)


def prefill_time(model, gpu, tokens, prefix, **opts):
    """Seconds of one (eager) prefill pass of ``tokens`` new tokens after ``prefix`` cached ones."""
    m, g = _resolve(model, gpu, opts)
    tokens = np.asarray(tokens, dtype=np.float64)
    return _forward(m, _rates(m, g), T=tokens, n_req=1.0, width=tokens, kv=prefix,
                    lm_tokens=1.0, graph=False, prefill=True)


def breakdown(model, gpu, *, kind: str = "verify", bs: float = 1, width: float = 1,
              kv: float = 0, tokens: float = 1, prefix: float = 0, graph: bool = True,
              **opts) -> dict[str, float]:
    """Seconds per component (gemm, moe_experts, attention, elementwise, allreduce, lm_head,
    launch) of one pass, for reports."""
    m, g = _resolve(model, gpu, opts)
    parts: dict[str, Any] = {}
    if kind == "verify":
        _forward(m, _rates(m, g), T=bs * width, n_req=bs, width=width, kv=kv,
                 lm_tokens=bs * width, graph=graph, parts=parts)
    elif kind == "draft":
        d = m.draft
        _forward(d, _rates(d, g), T=bs, n_req=bs, width=1.0, kv=kv, lm_tokens=bs, graph=graph,
                 parts=parts)
    elif kind == "draft_extend":
        _extend(m.draft, _rates(m.draft, g), bs, width, kv, graph, "last", parts)
    elif kind == "prefill":
        _forward(m, _rates(m, g), T=tokens, n_req=1.0, width=tokens, kv=prefix, lm_tokens=1.0,
                 graph=False, prefill=True, parts=parts)
    else:
        raise SpecschedError(f"unknown pass kind {kind!r}; use verify, draft, draft_extend or prefill")
    return {k: float(v) for k, v in parts.items()}


# ---- grids ---------------------------------------------------------------------------------
BS_AXIS = np.unique(np.concatenate([np.arange(1, 257), np.arange(264, 1025, 8),
                                    [1280, 1536, 2048]])).astype(np.float64)
WIDTH_AXIS = np.arange(1, 17, dtype=np.float64)
KV_AXIS = np.unique(np.concatenate([[0.0], np.round(2.0 ** (np.arange(0, 85) / 4.0), 6)]))
TOKENS_AXIS = np.unique(np.round(np.concatenate([np.arange(1, 257), 2.0 ** (np.arange(32, 129) / 8.0)]), 6))
PREFIX_AXIS = np.unique(np.concatenate([[0.0], np.round(2.0 ** (np.arange(0, 161) / 8.0), 6)]))


def _with_points(axis: np.ndarray, extra: list[float]) -> np.ndarray:
    lo, hi = axis[0], axis[-1]
    pts = [x for x in extra if x is not None and lo < x < hi]
    merged = np.unique(np.concatenate([axis, np.asarray(pts, dtype=np.float64)]))
    keep = np.concatenate([[True], np.diff(merged) > 1e-9 * np.maximum(1.0, merged[1:])])
    return merged[keep]


def _token_ridges(m: ModelShape, r: _Rates) -> list[float]:
    out = []
    for moe_layer in (False, True):
        if (m.moe_layers if moe_layer else m.dense_mlp_layers) == 0:
            continue
        out += [_gemm_ridge(K, N, wb, r) for K, N, wb in _gemms(m, moe_layer=moe_layer)]
    if m.fusion_in:
        out.append(_gemm_ridge(m.fusion_in, m.hidden, _A, r, r.attn_flops))
    out.append(_gemm_ridge(m.hidden, m.vocab_per_gpu, _A, r, r.attn_flops))
    if m.moe_layers:
        out += _moe_ridges(m, r)
    return [x for x in out if x is not None]


def _moe_ridges(m: ModelShape, r: _Rates) -> list[float]:
    """Token counts where a grouped expert GEMM changes regime (no closed form: the bytes follow
    the expert-coverage curve), found by bisection on a fine grid."""
    E, k = m.experts, m.experts_per_token
    inter = m.moe_intermediate // m.tp
    out = []
    for K, N in ((m.hidden, 2 * inter), (inter, m.hidden)):
        def diff(T):
            touched = E * (1.0 - (1.0 - k / E) ** T)
            return 2.0 * T * k * K * N / r.gemm_flops - (
                touched * K * N * m.dtype_bytes + T * k * (K + N) * _A) / r.bw
        T = np.unique(np.round(2.0 ** (np.arange(0, 20 * 64 + 1) / 64.0), 9))
        d = diff(T)
        for i in np.nonzero(np.sign(d[:-1]) != np.sign(d[1:]))[0]:
            lo, hi = T[i], T[i + 1]
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                if np.sign(diff(mid)) == np.sign(d[i]):
                    lo = mid
                else:
                    hi = mid
            out.append(0.5 * (lo + hi))
    return out


def build_table(model, gpu="H200", *, extend_logits: str = "last", **opts) -> LatencyTable:
    """Evaluate the roofline on the grids (module docstring) as a :class:`LatencyTable`."""
    m, g = _resolve(model, gpu, opts)
    _extend_lm_rows(1, 1, extend_logits)  # validates
    r = _rates(m, g)
    d = m.draft
    rd = _rates(d, g)
    ridges = _token_ridges(m, r)
    bs_v = _with_points(BS_AXIS, [t / w for t in ridges for w in WIDTH_AXIS])
    kv_v = _with_points(KV_AXIS, [_attn_ridge_kv(m, r, int(w)) for w in WIDTH_AXIS])
    B, W, K = np.meshgrid(bs_v, WIDTH_AXIS, kv_v, indexing="ij")
    vg = _forward(m, r, T=B * W, n_req=B, width=W, kv=K, lm_tokens=B * W, graph=True)
    ve = _forward(m, r, T=B * W, n_req=B, width=W, kv=K, lm_tokens=B * W, graph=False)

    bs_d = _with_points(BS_AXIS, _token_ridges(d, rd))
    kv_d = _with_points(KV_AXIS, [_attn_ridge_kv(d, rd, 1)])
    Bd, Kd = np.meshgrid(bs_d, kv_d, indexing="ij")
    dg = _forward(d, rd, T=Bd, n_req=Bd, width=1.0, kv=Kd, lm_tokens=Bd, graph=True)
    de = _forward(d, rd, T=Bd, n_req=Bd, width=1.0, kv=Kd, lm_tokens=Bd, graph=False)

    d_ridges = _token_ridges(d, rd)
    bs_x = _with_points(BS_AXIS, d_ridges + [t / w for t in d_ridges for w in WIDTH_AXIS])
    kv_x = _with_points(KV_AXIS, [_attn_ridge_kv(d, rd, int(w)) for w in WIDTH_AXIS])
    Bx, Wx, Kx = np.meshgrid(bs_x, WIDTH_AXIS, kv_x, indexing="ij")
    xg = _extend(d, rd, Bx, Wx, Kx, True, extend_logits)
    xe = _extend(d, rd, Bx, Wx, Kx, False, extend_logits)

    tok = _with_points(TOKENS_AXIS, ridges)
    Tp, Pp = np.meshgrid(tok, PREFIX_AXIS, indexing="ij")
    pf = _forward(m, r, T=Tp, n_req=1.0, width=Tp, kv=Pp, lm_tokens=1.0, graph=False, prefill=True)

    source = {
        "backend": "roofline", "model": m.name, "tp": m.tp, "gpu": g.name,
        "achievable": {"hbm_bw": g.achievable_bw, "gemm_flops": r.gemm_flops,
                       "attention_flops": r.attn_flops, "link_bw": g.achievable_link_bw},
        "achievable_basis": g.achievable_basis,
        "launch": {"graph_s": g.graph_launch_s, "kernel_s": g.kernel_launch_s,
                   "eager_kernels_verify": kernel_count(m), "eager_kernels_draft": kernel_count(d),
                   "eager_kernels_draft_extend": kernel_count(d, extend=True)},
        "grid_points": {"verify": [len(bs_v), len(WIDTH_AXIS), len(kv_v)],
                        "draft": [len(bs_d), len(kv_d)],
                        "draft_extend": [len(bs_x), len(WIDTH_AXIS), len(kv_x)],
                        "prefill": [len(tok), len(PREFIX_AXIS)]},
        "draft_kind": m.draft_kind if not (m.is_mla or m.is_moe) else "mtp",
        "draft_extend": f"roofline of the draft model over bs x width rows; logits for "
                        f"{'one row per request' if extend_logits == 'last' else 'every row'} "
                        f"(extend_logits={extend_logits!r})",
        "beyond_grid": "linear extrapolation from the last grid segment (batch > 2048, width > 16, "
                       "KV > 2**21, prefill tokens > 65536 or prefix > 2**20); flagged out_of_grid",
        "caveats": caveats(m),
    }
    return LatencyTable(
        verify_graph=Grid.build((bs_v, WIDTH_AXIS, kv_v), vg, name="roofline verify_graph"),
        verify_eager=Grid.build((bs_v, WIDTH_AXIS, kv_v), ve, name="roofline verify_eager"),
        draft_graph=Grid.build((bs_d, kv_d), dg, name="roofline draft_graph"),
        draft_eager=Grid.build((bs_d, kv_d), de, name="roofline draft_eager"),
        prefill=Grid.build((tok, PREFIX_AXIS), pf, name="roofline prefill"),
        extend_graph=Grid.build((bs_x, WIDTH_AXIS, kv_x), xg, name="roofline extend_graph"),
        extend_eager=Grid.build((bs_x, WIDTH_AXIS, kv_x), xe, name="roofline extend_eager"),
        source=source)


_CACHE: dict[tuple, LatencyTable] = {}


def make_roofline_executor(model, gpu="H200", *, extend_logits: str = "last",
                           **opts) -> TableExecutor:
    """A ``TableExecutor`` named ``"roofline"`` for this model shape on this GPU sheet
    (``extend_logits``: see :func:`draft_extend_time`)."""
    m, g = _resolve(model, gpu, opts)
    _extend_lm_rows(1, 1, extend_logits)
    key = (m, g.name, tuple(sorted(opts.items())), extend_logits)
    table = _CACHE.get(key)
    if table is None:
        table = build_table(m, g, extend_logits=extend_logits)
        if len(_CACHE) > 16:
            _CACHE.clear()
        _CACHE[key] = table
    desc = {
        "model": m.name, "tp": m.tp, "gpu": g.name,
        "accuracy": "least accurate backend: a roofline (FLOPs and bytes against a spec sheet "
                    "at one achievable fraction of peak); prefer a measured profile",
        "achievable_basis": g.achievable_basis, "caveats": caveats(m),
        "model_source": m.source, "gpu_sources": dict(g.sources),
    }
    return TableExecutor("roofline", table, desc)
