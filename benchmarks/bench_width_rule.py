"""Validate the width rule on Spec-Bench EAGLE data: extend a shallower record, compare to deeper.

    python benchmarks/bench_width_rule.py [--jsonl specbench_vicuna7b_eagle.jsonl]

Spec-Bench records EAGLE at one depth (5), so no file holds the same questions at two depths.
The benchmark makes the shallower record from the data itself: truncating a depth-5 step to
``k'`` drafts gives what ``k'`` drafts would have accepted (``min(a, k')``: positions up to
``k'`` do not depend on deeper drafts, for a chain or a depth-limited tree), so the depth-5 data
are the ground truth for every ``r <= 5``.  For each recorded depth ``k' = 1..4`` and verified
``r = k'+1..5`` it prints the accepted-draft distribution the rule predicts (``traces.width_rule``)
against the truth (mean accepted drafts, total-variation distance):

* ``recorded p``: ``position_accept_prob`` as a trace recorded at ``k'`` estimates it (positions
  past ``k'`` repeat the last estimate): what the engine does with such a trace;
* ``per category``: ``position_accept_prob`` from the depth-5 data of all categories (the
  specbench converter's), applied to each category's steps: the engine uses one list per
  trace, so this is the error a mixed trace carries per category (over all categories it is
  exact by construction).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "traces" / "samples" / "specbench_vicuna7b_eagle_lengths.jsonl"


def main() -> int:
    from traces.acceptance import estimate_position_accept_prob
    from traces.width_rule import predicted_accepted, total_variation, truncated

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jsonl", type=Path, default=DATA,
                    help="Spec-Bench EAGLE model_answer JSONL (default: %(default)s)")
    args = ap.parse_args()
    acc, cat = [], []
    with open(args.jsonl) as fh:
        for line in fh:
            row = json.loads(line)
            for ch in row["choices"]:
                lens = np.asarray(ch["accept_lengths"], dtype=np.int64) - 1
                acc.append(lens)
                cat.append(np.full(lens.size, row["category"], dtype=object))
    a = np.concatenate(acc)
    cats = np.concatenate(cat)
    depth = int(a.max())
    print(f"data: {args.jsonl.name}, {a.size:,} steps, depth {depth}, "
          f"mean accepted {a.mean():.3f}")
    p_full = estimate_position_accept_prob(np.full(a.size, depth), a)
    print("position_accept_prob (depth-5 data): " + ", ".join(f"{x:.3f}" for x in p_full[:depth]))
    print("\n| recorded k' | verified r | truth mean | predicted mean (recorded p) | TV "
          "| worst category: truth / predicted mean (one p) | TV |")
    print("|---:|---:|---:|---:|---:|---|---:|")
    for kr in range(1, depth):
        ar = np.minimum(a, kr)
        dr = np.full(a.size, kr)
        p_rec = estimate_position_accept_prob(dr, ar)
        for r in range(kr + 1, depth + 1):
            truth = truncated(a, r)
            pred = predicted_accepted(dr, ar, r, p_rec)
            js = np.arange(r + 1)
            worst = None
            for c in sorted(set(cats)):
                m = cats == c
                t_c = truncated(a[m], r)
                p_c = predicted_accepted(dr[m], ar[m], r, p_full)
                tv = total_variation(p_c, t_c)
                if worst is None or tv > worst[0]:
                    worst = (tv, c, float(js @ t_c), float(js @ p_c))
            print(f"| {kr} | {r} | {js @ truth:.3f} | {js @ pred:.3f} | "
                  f"{total_variation(pred, truth):.3f} | {worst[1]}: {worst[2]:.3f} / "
                  f"{worst[3]:.3f} | {worst[0]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
