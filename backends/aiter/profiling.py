"""``specsched profile``: sweep the model-shaped passes on the GPU and write a latency profile.

The sweep (every point: ``warmup`` untimed runs, then ``reps`` timed runs; the row keeps the
median and the 10th/90th percentiles):

* verify, graph replays: one graph captured per (batch size, width) -- the batch sizes are
  points of the capture ladder -- and every KV length replayed through that one graph by
  changing its metadata only;
* verify, eager launches: a coarser grid (the engine launches eagerly above the ladder and for
  widths without a graph);
* draft, graph replays and eager: one draft-model step over (batch size, KV length);
* draft-extend, graph replays: one graph per (batch size, width) -- the draft model over
  ``width`` rows per request, SGLang's draft-extend pass after a verify -- every KV length
  replayed through it; eager at a few points (``extend_eager_widths`` over the eager grid);
* prefill: eager ragged passes over (tokens, cached prefix);
* with ``prefill_line`` N, a prefill line: one request at prefix 0 at every count from 1 to N
  (``split == "line"``: read at the exact count, ``backends.prefill_line``).

Then, with ``heldout`` > 0, shapes off that grid (``backends.heldout`` chooses them,
``backends.aiter.heldout_sweep`` measures them the same way), kept out of the tables.

Shapes whose KV cannot exist on the profiled GPU (``bs * (kv_len + width)`` above the model's KV
capacity there, as SGLang sizes its pool) are skipped; the engine can never produce them.  Every
skipped point is listed in the file's ``specsched.notes``.

Every grid row passes through a :class:`backends.journal.PointJournal`: with a file, a sweep cut
off by a time limit goes on from the rows it measured.  The module is past 400 lines because the
seven sections share one runner, one journal and the skipped-point bookkeeping; each section is
one block of :func:`_sweep`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from backends.aiter import metadata as md

__all__ = ["ProfileSpec", "run_profile", "DEFAULT_BS", "DEFAULT_KV"]

_DRAFT_NOTES = {
    "eagle": "draft rows: one EAGLE draft decode step (fc over embedding + hidden, one layer "
             "without input norm, LM head)",
    "eagle3": "draft rows: one EAGLE-3 draft decode step (QKV over normed embedding + hidden, "
              "one layer, final norm, LM head)",
    "mtp": "draft rows: one MTP/NextN draft decode step (eh_proj over the normed embedding and "
           "hidden state, one MLA + MoE layer, final norm, LM head)",
}

#: Batch sizes swept by default: points of SGLang's speculative capture ladder -- every one up to
#: 16 (the common decode batches; latency is not linear in bs between 4 and 8: live verify at the
#: interpolated bs 5-7 ran 2.5-4% above a profile measured at 4 and 8 only), then coarser.
DEFAULT_BS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256)
#: KV lengths swept by default (tokens cached per request before the pass).
DEFAULT_KV = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768)


@dataclass
class ProfileSpec:
    """What to sweep.  See the module docstring."""

    bs: Sequence[int] = DEFAULT_BS
    widths: Sequence[int] = tuple(range(1, 9))
    kv: Sequence[int] = DEFAULT_KV
    eager_bs: Sequence[int] = (1, 8, 16, 32, 64, 128, 256, 384, 512)
    #: widths past the graphs' 8 for proposers that draft up to 20 tokens (they run eagerly)
    eager_widths: Sequence[int] = (1, 2, 4, 8, 12, 16, 21)
    eager_kv: Sequence[int] = (512, 2048, 8192)
    draft: bool = True
    draft_kv: Sequence[int] | None = None
    #: draft-extend graph widths: SGLang pads each request to speculative_num_steps + 1 >= 2
    #: rows (the verify width at top-k 1); 2-8 covers num_draft_tokens 2-8 (default 4)
    extend: bool = True
    extend_widths: Sequence[int] = tuple(range(2, 9))
    #: eager draft-extend widths (over eager_bs x eager_kv); 1 for rounds verified at width 1
    extend_eager_widths: Sequence[int] = (1, 2, 4, 8)
    prefill_tokens: Sequence[int] = (32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096,
                                     6144, 8192)
    prefill_prefix: Sequence[int] = (0, 2048, 8192, 16384)
    #: N > 0: after the prefill grid, one-request prefills at prefix 0 at every count from 1 to
    #: N, stored as a prefill line (``split == "line"``, ``backends.prefill_line``); 0: none
    prefill_line: int = 0
    reps: int = 5
    warmup: int = 2
    eager_reps: int = 5
    #: before the first point of each graph and of each eager section, run its launch for this
    #: long untimed: the first ~25 runs after a change of workload measured up to 12% high
    #: (draft bs 1 after the eager verify sweep), a count of warm-up runs does not cover it
    settle_s: float = 0.2

    def check(self) -> None:
        from traces.errors import SpecschedError

        for name in ("bs", "widths", "kv", "eager_bs", "eager_widths", "eager_kv",
                     "prefill_tokens", "extend_widths", "extend_eager_widths"):
            vals = list(getattr(self, name))
            if any(int(v) < 1 for v in vals):
                raise SpecschedError(f"--{name.replace('_', '-')}: every value must be >= 1")
        if any(int(v) < 0 for v in self.prefill_prefix):
            raise SpecschedError("--prefill-prefix: every value must be >= 0")
        if int(self.prefill_line) < 0:
            raise SpecschedError("--prefill-line: must be >= 0")
        if not self.bs or not self.widths or not self.kv:
            raise SpecschedError("the verify sweep needs at least one batch size, width and KV length")
        if self.extend and self.draft and not self.extend_widths:
            raise SpecschedError("--extend-widths: the draft-extend sweep needs at least one width "
                                 "(or --no-extend)")
        if self.reps < 1 or self.warmup < 0 or self.eager_reps < 1:
            raise SpecschedError("--reps must be >= 1 and --warmup >= 0")
        if self.settle_s < 0:
            raise SpecschedError("--settle-s must be >= 0")


def prefill_grid(tokens: Sequence[int], experts: int) -> list[int]:
    """The prefill token counts to measure: ``tokens``, and for a MoE model both sides of each
    fused-MoE tile threshold inside their span (the tile changes there and the time jumps: on
    the H200, AITER's large-M tile made a 1,024-token prefill of DeepSeek-V2-Lite take 98 ms
    against 22 ms at 862 tokens), so interpolation never bridges a jump, and every power of two
    below the smallest: a MoE layer reads only the experts its tokens pick, so a short prefill
    is much faster than the smallest point (V2-Lite, 2026-12-01: 2 tokens 5.3 ms, 64 tokens
    12.3 ms), which the table would otherwise hold flat below it."""
    grid = set(int(x) for x in tokens)
    if experts and grid:
        from backends.aiter.moe import TILE_THRESHOLDS

        lo, hi = min(grid), max(grid)
        for t in TILE_THRESHOLDS:
            grid |= {x for x in (t - 1, t) if lo <= x <= hi}
        grid |= {1 << i for i in range(lo.bit_length()) if (1 << i) < lo}
    return sorted(grid)


def _stats(samples: list[float]) -> tuple[float, float, float]:
    a = np.asarray(samples, dtype=np.float64)
    return float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90))


def _row(kind: str, graph: bool, bs: int, width: int, kv: int, tokens: int, samples: list[float]) -> dict:
    med, p10, p90 = _stats(samples)
    return {"kind": kind, "graph": bool(graph), "bs": int(bs), "width": int(width), "kv_len": int(kv),
            "tokens": int(tokens), "latency_s": med, "p10_s": min(p10, med), "p90_s": max(p90, med),
            "reps": len(samples)}


def _settle(seconds: float, once: Callable[[], Any]) -> None:
    """Run ``once()`` (an untimed launch) until ``seconds`` have passed (at least once)."""
    t_end = time.perf_counter() + seconds
    while True:
        once()
        if time.perf_counter() >= t_end:
            return


def _eager_point(runner: Any, spec: ProfileSpec, pj: Any, k: tuple, settled: bool, launch: Any,
                 key: tuple) -> bool:
    """Measure the eager point ``k`` (a row key) through ``launch`` and keep its row in ``pj``;
    the first point of a section (``settled`` false) runs untimed for ``spec.settle_s`` first.
    Returns True: the section is settled."""
    if not settled:
        _settle(spec.settle_s, lambda: runner.run(key, launch, graph=False, warmup=0))
    ts = runner.run(key, launch, graph=False, reps=spec.eager_reps, warmup=1)
    pj.add(_row(*k, [t.latency_s for t in ts]))
    return True


def _prefill_point(runner: Any, spec: ProfileSpec, pj: Any, k: tuple, settled: bool) -> bool:
    """Measure the one-request prefill ``k`` (a row key: prefix ``k[4]``, tokens ``k[5]``) and
    keep its row in ``pj``; the first prefill of a sitting (``settled`` false) runs untimed for
    ``spec.settle_s`` first.  Returns True: prefill is settled."""
    tok, pre = np.array([k[5]]), np.array([k[4]])
    if not settled:
        _settle(spec.settle_s, lambda: runner.prefill(tok, pre))
    ts = runner.prefill(tok, pre, reps=spec.eager_reps, warmup=1)
    pj.add(_row(*k, [t.latency_s for t in ts]))
    return True


def open_runner(model: Any, widths: Sequence[int], opts: dict,
                say: Callable[[str], None]) -> tuple[Any, Any, int | None, Callable[[int, int, int], bool]]:
    """The live executor's runner for ``model`` with graphs for ``widths`` (and the default
    capture widths): (runner, model shape, KV capacity in tokens, ``fits(bs, kv, width)``, true
    when the GPU can hold ``bs`` requests of ``kv + width`` tokens, as SGLang sizes its pool)."""
    from backends.aiter.executor import make_executor

    t0 = time.perf_counter()
    ex = make_executor(model, capture_widths=tuple(sorted(set(int(w) for w in widths)
                                                          | set(md.DEFAULT_CAPTURE_WIDTHS))),
                       **opts)
    runner = ex.runner
    cap = runner.kv_capacity_tokens()
    say(f"model {ex.model.name} tp {ex.model.tp}: KV capacity on an H200 "
        f"{cap if cap is not None else 'unknown'} tokens; pool {runner.pool.plan.bytes / 2**30:.1f} GiB; "
        f"setup {time.perf_counter() - t0:.1f} s")

    def fits(bs: int, kv: int, width: int) -> bool:
        if kv + width > runner.max_context:
            return False
        return cap is None or bs * (kv + width) <= cap

    return runner, ex.model, cap, fits


def run_profile(model: Any, out: str, spec: ProfileSpec, *, executor_opts: dict | None = None,
                command: str = "", progress: Callable[[str, int, int], None] | None = None,
                log: Callable[[str], None] | None = None, heldout: int = 0,
                heldout_seed: int = 0, journal: str | None = None) -> dict[str, Any]:
    """Run the sweep on this machine's GPU and write the profile to ``out``; returns a summary.

    ``heldout`` > 0: after the grid, measure that many shapes off it (``backends.heldout``,
    drawn from ``heldout_seed``) and store them with ``split = "heldout"``, the grid's rows with
    ``split = "grid"``; 0 writes no ``split`` column.  ``journal``: a file keeping each grid row
    as it is measured; a sweep run again with it takes the rows it holds and measures the rest
    (:class:`backends.journal.PointJournal`; held-out shapes are measured afresh)."""
    from backends.aiter.executor import gpu_info

    spec.check()
    opts = dict(executor_opts or {})
    widths = sorted(set(int(w) for w in spec.widths))
    if not hasattr(model, "layers"):
        from backends.models import load_model

        model = load_model(model)
    if getattr(model, "attention", "mha") == "mla" or getattr(model, "experts", 0):
        # the MLA runner's widths: refuse the ones its kernels lack before anything is built
        from backends.aiter.mla import mla_kernel_width

        for ws, what in ((spec.widths, "verify"), (spec.eager_widths, "verify"),
                         (spec.extend_widths if spec.extend else (), "draft-extend"),
                         (spec.extend_eager_widths if spec.extend else (), "draft-extend")):
            for w in ws:
                mla_kernel_width(int(w), what)
    t_start = time.perf_counter()
    say = log or (lambda s: None)
    runner, shape, cap, fits = open_runner(model, widths, opts, say)
    for b in sorted(set(int(b) for b in spec.bs)):
        if md.padded_batch_size(b, runner.capture_bs) != b:
            from traces.errors import SpecschedError

            raise SpecschedError(f"--bs: {b} is not a captured batch size (the ladder: "
                                 f"{', '.join(map(str, runner.capture_bs))})")
    pj = _point_journal(journal, shape, spec, opts, gpu_info(), graph_timing(runner))
    try:
        return _sweep(runner, shape, cap, fits, spec, pj, out=out, command=command,
                      progress=progress, say=say, heldout=heldout, heldout_seed=heldout_seed,
                      t_start=t_start, model=model, widths=widths)
    finally:
        pj.close()


def graph_timing(runner: Any) -> str:
    """How a sweep on ``runner`` times its graphs, as its notes and journal say."""
    return (f"every graph timed after a capture of {runner.timing_state_key()}, the graph a "
            f"default live run captures last at start-up (SGLang's order; docs/aiter.md, "
            f"Timing)")


def _older_timing(pj: Any, timing: str) -> str:
    """What the notes add when some of the journal's rows were timed by an earlier rule."""
    from backends.journal import sittings_used

    older = [s for s in sittings_used(pj.segments, len(pj.rows)) if s.get("graph_timing") != timing]
    if not older:
        return ""
    return (f"; but the rows of {len(older)} earlier sitting(s) of its journal were timed as their "
            f"lines say, or, with no graph_timing there (before 2026-12-03), each verify graph "
            f"after a draft-extend capture of its batch size and other graphs after their own "
            f"capture")


