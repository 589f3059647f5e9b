"""Bring one GPU call's files into a results folder and score every live run it brought (CPU).

After a device call of ``benchmarks/gpu_live_session.sh`` its files lie in one folder (the
``run`` tool's ``files_at``): the job log ``gpuG.log``, ``smi_gpuG.csv`` with ``SMI=1``, one
``live_NAME.tar.gz`` per finished live run, journals (``KEEP_JOURNAL=1`` keeps those of
finished runs too), profiles and calibrated profiles, JSON of the benchmarks. This copies them,
but the journals of runs that finished, into ``DEST`` (a folder under
``benchmarks/results/``, made if missing; earlier calls of the day may already be there), the
log and the clock samples as ``callN_gpuG.log`` / ``callN_smi_gpuG.csv`` with ``--call N``,
unpacks each live run as ``DEST/live_NAME/`` (removing the journal an earlier call left there
of a run this call finished from it), and then, for each live run it unpacked:

- ``specsched fidelity --reference-run DEST/live_NAME`` against the shipped profile of the run's
  model, written as ``DEST/fidelity_NAME.md`` and ``.json``, with ``--repeat-run`` each earlier
  live run under ``benchmarks/results/`` of the same trace, requests, model and configuration
  (:func:`find_repeats`; ``--no-repeats`` leaves them out), so the report shows how far two
  recordings differ;
- the same with ``--profile`` each calibrated profile in ``DEST`` (this call's or an earlier
  one's) of that model calibrated on a GPU the run used, as
  ``DEST/fidelity_NAME_calibrated[_TAG].md`` (``TAG``: what follows ``calibrated`` in the
  profile's name).

With ``--score-folder`` the live runs earlier calls left in ``DEST`` are scored the same way, but
for the reports they already have: a calibration that a later call brought (a ``calibrate
--trace`` after the runs it is judged on) then meets the runs recorded before it.

With ``--residual-refit`` each calibrated profile this call brought is first re-fitted from its
own anchors with ``--residual tokens``, ``prefill`` and ``verify-prefill``
(``backends.calibrate_refit``, no GPU) to ``..._residual.parquet``,
``..._residual_prefill.parquet`` and ``..._residual_verify_prefill.parquet`` beside it, so every new
calibration also judges the opt-in forms on the same anchors; the re-fits are scored like any
calibration.

It prints a table of those reports (checks met, per-step MAPE, the missed checks) for the
folder's README. Nothing is written over: a file or folder that would be is named and the script
exits 2 before it copies anything. Reports are written with paths relative to the repository,
as ``regenerate_reports.py`` re-runs them.

    python benchmarks/ingest_call.py FILES_AT benchmarks/results/h200-2026-12-06 --call 1
    python benchmarks/ingest_call.py FILES_AT benchmarks/results/h200-2026-12-06 --no-score
    python benchmarks/ingest_call.py FILES_AT benchmarks/results/h200-2026-12-06 --call 3 \
        --score-folder
    python benchmarks/ingest_call.py FILES_AT benchmarks/results/h100-2026-12-08 --call 1 \
        --residual-refit
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from traces.errors import SpecschedError  # noqa: E402

#: a job log and its clock samples, renamed with ``--call``
_LOG = re.compile(r"^(gpu\d+\.log|smi_gpu\d+\.csv)$")
_LIVE = re.compile(r"^live_([A-Za-z0-9_.-]+)\.tar\.gz$")
_JOURNAL = re.compile(r"^journal_([A-Za-z0-9_.-]+)\.jsonl$")
#: a calibrated profile's file name, ``MODEL__GPU.calibrated[_TAG].parquet``: its report suffix
_CALIBRATED = re.compile(r"__[^.]+\.(calibrated[^.]*)\.parquet$")


def finished_journals(src: Path) -> list[Path]:
    """The journals in ``src`` of live runs that finished there (``journal_NAME.jsonl`` beside
    ``live_NAME.tar.gz``): a finished run needs no journal to go on from, so they are not
    kept. A cut run's journal has no tarball beside it and is copied."""
    done = {m.group(1) for f in src.iterdir() if (m := _LIVE.match(f.name))}
    return sorted(f for f in src.iterdir() if f.is_file()
                  and (m := _JOURNAL.match(f.name)) and m.group(1) in done)


def superseded_journals(dest: Path, finished: list[str]) -> list[Path]:
    """The journals in ``dest`` of the runs in ``finished`` (``journal_NAME.jsonl``): an earlier
    call copied them in when its run was cut, and the run this call finished from them replaces
    them (its summary.json lists each sitting), as :func:`finished_journals` does within a call."""
    return [dest / f"journal_{n}.jsonl" for n in finished
            if (dest / f"journal_{n}.jsonl").is_file()]


