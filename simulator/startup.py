"""What a run settles before it starts: each request's token bound, the KV lookup, and refusals.

:class:`simulator.engine.Simulation` calls these once, while it is built:

- :func:`max_new_tokens`: each request's max_new_tokens, as SGLang bounds it.
- :func:`set_kv_lookup`: ``backend.kv_lookup`` resolved on the table (``auto``: the MLA fluid
  lookup on an MLA profile, the straggler rule elsewhere), written into the core's attention
  vector, and passed to an executor that looks passes up itself.
- :func:`set_bs_interp`: ``backend.bs_interp`` the same way (where batch sizes between grid
  points are placed).
- :func:`check_feasible`: a run that cannot work is refused here, naming the request, before
  anything is simulated or measured: a KV budget too small for one request, a verify wider
  than 64 tokens, and on a live MLA run a launch wider than its decode kernels take
  (:func:`check_mla_widths`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.attention_kv import ATT_MLA, resolve_kv_lookup, table_model
from simulator import core as C
from simulator import sglang
from simulator.config import MLA_WIDTHS, SimConfig
from traces.errors import SpecschedError

__all__ = ["max_new_tokens", "set_kv_lookup", "set_bs_interp", "check_feasible", "check_mla_widths"]


def max_new_tokens(trace, e, context_len: int, capacity: int) -> np.ndarray:
    """Each request's max_new_tokens: its trace column where given, else
    ``engine.max_new_tokens``, else what SGLang gives a request whose client set none."""
    n = len(trace.arrival_s)
    page = e.page_size
    capacity = capacity // page * page  # the pool's tokens (SGLang's token capacity)
    # SGLang bounds every request's max_new_tokens by the context and the pool
    bound = sglang.default_max_new_tokens(trace.prompt_tokens, context_len, capacity, page)
    out = np.full(n, e.max_new_tokens, np.int64) if e.max_new_tokens else bound.copy()
    col = getattr(trace, "max_new_tokens", None)
    if col is not None:
        given = np.asarray(col, dtype=np.float64)
        have = np.isfinite(given)
        out[have] = given[have].astype(np.int64)
    out = np.minimum(out, bound)
    # a request generated its recorded output, so its bound was at least that
    return np.ascontiguousarray(np.maximum(out, np.asarray(trace.output_tokens, np.int64)))


def set_kv_lookup(CF: np.ndarray, table, asked: str, executor: Any) -> tuple[bool, str]:
    """Set the core's attention vector (in ``CF``) for the lookup ``asked`` on ``table``;
    returns (whether lookups use the attention kernel's occupancy, the lookup used: ``mean``
    without that occupancy). ``fluid`` asked on a table without the MLA decode's occupancy is
    refused. An executor with ``set_kv_lookup`` (one called per pass, which hides its table) is
    told ``asked``, so both timing paths give a pass one latency."""
    from backends.attention_kv import ATT_FNSAT, ATT_FOVH
    from backends.mla_fluid import FLUID_NSAT, FLUID_OVERHEAD

    occupancy = bool(asked != "mean" and C.set_attention(
        CF, getattr(table, "attention", None), table_model(table)))
    mla = occupancy and CF[C.CF_ATT + ATT_MLA] != 0.0
    used = resolve_kv_lookup(asked, mla) if occupancy else "mean"
    if table is not None and "fluid" in (asked, used):
        if not mla:
            raise SpecschedError("backend.kv_lookup = fluid: needs an MLA profile carrying the "
                                 "decode kernel's occupancy (its attention metadata); this table "
                                 "has none")
        CF[C.CF_ATT + ATT_FNSAT] = FLUID_NSAT
        CF[C.CF_ATT + ATT_FOVH] = FLUID_OVERHEAD
    _tell(executor, "set_kv_lookup", asked)
    return occupancy, used


def set_bs_interp(CF: np.ndarray, asked: str, executor: Any) -> str:
    """Set where batch sizes between grid points are placed (``backend.bs_interp``) in the
    core's attention vector, and tell the executor (a table executor sets its table, which
    ``fidelity`` looks steps up on; a wrapper called per pass passes it on); returns what the
    lookups do: ``waves`` or ``line`` (``line`` without attention occupancy)."""
    from backends.attention_kv import ATT_BSW, ATT_ON, bs_waves

    att = CF[C.CF_ATT:]
    if att[ATT_ON]:
        att[ATT_BSW] = bs_waves(asked, bool(att[ATT_MLA]))
    _tell(executor, "set_bs_interp", asked)
    return "waves" if att[ATT_ON] and att[ATT_BSW] else "line"


def _tell(executor: Any, hook: str, value: str) -> None:
    """Call ``executor.<hook>(value)`` where the executor has that hook (a backend setting an
    executor that looks passes up itself must follow)."""
    f = getattr(executor, hook, None)
    if callable(f):
        f(value)


def request_id(trace, row: int):
    """The trace's request_id of ``row``, as a Python value."""
    rid = trace.request_id[row]
    return rid.as_py() if hasattr(rid, "as_py") else rid


