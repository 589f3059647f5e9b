"""Synthetic traces: Poisson or Gamma arrivals, lognormal or empirical lengths, any acceptance model.

Arrivals: inter-arrival times are exponential (``poisson``) or Gamma with a given coefficient of
variation (``gamma``, shape 1/cv^2: cv > 1 is burstier than Poisson), with mean 1/rate; the first
request arrives at 0.

Lengths (``LengthSpec``): ``lognormal:median=M,sigma=S[,min=A][,max=B]`` (rounded, clipped to
[A, B], A >= 1), ``fixed:N``, or ``empirical:PATH`` / ``empirical:FORMAT:PATH``, which resamples
(prompt, output) pairs jointly, with replacement, from a trace (a specsched parquet, or any
``trace convert`` input format; a Vidur trace without arrival times works too).

The trace is generated in blocks of ``FILL_BLOCK_ROWS`` (16,384) requests and written in row
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
          progress: Callable[[int], None] | None = None) -> SynthResult:
    """Generate ``n`` requests and write them to ``output_path`` (atomic, streamed by blocks)."""
    from traces.acceptance import FILL_BLOCK_ROWS, model_file, parse_acceptance
    from traces.atomic import check_output_file
    from traces.io import steps_table, write_trace

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
                lists = model.fill(o, rng, None)
                d, a = steps_table(lists.offsets, lists.draft_tokens, lists.accepted_tokens)
                cols["draft_tokens"], cols["accepted_tokens"] = d, a
                totals["steps"] += int(lists.offsets[-1])
                if lists.category is not None:
                    cols["category"] = pa.array(lists.category.tolist(), pa.string())
            if progress is not None:
                progress(m)
            yield pa.RecordBatch.from_pydict(cols)

    write_trace(batches(), output_path, metadata=meta, inputs=inputs)
    return SynthResult(str(output_path), n, totals["steps"] if model is not None else None, meta)
