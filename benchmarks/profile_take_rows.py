"""Write a profile whose grid rows of some kinds come from another recording of the same grid.

A profile re-measured in part (``benchmarks/journal_remeasure.py``) may re-measure rows that had
no reason to change, on a GPU that times them differently from the others. This writes ``base``
with its grid rows of ``--kind`` replaced by ``donor``'s grid rows of that kind (held-out rows
stay the base's), and adds ``--note`` and the donor's GPU and command to the notes, so the file
says where those rows came from. Both must be profiles of the same model, and the donor must
hold every grid point of that kind the base has.

    python3 benchmarks/profile_take_rows.py BASE.parquet DONOR.parquet --kind prefill \\
        --note "why" -o OUT.parquet

With ``--keep-level`` the donor's rows are first scaled, per KV (prefix) line, by the median of
base / donor over the grid points both hold on that line: the donor then gives the shape between
the base's points (a denser sweep on another GPU) at the base's level, and the note keeps each
line's factor. A line the base lacks is refused.

With ``--add-heldout`` instead of ``--kind`` it keeps every base row and adds the donor's
held-out rows (a grid grown and given new held-out shapes keeps the shapes measured before it
grew), leaving out any that the base holds or whose shape is now a point of the base's grid.

With ``--add-line`` instead it keeps every grid and held-out base row and adds a prefill line
(``split="line"`` rows, read by the prefill lookup at the exact token count) from ``donor``: its
one-request prefill rows at prefix 0 (grid rows, e.g. from ``specsched profile --prefill-tokens
1,2,...,1536 --prefill-prefix 0``, and its own line rows, which win at a count both hold),
replacing any line the base had. They are written as the donor recorded them: the profile
backend puts a line at its grid's level when it loads it (``backends.prefill_line.leveled``,
per grid token), so the note keeps only the median of base / donor over the token counts where
the base has a grid prefill row at prefix 0 and bs 1 and the donor a row (``grid_over_line``),
and the counts' range. A donor with fewer than two such rows, or none at a count the base holds
(no level to put it at), is refused. A base without a ``split`` column gets one (its rows
``"grid"``).

Refuses to write over ``base``, ``donor`` or an existing file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.profile import SPLIT_FIELD as _SPLIT, read_profile, write_profile  # noqa: E402
from backends.profile_file import PROFILE_SCHEMA  # noqa: E402
from traces.errors import SpecschedError  # noqa: E402

SPLIT_FIELD = _SPLIT.name
KEY = ("kind", "graph", "bs", "width", "kv_len", "tokens")


def _grid(table: pa.Table) -> pa.Table:
    if SPLIT_FIELD not in table.column_names:
        return table
    return table.filter(pc.equal(table[SPLIT_FIELD], "grid"))


def _read_pair(base: str, donor: str) -> tuple[pa.Table, dict, pa.Table, dict]:
    """Both profiles' rows and metadata; refused when they are of different models."""
    bt, bm = read_profile(base)
    dt, dm = read_profile(donor)
    if bm["model"] != dm["model"]:
        raise SpecschedError(f"{donor}: another model than {base}'s", path=donor)
    return bt, bm, dt, dm


def _shapes(table: pa.Table) -> list[tuple]:
    """Each row's shape (:data:`KEY`), in row order."""
    return [tuple(r[k] for k in KEY) for r in table.select(list(KEY)).to_pylist()]


def _noted(bm: dict, dm: dict, what: str, note: dict) -> dict:
    """A copy of ``bm`` with a note ``{what: note}`` naming the donor's GPU and command."""
    meta = dict(bm)
    meta["notes"] = list(bm.get("notes") or []) + [
        {what: {**note, "from_gpu": dm.get("gpu"), "from_command": dm.get("command")}}]
    return meta


def level_factors(gone: pa.Table, donor: pa.Table) -> dict[int, float]:
    """Per KV line of ``donor``'s rows: the median of base / donor latency over the shapes
    both hold (``gone``: the base's rows of the kind); a donor line the base lacks is refused."""
    base = {s: r for s, r in zip(_shapes(gone), gone.column("latency_s").to_pylist())}
    ratios: dict[int, list[float]] = {}
    for s, v in zip(_shapes(donor), donor.column("latency_s").to_pylist()):
        ratios.setdefault(int(s[4]), [])
        if s in base:
            ratios[int(s[4])].append(base[s] / v)
    lacking = sorted(k for k, v in ratios.items() if not v)
    if lacking:
        raise SpecschedError(f"--keep-level: the base has no point on the donor's KV line "
                             f"{lacking[0]}, so no level to keep there")
    return {k: statistics.median(v) for k, v in sorted(ratios.items())}