def _point_journal(path: str | None, shape: Any, spec: ProfileSpec, opts: dict, gpu: Any,
                   graph_timing: str):
    """The sweep's :class:`~backends.journal.PointJournal` (in memory without ``path``); each
    sitting's line says how it timed graphs (``graph_timing``)."""
    from backends.journal import PointJournal

    def plain(x):  # as JSON gives it back (tuples become lists), to compare with a read header
        return json.loads(json.dumps(x, default=str))

    header = {"model": plain(shape), "spec": plain(asdict(spec)), "executor_opts": plain(opts)}
    return PointJournal(path, header, gpu, sitting={"graph_timing": graph_timing})


def _sweep(runner, shape, cap, fits, spec: ProfileSpec, pj, *, out, command, progress, say,
           heldout, heldout_seed, t_start, model, widths) -> dict[str, Any]:
    """The sweep itself, section by section; every grid row goes through ``pj``."""
    from backends.aiter import bridge
    from backends.aiter.executor import gpu_info
    from backends.profile import write_profile

    rows: list[dict] = []
    skipped: dict[str, list] = {"verify_graph": [], "verify_eager": [], "draft_graph": [],
                                "draft_eager": [], "extend_graph": [], "extend_eager": [],
                                "prefill": []}
    bs_list = sorted(set(int(b) for b in spec.bs))
    kv_list = sorted(set(int(k) for k in spec.kv))
    total_points = len(bs_list) * len(widths) * len(kv_list)
    done = 0
    timing = {"verify_graph_s": 0.0, "capture_s": 0.0}

    def tick(what: str) -> None:
        if progress:
            progress(what, done, total_points)

    # ---- verify, graph replays ----------------------------------------------------------------
    t0 = time.perf_counter()
    for b in bs_list:
        for w in widths:
            todo = [kv for kv in kv_list if fits(b, kv, w)]
            skipped["verify_graph"] += [[b, w, kv] for kv in kv_list if kv not in todo]
            keys = [("verify", True, b, w, kv, b * w) for kv in todo]
            if todo and pj.has_all(keys):
                rows += [pj.rows[k] for k in keys]
                done += len(kv_list)
                continue
            if todo:
                key = ("verify", b, w)
                c0 = time.perf_counter()
                runner.capture_for_timing(key)  # replayed as a live run replays it
                timing["capture_s"] += time.perf_counter() - c0
                first, _ = runner.verify_launch(np.full(b, w), np.full(b, todo[0]), mode="uniform",
                                                padded_bs=b, launch_width=w)
                _settle(spec.settle_s, lambda: runner.run(key, first, graph=True, warmup=0))
                for k in keys:
                    kv = k[4]
                    if k not in pj.rows:
                        launch, _ = runner.verify_launch(np.full(b, w), np.full(b, kv),
                                                         mode="uniform", padded_bs=b, launch_width=w)
                        ts = runner.run(key, launch, graph=True, reps=spec.reps, warmup=spec.warmup)
                        pj.add(_row(*k, [t.latency_s for t in ts]))
                    rows.append(pj.rows[k])
                    done += 1
                    tick(f"verify bs={b} w={w} kv={kv}")
                runner.release(key)  # free the graphs; the pool memory is reused
            done += len(kv_list) - len(todo)
    timing["verify_graph_s"] = time.perf_counter() - t0
    say(f"verify graphs: {sum(1 for r in rows if r['kind'] == 'verify')} points in "
        f"{timing['verify_graph_s']:.1f} s (captures {timing['capture_s']:.1f} s)")

    # ---- verify, eager ------------------------------------------------------------------------
    t0 = time.perf_counter()
    settled = False
    for b in sorted(set(int(x) for x in spec.eager_bs)):
        for w in sorted(set(int(x) for x in spec.eager_widths)):
            for kv in sorted(set(int(x) for x in spec.eager_kv)):
                if not fits(b, kv, w):
                    skipped["verify_eager"].append([b, w, kv])
                    continue
                k = ("verify", False, b, w, kv, b * w)
                if k not in pj.rows:
                    settled = _eager_point(runner, spec, pj, k, settled, *runner.verify_launch(
                        np.full(b, w), np.full(b, kv), mode="uniform", padded_bs=b, launch_width=w))
                rows.append(pj.rows[k])
            runner.graphs = {k: v for k, v in runner.graphs.items() if k[0] != "eager"}
    timing["verify_eager_s"] = time.perf_counter() - t0
    say(f"verify eager: {sum(1 for r in rows if r['kind'] == 'verify' and not r['graph'])} points "
        f"in {timing['verify_eager_s']:.1f} s")

    # ---- draft --------------------------------------------------------------------------------
    t0 = time.perf_counter()
    if spec.draft and runner.draft is not None:
        dkv = sorted(set(int(k) for k in (spec.draft_kv or kv_list)))
        for b in bs_list:
            todo = [kv for kv in dkv if fits(b, kv, 1)]
            skipped["draft_graph"] += [[b, kv] for kv in dkv if kv not in todo]
            keys = [("draft", True, b, 1, kv, b) for kv in todo]
            if not todo or pj.has_all(keys):
                rows += [pj.rows[k] for k in keys]
                continue
            key = ("draft", b)
            runner.capture_for_timing(key)  # replayed as a live run replays it
            first, _ = runner.draft_launch(np.full(b, todo[0]), b)
            _settle(spec.settle_s, lambda: runner.run(key, first, graph=True, warmup=0))
            for k in keys:
                if k not in pj.rows:
                    launch, _ = runner.draft_launch(np.full(b, k[4]), b)
                    ts = runner.run(key, launch, graph=True, reps=spec.reps, warmup=spec.warmup)
                    pj.add(_row(*k, [t.latency_s for t in ts]))
                rows.append(pj.rows[k])
            runner.release(key)
        settled = False
        for b in sorted(set(int(x) for x in spec.eager_bs)):
            for kv in sorted(set(int(x) for x in spec.eager_kv)):
                if not fits(b, kv, 1):
                    skipped["draft_eager"].append([b, kv])
                    continue
                k = ("draft", False, b, 1, kv, b)
                if k not in pj.rows:
                    settled = _eager_point(runner, spec, pj, k, settled,
                                           *runner.draft_launch(np.full(b, kv), b))
                rows.append(pj.rows[k])
        runner.graphs = {k: v for k, v in runner.graphs.items() if k[0] != "eager"}
    timing["draft_s"] = time.perf_counter() - t0
    say(f"draft: {sum(1 for r in rows if r['kind'] == 'draft')} points in {timing['draft_s']:.1f} s")

    # ---- draft-extend -------------------------------------------------------------------------
    t0 = time.perf_counter()
    if spec.draft and spec.extend and runner.draft is not None:
        dkv = sorted(set(int(k) for k in (spec.draft_kv or kv_list)))
        for b in bs_list:
            for w in sorted(set(int(x) for x in spec.extend_widths)):
                todo = [kv for kv in dkv if fits(b, kv, w)]
                skipped["extend_graph"] += [[b, w, kv] for kv in dkv if kv not in todo]
                keys = [("draft_extend", True, b, w, kv, b * w) for kv in todo]
                if not todo or pj.has_all(keys):
                    rows += [pj.rows[k] for k in keys]
                    continue
                key = ("extend", b, w)
                runner.capture_for_timing(key)  # replayed as a live run replays it
                first, _ = runner.extend_launch(np.full(b, todo[0]), b, w)
                _settle(spec.settle_s, lambda: runner.run(key, first, graph=True, warmup=0))
                for k in keys:
                    if k not in pj.rows:
                        launch, _ = runner.extend_launch(np.full(b, k[4]), b, w)
                        ts = runner.run(key, launch, graph=True, reps=spec.reps, warmup=spec.warmup)
                        pj.add(_row(*k, [t.latency_s for t in ts]))
                    rows.append(pj.rows[k])
                runner.release(key)
        settled = False
        for b in sorted(set(int(x) for x in spec.eager_bs)):
            for w in sorted(set(int(x) for x in spec.extend_eager_widths)):
                for kv in sorted(set(int(x) for x in spec.eager_kv)):
                    if not fits(b, kv, w):
                        skipped["extend_eager"].append([b, w, kv])
                        continue
                    k = ("draft_extend", False, b, w, kv, b * w)
                    if k not in pj.rows:
                        settled = _eager_point(runner, spec, pj, k, settled,
                                               *runner.extend_launch(np.full(b, kv), b, w))
                    rows.append(pj.rows[k])
                runner.graphs = {k: v for k, v in runner.graphs.items() if k[0] != "eager"}
    timing["draft_extend_s"] = time.perf_counter() - t0
    say(f"draft-extend: {sum(1 for r in rows if r['kind'] == 'draft_extend')} points in "
        f"{timing['draft_extend_s']:.1f} s")

    # ---- prefill ------------------------------------------------------------------------------
    t0 = time.perf_counter()
    settled = False
    for tok in prefill_grid(spec.prefill_tokens, getattr(model, "experts", 0)):
        for pre in sorted(set(int(x) for x in spec.prefill_prefix)):
            if not fits(1, pre, tok):
                skipped["prefill"].append([tok, pre])
                continue
            k = ("prefill", False, 1, 0, pre, tok)
            if k not in pj.rows:
                settled = _prefill_point(runner, spec, pj, k, settled)
            rows.append(pj.rows[k])
    timing["prefill_s"] = time.perf_counter() - t0
    say(f"prefill: {sum(1 for r in rows if r['kind'] == 'prefill')} points in "
        f"{timing['prefill_s']:.1f} s")

    # ---- the prefill line at every count (backends.prefill_line) -------------------------------
    t0 = time.perf_counter()
    line = []
    for tok in range(1, int(spec.prefill_line) + 1):
        if not fits(1, 0, tok):
            skipped["prefill"].append([tok, 0])
            continue
        k = ("prefill", False, 1, 0, 0, tok)  # a grid point at prefix 0 is the same pass
        if k not in pj.rows:  # settled already unless every grid prefill came from the journal
            settled = _prefill_point(runner, spec, pj, k, settled)
        line.append(dict(pj.rows[k], split="line"))
    if spec.prefill_line:
        timing["prefill_line_s"] = time.perf_counter() - t0
        say(f"prefill line: {len(line)} counts in {timing['prefill_line_s']:.1f} s")

    # ---- held-out points off the grid (backends.heldout) ---------------------------------------
    held_note = None
    if heldout:
        from backends.aiter.heldout_sweep import measure_heldout

        t0 = time.perf_counter()
        held, held_note = measure_heldout(runner, rows, spec, n=heldout, seed=heldout_seed,
                                          fits=fits, shape=shape, progress=progress)
        rows = [dict(r, split="grid") for r in rows] + held
        timing["heldout_s"] = time.perf_counter() - t0
        say(f"held-out: {len(held)} points in {timing['heldout_s']:.1f} s")
    if line:
        rows = [r if "split" in r else dict(r, split="grid") for r in rows] + line

    r = runner.describe()
    notes = [
        "latency_s = median of GPU time (CUDA events around the graph replay or the eager "
        "launches) plus the modelled tensor-parallel communication (0 at tp 1)"
        + ("; each timed launch queued behind a hold kernel, so the GPU's time alone is "
           "measured, not the host's launch rate" if runner.hold_gpu else
           "; launches not queued: the host's launch time counts where the GPU waits for it"),
        f"random bf16 weights and KV; paged KV pool of {r['kv_pool']['pages']} pages shared by "
        f"all layers at {r['kv_pool']['layer_shift_pages']}-page offsets (docs/aiter.md)",
        f"graphs: page size {runner.page_size}, max_seqlen_k {runner.max_seqlen_k} (context "
        f"{runner.max_context}), padded rows' seq_len {runner.fill}"
        + "; " + graph_timing(runner) + _older_timing(pj, graph_timing(runner)),
        _DRAFT_NOTES[r["draft_role"]] if r.get("draft_role") in _DRAFT_NOTES else "no draft model",
        "draft_extend rows: the draft model over width rows per request after a verify (every "
        "request at the width, padded rows at the fill length; seqused_k = kv_len + width), "
        + ("logits for each request's last row (SGLang's EAGLE worker)"
           if runner.extend_logits == "last" else
           "logits for every row (SGLang's overlap worker, DRAFT_EXTEND_V2)")
        + ("; the EAGLE-3 fusion GEMM over the target's 3 hidden states (3*hidden -> hidden) first"
           if r.get("draft_role") == "eagle3" else ""),
        "prefill rows: one request per pass, eager, logits for the last token only",
        {"skipped_beyond_kv_capacity": {k: v for k, v in skipped.items() if v},
         "kv_capacity_tokens": cap},
        {"timing_s": {k: round(v, 2) for k, v in timing.items()},
         "spec": {k: list(v) if isinstance(v, (tuple, list)) else v for k, v in asdict(spec).items()}},
    ]
    if held_note is not None:
        notes.append(held_note)
    jn = pj.note()
    if jn is not None:
        notes.append(jn)
        if len(jn["journal"]["gpus"]) > 1:
            notes.append(f"measured on {len(jn['journal']['gpus'])} GPUs over "
                         f"{len(jn['journal']['segments'])} sittings (journal): rows from "
                         "different machines carry their offset")
            say(f"warning: {notes[-1]}")
        for seg in jn["journal"]["segments"]:
            if seg.get("grid_added"):
                notes.append(f"sitting {seg['segment']} ({seg['at']}) grew the journal's grid by "
                             f"{seg['grid_added']}: the earlier sittings' rows were kept")
    t = runner.timing_describe()
    # eager_segments: the kinds whose passes filled the launch queue and were timed in segments
    notes.append({"held_timing": {k: t[k] for k in ("held_runs", "reruns_after_a_short_hold",
                                                    "timed_runs_still_starved",
                                                    "still_starved_by_kind", "eager_segments")}})
    if t["timed_runs_still_starved"]:
        say(f"warning: {t['timed_runs_still_starved']} timed runs outran their hold on every "
            f"attempt ({t['still_starved_by_kind']}): their medians may include host gaps")
    if r["geometry"]["tp"] > 1:
        notes.append(f"tp {r['geometry']['tp']}: one GPU's shard was run; all-reduces modelled "
                     f"({r['comm_model']['latency_s'] * 1e6:.1f} us + bytes x 2(tp-1)/tp / "
                     f"{r['comm_model']['bus_bw'] / 1e9:.0f} GB/s per call, 2 per layer + 1, plus "
                     "the logits all-gather), not measured")
    kernels = dict(runner.kernels.modules)
    kernels.pop("mla_decode", None)
    kernels["gemm"] = "torch.nn.functional.linear (cuBLAS)"
    kernels["silu_and_mul"] = "specsched Triton kernel (backends/aiter/model.py)"
    kernels["metadata"] = "specsched Triton kernel expanding page table, positions, KV slots"
    kernels["runtime"] = runner.kernels.runtime
    if r["geometry"]["tp"] > 1:
        kernels["tp_comm"] = "modelled, not a real kernel"
    attention = None
    try:
        from backends.aiter.occupancy import attention_occupancy

        attention = attention_occupancy(runner)
        say(f"attention: {attention['slots_per_sm']} programs per SM resident "
            f"({attention.get('kernel', 'unified_attention')})")
    except Exception as exc:  # noqa: BLE001 - a ROCm GPU, or a Triton without the hooks used
        notes.append(f"attention occupancy not measured ({exc}): lookups will use mean KV")
    meta = {"model": shape, "gpu": gpu_info(), "versions": bridge.versions(), "command": command,
            "kernels": kernels, "notes": notes, "attention": attention}
    write_profile(rows, out, meta)
    summary = {"rows": len(rows), "out": str(out), "skipped": {k: len(v) for k, v in skipped.items()},
               "heldout": sum(1 for x in rows if x.get("split") == "heldout"),
               "prefill_line": len(line),
               "timed_runs_still_starved": t["timed_runs_still_starved"],
               "rows_from_journal": len(pj.rows) - pj.measured, "rows_measured": pj.measured,
               "timing_s": timing, "wall_s": time.perf_counter() - t_start}
    say(f"wrote {len(rows)} rows to {out} in {summary['wall_s']:.1f} s")
    return summary
