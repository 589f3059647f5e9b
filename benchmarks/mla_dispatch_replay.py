"""Do mixed-KV MLA decode launches time as their programs schedule?  A live journal, replayed.

A live run's journal (``simulate --journal``) keeps every executor call's measured time, keyed
by the call's order and a digest of its batch. Replayed on a CPU through the engine under the
run's recorded configuration, the engine makes the same calls again, so each recorded time gets
its batch back: every request's KV in launch order, which the results' ``steps.parquet`` (mean
and max KV only) lacks. The journal's inner executor is never called: the replay stops where
the journal ends.

For each graph verify launch on an MLA model this prints, per padded batch size and number of
requests, how the live
time relates to the uniform batch at the mean KV (the profile's own lookup at that mean), beside
a list-scheduling model of AITER's MLA decode: ``rows x splits`` programs (splits as
``backends.aiter.mla_kernels.decode_splits``), each taking its row's ``KV / splits``, dispatched
in order (a row's splits adjacent, rows in launch order, the graph's padding rows last with no
KV) onto ``slots`` resident programs (2 a SM on the H200), each program starting when a slot
frees. The model's ratio, makespan(mixed) / makespan(uniform at the mean), is attention time
alone, so its size is not the step's; its correlation with live / uniform over the launches of
one batch size says whether the order and spread of the KV, not only its mean and longest,
set the time. Last, it scores the model as a lookup (the step at KV 0 plus the uniform batch's
time above it times the ratio) against today's rule, both as MAPE against the live times.

    python benchmarks/mla_dispatch_replay.py \\
        --journal benchmarks/results/h200-2026-12-02e/journal_longv2lite.jsonl \\
        --reference-run benchmarks/results/h200-2026-12-02f/live_longv2lite \\
        --trace traces/samples/synth_longctx_200.parquet --model deepseek-v2-lite

CPU only; about a minute for 6,537 calls.
"""

from __future__ import annotations

import argparse
import heapq
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _JournalEnd(Exception):
    """The replay reached the end of the journal."""


class _NoLiveCalls:
    """An inner executor for the journal that ends the replay instead of measuring."""

    def __init__(self, inner):
        self._inner, self.name = inner, inner.name

    def describe(self):
        return self._inner.describe()

    def _end(self, batch):
        raise _JournalEnd()

    prefill = draft = draft_extend = verify = _end


class _Tap:
    """Passes every call to the journal and keeps the verify batches with their times."""

    def __init__(self, journal):
        self._j, self.name, self.verifies = journal, journal.name, []

    def prefill(self, b):
        return self._j.prefill(b)

    def draft(self, b):
        return self._j.draft(b)

    def draft_extend(self, b):
        return self._j.draft_extend(b)

    def verify(self, b):
        t = self._j.verify(b)
        self.verifies.append((b, float(t.latency_s)))
        return t

    def latency_table(self):
        return None

    def describe(self):
        return self._j.describe()

    def __getattr__(self, name):
        return getattr(self._j, name)


def replay(journal: Path, run: Path, trace: Path, model: str) -> tuple[list, object]:
    """The run's graph and eager verify calls as (VerifyBatch, live seconds), and the profile
    executor of ``model`` under the run's configuration."""
    from analysis.fidelity.runs import config_for_recorded, load_recorded
    from backends.journal import JournalExecutor
    from specsched.setup import load_trace, prepare, simulate_to

    summary, _ = load_recorded(run)
    cfg, _ = config_for_recorded(summary, run, None, {"model.name": model})
    cfg = cfg.replace({"backend.name": "profile", "backend.profile": ""})
    prep = prepare(cfg)
    with open(journal) as fh:
        head = json.loads(fh.readline())
    with tempfile.TemporaryDirectory() as tmp:  # the journal is opened for appending: a copy
        copy = Path(tmp) / "journal.jsonl"
        shutil.copy(journal, copy)
        j = JournalExecutor(_NoLiveCalls(prep.executor), copy,
                            {k: v for k, v in head.items() if k != "specsched_journal"})
        tap = _Tap(j)
        try:
            # the run's first N requests (a live run of ``--limit N``; its journal says N)
            simulate_to(load_trace(trace, seed=cfg.seed, limit=head.get("requests")), cfg, None,
                        executor=tap)
        except _JournalEnd:
            pass
        finally:
            j.close()
    return tap.verifies, prep.executor


#: the damping exponents the damped makespan is scored at
ALPHAS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)


