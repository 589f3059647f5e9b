"""The straggler-aware lookup rule against batches measured on an H200 (no GPU needed): the
mixed and uniform latencies that ``benchmarks/bench_aiter_straggler.py`` recorded are shipped, so
a change to ``effective_kv`` that predicts them worse fails here."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))


def rescore(name: str) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    import bench_aiter_straggler as bench

    with contextlib.redirect_stdout(io.StringIO()):
        rows, _, _ = bench.rescore(str(RESULTS / name))
    return (np.array([r["rule_err_pct"] for r in rows]),
            np.array([r["mean_err_pct"] for r in rows]), rows)


@pytest.mark.parametrize("name, cases", [("h200-2026-11-29d/straggler.json", 25),
                                         ("h200-2026-11-29d/straggler_holdout.json", 16),
                                         ("h200-2026-12-02b/straggler3d.json", 12),
                                         ("h200-2026-12-03/straggler_mla.json", 20),
                                         ("h200-2026-12-03/straggler_mla_d5235e89.json", 20),
                                         ("h200-2026-12-04d/straggler8b_eager.json", 12)])
def test_the_rule_predicts_measured_straggler_batches_far_better_than_the_mean(name, cases):
    rule, mean, rows = rescore(name)
    assert len(rows) == cases
    assert np.mean(np.abs(rule)) < np.mean(np.abs(mean)) / 2.5


def test_the_partial_wave_form_beats_the_previous_3d_rule_on_the_recorded_3d_cases():
    """``benchmarks/straggler_3d_waves.py``: on every case of the three recorded runs (two days,
    three machines) where AITER runs its 3D split-KV kernel, the engine's partial-wave form is
    within the project's 3% target and nearer than the rule it replaced; on the run whose
    partly filled waves showed the previous rule's error (10-12 requests at width 4), most of all."""
    import straggler_3d_waves as m

    runs = {p.name: m.scored(p) for p in m.RUNS}
    everything = [c for cases in runs.values() for c in cases]
    assert len(everything) == 44
    now = np.mean(np.abs([c["rule_err"] for c in everything]))
    before = np.mean(np.abs([c["previous_err"] for c in everything]))
    assert now <= 3.0 and now < before
    waves = runs["straggler3d.json"]
    assert (np.mean(np.abs([c["rule_err"] for c in waves]))
            < np.mean(np.abs([c["previous_err"] for c in waves])) / 1.5)


@pytest.mark.parametrize("name", ["h200-2026-11-29d/straggler_holdout.json",
                                  "h200-2026-12-02b/straggler2d.json",
                                  "h200-2026-12-02b/straggler3d.json",
                                  "h200-2026-12-03/straggler_mla.json",
                                  "h200-2026-12-03/straggler_mla_d5235e89.json"])
def test_rescoring_reproduces_what_the_gpu_run_printed_for_the_rule_it_ran(name):
    """Each run printed the lookup rule's errors on the GPU (the 2D and 3D runs of 2026-12-02
    under the tail exponents of the time); re-scoring the stored curves on a CPU gives the same
    numbers: with today's rule where it is unchanged (the 2D kernels and the MLA decode), and on
    the 3D kernel with the rule those runs ran (``straggler_3d_waves.previous_rule_kv``, with
    the whole occupancy in one wave and the 3D exponent the run recorded, 0.4 where it recorded
    none: ``WAVE_FILL_3D`` and the exponent 0.3 came after them)."""
    import json

    import straggler_3d_waves as m
    from backends.attention_kv import attention_params

    data = json.loads((RESULTS / name).read_text())
    ran = (data["summary"].get("tail_exponent") or {}).get("3d", 0.4)
    att = attention_params({**data["summary"]["occupancy"], "wave_fill_3d": 1.0,
                            "tail_exponent": {"3d": ran}})
    rule, _, rows = rescore(name)
    for c, r, now in zip(data["cases"], rows, rule):
        if m.is_3d(c, att):
            assert m.latency_error(c, m.previous_rule_kv(c, att)) == pytest.approx(
                c["rule_err_pct"], abs=1e-9), c["spec"]
        else:
            assert now == pytest.approx(c["rule_err_pct"], abs=1e-9), c["spec"]
    np.testing.assert_allclose([r["k_eq"] for r in rows], [c["k_eq"] for c in data["cases"]])


