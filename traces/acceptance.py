"""Acceptance models: fill ``draft_tokens`` / ``accepted_tokens`` for traces that lack them.

A model is chosen by a spec string (``docs/traces.md`` documents each one):

``specbench:PATH[,category=auto|mix|trace|NAME][,start=any|question][,drafts=stop|fixed][,k=K][,q=Q]``
    Empirical, from a Spec-Bench ``model_answer`` JSONL (``choices[0].accept_lengths`` = tokens
    committed per verify step, bonus included).  Each request replays whole per-question step
    sequences of one category (concatenated when the request is longer), so the correlation
    within a request is kept.  The draft count of each step is reconstructed from how the
    method drafts (see ``drafts``).
``geometric:k=K,alpha=A``
    K drafts every step; each position is accepted with probability A, independently, until the
    first rejection.
``dynamic:k=K|LO-HI,alpha=A[,conc=C][,stop_right=P][,stop_wrong=P]``
    A drafter whose draft count varies per request and per step: each request has its own
    acceptance rate (Beta with mean A, concentration C) and its own maximum k (fixed, or drawn
    uniformly from LO..HI); within a step the drafter stops early after a token it is not
    confident about, a confidence that is informative but imperfect (it stops after a correct
    token with probability ``stop_right`` and after a wrong one with probability ``stop_wrong``).

Every model returns per-step lists that satisfy the trace rules (committed tokens
1 + sum(accepted + 1) reach ``output_tokens``, the last step being needed) and metadata with
``position_accept_prob`` (P(position j accepted | positions < j accepted), j = 1..>=8).
All draws come from the ``numpy.random.Generator`` passed in, in a fixed order.  The
Spec-Bench model lives in :mod:`traces.specbench`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from traces.errors import SpecschedError
from traces.schema import POSITION_PROB_MIN_LEN

__all__ = [
    "StepLists",
    "AcceptanceModel",
    "GeometricModel",
    "DynamicModel",
    "parse_acceptance",
    "estimate_position_accept_prob",
    "multi_range",
    "fill_blocks",
    "concat_lists",
    "FILL_BLOCK_ROWS",
]


@dataclass(frozen=True)
class StepLists:
    """Per-step lists of ``n`` requests: request i's steps are ``[offsets[i], offsets[i+1])``.

    ``category`` is set by models that assign each request a class (``specbench``), else None.
    """

    offsets: np.ndarray          # int64 [n+1]
    draft_tokens: np.ndarray     # int16 [steps]
    accepted_tokens: np.ndarray  # int16 [steps]
    category: np.ndarray | None = None   # object (str) [n]


# --------------------------------------------------------------------------------------------
# helpers


def multi_range(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for each (s, l), vectorised (int64)."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(starts - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


def estimate_position_accept_prob(draft_tokens: np.ndarray, accepted_tokens: np.ndarray,
                                  *, min_len: int = POSITION_PROB_MIN_LEN) -> list[float]:
    """P(position j accepted | positions < j accepted), estimated from per-step lists.

    For position j the estimate uses the steps that drafted at least j tokens and accepted at
    least j - 1: the share of them that accepted j.  Positions no step drafted repeat the last
    estimate (or 0.0 when no step drafted anything).  The list has at least ``min_len`` entries.
    """
    d = np.asarray(draft_tokens, dtype=np.int64)
    a = np.asarray(accepted_tokens, dtype=np.int64)
    kmax = int(d.max()) if d.size else 0
    n = max(min_len, kmax)
    out: list[float] = []
    last = 0.0
    if kmax:
        # counts by (d, a) pairs, then tail sums: steps with d >= j and a >= j-1, and a >= j
        d_hist = np.zeros((kmax + 2, kmax + 2), np.int64)
        np.add.at(d_hist, (np.minimum(d, kmax), np.minimum(a, kmax)), 1)
        # tail[j, i] = #steps with d >= j and a >= i
        tail = d_hist[::-1, ::-1].cumsum(0).cumsum(1)[::-1, ::-1]
        for j in range(1, kmax + 1):
            den = tail[j, j - 1]
            if den > 0:
                last = float(tail[j, j] / den)
            out.append(round(last, 6))
    while len(out) < n:
        out.append(round(last, 6))
    return out


def _parse_kv(text: str, spec: str, allowed: set[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    if not text:
        return out
    for part in text.split(","):
        if "=" not in part:
            raise SpecschedError(f"acceptance spec {spec!r}: expected key=value, got {part!r}")
        k, v = part.split("=", 1)
        k = k.strip()
        if k not in allowed:
            raise SpecschedError(f"acceptance spec {spec!r}: unknown key {k!r} "
                                 f"(known: {', '.join(sorted(allowed))})")
        out[k] = v.strip()
    return out


def _num(spec: str, key: str, value: str, *, lo: float, hi: float, integer: bool = False,
         lo_open: bool = False) -> float:
    try:
        x = int(value) if integer else float(value)
    except ValueError:
        raise SpecschedError(f"acceptance spec {spec!r}: {key}={value!r} is not a "
                             f"{'whole number' if integer else 'number'}") from None
    if not math.isfinite(x) or x < lo or x > hi or (lo_open and x == lo):
        bound = f"{'(' if lo_open else '['}{lo}, {hi}]"
        raise SpecschedError(f"acceptance spec {spec!r}: {key}={value} must be in {bound}")
    return x


def _fill_rounds(needed: np.ndarray, rng: np.random.Generator, draw, est_committed: float,
                 req_param=None) -> StepLists:
    """Assign i.i.d.-per-request step draws to requests until each has committed ``needed``.

    ``draw(req_idx, rng) -> (d, a)`` samples one step for each entry of ``req_idx`` (the request
    each step belongs to).  Rounds: every unfinished request draws a block of steps sized from
    ``est_committed``; the steps past the one that reaches its target are discarded.
    """
    n = needed.size
    remaining = needed.astype(np.int64).copy()
    seg_req: list[np.ndarray] = []
    seg_d: list[np.ndarray] = []
    seg_a: list[np.ndarray] = []
    seg_len: list[np.ndarray] = []
    active = np.flatnonzero(remaining > 0)
    while active.size:
        k = np.ceil(1.25 * remaining[active] / max(est_committed, 1.0)).astype(np.int64) + 2
        req_of_step = np.repeat(active, k)
        d, a = draw(req_of_step, rng)
        c = a.astype(np.int64) + 1
        g = np.concatenate([[0], np.cumsum(c)])
        starts = np.concatenate([[0], np.cumsum(k)[:-1]])
        target = g[starts] + remaining[active]
        end = np.searchsorted(g, target, side="left")
        seg_end = starts + k
        done = end <= seg_end
        take = np.where(done, end - starts, k)
        idx = multi_range(starts, take)
        seg_req.append(np.repeat(active, take))
        seg_d.append(d[idx])
        seg_a.append(a[idx])
        seg_len.append(take)
        got = g[starts + take] - g[starts]
        remaining[active] -= got
        active = active[~done]
    if not seg_req:
        z = np.zeros(0, np.int16)
        return StepLists(np.zeros(n + 1, np.int64), z, z.copy())
    req = np.concatenate(seg_req)
    d = np.concatenate(seg_d)
    a = np.concatenate(seg_a)
    order = np.argsort(req, kind="stable")   # rounds were appended in order: stable keeps them
    counts = np.bincount(req, minlength=n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return StepLists(offsets, d[order].astype(np.int16), a[order].astype(np.int16))


class AcceptanceModel(ABC):
    """Fills per-step lists for requests that need ``output_tokens`` tokens each."""

    kind: str = ""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """The model's parameters, as recorded in the trace metadata."""

    @abstractmethod
    def position_accept_prob(self) -> list[float]:
        """P(position j accepted | positions < j accepted) for j = 1..>=8."""

    @abstractmethod
    def fill(self, output_tokens: np.ndarray, rng: np.random.Generator,
             categories: np.ndarray | None = None) -> StepLists:
        """Per-step lists for these requests, drawn from ``rng``."""

    def bind(self, categories: np.ndarray | None) -> None:
        """Called once with the whole trace's categories before block-wise filling."""

    def speculation(self) -> bool:
        """Whether any step drafts: False for the no-speculation baseline (width 1 every step,
        no draft passes), recorded as ``"speculation": false`` in the metadata (absent means
        true, so traces written before the key existed read the same)."""
        return True

    def warnings(self) -> list[str]:
        """What the user should know about the model's input (e.g. repeated answers)."""
        return []

    def metadata(self, seed: int | None) -> dict[str, Any]:
        meta = {"kind": self.kind, "params": self.params(), "seed": seed,
                "position_accept_prob": self.position_accept_prob()}
        if not self.speculation():
            meta["speculation"] = False
        return meta

    def describe(self) -> str:
        return f"{self.kind}:" + ",".join(f"{k}={v}" for k, v in self.params().items())


