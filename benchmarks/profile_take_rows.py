"""Write a profile whose grid rows of some kinds come from another recording of the same grid.

A profile re-measured in part (``benchmarks/journal_remeasure.py``) may re-measure rows that had
no reason to change, on a GPU that times them differently from the others. This writes ``base``
with its grid rows of ``--kind`` replaced by ``donor``'s grid rows of that kind (held-out rows
stay the base's), and adds ``--note`` and the donor's GPU and command to the notes, so the file
says where those rows came from. Both must be profiles of the same model, and the donor must
hold every grid point of that kind the base has.

    python3 benchmarks/profile_take_rows.py BASE.parquet DONOR.parquet --kind prefill \\
        --note "why" -o OUT.parquet

With ``--add-heldout`` instead of ``--kind`` it keeps every base row and adds the donor's
held-out rows (a grid grown and given new held-out shapes keeps the shapes measured before it
grew), leaving out any that the base holds or whose shape is now a point of the base's grid.

Refuses to write over ``base``, ``donor`` or an existing file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.profile import SPLIT_FIELD as _SPLIT, read_profile, write_profile  # noqa: E402
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
    """``bm`` (less its version) with a note ``{what: note}`` naming the donor's GPU and command."""
    meta = {k: v for k, v in bm.items() if k != "profile_version"}
    meta["notes"] = list(bm.get("notes") or []) + [
        {what: {**note, "from_gpu": dm.get("gpu"), "from_command": dm.get("command")}}]
    return meta


def take_rows(base: str, donor: str, kind: str, note: str) -> tuple[pa.Table, dict]:
    """``base``'s rows and metadata with its ``kind`` grid rows taken from ``donor``."""
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
    kept = bt.filter(pc.invert(is_kind))
    taken = dk.select([c for c in kept.column_names if c != SPLIT_FIELD])
    if SPLIT_FIELD in kept.column_names:
        taken = taken.append_column(SPLIT_FIELD, pa.array(["grid"] * len(taken)))
    rows = pa.concat_tables([kept, taken.cast(kept.schema)])
    return rows, _noted(bm, dm, "rows_taken", {"kind": kind, "rows": len(taken), "why": note})


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("donor")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--kind", help="the kind whose grid rows the donor gives")
    what.add_argument("--add-heldout", action="store_true",
                      help="keep every base row and add the donor's held-out rows")
    ap.add_argument("--note", required=True, help="why the rows are taken (kept in the notes)")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args(argv)
    try:
        if Path(a.out).exists():
            raise SpecschedError(f"{a.out} exists; choose a new file", path=a.out)
        if a.add_heldout:
            rows, meta = add_heldout(a.base, a.donor, a.note)
            what = f"{meta['notes'][-1]['heldout_added']['rows']} held-out rows"
        else:
            rows, meta = take_rows(a.base, a.donor, a.kind, a.note)
            what = f"the {a.kind} grid rows"
        write_profile(rows, a.out, meta, inputs=(a.base, a.donor))
    except SpecschedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{a.out}: {len(rows)} rows, {what} from {a.donor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
