"""Per-step MAPE of the H100 calibrations under four fits: none, roofline, a what-if, fitted.

Every calibration recorded on a GPU of another model than its base's (the H100s of
``benchmarks/results/h100-*``) is re-fitted from its measured anchors, on a CPU, three ways and
scored per step against each live run recorded on its GPU (``analysis.fidelity.stats.step_errors``,
the fidelity report's per-step figure, without re-simulating):

- ``none``: one scale per pass group (``specsched calibrate --prior none``);
- ``roofline``: against the roofline's time ratio between the two sheets per shape
  (``--prior roofline``, the default until 2026-12-06; ``backends.calibrate_prior``);
- ``attention at base``: the same ratio with the roofline's attention term kept at the base
  sheet's time (a what-if: on the H100 the 8B's attention over long KV ran about as fast as on the
  H200, while the roofline reads it as bandwidth-bound);
- ``fitted``: attention scaled by its roofline ratio to a power between 0 and 1 that the
  calibration's own anchors choose (``backends.calibrate_prior.fit_attention_power``: the one
  under which they agree best with one factor per group), no live run consulted; the default
  (``--prior fitted``) since 2026-12-06, after it beat ``roofline`` on all four pairings of
  ``h100-2026-12-06``, recorded after the form was fixed (``h100-2026-12-06b``: about even with
  it on the 70B shard). From 5c51b30 it also took no prior when the anchors agreed better
  without one; DeepSeek-V2-Lite's live runs of ``h100-2026-12-06c`` judged that (no prior
  4.57-4.85% per step, power 0 2.05-2.45%) and it was reverted. Since 2026-12-06 evening a
  power the anchors do not resolve is not kept: attention stays at the base (power 0,
  ``backends.calibrate_prior.attention_resolved``); that changed the 70B's ``--trace``
  calibrations under ``fixed`` of ``h100-2026-12-06j`` and ``-06l`` (long context 2.49 /
  2.48% -> 1.32 / 1.26%), and no other. Calibrations recorded under earlier rules are
  re-fitted here as today's rule fits them.

    python benchmarks/calibrate_prior_whatif.py

The what-ifs were written after seeing the runs of ``h100-2026-12-05`` and ``-05b``, so their
figures there are in sample (the fitted power reads only the anchors, but its form was chosen
there); ``h100-2026-12-06`` is out of sample. CPU only.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.fidelity.stats import step_errors  # noqa: E402
from backends.calibrate import (calibrated_copy, fit_factors, group_name,  # noqa: E402
                                settle_prefill)
from backends.calibrate_prior import (fit_with_prior, other_models, prior_for,  # noqa: E402
                                      roofline_prior, sheet_of)
from backends.calibrate_refit import rebase_anchors  # noqa: E402
from backends.models import load_model  # noqa: E402
from backends.profile import (grid_rows, line_rows, load_profile, read_profile,  # noqa: E402
                              write_profile)
from backends.shipped import default_profile  # noqa: E402
from benchmarks.systematic_errors import run_gpus  # noqa: E402


def calibrations(results: Path, other_model: bool = True):
    """(calibrated profile, its metadata) for every calibration made on another GPU model than
    its base's (``other_model`` false: on a GPU of the base's own model), one per measurement
    (re-fits of the same anchors skipped)."""
    seen = set()
    for p in sorted(results.glob("*/*calibrated*.parquet")):
        _, meta = read_profile(str(p))
        cal = meta.get("calibration") or {}
        if not cal.get("anchors") or cal.get("refit") or \
                bool(other_models(cal.get("base_gpu"), cal.get("machine"))) != other_model:
            continue
        key = tuple(a["measured_s"] for a in cal["anchors"])
        if key not in seen:
            seen.add(key)
            yield p, meta


def refit_inputs(model, cal: dict, base_sheet: str) -> tuple[list, list, dict, list, list]:
    """What a re-fit of a calibration's anchors starts from: the shipped ``base_sheet`` profile
    of ``model`` as grid rows, prefill-line rows and metadata, the anchors against its grid rows
    (``backends.calibrate_refit.rebase_anchors``) and its pass groups."""
    base_rows, bmeta = read_profile(str(default_profile(model.name, base_sheet)))
    grid, line = grid_rows(base_rows).to_pylist(), line_rows(base_rows).to_pylist()
    anchors, _ = rebase_anchors(cal["anchors"], grid)
    groups = sorted({group_name(r["kind"], r["graph"]) for r in grid})
    return grid, line, bmeta, anchors, groups


def fitted_table(grid: list, line: list, bmeta: dict, factors: dict, prior, out: Path):
    """The lookup table of the base's rows scaled by ``factors`` over ``prior`` (as
    ``backends.calibrate.calibrated_copy`` writes a calibration), through the file ``out``: a
    table reads its file for its grid."""
    write_profile(calibrated_copy(grid, line, factors, prior=prior), str(out), bmeta)
    return load_profile(str(out))


class Refit(NamedTuple):
    """One kept calibration re-fitted from its anchors as ``specsched calibrate`` fits them today."""

    path: Path  #: the calibrated profile
    model: Any  #: its model (``backends.models.load_model``)
    cal: dict  #: its ``calibration`` metadata
    base_sheet: str  #: the GPU sheet of the base profile
    here_sheet: str  #: the GPU sheet of the calibration's GPU (the base's on the same model)
    grid: list  #: the shipped base profile's grid rows
    line: list  #: its prefill-line rows
    bmeta: dict  #: its metadata
    anchors: list  #: the anchors against its grid rows (``rebase_anchors``)
    groups: list  #: its pass groups
    prior: Any  #: today's prior (``row -> ratio``), None on the base's own GPU model
    note: dict | None  #: the prior's note (its attention power and whether it was resolved)
    factors: dict  #: today's factor per group over the prior, prefill settled
    uuid: str  #: the calibration's GPU uuid prefix


def refits(results: Path, other_model: tuple[bool, ...] = (True,)):
    """A :class:`Refit` for each calibration of :func:`calibrations` made on another GPU model
    than its base's (with ``other_model=(True, False)``, then those on the base's own), re-fitted
    by ``backends.calibrate_prior.fit_with_prior`` (prior ``fitted``, prefill ``auto``)."""
    for other in other_model:
        for path, meta in calibrations(results, other_model=other):
            cal = meta["calibration"]
            spec = meta.get("model") or {}
            model = load_model(spec.get("name"), tp=spec.get("tp"))
            base_sheet = sheet_of(cal["base_gpu"])
            here_sheet = sheet_of(cal["machine"]) or base_sheet
            grid, line, bmeta, anchors, groups = refit_inputs(model, cal, base_sheet)
            prior, note, factors = fit_with_prior(model, anchors, groups, cal["base_gpu"],
                                                  cal["machine"], prior="fitted",
                                                  prefill="auto")
            yield Refit(path, model, cal, base_sheet, here_sheet, grid, line, bmeta, anchors,
                        groups, prior, note, factors, str(cal["machine"].get("uuid", ""))[:8])


def runs_on(folders, model_name: str, uuid: str) -> list[Path]:
    """The live runs in ``folders`` of ``model_name`` recorded on the GPU ``uuid``."""
    out = []
    for folder in folders:
        for run in sorted(folder.glob("live_*")):
            if not (run / "summary.json").is_file():
                continue
            summary = json.loads((run / "summary.json").read_text())
            if summary.get("model") == model_name and run_gpus(summary) == [uuid]:
                out.append(run)
    return out


def main() -> int:
    results = ROOT / "benchmarks" / "results"
    print("| calibration | live run | none | roofline | attention at base (what-if) | "
          "fitted: attention power from the anchors (the default) |")
    print("|---|---|---|---|---|---|")
    for f in refits(results):
        chose = f"power {f.note['attention_power']:g}"
        fits = {"none": None,
                "roofline": prior_for(f.model, f.cal["base_gpu"], f.cal["machine"],
                                      "roofline")[0],
                "attention": roofline_prior(f.model, f.base_sheet, f.here_sheet, 0.0),
                "fitted": f.prior}
        with tempfile.TemporaryDirectory() as tmp:
            tables = {}
            for name, prior in fits.items():
                factors = f.factors if name == "fitted" else settle_prefill(
                    fit_factors(f.anchors, f.groups, prior), "auto", moe=f.model.is_moe,
                    other_model=True)
                tables[name] = fitted_table(f.grid, f.line, f.bmeta, factors, prior,
                                            Path(tmp) / f"{name}.parquet")
            for run in runs_on([f.path.parent], f.model.name, f.uuid):
                steps = pq.read_table(run / "steps.parquet")
                got = [step_errors(steps, tables[n], kv_lookup="straggler")["mape_all_pct"]
                       for n in fits]
                print(f"| {f.path.parent.name}/{f.path.name} | {run.name} | "
                      + " | ".join(f"{v:.2f}%" for v in got[:3])
                      + f" | {got[3]:.2f}% ({chose}) |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