def plan_copies(src: Path, dest: Path, call: int | None) -> list[tuple[Path, Path]]:
    """(source file, destination) for every plain file of ``src`` but the live runs' tarballs
    and the journals of runs that finished (:func:`finished_journals`); with ``call``, the job
    log and clock samples get the prefix ``call{call}_``."""
    out = []
    skip = set(finished_journals(src))
    for f in sorted(src.iterdir()):
        if not f.is_file() or _LIVE.match(f.name) or f in skip:
            continue
        name = f"call{call}_{f.name}" if call is not None and _LOG.match(f.name) else f.name
        out.append((f, dest / name))
    return out


def live_members(tar: Path, name: str) -> list[tarfile.TarInfo]:
    """The members of a live run's tarball, all regular files or folders under ``live_NAME/``
    (anything else, or a path that leaves that folder, is refused)."""
    top = f"live_{name}"
    with tarfile.open(tar, "r:gz") as t:
        members = t.getmembers()
    for m in members:
        parts = Path(m.name).parts
        if Path(m.name).is_absolute() or ".." in parts or not parts or parts[0] != top \
                or not (m.isfile() or m.isdir()):
            raise SpecschedError(f"member {m.name!r} is not a file under {top}/", path=str(tar))
    return members


def unpack(tar: Path, name: str, dest: Path) -> Path:
    """Unpack ``live_NAME.tar.gz`` into ``dest`` (through a temporary folder beside it, so a
    broken archive leaves nothing); return the run's folder."""
    members = live_members(tar, name)
    with tempfile.TemporaryDirectory(dir=dest) as tmp, tarfile.open(tar, "r:gz") as t:
        for m in members:
            if m.isdir():
                (Path(tmp) / m.name).mkdir(parents=True, exist_ok=True)
                continue
            out = Path(tmp) / m.name
            out.parent.mkdir(parents=True, exist_ok=True)
            with t.extractfile(m) as fh, open(out, "wb") as w:
                shutil.copyfileobj(fh, w)
        run = dest / f"live_{name}"
        os.replace(Path(tmp) / f"live_{name}", run)
    if not (run / "summary.json").is_file():
        raise SpecschedError("the unpacked run has no summary.json", path=str(run))
    return run


def calibrations(dest: Path, model: str, run_summary: dict) -> list[tuple[Path, str]]:
    """The calibrated profiles in ``dest`` of ``model`` calibrated on a GPU the run used, with
    their report suffix (``calibrated`` and what follows it in the file's name). ``dest`` may be
    another folder than the one the reports go to (``--calibrations-from``)."""
    from analysis.fidelity.report import recording_machines
    from backends.profile import read_profile

    out = []
    for f in sorted(dest.glob(f"{model}__*.parquet")):
        _, meta = read_profile(f)
        cal = meta.get("calibration")
        if not isinstance(cal, dict) or (meta.get("model") or {}).get("name") != model:
            continue
        if not recording_machines({"calibration": cal}, run_summary)["shared_gpus"]:
            continue
        out.append((f, report_tag(f.name)))
    return out


def report_tag(name: str) -> str:
    """The report suffix of a calibrated profile's file name,
    ``MODEL__GPU.calibrated[_TAG].parquet``: ``calibrated[_TAG]``. A model name may hold dots
    itself, as ``llama-3.1-8b`` does: until 2026-12-06 this took what followed its first dot,
    so the reports of the Llama calibrations under ``benchmarks/results/h100-2026-12-05`` to
    ``-06b`` are named ``..._1-8b__H200.calibrated``."""
    m = _CALIBRATED.search(name)
    return m.group(1) if m else "calibrated"


#: ``--residual-refit``: each opt-in form and the suffix of the re-fit it writes
REFIT_FORMS = (("tokens", "_residual"), ("prefill", "_residual_prefill"),
               ("verify-prefill", "_residual_verify_prefill"))


