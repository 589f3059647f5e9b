"""Score a live run that was cut off before it finished, per step, from its journal (CPU).

A live run cut by a call's time limit leaves no results folder, only its journal
(``KEEP_JOURNAL=1`` in ``benchmarks/gpu_live_session.sh``): every executor call it measured, in
order. Replayed on a CPU through the engine under the run's configuration, the engine makes the
same calls again and gets the same times back, so it records the same steps as the live run did,
up to the call where the journal ends (``benchmarks/journal_member_kv.py`` does the same for a
finished run). This replays those steps and scores each profile given against their measured
times, as ``specsched fidelity`` scores a finished run's steps (``analysis.fidelity.stats``):
per-step MAPE over all steps and off the profile's grid, and per pass kind with the signed mean.

Only the per-step figures: a cut run has no whole-run figures (TTFT, TPOT, throughput), since
most of its requests never finished, so it meets or misses no whole-run check. Steps are those
the engine completed before the journal ended.

The configuration is rebuilt from the options the live run was started with (as
``specsched simulate`` builds it) and checked against the digest in the journal's first line;
any difference stops with an error, as does a replay that asks for a call the journal does not
hold in the same order (the journal then belongs to another run). A journal recorded under older
defaults than today's is therefore refused: of the cut journals under ``benchmarks/results/``,
those of 2026-12-02 to -04 (``h200-2026-12-03e/journal_longv360.jsonl`` among them) are. A
gzipped journal (``.jsonl.gz``) is read as it is.

    python benchmarks/score_cut_run.py --journal DIR/journal_long_pad80.jsonl \\
        --trace traces/samples/synth_longctx_200.parquet --model llama-3.1-8b --policy pad \\
        --limit 80 --profile shipped --profile DIR/llama-3.1-8b__H200.calibrated.parquet

``--json FILE`` also writes the figures as JSON. CPU only; seconds for a few thousand calls.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from traces.errors import SpecschedError  # noqa: E402

KINDS = ("prefill", "draft", "verify", "draft_extend")


def build_config(model: str, policy: str | None, sets: list[str], backend: str = "aiter"):
    """The configuration ``specsched simulate --backend BACKEND --model M --policy P --set ...``
    builds."""
    from analysis.cli_options import _build_config

    return _build_config(None, backend, model, None, None, None, sets, {"engine.policy": policy})


def replay_steps(journal: Path, trace: Path, model: str, policy: str | None, sets: list[str],
                 limit: int | None, backend: str = "aiter"):
    """``(steps, calls, finished, prep)``: the steps the engine completed before ``journal`` ran
    out, replayed under the live run's configuration (checked against the journal's digest); the
    calls the journal answered; whether the run finished; the replay's prepared side (its
    configuration is the run's, with the profile backend)."""
    from benchmarks.journal_member_kv import JournalEnd, _PerCall, journal_head, replaying
    from simulator import Simulation, StepSink
    from specsched.setup import journal_config_digest, load_trace, prepare
    from traces.context import fit_context

    head = journal_head(journal)
    live_cfg = build_config(model, policy, sets, backend)
    prep = prepare(live_cfg.replace({"backend.name": "profile"}))
    want = journal_config_digest(prep.config.replace({"backend.name": backend}))
    if head.get("config_sha256") != want:
        given = " ".join([f"--model {model}", f"--policy {policy}", *(f"--set {x}" for x in sets)])
        raise SpecschedError(f"its configuration digest {str(head.get('config_sha256'))[:12]} is "
                             f"not that of {given} ({want[:12]}) under today's defaults: give the "
                             f"options the live run was started with (a run recorded under "
                             f"older defaults cannot be replayed)", path=journal)
    n = head.get("requests")
    if limit is not None and n is not None and int(n) != limit:
        raise SpecschedError(f"the journal is of the first {n} requests, not {limit}",
                             path=journal)
    tr = load_trace(trace, seed=prep.config.seed, limit=n if limit is None else limit)
    tr, _ = fit_context(tr, prep.model.context_len, prep.config.engine.context_overflow)
    with replaying(journal, prep.executor) as j:
        sink = StepSink(None, request_steps=False,
                        member_kv=prep.config.engine.record_member_kv)
        sim = Simulation(tr, prep.config, _PerCall(j), kv_capacity_tokens=prep.kv_capacity_tokens,
                         sink=sink, context_len=prep.model.context_len)
        try:
            sim.compile()
            sim.run()
            finished = True
        except JournalEnd:
            finished = False
            sim.buf.flush()  # the steps completed before the call the journal lacks
        steps, _ = sink.close()
    return steps, j.calls - 1 if not finished else j.calls, finished, prep


