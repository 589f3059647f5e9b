"""Synthetic traces: Poisson or Gamma arrivals, lognormal or empirical lengths, any acceptance model.

Arrivals: inter-arrival times are exponential (``poisson``) or Gamma with a given coefficient of
variation (``gamma``, shape 1/cv^2: cv > 1 is burstier than Poisson), with mean 1/rate; the first
request arrives at 0.

Lengths (``LengthSpec``): ``lognormal:median=M,sigma=S[,min=A][,max=B]`` (rounded, clipped to
[A, B], A >= 1), ``fixed:N``, or ``empirical:PATH`` / ``empirical:FORMAT:PATH``, which resamples
(prompt, output) pairs jointly, with replacement, from a trace (a specsched parquet, or any
``trace convert`` input format; a Vidur trace without arrival times works too).

Sessions (``turns``, ``system_prompts``): requests grouped in multi-turn conversations whose
prompts extend the previous turn's prompt and answer, with shared system prompts, and their
``prefix_hashes`` (``traces.sessions`` has the rules).  Then every request is drawn first (the
trace is held in memory, about 40 bytes per block id), and filled and written in blocks.

Otherwise the trace is generated in blocks of ``FILL_BLOCK_ROWS`` (16,384) requests and written in row
groups of 65,536, so a trace of millions of requests never sits in memory whole.  Every draw comes from one
``numpy.random.default_rng(seed)`` in a fixed order: the same arguments give the same file.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traces.errors import SpecschedError
from traces.schema import META_ACCEPTANCE, META_SOURCE

__all__ = ["LengthSpec", "parse_lengths", "synth", "SynthResult"]


@dataclass(frozen=True)
class LengthSpec:
    """How a token count is drawn: ``draw(n, rng) -> int64 [n]`` (>= 1)."""

    text: str
    kind: str
    params: dict[str, Any]

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.params["n"], np.int64)
        if self.kind == "lognormal":
            mu = math.log(self.params["median"])
            x = rng.lognormal(mu, self.params["sigma"], size=n)
            x = np.rint(x)
            return np.clip(x, self.params["min"], self.params["max"]).astype(np.int64)
        raise AssertionError(self.kind)


def _kv(text: str, spec: str) -> dict[str, str]:
    out = {}
    for part in filter(None, text.split(",")):
        if "=" not in part:
            raise SpecschedError(f"length spec {spec!r}: expected key=value, got {part!r}")
        k, v = part.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def parse_lengths(spec: str) -> LengthSpec:
    """Parse a one-column length spec (``lognormal:...`` or ``fixed:N``)."""
    if ":" not in spec:
        raise SpecschedError(f"length spec {spec!r}: expected lognormal:median=M,sigma=S or fixed:N")
    kind, rest = spec.split(":", 1)
    kind = kind.strip().lower()
    if kind == "fixed":
        try:
            n = int(rest)
        except ValueError:
            raise SpecschedError(f"length spec {spec!r}: fixed:N needs a whole number") from None
        if n < 1:
            raise SpecschedError(f"length spec {spec!r}: N must be >= 1")
        return LengthSpec(spec, "fixed", {"n": n})
    if kind == "lognormal":
        kv = _kv(rest, spec)
        unknown = set(kv) - {"median", "sigma", "min", "max"}
        if unknown or "median" not in kv or "sigma" not in kv:
            raise SpecschedError(f"length spec {spec!r}: lognormal needs median= and sigma= "
                                 "(optional min=, max=)")
        try:
            median = float(kv["median"])
            sigma = float(kv["sigma"])
            lo = int(kv.get("min", "1"))
            hi = int(kv.get("max", str(2**31 - 1)))
        except ValueError:
            raise SpecschedError(f"length spec {spec!r}: parameters must be numbers") from None
        if not (median >= 1 and math.isfinite(median)) or not (0 <= sigma < 10) or lo < 1 or hi < lo:
            raise SpecschedError(f"length spec {spec!r}: need median >= 1, 0 <= sigma < 10, "
                                 "1 <= min <= max")
        return LengthSpec(spec, "lognormal", {"median": median, "sigma": sigma, "min": lo, "max": hi})
    raise SpecschedError(f"length spec {spec!r}: unknown kind {kind!r} (lognormal, fixed; "
                         "empirical:PATH goes to --lengths)")


def _empirical_source(spec: str) -> tuple[str | None, str]:
    """(format or None for a specsched parquet, path) of ``empirical:[FORMAT:]PATH``."""
    from traces.convert import FORMATS

    rest = spec[len("empirical:"):]
    head = rest.split(":", 1)
    if len(head) == 2 and head[0] in FORMATS:
        return head[0], head[1]
    return None, rest


def load_empirical(spec: str) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(prompt, output) pairs of ``empirical:PATH`` or ``empirical:FORMAT:PATH``."""
    from traces.convert import read_source, read_vidur_lengths

    if not spec.startswith("empirical:"):
        raise SpecschedError(f"--lengths {spec!r}: expected empirical:PATH or empirical:FORMAT:PATH")
    fmt, path = _empirical_source(spec)
    if fmt is None:
        from traces.io import iter_trace_batches
        prompt, output = [], []
        for b in iter_trace_batches(path, columns=["prompt_tokens", "output_tokens"]):
            prompt.append(b.column("prompt_tokens").to_numpy())
            output.append(b.column("output_tokens").to_numpy())
        p = np.concatenate(prompt).astype(np.int64)
        o = np.concatenate(output).astype(np.int64)
    elif fmt == "vidur":
        p, o = read_vidur_lengths(path)
    else:
        src = read_source(fmt, path)
        p, o = src.prompt_tokens, src.output_tokens
    if p.size == 0:
        raise SpecschedError("no requests to draw lengths from", path=path)
    return p, o, {"file": Path(path).name, "format": fmt or "specsched", "pairs": int(p.size)}


