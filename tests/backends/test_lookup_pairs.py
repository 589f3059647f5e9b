"""``benchmarks/lookup_pairs.py``: reports scored under two KV lookups, check by check (CPU)."""

from __future__ import annotations

import json

from backends_helpers import benchmark_script


def _report(run: str, passes: dict[str, bool]) -> dict:
    return {"reference": {"recorded_run": run},
            "checks": {k: {"pass": v, "value_pct": 0.0} for k, v in passes.items()}}


def _write(d, name, rep):
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(json.dumps(rep))


def test_pairs_are_counted_check_by_check(tmp_path, capsys):
    """Two pairs worked by hand: a (rule 1 of 3, fluid 2 of 3: b turned met) and c (rule 2 of 3,
    fluid 2 of 3: x turned met, y turned missed); a fluid report without its pair is ignored."""
    mod = benchmark_script("lookup_pairs")
    _write(tmp_path / "s1", "fidelity_a.json", _report("r1", {"a": True, "b": False, "c": False}))
    _write(tmp_path / "s1", "fidelity_a_fluid.json", _report("r1", {"a": True, "b": True,
                                                                     "c": False}))
    _write(tmp_path / "s2", "fidelity_c.json", _report("r2", {"x": False, "y": True, "z": True}))
    _write(tmp_path / "s2", "fidelity_c_fluid.json", _report("r2", {"x": True, "y": False,
                                                                    "z": True}))
    _write(tmp_path / "s2", "fidelity_lone_fluid.json", _report("r3", {"x": True}))
    assert mod.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| s1/fidelity_a_fluid.json | 1 of 3 | 2 of 3 | b | - |" in out
    assert "| s2/fidelity_c_fluid.json | 2 of 3 | 2 of 3 | x | y |" in out
    assert out.strip().endswith("2 pairs: fluid meets more checks on 1, as many on 1, fewer on "
                                "0; 2 checks turned met, 1 turned missed")


def test_a_pair_on_two_runs_or_no_pair_is_an_error(tmp_path, capsys):
    mod = benchmark_script("lookup_pairs")
    assert mod.main([str(tmp_path)]) == 2
    _write(tmp_path / "s", "fidelity_a.json", _report("r1", {"a": True}))
    _write(tmp_path / "s", "fidelity_a_fluid.json", _report("r2", {"a": True}))
    assert mod.main([str(tmp_path)]) == 2
    assert "compares r2, its pair r1" in capsys.readouterr().out