def residual_refits(files: list[Path]) -> list[tuple[Path, str]]:
    """Re-fit each calibrated profile among ``files`` (a call's copies) from its own anchors
    with each opt-in ``--residual`` form (``backends.calibrate_refit.refit_calibration``) to
    ``STEM`` + its suffix in :data:`REFIT_FORMS` (``STEM_residual.parquet`` for ``tokens``)
    beside it. Skipped, with the reason: a file that is already of such a form or re-centred,
    a twin that exists, and a file whose base is not the shipped file of today (its sha256
    differs). Returns (path, what was done) per calibrated profile and form."""
    from backends.calibrate_refit import refit_calibration
    from backends.models import load_model
    from backends.profile import read_profile
    from backends.shipped import PROFILES_DIR, file_sha256

    out = []
    for f in sorted(files):
        if not _CALIBRATED.search(f.name):
            continue
        _, meta = read_profile(f)
        cal = meta.get("calibration")
        if not isinstance(cal, dict) or not cal.get("anchors"):
            continue
        base = PROFILES_DIR / str(cal.get("base"))
        if cal.get("residual") or cal.get("recentred"):
            out.append((f, "kept: already a --residual or --from-run profile"))
            continue
        if not base.is_file() or file_sha256(base) != cal.get("base_sha256"):
            out.append((f, f"kept: its base {cal.get('base')} is not today's shipped file"))
            continue
        model = load_model(meta["model"]["name"], tp=meta["model"].get("tp"))
        for form, suffix in REFIT_FORMS:
            twin = f.with_name(f.stem + suffix + ".parquet")
            if twin.exists():
                out.append((f, f"kept: {twin.name} exists"))
                continue
            refit_calibration(model, str(f), str(base), str(twin), residual=form)
            out.append((f, f"re-fitted with --residual {form} to {twin.name}"))
    return out


@lru_cache(maxsize=None)
def _run_key(folder: Path) -> tuple | None:
    """What two recordings of one run share (:func:`find_repeats`): trace file name, requests,
    and the recorded configuration with the live executor's settings; None for a run that is
    not a live one or that this version cannot re-simulate. Read once per folder a process."""
    from analysis.fidelity.runs import RECORDING_ONLY, _norm, recorded_config

    summary = json.loads((folder / "summary.json").read_text())
    if summary.get("backend") != "aiter" or not isinstance(summary.get("config"), dict):
        return None
    try:
        cfg, _ = recorded_config(summary, folder)
    except SpecschedError:
        return None
    cfg = {k: _norm(v) for k, v in cfg.items() if k not in RECORDING_ONLY}
    # the live executor's own settings: runs before `capture` was recorded captured their
    # graphs lazily, which changed how fast graphs replay (docs/aiter.md, Timing)
    be = summary["config"].get("backend") or {}
    cfg.update({f"backend.{k}": be.get(k, d) for k, d in (("name", None), ("gpu", None),
                                                           ("capture", "lazy"))})
    # the GPU model that ran it (backend.gpu is only the sheet): an H100 run of an H200 sheet is
    # another machine class, not a repeat
    dev = (summary.get("backend_detail") or {}).get("gpu")
    cfg["device"] = dev.get("name") if isinstance(dev, dict) else None
    trace = Path(str((summary.get("trace") or {}).get("path", ""))).name
    return trace, summary.get("requests"), json.dumps(cfg, sort_keys=True, default=str)


def find_repeats(run: Path, roots: list[Path]) -> list[Path]:
    """The recorded live runs (``live_*`` folders under each of ``roots``' subfolders) other
    than ``run`` that replayed the same trace file, requests and model under the same
    configuration (``analysis.fidelity.runs.recorded_config``, recording-only keys aside), the
    same live-executor settings (GPU sheet, graph capture; a run that recorded none captured
    lazily) and the same GPU model (``backend_detail.gpu.name``): the runs ``fidelity
    --repeat-run`` accepts beside it, recorded alike.
    Runs this version cannot re-simulate, and copies of ``run`` (the same ``steps.parquet``),
    are skipped."""
    from backends.shipped import file_sha256

    want = _run_key(run.resolve())
    if want is None:
        return []
    own = None
    out = []
    for root in roots:
        for c in sorted(root.glob("*/live_*")):
            if c.resolve() == run.resolve() or not (c / "summary.json").is_file():
                continue
            if _run_key(c.resolve()) != want:
                continue
            own = file_sha256(run / "steps.parquet") if own is None else own
            if file_sha256(c / "steps.parquet") != own:
                out.append(c)  # another recording, not a copy of this one
    return out


