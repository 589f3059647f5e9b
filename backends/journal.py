"""A journal of executor calls, so that a live run longer than one sitting can be finished later.

:class:`JournalExecutor` wraps any executor. Each call's result is appended to a JSON-lines file
as soon as the inner executor returns it. Run again with the same journal, trace and
configuration, the engine makes the same calls in the same order: it schedules from the trace,
the configuration, the seed and the latencies it was given, nothing else. The wrapper answers
those calls from the journal without touching the GPU. Once the journal runs out, it calls the
inner executor again and keeps appending. A live run cut off by a time limit therefore loses
only the call in flight. The resumed run ends as the uninterrupted one would have, had its GPU
given the same times.

Each call is checked against the journal by its kind and a digest of the batch's fields. The
first difference stops the run with an error naming the call: the journal then belongs to
another run, and replaying it would be a confident wrong answer. The file's first line names the
model, backend and a digest of the configuration. A file that is not a specsched journal is never
written to.

Each measured call's line also holds ``w``, the wall-clock time (Unix seconds) it returned at,
so a run's steps can be set beside the GPU's clocks and temperatures sampled at the same time
(``SMI=1`` in ``benchmarks/gpu_live_session.sh`` logs ``nvidia-smi``); replaying ignores it.

Each sitting appends a ``segment`` line with the GPU it ran on. A run measured on several GPUs
says so in its warnings (``describe()["journal"]``).

:class:`PointJournal` does the same for a profile sweep's rows (``specsched profile --journal``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from backends.protocol import VerifyTiming
from traces.errors import SpecschedError

__all__ = ["JournalExecutor", "PointJournal", "JOURNAL_VERSION", "batch_digest", "read_journal",
           "open_journal", "sittings_used", "gpu_name", "grid_growth"]

JOURNAL_VERSION = 1


def batch_digest(batch: Any) -> str:
    """A digest of a batch's fields (arrays by their integer values), 16 hex digits."""
    canon = []
    for f in fields(batch):
        v = getattr(batch, f.name)
        canon.append([f.name, np.asarray(v).astype(np.int64).tolist()
                      if isinstance(v, np.ndarray) else v])
    return hashlib.sha256(json.dumps(canon, separators=(",", ":")).encode()).hexdigest()[:16]


def read_journal(path: Path, header: dict[str, Any], key: str) -> list[dict]:
    """The lines after the header of the journal at ``path`` (created with ``header`` when it is
    missing or empty). Refuses a file whose first line lacks ``key`` (not a journal of this kind)
    or differs from ``header`` in any of its keys, naming the key. A last line cut off mid-write
    is dropped from the file."""
    if path.exists() and not path.is_file():
        raise SpecschedError(f"journal {path}: not a file")
    if not path.exists() or path.stat().st_size == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            f.write(json.dumps(header) + "\n")
        return []
    raw = path.read_bytes()
    good = 0  # bytes up to the end of the last whole line
    lines: list[dict] = []
    for chunk in raw.splitlines(keepends=True):
        if not chunk.endswith(b"\n"):
            break  # cut off mid-write by a killed run: dropped below
        try:
            lines.append(json.loads(chunk))
        except ValueError:
            if not lines:
                break
            raise SpecschedError(f"journal {path}, line {len(lines) + 1}: not JSON") from None
        good += len(chunk)
    head = lines[0] if lines and isinstance(lines[0], dict) else {}
    if key not in head:
        raise SpecschedError(f"journal {path} is not a specsched journal of this kind (its first "
                             f"line has no {key} key): refusing to write to it")
    for k, want in header.items():
        if head.get(k) != want:
            raise SpecschedError(f"journal {path} belongs to another run: its {k} is "
                                 f"{head.get(k)!r}, this run's is {want!r} (use a new journal file)")
    if good < len(raw):
        with open(path, "r+b") as f:
            f.truncate(good)
            os.fsync(f.fileno())
    return [x if isinstance(x, dict) else {} for x in lines[1:]]


def open_journal(path: Path, header: dict[str, Any], key: str, is_entry, gpu: Any,
                 sitting: dict[str, Any] | None = None):
    """Open the journal at ``path`` for a new sitting: ``(segments, entries, file)``.

    Reads it (:func:`read_journal`), sorts its lines into sittings and the entries ``is_entry``
    accepts (any other line is refused, naming it), appends this sitting's line (its index,
    when, the entries before it, its GPU) and returns the file open for appending, line-buffered
    so that a killed process keeps every entry written."""
    segments: list[dict] = []
    entries: list[dict] = []
    for i, line in enumerate(read_journal(path, header, key), start=2):
        if "segment" in line:
            segments.append(line)
        elif is_entry(line):
            entries.append(line)
        else:
            raise SpecschedError(f"journal {path}, line {i}: neither an entry nor a segment")
    seg = {"segment": len(segments), "at": datetime.now(timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), "first_call": len(entries), "gpu": gpu, **(sitting or {})}
    segments.append(seg)
    f = open(path, "a", buffering=1)
    f.write(json.dumps(seg) + "\n")
    return segments, entries, f


