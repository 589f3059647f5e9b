"""The ``[controller]`` settings: parsing, checking, and the flat array the compiled core reads.

``engine.controller`` names the controller (:data:`simulator.registry.CONTROLLERS`); this
section holds the settings of all of them, each used only by its own.  Formats are the
engines' own, so a tuned setting can be pasted back:

* ``schedule`` is vLLM's ``num_speculative_tokens_per_batch_size``: a JSON object of inclusive
  batch-size ranges to a draft count, ``{"1-16": 3, "64-128": 2, "256-4096": 0}`` (or the
  short form ``1-16:3,64-128:2,256-4096:0``).
* ``adaptive_config`` is SGLang's ``--speculative-adaptive-config`` JSON (a path, or the JSON
  itself): integer-string keys are the lower batch size of a range, each with
  ``candidate_steps`` and optionally ``up_hysteresis``, ``down_hysteresis``, ``ema_alpha``,
  ``update_interval``, ``warmup_batches``, ``ceiling_coeff``; top-level keys of those names
  apply to every range.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulator import controllers as K
from simulator.registry import CONTROLLERS
from traces.errors import SpecschedError

__all__ = ["ControllerConfig", "SGLANG_PR24055_DEFAULTS", "VLLM_PR32374_EXAMPLE",
           "parse_schedule", "parse_adaptive", "build_kc", "candidate_widths",
           "max_width", "sglang_args", "vllm_speculative_config"]

#: the per-batch-size defaults quoted in SGLang PR #24055 (bs [1,64), [64,128), [128,inf))
SGLANG_PR24055_DEFAULTS = {
    "1": {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25},
    "64": {"candidate_steps": [1, 2, 5], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "128": {"candidate_steps": [1, 2, 6], "up_hysteresis": -0.1, "down_hysteresis": 0.25},
}
#: SGLang's per-slot defaults (``adaptive_spec_params.py::AdaptiveStepSlot``)
SLOT_DEFAULTS = {"ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10,
                 "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0.0}
#: the schedule of vLLM PR #32374's description (vLLM ships no default schedule)
VLLM_PR32374_EXAMPLE = '{"1-16": 3, "64-128": 2, "256-4096": 0}'


def _f(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ControllerConfig:
    """Settings of the speculation controllers (each reads only its own)."""

    schedule: str = _f(VLLM_PR32374_EXAMPLE, "schedule: vLLM num_speculative_tokens_per_"
                       "batch_size (inclusive bs ranges to a draft count; gaps inherit the "
                       "previous range; below the first range: num_draft_tokens - 1); default: "
                       "the example of vLLM PR #32374")
    max_bs: int = _f(32, "threshold: the largest batch size that speculates (default: "
                         "TensorRT-LLM's auto n-gram heuristic, off above 32)")
    adaptive_config: str = _f("", "sglang-adaptive: SGLang's adaptive-config JSON (a path or "
                                  "the JSON); empty = the defaults of SGLang PR #24055")
    graph_routing: bool = _f(True, "sglang-adaptive: route a batch to its range by its captured "
                                   "(padded) batch size, as SGLang does")
    candidates: tuple[int, ...] = _f((), "goodput and oracle: candidate draft counts; empty = "
                                         "0 .. num_draft_tokens - 1")
    switch_cost_s: float = _f(0.0, "seconds added to a round whose draft count differs from "
                                   "the previous round's; 0 = not modelled (not measured)")


def parse_schedule(text: str, where: str = "controller.schedule") -> list[tuple[int, int, int]]:
    """vLLM's schedule as sorted ``(lo, hi, k)``; overlapping or malformed ranges are refused."""
    text = text.strip()
    items: list[tuple[str, object]]
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecschedError(f"{where}: not valid JSON ({exc.msg})") from None
        items = list(obj.items())
    else:
        items = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            if ":" not in part:
                raise SpecschedError(f"{where}: expected LO-HI:K, got '{part}'")
            a, b = part.split(":", 1)
            items.append((a.strip(), b.strip()))
    out = []
    for key, val in items:
        m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", str(key))
        if not m:
            raise SpecschedError(f"{where}: range '{key}' must be LO-HI (inclusive)")
        lo, hi = int(m.group(1)), int(m.group(2))
        try:
            k = int(val)
        except (TypeError, ValueError):
            raise SpecschedError(f"{where}: draft count of '{key}' must be an integer "
                                 f"(got {val!r})") from None
        if lo < 1 or hi < lo or k < 0 or k > 63:
            raise SpecschedError(f"{where}: range '{key}': need 1 <= LO <= HI and a draft count "
                                 f"in 0..63 (got {k})")
        out.append((lo, hi, k))
    if not out:
        raise SpecschedError(f"{where}: needs at least one range")
    out.sort()
    for (l0, h0, _), (l1, _, _) in zip(out, out[1:]):
        if l1 <= h0:
            raise SpecschedError(f"{where}: ranges overlap at batch size {l1}")
    if len(out) > K.MAXRANGE:
        raise SpecschedError(f"{where}: at most {K.MAXRANGE} ranges")
    return out