@dataclass(frozen=True)
class SynthResult:
    path: str
    rows: int
    steps: int | None
    metadata: dict
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def _add_step_columns(cols: dict[str, pa.Array], model: Any, output_tokens: np.ndarray,
                      rng: np.random.Generator) -> int:
    """Add a block's per-step draft/accepted lists (and category) to ``cols``; return its steps."""
    from traces.io import steps_table

    lists = model.fill(output_tokens, rng, None)
    cols["draft_tokens"], cols["accepted_tokens"] = steps_table(
        lists.offsets, lists.draft_tokens, lists.accepted_tokens)
    if lists.category is not None:
        cols["category"] = pa.array(lists.category.tolist(), pa.string())
    return int(lists.offsets[-1])


def _interarrivals(n: int, rate: float, arrival: str, cv: float,
                   rng: np.random.Generator) -> np.ndarray:
    if arrival == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0 / (rate * shape), size=n)


def synth(output_path: str | os.PathLike, *, n: int, rate: float, arrival: str = "poisson",
          cv: float = 1.0, prompt: str = "lognormal:median=1000,sigma=0.8,max=16384",
          output: str = "lognormal:median=200,sigma=0.8,max=4096", lengths: str | None = None,
          acceptance: str | None = None, seed: int = 0, block_rows: int | None = None,
          progress: Callable[[int], None] | None = None, turns: str | None = None,
          turn_gap: float | None = None, system_prompts: int = 0,
          system_prompt_len: str = "fixed:1024", prefix_block: int = 64) -> SynthResult:
    """Generate ``n`` requests and write them to ``output_path`` (atomic, streamed by blocks).

    With ``turns`` (a length spec of turns per session) or ``system_prompts`` > 0, requests are
    grouped in sessions with shared system prompts and carry ``prefix_hashes`` of
    ``prefix_block``-token blocks (``traces.sessions``); the trace is then built in memory.
    """
    from traces.acceptance import FILL_BLOCK_ROWS, parse_acceptance
    from traces.acceptance import model_file  # noqa: F401
    from traces.atomic import check_output_file
    from traces.io import write_trace

    from traces.io import check_seed

    check_seed(seed)
    if n < 1:
        raise SpecschedError(f"-n must be >= 1, got {n}")
    if not (math.isfinite(rate) and rate > 0):
        raise SpecschedError(f"--rate must be a finite number > 0, got {rate}")
    if arrival not in ("poisson", "gamma"):
        raise SpecschedError(f"--arrival {arrival!r}: use poisson or gamma")
    if arrival == "gamma" and not (math.isfinite(cv) and cv > 0):
        raise SpecschedError(f"--cv must be a finite number > 0, got {cv}")
    if arrival == "poisson":
        cv = 1.0
    model = parse_acceptance(acceptance) if acceptance is not None else None
    inputs = [model_file(model)]
    if lengths is not None and lengths.startswith("empirical:"):
        inputs.append(_empirical_source(lengths)[1])
    check_output_file(output_path, inputs=inputs, kind="parquet")  # before the draws
    emp = load_empirical(lengths) if lengths is not None else None
    p_spec = parse_lengths(prompt) if emp is None else None
    o_spec = parse_lengths(output) if emp is None else None
    block = block_rows or FILL_BLOCK_ROWS
    rng = np.random.default_rng(seed)
    source: dict[str, Any] = {
        "format": "synth", "n": n, "rate": rate, "arrival": arrival, "cv": cv, "seed": seed,
        "prompt": None if emp else prompt, "output": None if emp else output,
        "lengths": None if emp is None else {"spec": "empirical", **emp[2]},
    }
    meta: dict[str, Any] = {META_SOURCE: source}
    if model is not None:
        meta[META_ACCEPTANCE] = model.metadata(seed)
    totals = {"steps": 0}
    if turns is not None or system_prompts:
        return _synth_sessions(output_path, n=n, rate=rate, arrival=arrival, cv=cv, rng=rng,
                               p_spec=p_spec, o_spec=o_spec, emp=emp, model=model, meta=meta,
                               block=block, progress=progress, turns=turns, turn_gap=turn_gap,
                               system_prompts=system_prompts, system_prompt_len=system_prompt_len,
                               prefix_block=prefix_block)

    def batches() -> Iterator[pa.RecordBatch]:
        t0 = 0.0
        for start in range(0, n, block):
            m = min(block, n - start)
            gaps = _interarrivals(m, rate, arrival, cv, rng)
            arr = t0 + np.concatenate([[0.0], np.cumsum(gaps[:-1])])
            t0 = arr[-1] + gaps[-1]
            if emp is not None:
                pick = rng.integers(0, emp[0].size, size=m)
                p, o = emp[0][pick], emp[1][pick]
            else:
                p = p_spec.draw(m, rng)
                o = o_spec.draw(m, rng)
            cols: dict[str, pa.Array] = {
                "request_id": pc.cast(pa.array(np.arange(start, start + m, dtype=np.int64)),
                                      pa.string()),
                "arrival_s": pa.array(arr, pa.float64()),
                "prompt_tokens": pa.array(p.astype(np.int32)),
                "output_tokens": pa.array(o.astype(np.int32)),
            }
            if model is not None:
                totals["steps"] += _add_step_columns(cols, model, o, rng)
            if progress is not None:
                progress(m)
            yield pa.RecordBatch.from_pydict(cols)

    write_trace(batches(), output_path, metadata=meta, inputs=inputs)
    return SynthResult(str(output_path), n, totals["steps"] if model is not None else None, meta,
                       warnings=tuple(model.warnings()) if model is not None else ())