def test_the_lone_straggler_form_worked_by_hand():
    """``benchmarks/straggler_2d_tail.py``: T = max(T_u(mean KV), T_0 + a x kv_max). Uniform
    points 10 ms at KV 1,000 and 12 ms at 2,000 give T_0 = 8 ms and 2 us a token. Three
    requests at 1,000 and one at 4,000: the mean is 1,750, so T_u = 11.5 ms; with a = 1 us a
    token the straggler's T_0 + 4 ms = 12 ms is the longer."""
    import straggler_2d_tail as m

    case = {"bs": 4, "real": 4, "width": 6, "short": 1000, "long": 4000, "nlong": 1,
            "uniform": {"1000": 0.010, "2000": 0.012}, "mixed_s": 0.012}
    assert m.uniform_line(case) == pytest.approx((0.008, 2e-6))
    assert m.mean_kv(case) == 1750
    assert m.predict(case, 1e-6) == pytest.approx(0.012)
    assert m.predict(case, 0.5e-6) == pytest.approx(0.0115)     # now the uniform part is longer
    assert m.lone_a(case) == pytest.approx(1e-6)


def test_a_lone_straggler_constant_fitted_on_one_run_predicts_another_runs_2d_cases():
    """The constant ``a`` fitted on the 14 2D-kernel cases of 2026-12-02 predicts the 5 2D cases
    measured on another machine on 2026-11-29 within the project's 3% target, where the
    committed lookup rule misses it."""
    import straggler_2d_tail as m

    fit = m.two_d_cases(m.DEFAULT_FIT)
    held = [c for p in m.DEFAULT_SCORE for c in m.two_d_cases(p)]
    assert (len(fit), len(held)) == (14, 5)
    a = m.fit_a(fit)
    model = np.mean(np.abs(m.errors(held, a)))
    rule = np.mean(np.abs(m.waves_rule(held)))
    assert model <= 3.0 < rule


def test_the_engine_constant_is_the_fit_and_its_lookup_beats_the_waves_rule_on_every_run():
    """``LONE_STRAGGLER_2D_S`` is what the script fits over the 8B's 32 layers, and the engine's
    lookup (the form on 2D verify cases, the waves rule elsewhere) predicts each recorded run's
    cases better than the waves rule alone."""
    import straggler_2d_tail as m
    from backends.attention_kv import LONE_STRAGGLER_2D_S

    a = m.fit_a(m.two_d_cases(m.DEFAULT_FIT))
    assert LONE_STRAGGLER_2D_S * 32 == pytest.approx(a, rel=1e-3)
    for path in (m.DEFAULT_FIT,) + m.DEFAULT_SCORE:
        cases = m.scored_cases(path)
        engine = np.mean(np.abs(m.engine_errors(cases, LONE_STRAGGLER_2D_S * 32)))
        assert engine < np.mean(np.abs(m.waves_rule(cases))), path


def test_a_case_places_its_stragglers_first_or_last_in_the_launch():
    """``verify:6/5:4:100:900:2`` is 5 real requests padded to 6: KV 900, 900, 100, 100, 100
    (stragglers first, as every recorded case); with ``:last`` 100, 100, 100, 900, 900. A
    case of the old form reads as first; an unknown position is refused."""
    import bench_aiter_straggler as bench

    first, last = bench.parse_case("verify:6/5:4:100:900:2"), bench.parse_case("verify:6/5:4:100:900:2:last")
    assert (first["order"], last["order"], last["bs"], last["real"]) == ("first", "last", 6, 5)
    assert bench.case_kv(first).tolist() == [900, 900, 100, 100, 100]
    assert bench.case_kv(last).tolist() == [100, 100, 100, 900, 900]
    assert bench.case_kv({k: v for k, v in first.items() if k != "order"}).tolist() == [900, 900, 100, 100, 100]
    with pytest.raises(SystemExit, match="expected kind:bs"):
        bench.parse_case("verify:6:4:100:900:2:middle")


def test_the_overlap_what_if_loses_to_the_partial_wave_form_but_for_a_nearly_empty_wave():
    """``benchmarks/straggler_3d_waves.py``'s ``overlap`` what-if (the straggler's tail beside the
    last, partly filled wave, not after it) is why the engine keeps adding them: over the
    multi-wave cases of the four recorded runs it is further from the GPU than the engine's form,
    though on the 70B shard at 22 requests, width 6, eager, where the second wave holds 33 of
    1,056 programs, it is the nearer of the two."""
    import straggler_3d_waves as m

    runs = [*m.RUNS, RESULTS / "h200-2026-12-02f" / "straggler70b.json"]
    multi = [c for p in runs for c in m.scored(p) if c["multi_wave"]]
    assert len(multi) == 44
    engine = np.mean(np.abs([c["rule_err"] for c in multi]))
    overlap = np.mean(np.abs([c["overlap_err"] for c in multi]))
    assert engine <= 3.0 < overlap
    (c22,) = [c for c in multi if c["spec"] == "verify:22:6:8000:25000:1"]
    assert abs(c22["overlap_err"]) < 3.0 < abs(c22["rule_err"])


