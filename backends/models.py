"""Model shapes: what a forward pass of a model has to compute and read, per GPU.

A :class:`ModelShape` is read from a Hugging Face ``config.json`` or from a preset (the presets
in ``backends/presets/`` are those files' fields, copied as published, with their source).  It
knows one tensor-parallel shard's parameters and weight bytes, the KV bytes a token costs per
GPU, the EAGLE draft model that goes with it, and how many KV tokens fit on a GPU the way SGLang
sizes its pool.

Tensor parallelism follows SGLang: attention heads, MLP/expert intermediate sizes and the
vocabulary are split across ranks; with GQA, KV heads are split too (replicated when there are
fewer KV heads than ranks); with MLA the compressed KV cache is *not* split -- every rank keeps
``kv_lora_rank + qk_rope_head_dim`` values per token and layer (SGLang's ``MLATokenToKVPool``,
``profile_max_num_token``), and the down-projections ``q_a``/``kv_a`` are replicated.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from backends.sglang_memory import sglang_mem_fraction_static
from traces.errors import SpecschedError

__all__ = ["ModelShape", "load_model", "PRESETS", "sglang_mem_fraction_static",
           "CONTEXT_RESERVE_BYTES", "DRAFT_KINDS"]

_PRESET_DIR = Path(__file__).resolve().parent / "presets"

#: EAGLE draft models an MHA/GQA target can be served with (``ModelShape.draft_kind``).
DRAFT_KINDS = ("eagle", "eagle3")

#: Preset name -> its JSON file (a Hugging Face config.json plus a ``specsched`` block).
PRESETS: Mapping[str, Path] = MappingProxyType(
    {p.stem: p for p in sorted(_PRESET_DIR.glob("*.json"))})

#: GPU memory in use before SGLang profiles its KV pool that is neither weights nor part of the
#: ``1 - mem_fraction_static`` reserve: the CUDA/HIP context, cuBLAS workspaces, NCCL buffers.
#: An estimate (about 0.5-1 GiB is typical per process); override per call.
CONTEXT_RESERVE_BYTES = 1 << 30

_ACT_BYTES = 2  # embeddings, LM head, norms, routers and activations stay in bf16


@dataclass(frozen=True)
class ModelShape:
    """A transformer's shape, and the tensor-parallel degree it is served at.

    ``attention`` is ``"mha"`` (MHA/GQA: ``heads`` query heads, ``kv_heads`` KV heads of
    ``head_dim``) or ``"mla"`` (DeepSeek-style: the ``kv_lora_rank``/``q_lora_rank``/
    ``qk_*_head_dim``/``v_head_dim`` fields apply).  MoE models have ``experts > 0``: each MoE
    layer holds ``experts`` routed experts of width ``moe_intermediate`` (``experts_per_token``
    active) plus ``shared_experts`` always active; the first ``dense_layers`` layers keep a
    dense MLP of width ``intermediate``.  ``dtype_bytes`` is the linear layers' weight width
    (1 = FP8), ``kv_dtype_bytes`` the KV cache's.  Draft shapes (``layers == 1``) may fuse
    target features first: ``fusion_in`` is the input width of that fusion GEMM (EAGLE:
    2*hidden over the embedding and the hidden state, every pass; EAGLE-3: 3*hidden over the
    target's three captured hidden states, in the draft-extend pass only; DeepSeek MTP: 2*hidden)
    and ``attn_in`` the width the QKV projection reads (EAGLE-3: 2*hidden); 0 means none /
    ``hidden``.  ``draft_kind`` names the EAGLE draft served with an MHA/GQA target:
    ``"eagle"`` (SGLang's ``LlamaForCausalLMEagle``, EAGLE-1/2 checkpoints) or ``"eagle3"``
    (``LlamaForCausalLMEagle3``); MLA/MoE targets get DeepSeek's MTP layer whichever it says.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tp: int = 1
    attention: str = "mha"
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_intermediate: int = 0
    dense_layers: int = 0
    dtype_bytes: int = 2
    kv_dtype_bytes: int = 2
    tie_embeddings: bool = False
    fusion_in: int = 0
    attn_in: int = 0
    #: the model's context length (``max_position_embeddings``); 0 = unknown
    context_len: int = 0
    draft_kind: str = "eagle"
    source: str = ""

    def __post_init__(self) -> None:
        _check_shape(self)

    # ---- per-GPU geometry ------------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def heads_per_gpu(self) -> int:
        return self.heads // self.tp

    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads stored per GPU (MHA/GQA; replicated when ``tp > kv_heads``); 1 latent for MLA."""
        if self.is_mla:
            return 1
        return max(1, self.kv_heads // self.tp)

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def dense_mlp_layers(self) -> int:
        return self.dense_layers if self.is_moe else self.layers

    @property
    def vocab_per_gpu(self) -> int:
        return -(-self.vocab // self.tp)

    @property
    def qk_head_dim(self) -> int:
        """Query/key width per head: ``head_dim`` (MHA) or nope + rope (MLA)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def kv_cache_dim(self) -> int:
        """Values cached per token, layer and stored KV head: K and V (MHA) or latent + rope (MLA)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.head_dim

    # ---- parameters ------------------------------------------------------------------------
    def linear_params_per_layer(self) -> dict[str, int]:
        """Per-GPU parameters of one layer's GEMMs, by GEMM (MoE experts: all of them)."""
        h = self.hidden
        hq = self.heads_per_gpu
        ain = self.attn_in or h
        p: dict[str, int] = {}
        if self.is_mla:
            if self.q_lora_rank:
                p["q_a"] = h * self.q_lora_rank  # replicated
                p["q_b"] = self.q_lora_rank * hq * self.qk_head_dim
            else:
                p["q"] = h * hq * self.qk_head_dim
            p["kv_a"] = h * (self.kv_lora_rank + self.qk_rope_head_dim)  # replicated
            p["kv_b"] = self.kv_lora_rank * hq * (self.qk_nope_head_dim + self.v_head_dim)
            p["o"] = hq * self.v_head_dim * h
        else:
            p["qkv"] = ain * (hq + 2 * self.kv_heads_per_gpu) * self.head_dim
            p["o"] = hq * self.head_dim * h
        return p

    def mlp_params(self, *, moe: bool) -> int:
        """Per-GPU parameters of one layer's MLP: dense, or every routed + shared expert."""
        if not moe:
            return 3 * self.hidden * self.intermediate // self.tp
        per_expert = 3 * self.hidden * self.moe_intermediate // self.tp
        return (self.experts + self.shared_experts) * per_expert

    def param_breakdown(self) -> dict[str, tuple[int, int]]:
        """Per-GPU ``{component: (parameters, bytes)}``; linear layers at ``dtype_bytes``,
        embeddings, LM head, norms and routers at 2 bytes."""
        h = self.hidden
        attn = sum(self.linear_params_per_layer().values()) * self.layers
        dense = self.mlp_params(moe=False) * self.dense_mlp_layers
        moe = self.mlp_params(moe=True) * self.moe_layers
        router = h * self.experts * self.moe_layers
        norms = self.layers * 2 * h + h
        if self.is_mla:
            norms += self.layers * (self.q_lora_rank + self.kv_lora_rank)
        embed = self.vocab_per_gpu * h
        lm_head = 0 if self.tie_embeddings else self.vocab_per_gpu * h
        fusion = self.fusion_in * h if self.fusion_in else 0
        wb = self.dtype_bytes
        out = {
            "attention": (attn, attn * wb),
            "dense_mlp": (dense, dense * wb),
            "moe_experts": (moe, moe * wb),
            "router": (router, router * _ACT_BYTES),
            "norms": (norms, norms * _ACT_BYTES),
            "embedding": (embed, embed * _ACT_BYTES),
            "lm_head": (lm_head, lm_head * _ACT_BYTES),
        }
        if fusion:
            out["fusion"] = (fusion, fusion * _ACT_BYTES)
        return out

    @property
    def params_per_gpu(self) -> int:
        """Parameters one tensor-parallel rank holds."""
        return sum(p for p, _ in self.param_breakdown().values())

    @property
    def weight_bytes_per_gpu(self) -> int:
        """Weight bytes one tensor-parallel rank holds."""
        return sum(b for _, b in self.param_breakdown().values())

    @property
    def params_total(self) -> int:
        """Parameters of the whole model (the tp=1 count)."""
        return replace(self, tp=1).params_per_gpu if self.tp != 1 else self.params_per_gpu

    @property
    def active_params_per_token(self) -> int:
        """Parameters one token touches (MoE: only its experts), whole model."""
        m = replace(self, tp=1) if self.tp != 1 else self
        total = m.params_per_gpu
        if m.is_moe:
            per_expert = 3 * m.hidden * m.moe_intermediate
            total -= m.moe_layers * (m.experts - m.experts_per_token) * per_expert
        return total

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token costs on one GPU (all layers).

        MHA/GQA: ``2 * layers * kv_heads_per_gpu * head_dim * kv_dtype_bytes``;
        MLA: ``layers * (kv_lora_rank + qk_rope_head_dim) * kv_dtype_bytes`` on every rank.
        """
        return self.layers * self.kv_heads_per_gpu * self.kv_cache_dim * self.kv_dtype_bytes

    # ---- the EAGLE draft -------------------------------------------------------------------
    def eagle_draft(self, *, vocab: int | None = None) -> "ModelShape":
        """The EAGLE draft model served with this target: one decoder layer of the target's width
        and attention type, and an LM head (the target's vocabulary unless ``vocab`` is given;
        EAGLE-3 checkpoints often ship a reduced draft vocabulary, e.g. 32000 for Llama-3.1).

        MHA/GQA targets, ``draft_kind == "eagle"``: the ``fc`` GEMM (2*hidden -> hidden) over the
        token embedding and the hidden state side by side, in every pass, then the layer
        (SGLang's ``llama_eagle.py``).  ``"eagle3"``: a QKV projection that reads 2*hidden (the
        normed embedding and hidden state side by side) and the fusion GEMM (3*hidden -> hidden)
        over the target's three captured hidden states, which runs only when the hidden state
        comes from the target -- the draft-extend pass -- not in draft decode steps
        (``llama_eagle3.py``).  MLA/MoE targets get DeepSeek's MTP (NextN) layer: an ``eh_proj``
        fusion (2*hidden -> hidden) and one MoE decoder layer.
        """
        if self.is_mla or self.is_moe:
            fusion, attn_in, dense = 2 * self.hidden, 0, 0 if self.is_moe else 1
        elif self.draft_kind == "eagle3":
            fusion, attn_in, dense = 3 * self.hidden, 2 * self.hidden, 1
        else:
            fusion, attn_in, dense = 2 * self.hidden, 0, 1
        return replace(self, name=f"{self.name}-draft", layers=1, dense_layers=dense,
                       vocab=vocab or self.vocab, fusion_in=fusion, attn_in=attn_in,
                       source=f"EAGLE draft of {self.name} (derived)")

    @property
    def draft(self) -> "ModelShape":
        """:meth:`eagle_draft` with the target's vocabulary."""
        return self.eagle_draft()

    @property
    def fusion_on_decode(self) -> bool:
        """Whether a draft decode step runs the fusion GEMM: every draft's does except EAGLE-3's,
        whose fusion reads the target's hidden states (the draft-extend pass only)."""
        return bool(self.fusion_in) and not (self.draft_kind == "eagle3" and self.attn_in)

    # ---- memory ----------------------------------------------------------------------------
    def sglang_mem_fraction(self, gpu: Any = "H200", **settings: Any) -> float:
        """SGLang's default ``mem_fraction_static`` for this model on ``gpu`` with the AITER
        backend (:func:`backends.sglang_memory.sglang_mem_fraction_static`; ``settings``: its
        keywords given explicitly)."""
        from backends.hardware import get_gpu

        sheet = get_gpu(gpu)
        return sglang_mem_fraction_static(sheet.memory_bytes, tp=self.tp, mla=self.is_mla,
                                          nvidia=sheet.vendor == "NVIDIA",
                                          context_len=self.context_len, **settings)

    def kv_capacity_tokens(self, gpu: Any = "H200", mem_fraction: float | None = None, *,
                           context_reserve_bytes: int = CONTEXT_RESERVE_BYTES,
                           speculative: bool = True) -> int:
        """KV tokens one replica's pool holds, sized the way SGLang does.

        ``memory * mem_fraction_static - weights - context_reserve``, divided by the bytes a
        token takes: :attr:`kv_bytes_per_token`, and with ``speculative`` the draft model's
        layers at the target's per-layer size too (SGLang sizes the target's pool with the draft
        pool's bytes in each token's cell and gives the draft pool the same token count:
        ``model_executor/pool_configurator.py``). ``mem_fraction=None`` uses SGLang's default for
        this GPU and model with no setting given (:meth:`sglang_mem_fraction`; ``simulate``
        passes the fraction its settings give).
        """
        from backends.hardware import get_gpu

        sheet = get_gpu(gpu)
        frac = self.sglang_mem_fraction(gpu) if mem_fraction is None else float(mem_fraction)
        if not 0.0 < frac <= 1.0:
            raise SpecschedError(f"mem_fraction must be in (0, 1], got {frac}")
        free = sheet.memory_bytes * frac - self.weight_bytes_per_gpu - context_reserve_bytes
        if free <= 0:
            raise SpecschedError(
                f"{self.name} (tp {self.tp}) does not fit on a {sheet.name}: "
                f"{self.weight_bytes_per_gpu / 2**30:.1f} GiB of weights per GPU, "
                f"{sheet.memory_bytes * frac / 2**30:.1f} GiB usable at mem_fraction_static "
                f"{frac:.3f}; raise tp")
        cell = self.kv_bytes_per_token
        if speculative:
            cell += int(cell * self.draft.layers / self.layers)
        return int(free // cell)

    # ---- serialisation ---------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "ModelShape":
        names = {f.name for f in fields(ModelShape)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise SpecschedError(f"model shape has unknown keys {unknown}")
        try:
            return ModelShape(**dict(d))
        except TypeError as exc:
            raise SpecschedError(f"model shape is incomplete: {exc}") from None


def _check_shape(m: ModelShape) -> None:
    def bad(msg: str) -> SpecschedError:
        return SpecschedError(f"model {m.name!r}: {msg}")

    for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "tp",
              "dtype_bytes", "kv_dtype_bytes"):
        v = getattr(m, f)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise bad(f"{f} must be a positive integer, got {v!r}")
    for f in ("intermediate", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
              "qk_nope_head_dim", "v_head_dim", "experts", "experts_per_token", "shared_experts",
              "moe_intermediate", "dense_layers", "fusion_in", "attn_in"):
        v = getattr(m, f)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise bad(f"{f} must be a non-negative integer, got {v!r}")
    if m.draft_kind not in DRAFT_KINDS:
        raise bad(f"draft_kind must be one of {', '.join(DRAFT_KINDS)}, got {m.draft_kind!r}")
    if m.attention not in ("mha", "mla"):
        raise bad(f"attention must be 'mha' or 'mla', got {m.attention!r}")
    if m.heads % m.tp:
        raise bad(f"{m.heads} attention heads do not split over tp {m.tp}")
    if m.attention == "mha":
        if m.heads % m.kv_heads:
            raise bad(f"{m.heads} query heads are not a multiple of {m.kv_heads} KV heads")
        if m.kv_heads % m.tp and m.tp % m.kv_heads:
            raise bad(f"{m.kv_heads} KV heads neither split over nor replicate evenly on tp {m.tp}")
    else:
        for f in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if getattr(m, f) < 1:
                raise bad(f"MLA needs {f} >= 1")
    if m.experts:
        if not (1 <= m.experts_per_token <= m.experts) or m.moe_intermediate < 1:
            raise bad("MoE needs 1 <= experts_per_token <= experts and moe_intermediate >= 1")
        if m.dense_layers > m.layers:
            raise bad("dense_layers exceeds layers")
        if m.moe_intermediate % m.tp:
            raise bad(f"moe_intermediate {m.moe_intermediate} does not split over tp {m.tp}")
    if m.dense_mlp_layers and (m.intermediate < 1 or m.intermediate % m.tp):
        raise bad(f"intermediate {m.intermediate} must be >= 1 and split over tp {m.tp}")


# ---- SGLang's memory default ---------------------------------------------------------------
# ---- loading -------------------------------------------------------------------------------
def load_model(name_or_path: "str | Path | ModelShape", *, tp: int | None = None,
               draft_kind: str | None = None) -> ModelShape:
    """A model shape from a preset name (see :data:`PRESETS`), a ``config.json`` path, or a folder
    holding one.  ``tp`` overrides the preset's tensor-parallel degree (default 1 for files);
    ``draft_kind`` the EAGLE draft served with it (:data:`DRAFT_KINDS`; default ``"eagle"``)."""
    if draft_kind is not None and draft_kind not in DRAFT_KINDS:
        raise SpecschedError(f"draft kind must be one of {', '.join(DRAFT_KINDS)}, got {draft_kind!r}")
    if isinstance(name_or_path, ModelShape):
        m = name_or_path
    else:
        key = str(name_or_path).strip()
        if key.lower() in PRESETS:
            m = _from_config_file(PRESETS[key.lower()], tp=tp, preset=True)
        else:
            path = Path(key)
            if path.is_dir():
                path = path / "config.json"
            if not path.is_file():
                raise SpecschedError(f"unknown model {key!r}: not a preset ({', '.join(PRESETS)}) "
                                     "and no config.json there")
            m = _from_config_file(path, tp=tp, preset=False)
    changes: dict[str, Any] = {}
    if tp is not None and tp != m.tp:
        changes["tp"] = tp
    if draft_kind is not None and draft_kind != m.draft_kind:
        changes["draft_kind"] = draft_kind
    return replace(m, **changes) if changes else m


def _from_config_file(path: Path, *, tp: int | None, preset: bool) -> ModelShape:
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecschedError(f"cannot read: {exc}", path=str(path)) from None
    except json.JSONDecodeError as exc:
        raise SpecschedError(f"not valid JSON: {exc}", path=str(path)) from None
    if not isinstance(cfg, dict):
        raise SpecschedError("a config.json must hold a JSON object", path=str(path))
    meta = cfg.get("specsched") if preset else None
    if meta:
        name, source, default_tp = meta["name"], meta["source"], int(meta.get("tp", 1))
    else:
        name = str(cfg.get("_name_or_path") or path.resolve().parent.name).rstrip("/").split("/")[-1]
        source, default_tp = str(path), 1
    return shape_from_config(cfg, name=name, tp=default_tp if tp is None else tp,
                             source=source, path=str(path))


_HYBRID_KEYS = ("ssm_state_size", "mamba_d_state", "linear_num_value_heads", "linear_key_head_dim",
                "hybrid_override_pattern", "attn_type_list", "block_types", "linear_conv_kernel_dim")


def shape_from_config(cfg: Mapping[str, Any], *, name: str, tp: int = 1, source: str = "",
                      path: str = "config.json") -> ModelShape:
    """Parse a Hugging Face config (Llama/Qwen/Mistral-style GQA, Mixtral/Qwen-MoE, DeepSeek
    V2/V3-style MLA + MoE).  Anything else is refused with the file and the key."""
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]

    def err(key: str, msg: str) -> SpecschedError:
        return SpecschedError(f"key '{key}': {msg}", path=path)

    def get_int(key: str, default: Any = ..., *, positive: bool = True) -> int:
        if key not in cfg or cfg[key] is None:
            if default is ...:
                raise err(key, "missing (needed to size the model)")
            return default
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
            raise err(key, f"must be an integer, got {v!r}")
        if int(v) < (1 if positive else 0):
            raise err(key, f"must be {'positive' if positive else 'non-negative'}, got {v!r}")
        return int(v)

    for key in _HYBRID_KEYS:
        if key in cfg:
            raise err(key, "hybrid/linear-attention models are not supported")
    if cfg.get("is_encoder_decoder"):
        raise err("is_encoder_decoder", "encoder-decoder models are not supported")
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and any(
            t not in ("full_attention", "sliding_attention") for t in layer_types):
        raise err("layer_types", f"only attention layers are supported, got {sorted(set(map(str, layer_types)))}")

    hidden = get_int("hidden_size")
    layers = get_int("num_hidden_layers")
    heads = get_int("num_attention_heads")
    vocab = get_int("vocab_size")
    kv_heads = get_int("num_key_value_heads", heads)
    if "head_dim" in cfg and cfg["head_dim"] is not None:
        head_dim = get_int("head_dim")
    elif hidden % heads:
        raise err("head_dim", f"missing, and hidden_size {hidden} is not a multiple of {heads} heads")
    else:
        head_dim = hidden // heads

    kw: dict[str, Any] = {}
    if cfg.get("kv_lora_rank") is not None:
        kw.update(attention="mla", kv_lora_rank=get_int("kv_lora_rank"),
                  q_lora_rank=get_int("q_lora_rank", 0, positive=False),
                  qk_rope_head_dim=get_int("qk_rope_head_dim"),
                  qk_nope_head_dim=get_int("qk_nope_head_dim"),
                  v_head_dim=get_int("v_head_dim"))
        kv_heads = heads

    experts = 0
    for key in ("n_routed_experts", "num_local_experts", "num_experts"):
        if cfg.get(key):
            experts = get_int(key)
            break
    intermediate = get_int("intermediate_size", 0, positive=False)
    if experts:
        if get_int("moe_layer_freq", 1) != 1 or get_int("decoder_sparse_step", 1) != 1:
            raise err("moe_layer_freq", "MoE on every k-th layer (k > 1) is not supported")
        if cfg.get("mlp_only_layers"):
            raise err("mlp_only_layers", "mixed dense/MoE layer lists are not supported")
        moe_inter = get_int("moe_intermediate_size", 0, positive=False) or intermediate
        if moe_inter < 1:
            raise err("moe_intermediate_size", "missing for a MoE model")
        shared = get_int("n_shared_experts", 0, positive=False)
        if not shared and cfg.get("shared_expert_intermediate_size"):
            shared = max(1, round(get_int("shared_expert_intermediate_size") / moe_inter))
        kw.update(experts=experts, experts_per_token=get_int("num_experts_per_tok"),
                  shared_experts=shared, moe_intermediate=moe_inter,
                  dense_layers=get_int("first_k_dense_replace", 0, positive=False))
        if kw["dense_layers"] and intermediate < 1:
            raise err("intermediate_size", "missing for the dense layers")
    elif intermediate < 1:
        raise err("intermediate_size", "missing (needed to size the MLP)")

    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").lower()
    if dtype not in ("bfloat16", "float16", "float32", "bf16", "fp16", "half"):
        raise err("torch_dtype", f"unsupported dtype {dtype!r}")
    dtype_bytes = 2  # served in 16-bit (SGLang serves float32 checkpoints in half precision)
    q = cfg.get("quantization_config")
    if q:
        method = str(q.get("quant_method", "")).lower() if isinstance(q, dict) else ""
        if method != "fp8":
            raise err("quantization_config", f"quant_method {method or q!r} is not supported (only fp8)")
        dtype_bytes = 1
    return ModelShape(
        name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, intermediate=intermediate, vocab=vocab, tp=int(tp),
        dtype_bytes=dtype_bytes, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        context_len=get_int("max_position_embeddings", 0, positive=False), source=source, **kw)