def parse_adaptive(text: str, where: str = "controller.adaptive_config") -> list[dict]:
    """SGLang's adaptive config as sorted slots ``{lo, candidate_steps, ...}`` with every
    setting resolved (slot keys over top-level keys over SGLang's defaults)."""
    if not text:
        cfg = SGLANG_PR24055_DEFAULTS
    else:
        src = text
        if not text.lstrip().startswith("{"):
            try:
                src = Path(text).read_text()
            except OSError as exc:
                raise SpecschedError(f"cannot read ({exc.strerror})", path=text) from None
            where = text
        try:
            cfg = json.loads(src)
        except json.JSONDecodeError as exc:
            raise SpecschedError(f"{where}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(cfg, dict):
        raise SpecschedError(f"{where}: must be a JSON object")
    if cfg.get("strategy", "ema") != "ema":
        raise SpecschedError(f"{where}: strategy '{cfg['strategy']}' is not modelled (only "
                             "the EMA strategy)")
    top = {k: cfg[k] for k in SLOT_DEFAULTS if k in cfg}
    slots = []
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        if not isinstance(entry, dict):
            raise SpecschedError(f"{where}: batch size '{key}': must be an object")
        steps = entry.get("candidate_steps")
        if (not isinstance(steps, list) or not steps or
                not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= 63
                        for s in steps)):
            raise SpecschedError(f"{where}: batch size '{key}': candidate_steps must be a "
                                 f"non-empty list of integers in 0..63 (got {steps!r})")
        if len(set(steps)) > K.MAXC:
            raise SpecschedError(f"{where}: batch size '{key}': at most {K.MAXC} candidates")
        slot = {**SLOT_DEFAULTS, **top, **{k: v for k, v in entry.items() if k in SLOT_DEFAULTS}}
        for k in SLOT_DEFAULTS:
            if isinstance(slot[k], bool) or not isinstance(slot[k], (int, float)):
                raise SpecschedError(f"{where}: batch size '{key}': {k} must be a number")
        if not (0 < slot["ema_alpha"] <= 1) or slot["update_interval"] < 1 or \
                slot["warmup_batches"] < 0:
            raise SpecschedError(f"{where}: batch size '{key}': need 0 < ema_alpha <= 1, "
                                 "update_interval >= 1, warmup_batches >= 0")
        slot["lo"] = int(key)
        slot["candidate_steps"] = sorted(set(steps))
        slots.append(slot)
    if not slots:
        raise SpecschedError(f"{where}: needs at least one integer batch-size key, e.g. "
                             '{"1": {"candidate_steps": [1, 3, 7]}}')
    if len(slots) > K.MAXRANGE:
        raise SpecschedError(f"{where}: at most {K.MAXRANGE} batch-size keys")
    return sorted(slots, key=lambda s: s["lo"])


def _goodput_candidates(c: ControllerConfig, num_draft_tokens: int) -> list[int]:
    ks = sorted(set(c.candidates)) if c.candidates else list(range(num_draft_tokens))
    if len(ks) > K.MAXC:
        raise SpecschedError(f"controller.candidates: at most {K.MAXC} draft counts")
    return ks


def candidate_widths(name: str, c: ControllerConfig, num_draft_tokens: int) -> list[int]:
    """Every verify width the controller can choose (each a captured verify / draft-extend
    width, as SGLang captures graphs per candidate)."""
    if name == "static":
        return [num_draft_tokens]
    if name == "schedule":
        return sorted({min(k + 1, num_draft_tokens) for _, _, k in parse_schedule(c.schedule)} |
                      {num_draft_tokens})
    if name == "threshold":
        return sorted({1, num_draft_tokens})
    if name == "sglang-adaptive":
        return sorted({s + 1 for slot in parse_adaptive(c.adaptive_config)
                       for s in slot["candidate_steps"]})
    return [k + 1 for k in _goodput_candidates(c, num_draft_tokens)]


def max_width(name: str, c: ControllerConfig, num_draft_tokens: int) -> int:
    return max(candidate_widths(name, c, num_draft_tokens))


def check(name: str, c: ControllerConfig, engine) -> None:
    """Refuse settings the controller cannot run with (naming the key)."""
    CONTROLLERS.get(name)
    if name != "static" and engine.policy != "fixed":
        raise SpecschedError(f"engine.controller '{name}' chooses one draft count per batch, "
                             f"which needs engine.policy 'fixed' (got '{engine.policy}')")
    if c.max_bs < 0:
        raise SpecschedError(f"controller.max_bs: must be >= 0 (got {c.max_bs})")
    if not (0 <= c.switch_cost_s < 10):
        raise SpecschedError(f"controller.switch_cost_s: must be in [0, 10) seconds "
                             f"(got {c.switch_cost_s})")
    if any(k < 0 or k > 63 for k in c.candidates):
        raise SpecschedError(f"controller.candidates: draft counts in 0..63 "
                             f"(got {list(c.candidates)})")
    if max_width(name, c, engine.num_draft_tokens) > 64:
        raise SpecschedError("controller: a candidate draft count above 63")


