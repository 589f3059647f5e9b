"""Spec-Bench acceptance: replay the accept lengths of a Spec-Bench ``model_answer`` file.

The ``specbench:PATH[,...]`` acceptance model of :mod:`traces.acceptance` (its options are
documented there and in docs/traces.md): each request replays whole per-question step sequences
of one category, and the draft count of each step is reconstructed from how the method drafts.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from traces.acceptance import (AcceptanceModel, StepLists, estimate_position_accept_prob,
                               multi_range)
from traces.errors import SpecschedError
from traces.sniff import expect_jsonl, json_lines

__all__ = ["SpecBenchData", "SpecBenchModel", "load_specbench"]


@dataclass(frozen=True)
class SpecBenchData:
    """Accept lengths of a Spec-Bench ``model_answer`` file, one sequence per question."""

    path: str
    sha256: str
    model_id: str
    categories: tuple[str, ...]          # per question
    sequences: tuple[np.ndarray, ...]    # per question: committed tokens per step (>= 1)
    repeated: int = 0                    # answer lines dropped: their question_id came before

    @property
    def all_lengths(self) -> np.ndarray:
        return np.concatenate(self.sequences) if self.sequences else np.zeros(0, np.int64)


def load_specbench(path: str | os.PathLike) -> SpecBenchData:
    """Read a Spec-Bench answer file; every problem names the file, line (0-based) and key."""
    p = Path(path)
    if not p.is_file():
        raise SpecschedError("no such file (a Spec-Bench model_answer JSONL)", path=str(path))
    expect_jsonl(p, "a Spec-Bench model_answer JSONL")
    raw = p.read_bytes()
    cats: list[str] = []
    seqs: list[np.ndarray] = []
    model_ids: list[str] = []
    seen: set[str] = set()
    repeated = 0
    for row, obj, bad in json_lines(raw):
        if bad:
            raise SpecschedError(bad, path=str(path), row=row)
        if not isinstance(obj, dict):
            raise SpecschedError("expected a JSON object per line", path=str(path), row=row)
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise SpecschedError("missing or empty 'choices'", path=str(path), row=row,
                                 column="choices")
        al = choices[0].get("accept_lengths")
        if not isinstance(al, list) or not al:
            raise SpecschedError("missing or empty accept_lengths", path=str(path), row=row,
                                 column="choices[0].accept_lengths")
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in al):
            raise SpecschedError("accept_lengths must be whole numbers", path=str(path), row=row,
                                 column="choices[0].accept_lengths")
        try:
            arr = np.asarray(al, dtype=np.int64)
        except OverflowError:
            raise SpecschedError("accept length too large", path=str(path), row=row,
                                 column="choices[0].accept_lengths") from None
        if arr.min() < 1:
            raise SpecschedError(f"accept length {int(arr.min())} < 1 (the count includes the "
                                 "bonus token, so it is at least 1)", path=str(path), row=row,
                                 column="choices[0].accept_lengths")
        cat = obj.get("category")
        if not isinstance(cat, str) or not cat:
            raise SpecschedError("missing 'category'", path=str(path), row=row, column="category")
        qid = obj.get("question_id")
        if qid is not None:  # a question answered twice (runs appended): its first answer counts
            key = json.dumps(qid)
            if key in seen:
                repeated += 1
                continue
            seen.add(key)
        cats.append(cat)
        seqs.append(arr)
        model_ids.append(str(obj.get("model_id", "")))
    if not seqs:
        raise SpecschedError("no answers in the file", path=str(path))
    ids = sorted(set(model_ids))
    return SpecBenchData(str(path), hashlib.sha256(raw).hexdigest(), ids[0] if len(ids) == 1 else
                         ",".join(ids), tuple(cats), tuple(seqs), repeated)


#: how each Spec-Bench method drafts: maximum drafts per step and the default draft rule
_METHODS = {
    # EAGLE (v1) in Spec-Bench verifies a static draft tree (mc_sim_7b_63, 25 nodes) of depth 5:
    # at most 5 drafts are accepted per step.  Chain-drafting equivalent: k = 5.
    "eagle": {"k": 5, "rule": "EAGLE-1 static tree mc_sim_7b_63, depth 5"},
    # SPS in the fork runs Hugging Face assisted generation (transformers >= 4.45): constant
    # num_assistant_tokens = 20 with the assistant_confidence_threshold = 0.4 early stop.
    "sps": {"k": 20, "rule": "HF assisted generation (>= 4.45): num_assistant_tokens=20, "
                             "constant schedule, assistant_confidence_threshold=0.4"},
    # Spec-Bench's baseline: plain autoregressive decoding, one token per step, nothing drafted
    "vanilla": {"k": 0, "rule": "no drafting (autoregressive decoding): every step verifies "
                                "one token, width 1"},
}


def _detect_method(model_id: str) -> str | None:
    mid = model_id.lower()
    if "eagle2" in mid or "eagle-2" in mid or "eagle3" in mid or "eagle-3" in mid:
        return None
    if "eagle" in mid:
        return "eagle"
    if "sps" in mid:
        return "sps"
    if "vanilla" in mid:
        return "vanilla"
    return None


class SpecBenchModel(AcceptanceModel):
    """Empirical acceptance from Spec-Bench answers, sampled per category.

    Each request gets a category (``category`` rule), then reads a contiguous run of the
    category's "tape": its questions' step sequences, concatenated in a seeded random order and
    repeated as often as needed.  ``start=any`` (default) starts at a uniformly random step of
    the tape; ``start=question`` at the beginning of a random question (a request is then an
    answer from its first step; early steps of answers accept less than later ones).

    Draft counts (``drafts`` rule), with ``k`` the method's maximum drafts per step and ``a`` the
    recorded accepted drafts (accept length - 1):
    ``stop`` (default): ``d = k`` when ``a == k``; else ``d = min(k, a + 1 + G)`` with
    ``G ~ Geometric(q)`` on {0, 1, ...}: a chain drafter with a confidence stop proposes the
    rejected position and, with probability ``1 - q`` each, more positions after it.
    ``fixed``: ``d = k`` every step (the literal static-depth equivalent: one width).
    """

    kind = "specbench"

    def __init__(self, data: SpecBenchData, *, category: str = "auto", start: str = "any",
                 drafts: str = "stop", k: int | None = None, q: float = 0.5) -> None:
        self.data = data
        self.method = _detect_method(data.model_id)
        max_a = int(data.all_lengths.max()) - 1
        if self.method == "vanilla" and max_a > 0:
            self.method = None  # named vanilla, but the data accepted drafts: ask for k
        elif self.method is None and max_a == 0 and not k:
            self.method = "vanilla"  # no step accepted a draft and no k says one was drafted
        if self.method == "vanilla" and k:
            raise SpecschedError(
                f"model {data.model_id!r} did not draft (every step committed one token): it is "
                f"the no-speculation baseline; leave k out (or k=0) instead of k={k}",
                path=data.path)
        self.k_given = k is not None
        if k is None:
            if self.method is None:
                raise SpecschedError(
                    f"cannot tell how model {data.model_id!r} drafted: add k=N to the spec, N the "
                    f"most drafts one step proposes (the data accept up to {max_a}, so N >= "
                    f"{max_a})", path=data.path)
            k = _METHODS[self.method]["k"]
        if max_a > k:
            own = "" if self.k_given else f" ({self.method.upper()}'s own)"
            action = f"set k={max_a} in" if self.k_given else f"add k={max_a} to"
            raise SpecschedError(
                f"the data accept {max_a} drafts in one step, more than k={k}{own}: {action} the "
                "spec (or more: k is the most drafts one step proposes)", path=data.path)
        self.k = int(k)
        self.q = float(q)
        self.drafts = drafts
        self.start = start
        self.category = category
        cats = sorted(set(data.categories))
        self.cat_names = cats
        self.cat_questions = {c: [i for i, x in enumerate(data.categories) if x == c] for c in cats}
        if category not in ("auto", "mix", "trace") and category not in self.cat_questions:
            raise SpecschedError(f"category {category!r} is not in the data "
                                 f"(it has: {', '.join(cats)})", path=data.path)
        self.assigned_category = False
        self._bound: str | None = None

    def bind(self, categories: np.ndarray | None) -> None:
        """Resolve ``category=auto`` once for the whole trace (blocks must agree)."""
        if self.category != "auto":
            return
        ok = (categories is not None and len(categories) > 0
              and all(c in self.cat_questions for c in set(np.asarray(categories).tolist())))
        self._bound = "trace" if ok else "mix"

    def params(self) -> dict[str, Any]:
        allv = self.data.all_lengths
        return {
            "file": Path(self.data.path).name,
            "sha256": self.data.sha256,
            "model_id": self.data.model_id,
            "method": self.method or "given",
            "method_rule": self._method_rule(),
            "k": self.k,
            "drafts": self.drafts,
            "q": self.q if self.drafts == "stop" else None,
            "category": self.category,
            "start": self.start,
            "source_steps": int(allv.size),
            "source_mean_committed": round(float(allv.mean()), 6),
            "questions_per_category": {c: len(v) for c, v in self.cat_questions.items()},
            **({"repeated_answers_dropped": self.data.repeated} if self.data.repeated else {}),
        }

    def _method_rule(self) -> str:
        if self.method is None:
            return f"k={self.k} given"
        rule, own = _METHODS[self.method]["rule"], _METHODS[self.method]["k"]
        if self.k_given and self.k != own:
            return f"{rule}; k={self.k} given (the method's own k is {own})"
        return rule

    def speculation(self) -> bool:
        return self.k > 0

    def warnings(self) -> list[str]:
        n = self.data.repeated
        if not n:
            return []
        what = "1 answer repeats" if n == 1 else f"{n} answers repeat"
        return [f"{self.data.path}: {what} a question_id seen before: each question's first "
                "answer is used, the repeats ignored"]

    def position_accept_prob(self) -> list[float]:
        a = self.data.all_lengths - 1
        return estimate_position_accept_prob(np.full(a.size, self.k), a)

    def category_weights(self) -> np.ndarray:
        """Per category (sorted): its share of the tokens the data committed.

        Requests drawn with these weights commit, per step, the data's mean in expectation:
        a category with mean m per step needs 1/m steps per token, so weighting by tokens
        (steps x m) makes the trace's steps-weighted mean equal the data's.
        """
        tok = np.array([sum(int(self.data.sequences[i].sum()) for i in self.cat_questions[c])
                        for c in self.cat_names], np.float64)
        return tok / tok.sum()

    def _choose_categories(self, n: int, rng: np.random.Generator,
                           categories: np.ndarray | None) -> np.ndarray:
        rule = self._bound or self.category
        if rule == "auto":
            ok = (categories is not None and len(categories) == n and n > 0
                  and all(c in self.cat_questions for c in set(categories.tolist())))
            rule = "trace" if ok else "mix"
        if rule == "trace":
            if categories is None:
                raise SpecschedError("category=trace needs a trace with a 'category' column")
            bad = sorted({c for c in set(categories.tolist()) if c not in self.cat_questions},
                         key=str)
            if bad:
                raise SpecschedError(f"trace categories {bad[:5]} are not in the Spec-Bench data "
                                     f"(it has: {', '.join(self.cat_names)})", path=self.data.path)
            self.assigned_category = False
            return np.asarray(categories, dtype=object)
        self.assigned_category = True
        if rule == "mix":
            weights = self.category_weights()
            pick = rng.choice(len(self.cat_names), size=n, p=weights / weights.sum())
            return np.asarray(self.cat_names, dtype=object)[pick]
        return np.full(n, rule, dtype=object)

    def fill(self, output_tokens, rng, categories=None) -> StepLists:
        needed = np.asarray(output_tokens, np.int64) - 1
        n = needed.size
        cats = self._choose_categories(n, rng, categories)
        steps_per_req = np.zeros(n, np.int64)
        chunks_idx: list[np.ndarray] = []   # request ids per chunk of gathered steps
        chunks_len: list[np.ndarray] = []
        pieces: list[np.ndarray] = []
        for c in self.cat_names:            # sorted: a fixed draw order
            reqs = np.flatnonzero(cats == c)
            if reqs.size == 0:
                continue
            qs = self.cat_questions[c]
            order = rng.permutation(len(qs))
            seqs = [self.data.sequences[qs[i]] for i in order]
            tape = np.concatenate(seqs)
            qstart = np.concatenate([[0], np.cumsum([s.size for s in seqs])[:-1]])
            tape_tokens = int(tape.sum())
            reps = int(needed[reqs].max() // tape_tokens) + 2
            ext = np.tile(tape, reps)
            g = np.concatenate([[0], np.cumsum(ext)])
            if self.start == "question":
                s = qstart[rng.integers(0, len(seqs), size=reqs.size)]
            else:
                s = rng.integers(0, tape.size, size=reqs.size)
            end = np.searchsorted(g, g[s] + needed[reqs], side="left")
            take = end - s
            steps_per_req[reqs] = take
            chunks_idx.append(reqs)
            chunks_len.append(take)
            pieces.append(ext[multi_range(s, take)])
        offsets = np.concatenate([[0], np.cumsum(steps_per_req)]).astype(np.int64)
        total = int(offsets[-1])
        lengths = np.zeros(total, np.int64)
        for reqs, take, piece in zip(chunks_idx, chunks_len, pieces):
            lengths[multi_range(offsets[reqs], take)] = piece
        a = lengths - 1
        d = self._drafts(a, rng)
        return StepLists(offsets, d.astype(np.int16), a.astype(np.int16),
                         cats if self.assigned_category else None)

    def _drafts(self, a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.drafts == "fixed":
            return np.full(a.size, self.k, np.int64)
        d = np.full(a.size, self.k, np.int64)
        short = np.flatnonzero(a < self.k)
        extra = np.zeros(short.size, np.int64)
        if self.q < 1.0 and short.size:
            # Geometric(q) on {0, 1, ...} by inversion: P(extra >= g) = (1 - q)^g
            u = rng.random(short.size)
            extra = np.floor(np.log1p(-u) / np.log1p(-self.q)).astype(np.int64)
        d[short] = np.minimum(self.k, a[short] + 1 + extra)
        return d