def _scaled(rows: pa.Table, factors: dict[int, float]) -> pa.Table:
    """``rows`` with latency_s, p10_s and p90_s multiplied by their KV line's factor."""
    f = pa.array([factors[int(k)] for k in rows.column("kv_len").to_pylist()], pa.float64())
    for c in ("latency_s", "p10_s", "p90_s"):
        rows = rows.set_column(rows.column_names.index(c), c, pc.multiply(rows[c], f))
    return rows


def take_rows(base: str, donor: str, kind: str, note: str,
              keep_level: bool = False) -> tuple[pa.Table, dict]:
    """``base``'s rows and metadata with its ``kind`` grid rows taken from ``donor`` (with
    ``keep_level``, scaled to the base's level per KV line: :func:`level_factors`)."""
    bt, bm, dt, dm = _read_pair(base, donor)
    is_kind = pc.equal(bt["kind"], kind)
    if SPLIT_FIELD in bt.column_names:
        is_kind = pc.and_(is_kind, pc.equal(bt[SPLIT_FIELD], "grid"))
    gone = bt.filter(is_kind)
    dk = _grid(dt).filter(pc.equal(_grid(dt)["kind"], kind))
    have = set(_shapes(dk))
    missing = [r for r in _shapes(gone) if r not in have]
    if missing:
        raise SpecschedError(f"{donor}: lacks {len(missing)} of {base}'s {kind} grid points, "
                             f"e.g. {missing[0]}", path=donor)
    factors = level_factors(gone, dk) if keep_level else None
    if factors:
        dk = _scaled(dk, factors)
    kept = bt.filter(pc.invert(is_kind))
    taken = dk.select([c for c in kept.column_names if c != SPLIT_FIELD])
    if SPLIT_FIELD in kept.column_names:
        taken = taken.append_column(SPLIT_FIELD, pa.array(["grid"] * len(taken)))
    rows = pa.concat_tables([kept, taken.cast(kept.schema)])
    said = {"kind": kind, "rows": len(taken), "why": note}
    if factors:
        said["level_kept"] = {str(k): round(v, 6) for k, v in factors.items()}
    return rows, _noted(bm, dm, "rows_taken", said)


def add_heldout(base: str, donor: str, note: str) -> tuple[pa.Table, dict]:
    """``base``'s rows and metadata plus ``donor``'s held-out rows that ``base`` lacks (by shape,
    grid and held-out rows alike)."""
    bt, bm, dt, dm = _read_pair(base, donor)
    if SPLIT_FIELD not in dt.column_names or SPLIT_FIELD not in bt.column_names:
        raise SpecschedError(f"{donor if SPLIT_FIELD not in dt.column_names else base}: no "
                             f"{SPLIT_FIELD} column, so no held-out rows to keep apart")
    have = set(_shapes(bt))
    held = dt.filter(pc.equal(dt[SPLIT_FIELD], "heldout"))
    keep = [s not in have for s in _shapes(held)]
    added = held.filter(pa.array(keep, pa.bool_())).select(bt.column_names).cast(bt.schema)
    return pa.concat_tables([bt, added]), _noted(
        bm, dm, "heldout_added", {"rows": len(added), "left_out": len(held) - len(added),
                                  "why": note})


def _line_source(table: pa.Table) -> pa.Table:
    """``table``'s one-request prefill rows at prefix 0 that may make a line: its grid rows (all
    rows without a split column) and its line rows, one per token count (the line row where a
    count has both), as :data:`PROFILE_SCHEMA` columns."""
    one = pc.and_(pc.equal(table["kind"], "prefill"),
                  pc.and_(pc.equal(table["kv_len"], 0), pc.equal(table["bs"], 1)))
    if SPLIT_FIELD in table.column_names:
        split = table[SPLIT_FIELD]
        grid = table.filter(pc.and_(one, pc.equal(split, "grid")))
        line = table.filter(pc.and_(one, pc.equal(split, "line")))
    else:
        grid, line = table.filter(one), table.slice(0, 0)
    names = [f.name for f in PROFILE_SCHEMA]
    by_count = {r["tokens"]: r for r in grid.select(names).to_pylist()}
    by_count.update({r["tokens"]: r for r in line.select(names).to_pylist()})
    rows = [by_count[t] for t in sorted(by_count)]
    return pa.Table.from_pylist(rows, schema=PROFILE_SCHEMA) if rows else PROFILE_SCHEMA.empty_table()


