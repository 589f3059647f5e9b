"""Integer lists written as text, one grammar for every option and configuration key.

``2,4,8``, ``[2,4,8]``, ranges ``1-8`` (both ends included), repeats ``4x32`` (32 times 4), and
mixes of them (``1-4,8``); spaces are ignored.  ``--set engine.capture_widths=1-8``,
``verify-metadata --widths 4x3,2`` and TOML strings all read through :func:`parse_int_list`.
"""

from __future__ import annotations

from typing import Any

from traces.errors import SpecschedError

__all__ = ["parse_int_list"]


def parse_int_list(value: Any, *, what: str, minimum: int | None = None,
                   allow_empty: bool = False) -> list[int]:
    """``value`` (a string in the forms above, or a list of integers or such strings) as a list
    of integers; ``what`` names the option or key in the error message."""
    if isinstance(value, (list, tuple)):
        items = list(value)
    else:
        text = str(value).strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        text = text.replace(" ", "")
        items = text.split(",") if text else []
    if not items and not allow_empty:
        raise SpecschedError(f"{what}: no values (expected integers separated by commas)")
    out: list[int] = []
    for i, item in enumerate(items):
        values = _item(item, i, what)
        for v in values:
            if minimum is not None and v < minimum:
                raise SpecschedError(f"{what}: item {i} is {v}; values must be >= {minimum}")
        out.extend(values)
    return out


def _item(item: Any, i: int, what: str) -> list[int]:
    if isinstance(item, bool):
        raise SpecschedError(f"{what}: item {i} is {item!r}, not an integer")
    if isinstance(item, int):
        return [item]
    if isinstance(item, float) and item.is_integer():
        return [int(item)]
    text = str(item).strip()
    if not text:
        raise SpecschedError(f"{what}: item {i} is empty (expected integers separated by commas)")
    try:
        if "x" in text:
            value, count = text.split("x", 1)
            n = int(count)
            if n < 1:
                raise ValueError
            return [int(value)] * n
        if "-" in text[1:]:  # a leading minus is a negative number, not a range
            cut = text.index("-", 1)
            lo, hi = int(text[:cut]), int(text[cut + 1:])
            if hi < lo:
                raise ValueError
            return list(range(lo, hi + 1))
        return [int(text)]
    except ValueError:
        raise SpecschedError(f"{what}: item {i} is {text!r}, not an integer, a range LO-HI or a "
                             "repeat VALUExCOUNT") from None
