"""User-facing errors.

Every error a user can cause (a bad file, a bad option, a bad configuration) is raised as a
:class:`SpecschedError`.  The command line turns it into one clear message on stderr and exit
code 2, with no traceback.  Anything else that escapes is a bug and keeps its traceback.

This module lives in ``traces`` because ``traces`` is the bottom layer: every other package may
import it, and it imports nothing of the project.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem", "SpecschedError", "TraceValidationError"]


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


class TraceValidationError(SpecschedError):
    """A trace file was refused: carries every problem found (up to a cap), each with row and column."""

    def __init__(self, path: str, problems: list[Problem], *, total: int | None = None,
                 shown: int = 20) -> None:
        self.path = str(path)
        self.problems = list(problems)
        self.total = len(self.problems) if total is None else total
        lines = [f"{self.path}: refused, {self.total} problem{'s' if self.total != 1 else ''}:"]
        for p in self.problems[:shown]:
            where = p.where()
            lines.append(f"  {where}: {p.message}" if where else f"  {p.message}")
        if self.total > shown:
            lines.append(f"  ... and {self.total - shown} more")
        self.message = "\n".join(lines)
        self.problem = self.problems[0] if self.problems else Problem("refused")
        Exception.__init__(self, self.message)
