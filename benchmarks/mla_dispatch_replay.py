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

It also scores a fluid model of the same programs that share the memory bandwidth: while ``n``
programs run, each advances at full speed up to ``--nsat`` of them and at ``nsat / n`` beyond,
with ``--overhead`` tokens of fixed work each (``fluid_makespan``), as a lookup the same way.
``--straggler FILE...`` scores both on ``bench_aiter_straggler.py`` files instead (each case's
uniform points give its time at KV 0 and at the mean).

    python benchmarks/mla_dispatch_replay.py \\
        --journal benchmarks/results/h200-2026-12-02e/journal_longv2lite.jsonl \\
        --reference-run benchmarks/results/h200-2026-12-02f/live_longv2lite \\
        --trace traces/samples/synth_longctx_200.parquet --model deepseek-v2-lite

CPU only; about a minute for 6,537 calls.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.jit import njit  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from journal_member_kv import replay as journal_replay  # noqa: E402


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
    """The run's graph and eager verify calls as (VerifyBatch, live seconds), as far as the
    journal goes, and the profile executor of ``model`` under the run's configuration."""
    _, prep, tap = journal_replay(journal, run, trace, model, _Tap)
    return tap.verifies, prep.executor


#: the H200's resident MLA decode programs (2 an SM), when a profile does not say
SLOTS = 264
#: the fluid model's saturating program counts scored by default
NSATS = (132.0, 200.0, 264.0)
#: the damping exponents the damped makespan is scored at
ALPHAS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)


def makespan(row_kv: np.ndarray, splits: int, slots: int) -> float:
    """List-scheduled time of ``len(row_kv) x splits`` programs of ``kv / splits`` each, a row's
    splits adjacent, on ``slots`` slots (each program starts when the first slot frees):
    :func:`fluid_makespan` with no bandwidth limit."""
    return fluid_makespan(np.repeat(np.asarray(row_kv, float) / splits, splits), slots, np.inf)


@njit(_nrt=True)
def fluid_makespan(work: np.ndarray, slots: int, nsat: float) -> float:
    """The same programs sharing the GPU's memory bandwidth: each of ``n`` running programs
    advances at rate 1 (work per unit time) while ``n <= nsat``, else at ``nsat / n``; a program
    starts when one of ``slots`` slots frees, in order. ``nsat`` large is :func:`makespan`;
    ``nsat`` 1 is the total work, whatever the order."""
    n = work.shape[0]
    act = np.empty(max(1, slots))
    na = 0
    nxt = 0
    t = 0.0
    while nxt < n and na < slots:
        act[na] = work[nxt]
        na += 1
        nxt += 1
    while na > 0:
        rate = 1.0 if na <= nsat else nsat / na
        m = act[0]
        for i in range(1, na):
            if act[i] < m:
                m = act[i]
        t += m / rate
        k = 0
        for i in range(na):
            r = act[i] - m
            if r > 1e-9:
                act[k] = r
                k += 1
        na = k
        while nxt < n and na < slots:
            act[na] = work[nxt]
            na += 1
            nxt += 1
    return t


def program_work(kv: np.ndarray, padded: int, width: int, overhead: float) -> np.ndarray:
    """Each program's work in KV tokens, in launch order: ``padded x width`` rows (the real
    requests' then empty padding rows), each split into ``decode_splits(rows)`` programs of
    ``kv / splits`` tokens plus ``overhead``."""
    from backends.aiter.mla_kernels import decode_splits

    rows = int(padded) * int(width)
    splits = int(decode_splits(rows))
    row_kv = np.repeat(np.concatenate([np.asarray(kv, float), np.zeros(padded - len(kv))]), width)
    return np.repeat(row_kv / splits + overhead, splits)


def fluid_ratio(kv: np.ndarray, padded: int, width: int, nsat: float, overhead: float,
                slots: int, fill_padding: bool = True) -> float:
    """The fluid makespan of the batch over that of the uniform batch at its mean KV, timed by
    the engine's own form (``backends.mla_fluid.fluid_makespan``, ``backend.kv_lookup =
    fluid``; the same as :func:`fluid_makespan` over :func:`program_work`): with
    ``fill_padding`` every padded row at the mean, as the profile's uniform batch of the padded
    size has it (a replayed run's lookups); without, the padding rows empty, as the straggler
    benchmark's uniform batches of the same launch have them."""
    from backends.aiter.mla_kernels import decode_splits
    from backends.mla_fluid import fluid_makespan as engine_makespan, scratch_size

    kv = np.asarray(kv, dtype=np.float64)
    rows = int(padded) * int(width)
    splits = float(decode_splits(rows))
    scratch = np.zeros(scratch_size(rows))
    mean = np.full(int(padded) if fill_padding else len(kv), float(np.mean(kv)))

    def time(x: np.ndarray) -> float:
        return engine_makespan(x, len(x), int(padded), float(width), splits, float(overhead),
                               float(slots), float(nsat), scratch)

    return time(kv) / time(mean)


