"""Reports scored under two KV lookups on the same live run, check by check (CPU, no simulation).

A report ``fidelity_X_fluid.json`` beside ``fidelity_X.json`` under ``benchmarks/results/*/``
compares one live run under ``backend.kv_lookup = fluid`` and under the straggler rule. For each
such pair this prints the checks each met, which checks turned from met to missed and back, and
a total: the evidence behind the MLA profiles' default lookup (docs/backends.md, *The MLA fluid
lookup*). A pair whose two reports compared different live runs is an error.

    .venv/bin/python benchmarks/lookup_pairs.py [RESULTS_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pairs(results: Path) -> list[tuple[Path, Path]]:
    """(straggler report, fluid report) JSON paths, sorted."""
    out = []
    for fluid in sorted(results.glob("*/fidelity_*_fluid.json")):
        rule = fluid.with_name(fluid.name.replace("_fluid.json", ".json"))
        if rule.is_file():
            out.append((rule, fluid))
    return out


def compare(rule: dict, fluid: dict) -> dict:
    """Checks met under each report and the checks that changed verdict."""
    a, b = rule["checks"], fluid["checks"]
    if set(a) != set(b):
        raise ValueError(f"the two reports have different checks: {sorted(set(a) ^ set(b))}")
    return {"rule_met": sum(bool(c["pass"]) for c in a.values()),
            "fluid_met": sum(bool(c["pass"]) for c in b.values()), "checks": len(a),
            "turned_met": sorted(k for k in a if not a[k]["pass"] and b[k]["pass"]),
            "turned_missed": sorted(k for k in a if a[k]["pass"] and not b[k]["pass"])}


def main(argv: list[str]) -> int:
    results = Path(argv[0]) if argv else ROOT / "benchmarks" / "results"
    found = pairs(results)
    if not found:
        print(f"error: {results}: no fidelity_*_fluid.json beside its straggler report")
        return 2
    more = same = fewer = up = down = 0
    print("| report (fluid) | straggler | fluid | turned met | turned missed |")
    print("|---|---|---|---|---|")
    for rule_path, fluid_path in found:
        rule, fluid = (json.loads(p.read_text()) for p in (rule_path, fluid_path))
        runs = [(r.get("reference") or {}).get("recorded_run") for r in (rule, fluid)]
        if runs[0] != runs[1]:
            print(f"error: {fluid_path}: compares {runs[1]}, its pair {runs[0]}")
            return 2
        c = compare(rule, fluid)
        more += c["fluid_met"] > c["rule_met"]
        same += c["fluid_met"] == c["rule_met"]
        fewer += c["fluid_met"] < c["rule_met"]
        up, down = up + len(c["turned_met"]), down + len(c["turned_missed"])
        print(f"| {fluid_path.relative_to(results)} | {c['rule_met']} of {c['checks']} | "
              f"{c['fluid_met']} of {c['checks']} | {', '.join(c['turned_met']) or '-'} | "
              f"{', '.join(c['turned_missed']) or '-'} |")
    print(f"\n{len(found)} pairs: fluid meets more checks on {more}, as many on {same}, fewer on "
          f"{fewer}; {up} checks turned met, {down} turned missed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
