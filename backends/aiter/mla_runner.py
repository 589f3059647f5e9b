"""The live executor for MLA (+ MoE) models: the dense runner's graphs, metadata and timing around
a DeepSeek-shaped model (:mod:`backends.aiter.mla_model`).

What differs from the dense runner (:class:`backends.aiter.runner.Runner`):

* the model and its KV: one latent cache (``kv_lora_rank + qk_rope_head_dim`` values per token and
  layer, :class:`backends.aiter.mla.LatentPool`) laid out in pages exactly as the dense pool, so
  the runner's page table, positions and KV slots serve unchanged;
* **the MLA width rule, enforced live** (SGLang's AITER MLA path, whose ``mla_decode_fwd`` kernels
  exist for 1, 2 and 4 query rows per request): a verify of width 3 runs -- and is timed -- as the
  width-4 launch (the graph key is normalised, so a profile row of width 3 is the width-4 graph);
  widths 5 and more are refused with SGLang's reason;
* the draft-extend pass (the MTP/NextN draft layer over ``width`` rows per request after each
  verify) runs on the same decode rows and follows the same width rule: 3 runs as 4, 5+ refused;
  its hidden-state input is the target's last hidden state (``hidden`` columns);
* prefill runs the non-absorbed path (:meth:`backends.aiter.mla.MLAAttention.extend`), whose
  per-pass metadata is prepared on the host before the timed region;
* the decode rows' token-level ``kv_indices`` live in one buffer shared by every graph, sized to
  4 x the tokens of a layer's KV view (a launch that would need more is refused before it runs).

Options added to the dense executor's: ``routing`` (``"uniform"``, default, or ``"skewed"``) and
``routing_skew`` (the Zipf exponent of ``skewed``, default 1.0) -- see :mod:`backends.aiter.moe`;
``moe_a2a`` for a MoE model at tp > 1 (one GPU's shard at tp = ep, e.g. DeepSeek-V3 at tp 8 /
ep 8): how the modelled communication combines the experts' outputs --

* ``"none"`` (default, as SGLang's ``--moe-a2a-backend`` defaults to ``none``): every GPU holds
  every token after the attention all-reduce and runs its experts on the pairs that are its own;
  the MLP all-reduce sums the experts' outputs with the shared expert's, so no all-to-all is
  modelled;
* ``"deepep"`` (a what-if of SGLang's ``--moe-a2a-backend deepep``): per MoE layer a dispatch and a
  combine all-to-all (:func:`backends.aiter.moe.ep_comm_time_s`) in place of the MLP's
  all-reduce; the attention all-reduce stays (the bytes of SGLang's reduce-scatter after
  attention plus its all-gather before the next).

Neither is run: the GPU runs one rank's shard and the communication is added to its time.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import numpy as np

from backends.aiter import metadata as md
from backends.aiter.executor import AiterExecutor, capture_all, check_capture, comm_model_for
from backends.aiter.mla import (MLA_WIDTHS, ExtendPlan, LatentPool, load_mla_kernels,
                                mla_geometry, mla_kernel_width, plan_latent_pool, row_index_count)
from backends.aiter.model import Rope
from backends.aiter.runner import EXTEND_LOGITS, Runner
from backends.protocol import VerifyBatch, VerifyTiming
from traces.errors import SpecschedError

__all__ = ["MLARunner", "MLAExecutor", "make_mla_executor", "MLA_OPTIONS"]

#: executor options (the dense executor's, plus the MoE routing)
MLA_OPTIONS = frozenset({"gpu", "check_unsafe", "dtype", "kv_pool_gib", "seed", "capture",
                         "num_draft_tokens", "allreduce_latency_s", "allreduce_bus_bw", "routing",
                         "routing_skew", "extend_logits", "moe_a2a"})

#: how a MoE model at tp > 1 combines its experts' outputs (module docstring)
MOE_A2A = ("none", "deepep")

#: the decode-row index buffer holds this many times the tokens of one layer's KV view
INDEX_ROWS_PER_TOKEN = max(md.MLA_KERNEL_Q_LEN.values())


class MLARunner(Runner):
    """:class:`Runner` for an MLA (+ MoE) ``ModelShape`` (see the module docstring)."""

    mla = True

    def __init__(self, shape: Any, *, routing: str = "uniform", routing_skew: float = 1.0,
                 kernels: Any = None, moe_a2a: str = "none", **kw: Any) -> None:
        from backends.aiter import bridge

        if moe_a2a not in MOE_A2A:
            raise SpecschedError(f"moe_a2a {moe_a2a!r}: choose one of {', '.join(MOE_A2A)}")
        self.moe_a2a = str(moe_a2a)
        self.routing = str(routing)
        self.routing_skew = float(routing_skew)
        self.mla_kernels = load_mla_kernels()
        self.seed = int(kw.get("seed", 0))
        base = kernels or bridge.load_kernels()
        modules = {"rmsnorm": base.modules["rmsnorm"], **self.mla_kernels.modules,
                   "mla_row_metadata": "specsched Triton kernels (backends/aiter/mla.py): each "
                                       "query row's causal key extent, kv_indptr, kv_indices"}
        if int(getattr(shape, "dtype_bytes", 2)) == 1:
            modules.update({
                "fp8_gemm": "aiter.ops.triton._triton_kernels.gemm_a8w8_blockscale."
                            "_gemm_a8w8_blockscale_kernel (float8_e4m3fn, 128x128 block scales)",
                "fp8_act_quant": "aiter.ops.triton._triton_kernels.fused_fp8_quant."
                                 "_fused_flatten_fp8_group_quant_kernel (per row, 128 values)",
                "moe_gemm": "aiter.ops.triton.moe_op.fused_moe (use_fp8_w8a8, block [128, 128])"})
        super().__init__(shape, kernels=dataclasses.replace(base, modules=modules), **kw)

    # ---- modelled communication -----------------------------------------------------------------
    def _comm(self, key: tuple, launch: Any, rows: int | None, logits_rows: int | None) -> float:
        """The dense runner's all-reduces, and for MoE layers at ep > 1 (``moe_a2a="deepep"``)
        the dispatch + combine all-to-alls in place of the MLP all-reduce."""
        from backends.aiter.moe import ep_comm_time_s

        t = super()._comm(key, launch, rows, logits_rows)
        g = self.draft_geometry if key[0] in ("draft", "extend") else self.geometry
        if g["ep"] <= 1 or self.moe_a2a == "none":
            return t
        r = launch.rows if rows is None else rows
        moe_layers = g["layers"] - g["dense_layers"]
        frac = 2.0 * (g["tp"] - 1) / g["tp"]
        mlp_ar = moe_layers * (self.comm.latency_s + r * g["hidden"] * 2 * frac / self.comm.bus_bw)
        a2a = ep_comm_time_s(r, ep=g["ep"], top_k=g["experts_per_token"], hidden=g["hidden"],
                             moe_layers=moe_layers, latency_s=self.comm.latency_s,
                             bus_bw=self.comm.bus_bw,
                             dispatch_bytes=1 + 4 / 128 if g["fp8"] else 2.0)
        return t - mlp_ar + a2a

    def _weight_bytes(self) -> int:
        b = int(self.shape.weight_bytes_per_gpu)
        if self.draft_geometry is not None:
            b += int(self.shape.draft.weight_bytes_per_gpu)
        return b

    # ---- the model ------------------------------------------------------------------------------
    def _geometries(self, shape: Any, draft: bool) -> tuple[dict, dict | None]:
        g = mla_geometry(shape)
        d_shape = getattr(shape, "draft", None) if draft else None
        return g, (mla_geometry(d_shape) if d_shape is not None else None)

    def _build_model(self, gen: Any, kv_pool_bytes: int | None) -> None:
        import torch

        from backends.aiter.mla_model import MLATransformer

        g = self.geometry
        dim = g["kv_lora_rank"] + g["qk_rope"]
        views = g["layers"] + (1 if self.draft_geometry is not None else 0)
        if kv_pool_bytes is None:
            kv_pool_bytes = self._default_pool_bytes()
        plan = plan_latent_pool(kv_pool_bytes, views=views, page_size=self.page_size, dim=dim,
                                dtype_bytes=self.dtype.itemsize, max_blocks=self.max_blocks,
                                want_view_pages=self._want_view_pages())
        self.pool = LatentPool(plan, page_size=self.page_size, dim=dim, max_blocks=self.max_blocks,
                               device=self.device, dtype=self.dtype, generator=gen)
        self.rope = Rope(g["qk_rope"], self.max_context + 64, device=self.device, dtype=self.dtype,
                         base=10000.0)
        view_tokens = plan.view_pages * self.page_size
        self.index_capacity = INDEX_ROWS_PER_TOKEN * view_tokens
        self.index_buf = torch.zeros(self.index_capacity, dtype=torch.int32, device=self.device)
        sms = (torch.cuda.get_device_properties(self.device).multi_processor_count
               if self.on_gpu else 132)
        common = dict(kernels=self.kernels, mla_kernels=self.mla_kernels, rope=self.rope,
                      index_buf=self.index_buf, page_size=self.page_size, device=self.device,
                      dtype=self.dtype, generator=gen, routing=self.routing,
                      skew=self.routing_skew, sms=sms)
        self.target = MLATransformer(g, caches=[self.pool.view(i) for i in range(g["layers"])],
                                     seed=self.seed, **common)
        self.draft = None
        if self.draft_geometry is not None:
            self.draft = MLATransformer(self.draft_geometry, caches=[self.pool.view(g["layers"])],
                                        seed=self.seed + 7919, **common)

    # ---- the MLA width rule and the index buffer ------------------------------------------------
    @staticmethod
    def kernel_key(key: tuple) -> tuple:
        """``key`` with a verify or draft-extend width replaced by the width the MLA kernels run
        it at."""
        if key and key[0] in ("verify", "extend"):
            what = "verify" if key[0] == "verify" else "draft-extend"
            return (key[0], key[1], mla_kernel_width(key[2], what)) + tuple(key[3:])
        return key

    def capture(self, key: tuple):
        return super().capture(self.kernel_key(key))

    def _new_static(self, key: tuple):
        return super()._new_static(self.kernel_key(key))

    def _check_indices(self, kv_lens: np.ndarray, widths: np.ndarray) -> None:
        n = row_index_count(kv_lens, widths)
        if n > self.index_capacity:
            raise SpecschedError(
                f"this batch's MLA decode rows read {n} keys in all; the index buffer holds "
                f"{self.index_capacity} ({INDEX_ROWS_PER_TOKEN} x the tokens of one layer's KV "
                f"view): the batch holds more KV than the GPU's pool")

    def verify_launch(self, widths: np.ndarray, kv_lens: np.ndarray, *, mode: str,
                      padded_bs: int, launch_width: int):
        """As :meth:`Runner.verify_launch`, at the MLA kernel's width (3 -> 4; 5+ refused)."""
        if mode == "ragged":
            w = np.asarray(widths, dtype=np.int64)
            if len(w) and int(w.max()) > max(MLA_WIDTHS):
                mla_kernel_width(int(w.max()))  # raises: no MLA kernel takes that many rows
            lw = int(launch_width)
        else:
            lw = mla_kernel_width(int(launch_width))
        launch, key = super().verify_launch(widths, kv_lens, mode=mode, padded_bs=padded_bs,
                                            launch_width=lw)
        self._check_indices(launch.kv_lens, launch.attn_widths)
        return launch, key

    def draft_launch(self, kv_lens: np.ndarray, padded_bs: int):
        launch, key = super().draft_launch(kv_lens, padded_bs)
        self._check_indices(launch.kv_lens, launch.attn_widths)
        return launch, key

    def extend_launch(self, kv_lens: np.ndarray, padded_bs: int, width: int):
        """As :meth:`Runner.extend_launch`, at the MLA kernel's width (3 -> 4; 5+ refused): the
        draft-extend pass runs on the decode rows as a verify does."""
        launch, key = super().extend_launch(kv_lens, padded_bs,
                                            mla_kernel_width(int(width), "draft-extend"))
        self._check_indices(launch.kv_lens, launch.attn_widths)
        return launch, key

    def extend_hidden_width(self) -> int:
        """The MTP/NextN layer reads the target's last hidden state (``eh_proj`` fuses it with the
        token's embedding): ``hidden`` columns."""
        return int(self.draft_geometry["hidden"])

    def prefill(self, tokens: np.ndarray, prefix: np.ndarray, *, reps: int = 1,
                warmup: int | None = 0):
        """As :meth:`Runner.prefill`, on the MLA prefill path (its metadata built first)."""
        t = np.asarray(tokens, dtype=np.int64)
        p = np.asarray(prefix, dtype=np.int64)
        self.target.extend_plan = ExtendPlan.build(t, p, self.device)
        try:
            return super().prefill(t, p, reps=reps, warmup=warmup)
        finally:
            self.target.extend_plan = None

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["kv_pool"]["layout"] = "one latent cache [tokens, 1, kv_lora_rank + qk_rope_head_dim]"
        d["mla"] = {"kernel_widths": {str(k): v for k, v in md.MLA_KERNEL_Q_LEN.items()},
                    "verify_as_decode_rows": True, "index_capacity": self.index_capacity,
                    "routing": self.routing, "routing_skew": self.routing_skew,
                    "weights": "fp8 e4m3fn, 128x128 block scales" if self.geometry["fp8"]
                               else str(self.dtype).replace("torch.", ""),
                    "ep": self.geometry["ep"], "experts_local": self.geometry["experts_local"],
                    "moe_a2a": self.moe_a2a if self.geometry["ep"] > 1 else None,
                    "kv_splits": "clamp(ceil(2 x SMs / rows), 2, 16), frozen per graph"}
        return d