def straggler_cases(path: Path) -> list[tuple]:
    """A ``bench_aiter_straggler.py`` file's MLA cases as (spec, request KVs in launch order,
    padded bs, query rows per request, time at KV 0, uniform time at the mean KV, measured
    time, the rule's error in %): KV 0 by the line through the two shortest uniform points,
    the mean by linear interpolation between them."""
    out = []
    for c in json.loads(Path(path).read_text())["cases"]:
        pts = sorted((float(k), float(v)) for k, v in c["uniform"].items())
        ks, ts = np.array([k for k, _ in pts]), np.array([t for _, t in pts])
        t0 = ts[0] - (ts[1] - ts[0]) / (ks[1] - ks[0]) * ks[0]
        kv = np.full(int(c["real"]), float(c["short"]))
        n = int(c["nlong"])
        if c.get("order", "first") == "first":
            kv[:n] = c["long"]
        else:
            kv[len(kv) - n:] = c["long"]
        width = int(c["width"]) if c["kind"] == "verify" else 1
        out.append((c["spec"], kv, int(c["bs"]), width, t0, float(np.interp(c["mean_kv"], ks, ts)),
                    float(c["mixed_s"]), float(c["rule_err_pct"])))
    return out


def score_stragglers(files: list[Path], nsats, overhead: float, slots: int) -> None:
    """MAPE of the rule and of the fluid model (each ``nsat``) on benchmark straggler cases."""
    cases = [c for f in files for c in straggler_cases(f)]
    print(f"{len(cases)} straggler cases: today's rule errs "
          f"{np.mean([abs(c[7]) for c in cases]):.2f}% (MAPE); the fluid model, program overhead "
          f"{overhead:g} tokens: " + ", ".join(
              f"nsat {ns:g} {np.mean([abs((t0 + (tu - t0) * fluid_ratio(kv, bs, w, ns, overhead, slots, False)) / live - 1) for _, kv, bs, w, t0, tu, live, _ in cases]) * 100:.2f}%"
              for ns in nsats))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--journal", type=Path)
    ap.add_argument("--reference-run", type=Path)
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--model")
    ap.add_argument("--min-launches", type=int, default=20)
    ap.add_argument("--nsat", default=",".join(f"{x:g}" for x in NSATS),
                    help="the fluid model's bandwidth-saturating program counts to score")
    ap.add_argument("--overhead", type=float, default=64.0,
                    help="the fluid model's fixed work per program, in KV tokens")
    ap.add_argument("--straggler", type=Path, nargs="+", default=None,
                    help="score straggler benchmark files (bench_aiter_straggler.py --json) "
                         "instead of replaying a journal")
    a = ap.parse_args(argv)
    nsats = [float(x) for x in a.nsat.split(",")]
    if a.straggler:
        score_stragglers(a.straggler, nsats, a.overhead, SLOTS)
        return 0
    if not (a.journal and a.reference_run and a.trace and a.model):
        ap.error("--journal, --reference-run, --trace and --model are needed to replay a run")
    from backends.protocol import VerifyBatch

    calls, prof = replay(a.journal, a.reference_run, a.trace, a.model)
    att = prof.describe().get("attention") or {}
    slots = int(att.get("target_programs") or SLOTS)
    by_bs: dict[tuple[int, int], list] = {}
    for b, live in calls:
        if not b.graph:
            continue
        kv = np.asarray(b.kv_lens, dtype=np.float64)
        width = 4 if b.launch_width == 3 else int(b.launch_width)  # width 3 runs the width-4 graph
        bp = int(b.bs_padded)
        uni = VerifyBatch(bs_real=b.bs_real, bs_padded=bp, widths=b.widths,
                          kv_lens=np.full(len(kv), int(kv.mean())), launch_width=b.launch_width,
                          mode=b.mode, graph=True)
        # the pure list schedule: no bandwidth limit, no overhead, padding rows empty
        ratio = fluid_ratio(kv, bp, width, np.inf, 0.0, slots, False)
        t_uni, t_rule = prof.verify(uni).latency_s, prof.verify(b).latency_s
        zero = VerifyBatch(bs_real=b.bs_real, bs_padded=bp, widths=b.widths,
                           kv_lens=np.zeros(len(kv), dtype=np.int64), launch_width=b.launch_width,
                           mode=b.mode, graph=True)
        t0 = prof.verify(zero).latency_s  # the step without attention's KV-dependent part
        by_bs.setdefault((bp, int(b.bs_real)), []).append(
            (live / t_uni, ratio, t_rule / t_uni, live, t_rule, t0 + (t_uni - t0) * ratio,
             t0, t_uni) + tuple(t0 + (t_uni - t0) * fluid_ratio(kv, bp, width, ns, a.overhead,
                                                                 slots) for ns in nsats))
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
    print(f"the fluid model (shared bandwidth, program overhead {a.overhead:g} tokens), "
          "t(KV 0) + (t(mean) - t(KV 0)) x fluid ratio, MAPE against live over every launch: " +
          ", ".join(f"nsat {ns:g} {np.abs(x[:, 8 + i] / x[:, 3] - 1).mean() * 100:.2f}%"
                    for i, ns in enumerate(nsats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
