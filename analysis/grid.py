"""Configuration grids: axes of configuration values, their product, and stable point names.

Used by ``specsched sweep`` (a GRID.toml file) and by ``specsched plan --search`` (axes given on
the command line).  An axis is a configuration key -- a dotted ``SimConfig`` key such as
``engine.policy`` or ``rate_scale`` -- or one of the shorthands below, with a list of values.

Shorthands (``SHORTHANDS``): ``policy`` = ``engine.policy``, ``max_draft`` =
``engine.max_draft``, ``max_running`` = ``engine.max_running``, ``replicas`` =
``cluster.replicas``, ``ladder`` = the CUDA-graph capture ladder (``engine.capture_bs``):
``sglang`` (SGLang's speculative ladder up to ``engine.cuda_graph_max_bs``), ``sglang:N`` (that
ladder capped at N), or explicit sizes ``1+2+4+8+16`` (any of ``+ | /`` separates them).

A point's name is built from its parameters only (``policy=pad__max_draft=3``), so the same
parameters always give the same folder, whatever else is in the grid.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

from traces.errors import SpecschedError

__all__ = ["SHORTHANDS", "Axis", "Point", "parse_axis", "expand", "point_name",
           "resolve_overrides", "ladder_overrides"]

SHORTHANDS = {
    "policy": "engine.policy",
    "max_draft": "engine.max_draft",
    "max_running": "engine.max_running",
    "replicas": "cluster.replicas",
    "ladder": "engine.capture_bs",
    "seed": "seed",
    "rate_scale": "rate_scale",
    "backend": "backend.name",
    "model": "model.name",
}


@dataclass(frozen=True)
class Axis:
    key: str                 # as written (a shorthand or a dotted key)
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Point:
    """One combination of axis values, in axis order."""

    index: int
    params: tuple[tuple[str, Any], ...]
    name: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.params)


def ladder_overrides(value: Any, where: str = "ladder") -> dict[str, Any]:
    """Config overrides for a ``ladder`` value (see the module docstring)."""
    if isinstance(value, (list, tuple)):
        sizes = value
    else:
        text = str(value).strip().lower()
        if text == "sglang":
            return {"engine.capture_bs": []}
        m = re.fullmatch(r"sglang:(\d+)", text)
        if m:
            return {"engine.capture_bs": [], "engine.cuda_graph_max_bs": int(m.group(1))}
        sizes = [s for s in re.split(r"[+|/]", text) if s]
    try:
        out = sorted({int(s) for s in sizes})
    except (TypeError, ValueError):
        raise SpecschedError(f"{where}: '{value}' is not a capture ladder (sglang, sglang:N, or "
                             f"sizes like 1+2+4+8)") from None
    if not out or out[0] < 1:
        raise SpecschedError(f"{where}: '{value}': batch sizes must be >= 1")
    return {"engine.capture_bs": out, "engine.cuda_graph_max_bs": out[-1]}


def resolve_overrides(params: dict[str, Any] | tuple, where: str = "axes") -> dict[str, Any]:
    """Dotted SimConfig overrides for a point's parameters (shorthands expanded)."""
    items = params.items() if isinstance(params, dict) else params
    out: dict[str, Any] = {}
    for key, value in items:
        if key == "ladder":
            out.update(ladder_overrides(value, f"{where}: ladder"))
            continue
        out[SHORTHANDS.get(key, key)] = list(value) if isinstance(value, tuple) else value
    return out


def _value_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "-".join(_value_text(x) for x in v) or "none"
    return str(v)


def point_name(params: tuple[tuple[str, Any], ...]) -> str:
    """``key=value__key=value`` with the last component of dotted keys, file-name safe; names
    longer than 100 characters are cut and end with a hash of the parameters."""
    if not params:
        return "base"
    parts = []
    for key, value in params:
        short = key.rsplit(".", 1)[-1]
        parts.append(f"{short}={_value_text(value)}")
    name = re.sub(r"[^A-Za-z0-9._=+-]", "-", "__".join(parts))
    if len(name) > 100:
        digest = hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()
        name = f"{name[:88]}-{digest[:10]}"
    return name


def parse_axis(text: str, option: str = "--search") -> Axis:
    """``KEY=V1,V2,...`` (values: integers, numbers, true/false, or strings)."""
    if "=" not in text:
        raise SpecschedError(f"{option}: '{text}': expected KEY=V1,V2 (e.g. policy=pad,split)")
    key, _, vals = text.partition("=")
    key = key.strip()
    if not re.fullmatch(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*", key):
        raise SpecschedError(f"{option}: '{text}': '{key}' is not a configuration key")
    values = [_scalar(v.strip()) for v in vals.split(",")]
    if any(v == "" for v in values):
        raise SpecschedError(f"{option}: '{text}': empty value")
    return Axis(key, tuple(values))


def _scalar(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def expand(axes: list[Axis]) -> list[Point]:
    """The product of the axes, in order (the last axis varies fastest)."""
    keys = [a.key for a in axes]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise SpecschedError(f"axis '{dup}' is given twice")
    for a in axes:
        if not a.values:
            raise SpecschedError(f"axis '{a.key}' has no values")
        seen = set()
        for v in a.values:
            k = json.dumps(v, sort_keys=True, default=str)
            if k in seen:
                raise SpecschedError(f"axis '{a.key}' lists {v!r} twice")
            seen.add(k)
    points = []
    for i, combo in enumerate(itertools.product(*[a.values for a in axes])):
        params = tuple(zip(keys, combo))
        points.append(Point(i, params, point_name(params)))
    names = [p.name for p in points]
    if len(set(names)) != len(names):  # e.g. engine.x and cluster.x: use the full keys
        points = []
        for i, combo in enumerate(itertools.product(*[a.values for a in axes])):
            params = tuple(zip(keys, combo))
            full = re.sub(r"[^A-Za-z0-9._=+-]", "-", "__".join(
                f"{k}={_value_text(v)}" for k, v in params))
            digest = hashlib.sha256(json.dumps(params, default=str).encode()).hexdigest()[:10]
            points.append(Point(i, params, f"{full[:88]}-{digest}"))
    return points