#: requests per ``fill`` call when a whole trace is filled (``fill_blocks``)
FILL_BLOCK_ROWS = 16384


def fill_blocks(model: "AcceptanceModel", output_tokens: np.ndarray, rng: np.random.Generator,
                categories: np.ndarray | None = None, *, block_rows: int = FILL_BLOCK_ROWS):
    """Fill a whole trace block by block: yields ``(start, end, StepLists)``.

    Every reader and writer fills through this function with the same block size, so the
    lists of a trace depend only on its outputs, categories, model and seed (not on who filled
    them), and memory stays bounded by one block.
    """
    output_tokens = np.asarray(output_tokens)
    model.bind(categories)
    n = output_tokens.size
    for start in range(0, n, block_rows):
        end = min(n, start + block_rows)
        cats = None if categories is None else np.asarray(categories)[start:end]
        yield start, end, model.fill(output_tokens[start:end], rng, cats)


def concat_lists(blocks: list[StepLists]) -> StepLists:
    """One ``StepLists`` from consecutive blocks."""
    if len(blocks) == 1:
        return blocks[0]
    offs = [blocks[0].offsets]
    base = int(blocks[0].offsets[-1])
    for b in blocks[1:]:
        offs.append(b.offsets[1:] + base)
        base += int(b.offsets[-1])
    cats = None
    if all(b.category is not None for b in blocks):
        cats = np.concatenate([b.category for b in blocks])
    return StepLists(np.concatenate(offs),
                     np.concatenate([b.draft_tokens for b in blocks]),
                     np.concatenate([b.accepted_tokens for b in blocks]), cats)