def _synth_sessions(output_path, *, n, rate, arrival, cv, rng, p_spec, o_spec, emp, model, meta,
                    block, progress, turns, turn_gap, system_prompts, system_prompt_len,
                    prefix_block) -> SynthResult:
    """``synth`` with sessions: draw every request first, then fill and write in blocks."""
    from traces.io import write_trace
    from traces.schema import META_PREFIX_BLOCK
    from traces.sessions import DEFAULT_TURN_GAP_S, make_sessions

    gap = DEFAULT_TURN_GAP_S if turn_gap is None else float(turn_gap)
    turn_spec = parse_lengths(turns if turns is not None else "fixed:1")
    sys_spec = parse_lengths(system_prompt_len)
    if isinstance(prefix_block, bool) or not isinstance(prefix_block, int) or prefix_block < 1:
        raise SpecschedError(f"--prefix-block must be a whole number >= 1, got {prefix_block!r}")

    def user_lengths(m: int) -> tuple[np.ndarray, np.ndarray]:
        if emp is not None:
            pick = rng.integers(0, emp[0].size, size=m)
            return emp[0][pick].astype(np.int64), emp[1][pick].astype(np.int64)
        return p_spec.draw(m, rng), o_spec.draw(m, rng)

    sr = make_sessions(n, rng, rate=rate,
                       interarrivals=lambda m, r: _interarrivals(m, r, arrival, cv, rng),
                       user_lengths=user_lengths, turns=turn_spec, turn_gap=gap,
                       system_prompts=system_prompts, system_prompt_len=sys_spec,
                       block=prefix_block)
    meta[META_SOURCE]["sessions"] = {
        "turns": turn_spec.text, "turn_gap_s": gap, "system_prompts": system_prompts,
        "system_prompt_len": sys_spec.text if system_prompts else None, **sr.info}
    meta[META_PREFIX_BLOCK] = prefix_block
    totals = {"steps": 0}

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, n, block):
            end = min(n, start + block)
            o = sr.output_tokens[start:end]
            poff = sr.prefix_offsets[start:end + 1]
            cols: dict[str, pa.Array] = {
                "request_id": pc.cast(pa.array(np.arange(start, end, dtype=np.int64)), pa.string()),
                "arrival_s": pa.array(sr.arrival_s[start:end], pa.float64()),
                "prompt_tokens": pa.array(sr.prompt_tokens[start:end].astype(np.int32)),
                "output_tokens": pa.array(o.astype(np.int32)),
                "prefix_hashes": pa.ListArray.from_arrays(
                    pa.array((poff - poff[0]).astype(np.int32)),
                    pa.array(sr.prefix_ids[poff[0]:poff[-1]], pa.int64())),
            }
            if model is not None:
                totals["steps"] += _add_step_columns(cols, model, o, rng)
            if progress is not None:
                progress(end - start)
            yield pa.RecordBatch.from_pydict(cols)

    write_trace(batches(), output_path, metadata=meta)
    span = float(sr.arrival_s[-1] - sr.arrival_s[0])
    rate_seen = f"{(n - 1) / span:.3g}" if span > 0 else "-"
    note = (f"{sr.sessions:,} sessions, {n / sr.sessions:.2f} turns on average; requests span "
            f"{span:,.0f} s ({rate_seen} requests/s over the span: the rate reaches --rate only "
            "while sessions overlap, from about (turns - 1) x --turn-gap after the start until "
            "that long before the end)")
    return SynthResult(str(output_path), n, totals["steps"] if model is not None else None, meta,
                       (note,), tuple(model.warnings()) if model is not None else ())
