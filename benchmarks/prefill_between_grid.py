"""Where a profile's prefill grid is too coarse: live prefill residuals by token count, pooled.

A profile measures prefills at a few token counts (the 8B's at prefix 0: 32, 64, 128, 256, 512,
768, 1,024, 1,536, ...) and the lookup draws a line between them (plus the MoE block and
attention wave terms, which are 0 for a dense model at prefix 0). The GEMMs of a dense prefill
are not linear in the tokens between those points: cuBLAS picks its kernel by the row count.
This pools the single-request, prefix-0 prefills of the live runs given (any GPU, any day),
takes each run's machine offset out (the median residual of its prefills within 1% of a grid
token, where the profile replays its own measurement), and prints the residual
``log(live / predicted)`` (%) per band of ``--step`` tokens, with the grid tokens marked:

    python benchmarks/prefill_between_grid.py --model llama-3.1-8b \\
        benchmarks/results/h200-*/live_conv* benchmarks/results/h200-*/live_split150 \\
        benchmarks/results/h200-*/live_schedule250 benchmarks/results/h200-*/live_adaptive250

With ``--what-if OUT.parquet`` it also writes the model's shipped profile with prefill rows added
at the band centres that have ``--min-n`` prefills: at prefix 0 the profile's own lookup scaled
by the band's median residual, at every other prefix line the same number of seconds added to
its lookup. That file is built from live runs, so it is a diagnostic, never evidence: it says how
much a denser measured prefill grid could move a fidelity report (``specsched fidelity --profile
OUT.parquet``), on runs other than those it was built from (docs/backends.md, *Prefill between
grid tokens*). Its notes say so. ``--profile FILE`` scores another profile of the model (a
denser measured grid: ``gpu_live_session.sh``'s ``prefill-dense`` job). ``--before FOLDER`` keeps only the runs recorded before a
results folder, so the file can be scored on the runs after it:

    python benchmarks/prefill_between_grid.py --model llama-3.1-8b --hi 1600 \
        --before h200-2026-12-04e --what-if /tmp/8b_prefill_what_if.parquet \
        benchmarks/results/h200-*/live_conv* benchmarks/results/h200-*/live_split150 \
        benchmarks/results/h200-*/live_schedule250 benchmarks/results/h200-*/live_adaptive250

CPU only, a few seconds a run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.profile import grid_rows, load_profile, read_profile  # noqa: E402
from backends.shipped import default_profile  # noqa: E402
from benchmarks.residual_by_shape import residuals  # noqa: E402
from traces.errors import SpecschedError  # noqa: E402

#: a prefill within this much (log) of a grid token counts as on the grid (its machine offset)
NEAR = 0.01
#: fewest on-grid prefills a run needs for its offset to come from them (else: all its prefills)
MIN_NEAR = 5


def grid_tokens(rows) -> np.ndarray:
    """The prefill grid's token counts, sorted."""
    return np.array(sorted({int(r["tokens"]) for r in grid_rows(rows).to_pylist()
                            if r["kind"] == "prefill"}), float)