class MLAExecutor(AiterExecutor):
    """:class:`AiterExecutor` over an :class:`MLARunner`: a verify's ``launch_width`` is taken at
    the MLA kernels' width (3 as 4; others refused) before it runs."""

    def verify(self, batch: VerifyBatch) -> VerifyTiming:
        lw = mla_kernel_width(int(batch.launch_width)) if batch.mode != "ragged" else None
        if batch.mode == "uniform" and lw != batch.launch_width:
            batch = dataclasses.replace(batch, launch_width=lw,
                                        widths=np.full(len(batch.widths), lw, dtype=np.int64))
        # unsafe-derived keeps SGLang's width (num_draft_tokens) for the diagnostic; the runner
        # launches (and times) it at the kernels' width (3 as 4)
        return super().verify(batch)

    def unsafe_diagnostic(self, widths: np.ndarray, kv: np.ndarray,
                          launch_width: int) -> tuple[int, float | None]:
        """The MLA path's metadata keeps ``launch_width`` (SGLang's ``num_draft_tokens``) for
        every request: rows packed at their real widths are attributed by it.  With
        ``check_unsafe`` a mixed batch's max |output error| comes from
        :func:`backends.aiter.mla_uniformity.mla_attention_error` (layer 0)."""
        v = md.misattribution(widths, launch_width, kv)
        if v is None or not self.check_unsafe:
            return (0 if v is None else v.misattributed_rows), None
        from backends.aiter.mla_uniformity import mla_attention_error

        return v.misattributed_rows, mla_attention_error(self.runner, widths, kv,
                                                         launch_width)["max_abs_error"]

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["caveats"] = [
            "GEMMs run through torch (cuBLAS); MLA attention (decode rows / prefill), the rope + "
            "latent-cache write, RMSNorm and the fused MoE are AITER's Triton kernels",
            "MLA verify runs as bs x width one-row decodes (AITER's Triton MLA decode): the latent "
            "cache is read once per query row, SGLang's ROCm kernel reads it once per request",
            f"MoE routing steered to a {self.runner.routing} plan (docs/aiter.md)",
        ]
        g = self.runner.geometry
        if g["fp8"]:
            d["caveats"].append(
                "FP8 weights (float8_e4m3fn, 128x128 block scales) through AITER's Triton "
                "block-scale GEMM and fused MoE; kv_b, router, embedding, LM head and eh_proj bf16")
        if g["ep"] > 1:
            how = ("dispatch + combine all-to-all per MoE layer modelled (DeepEP-style), in "
                   "place of the MLP all-reduce" if self.runner.moe_a2a == "deepep" else
                   "no all-to-all: the MLP all-reduce combines the experts' outputs")
            d["caveats"].append(
                f"tp {g['tp']} / ep {g['ep']}: rank 0's shard runs ({g['heads']} heads, "
                f"{g['experts_local']} of {g['experts']} routed experts, the shared expert's tp "
                f"shard); tp all-reduces modelled; {how}; nothing of either is run")

        if self.runner.draft is not None:
            rows = ("each request's last row" if self.runner.extend_logits == "last"
                    else "every row")
            d["caveats"].append(
                f"draft model: MTP/NextN layer (eh_proj + one MLA/MoE layer + LM head); "
                f"draft-extend logits for {rows}; every request extends by the batch's width at "
                f"the MLA kernels' width (3 as 4)")
        d["caveats"].extend(self.timing_caveats())
        return d


