"""Copy a profile sweep's journal without the rows to measure again, so the next sitting does.

A profile journal (``specsched profile --journal``) keeps every grid row it measured, and a sweep
resumed from it measures only the rows it lacks. When the way a row is timed changes (on
2026-12-03: every graph now replays after SGLang's last start-up capture,
``Runner.capture_for_timing``), the rows timed the old way must be measured again. This writes a
copy of the journal without them: the header as it was, every kept row, and each sitting's line
with its ``first_call`` counted again over the kept rows, so the sittings that measured the kept
rows are still named right (``backends.journal.sittings_used``). Run the sweep with the copy as
its journal; it measures what was dropped in a new sitting of its own.

    python3 benchmarks/journal_remeasure.py journals/journal_profile-v2lite.jsonl OUT.jsonl \\
        --graph-bs-from 22 --eager

drops graph rows (verify, draft, draft-extend) of 22 requests or more and every eager row
(prefill included). It
prints what it dropped by kind. Refuses to write over an existing file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def drop_rows(lines: list[dict], drop) -> tuple[list[dict], Counter]:
    """The journal ``lines`` (header first) without the rows ``drop(row)`` accepts, sittings'
    ``first_call`` counted over the kept rows; and the dropped rows' count by (kind, graph)."""
    out = [lines[0]]
    kept = 0
    dropped: Counter = Counter()
    for line in lines[1:]:
        if "segment" in line:
            out.append({**line, "first_call": kept})
        elif drop(line["row"]):
            dropped[(line["row"]["kind"], bool(line["row"]["graph"]))] += 1
        else:
            out.append(line)
            kept += 1
    return out, dropped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("journal", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--graph-bs-from", type=int, default=None,
                    help="drop graph rows of this many requests or more")
    ap.add_argument("--eager", action="store_true", help="drop every eager row (prefill included)")
    a = ap.parse_args(argv)
    if a.out.exists():
        print(f"error: {a.out} exists; choose a new file", file=sys.stderr)
        return 2
    lines = [json.loads(s) for s in a.journal.read_text().splitlines() if s.strip()]
    if not lines or "specsched_profile_journal" not in lines[0]:
        print(f"error: {a.journal}: not a profile journal (its first line has no "
              f"specsched_profile_journal)", file=sys.stderr)
        return 2

    def drop(row: dict) -> bool:
        if row["graph"]:
            return a.graph_bs_from is not None and int(row["bs"]) >= a.graph_bs_from
        return a.eager

    out, dropped = drop_rows(lines, drop)
    a.out.write_text("".join(json.dumps(x) + "\n" for x in out))
    rows = sum(1 for x in out[1:] if "row" in x)
    print(f"{a.out}: kept {rows} rows, dropped {sum(dropped.values())}: " +
          ", ".join(f"{k} {'graph' if g else 'eager'} {n}" for (k, g), n in sorted(dropped.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