def build_kc(name: str, c: ControllerConfig, num_draft_tokens: int, *,
             speculative: bool = True) -> np.ndarray:
    """The settings array the core reads (``simulator.controllers.K_*``)."""
    kc = np.zeros(K.NKC, np.float64)
    kc[K.K_KIND] = CONTROLLERS.code(name) if speculative else K.CT_STATIC
    kc[K.K_SWITCH_COST] = c.switch_cost_s
    kc[K.K_MAXW] = num_draft_tokens
    kc[K.K_THRESH] = c.max_bs
    kc[K.K_GRAPHKEY] = 1 if c.graph_routing else 0
    if not speculative:
        return kc
    if name == "schedule":
        rows = parse_schedule(c.schedule)
        kc[K.K_NRANGE] = len(rows)
        for q, (lo, _hi, k) in enumerate(rows):
            kc[K.K_RANGES + q * K.RS + K.RG_LO] = lo
            kc[K.K_RANGES + q * K.RS + K.RG_K] = k
    elif name == "sglang-adaptive":
        slots = parse_adaptive(c.adaptive_config)
        kc[K.K_MAXW] = max(max(s["candidate_steps"]) for s in slots) + 1
        kc[K.K_NRANGE] = len(slots)
        for q, s in enumerate(slots):
            b = K.K_RANGES + q * K.RS
            kc[b + K.RG_LO] = s["lo"]
            kc[b + K.RG_NC] = len(s["candidate_steps"])
            kc[b + K.RG_UP] = s["up_hysteresis"]
            kc[b + K.RG_DOWN] = s["down_hysteresis"]
            kc[b + K.RG_ALPHA] = s["ema_alpha"]
            kc[b + K.RG_INTERVAL] = s["update_interval"]
            kc[b + K.RG_WARMUP] = s["warmup_batches"]
            kc[b + K.RG_CEIL] = s["ceiling_coeff"]
            kc[b + K.RG_INIT] = num_draft_tokens - 1  # --speculative-num-steps
            for j, st in enumerate(s["candidate_steps"]):
                kc[b + K.RG_CAND + j] = st
    elif name in ("goodput", "oracle"):
        ks = _goodput_candidates(c, num_draft_tokens)
        kc[K.K_NCAND] = len(ks)
        kc[K.K_MAXW] = max(ks) + 1
        for j, k in enumerate(ks):
            kc[K.K_CAND + j] = k
    return kc


def sglang_args(name: str, c: ControllerConfig, num_draft_tokens: int) -> tuple[list[str], dict | None]:
    """SGLang launch flags for a setting, and the adaptive-config JSON it needs (or None)."""
    steps = num_draft_tokens - 1
    if name == "sglang-adaptive":
        slots = parse_adaptive(c.adaptive_config)
        top = max(max(s["candidate_steps"]) for s in slots)
        cfg = {str(s["lo"]): {k: s[k] for k in ("candidate_steps", *SLOT_DEFAULTS)}
               for s in slots}
        return ([f"--speculative-num-steps {top}", "--speculative-eagle-topk 1",
                 f"--speculative-num-draft-tokens {top + 1}", "--speculative-adaptive",
                 "--speculative-adaptive-config adaptive.json"], cfg)
    if name == "static":
        if steps == 0:
            return ([], None)  # no speculation: leave --speculative-algorithm out
        return ([f"--speculative-num-steps {steps}", "--speculative-eagle-topk 1",
                 f"--speculative-num-draft-tokens {steps + 1}"], None)
    return ([], None)  # SGLang has no EAGLE equivalent of schedule / threshold / goodput


def vllm_speculative_config(name: str, c: ControllerConfig, num_draft_tokens: int) -> dict | None:
    """vLLM's ``speculative_config`` for a setting (None when vLLM has no equivalent)."""
    k = num_draft_tokens - 1
    if name == "static":
        return {"method": "eagle", "num_speculative_tokens": k} if k > 0 else None
    if name == "schedule":
        rows = parse_schedule(c.schedule)
        return {"method": "eagle", "num_speculative_tokens": k,
                "num_speculative_tokens_per_batch_size": {f"{lo}-{hi}": kk
                                                          for lo, hi, kk in rows}}
    if name == "threshold":
        return {"method": "eagle", "num_speculative_tokens": k,
                "num_speculative_tokens_per_batch_size": {f"1-{c.max_bs}": k,
                                                          f"{c.max_bs + 1}-4096": 0}}
    return None
