"""Reading recorded reference runs, and the configuration to compare them under.

A live run is recorded once on a GPU (``simulate --backend aiter --out DIR``) and compared with
profiles for a long time after, while the engine's defaults move on.  So ``fidelity
--reference-run DIR`` re-simulates under the configuration the run *recorded* (its summary.json
``config``: seed, rate scale, engine, cluster and model), not under today's defaults.  Keys
renamed since the recording are mapped (:data:`RENAMED_KEYS`), keys removed since are accepted
when the run used the behaviour that remains (:data:`REMOVED_KEYS`), and keys added since take
the value that reproduces older runs (:data:`ADDED_KEYS`, else today's default; the report lists
them).  A recording this version cannot reproduce is refused, naming the key.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pyarrow as pa

from traces.errors import SpecschedError

__all__ = ["RENAMED_KEYS", "REMOVED_KEYS", "ADDED_KEYS", "RECORDING_ONLY", "RECORDED_SECTIONS",
           "load_recorded",
           "recorded_config", "config_for_recorded", "read_reference_run"]

#: configuration keys renamed since runs were recorded: old dotted key -> today's key (the
#: recorded value moves over). One line per rename, e.g.
#: ``"engine.fixed_width": "engine.num_draft_tokens",``
RENAMED_KEYS: dict[str, str] = {"engine.fixed_width": "engine.num_draft_tokens"}
#: keys removed since: dotted key -> the value whose behaviour today's code always has. A
#: recording with that value is reproduced; any other value is refused.
REMOVED_KEYS: dict[str, Any] = {
    # SGLang's new_token_ratio reservation replaced the fixed per-request reserve: no recorded
    # value reproduces today's admission
    "engine.admission_reserve_tokens": "no fixed reserve (SGLang's new_token_ratio admission)",
}
#: keys added since: dotted key -> the value that reproduces a run recorded before the key
#: existed. A key missing from a recording and from this table takes today's default.
ADDED_KEYS: dict[str, Any] = {
    # runs before 2026-12-03 did not write steps.parquet's member_kv (it changes no result)
    "engine.record_member_kv": False,
}
#: keys that change what a run writes, not what it simulates: a reference and its repeats may
#: differ in them (a run recorded before ``member_kv`` repeats one recorded with it)
RECORDING_ONLY = frozenset({"engine.record_member_kv"})
#: the parts of a recorded configuration a comparison re-simulates under (the backend section
#: belongs to the reference backend, not to the profile side)
RECORDED_SECTIONS = ("seed", "rate_scale", "engine", "cluster", "model", "controller")


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _norm(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _in_sections(key: str) -> bool:
    return key.split(".", 1)[0] in RECORDED_SECTIONS


def load_recorded(folder: str | Path) -> tuple[dict, pa.Table]:
    """(summary, steps) of a results folder; refused without a summary.json config."""
    from analysis.results import load_run

    run = load_run(folder)
    _check_summary(run.summary, folder)
    for c, what in (("passes", "how many passes each step ran"),
                    ("kv_mean", "each step's mean KV length")):
        if c not in run.steps.column_names:  # optional in a results folder, needed here
            raise SpecschedError(f"steps.parquet has no {c!r} column ({what}): a per-step "
                                 "comparison needs it", path=str(Path(folder) / "steps.parquet"))
    return run.summary, run.steps


def _check_summary(summary: dict, folder: str | Path) -> None:
    """Refuse a recorded run whose summary.json is missing or has no configuration."""
    if not summary:
        raise SpecschedError("no summary.json: the recorded run's configuration is needed to check "
                             "that it matches this comparison", path=str(folder))
    if not isinstance(summary.get("config"), dict):
        raise SpecschedError("summary.json has no 'config': this run cannot be re-simulated under "
                             "the configuration it recorded", path=str(folder))
    if not any((summary.get(m) or {}).get("p50") is not None for m in ("ttft_s", "e2e_s")):
        raise SpecschedError("summary.json has no TTFT or E2E figure: the recorded run finished "
                             "no request, so its whole-run checks would have nothing to compare",
                             path=str(folder))


def recorded_inputs(folder: str | Path, trace_path: str | None, model: str | None
                    ) -> tuple[str, str]:
    """(trace, model) of a comparison with a recorded run: each given one as it is, a missing one
    from the run's summary.json (its trace's path as recorded, relative to the current folder,
    and its model), refused when the summary has none or the recorded trace is not there. Reads
    summary.json only (:func:`load_recorded` reads the run's tables once, later)."""
    from analysis.results import read_summary

    summary = read_summary(folder)
    _check_summary(summary, folder)
    if model is None:
        model = summary.get("model") or ((summary.get("config") or {}).get("model") or {}).get("name")
        if not model:
            raise SpecschedError("summary.json names no model: give --model", path=str(folder))
    if trace_path is None:
        recorded = (summary.get("trace") or {}).get("path")
        if not recorded:
            raise SpecschedError("summary.json names no trace: give --trace", path=str(folder))
        if not Path(recorded).is_file():
            raise SpecschedError(f"the recorded run replayed {recorded}, which is not there from "
                                 f"this folder: give --trace", path=str(folder))
        trace_path = str(recorded)
    return str(trace_path), str(model)


def recorded_limit(summary: dict, folder: str | Path) -> int | None:
    """How many of the trace's first requests a recorded run replayed, when it replayed only the
    first ones (``simulate --limit``, which notes "the first N of M requests" in the summary's
    trace); None when it replayed the whole trace."""
    notes = (summary.get("trace") or {}).get("notes") or []
    for note in notes:
        m = re.fullmatch(r"the first (\d+) of (\d+) requests", str(note))
        if m:
            n = int(m.group(1))
            if n != summary.get("requests"):
                raise SpecschedError(f"summary.json says {summary.get('requests')} requests but "
                                     f"its trace note says {note!r}", path=str(folder))
            return n
    return None


def recorded_config(summary: dict, folder: str | Path) -> tuple[dict[str, Any], list[str]]:
    """The recorded configuration as today's dotted keys (:data:`RECORDED_SECTIONS` only), and
    notes on what was mapped or filled in.  Refuses, naming the key, what this version cannot
    reproduce."""
    from simulator.config import SimConfig

    today = {k: v for k, v in _flatten(SimConfig().to_dict()).items() if _in_sections(k)}
    got = {k: v for k, v in _flatten(summary.get("config") or {}).items() if _in_sections(k)}
    out: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in sorted(got.items()):
        if key in RENAMED_KEYS:
            notes.append(f"{key} recorded, read as {RENAMED_KEYS[key]}")
            key = RENAMED_KEYS[key]
        if key in REMOVED_KEYS:
            if _norm(value) != _norm(REMOVED_KEYS[key]):
                raise SpecschedError(
                    f"the recorded run has {key} = {value!r}; this version no longer has that "
                    f"setting and always behaves as {REMOVED_KEYS[key]!r}, so it cannot "
                    "reproduce the run", path=str(folder))
            notes.append(f"{key} = {value!r} recorded: the only behaviour this version has")
            continue
        if key not in today:
            raise SpecschedError(
                f"the recorded run has {key} = {value!r}, a setting this version does not know, "
                "so it cannot reproduce the run (if the key was renamed, map it in "
                "analysis.fidelity.runs.RENAMED_KEYS)", path=str(folder))
        out[key] = value
    for key in sorted(set(today) - set(out)):
        out[key] = ADDED_KEYS.get(key, today[key])
        notes.append(f"{key} not recorded: {out[key]!r}"
                     + (" (as runs before it behaved)" if key in ADDED_KEYS else " (today's default)"))
    # the KV pool the run accounted with, not today's default rule for it (which follows SGLang's
    # and may have changed since the recording)
    cap = summary.get("kv_capacity_tokens")
    if not out.get("engine.kv_capacity_tokens") and isinstance(cap, int) and cap > 0:
        out["engine.kv_capacity_tokens"] = cap
        notes.append(f"engine.kv_capacity_tokens: the recorded run's KV pool, {cap:,} tokens")
    return out, notes


def config_for_recorded(summary: dict, folder: str | Path, config_path: str | None,
                        overrides: dict[str, Any]):
    """The configuration to compare a recorded run under: the recorded one
    (:func:`recorded_config`), then what the user asked for explicitly (the ``--config`` file's
    keys, then ``overrides``) on top; a request that contradicts the recording is refused later
    by :func:`read_reference_run`.  Returns ``(SimConfig, notes)``."""
    from simulator.config import SimConfig

    flat, notes = recorded_config(summary, folder)
    try:
        rec = SimConfig.load(None, flat)
    except SpecschedError as exc:
        raise SpecschedError(f"{folder}: the recorded run's configuration cannot be reproduced by "
                             f"this version: {exc}") from None
    SimConfig.load(config_path, overrides)  # the user's own settings, checked on their own
    explicit: dict[str, Any] = {}
    if config_path:
        with open(config_path, "rb") as fh:
            explicit.update(_flatten(tomllib.load(fh)))
    explicit.update({k: v for k, v in overrides.items() if v is not None})
    return rec.replace(explicit), notes


def read_reference_run(folder: str | Path, trace_path: str | Path, requests: int, config,
                       reference: str) -> tuple[dict, pa.Table]:
    """(summary, steps) of a recorded reference run, refused unless it ran this trace (same file
    name, same number of requests), seed and configuration (its recorded one as
    :func:`recorded_config` reads it) with the ``reference`` backend."""
    summary, steps = load_recorded(folder)
    got, _ = recorded_config(summary, folder)
    want = {k: v for k, v in _flatten(config.to_dict()).items() if _in_sections(k)}
    problems = []
    if summary.get("backend") != reference:
        problems.append(f"backend {summary.get('backend')!r}, expected {reference!r}")
    tr = summary.get("trace") or {}
    if Path(str(tr.get("path", ""))).name != Path(trace_path).name:
        problems.append(f"trace {tr.get('path')!r}, expected {Path(trace_path).name!r}")
    if int(summary.get("requests", -1)) != int(requests):
        problems.append(f"{summary.get('requests')} requests, expected {requests} (same --limit?)")
    if got.get("model.name") != want.get("model.name"):
        problems.append(f"model {got.get('model.name')!r}, expected {want.get('model.name')!r}")
    diff = [f"{k}: {got.get(k)!r} != {v!r}" for k, v in sorted(want.items())
            if k != "model.name" and k not in RECORDING_ONLY and _norm(got.get(k)) != _norm(v)]
    if diff:
        problems.append("config differs: " + ", ".join(diff))
    if problems:
        raise SpecschedError(f"{folder}: the recorded run does not match this comparison: "
                             + "; ".join(problems))
    return summary, steps