def score(steps, run_config, profile: str) -> dict:
    """Per-step figures of ``profile`` (a path, or ``shipped``) on ``steps``, looked up under
    the run's configuration (its model, tensor parallelism and ``backend.kv_lookup``)."""
    from analysis.fidelity.stats import step_errors, summarize
    from specsched.setup import prepare

    cfg = run_config.replace({"backend.name": "profile", "backend.profile": ""})
    if profile != "shipped":
        cfg = cfg.replace({"backend.profile": profile})
    table = prepare(cfg).executor.latency_table()
    e = step_errors(steps, table, kv_lookup=cfg.backend.kv_lookup, _full=True)
    arr = e["_arrays"]
    # per kind over all scored steps, on the grid or off it (the report's by-kind is off it)
    by_kind = {k: summarize(arr["err"][arr["ok"] & (arr["kind"] == k)]) for k in KINDS}
    return {"profile": profile, "steps": e["steps"], "mape_all_pct": e["mape_all_pct"],
            "mape_off_grid_pct": e["mape_off_grid_pct"],
            "by_kind": {k: {"steps": v["steps"], "mape_pct": v["mape_pct"],
                            "mean_signed_pct": v["mean_signed_pct"]}
                        for k, v in by_kind.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--journal", required=True, type=Path)
    ap.add_argument("--trace", required=True, type=Path)
    ap.add_argument("--model", required=True)
    ap.add_argument("--policy")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--backend", default="aiter", help="the live run's (default aiter)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--profile", action="append", required=True,
                    help="a profile parquet, or 'shipped' (repeatable)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    try:
        if a.json is not None and a.json.exists():
            raise SpecschedError("exists; choose a new file", path=a.json)
        steps, calls, finished, prep = replay_steps(a.journal, a.trace, a.model, a.policy, a.sets,
                                                 a.limit, a.backend)
        if steps.num_rows == 0:
            raise SpecschedError("the journal ends before the engine completed a step",
                                 path=a.journal)
        rows = [score(steps, prep.config, p) for p in a.profile]
    except SpecschedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = {"journal": str(a.journal), "calls_replayed": calls, "finished": finished,
           "steps": steps.num_rows, "profiles": rows}
    print(f"{a.journal}: {calls} calls replayed, {steps.num_rows} steps"
          f"{' (the run finished)' if finished else ' (cut off: per step only)'}")
    print("| profile | steps | per step all | off grid | "
          + " | ".join(f"{k} MAPE / signed" for k in KINDS) + " |")
    print("|---|---|---|---|" + "---|" * len(KINDS))
    for r in rows:
        cells = [f"{r['by_kind'][k]['mape_pct']:.2f}% / {r['by_kind'][k]['mean_signed_pct']:+.2f}%"
                 f" ({r['by_kind'][k]['steps']})" if k in r["by_kind"] and r["by_kind"][k]["steps"]
                 else "-" for k in KINDS]
        print(f"| {r['profile']} | {r['steps']} | {r['mape_all_pct']:.2f}% | "
              f"{r['mape_off_grid_pct']:.2f}% | " + " | ".join(cells) + " |")
    if a.json is not None:
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
