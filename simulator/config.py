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
    router = "round-robin"     # round-robin | least-outstanding-tokens | cache-aware

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

from backends.attention_kv import BS_INTERPS, resolve_kv_lookup
from simulator import controller_config, sglang
from simulator.controller_config import ControllerConfig
from simulator.registry import CONTROLLERS, VERIFY_POLICIES
from traces.errors import SpecschedError

__all__ = ["EngineConfig", "ClusterConfig", "ModelConfig", "BackendConfig", "ControllerConfig",
           "SimConfig", "POLICIES", "KV_LOOKUPS", "resolve_kv_lookup", "CONTROLLER_NAMES",
           "ROUTERS", "RENAMED", "parse_overrides"]

#: engine.max_running without speculative decoding when the model's context length is unknown
#: (SGLang sizes it from the token pool and the context, ``simulator.sglang.nospec_max_running``,
#: which ``simulate`` applies; summaries warn when this fallback is used)
NOSPEC_MAX_RUNNING = 256
POLICIES = VERIFY_POLICIES.names()
CONTROLLER_NAMES = CONTROLLERS.names()
ROUTERS = ("round-robin", "least-outstanding-tokens", "cache-aware")
RADIX_MODES = ("auto", "on", "off")
SCHEDULE_POLICIES = ("fcfs", "lpm")
KV_LOOKUPS = ("auto", "straggler", "fluid", "mean")
#: query lengths per request that AITER's MLA decode kernels support (3 is padded to 4)
MLA_WIDTHS = (1, 2, 3, 4)
#: configuration keys of earlier versions: the key that replaced each, or None (removed; the
#: value says why).  Recorded runs' configurations are read through this table.
RENAMED = {"engine.fixed_width": "engine.num_draft_tokens",
           "engine.admission_reserve_tokens": None}
REMOVED_WHY = {"engine.admission_reserve_tokens": "SGLang's new_token_ratio reservation "
                                                  "(engine.schedule_conservativeness) replaced it"}


#: the what-if of ``engine.radix_cache = "off"`` (dropped from a run whose trace has no prefix
#: information: there the cache could match nothing anyway)
RADIX_OFF_WHAT_IF = "radix_cache 'off': SGLang serves with its radix prefix cache on"