def run_residuals(run: Path, table, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(tokens, residual % less the run's offset, the offset) of the run's single-request
    prefills at prefix 0."""
    s = residuals(run, table)
    tok = s["tokens"].astype(float)
    m = single_prefills(s)
    near = m & on_grid(tok, grid)
    pick = near if near.sum() >= MIN_NEAR else m
    off = float(np.median(s["resid"][pick])) if pick.any() else 0.0
    return tok[m], s["resid"][m] - off, off


def single_prefills(s: dict[str, np.ndarray]) -> np.ndarray:
    """Which of a run's steps (``residual_by_shape.residuals``) are single-request prefills at
    prefix 0 with a residual."""
    return ((s["kind"] == "prefill") & np.isfinite(s["resid"]) & (s["bs"] == 1)
            & (s["kv_mean"] == 0))


def on_grid(tokens: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Which token counts lie within :data:`NEAR` (log) of a grid token."""
    t = np.maximum(np.asarray(tokens, float), 1.0)
    return np.min(np.abs(np.log(t[:, None] / grid[None, :])), axis=1) < NEAR


def bands(tok: np.ndarray, resid: np.ndarray, step: int, lo: int, hi: int
          ) -> list[tuple[int, float, int]]:
    """(band centre, median residual, prefills) per band of ``step`` tokens centred on the
    multiples of ``step`` from ``lo`` to ``hi``; bands with no prefill are left out."""
    out = []
    for c in range(lo, hi + 1, step):
        m = np.abs(tok - c) <= step / 2
        if m.any():
            out.append((c, float(np.median(resid[m])), int(m.sum())))
    return out


def what_if_rows(table, rows, corrections: list[tuple[int, float]]) -> list[dict]:
    """Prefill grid rows at each (tokens, residual %) of ``corrections`` (tokens not on the
    grid): at prefix 0 the lookup times ``exp(residual / 100)``, at each other prefix line of
    ``rows`` the lookup plus the same seconds."""
    prefixes = sorted({int(r["kv_len"]) for r in grid_rows(rows).to_pylist()
                       if r["kind"] == "prefill"})
    out = []
    for t, c in corrections:
        v0, _ = table.prefill_s(t, 0)
        extra = v0 * (np.exp(c / 100.0) - 1.0)
        for p in prefixes:
            v = table.prefill_s(t, p)[0] + extra
            out.append({"kind": "prefill", "graph": False, "bs": 1, "width": 0, "kv_len": p,
                        "tokens": int(t), "latency_s": v, "p10_s": v, "p90_s": v, "reps": 1,
                        "split": "grid"})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="results folders of live runs")
    ap.add_argument("--model", required=True, help="the runs' model (its shipped profile)")
    ap.add_argument("--step", type=int, default=32, help="band width in tokens [32]")
    ap.add_argument("--lo", type=int, default=32, help="first band centre [32]")
    ap.add_argument("--hi", type=int, default=4096, help="last band centre [4096]")
    ap.add_argument("--min-n", type=int, default=5, help="fewest prefills a band needs to be "
                    "printed or written [5]")
    ap.add_argument("--before", metavar="FOLDER", help="only runs whose results folder's name "
                    "sorts before FOLDER (e.g. h200-2026-12-04e: those recorded before it)")
    ap.add_argument("--profile", type=Path, metavar="PROFILE.parquet",
                    help="score this profile instead of the model's shipped one (e.g. one with a "
                         "denser measured prefill grid)")
    ap.add_argument("--what-if", type=Path, metavar="OUT.parquet",
                    help="write the shipped profile with rows at the bands (a diagnostic)")
    a = ap.parse_args(argv)
    try:
        path = a.profile if a.profile is not None else default_profile(a.model)
        rows, meta = read_profile(path)
        table = load_profile(path)
        grid = grid_tokens(rows)
        toks, res, used = [], [], []
        for run in a.runs:
            if not (run / "steps.parquet").is_file() or not (run / "summary.json").is_file():
                continue
            if json.loads((run / "summary.json").read_text()).get("model") != a.model:
                continue
            if a.before and not run.resolve().parent.name < a.before:
                continue
            t, r, off = run_residuals(run, table, grid)
            if len(t):
                toks.append(t)
                res.append(r)
                used.append(f"{run.parent.name}/{run.name} ({len(t)}, offset {off:+.2f}%)")
        if not used:
            raise SpecschedError(f"no live run of {a.model} with a prefix-0 prefill among the "
                                 "folders given")
        tok, resid = np.concatenate(toks), np.concatenate(res)
        print(f"{len(tok)} single-request prefix-0 prefills of {a.model} from {len(used)} runs, "
              f"against {Path(path).name}: " + "; ".join(used) + "\n")
        print(f"| tokens (band of {a.step}) | prefills | median residual, run offset out (%) |")
        print("|---|---|---|")
        kept = []
        for c, med, n in bands(tok, resid, a.step, a.lo, a.hi):
            if n < a.min_n:
                continue
            on = bool(np.any(np.abs(grid - c) < 1))
            print(f"| {c}{' (grid)' if on else ''} | {n} | {med:+.2f} |")
            if not on:
                kept.append((c, med))
        mae = float(np.mean(np.abs(resid)))
        print(f"\nMean |residual| over these prefills: {mae:.2f}%.")
        if a.what_if:
            add = what_if_rows(table, rows, kept)
            meta = dict(meta)
            meta["notes"] = list(meta.get("notes") or []) + [
                "DIAGNOSTIC, not evidence: prefill rows at " + ", ".join(str(c) for c, _ in kept)
                + " tokens derived from the live runs " + "; ".join(used)
                + " by benchmarks/prefill_between_grid.py"]
            from backends.profile_file import write_profile
            write_profile(rows.to_pylist() + add, a.what_if, meta, inputs=(path,))
            print(f"Wrote {a.what_if}: {len(add)} prefill rows added at {len(kept)} token counts.")
    except SpecschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