# --------------------------------------------------------------------------------------------
# geometric


class GeometricModel(AcceptanceModel):
    """k drafts every step; each position accepted with probability alpha until the first miss."""

    kind = "geometric"

    def __init__(self, k: int, alpha: float) -> None:
        self.k = int(k)
        self.alpha = float(alpha)

    def params(self) -> dict[str, Any]:
        return {"k": self.k, "alpha": self.alpha}

    def position_accept_prob(self) -> list[float]:
        return [round(self.alpha, 6)] * max(POSITION_PROB_MIN_LEN, self.k)

    def speculation(self) -> bool:
        return self.k > 0

    def mean_committed(self) -> float:
        return 1.0 + sum(self.alpha ** j for j in range(1, self.k + 1))

    def _draw(self, req: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        m = req.size
        d = np.full(m, self.k, np.int64)
        if self.alpha >= 1.0:
            a = d.copy()
        elif self.alpha <= 0.0 or self.k == 0:
            a = np.zeros(m, np.int64)
        else:
            a = np.minimum(rng.geometric(1.0 - self.alpha, size=m) - 1, self.k)
        return d, a

    def fill(self, output_tokens, rng, categories=None) -> StepLists:
        needed = np.asarray(output_tokens, np.int64) - 1
        return _fill_rounds(needed, rng, self._draw, self.mean_committed())


# --------------------------------------------------------------------------------------------
# dynamic (per-request rate and k, confidence-based stop within a step)


class DynamicModel(AcceptanceModel):
    """A drafter that varies its draft count per request and per step.

    Per request: acceptance rate ``alpha_r ~ Beta(alpha*conc, (1-alpha)*conc)`` (``conc=inf``
    gives every request ``alpha``) and a maximum ``k_r`` (fixed, or uniform on ``k_lo..k_hi``).
    Per step: positions j = 1..k_r are drafted one at a time; each drafted token is correct with
    probability ``alpha_r``; after drafting it the drafter stops with probability ``stop_right``
    if it was correct and ``stop_wrong`` if it was wrong (a confidence signal that tends to drop
    on wrong tokens).  Accepted = the leading correct tokens among those drafted.
    """

    kind = "dynamic"

    def __init__(self, k_lo: int, k_hi: int, alpha: float, conc: float = 20.0,
                 stop_right: float = 0.1, stop_wrong: float = 0.6) -> None:
        self.k_lo, self.k_hi = int(k_lo), int(k_hi)
        self.alpha = float(alpha)
        self.conc = float(conc)
        self.stop_right = float(stop_right)
        self.stop_wrong = float(stop_wrong)

    def params(self) -> dict[str, Any]:
        return {"k": self.k_lo if self.k_lo == self.k_hi else f"{self.k_lo}-{self.k_hi}",
                "alpha": self.alpha, "conc": self.conc if math.isfinite(self.conc) else "inf",
                "stop_right": self.stop_right, "stop_wrong": self.stop_wrong}

    def _beta(self) -> tuple[float, float] | None:
        if not math.isfinite(self.conc) or self.alpha in (0.0, 1.0):
            return None
        return self.alpha * self.conc, (1.0 - self.alpha) * self.conc

    def position_accept_prob(self) -> list[float]:
        # P(a >= j | a >= j-1) of the undrafted-limit chain = E[alpha^j] / E[alpha^(j-1)]
        n = max(POSITION_PROB_MIN_LEN, self.k_hi)
        ab = self._beta()
        if ab is None:
            return [round(self.alpha, 6)] * n
        a, b = ab
        return [round((a + j - 1) / (a + b + j - 1), 6) for j in range(1, n + 1)]

    def fill(self, output_tokens, rng, categories=None) -> StepLists:
        needed = np.asarray(output_tokens, np.int64) - 1
        n = needed.size
        ab = self._beta()
        alpha_r = (rng.beta(ab[0], ab[1], size=n) if ab is not None
                   else np.full(n, self.alpha))
        k_r = (rng.integers(self.k_lo, self.k_hi + 1, size=n) if self.k_hi > self.k_lo
               else np.full(n, self.k_lo, np.int64))
        est = 1.0 + sum(self.alpha ** j * (1 - self.stop_right) ** (j - 1)
                        for j in range(1, self.k_hi + 1))

        def draw(req: np.ndarray, g: np.random.Generator):
            m = req.size
            al = alpha_r[req]
            kk = k_r[req]
            d = np.zeros(m, np.int64)
            a = np.zeros(m, np.int64)
            drafting = kk > 0
            prefix_ok = np.ones(m, bool)
            for j in range(1, self.k_hi + 1):
                if not drafting.any():
                    break
                u = g.random(m)
                v = g.random(m)
                correct = u < al
                d += drafting
                prefix_ok &= correct | ~drafting
                a += drafting & prefix_ok
                stop = np.where(correct, v < self.stop_right, v < self.stop_wrong)
                drafting &= ~stop & (kk > j)
            return d, a

        return _fill_rounds(needed, rng, draw, est)


# --------------------------------------------------------------------------------------------
# parsing


_SPECBENCH_KEYS = {"category", "start", "drafts", "k", "q"}


def model_file(model: AcceptanceModel | None) -> str | None:
    """The file an acceptance model was read from (Spec-Bench answers), or None."""
    data = getattr(model, "data", None)
    return getattr(data, "path", None)


def parse_acceptance(spec: str) -> AcceptanceModel:
    """Build an acceptance model from its spec string (see the module docstring)."""
    if not isinstance(spec, str) or ":" not in spec:
        raise SpecschedError(f"acceptance spec {spec!r}: expected KIND:PARAMS, e.g. "
                             "'geometric:k=4,alpha=0.7' or 'specbench:answers.jsonl'")
    kind, rest = spec.split(":", 1)
    kind = kind.strip().lower()
    if kind == "geometric":
        kv = _parse_kv(rest, spec, {"k", "alpha"})
        if "k" not in kv or "alpha" not in kv:
            raise SpecschedError(f"acceptance spec {spec!r}: geometric needs k= and alpha=")
        k = int(_num(spec, "k", kv["k"], lo=0, hi=64, integer=True))
        alpha = _num(spec, "alpha", kv["alpha"], lo=0.0, hi=1.0)
        return GeometricModel(k, alpha)
    if kind == "dynamic":
        kv = _parse_kv(rest, spec, {"k", "alpha", "conc", "stop_right", "stop_wrong"})
        if "k" not in kv or "alpha" not in kv:
            raise SpecschedError(f"acceptance spec {spec!r}: dynamic needs k= (K or LO-HI) and alpha=")
        kspec = kv["k"]
        if "-" in kspec:
            lo_s, hi_s = kspec.split("-", 1)
            lo = int(_num(spec, "k", lo_s, lo=1, hi=64, integer=True))
            hi = int(_num(spec, "k", hi_s, lo=1, hi=64, integer=True))
            if hi < lo:
                raise SpecschedError(f"acceptance spec {spec!r}: k={kspec} has LO > HI")
        else:
            lo = hi = int(_num(spec, "k", kspec, lo=1, hi=64, integer=True))
        alpha = _num(spec, "alpha", kv["alpha"], lo=0.0, hi=1.0)
        conc = kv.get("conc", "20")
        conc_v = math.inf if conc.lower() in ("inf", "infinity") else \
            _num(spec, "conc", conc, lo=0.0, hi=1e9, lo_open=True)
        sr = _num(spec, "stop_right", kv.get("stop_right", "0.1"), lo=0.0, hi=1.0)
        sw = _num(spec, "stop_wrong", kv.get("stop_wrong", "0.6"), lo=0.0, hi=1.0)
        return DynamicModel(lo, hi, alpha, conc_v, sr, sw)
    if kind == "specbench":
        parts = rest.split(",")
        path_parts: list[str] = []
        opts: list[str] = []
        for part in parts:   # trailing key=value pairs with known keys are options
            if "=" in part and part.split("=", 1)[0].strip() in _SPECBENCH_KEYS and path_parts:
                opts.append(part)
            elif opts:
                raise SpecschedError(f"acceptance spec {spec!r}: options must follow the path")
            else:
                path_parts.append(part)
        path = ",".join(path_parts).strip()
        if not path:
            raise SpecschedError(f"acceptance spec {spec!r}: specbench needs a path")
        kv = _parse_kv(",".join(opts), spec, _SPECBENCH_KEYS)
        drafts = kv.get("drafts", "stop")
        if drafts not in ("stop", "fixed"):
            raise SpecschedError(f"acceptance spec {spec!r}: drafts={drafts} (use stop or fixed)")
        start = kv.get("start", "any")
        if start not in ("question", "any"):
            raise SpecschedError(f"acceptance spec {spec!r}: start={start} (use question or any)")
        k = int(_num(spec, "k", kv["k"], lo=0, hi=64, integer=True)) if "k" in kv else None
        q = _num(spec, "q", kv.get("q", "0.5"), lo=0.0, hi=1.0, lo_open=True)
        from traces.specbench import SpecBenchModel, load_specbench

        return SpecBenchModel(load_specbench(path), category=kv.get("category", "auto"),
                              start=start, drafts=drafts, k=k, q=q)
    raise SpecschedError(f"acceptance spec {spec!r}: unknown model {kind!r} "
                         "(known: specbench, geometric, dynamic)")