def makespan(row_kv: np.ndarray, splits: int, slots: int) -> float:
    """List-scheduled time of ``len(row_kv) x splits`` programs of ``kv / splits`` each, a row's
    splits adjacent, on ``slots`` slots (each program starts when the first slot frees)."""
    free = [0.0] * slots
    for t in np.repeat(row_kv / splits, splits):
        heapq.heappush(free, heapq.heappop(free) + float(t))
    return max(free)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--journal", required=True, type=Path)
    ap.add_argument("--reference-run", required=True, type=Path)
    ap.add_argument("--trace", required=True, type=Path)
    ap.add_argument("--model", required=True)
    ap.add_argument("--min-launches", type=int, default=20)
    a = ap.parse_args(argv)
    from backends.aiter.mla_kernels import decode_splits
    from backends.protocol import VerifyBatch

    calls, prof = replay(a.journal, a.reference_run, a.trace, a.model)
    att = prof.describe().get("attention") or {}
    slots = int(att.get("target_programs") or 264)
    by_bs: dict[tuple[int, int], list] = {}
    for b, live in calls:
        if not b.graph:
            continue
        kv = np.asarray(b.kv_lens, dtype=np.float64)
        width = 4 if b.launch_width == 3 else int(b.launch_width)  # width 3 runs the width-4 graph
        rows, bp = b.bs_padded * width, int(b.bs_padded)
        splits = int(decode_splits(rows))
        uni = VerifyBatch(bs_real=b.bs_real, bs_padded=bp, widths=b.widths,
                          kv_lens=np.full(len(kv), int(kv.mean())), launch_width=b.launch_width,
                          mode=b.mode, graph=True)
        row_kv = np.repeat(np.concatenate([kv, np.zeros(bp - len(kv))]), width)
        mean_rows = np.repeat(np.concatenate([np.full(len(kv), kv.mean()),
                                              np.zeros(bp - len(kv))]), width)
        ratio = makespan(row_kv, splits, slots) / makespan(mean_rows, splits, slots)
        t_uni, t_rule = prof.verify(uni).latency_s, prof.verify(b).latency_s
        zero = VerifyBatch(bs_real=b.bs_real, bs_padded=bp, widths=b.widths,
                           kv_lens=np.zeros(len(kv), dtype=np.int64), launch_width=b.launch_width,
                           mode=b.mode, graph=True)
        t0 = prof.verify(zero).latency_s  # the step without attention's KV-dependent part
        by_bs.setdefault((bp, int(b.bs_real)), []).append(
            (live / t_uni, ratio, t_rule / t_uni, live, t_rule, t0 + (t_uni - t0) * ratio,
             t0, t_uni))
    print(f"{len(calls)} verify calls replayed from {a.journal.name}; {slots} resident programs")
    print("| padded bs | requests | launches | corr(live / uniform, model ratio) | corr(live / "
          "uniform, today's rule / uniform) | live / uniform (median) | today's rule / uniform "
          "| model ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for bp, real in sorted(by_bs):
        x = np.array(by_bs[(bp, real)])
        if len(x) < a.min_launches:
            continue
        lu, mr, ru = np.log(x[:, 0]), np.log(x[:, 1]), np.log(x[:, 2])
        def corr(y):
            return np.corrcoef(lu, y)[0, 1] if y.std() > 0 and lu.std() > 0 else float("nan")

        print(f"| {bp} | {real} | {len(x)} | {corr(mr):+.2f} | {corr(ru):+.2f} "
              f"| {np.median(lu) * 100:+.1f}% | {np.median(ru) * 100:+.1f}% "
              f"| {np.median(mr) * 100:+.1f}% |")
    x = np.array([r for rows in by_bs.values() for r in rows if r[0] > 0])
    many = np.array([r for rows in by_bs.values() if len(rows) >= a.min_launches for r in rows])
    for label, y in (("every launch", x), (f"groups of {a.min_launches} or more", many)):
        rule = np.abs(y[:, 4] / y[:, 3] - 1).mean() * 100
        model = np.abs(y[:, 5] / y[:, 3] - 1).mean() * 100
        print(f"\n{label} ({len(y)}): today's rule errs {rule:.2f}% (MAPE against live); the "
              f"makespan as a lookup, t(KV 0) + (t(mean) - t(KV 0)) x ratio, {model:.2f}%")
    # the makespan's ratio damped toward 1 (ratio ** alpha): a crude stand-in for the programs'
    # shared bandwidth, which lets a launch's shorter or fewer programs run faster than alone
    print("\nthe makespan damped, t(KV 0) + (t(mean) - t(KV 0)) x ratio ** alpha, MAPE against "
          "live over every launch: " + ", ".join(
              f"alpha {al:.2f} {np.abs((x[:, 6] + (x[:, 7] - x[:, 6]) * x[:, 1] ** al) / x[:, 3] - 1).mean() * 100:.2f}%"
              for al in ALPHAS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