def sittings_used(segments: list[dict], total: int) -> list[dict]:
    """The sittings that added entries, of ``total`` entries in all."""
    firsts = [int(s.get("first_call", 0)) for s in segments] + [int(total)]
    return [s for s, a, b in zip(segments, firsts, firsts[1:]) if b > a]


def gpu_uuid(gpu: Any) -> str | None:
    """A GPU record's UUID (``gpu_info()``), None when it has none: a CPU run, a roofline
    run's GPU sheet (a plain name), or a record from before UUIDs were kept."""
    return str(gpu.get("uuid")) if isinstance(gpu, dict) and gpu.get("uuid") else None


def same_gpu(a: Any, b: Any) -> bool | None:
    """Whether two GPU records name the same GPU, by UUID; None when either has none."""
    ua, ub = gpu_uuid(a), gpu_uuid(b)
    return None if ua is None or ub is None else ua == ub


def gpu_name(gpu: Any) -> str:
    """A GPU as a segment line recorded it: its UUID when known, else its name."""
    if isinstance(gpu, dict):
        return str(gpu.get("uuid") or gpu.get("name") or "an unnamed GPU")
    return str(gpu)


def _describe_batch(kind: str, batch: Any) -> str:
    bs = getattr(batch, "bs_real", None)
    return f"{kind} (bs {bs})" if bs is not None else f"{kind} ({len(batch.tokens)} requests)"


class JournalExecutor:
    """``inner`` with every call journalled to ``path`` (module docstring). ``header`` holds
    what must match for a journal to be replayed: model, backend, configuration digest."""

    def __init__(self, inner: Any, path: str | Path, header: dict[str, Any]) -> None:
        self.inner = inner
        self.name = inner.name
        self.path = Path(path)
        self.header = {"specsched_journal": JOURNAL_VERSION, **header}
        self.calls = 0
        self._open()

    # -- the file ---------------------------------------------------------------------------------
    def _open(self) -> None:
        self.segments, self.entries, self._f = open_journal(
            self.path, self.header, "specsched_journal", lambda x: {"k", "s", "r"} <= set(x),
            self.inner.describe().get("gpu"))

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    # -- calls ------------------------------------------------------------------------------------
    def _call(self, kind: str, batch: Any, live):
        i = self.calls
        self.calls += 1
        sig = batch_digest(batch)
        if i < len(self.entries):
            e = self.entries[i]
            if e["k"] != kind or e["s"] != sig:
                raise SpecschedError(
                    f"journal {self.path}, call {i}: this run asks for {_describe_batch(kind, batch)}"
                    f" [{sig}], the journal holds {e['k']} [{e['s']}]: the runs diverged, so the "
                    "journal belongs to another run (use a new journal file)")
            return e["r"]
        r = live(batch)
        self._f.write(json.dumps({"i": i, "k": kind, "s": sig, "r": r,
                                  "w": round(time.time(), 3)}) + "\n")
        return r

    def prefill(self, batch) -> float:
        return self._call("prefill", batch, lambda b: float(self.inner.prefill(b)))

    def draft(self, batch) -> float:
        return self._call("draft", batch, lambda b: float(self.inner.draft(b)))

    def draft_extend(self, batch) -> float:
        return self._call("draft_extend", batch, lambda b: float(self.inner.draft_extend(b)))

    def verify(self, batch) -> VerifyTiming:
        def live(b):
            t = self.inner.verify(b)
            return {"latency_s": float(t.latency_s), "out_of_grid": bool(t.out_of_grid),
                    "max_abs_error": None if t.max_abs_error is None else float(t.max_abs_error),
                    "misattributed_rows": t.misattributed_rows,
                    "extra": json.loads(json.dumps(t.extra, default=str))}
        return VerifyTiming(**self._call("verify", batch, live))

    def latency_table(self):
        """None: every call goes through the journal (the engine's live path)."""
        return None

    def describe(self) -> dict[str, Any]:
        d = dict(self.inner.describe())
        replayed = min(self.calls, len(self.entries))
        d["journal"] = {"file": str(self.path), "replayed_calls": replayed,
                        "live_calls": self.calls - replayed, "segments": self.segments}
        used = sittings_used(self.segments, self.calls)  # those that measured calls of this run
        if len(used) > 1:
            names = [gpu_name(s.get("gpu")) for s in used]
            where = "; ".join(f"from call {s['first_call']} on {n}" for s, n in zip(used, names))
            d["caveats"] = list(d.get("caveats", [])) + [
                f"measured in {len(used)} sittings (journal {self.path}: {where})"
                + (f"; on {len(set(names))} different GPUs, whose offsets show as steps in latency"
                   if len(set(names)) > 1 else "")]
        return d

    def __getattr__(self, name: str) -> Any:
        # wall_account() and the rest of a live executor's extras come from the inner one
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