def add_line(base: str, donor: str, note: str) -> tuple[pa.Table, dict]:
    """``base``'s grid and held-out rows and metadata plus ``donor``'s one-request prefill rows
    at prefix 0 as a prefill line (``split="line"``), as the donor recorded them."""
    bt, bm, dt, dm = _read_pair(base, donor)
    dl = _line_source(dt)
    if len(dl) < 2:
        raise SpecschedError(f"{'no' if not len(dl) else 'only one'} prefill row of one "
                             f"request (bs 1) at kv_len 0, so no prefill line to add (it needs "
                             f"at least 2)", path=donor)
    bg = _grid(bt)
    ref = bg.filter(pc.and_(pc.equal(bg["kind"], "prefill"),
                            pc.and_(pc.equal(bg["kv_len"], 0), pc.equal(bg["bs"], 1))))
    counts = dl.column("tokens").to_pylist()
    if not set(ref.column("tokens").to_pylist()) & set(counts):
        raise SpecschedError(f"none of its prefill counts at kv_len 0 ({min(counts)} to "
                             f"{max(counts)} tokens) is a grid prefill point of {base} at kv_len 0 "
                             f"and bs 1, so no level to put the line at", path=donor)
    factor = level_factors(ref, dl)[0]  # recorded only: the table levels the line per grid token
    if SPLIT_FIELD in bt.column_names:
        kept = bt.filter(pc.not_equal(bt[SPLIT_FIELD], "line"))
    else:
        kept = bt.append_column(_SPLIT, pa.array(["grid"] * len(bt), pa.string()))
    line = dl.append_column(_SPLIT, pa.array(["line"] * len(dl), pa.string()))
    rows = pa.concat_tables([kept, line.select(kept.column_names).cast(kept.schema)])
    said = {"rows": len(line), "tokens": [min(counts), max(counts)],
            "grid_over_line": round(factor, 6), "why": note}
    if len(bt) - len(kept):
        said["replaced"] = len(bt) - len(kept)
    return rows, _noted(bm, dm, "line_added", said)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("donor")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--kind", help="the kind whose grid rows the donor gives")
    what.add_argument("--add-heldout", action="store_true",
                      help="keep every base row and add the donor's held-out rows")
    what.add_argument("--add-line", action="store_true",
                      help="keep the base's grid and held-out rows and add the donor's one-request "
                           "prefill rows at kv_len 0 as the prefill line (split=line, replacing "
                           "any line the base had), as recorded")
    ap.add_argument("--keep-level", action="store_true",
                    help="with --kind: scale the donor's rows to the base's level per KV line")
    ap.add_argument("--note", required=True, help="why the rows are taken (kept in the notes)")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args(argv)
    try:
        if a.keep_level and not a.kind:
            raise SpecschedError("--keep-level goes with --kind (it scales the rows taken)")
        if Path(a.out).exists():
            raise SpecschedError(f"{a.out} exists; choose a new file", path=a.out)
        if a.add_heldout:
            rows, meta = add_heldout(a.base, a.donor, a.note)
            what = f"{meta['notes'][-1]['heldout_added']['rows']} held-out rows"
        elif a.add_line:
            rows, meta = add_line(a.base, a.donor, a.note)
            said = meta["notes"][-1]["line_added"]
            what = (f"a prefill line of {said['rows']} rows ({said['tokens'][0]} to "
                    f"{said['tokens'][1]} tokens), as recorded (the base's grid / the line: "
                    f"median {said['grid_over_line']:.4f} at the counts both hold)")
        else:
            rows, meta = take_rows(a.base, a.donor, a.kind, a.note, a.keep_level)
            what = f"the {a.kind} grid rows"
            if a.keep_level:
                what += " at the base's level (" + ", ".join(
                    f"KV {k}: x{v:.4f}" for k, v in meta["notes"][-1]["rows_taken"]["level_kept"].items()) + ")"
        write_profile(rows, a.out, meta, inputs=(a.base, a.donor))
    except SpecschedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{a.out}: {len(rows)} rows, {what} from {a.donor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
