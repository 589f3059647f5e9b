"""What a file looks like from its first bytes, so that an input of the wrong kind is refused in
one line that says what it is, instead of a header of binary bytes or thousands of row errors.

``kind_of(path)`` -> ``"parquet"``, ``"lfs-pointer"``, ``"gzip"``, ``"zip"``, ``"utf-16"``,
``"json"`` (JSON or JSON lines), ``"binary"``, ``"text"`` (anything else readable: CSV, among
others) or ``"empty"`` (nothing but white space).
The ``expect_*`` functions raise a :class:`~traces.errors.SpecschedError` naming the file when it
is plainly not the kind the reader needs, and return quietly otherwise (the reader's own checks
then name rows and columns).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from traces.errors import SpecschedError

__all__ = ["kind_of", "expect_parquet", "expect_csv", "expect_jsonl", "json_lines"]

_HEAD = 4096
_LFS = b"version https://git-lfs.github.com/spec/"


def _head(path: str | Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(_HEAD)


def kind_of(path: str | Path) -> str:
    """The kind of file ``path`` looks like (module docstring)."""
    head = _head(path)
    if not head:
        return "empty"
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(_LFS):
        return "lfs-pointer"
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    if b"\x00" in head:
        return "binary"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a character cut at the end of the head
            return "binary"
        text = head[:exc.start].decode("utf-8")
    text = text.lstrip("\ufeff \t\r\n")
    if not text:
        return "empty"  # blank lines only: the reader says what it found
    if text[:1] in ("{", "["):
        return "json"
    return "text"


def _lfs_size(path: str | Path) -> str:
    m = re.search(rb"^size (\d+)", _head(path), re.M)
    return f" (the pointer names a {int(m.group(1)):,}-byte file)" if m else ""


def _refuse(path, message: str) -> SpecschedError:
    return SpecschedError(message, path=str(path))


def _common(path, kind: str, wanted: str) -> None:
    """Refusals every reader shares: Git LFS pointers and compressed files."""
    if kind == "lfs-pointer":
        raise _refuse(path, f"this is a Git LFS pointer, not the data{_lfs_size(path)}: fetch it "
                            "with `git lfs pull` (or download the file itself)")
    if kind in ("gzip", "zip"):
        raise _refuse(path, f"this is a {kind}-compressed file, not {wanted}: decompress it first")
    if kind == "utf-16":
        raise _refuse(path, f"this is UTF-16 text, not {wanted}: save it as UTF-8")


def expect_parquet(path: str | Path, wanted: str = "a parquet trace", hint: str | None = None
                   ) -> None:
    """Refuse a file that is plainly not parquet (CSV, JSON lines, an LFS pointer, ...).
    ``hint`` replaces the advice given for a text or JSON file (by default: how to convert a
    request log into a trace)."""
    kind = kind_of(path)
    _common(path, kind, wanted)
    if kind == "text":
        raise _refuse(path, f"this is a text file (CSV?), not {wanted}: " + (
            hint or "convert a request log with `specsched trace convert --from "
                    "azure|burstgpt|vidur`"))
    if kind == "json":
        raise _refuse(path, f"this is JSON, not {wanted}: " + (
            hint or "convert a Mooncake log with `specsched trace convert --from mooncake`"))


def expect_csv(path: str | Path, fmt: str) -> None:
    """Refuse a file that is plainly not a CSV request log of format ``fmt``."""
    kind = kind_of(path)
    wanted = f"a CSV ({fmt})"
    _common(path, kind, wanted)
    if kind == "parquet":
        raise _refuse(path, "this is a parquet file, not a CSV request log: if it is a specsched "
                            "trace, use it as it is (`simulate --trace` or `trace inspect`)")
    if kind == "json":
        raise _refuse(path, f"this is JSON lines, not {wanted}: for a Mooncake log use "
                            "`--from mooncake`")
    if kind == "binary":
        raise _refuse(path, f"this is a binary file, not {wanted}")


def expect_jsonl(path: str | Path, wanted: str, hint: str = "") -> None:
    """Refuse a file that is plainly not JSON lines (``wanted`` names what was expected,
    ``hint`` is added to the refusal of a CSV-looking file)."""
    kind = kind_of(path)
    _common(path, kind, wanted)
    if kind == "parquet":
        raise _refuse(path, f"this is a parquet file, not {wanted}: if it is a specsched trace, "
                            "use it as it is (`simulate --trace` or `trace inspect`)")
    if kind == "binary":
        raise _refuse(path, f"this is a binary file, not {wanted}")
    if kind == "text":
        raise _refuse(path, f"this looks like CSV or plain text, not {wanted} (its first line "
                            f"does not start with '{{'){hint}")


def json_lines(raw: bytes) -> Iterator[tuple[int, Any, str | None]]:
    """The non-blank lines of a JSON-lines file's bytes, parsed: ``(row, object, None)``, or
    ``(row, None, "not valid JSON (...)")`` for a line that does not parse (rows count from 0,
    blank lines included)."""
    for row, line in enumerate(raw.decode("utf-8", "replace").split("\n")):
        if not line.strip():
            continue
        try:
            yield row, json.loads(line), None
        except ValueError as exc:
            yield row, None, f"not valid JSON ({exc.args[0] if exc.args else exc})"