def test_the_overlap_what_if_loses_out_of_sample_on_the_second_waves_it_was_written_for():
    """The job ``straggler70b-wave2`` was written with the ``overlap`` what-if and first ran on a
    nineteenth H100 (``h100-2026-12-07i``): the 70B shard's eager verify at width 6 and 21-26
    requests. Out of sample, the engine's partial-wave form is again nearer over the cases of
    more than one wave; at 22 requests (a second wave nearly empty) overlap is again the nearer;
    and at 23-26 requests the GPU lies between the two forms, the engine's above it and
    overlap's below, so neither form's tail is the kernel's."""
    import straggler_3d_waves as m

    cases = m.scored(RESULTS / "h100-2026-12-07i" / "straggler70b_wave2.json")
    multi = [c for c in cases if c["multi_wave"]]
    assert multi and all(c["width"] == 6 for c in multi)
    engine = np.mean(np.abs([c["rule_err"] for c in multi]))
    overlap = np.mean(np.abs([c["overlap_err"] for c in multi]))
    assert engine < overlap
    (c22,) = [c for c in multi if c["bs"] == 22]
    assert abs(c22["overlap_err"]) < abs(c22["rule_err"])
    between = [c for c in multi if 23 <= c["bs"] <= 26]
    assert len(between) == 6
    assert all(c["overlap_err"] < 0 < c["rule_err"] for c in between)


def test_the_dense_fluid_what_if_loses_in_sample_and_wins_only_the_70b_second_waves():
    """``benchmarks/straggler_3d_fluid_whatif.py`` applies the MLA lookup's fluid to the dense 3D
    kernel's programs. Chosen on its grid over the runs the engine's form was built from, it is
    still worse than that form on every one of them; on the held-out 70B run (two waves, 4-5
    long requests) it is nearer over all cases, from below where the engine's form errs from
    above."""
    import straggler_3d_fluid_whatif as f

    ins, out = f.cases(f.IN_SAMPLE), f.cases(f.HELD_OUT)
    _, nsat, ovh = f.best_in_sample(ins)
    fl = f.fluid_errors(ins, nsat, ovh)
    for run in {r for _, _, r in ins}:
        sel = [i for i, (_, _, r) in enumerate(ins) if r == run]
        engine = np.mean(np.abs([ins[i][0]["rule_err"] for i in sel]))
        assert np.mean(np.abs(fl[sel])) > engine, run
    held = f.fluid_errors(out, nsat, ovh)
    engine_held = np.array([c["rule_err"] for c, _, _ in out])
    assert np.mean(np.abs(held)) < np.mean(np.abs(engine_held))
    assert np.all(held < 0) and np.mean(engine_held) > 0


def test_the_dense_fluid_gives_a_uniform_batch_its_own_kv():
    """A batch whose requests all hold the same KV is looked up at that KV by the fluid, at any
    saturation and overhead: the mixed and the uniform launch are the same launch."""
    import json

    import bench_aiter_straggler as bench
    import straggler_3d_fluid_whatif as f
    from backends.attention_kv import attention_params

    d = json.loads(f.HELD_OUT[0].read_text())
    att = attention_params(d["summary"]["occupancy"])
    case = {**d["cases"][1], "short": 8500, "long": 8500}
    assert set(bench.case_kv(case).tolist()) == {8500}
    for nsat, ovh in ((256.0, 0.0), (512.0, 64.0), (1023.0, 128.0)):
        assert abs(f.fluid_kv(case, att, nsat, ovh)[0] - 8500.0) < 1e-6


def test_the_dense_fluid_on_live_steps_brackets_the_70b_second_waves_and_loses_the_8b():
    """Scored on live steps (each pass's recorded members), the fluid chosen on the benchmark
    cases is further from the GPU than the engine's form over the 8B's long-context ``pad``
    run's mixed 3D launches, while on the 70B shard's launches of more than one wave (H200,
    long context ``pad``) the engine's form errs above the GPU and the fluid below."""
    import straggler_3d_fluid_whatif as f

    _, nsat, ovh = f.best_in_sample(f.cases(f.IN_SAMPLE))
    live = {f"{r.parent.name}/{r.name}": (r, p) for r, p in f.LIVE}
    e8 = f.live_errors(*live["h200-2026-12-04c/live_long_pad"], nsat, ovh)
    assert np.mean(np.abs(e8["fluid"])) > np.mean(np.abs(e8["engine"]))
    e70 = f.live_errors(*live["h200-2026-12-04d/live_long70b_pad"], nsat, ovh)
    m = e70["multi"]
    assert m.sum() > 0
    assert np.mean(e70["engine"][m]) > 0 > np.mean(e70["fluid"][m])
