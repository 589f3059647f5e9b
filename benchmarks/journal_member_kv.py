"""Give a live run recorded before 2026-12-03 its steps' ``member_kv``, from the run's journal.

Since 2026-12-03 ``steps.parquet`` holds each pass's members' KV in launch order
(``member_kv``), which the fidelity report needs to score ``backend.kv_lookup = fluid`` per step.
Older live runs have only each pass's mean and longest KV, but a run recorded with ``--journal``
(``KEEP_JOURNAL=1`` in ``benchmarks/gpu_live_session.sh``) kept every executor call's measured
time. Replayed on a CPU through the engine under the run's recorded configuration, the engine
makes the same calls again and gets the same times back, so it takes the same decisions and
records the same steps, now with their members.

This replays the journal, checks that every column the run recorded comes out identical, step
for step (it refuses otherwise, naming the first column and step that differ), and writes a copy
of the run folder whose ``steps.parquet`` has the ``member_kv`` column added; every other file is
copied as it was.

    python benchmarks/journal_member_kv.py \\
        --journal benchmarks/results/h200-2026-12-03c/journal_v2lite400.jsonl \\
        --reference-run benchmarks/results/h200-2026-12-03c/live_v2lite400 \\
        --trace traces/samples/azure_conv_eagle_2k.parquet --model deepseek-v2-lite --out DIR

``--out`` must not exist. CPU only; about a minute for 20,000 calls.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.results import PARQUET_OPTIONS  # noqa: E402
from traces.errors import SpecschedError  # noqa: E402


class JournalEnd(Exception):
    """The replay asked for a call the journal does not hold."""


class _NoLiveCalls:
    """The journal's inner executor: a call past the journal's end stops the replay."""

    def __init__(self, inner):
        self._inner, self.name = inner, inner.name

    def describe(self):
        return self._inner.describe()

    def _end(self, batch):
        raise JournalEnd()

    prefill = draft = draft_extend = verify = _end


class _PerCall:
    """The journal, seen by the engine as an executor without a latency table, so that every
    pass goes to it (a call, as in the live run) instead of being looked up."""

    def __init__(self, journal):
        self._j, self.name = journal, journal.name

    def latency_table(self):
        return None

    def __getattr__(self, name):
        return getattr(self._j, name)


def journal_head(journal: Path) -> dict:
    """The first line of ``journal`` (``.jsonl`` or ``.jsonl.gz``); refuses a file that cannot
    be read or is not a specsched journal."""
    try:
        with _open_text(journal) as fh:
            head = json.loads(fh.readline())
    except (OSError, ValueError, EOFError) as exc:
        raise SpecschedError(f"cannot read its first line ({exc})", path=journal) from None
    if not isinstance(head, dict) or "specsched_journal" not in head:
        raise SpecschedError("not a specsched journal (no header line)", path=journal)
    return head


def _open_text(journal: Path):
    return gzip.open(journal, "rt") if journal.suffix == ".gz" else open(journal)


@contextmanager
def replaying(journal: Path, executor):
    """A :class:`~backends.journal.JournalExecutor` answering every call from ``journal`` (a
    gzipped one read as it is), never from ``executor`` (a call past the journal's end raises
    :class:`JournalEnd`). It reads a copy, since a journal is opened for appending."""
    from backends.journal import JournalExecutor

    head = journal_head(journal)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "journal.jsonl"
        with _open_text(journal) as src, open(copy, "w") as dst:
            shutil.copyfileobj(src, dst)
        j = JournalExecutor(_NoLiveCalls(executor), copy,
                            {k: v for k, v in head.items() if k != "specsched_journal"})
        try:
            yield j
        finally:
            j.close()


def replay(journal: Path, run: Path, trace: Path, model: str, executor_for, *,
           member_kv: bool = False):
    """Replay ``journal`` through the engine under ``run``'s recorded configuration, each pass
    going to ``executor = executor_for(journal_executor)``; returns ``(result, prep, executor)``:
    the run's results (``None`` when the journal ended first: :class:`JournalEnd`), the prepared
    profile side (its executor never called) and that executor. ``member_kv``: record each
    pass's members."""
    from analysis.fidelity.runs import config_for_recorded, load_recorded
    from specsched.setup import load_trace, prepare, simulate_to

    summary, _ = load_recorded(run)
    cfg, _ = config_for_recorded(summary, run, None, {"model.name": model})
    cfg = cfg.replace({"backend.name": "profile", "backend.profile": "",
                       "engine.record_member_kv": member_kv})
    prep = prepare(cfg)
    with replaying(journal, prep.executor) as j:
        ex = executor_for(j)
        try:
            # the run's first N requests (a live run of ``--limit N``; its journal says N)
            return simulate_to(load_trace(trace, seed=cfg.seed, limit=j.header.get("requests")),
                               cfg, None, executor=ex), prep, ex
        except JournalEnd:
            return None, prep, ex


def with_member_kv(recorded: pa.Table, replayed: pa.Table, where: str) -> pa.Table:
    """``recorded`` with ``replayed``'s ``member_kv`` added, once every recorded column is
    identical in both; refuses otherwise, naming the column and the first step."""
    if "member_kv" in recorded.column_names:
        raise SpecschedError(f"{where}: already has member_kv", path=where)
    if recorded.num_rows != replayed.num_rows:
        raise SpecschedError(f"{where}: the replay made {replayed.num_rows} steps, the run "
                             f"{recorded.num_rows}", path=where)
    for name in recorded.column_names:
        if name not in replayed.column_names:
            raise SpecschedError(f"{where}: the replay has no column {name}", path=where)
        a = recorded.column(name).combine_chunks()
        b = replayed.column(name).combine_chunks().cast(a.type)
        if not a.equals(b):
            diff = [i for i, (x, y) in enumerate(zip(a.to_pylist(), b.to_pylist()))
                    if not (x == y or (x != x and y != y))]  # NaN equals NaN here
            if diff:
                i = diff[0]
                raise SpecschedError(f"{where}: the replay differs in {name} at step {i} "
                                     f"({a[i].as_py()!r} recorded, {b[i].as_py()!r} replayed)",
                                     path=where)
    return recorded.append_column(replayed.schema.field("member_kv"),
                                  replayed.column("member_kv"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--journal", required=True, type=Path)
    ap.add_argument("--reference-run", required=True, type=Path)
    ap.add_argument("--trace", required=True, type=Path)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    try:
        if a.out.exists():
            raise SpecschedError(f"{a.out} exists; choose a new folder", path=a.out)
        steps_file = a.reference_run / "steps.parquet"
        recorded = pq.read_table(steps_file)
        result, _, _ = replay(a.journal, a.reference_run, a.trace, a.model, _PerCall,
                              member_kv=True)
        if result is None:
            raise SpecschedError(f"{a.journal}: ends before the run does (a run cut off: finish "
                                 f"it first)", path=a.journal)
        steps = with_member_kv(recorded, result.steps, str(steps_file))
        # built in a folder of its own beside --out, renamed into place when whole
        tmp = Path(tempfile.mkdtemp(prefix=f".{a.out.name}.", dir=a.out.parent))
        try:
            shutil.copytree(a.reference_run, tmp, dirs_exist_ok=True)
            pq.write_table(steps, tmp / "steps.parquet", **PARQUET_OPTIONS)
            tmp.rename(a.out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except SpecschedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n = len(steps.column("member_kv").combine_chunks().values)
    print(f"{a.out}: {steps.num_rows} steps, every recorded column identical to the replay's; "
          f"member_kv added ({n} members)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