def make_mla_executor(model: Any, *, page_size: int = 16,
                      capture_bs: Sequence[int] = md.SPEC_CAPTURE_BS,
                      capture_widths: Sequence[int] = md.DEFAULT_CAPTURE_WIDTHS,
                      max_context: int = md.DEFAULT_MAX_CONTEXT,
                      mla_num_draft_tokens: int | None = None, **opts: Any) -> MLAExecutor:
    """The live executor for an MLA (+ MoE) ``ModelShape`` (``make_executor`` dispatches here).

    ``capture_widths`` keeps the MLA widths (1-4; graphs are captured at 1, 2 and 4);
    ``num_draft_tokens`` (SGLang's start-up count, the padded rows' ``seq_len`` and the
    draft-extend width captured with ``capture="all"``) must be an MLA width.  Options: those of
    :func:`backends.aiter.executor.make_executor` plus ``routing`` and ``routing_skew``;
    ``check_unsafe`` measures an unsafe-derived launch's output error on the MLA path
    (:mod:`backends.aiter.mla_uniformity`).
    """
    from backends.aiter import bridge

    t0 = time.perf_counter()  # the executor's setup_s: weights, KV pool, start-up captures
    bridge.require_gpu()
    unknown = set(opts) - MLA_OPTIONS
    if unknown:
        raise SpecschedError(f"aiter backend: unknown option(s) {sorted(unknown)}")
    from backends.aiter.moe import ROUTINGS

    if opts.get("routing", "uniform") not in ROUTINGS:
        raise SpecschedError(f"aiter backend: routing {opts['routing']!r}: choose one of "
                             f"{', '.join(ROUTINGS)}")
    if opts.get("extend_logits", "last") not in EXTEND_LOGITS:
        raise SpecschedError(f"aiter backend: extend_logits {opts['extend_logits']!r}: choose "
                             f"one of {', '.join(EXTEND_LOGITS)}")
    if opts.get("moe_a2a", "none") not in MOE_A2A:
        raise SpecschedError(f"aiter backend: moe_a2a {opts['moe_a2a']!r}: choose one of "
                             f"{', '.join(MOE_A2A)}")
    if not float(opts.get("routing_skew", 1.0)) > 0:
        raise SpecschedError(f"aiter backend: routing_skew must be > 0, got {opts['routing_skew']}")
    ndt = opts.get("num_draft_tokens") or mla_num_draft_tokens
    if ndt is not None:
        mla_kernel_width(int(ndt))  # SGLang refuses a start-up draft count the kernels lack
    widths = sorted({mla_kernel_width(w) for w in capture_widths if int(w) in MLA_WIDTHS})
    if not widths:
        raise SpecschedError(f"capture_widths {list(capture_widths)}: no MLA width (1-4) in it")
    pool = opts.get("kv_pool_gib")
    runner = MLARunner(model, page_size=page_size, max_context=max_context, capture_bs=capture_bs,
                       capture_widths=widths, num_draft_tokens=ndt,
                       dtype=opts.get("dtype", "bfloat16"),
                       kv_pool_bytes=None if pool is None else int(float(pool) * (1 << 30)),
                       seed=int(opts.get("seed", 0)),
                       comm=comm_model_for(opts.get("gpu", "H200"), opts.get("allreduce_latency_s"),
                                           opts.get("allreduce_bus_bw")),
                       routing=opts.get("routing", "uniform"),
                       routing_skew=float(opts.get("routing_skew", 1.0)),
                       extend_logits=opts.get("extend_logits", "last"),
                       moe_a2a=opts.get("moe_a2a", "none"))
    if check_capture(opts.get("capture", "lazy")) == "all":
        capture_all(runner)
    return MLAExecutor(runner, model=model, gpu=opts.get("gpu", "H200"),
                       check_unsafe=bool(opts.get("check_unsafe", False)),
                       setup_s=time.perf_counter() - t0)
