"""Re-centre a profile on a live run of its GPU model: one scale per pass group, measured nothing.

``specsched calibrate --from-run RUN`` reads a results folder of a live run (``simulate --backend
aiter`` on a GPU, or a run the live session script recorded) and looks each of its passes up in
the base profile, as ``specsched fidelity`` looks them up. It then scales every row of a pass
group (:func:`backends.calibrate.group_name`: verify, draft, draft-extend, graph or eager, and
prefill) so that the group's summed time over the run is the live one: by the inverse of its
``sum(predicted) / sum(live)``, repeated until each group matches, because a profile can derive
one group's rows from another's (:func:`fit_recentring`). Groups with fewer than
:data:`MIN_PASSES` passes keep their rows. Held-out rows are dropped, as ``calibrate`` drops
them.

Why summed time and not the median of per-pass ratios: a queue sees time, so long passes
should weigh more. On V2-Lite's H100 runs the prefill steps are mostly small ones, and their
median ratio and their summed time pointed different ways (docs/aiter.md, *The prefill what-if
judged on a seventh H100*).

An opt-in mode, not the default calibration: it needs a recorded live run. Over the recorded
H100 runs it corrected the offset each anchor calibration left, which was steady within a GPU
model. Re-centred on a run of another H100 in another session, per-step MAPE went from
1.88-2.73% to 1.26-1.84% on all ten targets and the whole-run checks gained +17. Judged on an
eighth H100's runs, recorded after it was written, per step was better on all 11 targets and
the checks gained +16. On the H200's own runs, where the anchor fit has no offset to correct,
per step went to 0.63-0.64% while the whole-run checks lost 4 over six targets, all of them
checks that sit near their thresholds (``benchmarks/calibrate_from_run_whatif.py``;
docs/aiter.md, *Re-centring on a live run* and *Both judged on an eighth H100*).
``specsched fidelity`` refuses to score a re-centred profile against the run it was re-centred
on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from traces.errors import SpecschedError

__all__ = ["MIN_PASSES", "read_live_run", "group_ratios", "scaled_rows", "fit_recentring",
           "recentre", "source_of", "check_not_source"]

#: a pass group with fewer passes in the run keeps its rows
MIN_PASSES = 20


#: re-centring repeats until every applied group's summed time is the live one within this
#: (a group's eager rows can be derived from its graph rows, so scaling one moves the other)
TOLERANCE = 1e-9
MAX_ROUNDS = 8


def _steps_sha256(run: Path) -> str:
    from backends.shipped import file_sha256

    return file_sha256(run / "steps.parquet")


def _gpu_name(gpu: Any) -> str:
    return str((gpu or {}).get("name") if isinstance(gpu, dict) else gpu or "").strip()


def read_live_run(run: str | Path, model: Any) -> tuple[dict, Any]:
    """(summary, steps) of a results folder of a live run of ``model``; refuses a run of another
    backend than the live one, or of another model."""
    from analysis.fidelity.runs import load_recorded

    summary, steps = load_recorded(run)
    backend = ((summary.get("config") or {}).get("backend") or {}).get("name")
    if backend != "aiter":
        raise SpecschedError(f"is a run of the {backend!r} backend, not a live one: re-centre on a "
                             "run that timed its passes on a GPU (simulate --backend aiter)",
                             path=str(run))
    name = summary.get("model") if isinstance(summary.get("model"), str) else (
        summary.get("model") or {}).get("name")
    if name != model.name:
        raise SpecschedError(f"is a run of {name!r}, not of {model.name!r}", path=str(run))
    return summary, steps


def group_ratios(profile: str | Path, steps: Any, model: Any) -> dict[str, dict]:
    """Per pass group of a live run's ``steps``: ``{"passes", "predicted_s", "live_s",
    "ratio"}`` (ratio = predicted / live), each pass looked up in ``profile`` as ``fidelity``
    looks it up (``fluid`` on an MLA model, the straggler rule otherwise)."""
    from analysis.fidelity.stats import step_errors
    from backends.attention_kv import resolve_kv_lookup
    from backends.calibrate import group_name
    from backends.profile import load_profile

    e = step_errors(steps, load_profile(str(profile)),
                    kv_lookup=resolve_kv_lookup("auto", model.is_mla), _full=True)
    err, ok = e["_arrays"]["err"], e["_arrays"]["ok"]
    live = steps.column("latency_s").to_numpy().astype(np.float64)
    group = np.array([group_name(k, bool(g)) for k, g in
                      zip(steps.column("kind").to_pylist(), steps.column("graph").to_pylist())])
    out: dict[str, dict] = {}
    for g in sorted(set(group[ok].tolist())):
        m = ok & (group == g)
        pred_s, live_s = float((live[m] * (1.0 + err[m])).sum()), float(live[m].sum())
        out[g] = {"passes": int(m.sum()), "predicted_s": pred_s, "live_s": live_s,
                  "ratio": pred_s / live_s}
    return out


def scaled_rows(rows: list[dict], factors: dict[str, float]) -> list[dict]:
    """``rows`` (a profile's rows) with each group's ``latency_s``, ``p10_s`` and ``p90_s``
    multiplied by its factor (1 for a group not in ``factors``); held-out rows dropped."""
    from backends.calibrate import group_name

    out = []
    for r in rows:
        if r.get("split") == "heldout":
            continue
        f = factors.get(group_name(r["kind"], r["graph"]), 1.0)
        out.append(dict(r, latency_s=r["latency_s"] * f, p10_s=r["p10_s"] * f,
                        p90_s=r["p90_s"] * f))
    return out


def fit_recentring(base: str | Path, steps: Any, model: Any) -> tuple[dict[str, float], dict]:
    """The factor per pass group that makes ``base``'s summed time over a live run's ``steps``
    the live one, for each group with at least :data:`MIN_PASSES` passes; returns the factors
    and the base's ratios (:func:`group_ratios`). The first round divides each group by its
    ratio. A profile can fill one group's rows in part from another's (eager verify from the
    verify graphs, for one), so a group's summed time is an affine function of its own factor
    with the others held. From then on each group still off by more than :data:`TOLERANCE` moves
    along the line through its last two rounds (a secant step), and falls back to dividing by
    its ratio where that line is flat. Refuses a run that no pass group has enough passes in."""
    import tempfile

    from backends.profile import read_profile, write_profile

    rows, meta = read_profile(base)
    rows = rows.to_pylist()
    first = group_ratios(base, steps, model)
    groups = [g for g, v in first.items() if v["passes"] >= MIN_PASSES]
    if not groups:
        raise SpecschedError(f"no pass group has {MIN_PASSES} passes in the run: too short to "
                             "re-centre on", path=str(base))
    factors = {g: 1.0 for g in groups}
    last = {g: (1.0, first[g]["predicted_s"]) for g in groups}
    ratios = first
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(MAX_ROUNDS):
            off = [g for g in groups if abs(ratios[g]["ratio"] - 1.0) > TOLERANCE]
            if not off:
                break
            for g in off:
                f, pred, live = factors[g], ratios[g]["predicted_s"], ratios[g]["live_s"]
                f0, p0 = last[g]
                slope = (pred - p0) / (f - f0) if round_ and f != f0 else 0.0
                step = f + (live - pred) / slope if slope > 0 else 0.0
                last[g] = (f, pred)
                factors[g] = step if step > 0 else f * live / pred
            here = Path(tmp) / "recentred.parquet"
            write_profile(scaled_rows(rows, factors), here, meta)
            ratios = group_ratios(here, steps, model)
    return factors, first


def recentre(model: Any, base: str | Path, run: str | Path, out: str | Path) -> dict[str, Any]:
    """Write ``base`` re-centred on the live run ``run`` to ``out`` (see the module); return
    the command's summary. Refuses a run recorded on another GPU model than the profile's."""
    from backends.calibrate import calibrated_metadata
    from backends.profile import read_profile, write_profile
    from backends.shipped import file_sha256

    run = Path(run)
    rows, meta = read_profile(base)
    summary, steps = read_live_run(run, model)
    run_gpu = (summary.get("backend_detail") or {}).get("gpu") or {}
    here, there = _gpu_name(meta.get("gpu")), _gpu_name(run_gpu)
    if not here or here != there:
        raise SpecschedError(f"was recorded on {there or 'an unnamed GPU'}, and the profile {base} "
                             f"is for {here or 'an unnamed GPU'}: re-centre a profile of the run's "
                             "GPU model (specsched calibrate makes one)", path=str(run))
    factors, first = fit_recentring(base, steps, model)
    groups = {g: dict(v, factor=factors.get(g, 1.0), applied=g in factors)
              for g, v in first.items()}
    info = {"run": str(run), "steps_sha256": _steps_sha256(run), "gpu": run_gpu,
            "min_passes": MIN_PASSES, "groups": groups,
            "how": "each pass group's rows scaled so that its summed time over the run's passes "
                   "(looked up as specsched fidelity looks them up) is the live one; ratio: the "
                   f"base's predicted / live; groups with fewer than {MIN_PASSES} passes unchanged"}
    cal = meta.get("calibration")
    calibration = (dict(cal, recentred=info) if isinstance(cal, dict) else
                   {"base": Path(base).name, "base_sha256": file_sha256(base),
                    "base_gpu": meta.get("gpu"), "machine": run_gpu, "recentred": info})
    note = (f"re-centred on the live run {run} (specsched calibrate --from-run): "
            + ", ".join(f"{g} x{f:.4f}" for g, f in factors.items()))
    write_profile(scaled_rows(rows.to_pylist(), factors), out,
                  calibrated_metadata(meta, meta.get("gpu"), calibration, [note]))
    return {"rows": len(rows), "out": str(out), "from_run": str(run),
            "factors": {g: round(f, 6) for g, f in factors.items()},
            "passes": {g: v["passes"] for g, v in first.items()}}


def source_of(profile_meta: dict) -> str | None:
    """The sha256 of the steps of the run a profile was re-centred on, or None."""
    cal = profile_meta.get("calibration")
    rec = cal.get("recentred") if isinstance(cal, dict) else None
    return rec.get("steps_sha256") if isinstance(rec, dict) else None


def check_not_source(profile: str | Path, run: str | Path) -> None:
    """Refuse to score ``profile`` against the run it was re-centred on: there its summed time
    per group is the live one by construction, so the comparison could not fail."""
    from backends.profile import read_profile

    sha = source_of(read_profile(profile)[1])
    if sha is not None and (Path(run) / "steps.parquet").is_file() and \
            _steps_sha256(Path(run)) == sha:
        raise SpecschedError(f"the profile {profile} was re-centred on this run (calibrate "
                             "--from-run), so it matches it by construction: score it against "
                             "another run", path=str(run))
