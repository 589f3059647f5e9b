"""The source and target runs ``benchmarks/calibrate_from_run_whatif.py`` re-centres and scores.

Each pairing names a start profile (a calibration kept under ``benchmarks/results``), the live
run whose passes fit the ``--from-run`` factors, and the fidelity reports of the target runs to
re-score under the re-centred profile. Pairings are added as GPU sessions bring runs, each
marked with when it was recorded against when the rule was written (in or out of sample); the
script's docstring sums up what each set of pairings showed.
"""

from __future__ import annotations

RES = "benchmarks/results"
SHIPPED_V2 = "backends/profiles/deepseek-v2-lite__H200.parquet"
#: the 8B's conversation runs of the nineteenth H100 (default, `pad` and `bucket`) under its own
#: calibration
CONV8_07I = [("h100-2026-12-07i", f"fidelity_conv{p}150_calibrated")
             for p in ("", "_pad", "_bucket")]
#: (model, start profile, source run, [(target run's folder, report stem)]): each target's report
#: against the start profile is the one re-run
SAME_GPU = [
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06e/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06e/live_v2lite_bucket150",
     [("h100-2026-12-06e", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-06e", "fidelity_v2lite_split150_calibrated"),
      ("h100-2026-12-06f", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-06f", "fidelity_v2lite_split150_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06c/live_70b_split150",
     [("h100-2026-12-06c", "fidelity_long70b_fixed_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06b/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06b/live_70b150",
     [("h100-2026-12-06b", "fidelity_70b_split150_1-70b__H200.calibrated"),
      ("h100-2026-12-06b", "fidelity_long70b_fixed_1-70b__H200.calibrated")]),
    # recorded after this script was written (2026-12-06, GPU d06d8883): out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06g/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06g/live_v2lite_bucket150",
     [("h100-2026-12-06g", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-06g", "fidelity_v2lite_split150_calibrated"),
      ("h100-2026-12-06h", "fidelity_v2lite_pad150_calibrated")]),
    ("deepseek-v2-lite",
     f"{RES}/h100-2026-12-06g/deepseek-v2-lite__H200.calibrated_conv_bucket150.parquet",
     f"{RES}/h100-2026-12-06g/live_v2lite_bucket150",
     [("h100-2026-12-06g", "fidelity_v2lite_pad150_calibrated_conv_bucket150"),
      ("h100-2026-12-06g", "fidelity_v2lite_split150_calibrated_conv_bucket150"),
      ("h100-2026-12-06h", "fidelity_v2lite_pad150_calibrated_conv_bucket150")]),
    ("deepseek-v2-lite", SHIPPED_V2, f"{RES}/h200-2026-12-05/live_v2lite_bucket150",
     [("h200-2026-12-05", "fidelity_v2lite_pad150"), ("h200-2026-12-05", "fidelity_v2lite_split150")]),
    ("deepseek-v2-lite",
     f"{RES}/h200-2026-12-05/deepseek-v2-lite__H200.calibrated_conv_bucket150_prefill_base.parquet",
     f"{RES}/h200-2026-12-05/live_v2lite_bucket150",
     [("h200-2026-12-05", "fidelity_v2lite_pad150_calibrated_conv_prefill_base"),
      ("h200-2026-12-05", "fidelity_v2lite_split150_calibrated_conv_prefill_base")]),
    ("deepseek-v2-lite", SHIPPED_V2, f"{RES}/h200-2026-12-05/live_v2lite_split150",
     [("h200-2026-12-05", "fidelity_v2lite_bucket150"), ("h200-2026-12-05", "fidelity_v2lite_pad150")]),
    # recorded after the pairings above were judged (2026-12-06, GPU 3cb66af1): out of sample
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06i/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06i/live_70b_split150",
     [("h100-2026-12-06i", "fidelity_long70b_fixed_calibrated")]),
    ("llama-3.1-70b",
     f"{RES}/h100-2026-12-06i/llama-3.1-70b__H200.calibrated_conv_split150.parquet",
     f"{RES}/h100-2026-12-06i/live_70b_split150",
     [("h100-2026-12-06i", "fidelity_long70b_fixed_calibrated_conv_split150")]),
    # recorded after the pairings above were judged (2026-12-06, GPU fed2eb11; -06k: the same
    # runs again, minutes later): out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06j/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06j/live_v2lite_split150",
     [("h100-2026-12-06j", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-06j", "fidelity_v2lite_bucket150_calibrated"),
      ("h100-2026-12-06k", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-06k", "fidelity_v2lite_bucket150_calibrated")]),
    ("deepseek-v2-lite",
     f"{RES}/h100-2026-12-06j/deepseek-v2-lite__H200.calibrated_conv_split150.parquet",
     f"{RES}/h100-2026-12-06j/live_v2lite_split150",
     [("h100-2026-12-06j", "fidelity_v2lite_pad150_calibrated_conv_split150"),
      ("h100-2026-12-06j", "fidelity_v2lite_bucket150_calibrated_conv_split150"),
      ("h100-2026-12-06k", "fidelity_v2lite_pad150_calibrated_conv_split150"),
      ("h100-2026-12-06k", "fidelity_v2lite_bucket150_calibrated_conv_split150")]),
    # recorded after the pairings above were judged (2026-12-06, GPU 493969d8, h100-2026-12-06l;
    # -06m: the long-context run again, minutes later): out of sample
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06l/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06l/live_70b_split150",
     [("h100-2026-12-06l", "fidelity_long70b_fixed_calibrated"),
      ("h100-2026-12-06m", "fidelity_long70b_fixed_calibrated")]),
    ("llama-3.1-70b",
     f"{RES}/h100-2026-12-06l/llama-3.1-70b__H200.calibrated_conv_fixed150_resolved.parquet",
     f"{RES}/h100-2026-12-06l/live_70b_split150",
     [("h100-2026-12-06l", "fidelity_long70b_fixed_calibrated_conv_fixed150_resolved"),
      ("h100-2026-12-06m", "fidelity_long70b_fixed_calibrated_conv_fixed150_resolved")]),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06l/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06l/live_longv2lite_split80",
     [("h100-2026-12-06l", "fidelity_longv2lite_bucket80_calibrated"),
      ("h100-2026-12-06l", "fidelity_longv2lite_pad80_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 62b5355f, h100-2026-12-07c):
    # out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07c/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07c/live_longv2lite_split80",
     [("h100-2026-12-07c", "fidelity_longv2lite80_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 16effd54, h100-2026-12-07d):
    # out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07d/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07d/live_longv2lite_split80",
     [("h100-2026-12-07d", "fidelity_longv2lite80_calibrated"),
      ("h100-2026-12-07d", "fidelity_longv2lite_bucket80_calibrated"),
      ("h100-2026-12-07d", "fidelity_longv2lite_pad80_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-07d/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07d/live_70b_split150",
     [("h100-2026-12-07d", "fidelity_long70b_fixed_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU ecd0eef3, h100-2026-12-07e):
    # out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07e/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07e/live_v2lite_bucket150",
     [("h100-2026-12-07e", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-07e", "fidelity_longv2lite80_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-07e/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07e/live_70b_split150",
     [("h100-2026-12-07e", "fidelity_long70b_fixed_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 2442f29e, h100-2026-12-07g):
    # out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07g/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07g/live_longv2lite_split80",
     [("h100-2026-12-07g", "fidelity_longv2lite80_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 7d37771f, h100-2026-12-07h):
    # out of sample; the first 70B long-context `split` run as a source
    ("llama-3.1-70b", f"{RES}/h100-2026-12-07h/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07h/live_long70b_split",
     [("h100-2026-12-07h", "fidelity_long70b_fixed_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 4a0a2736, h100-2026-12-07i):
    # out of sample; the 8B's conversation `split` run re-centres the GPU's other 8B policies
    ("llama-3.1-8b", f"{RES}/h100-2026-12-07i/llama-3.1-8b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07i/live_split150", CONV8_07I),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07i/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07i/live_v2lite_bucket150",
     [("h100-2026-12-07i", "fidelity_v2lite_pad150_calibrated")]),
]
#: V2-Lite's long-context runs of the fourteenth H100 under its own calibration, the targets of
#: two sources on other H100s
V2_LONG_07D = [("h100-2026-12-07d", f"fidelity_longv2lite{p}80_calibrated")
               for p in ("", "_split", "_bucket", "_pad")]
#: the same on the seventeenth H100, which ran two of them
V2_LONG_07G = [("h100-2026-12-07g", f"fidelity_longv2lite{p}80_calibrated")
               for p in ("", "_split")]
#: the 70B's long-context runs of the eighteenth H100 under its own calibration
LONG70_07H = [("h100-2026-12-07h", f"fidelity_long70b_{p}_calibrated")
              for p in ("fixed", "split")]
#: (model, source's start profile, source run, target's start profile, [targets]): the ratios of
#: a run on one H100 applied to the calibration made on another H100, in another session, and
#: scored on that GPU's runs
OTHER_GPU = [
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06c/deepseek-v2-lite__H200.calibrated_fitted.parquet",
     f"{RES}/h100-2026-12-06c/live_v2lite_bucket150",
     f"{RES}/h100-2026-12-06e/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-06e", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-06e", "fidelity_v2lite_split150_calibrated"),
      ("h100-2026-12-06f", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-06f", "fidelity_v2lite_split150_calibrated")]),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06e/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06e/live_v2lite_bucket150",
     f"{RES}/h100-2026-12-06c/deepseek-v2-lite__H200.calibrated_fitted.parquet",
     [("h100-2026-12-06c", "fidelity_v2lite_pad150_calibrated_fitted"),
      ("h100-2026-12-06c", "fidelity_v2lite_split150_calibrated_fitted"),
      ("h100-2026-12-06d", "fidelity_v2lite_pad150_calibrated_fitted")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06c/live_70b_split150",
     f"{RES}/h100-2026-12-06e/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-06e", "fidelity_long70b_fixed_calibrated"),
      ("h100-2026-12-06f", "fidelity_long70b_fixed_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06b/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06b/live_70b_split150",
     f"{RES}/h100-2026-12-06e/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-06e", "fidelity_long70b_fixed_calibrated")]),
    # recorded after this script was written (2026-12-06, GPU d06d8883): out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06e/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06e/live_v2lite_bucket150",
     f"{RES}/h100-2026-12-06g/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-06g", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-06g", "fidelity_v2lite_split150_calibrated"),
      ("h100-2026-12-06h", "fidelity_v2lite_pad150_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06c/live_70b_split150",
     f"{RES}/h100-2026-12-06g/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-06g", "fidelity_long70b_fixed_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06b/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06b/live_70b_split150",
     f"{RES}/h100-2026-12-06g/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-06g", "fidelity_long70b_fixed_calibrated")]),
    # recorded after the pairings above were judged (2026-12-06, GPU 3cb66af1): out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06g/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06g/live_v2lite_bucket150",
     f"{RES}/h100-2026-12-06i/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-06i", "fidelity_v2lite_pad150_calibrated")]),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06e/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06e/live_v2lite_bucket150",
     f"{RES}/h100-2026-12-06i/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-06i", "fidelity_v2lite_pad150_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06c/live_70b_split150",
     f"{RES}/h100-2026-12-06i/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-06i", "fidelity_long70b_fixed_calibrated"),
      ("h100-2026-12-06i", "fidelity_70b_split150_calibrated")]),
    # recorded after the pairings above were judged (2026-12-06, GPU fed2eb11): out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06g/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06g/live_v2lite_bucket150",
     f"{RES}/h100-2026-12-06j/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-06j", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-06j", "fidelity_v2lite_split150_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06i/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06i/live_70b_split150",
     f"{RES}/h100-2026-12-06j/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-06j", "fidelity_long70b_fixed_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06c/live_70b_split150",
     f"{RES}/h100-2026-12-06j/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-06j", "fidelity_long70b_fixed_calibrated")]),
    # recorded after the pairings above were judged (2026-12-06, GPU 493969d8): out of sample
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06i/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06i/live_70b_split150",
     f"{RES}/h100-2026-12-06l/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-06l", "fidelity_long70b_fixed_calibrated"),
      ("h100-2026-12-06l", "fidelity_70b_split150_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06c/live_70b_split150",
     f"{RES}/h100-2026-12-06l/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-06l", "fidelity_long70b_fixed_calibrated"),
      ("h100-2026-12-06l", "fidelity_70b_split150_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 0723ddef, h100-2026-12-07;
    # -07b: the long-context run again, minutes later): out of sample
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06l/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06l/live_70b_split150",
     f"{RES}/h100-2026-12-07/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07", "fidelity_long70b_fixed_calibrated"),
      ("h100-2026-12-07b", "fidelity_long70b_fixed_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06c/live_70b_split150",
     f"{RES}/h100-2026-12-07/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07", "fidelity_long70b_fixed_calibrated"),
      ("h100-2026-12-07b", "fidelity_long70b_fixed_calibrated")]),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06l/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06l/live_longv2lite_split80",
     f"{RES}/h100-2026-12-07/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-07", "fidelity_longv2lite80_calibrated")]),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06j/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06j/live_v2lite_split150",
     f"{RES}/h100-2026-12-07/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-07", "fidelity_longv2lite80_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 62b5355f, h100-2026-12-07c):
    # out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06l/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06l/live_longv2lite_split80",
     f"{RES}/h100-2026-12-07c/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-07c", "fidelity_longv2lite80_calibrated"),
      ("h100-2026-12-07c", "fidelity_longv2lite_split80_calibrated")]),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07/live_longv2lite80",
     f"{RES}/h100-2026-12-07c/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-07c", "fidelity_longv2lite80_calibrated"),
      ("h100-2026-12-07c", "fidelity_longv2lite_split80_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06l/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06l/live_70b_split150",
     f"{RES}/h100-2026-12-07c/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07c", "fidelity_70b_split150_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06c/live_70b_split150",
     f"{RES}/h100-2026-12-07c/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07c", "fidelity_70b_split150_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 16effd54, h100-2026-12-07d):
    # out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07c/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07c/live_longv2lite_split80",
     f"{RES}/h100-2026-12-07d/deepseek-v2-lite__H200.calibrated.parquet",
     V2_LONG_07D),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06l/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06l/live_longv2lite_split80",
     f"{RES}/h100-2026-12-07d/deepseek-v2-lite__H200.calibrated.parquet",
     V2_LONG_07D),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-07c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07c/live_70b_split150",
     f"{RES}/h100-2026-12-07d/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07d", "fidelity_70b_split150_calibrated"),
      ("h100-2026-12-07d", "fidelity_long70b_fixed_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU ecd0eef3, h100-2026-12-07e):
    # out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07d/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07d/live_longv2lite_split80",
     f"{RES}/h100-2026-12-07e/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-07e", "fidelity_longv2lite80_calibrated")]),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06e/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06e/live_v2lite_bucket150",
     f"{RES}/h100-2026-12-07e/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-07e", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-07e", "fidelity_v2lite_bucket150_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-07d/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07d/live_70b_split150",
     f"{RES}/h100-2026-12-07e/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07e", "fidelity_70b_split150_calibrated"),
      ("h100-2026-12-07e", "fidelity_long70b_fixed_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06c/live_70b_split150",
     f"{RES}/h100-2026-12-07e/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07e", "fidelity_70b_split150_calibrated"),
      ("h100-2026-12-07e", "fidelity_long70b_fixed_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 3b517335, h100-2026-12-07f):
    # out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07e/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07e/live_v2lite_bucket150",
     f"{RES}/h100-2026-12-07f/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-07f", "fidelity_v2lite_split150_calibrated")]),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06e/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06e/live_v2lite_bucket150",
     f"{RES}/h100-2026-12-07f/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-07f", "fidelity_v2lite_split150_calibrated")]),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06j/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06j/live_v2lite_split150",
     f"{RES}/h100-2026-12-07f/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-07f", "fidelity_v2lite_split150_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 2442f29e, h100-2026-12-07g):
    # out of sample
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07d/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07d/live_longv2lite_split80",
     f"{RES}/h100-2026-12-07g/deepseek-v2-lite__H200.calibrated.parquet",
     V2_LONG_07G),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-06l/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06l/live_longv2lite_split80",
     f"{RES}/h100-2026-12-07g/deepseek-v2-lite__H200.calibrated.parquet",
     V2_LONG_07G),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-07e/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07e/live_70b_split150",
     f"{RES}/h100-2026-12-07g/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07g", "fidelity_70b_split150_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-06c/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-06c/live_70b_split150",
     f"{RES}/h100-2026-12-07g/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07g", "fidelity_70b_split150_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 7d37771f, h100-2026-12-07h):
    # out of sample, both ways: other H100s' conversation runs re-centre this GPU's long-context
    # runs, and its long-context `split` run re-centres other H100s' long-context `fixed` runs
    ("llama-3.1-70b", f"{RES}/h100-2026-12-07g/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07g/live_70b_split150",
     f"{RES}/h100-2026-12-07h/llama-3.1-70b__H200.calibrated.parquet", LONG70_07H),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-07e/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07e/live_70b_split150",
     f"{RES}/h100-2026-12-07h/llama-3.1-70b__H200.calibrated.parquet", LONG70_07H),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-07h/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07h/live_long70b_split",
     f"{RES}/h100-2026-12-07e/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07e", "fidelity_long70b_fixed_calibrated")]),
    ("llama-3.1-70b", f"{RES}/h100-2026-12-07h/llama-3.1-70b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07h/live_long70b_split",
     f"{RES}/h100-2026-12-07d/llama-3.1-70b__H200.calibrated.parquet",
     [("h100-2026-12-07d", "fidelity_long70b_fixed_calibrated")]),
    # recorded after the pairings above were judged (2026-12-07, GPU 4a0a2736, h100-2026-12-07i):
    # out of sample; other H100s' runs re-centre this GPU's calibration
    ("llama-3.1-8b", f"{RES}/h100-2026-12-07g/llama-3.1-8b__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07g/live_conv150",
     f"{RES}/h100-2026-12-07i/llama-3.1-8b__H200.calibrated.parquet", CONV8_07I),
    ("deepseek-v2-lite", f"{RES}/h100-2026-12-07e/deepseek-v2-lite__H200.calibrated.parquet",
     f"{RES}/h100-2026-12-07e/live_v2lite_bucket150",
     f"{RES}/h100-2026-12-07i/deepseek-v2-lite__H200.calibrated.parquet",
     [("h100-2026-12-07i", "fidelity_v2lite_pad150_calibrated"),
      ("h100-2026-12-07i", "fidelity_v2lite_bucket150_calibrated")]),
]
PAIRINGS = ([(m, start, src, start, targets) for m, start, src, targets in SAME_GPU]
            + OTHER_GPU)
