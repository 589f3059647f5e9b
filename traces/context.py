"""Requests longer than the model's context: refuse them, drop them, or truncate them as SGLang would.

SGLang refuses a request whose prompt reaches the context length, and one whose prompt plus
``max_new_tokens`` exceeds it (``managers/tokenizer_manager.py::_validate_one_request``); with
``--allow-auto-truncate`` it truncates the prompt and lowers ``max_new_tokens`` to what is left.
A trace records what was generated, so a request fits when ``prompt + output <= context`` and
``prompt < context``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from traces.errors import SpecschedError

__all__ = ["CONTEXT_MODES", "fit_context", "select_requests"]

#: what to do with requests longer than the context
CONTEXT_MODES = ("refuse", "drop", "truncate")


def _segments(offsets: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The flat indices of the kept requests' segments, and the new offsets."""
    lens = np.diff(offsets)[keep]
    new_off = np.zeros(len(lens) + 1, np.int64)
    new_off[1:] = np.cumsum(lens)
    starts = offsets[:-1][keep]
    idx = np.repeat(starts - new_off[:-1], lens) + np.arange(int(new_off[-1]))
    return idx.astype(np.int64), new_off


def select_requests(trace, keep: np.ndarray, note: str):
    """The trace with only the requests where ``keep`` is true (their per-step and per-block
    lists with them)."""
    keep = np.asarray(keep, bool)
    n = len(trace.arrival_s)
    changes: dict = {}
    for f in dataclasses.fields(trace):
        v = getattr(trace, f.name)
        if f.name in ("step_offsets", "draft_tokens", "accepted_tokens", "notes", "path",
                      "acceptance", "metadata") or v is None:
            continue
        if f.name.endswith("_offsets") or f.name.endswith("_ids") and f.name != "request_id":
            continue
        if hasattr(v, "__len__") and not isinstance(v, (str, dict)) and len(v) == n:
            changes[f.name] = v.filter(keep) if hasattr(v, "filter") else np.asarray(v)[keep]
    idx, off = _segments(np.asarray(trace.step_offsets), keep)
    changes.update(step_offsets=off, draft_tokens=np.asarray(trace.draft_tokens)[idx],
                   accepted_tokens=np.asarray(trace.accepted_tokens)[idx])
    for off_name, ids_name in (("prefix_offsets", "prefix_ids"),):
        if getattr(trace, off_name, None) is not None:
            idx, off = _segments(np.asarray(getattr(trace, off_name)), keep)
            changes[off_name] = off
            changes[ids_name] = np.asarray(getattr(trace, ids_name))[idx]
    changes["notes"] = tuple(trace.notes) + (note,)
    return dataclasses.replace(trace, **changes)


def fit_context(trace, context_len: int, mode: str = "refuse"):
    """``(trace, report)``: the trace with its over-long requests refused (``SpecschedError``
    naming the first), dropped, or truncated; ``report`` counts what was done."""
    if mode not in CONTEXT_MODES:
        raise SpecschedError(f"unknown context-overflow mode '{mode}' (choose from "
                             f"{', '.join(CONTEXT_MODES)})")
    report = {"context_len": int(context_len), "mode": mode, "over_context": 0,
              "dropped": 0, "truncated": 0}
    if context_len <= 0:
        return trace, report
    prompt = np.asarray(trace.prompt_tokens, np.int64)
    output = np.asarray(trace.output_tokens, np.int64)
    over = (prompt >= context_len) | (prompt + output > context_len)
    k = int(over.sum())
    report["over_context"] = k
    if k == 0:
        return trace, report
    if mode == "refuse":
        i = int(np.flatnonzero(over)[0])
        rid = trace.request_id[i]
        rid = rid.as_py() if hasattr(rid, "as_py") else rid
        raise SpecschedError(
            f"{k} request(s) exceed the model's context length of {context_len} tokens, as "
            f"SGLang refuses them: the first is '{rid}' (row {i}: prompt {int(prompt[i])} + "
            f"output {int(output[i])}); use --context-overflow drop or truncate",
            path=getattr(trace, "path", None))
    if mode == "drop":
        if k == len(prompt):
            raise SpecschedError(f"every request exceeds the model's context length of "
                                 f"{context_len} tokens", path=getattr(trace, "path", None))
        report["dropped"] = k
        return select_requests(trace, ~over, f"{k} requests longer than the context "
                                             f"({context_len}) dropped"), report
    new_prompt = np.minimum(prompt, context_len - 1)
    new_output = np.maximum(1, np.minimum(output, context_len - new_prompt))
    report["truncated"] = k
    tr = dataclasses.replace(
        trace, prompt_tokens=new_prompt.astype(np.asarray(trace.prompt_tokens).dtype),
        output_tokens=new_output.astype(np.asarray(trace.output_tokens).dtype),
        notes=tuple(trace.notes) + (f"{k} requests truncated to the context ({context_len}) "
                                    "as SGLang's --allow-auto-truncate does",))
    return tr, report
