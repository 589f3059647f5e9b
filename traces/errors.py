"""User-facing errors.

Every error a user can cause (a bad file, a bad option, a bad configuration) is raised as a
:class:`SpecschedError`.  The command line turns it into one clear message on stderr and exit
code 2, with no traceback.  Anything else that escapes is a bug and keeps its traceback.

This module lives in ``traces`` because ``traces`` is the bottom layer: every other package may
import it, and it imports nothing of the project.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem", "ProblemLog", "SpecschedError", "TraceValidationError"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem found in an input file: where it is and what is wrong.

    ``row`` is the 0-based row index in the file (``None`` for file-level problems);
    ``column`` is the column name (``None`` when the problem is not tied to one column).
    """

    message: str
    row: int | None = None
    column: str | None = None

    def where(self) -> str:
        parts = []
        if self.row is not None:
            parts.append(f"row {self.row}")
        if self.column is not None:
            parts.append(f"column '{self.column}'")
        return ", ".join(parts)


class SpecschedError(Exception):
    """An error caused by the user's input; the CLI exits with code 2 and prints ``str(err)``.

    ``path`` names the file the problem is in, when there is one.
    """

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, row: int | None = None,
                 column: str | None = None) -> None:
        self.message = message
        self.path = None if path is None else str(path)
        self.problem = Problem(message, row, column)
        super().__init__(self._format())

    def _format(self) -> str:
        where = self.problem.where()
        prefix = ": ".join(p for p in (self.path, where) if p)
        return f"{prefix}: {self.message}" if prefix else self.message


#: per-row problems listed per column before "... and N more"
SHOWN_PER_COLUMN = 5


class TraceValidationError(SpecschedError):
    """A file was refused: carries the problems found (the first ones of each column kept),
    each with row and column, and how many there were in all.

    The message lists, per column (in order of the first problem's row), the first ``shown``
    problems and then ``... and N more in column 'C'``; ``counts`` (problems per column, when
    the caller counted more than it kept) makes N exact.
    """

    def __init__(self, path: str, problems: list[Problem], *, total: int | None = None,
                 shown: int = SHOWN_PER_COLUMN, counts: dict[str | None, int] | None = None) -> None:
        self.path = str(path)
        self.problems = list(problems)
        self.total = len(self.problems) if total is None else total
        groups: dict[str | None, list[Problem]] = {}
        for p in self.problems:
            groups.setdefault(p.column, []).append(p)
        counts = dict(counts) if counts else {c: len(g) for c, g in groups.items()}
        lines = [f"{self.path}: refused, {self.total:,} problem{'s' if self.total != 1 else ''}:"]
        listed = 0
        for column, items in groups.items():
            for p in items[:shown]:
                where = p.where()
                lines.append(f"  {where}: {p.message}" if where else f"  {p.message}")
            n = max(counts.get(column, len(items)), len(items))
            listed += n
            if n > shown:
                place = f" in column '{column}'" if column is not None else " like these"
                lines.append(f"  ... and {n - shown:,} more{place}")
        if self.total > listed:
            lines.append(f"  ... and {self.total - listed:,} more")
        self.message = "\n".join(lines)
        self.problem = self.problems[0] if self.problems else Problem("refused")
        Exception.__init__(self, self.message)


class ProblemLog:
    """Problems found in one file: every one counted per column, the first few of each kept.

    ``add`` one problem, ``add_rows`` one per row of a vectorised check; ``raise_if_any`` raises
    the :class:`TraceValidationError` listing them (sorted by row).
    """

    def __init__(self, path: str, *, keep: int = 200, keep_per_column: int = SHOWN_PER_COLUMN):
        self.path = str(path)
        self.keep = keep
        self.keep_per_column = keep_per_column
        self.items: list[Problem] = []
        self.counts: dict[str | None, int] = {}
        self.total = 0

    def add(self, message: str, row: int | None = None, column: str | None = None) -> None:
        n = self.counts.get(column, 0)
        self.counts[column] = n + 1
        self.total += 1
        if len(self.items) < self.keep or n < self.keep_per_column:
            self.items.append(Problem(message, row, column))

    def add_rows(self, rows, column: str | None, message) -> None:
        """One problem per row in ``rows`` (ints); ``message(row)`` builds its text, and is
        called only for the rows kept."""
        rows = [int(r) for r in rows]
        n = self.counts.get(column, 0)
        room = max(self.keep - len(self.items), self.keep_per_column - n, 0)
        self.items.extend(Problem(message(r), r, column) for r in rows[:room])
        self.counts[column] = n + len(rows)
        self.total += len(rows)

    def raise_if_any(self) -> None:
        if self.total:
            items = sorted(self.items, key=lambda p: (-1 if p.row is None else p.row,
                                                      p.column or ""))
            raise TraceValidationError(self.path, items, total=self.total, counts=self.counts)
