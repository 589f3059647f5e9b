"""The profiles that ship in ``backends/profiles/``, and whether each has passed a fidelity check.

A shipped profile is ``<model>__<gpu>.parquet`` in :data:`PROFILES_DIR`.  Its status is read
from ``backends/profiles/validation.json`` (:data:`VALIDATION_FILE`, shipped with the profiles),
one entry per file:

- ``validated``: a ``specsched fidelity`` report comparing this very file (its sha256) with a
  live run recorded on another occasion met every check (:data:`RULE`); the entry's
  ``evidence`` names the report, its date, trace, requests and checks met.
- ``experimental``: no such report; ``reason`` says why (no live run compared yet, or the
  report that failed and which checks it missed).

:func:`profile_status` gives the status of any profile file (matched to a shipped one by its
content, so a copy of a shipped file carries that file's status; anything else is ``not
shipped``, which the user's own fidelity runs vouch for).  The profile executor records it in
every summary and warns when it is experimental (:func:`status_warning`); ``--help`` lists it
(:func:`shipped_help`).
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from traces.errors import SpecschedError

__all__ = ["PROFILES_DIR", "VALIDATION_FILE", "STATUSES", "RULE", "shipped_profiles",
           "default_profile", "validation_record", "profile_status", "status_warning",
           "shipped_help", "file_sha256"]

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
VALIDATION_FILE = PROFILES_DIR / "validation.json"
STATUSES = ("validated", "experimental")
#: what makes a shipped profile validated (the record states it too; a test holds them equal)
RULE = ("a shipped profile is validated when a `specsched fidelity` report comparing it with a "
        "live run recorded on another occasion (another machine, or the same one on another day) "
        "meets every check; otherwise it is experimental")


def shipped_profiles(directory: "str | Path | None" = None) -> list[tuple[str, str, Path]]:
    """(model, gpu, path) of every profile shipped in ``backends/profiles/``."""
    d = Path(directory) if directory is not None else PROFILES_DIR
    out = []
    for p in sorted(d.glob("*__*.parquet")):
        model, _, gpu = p.stem.rpartition("__")
        out.append((model, gpu, p))
    return out


def default_profile(model_name: Any, gpu: Any = "H200", *,
                    directory: "str | Path | None" = None) -> Path:
    """The shipped profile ``<model>__<gpu>.parquet`` for a model name (or ModelShape) and GPU."""
    name = getattr(model_name, "name", model_name)
    gpu_name = getattr(gpu, "name", gpu)
    for model, g, path in shipped_profiles(directory):
        if model.lower() == str(name).lower() and g.lower() == str(gpu_name).lower():
            return path
    have = ", ".join(f"{m} on {g}" for m, g, _ in shipped_profiles(directory)) or "none"
    raise SpecschedError(f"no profile shipped for {name} on {gpu_name} (shipped: {have}); record "
                         "one with `specsched profile` and pass it with --profile, or use the "
                         "roofline backend")


def validation_record(path: "str | Path | None" = None) -> dict[str, dict]:
    """The record's entries by profile file name, checked (a SpecschedError names the entry)."""
    p = Path(path) if path is not None else VALIDATION_FILE
    try:
        stamp = p.stat().st_mtime_ns
    except OSError:
        stamp = None
    return _record(str(p), stamp)


@lru_cache(maxsize=4)
def _record(where: str, _stamp: int | None) -> dict[str, dict]:
    try:
        data = json.loads(Path(where).read_text())
    except FileNotFoundError:
        raise SpecschedError("the validation record of the shipped profiles is missing",
                             path=where) from None
    except json.JSONDecodeError as exc:
        raise SpecschedError(f"not JSON: {exc}", path=where) from None
    profiles = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(profiles, dict):
        raise SpecschedError("needs a 'profiles' object (file name -> entry)", path=where)
    for name, entry in profiles.items():
        status = entry.get("status") if isinstance(entry, dict) else None
        if status not in STATUSES:
            raise SpecschedError(f"{name}: status {status!r} is not one of {', '.join(STATUSES)}",
                                 path=where)
        if status == "validated" and not isinstance(entry.get("evidence"), dict):
            raise SpecschedError(f"{name}: a validated profile needs its 'evidence'", path=where)
        if status == "experimental" and not entry.get("reason"):
            raise SpecschedError(f"{name}: an experimental profile needs its 'reason'", path=where)
    return profiles


def file_sha256(path: "str | Path") -> str:
    """The sha256 of a file's bytes, in hex (read a megabyte at a time): how a profile, a
    report's profile and a calibration's base are known by their content."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _shipped_by_sha(directory: Path) -> dict[str, str]:
    files = tuple((str(p), p.stat().st_mtime_ns) for _, _, p in shipped_profiles(directory))
    return _hashes(files)


@lru_cache(maxsize=16)
def _hashes(files: tuple[tuple[str, int], ...]) -> dict[str, str]:
    return {file_sha256(p): Path(p).name for p, _ in files}


def profile_status(path: "str | Path", sha256: str | None = None, *,
                   directory: "str | Path | None" = None) -> dict[str, Any]:
    """The validation status of a profile file: ``{"status", "file", ...}``.

    ``status`` is ``validated`` or ``experimental`` for a shipped profile (``file`` its name in
    ``backends/profiles/``; ``reason`` or ``evidence`` from the record) and ``not shipped`` for
    any other file.  A shipped file the record does not list, or a validated one whose content
    is not the file its report compared (re-recorded since), is experimental, saying so.
    """
    d = Path(directory) if directory is not None else PROFILES_DIR
    sha = sha256 or file_sha256(path)
    name = _shipped_by_sha(d).get(sha)
    if name is None:
        return {"status": "not shipped", "file": str(path),
                "note": "only shipped profiles carry a status; check your own with "
                        "`specsched fidelity --profile FILE`"}
    entry = validation_record(d / VALIDATION_FILE.name).get(name)
    if entry is None:
        return {"status": "experimental", "file": name,
                "reason": "not in the validation record of the shipped profiles"}
    out = {"file": name, **entry}
    evidence = entry.get("evidence") or {}
    if entry["status"] == "validated" and evidence.get("profile_sha256") != sha:
        out["status"] = "experimental"
        out["reason"] = (f"this file is not the one its report compared ({evidence.get('report')} "
                         "checked another recording): compare it again with `specsched fidelity`")
    return out


def status_warning(status: dict[str, Any]) -> str | None:
    """The warning a summary carries for a profile of this status (None unless experimental)."""
    if status.get("status") != "experimental":
        return None
    return f"experimental profile {status.get('file')}: {status.get('reason')}"


def shipped_help(directory: "str | Path | None" = None) -> str:
    """``shipped profiles: llama-3.1-8b (H200), llama-3.1-70b (H200, experimental), ...``."""
    d = Path(directory) if directory is not None else PROFILES_DIR
    try:
        record = validation_record(d / VALIDATION_FILE.name)
    except SpecschedError:
        record = {}
    items = []
    for model, gpu, p in shipped_profiles(d):
        status = (record.get(p.name) or {}).get("status", "experimental")
        items.append(f"{model} ({gpu}{', experimental' if status != 'validated' else ''})")
    return "shipped profiles: " + (", ".join(items) if items else "none")
