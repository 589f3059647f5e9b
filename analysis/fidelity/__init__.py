"""Fidelity: how well the profile backend reproduces live GPU replay.

``specsched fidelity --trace T --model M`` runs the same trace twice: with a *reference* executor
(the live ``aiter`` one on a GPU by default, or a run recorded on one, ``--reference-run``) and
with the ``profile`` executor, and compares:

1. **Per step, paired by shape.**  The two runs drift apart in time (other latencies give other
   batch compositions), so steps are not paired by index.  Every forward pass of the reference
   run is predicted with the profile table at *its* shape -- the same lookup the engine does --
   and the relative error ``predicted / measured - 1`` is summarised overall, off the grid (the
   steps whose shape is off the profile's measured grid in at least one way: batch between grid
   points, width, KV between grid lines, mixed KV; on a measured point the profile only replays
   its measurement), per way, by kind and by shape band, with the worst cases.
2. **Held-out points.**  A profile may carry measured points kept out of its grids
   (``split == "heldout"``, ``backends.profile``); their error is what the profile predicts.
3. **Whole runs.**  TTFT, TPOT and E2E percentiles and throughput of both runs side by side,
   and each request's own TTFT, TPOT and E2E paired with its live figure.
4. **What the profile model does not capture**, in general and as found in this profile.

Every figure carries the noise floor when recorded repeats of the reference are given.

The package reads in layers: ``lookup`` (where a step lands in a profile), ``stats`` (the
statistics), ``runs`` (recorded runs and their configuration), ``report`` (checks and floors),
``render`` (markdown), ``run`` (the orchestration), ``cli`` (the command) and ``degrade``
(deliberately wrong profiles, which the checks must catch); beside them ``jitter`` and
``offset`` (the profile side re-run with noisy or offset passes), ``fragile`` (how many
requests each missed latency check rests on), ``paired`` (each request against its own live
figure) and ``reach`` (a calibrated profile's error past the KV its anchors measured).
"""

from analysis.fidelity.cli import fidelity
from analysis.fidelity.lookup import predict_steps
from analysis.fidelity.render import render_markdown
from analysis.fidelity.report import (BAND_MIN_STEPS, NOT_CAPTURED, TARGETS, build_report,
                                      debiased_table, not_captured)
from analysis.fidelity.run import run_fidelity
from analysis.fidelity.runs import (ADDED_KEYS, REMOVED_KEYS, RENAMED_KEYS, read_reference_run,
                                    recorded_config)
from analysis.fidelity.stats import (STRAGGLER_MIN_KV, STRAGGLER_RATIO, compare_runs,
                                     heldout_errors, matched_shape_ratio, step_errors)

__all__ = ["fidelity", "run_fidelity", "predict_steps", "step_errors", "compare_runs",
           "matched_shape_ratio", "heldout_errors", "build_report", "render_markdown",
           "debiased_table", "not_captured", "read_reference_run", "recorded_config",
           "TARGETS", "BAND_MIN_STEPS", "NOT_CAPTURED", "RENAMED_KEYS", "REMOVED_KEYS",
           "ADDED_KEYS", "STRAGGLER_RATIO", "STRAGGLER_MIN_KV"]