#: the sweep settings that are lists of grid points: a journal may be continued by a sweep whose
#: lists hold more points than the journal's (the grid grew), never fewer
GRID_LISTS = ("bs", "widths", "kv", "eager_bs", "eager_widths", "eager_kv", "draft_kv",
              "extend_widths", "extend_eager_widths", "prefill_tokens", "prefill_prefix")


def grid_growth(recorded: Any, wanted: Any) -> dict[str, list] | None:
    """The points a sweep's settings ``wanted`` add to a journal's ``recorded`` ones, by list
    (empty when equal); ``None`` when they differ otherwise (another setting, or a point
    dropped), so that the journal belongs to another sweep."""
    if not (isinstance(recorded, dict) and isinstance(wanted, dict)) or recorded.keys() != wanted.keys():
        return None
    added: dict[str, list] = {}
    for k, want in wanted.items():
        have = recorded[k]
        if have == want:
            continue
        if k not in GRID_LISTS or not isinstance(have, list) or not isinstance(want, list) \
                or not set(have) <= set(want):
            return None
        added[k] = sorted(set(want) - set(have))
    return added


def _journal_head(path: Path) -> dict[str, Any] | None:
    """The first line of the journal at ``path`` as a dict, ``None`` when there is none."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    with open(path, "rb") as f:
        try:
            head = json.loads(f.readline())
        except ValueError:
            return None
    return head if isinstance(head, dict) else None


class PointJournal:
    """A profile sweep's measured rows, kept in a file as they are measured, so that a sweep
    cut off by a time limit goes on from where it stopped (``specsched profile --journal``).

    Rows are known by ``(kind, graph, bs, width, kv_len, tokens)`` (:meth:`key_of`): a sweep
    measures a point only when ``rows`` lacks its key, and :meth:`add` keeps what it measured;
    :meth:`has_all` lets it skip a graph capture whose points are all in the journal. The header
    (model, the sweep's settings) must match, as for :class:`JournalExecutor`, except that the
    sweep's grid lists may hold more points than the journal's (:func:`grid_growth`): then only
    the new points are measured, and the sitting's line names them (``grid_added``). Without a
    path the journal lives in memory only and every point is measured."""

    KEY = "specsched_profile_journal"

    def __init__(self, path: str | Path | None, header: dict[str, Any], gpu: Any,
                 sitting: dict[str, Any] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.rows: dict[tuple, dict] = {}
        self.segments: list[dict] = []
        self.measured = 0
        self._f = None
        if self.path is None:
            return
        full = {self.KEY: JOURNAL_VERSION, **header}
        sitting = dict(sitting or {})  # what this sitting's line says besides its GPU
        head = _journal_head(self.path)
        if head is not None and head.get("spec") != header.get("spec") and all(
                head.get(k) == v for k, v in full.items() if k != "spec"):
            added = grid_growth(head.get("spec"), header.get("spec"))
            if added is not None:  # the grid grew: keep the journal's header and its rows
                full = {**full, "spec": head["spec"]}
                sitting["grid_added"] = added
        self.segments, entries, self._f = open_journal(
            self.path, full, self.KEY, lambda x: isinstance(x.get("row"), dict), gpu,
            sitting or None)
        self.rows = {self.key_of(e["row"]): e["row"] for e in entries}

    @staticmethod
    def key_of(row: dict) -> tuple:
        return (row["kind"], bool(row["graph"]), int(row["bs"]), int(row["width"]),
                int(row["kv_len"]), int(row["tokens"]))

    def has_all(self, keys) -> bool:
        return all(k in self.rows for k in keys)

    def add(self, row: dict) -> None:
        """Keep a row just measured (journalled at once when there is a file)."""
        self.rows[self.key_of(row)] = row
        self.measured += 1
        if self._f is not None:
            self._f.write(json.dumps({"row": row}) + "\n")

    def note(self) -> dict[str, Any] | None:
        """What a profile's notes say of its journal (``None`` without one)."""
        if self.path is None:
            return None
        gpus = sorted({gpu_name(s.get("gpu")) for s in sittings_used(self.segments, len(self.rows))})
        return {"journal": {"file": str(self.path), "rows_from_journal": len(self.rows) -
                            self.measured, "rows_measured": self.measured,
                            "segments": self.segments, "gpus": gpus}}

    def close(self) -> None:
        if self._f is not None and not self._f.closed:
            self._f.close()
