"""Measure held-out profile points on the GPU: after a grid sweep, or added to an existing profile.

:func:`measure_heldout` chooses points off a grid (``backends.heldout``) and measures each as the
grid sweep measures its points (``backends.aiter.profiling``): graph points through a graph
captured for their (batch size, width), run for ``settle_s`` untimed before its first point,
then ``warmup`` untimed and ``reps`` timed replays; eager points after one settle per section,
one untimed and ``eager_reps`` timed launches; prefill the same.  :func:`run_heldout_only` is
``specsched profile --heldout-only --base``: the grid is the base file's, and the output holds
the base's rows unchanged plus the new held-out rows.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from backends.heldout import HeldoutPoint, choose_heldout, grid_span
from backends.aiter.profiling import ProfileSpec, _row, _settle, open_runner
from backends.shipped import file_sha256

__all__ = ["measure_heldout", "run_heldout_only", "measure_points"]

_RULE = ("random shapes off the grid in at least one axis of the table's lookup (graphs: padded "
         "batch size on the capture ladder; eager: off the union of eager and graph axes), "
         "strictly inside the grid's span, drawn from the seed (backends.heldout); mixed-KV "
         "batches are not held out: a row records one kv_len")


def _launch(runner: Any, p: HeldoutPoint):
    b, w, kv = p.bs, p.width, p.kv_len
    if p.kind == "verify":
        return runner.verify_launch(np.full(b, w), np.full(b, kv), mode="uniform", padded_bs=b,
                                    launch_width=w)
    if p.kind == "draft":
        return runner.draft_launch(np.full(b, kv), b)
    return runner.extend_launch(np.full(b, kv), b, w)


def _graph_key(p: HeldoutPoint) -> tuple:
    """The graph the grid sweep captures for this shape (``backends.aiter.profiling``)."""
    if p.kind == "draft":
        return ("draft", p.bs)
    return ("verify" if p.kind == "verify" else "extend", p.bs, p.width)


def measure_points(runner: Any, points: list[HeldoutPoint], spec: ProfileSpec, *,
                   progress: Callable[[str, int, int], None] | None = None) -> list[dict]:
    """Measure ``points`` (sorted: a graph's points adjacent) on ``runner``; profile rows with
    ``split = "heldout"``."""
    rows: list[dict] = []
    settled: set[tuple] = set()
    for i, p in enumerate(points):
        if p.kind == "prefill":
            tok, pre = np.array([p.tokens]), np.array([p.kv_len])
            if "prefill" not in settled:
                _settle(spec.settle_s, lambda: runner.prefill(tok, pre))
                settled.add("prefill")
            ts = runner.prefill(tok, pre, reps=spec.eager_reps, warmup=1)
        elif p.graph:
            key = _graph_key(p)
            if key not in runner.graphs:
                runner.capture_for_timing(key)  # replayed as a live run replays it
                first, _ = _launch(runner, p)
                _settle(spec.settle_s, lambda: runner.run(key, first, graph=True, warmup=0))
            launch, _ = _launch(runner, p)
            ts = runner.run(key, launch, graph=True, reps=spec.reps, warmup=spec.warmup)
            if i + 1 == len(points) or _graph_key(points[i + 1]) != key or not points[i + 1].graph:
                runner.release(key)  # free the graphs; the pool memory is reused
        else:
            launch, key = _launch(runner, p)
            if ("eager", p.kind) not in settled:
                _settle(spec.settle_s, lambda: runner.run(key, launch, graph=False, warmup=0))
                settled.add(("eager", p.kind))
            ts = runner.run(key, launch, graph=False, reps=spec.eager_reps, warmup=1)
            runner.graphs = {k: v for k, v in runner.graphs.items() if k[0] != "eager"}
        rows.append(dict(_row(p.kind, p.graph, p.bs, p.width, p.kv_len, p.tokens,
                              [t.latency_s for t in ts]), split="heldout"))
        if progress:
            progress(f"held-out {p.kind} {'graph' if p.graph else 'eager'} bs={p.bs} "
                     f"w={p.width} kv={p.kv_len} tokens={p.tokens}", i + 1, len(points))
    return rows


def _kernel_widths(shape: Any) -> tuple[int, ...] | None:
    if getattr(shape, "attention", "mha") == "mla" or getattr(shape, "experts", 0):
        from backends.aiter.metadata import MLA_KERNEL_Q_LEN

        return tuple(sorted(MLA_KERNEL_Q_LEN))
    return None


def measure_heldout(runner: Any, grid: Any, spec: ProfileSpec, *, n: int, seed: int,
                    fits: Callable[[int, int, int], bool], shape: Any,
                    exclude: Any = (), progress: Callable[[str, int, int], None] | None = None
                    ) -> tuple[list[dict], dict]:
    """Choose ``n`` points off the grid of ``grid`` (its grid rows) from ``seed`` and measure
    them (``shape``: the model, for the widths its kernels take; ``fits(bs, kv, width)``: what
    the GPU can hold); returns (rows with ``split = "heldout"``, the note for the metadata)."""
    span = grid_span(grid)

    def ok(p: HeldoutPoint) -> bool:
        return fits(p.bs, p.kv_len, p.tokens if p.kind == "prefill" else p.width)

    points, report = choose_heldout(
        span, n, seed, ladder=runner.capture_bs, graph_widths=runner.capture_widths,
        kernel_widths=_kernel_widths(shape),
        fits=ok, exclude=exclude)
    rows = measure_points(runner, points, spec, progress=progress)
    note = {"heldout": {"points": len(rows), "asked": int(n), "seed": int(seed),
                        "sections": report, "rule": _RULE}}
    return rows, note


def run_heldout_only(model: Any, out: str, base: str, spec: ProfileSpec, *, n: int, seed: int,
                     executor_opts: dict | None = None, command: str = "",
                     progress: Callable[[str, int, int], None] | None = None,
                     log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure ``n`` held-out points off the grid of the profile ``base`` and write its rows plus
    them to ``out`` (never ``base`` itself); returns a summary.  The model is checked against
    the one ``base`` was recorded for; the base's held-out rows are kept and not drawn again."""
    from backends.aiter import bridge
    from backends.aiter.executor import gpu_info
    from backends.journal import same_gpu
    from backends.profile import _check_model, grid_rows, read_profile, write_profile

    t_start = time.perf_counter()
    base_rows, meta = read_profile(base)
    _check_model(model, meta.get("model"), str(base))
    grid = grid_rows(base_rows).to_pylist()
    widths = sorted({int(r["width"]) for r in grid if r["kind"] == "verify" and r["graph"]})
    say = log or (lambda s: None)
    runner, shape, cap, fits = open_runner(model, widths, dict(executor_opts or {}), say)
    exclude = {(r["kind"], r["graph"], r["bs"], r["width"], r["kv_len"], r["tokens"])
               for r in base_rows.to_pylist()}
    held, note = measure_heldout(runner, grid, spec, n=n, seed=seed, fits=fits, shape=shape,
                                 exclude=exclude, progress=progress)
    h = file_sha256(base)
    gpu = gpu_info()
    note["heldout"].update(
        recorded=f"after the grid, by a separate --heldout-only run from {Path(base).name} "
                 f"(sha256 {h})",
        at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        same_gpu_as_grid=same_gpu(meta.get("gpu"), gpu),
        command=command, gpu=gpu, versions=bridge.versions(),
        executor={k: v for k, v in sorted((executor_opts or {}).items())},
        kv_capacity_tokens=cap,
        spec={"reps": spec.reps, "warmup": spec.warmup, "eager_reps": spec.eager_reps,
              "settle_s": spec.settle_s})
    old = [r if "split" in r else dict(r, split="grid") for r in base_rows.to_pylist()]
    notes = meta.get("notes") or []
    notes = (list(notes) if isinstance(notes, list) else [notes]) + [note]
    out_meta = {k: meta.get(k) for k in ("model", "gpu", "versions", "command", "kernels",
                                        "attention")}
    out_meta["notes"] = notes
    write_profile(old + held, out, out_meta, inputs=(base,))
    summary = {"rows": len(old) + len(held), "out": str(out), "heldout": len(held),
               "base_rows": len(old), "sections": note["heldout"]["sections"],
               "wall_s": time.perf_counter() - t_start}
    say(f"wrote {summary['rows']} rows ({len(held)} new held-out) to {out} in "
        f"{summary['wall_s']:.1f} s")
    return summary
