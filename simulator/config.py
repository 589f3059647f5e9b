"""Simulation configuration: one frozen dataclass per section, help text on every field.

A configuration comes from defaults, then an optional TOML file, then command-line overrides
(``SimConfig.load(path, overrides)``).  Unknown keys, wrong types and impossible values are
refused with a :class:`~traces.errors.SpecschedError` naming the file and the key.

TOML layout (every key optional)::

    seed = 0
    rate_scale = 1.0           # 2.0 = arrivals twice as fast

    [engine]
    policy = "pad"             # pad | split | bucket | truncate | fixed | ragged | unsafe-derived
    page_size = 16
    max_running = 256
    ...

    [cluster]
    replicas = 1
    router = "round-robin"     # round-robin | least-outstanding-tokens

    [model]
    name = "llama-3.1-8b"      # a preset, or the path of a Hugging Face config.json
    tp = 1                     # 0: the preset's own

    [backend]
    name = "profile"           # profile | roofline | aiter
    gpu = "H200"
    profile = ""               # a profile parquet; "" = the shipped one for model and GPU
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from traces.errors import SpecschedError

__all__ = ["EngineConfig", "ClusterConfig", "ModelConfig", "BackendConfig", "SimConfig",
           "POLICIES", "ROUTERS", "sglang_spec_ladder", "parse_overrides"]

POLICIES = ("pad", "split", "bucket", "truncate", "fixed", "ragged", "unsafe-derived")
ROUTERS = ("round-robin", "least-outstanding-tokens")
#: query lengths per request that AITER's MLA decode kernels support (3 is padded to 4)
MLA_WIDTHS = (1, 2, 3, 4)


def sglang_spec_ladder(max_bs: int) -> tuple[int, ...]:
    """SGLang's CUDA-graph batch sizes with speculative decoding: 1-8, 10-32 step 2, 40-64
    step 4, 72-256 step 8 (and on in steps of 8 past 256 if asked), capped at ``max_bs``."""
    sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
    sizes += list(range(72, max(max_bs, 256) + 1, 8))
    return tuple(b for b in sizes if b <= max_bs)


def _f(default, help: str, **kw):
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class EngineConfig:
    """One replica: an SGLang-like engine with speculative decoding (chain drafting, top-k 1)."""

    policy: str = _f("pad", "verify policy: " + ", ".join(POLICIES))
    page_size: int = _f(16, "KV cache page size in tokens")
    kv_capacity_tokens: int = _f(0, "KV cache capacity in tokens; 0 = from the model's KV bytes "
                                    "per token and the GPU's memory")
    mem_fraction: float = _f(0.0, "fraction of GPU memory for weights + KV (SGLang's "
                                  "mem_fraction_static); 0 = SGLang's default for the GPU")
    max_running: int = _f(256, "cap on running requests (SGLang max_running_requests)")
    chunked_prefill_size: int = _f(8192, "tokens per prefill pass (SGLang chunked_prefill_size)")
    max_prefill_tokens: int = _f(16384, "upper bound on a prefill pass (SGLang max_prefill_tokens)")
    admission_reserve_tokens: int = _f(
        128, "KV tokens kept free per running request when admitting a new one (a simple "
             "stand-in for SGLang's new_token_ratio reservation); retraction handles the rest")
    scheduler_overhead_s: float = _f(0.0, "host time per iteration before its first pass, seconds")
    cuda_graph_max_bs: int = _f(256, "largest captured batch size; larger batches run eagerly")
    capture_bs: tuple[int, ...] = _f((), "captured batch sizes; empty = SGLang's speculative "
                                         "ladder up to cuda_graph_max_bs")
    capture_widths: tuple[int, ...] = _f((1, 2, 3, 4, 5, 6, 7, 8),
                                         "verify widths with captured graphs; others run eagerly")
    fixed_width: int = _f(4, "the start-up width of the fixed policy (num_draft_tokens)")
    buckets: tuple[int, ...] = _f((2, 4, 8), "widths the bucket policy rounds up to")
    max_draft: int = _f(0, "cap on drafts a request proposes per step; 0 = no cap")
    widen: str = _f("auto", "when a policy raises a width, the extra slots hold real drafts "
                            "('draft') or padding ('pad'); 'auto' = draft for fixed, pad otherwise")
    mla: bool = _f(False, "the model uses MLA attention (set from the model; restricts fixed widths)")
    record_request_steps: bool = _f(True, "write request_steps.parquet (one row per request step)")

    @property
    def ladder(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.capture_bs))) if self.capture_bs else sglang_spec_ladder(
            self.cuda_graph_max_bs)

    @property
    def widen_drafts(self) -> bool:
        return self.widen == "draft" or (self.widen == "auto" and self.policy == "fixed")


@dataclass(frozen=True)
class ClusterConfig:
    """Replicas behind a router."""

    replicas: int = _f(1, "number of identical replicas")
    router: str = _f("round-robin", "router: " + ", ".join(ROUTERS))


@dataclass(frozen=True)
class ModelConfig:
    """The served model (target) and its EAGLE-style draft."""

    name: str = _f("llama-3.1-8b", "model preset or path of a Hugging Face config.json")
    tp: int = _f(0, "tensor-parallel degree; 0 = the preset's own")


@dataclass(frozen=True)
class BackendConfig:
    """The executor that times forward passes."""

    name: str = _f("profile", "executor: profile (CPU, calibrated on a GPU), roofline (CPU), "
                              "aiter (live, GPU)")
    gpu: str = _f("H200", "GPU of the hardware sheet / profile")
    profile: str = _f("", "profile parquet; empty = the shipped profile for model and GPU")
    kv_lookup: str = _f("straggler", "KV coordinate of a batch's table lookup: straggler (the "
                                     "uniform KV with the same attention time, from the attention "
                                     "kernel's grid as the profile recorded it) or mean")


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulation depends on besides the trace."""

    seed: int = _f(0, "seed of every random draw (acceptance beyond the recorded drafts)")
    rate_scale: float = _f(1.0, "arrival-rate multiplier (2.0 = twice the recorded rate)")
    engine: EngineConfig = field(default_factory=EngineConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)

    # ------------------------------------------------------------------ loading
    @staticmethod
    def load(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> "SimConfig":
        """Defaults, then the TOML file, then ``overrides`` (dotted keys: ``engine.policy``)."""
        data: dict[str, Any] = {}
        where = "configuration"
        if path is not None:
            where = str(path)
            try:
                with open(path, "rb") as fh:
                    data = tomllib.load(fh)
            except FileNotFoundError:
                raise SpecschedError("no such file", path=str(path)) from None
            except tomllib.TOMLDecodeError as exc:
                raise SpecschedError(f"not valid TOML: {exc}", path=str(path)) from None
        cfg = _build(SimConfig, data, where, "")
        if overrides:
            cfg = cfg.replace(overrides)
        cfg.check()
        return cfg

    def replace(self, overrides: dict[str, Any]) -> "SimConfig":
        """A copy with dotted keys replaced (``{"engine.policy": "split", "seed": 3}``)."""
        tree = self.to_dict()
        for key, value in overrides.items():
            if value is None:
                continue
            node = tree
            parts = key.split(".")
            for p in parts[:-1]:
                if p not in node or not isinstance(node[p], dict):
                    raise SpecschedError(f"unknown configuration key '{key}'{_did_you_mean(key)}")
                node = node[p]
            if parts[-1] not in node:
                raise SpecschedError(f"unknown configuration key '{key}'{_did_you_mean(key)}")
            node[parts[-1]] = value
        cfg = _build(SimConfig, tree, "configuration", "")
        cfg.check()
        return cfg

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (tuples as lists): what summary.json records and TOML files hold."""
        def conv(v):
            if isinstance(v, tuple):
                return list(v)
            if isinstance(v, dict):
                return {k: conv(x) for k, x in v.items()}
            return v
        return conv(dataclasses.asdict(self))

    def check(self) -> None:
        """Refuse impossible values, naming the key."""
        e = self.engine
        if e.policy not in POLICIES:
            raise SpecschedError(f"engine.policy: unknown policy '{e.policy}' "
                                 f"(choose from {', '.join(POLICIES)})")
        if e.widen not in ("auto", "draft", "pad"):
            raise SpecschedError(f"engine.widen: must be auto, draft or pad (got '{e.widen}')")
        positive = {"engine.page_size": e.page_size, "engine.max_running": e.max_running,
                    "engine.chunked_prefill_size": e.chunked_prefill_size,
                    "engine.max_prefill_tokens": e.max_prefill_tokens,
                    "engine.fixed_width": e.fixed_width, "cluster.replicas": self.cluster.replicas}
        for key, v in positive.items():
            if v < 1:
                raise SpecschedError(f"{key}: must be >= 1 (got {v})")
        for key, v in {"engine.kv_capacity_tokens": e.kv_capacity_tokens,
                       "engine.max_draft": e.max_draft,
                       "engine.cuda_graph_max_bs": e.cuda_graph_max_bs,
                       "engine.admission_reserve_tokens": e.admission_reserve_tokens,
                       "model.tp": self.model.tp}.items():
            if v < 0:
                raise SpecschedError(f"{key}: must be >= 0 (got {v})")
        if not (e.scheduler_overhead_s >= 0 and e.scheduler_overhead_s < 10):
            raise SpecschedError(f"engine.scheduler_overhead_s: must be in [0, 10) seconds "
                                 f"(got {e.scheduler_overhead_s})")
        if not (0 <= e.mem_fraction < 1):
            raise SpecschedError(f"engine.mem_fraction: must be in [0, 1) (got {e.mem_fraction})")
        if not (self.rate_scale > 0 and self.rate_scale < 1e6):
            raise SpecschedError(f"rate_scale: must be > 0 (got {self.rate_scale})")
        for key, seq, hi in (("engine.capture_widths", e.capture_widths, 64),
                             ("engine.buckets", e.buckets, 64),
                             ("engine.capture_bs", e.capture_bs, 4096)):
            if any(v < 1 or v > hi for v in seq):
                raise SpecschedError(f"{key}: values must be in 1..{hi} (got {list(seq)})")
        if not e.buckets:
            raise SpecschedError("engine.buckets: needs at least one width")
        if e.fixed_width > 64:
            raise SpecschedError(f"engine.fixed_width: at most 64 (got {e.fixed_width})")
        if e.mla and e.policy == "fixed" and e.fixed_width not in MLA_WIDTHS:
            raise SpecschedError(
                f"engine.fixed_width: {e.fixed_width} is not a width the AITER MLA decode kernels "
                f"support (query lengths 1, 2 and 4 per request; 3 is padded to 4)")
        if self.cluster.router not in ROUTERS:
            raise SpecschedError(f"cluster.router: unknown router '{self.cluster.router}' "
                                 f"(choose from {', '.join(ROUTERS)})")
        if self.backend.kv_lookup not in ("straggler", "mean"):
            raise SpecschedError(f"backend.kv_lookup: must be straggler or mean (got "
                                 f"'{self.backend.kv_lookup}')")
        if self.backend.name not in ("profile", "roofline", "aiter"):
            raise SpecschedError(f"backend.name: unknown backend '{self.backend.name}' "
                                 "(choose from profile, roofline, aiter)")


def parse_overrides(values) -> dict[str, str]:
    """``--set KEY=VALUE`` options as a dict of dotted keys (values are coerced by
    :meth:`SimConfig.replace`)."""
    out = {}
    for item in values:
        if "=" not in item:
            raise SpecschedError(f"--set: expected KEY=VALUE, got '{item}'")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _dotted_keys(cls=None, prefix: str = "") -> list[str]:
    """Every configuration key, dotted (``engine.max_running``)."""
    out = []
    for f in fields(cls or SimConfig):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if dataclasses.is_dataclass(default):
            out += _dotted_keys(type(default), f"{prefix}{f.name}.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


def _did_you_mean(key: str) -> str:
    """`` (did you mean 'engine.max_running'?)`` for a misspelled key, or ``""``."""
    import difflib

    keys = _dotted_keys()
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    if not close:  # a right key name in the wrong section, or a section left out
        leaf = key.rsplit(".", 1)[-1]
        close = [k for k in keys if k.rsplit(".", 1)[-1] == leaf][:1]
    return f" (did you mean '{close[0]}'?)" if close else ""


def _build(cls, data: dict[str, Any], where: str, prefix: str):
    """Instantiate dataclass ``cls`` from ``data``, checking keys and types."""
    if not isinstance(data, dict):
        raise SpecschedError(f"{prefix.rstrip('.') or 'top level'}: must be a table", path=where)
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            hint = _did_you_mean(f"{prefix}{key}") or f" (known: {', '.join(known)})"
            raise SpecschedError(f"unknown key '{prefix}{key}'{hint}", path=where)
        f = known[key]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if dataclasses.is_dataclass(default):
            kwargs[key] = _build(type(default), value, where, f"{prefix}{key}.")
        else:
            kwargs[key] = _coerce(value, default, where, f"{prefix}{key}")
    return cls(**kwargs)


def _coerce(value, default, where: str, key: str):
    def bad(expected: str):
        return SpecschedError(f"'{key}' must be {expected} (got {value!r})", path=where)

    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise bad("true or false")
    if isinstance(default, int):
        if isinstance(value, bool):
            raise bad("an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise bad("an integer") from None
        raise bad("an integer")
    if isinstance(default, float):
        if isinstance(value, bool):
            raise bad("a number")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise bad("a number") from None
        raise bad("a number")
    if isinstance(default, tuple):
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, (str, list, tuple)):
            raise bad("a list of integers (2,4,8, [2,4,8] or 1-8)")
        from traces.textlist import parse_int_list

        try:
            return tuple(parse_int_list(value, what=f"'{key}'", allow_empty=True))
        except SpecschedError as exc:
            raise SpecschedError(f"{exc.message} (e.g. 2,4,8, [2,4,8] or 1-8)",
                                 path=where) from None
    if isinstance(default, str):
        if not isinstance(value, str):
            raise bad("a string")
        return value
    raise bad(type(default).__name__)