def check_feasible(trace, config: SimConfig, inp, capacity_tokens: int) -> None:
    """Refuse a run that cannot work (see the module docstring); ``inp`` is the run's input
    arrays (``prompt``, ``output``, ``off``, ``draft``)."""
    e = config.engine
    path = getattr(trace, "path", None)
    if capacity_tokens < e.page_size:
        raise SpecschedError(f"the KV budget ({capacity_tokens} tokens) holds less than one "
                             f"page of {e.page_size} tokens")
    widest = int(inp.draft.max()) + 1 if len(inp.draft) else 1  # no int64 copy: big traces
    if e.max_draft:
        widest = min(widest, e.max_draft + 1)
    if e.policy == "fixed":
        widest = max(widest, config.max_verify_width)
    if e.policy == "bucket":
        widest = max(widest, int(max(e.buckets)))
    if widest > 64:
        raise SpecschedError(f"a request proposes {widest - 1} drafts in one step; the engine "
                             "verifies at most 64 tokens per request (set engine.max_draft)",
                             path=path)
    live = config.backend.name == "aiter"
    if e.mla and live and e.policy not in ("fixed", "unsafe-derived"):
        check_mla_widths(trace, config, inp)
    page = e.page_size
    need = ((inp.prompt + inp.output + widest + page - 1) // page) * page
    worst = int(np.argmax(need))
    if need[worst] > capacity_tokens:
        raise SpecschedError(
            f"the KV budget ({capacity_tokens} tokens) is smaller than one request needs: "
            f"request '{request_id(trace, worst)}' (row {worst}) needs {int(need[worst])} tokens "
            f"(prompt {int(inp.prompt[worst])} + output {int(inp.output[worst])} + verify "
            f"width {widest}, in pages of {page})", path=path)


def check_mla_widths(trace, config: SimConfig, inp) -> None:
    """Refuse a live MLA run whose policy could launch a verify wider than the AITER MLA decode
    kernels take (the executor would stop mid-run), naming the request that proposes the most
    drafts; ``bucket`` launches at the bucket its width rounds up to, as the policy does."""
    e = config.engine
    if not len(inp.draft):
        return
    top = max(MLA_WIDTHS)
    step = int(np.argmax(inp.draft))
    drafts = int(inp.draft[step])
    if e.max_draft:
        drafts = min(drafts, e.max_draft)
    width = drafts + 1
    if e.policy == "bucket":
        width = next((int(b) for b in sorted(e.buckets) if b >= width), int(max(e.buckets)))
    if width <= top:
        return
    row = int(np.searchsorted(inp.off, step, side="right")) - 1
    raise SpecschedError(
        f"engine.policy '{e.policy}' on an MLA model would launch a verify of width {width}: "
        f"request '{request_id(trace, row)}' (row {row}, column draft_tokens) proposes "
        f"{int(inp.draft[step])} drafts in one step, and AITER's MLA decode kernels take at most "
        f"{top} query rows per request (1, 2 and 4; 3 is padded to 4), so the live executor would "
        f"stop mid-run; set engine.max_draft {top - 1}"
        + (f" and engine.buckets within {top}" if e.policy == "bucket" else ""),
        path=getattr(trace, "path", None))