def score(run: Path, dest: Path, name: str, profile: Path | None, suffix: str,
          repeats: list[Path] = ()) -> dict:
    """``specsched fidelity --reference-run RUN [--profile P] [--repeat-run R ...]``, written as
    ``dest/fidelity_NAME[_SUFFIX].md`` and ``.json``; returns the report."""
    from benchmarks.regenerate_reports import fidelity_report

    stem = f"fidelity_{name}" + (f"_{suffix}" if suffix else "")
    args = ["--reference-run", _rel(run)]
    if profile is not None:
        args += ["--profile", _rel(profile)]
    for r in repeats:
        args += ["--repeat-run", _rel(r)]
    js, md = fidelity_report(args)
    (dest / f"{stem}.md").write_text(md)
    (dest / f"{stem}.json").write_text(js)
    return json.loads(js)


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def _row(path: Path, rep: dict) -> str:
    missed = sorted(k for k, c in rep["checks"].items() if not c["pass"])
    met = len(rep["checks"]) - len(missed)
    mape = (rep.get("steps") or {}).get("mape_all_pct")
    return (f"| `{path.name}` | {met} of {len(rep['checks'])} | "
            f"{'-' if mape is None else f'{mape:.2f}%'} | {', '.join(missed) or '-'} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files_at", type=Path, help="the call's files (the run tool's files_at)")
    ap.add_argument("dest", type=Path, help="results folder, e.g. benchmarks/results/h200-DATE")
    ap.add_argument("--call", type=int, default=None, help="prefix the log and clock samples "
                    "with callN_")
    ap.add_argument("--no-score", action="store_true", help="copy and unpack only")
    ap.add_argument("--no-repeats", action="store_true",
                    help="score without the earlier recordings of the same run")
    ap.add_argument("--calibrations-from", type=Path, default=None, metavar="DIR",
                    help="take the calibrated profiles from DIR instead of DEST (a folder of "
                    "repeats scored against the calibrations made beside the first recordings)")
    ap.add_argument("--score-folder", action="store_true",
                    help="also score the live runs already in DEST (reports that exist are "
                    "kept): a calibration a later call brought is scored against the runs of "
                    "the calls before it")
    ap.add_argument("--residual-refit", action="store_true",
                    help="first re-fit each calibrated profile this call brought from its own "
                    "anchors with each opt-in --residual form ("
                    + ", ".join(f"{form}: STEM{suffix}.parquet" for form, suffix in REFIT_FORMS)
                    + ", beside it in DEST, no GPU), so the runs are scored against every form")
    a = ap.parse_args(argv)
    os.chdir(ROOT)  # reports record paths relative to the repository
    try:
        if not a.files_at.is_dir():
            raise SpecschedError("is not a folder", path=str(a.files_at))
        dest = a.dest.resolve()
        cal_dir = dest if a.calibrations_from is None else a.calibrations_from.resolve()
        if a.calibrations_from is not None and not cal_dir.is_dir():
            raise SpecschedError("is not a folder", path=str(a.calibrations_from))
        copies = plan_copies(a.files_at, dest, a.call)
        lives = [(f, _LIVE.match(f.name).group(1)) for f in sorted(a.files_at.iterdir())
                 if f.is_file() and _LIVE.match(f.name)]
        for f, name in lives:
            live_members(f, name)  # a bad archive is refused before anything is written
        clash = [d for _, d in copies if d.exists()]
        clash += [dest / f"live_{n}" for _, n in lives if (dest / f"live_{n}").exists()]
        if clash:
            raise SpecschedError("would be written over: " + ", ".join(_rel(c) for c in clash)
                                 + "; nothing copied")
        dest.mkdir(parents=True, exist_ok=True)
        for s, d in copies:
            shutil.copy2(s, d)
        runs = [(unpack(f, name, dest), name) for f, name in lives]
        print(f"copied {len(copies)} files and {len(runs)} live runs into {_rel(dest)}")
        left = finished_journals(a.files_at)
        if left:
            print("left out the journals of finished runs: "
                  + ", ".join(f.name for f in left))
        done = superseded_journals(dest, [n for _, n in runs])
        for j in done:
            j.unlink()
        if done:
            print("removed the journals an earlier call left of the runs this call finished: "
                  + ", ".join(j.name for j in done))
        if a.residual_refit:
            for f, what in residual_refits([d for _, d in copies]):
                print(f"{f.name}: {what}")
        if a.score_folder:
            mine = {run.name for run, _ in runs}
            runs += [(d, d.name[len("live_"):]) for d in sorted(dest.glob("live_*"))
                     if d.is_dir() and d.name not in mine and (d / "summary.json").is_file()]
        if a.no_score or not runs:
            return 0
        print("\n| report | checks | per-step MAPE | missed | repeat runs |\n|---|---|---|---|---|")
        roots = sorted({ROOT / "benchmarks" / "results", dest.parent})
        for run, name in runs:
            summary = json.loads((run / "summary.json").read_text())
            model = summary["backend_detail"]["model"]
            repeats = [] if a.no_repeats else find_repeats(run, roots)
            for prof, tag in [(None, "")] + calibrations(cal_dir, model, summary):
                stem = f"fidelity_{name}" + (f"_{tag}" if tag else "")
                if (dest / f"{stem}.md").exists() or (dest / f"{stem}.json").exists():
                    print(f"| `{stem}.md` | exists: not written over | | | |")
                    continue
                rep = score(run, dest, name, prof, tag, repeats)
                print(_row(dest / f"{stem}.md", rep)
                      + f" {', '.join(_rel(r) for r in repeats) or '-'} |", flush=True)
    except SpecschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