def _f(default, help: str, **kw):
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class EngineConfig:
    """One replica: an SGLang engine with EAGLE speculative decoding (chain drafting, top-k 1).

    Every default is SGLang's for the same server arguments (docs/sglang.md cites each rule); a
    value of 0 (or an empty list) means "as SGLang derives it".  Settings SGLang cannot run are
    what-ifs, listed in the summary's ``what_if``.
    """

    policy: str = _f("fixed", "verify policy: " + ", ".join(POLICIES) + "; SGLang verifies every "
                              "request at num_draft_tokens (fixed); the others are what-ifs")
    controller: str = _f("static", "speculation controller choosing each round's draft count: " +
                         ", ".join(CONTROLLER_NAMES) + "; settings under [controller]; static "
                         "(num_draft_tokens every round) is SGLang's default")
    num_draft_tokens: int = _f(4, "tokens per request in a verify (SGLang "
                                  "speculative_num_draft_tokens; top-k 1: num_steps + 1); 1 = "
                                  "no speculation")
    page_size: int = _f(1, "KV cache page size in tokens (SGLang's default page_size on CUDA "
                           "and ROCm is 1)")
    kv_capacity_tokens: int = _f(0, "KV cache capacity in tokens; 0 = from the model's KV bytes "
                                    "per token and the GPU's memory")
    mem_fraction: float = _f(0.0, "fraction of GPU memory for weights + KV (SGLang's "
                                  "mem_fraction_static); 0 = SGLang's default for the GPU")
    max_running: int = _f(0, "cap on running requests (SGLang max_running_requests); 0 = "
                             "SGLang's: 48 with speculative decoding")
    chunked_prefill_size: int = _f(0, "tokens per prefill pass (SGLang chunked_prefill_size); "
                                      "0 = SGLang's default for the GPU's memory")
    max_prefill_tokens: int = _f(16384, "upper bound on a prefill pass (SGLang max_prefill_tokens)")
    schedule_conservativeness: float = _f(1.0, "SGLang's schedule_conservativeness: scales the "
                                               "new_token_ratio reservation at admission")
    max_new_tokens: int = _f(0, "max_new_tokens of requests whose trace row has none; 0 = "
                                "what SGLang uses when a client sets none (the context length "
                                "minus the prompt, minus 1)")
    overlap: bool = _f(True, "the scheduler's host time overlaps the GPU (SGLang's overlap "
                             "schedule, on by default with spec v2); false = "
                             "--disable-overlap-schedule, host time between passes")
    scheduler_overhead_s: float = _f(0.0, "host time per iteration (between passes unless "
                                          "overlap), seconds; 0 = not modelled (not measured)")
    cuda_graph_max_bs: int = _f(0, "largest captured batch size; larger batches run eagerly; "
                                   "0 = SGLang's default for the GPU")
    capture_bs: tuple[int, ...] = _f((), "captured batch sizes; empty = SGLang's speculative "
                                         "ladder up to cuda_graph_max_bs")
    capture_widths: tuple[int, ...] = _f((), "verify widths with captured graphs; empty = "
                                             "[num_draft_tokens] as SGLang captures; more is a "
                                             "what-if")
    buckets: tuple[int, ...] = _f((2, 4, 8), "widths the bucket policy rounds up to")
    max_draft: int = _f(0, "cap on drafts a request proposes per step; 0 = no cap")
    widen: str = _f("auto", "when a policy raises a width, the extra slots hold real drafts "
                            "('draft') or padding ('pad'); 'auto' = draft for fixed, pad otherwise")
    mla: bool = _f(False, "the model uses MLA attention (set from the model; restricts fixed widths)")
    record_request_steps: bool = _f(True, "write request_steps.parquet (one row per request step)")
    record_member_kv: bool = _f(True, "write each pass's members' KV before the pass, in launch "
                                      "order (steps.parquet member_kv)")
    radix_cache: str = _f("auto", "SGLang's radix prefix cache: auto (on when the trace has "
                                  "prefix_hashes, as SGLang's cache is on by default), on, or "
                                  "off (a what-if when the trace has prefix information)")
    schedule_policy: str = _f("fcfs", "order of the waiting queue (SGLang --schedule-policy): "
                                      "fcfs, or lpm (longest cached prefix first; FCFS while "
                                      "more than 128 requests wait, and without a radix cache)")
    context_overflow: str = _f("refuse", "requests longer than the model's context: refuse (as "
                                         "SGLang does), drop, or truncate (SGLang's "
                                         "--allow-auto-truncate)")

    @property
    def ladder(self) -> tuple[int, ...]:
        """Captured batch sizes: the configured ones, else SGLang's ladder cut at max_running."""
        if self.capture_bs:
            return tuple(sorted(set(self.capture_bs)))
        max_bs = self.cuda_graph_max_bs or sglang.gpu_memory_defaults(
            sglang.FALLBACK_GPU_MEMORY_BYTES)[1]
        return sglang.capture_ladder(max_bs, self.running_cap)

    @property
    def widths_captured(self) -> tuple[int, ...]:
        """Verify widths with captured graphs: the configured ones, else num_draft_tokens."""
        return tuple(sorted(set(self.capture_widths))) if self.capture_widths else (
            self.num_draft_tokens,)

    @property
    def speculative(self) -> bool:
        return self.num_draft_tokens > 1

    @property
    def running_cap(self) -> int:
        """max_running as SGLang resolves it (48 with speculative decoding)."""
        if self.max_running:
            return self.max_running
        return sglang.SPEC_MAX_RUNNING if self.speculative else NOSPEC_MAX_RUNNING

    @property
    def chunk_size(self) -> int:
        return self.chunked_prefill_size or sglang.gpu_memory_defaults(
            sglang.FALLBACK_GPU_MEMORY_BYTES)[0]

    @property
    def what_ifs(self) -> list[str]:
        """Settings SGLang cannot run (each a labelled what-if in summaries and reports)."""
        out = []
        if self.policy != "fixed":
            out.append(f"policy '{self.policy}': SGLang verifies every request at "
                       f"num_draft_tokens ({self.num_draft_tokens})")
        if self.capture_widths and tuple(sorted(set(self.capture_widths))) != (
                self.num_draft_tokens,):
            out.append(f"capture_widths {list(self.capture_widths)}: SGLang captures one verify "
                       f"width, num_draft_tokens ({self.num_draft_tokens})")
        if self.widen == "pad" and self.policy == "fixed":
            out.append("widen 'pad' with the fixed policy: SGLang drafts num_draft_tokens - 1 "
                       "tokens for every request")
        if self.max_draft:
            out.append(f"max_draft {self.max_draft}: a per-request draft cap")
        if self.radix_cache == "off":
            out.append(RADIX_OFF_WHAT_IF)
        return out

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
    kv_lookup: str = _f("auto", "KV coordinate of a batch's table lookup: straggler (the "
                                "uniform KV with the same attention time, from the attention "
                                "kernel's grid as the profile recorded it), fluid (MLA profiles: "
                                "the decode's programs in launch order sharing the bandwidth; "
                                "backends/mla_fluid.py), mean, or auto: fluid on an MLA profile "
                                "carrying its decode kernel's occupancy, straggler otherwise")
    bs_interp: str = _f("auto", "batch sizes between a profile's grid points: auto (placed by "
                                "the attention kernel's waves on an MLA profile, the line "
                                "elsewhere), waves (also on AITER's unified attention, by its 3D "
                                "kernel's waves: a what-if; backends/dense_waves.py) or line")
    capture: str = _f("all", "aiter only: when the live executor captures its CUDA graphs: all (at "
                             "start-up, in SGLang's order: verify graphs from the largest batch "
                             "size down, then draft, then draft-extend) or lazy (each on first "
                             "use; starts sooner, but the graph captured last sets how fast every "
                             "graph replays, so a run drifts from SGLang's timing)")


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulation depends on besides the trace."""

    seed: int = _f(0, "seed of every random draw (acceptance beyond the recorded drafts)")
    rate_scale: float = _f(1.0, "arrival-rate multiplier (2.0 = twice the recorded rate)")
    engine: EngineConfig = field(default_factory=EngineConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)

    # ------------------------------------------------------------------ derived
    @property
    def verify_widths_captured(self) -> tuple[int, ...]:
        """Verify (and draft-extend) widths with captured graphs: engine.capture_widths, else
        every width the controller can choose (SGLang captures graphs per candidate step)."""
        e = self.engine
        if e.capture_widths:
            return e.widths_captured
        return tuple(controller_config.candidate_widths(e.controller, self.controller,
                                                        e.num_draft_tokens))

    @property
    def max_verify_width(self) -> int:
        """The widest verify the controller can choose (KV reservations are sized for it, as
        SGLang sizes the allocation per decode for the largest candidate)."""
        e = self.engine
        return controller_config.max_width(e.controller, self.controller, e.num_draft_tokens)

    @property
    def what_ifs(self) -> list[str]:
        """The engine's what-ifs and the controller's."""
        out = list(self.engine.what_ifs)
        entry = CONTROLLERS.get(self.engine.controller)
        if entry.what_if:
            out.append(f"controller '{entry.name}': {entry.what_if}")
        return out

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
                if key in RENAMED:
                    new = RENAMED[key]
                    why = f"renamed to '{new}'" if new else f"removed: {REMOVED_WHY[key]}"
                    raise SpecschedError(f"configuration key '{key}' was {why}")
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
        VERIFY_POLICIES.get(e.policy)
        CONTROLLERS.get(e.controller)
        if e.context_overflow not in ("refuse", "drop", "truncate"):
            raise SpecschedError(f"engine.context_overflow: must be refuse, drop or truncate "
                                 f"(got '{e.context_overflow}')")
        if e.radix_cache not in RADIX_MODES:
            raise SpecschedError(f"engine.radix_cache: must be auto, on or off (got "
                                 f"'{e.radix_cache}')")
        if e.schedule_policy not in SCHEDULE_POLICIES:
            raise SpecschedError(f"engine.schedule_policy: must be fcfs or lpm (got "
                                 f"'{e.schedule_policy}')")
        if e.widen not in ("auto", "draft", "pad"):
            raise SpecschedError(f"engine.widen: must be auto, draft or pad (got '{e.widen}')")
        positive = {"engine.page_size": e.page_size,
                    "engine.max_prefill_tokens": e.max_prefill_tokens,
                    "engine.num_draft_tokens": e.num_draft_tokens,
                    "cluster.replicas": self.cluster.replicas}
        for key, v in positive.items():
            if v < 1:
                raise SpecschedError(f"{key}: must be >= 1 (got {v})")
        for key, v in {"engine.kv_capacity_tokens": e.kv_capacity_tokens,
                       "engine.max_draft": e.max_draft,
                       "engine.cuda_graph_max_bs": e.cuda_graph_max_bs,
                       "engine.max_running": e.max_running,
                       "engine.chunked_prefill_size": e.chunked_prefill_size,
                       "engine.max_new_tokens": e.max_new_tokens,
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
        if e.chunked_prefill_size and e.chunked_prefill_size < e.page_size:
            raise SpecschedError(f"engine.chunked_prefill_size ({e.chunked_prefill_size}) is "
                                 f"smaller than a page ({e.page_size} tokens): SGLang cuts "
                                 "chunks at page boundaries, so nothing could be prefilled")
        if not e.buckets:
            raise SpecschedError("engine.buckets: needs at least one width")
        if e.num_draft_tokens > 64:
            raise SpecschedError(f"engine.num_draft_tokens: at most 64 (got {e.num_draft_tokens})")
        if not (0 < e.schedule_conservativeness <= 10):
            raise SpecschedError(f"engine.schedule_conservativeness: must be in (0, 10] (got "
                                 f"{e.schedule_conservativeness})")
        if e.mla and e.policy in ("fixed", "unsafe-derived") and e.num_draft_tokens not in MLA_WIDTHS:
            # unsafe-derived on MLA launches at num_draft_tokens too (the path's fixed metadata)
            raise SpecschedError(
                f"engine.num_draft_tokens: {e.num_draft_tokens} is not a width the AITER MLA decode kernels "
                f"support (query lengths 1, 2 and 4 per request; 3 is padded to 4)")
        controller_config.check(e.controller, self.controller, e)
        if self.cluster.router not in ROUTERS:
            raise SpecschedError(f"cluster.router: unknown router '{self.cluster.router}' "
                                 f"(choose from {', '.join(ROUTERS)})")
        from backends.aiter.graph_capture import CAPTURE_MODES

        if self.backend.capture not in CAPTURE_MODES:
            raise SpecschedError(f"backend.capture: must be {' or '.join(CAPTURE_MODES)} (got "
                                 f"'{self.backend.capture}')")
        if self.backend.kv_lookup not in KV_LOOKUPS:
            raise SpecschedError(f"backend.kv_lookup: must be auto, straggler, mean or fluid (got "
                                 f"'{self.backend.kv_lookup}')")
        if self.backend.bs_interp not in BS_INTERPS:
            raise SpecschedError(f"backend.bs_interp: must be {', '.join(BS_INTERPS)} (got "
                                 f"'{self.backend.bs_interp}')")
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
            full = f"{prefix}{key}"
            if full in RENAMED:
                new = RENAMED[full]
                why = f"renamed to '{new}'" if new else f"removed: {REMOVED_WHY[full]}"
                raise SpecschedError(f"key '{full}' was {why}", path=where)
            hint = _did_you_mean(full) or f" (known: {', '.join(known)})"
            raise SpecschedError(f"unknown key '{full}'{hint}", path=where)
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
