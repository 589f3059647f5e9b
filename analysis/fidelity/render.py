"""The fidelity report as markdown (``fidelity.md``, and what the command prints).

:func:`render_markdown` reads only the report dict, so a ``fidelity.json`` written by an older
version (without the grid-position, held-out or floor keys) renders too: what it lacks is left
out.
"""

from __future__ import annotations

import math

from analysis.fidelity.fragile import fragile_line
from analysis.fidelity.lookup import AXES
from analysis.fidelity.reach import reach_text
from backends.calibrate import factor_text
from backends.calibrate_residual import residual_line

__all__ = ["render_markdown"]

_LABELS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}


def _fmt(x, nd=2, pct=False):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:+.{nd}f}%" if pct else f"{x * 1e3:.{nd}f} ms"


def _abs(x) -> str:
    """A percentage without sign (MAPE, floors)."""
    return _fmt(x, pct=True).lstrip("+")


def _floor_col(d: dict, reps: bool) -> str:
    return f" {_abs(d.get('repeat_pct'))} |" if reps else ""


def _diff_rows(runs: dict, metrics, quantiles, floors: list[dict] | None = None,
               jitter: dict | None = None) -> list[str]:
    """Table rows ``| TTFT p50 | reference | other | difference |`` from ``compare_runs``, with
    the largest difference a repeat shows when ``floors`` (the repeats' comparisons) are given,
    and the jitter floor when ``jitter`` (check name -> floor, ``report["jitter"]``) is."""
    out = []
    for m in metrics:
        for q in quantiles:
            row = (f"| {_LABELS[m]} {q} | {_fmt(runs[m][q]['reference'])} | "
                   f"{_fmt(runs[m][q]['profile'])} | {_fmt(runs[m][q]['diff_pct'], pct=True)} |")
            if floors is not None:
                d = [abs(r[m][q]["diff_pct"]) for r in floors if r[m][q]["diff_pct"] is not None]
                row += f" {_abs(max(d)) if d else '-'} |"
            if jitter is not None:
                row += f" {_abs(jitter.get(f'{m[:-2]}_{q}'))} |"
            out.append(row)
    return out


def _steps_section(s: dict, reps: bool) -> list[str]:
    rh, rs = (" a repeat differs by |", "---|") if reps else ("", "")
    lines = [f"Steps compared: {s['steps']} ({s['off_grid_steps']} off the profile's measured "
             f"points, {s['on_grid_steps']} on them, {s['out_of_grid_steps']} outside its grid)."]
    floor = (f"; a repeat's passes of the same shape differ by {_abs(s.get('repeat_off_grid_pct'))}"
             if reps else "")
    lines.append(f"Per-step MAPE off the grid: **{_abs(s['mape_off_grid_pct'])}** (all steps: "
                 f"{_abs(s['mape_all_pct'])}"
                 + (f", on the grid: {_abs(s.get('mape_on_grid_pct'))}"
                    if "mape_on_grid_pct" in s else "")
                 + f"{floor}).")
    if s.get("not_predicted"):
        lines.append("Not scored (no lookup for the kind): "
                     + ", ".join(f"{n} {k}" for k, n in s["not_predicted"].items()) + ".")
    lines += ["", "| kind | steps | MAPE | mean signed | p90 abs |" + rh, "|---|---|---|---|---|" + rs]
    for k, d in s["by_kind"].items():
        lines.append(f"| {k} | {d['steps']} | {_abs(d['mape_pct'])} | "
                     f"{_fmt(d['mean_signed_pct'], pct=True)} | {_abs(d['p90_abs_pct'])} |"
                     + _floor_col(d, reps))
    axes = s.get("off_grid_axes")
    if axes:
        lines += ["", "## Off the grid, by axis", "",
                  "Steps off the profile's measured grid, by the way they are off (a step can be "
                  "off in several; the others sit on a measured point, where the profile replays "
                  "its own measurement).", "",
                  "| off the grid in | steps | MAPE | mean signed | p90 abs |" + rh,
                  "|---|---|---|---|---|" + rs]
        for a, d in axes.items():
            lines.append(f"| {AXES.get(a, a)} | {d['steps']} | {_abs(d['mape_pct'])} | "
                         f"{_fmt(d['mean_signed_pct'], pct=True)} | {_abs(d['p90_abs_pct'])} |"
                         + _floor_col(d, reps))
    lines += ["", "## By shape", "", "| shape | steps | MAPE | mean signed |" + rh,
              "|---|---|---|---|" + rs]
    for d in s["by_shape"]:
        lines.append(f"| {d['shape']} | {d['steps']} | {_abs(d['mape_pct'])} | "
                     f"{_fmt(d['mean_signed_pct'], pct=True)} |" + _floor_col(d, reps))
    return lines


def _sittings_section(sittings: list[dict]) -> list[str]:
    """Per-step error over each sitting of a reference run resumed from its journal."""
    kinds = list(dict.fromkeys(k for st in sittings for k in st["by_kind"]))
    lines = ["", "## By sitting of the reference run", "",
             "The reference run was recorded in several sittings (resumed from its journal); each "
             "sitting's steps were measured on its GPU. All steps, mean signed error by kind:", "",
             "| sitting | GPU | from step | steps | MAPE | mean signed | " + " | ".join(kinds) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(kinds)]
    for i, st in enumerate(sittings):
        per = [_fmt(st["by_kind"][k]["mean_signed_pct"], pct=True) if k in st["by_kind"] else "-"
               for k in kinds]
        lines.append(f"| {i} ({st['at'] or '?'}) | {st['gpu']} | {st['first_step']} | "
                     f"{st['steps']} | {_abs(st['mape_pct'])} | "
                     f"{_fmt(st['mean_signed_pct'], pct=True)} | " + " | ".join(per) + " |")
    return lines


def _heldout_section(h: dict) -> list[str]:
    lines = ["", "## Held-out points", "",
             f"held-out points: MAPE {_abs(h['mape_pct'])} over {h['points']} points (mean signed "
             f"{_fmt(h['mean_signed_pct'], pct=True)}; the points' own median p10..p90 spread: "
             f"{_abs(h['spread_pct'])}). Measured by the profile run, kept out of its grids.", "",
             "| kind | points | MAPE | mean signed |", "|---|---|---|---|"]
    for k, d in h["by_kind"].items():
        lines.append(f"| {k} | {d['steps']} | {_abs(d['mape_pct'])} | "
                     f"{_fmt(d['mean_signed_pct'], pct=True)} |")
    lines += ["", "| kind | graph | bs | width | KV | tokens | measured | predicted | error |",
              "|---|---|---|---|---|---|---|---|---|"]
    for d in h["worst"]:
        lines.append(f"| {d['kind']} | {d['graph']} | {d['bs']} | {d['width']} | {d['kv']} | "
                     f"{d['tokens']} | {_fmt(d['measured_s'], 3)} | {_fmt(d['predicted_s'], 3)} | "
                     f"{_fmt(d['error_pct'], pct=True)} |")
    return lines


def _gpus(ids: str) -> str:
    return ("GPUs " if "," in ids else "GPU ") + ids


def recorded_on(m: dict) -> str:
    """The "Recorded on" line: which GPUs recorded each side and what they share."""
    head = (f"Recorded on: the profile on {_gpus(m['profile_gpu'])}, the reference run on "
            f"{_gpus(m['reference_gpu'])}: ")
    shared = m.get("shared_gpus") or []
    if m["same_gpu"]:
        return head + "the same GPU."
    if shared:
        return head + f"{_gpus(', '.join(shared))} recorded part of both."
    one = "," not in m["profile_gpu"] and "," not in m["reference_gpu"]
    return head + ("another GPU." if one else "no GPU in common.")


def render_markdown(report: dict, *, reference: str) -> str:
    """``fidelity.md`` from a report dict (``analysis.fidelity.report.build_report``)."""
    s = report["steps"]
    reps = report.get("reference_repeats") or []
    lines = ["# Fidelity: profile backend vs " + reference, ""]
    status = (report.get("profile") or {}).get("validation")
    if status:  # the shipped profiles' record (backends/profiles/validation.json) at the time
        lines += [f"Profile status: {status['status']}"
                  + (f": {status['reason']}" if status.get("reason") else "") + ".", ""]
    m = report.get("machines") or {}
    if m.get("same_gpu") is not None:
        lines += [recorded_on(m), ""]
    gm = report.get("gpu_models")
    if gm:
        lines += [f"GPU models differ: the profile is of an {gm['profile']}, the {reference} run "
                  f"ran on an {gm['reference']}. The figures below measure how far apart the two "
                  "models are as much as the profile's fidelity; `specsched calibrate` on that "
                  "GPU fits the profile to it (docs/aiter.md, \"On another GPU model\").", ""]
    cal = (report.get("profile") or {}).get("calibration")
    if cal and cal.get("factors"):
        kept = cal.get("not_applied") or {}
        lines += [f"Profile calibrated on {cal['gpu']} at {cal['at']} from {cal['base']} "
                  f"({cal['anchors']} anchors): factors "
                  + ", ".join(factor_text(g, f, kept.get(g), applied=g not in kept)
                              for g, f in cal["factors"].items()) + ".", ""]
        if cal.get("residual"):
            lines += [residual_line(cal["residual"]), ""]
        if cal.get("kv_reach"):
            lines += [reach_text(cal["kv_reach"]), ""]
    rec = (cal or {}).get("recentred")
    if rec:
        lead = "Then re-centred" if cal.get("factors") else "Profile re-centred"
        lines += [f"{lead} on the live run {rec['run']} (`calibrate --from-run`): "
                  "factors " + ", ".join(f"{g} {f:.4f}" for g, f in
                                                   rec["factors"].items()) + ".", ""]
    lines += _steps_section(s, bool(reps))
    if report.get("heldout"):
        lines += _heldout_section(report["heldout"])
    if report.get("by_sitting"):
        lines += _sittings_section(report["by_sitting"])
    st = s.get("stragglers")
    if st and st["steps"]:
        lines += ["", "## Batches with a straggler", "",
                  f"{st['steps']} verify and draft steps ({st['share_of_steps_pct']:.1f}%) have a "
                  f"straggler ({st['rule']} tokens): MAPE {_abs(st['mape_pct'])} "
                  f"(mean signed {_fmt(st['mean_signed_pct'], pct=True)}) at the coordinate the "
                  f"profile looks them up at; {_abs(st['mape_at_mean_kv_pct'])} "
                  f"({_fmt(st['mean_signed_at_mean_kv_pct'], pct=True)}) looked up at the mean KV"
                  + (f"; a repeat's passes of the same shape differ by {_abs(st['repeat_pct'])}."
                     if "repeat_pct" in st else ".")]
    lines += ["", "## Worst steps", "", "| step | kind | graph | bs | width | KV | measured | "
              "predicted | error |", "|---|---|---|---|---|---|---|---|---|"]
    for d in s["worst"]:
        lines.append(f"| {d['step']} | {d['kind']} | {d['graph']} | {d['bs']:g} | {d['width']:g} | "
                     f"{d['kv']:g} | {_fmt(d['measured_s'], 3)} | {_fmt(d['predicted_s'], 3)} | "
                     f"{_fmt(d['error_pct'], pct=True)} |")
    runs = report["runs"]
    floors = [r["runs"] for r in reps] if reps else None
    rh, rs = (" a repeat differs by |", "---|") if reps else ("", "")
    jit = report.get("jitter")
    jfloor = jit["floor_pct"] if jit and jit.get("floor_pct") else None
    if jfloor is not None:
        rh, rs = rh + " jitter floor |", rs + "---|"
    lines += ["", "## Whole runs", ""]
    if jit:
        lines += [_jitter_line(jit), ""]
    lines += [f"| metric | {reference} | profile | difference |" + rh, "|---|---|---|---|" + rs]
    lines += _diff_rows(runs, ("ttft_s", "tpot_s", "e2e_s"), ("p50", "p90", "p99"), floors,
                        jfloor)
    th = runs.get("throughput_tok_s") or {}
    if th.get("reference") is not None:
        row = (f"| throughput | {th['reference']:.1f} tok/s | {_fmt_num(th.get('profile'))} tok/s | "
               f"{_fmt(th.get('diff_pct'), pct=True)} |")
        if reps:
            d = [abs(r["runs"]["throughput_tok_s"]["diff_pct"]) for r in reps
                 if (r["runs"].get("throughput_tok_s") or {}).get("diff_pct") is not None]
            row += f" {_abs(max(d)) if d else '-'} |"
        if jfloor is not None:
            row += f" {_abs(jfloor.get('throughput'))} |"
        lines.append(row)
    deb = report.get("runs_debiased")
    if deb:
        f = deb["factors"]
        timed = any("time_signed_pct" in d
                    for d in ((report.get("steps") or {}).get("by_kind") or {}).values())
        lines += ["", "## Whole runs, the profile's per-kind bias removed (a what-if)", "",
                  "The profile's values scaled by "
                  + ", ".join(f"{k} x{v:.4f}" for k, v in f.items())
                  + (" (each kind's time-weighted signed error divided out)" if timed else
                     " (each kind's mean signed step error divided out)")
                  + ": what remains is not the kinds' bias but how the error is distributed "
                  "(queueing, transients, shape mix).", "",
                  f"| metric | {reference} | profile, debiased | difference |", "|---|---|---|---|"]
        lines += _diff_rows(deb, ("ttft_s", "tpot_s"), ("p50", "p99"))
    if report.get("paired"):
        lines += _paired_section(report["paired"], reference)
    for r in reps:
        lines += ["", f"## The {reference} run against a repeat of it", "",
                  f"`{r['run']}`: the same trace and configuration, run again on the GPU. How far "
                  "two runs of the reference differ is the floor under the whole-run checks.", "",
                  f"| metric | {reference} | repeat | difference |", "|---|---|---|---|"]
        lines += _diff_rows(r["runs"], ("ttft_s", "tpot_s"), ("p50", "p99"))
        ms = r["matched_shape_ratio"]
        lines += ["", "Passes of the same shape, repeat / " + reference + " (median per shape, "
                  "weighted): " + ", ".join(
                      f"{k} {_fmt((v['ratio'] - 1) * 100, pct=True)} over {v['shapes']} shapes"
                      for k, v in ms.items() if v["ratio"] is not None) + "."]
    lines += _checks_section(report, bool(reps))
    lines += ["", "## What the profile model does not capture", ""]
    lines += [f"- {x}" for x in report["not_captured"]]
    return "\n".join(lines) + "\n"


def _paired_section(p: dict, reference: str) -> list[str]:
    """Each request's simulated figure against its live one (``report["paired"]``)."""
    reps = any("repeats" in d for d in p.values())
    lines = ["", "## Per request", "",
             f"Each request's profile figure against its own {reference} figure (requests "
             "finished in both runs): the median is the bias a typical request sees, p10 and p90 "
             "how far single requests scatter. No request changes rank, so a gap in the live "
             "distribution at a percentile moves none of these"
             + (f"; the last columns: the same for the repeat against the {reference} run (the "
                "floor under them)." if reps else "."), "",
             "| metric | requests | median | p10 | p90 | within 3% |"
             + (" repeat: median | repeat: p10 .. p90 |" if reps else ""),
             "|---|---|---|---|---|---|" + ("---|---|" if reps else "")]
    for m, d in p.items():
        share = d.get("within_target_share")
        row = (f"| {m.upper()} | {d['requests']} | {_fmt(d['median_pct'], pct=True)} | "
               f"{_fmt(d['p10_pct'], pct=True)} | {_fmt(d['p90_pct'], pct=True)} | "
               f"{'-' if share is None else f'{share:.0%}'} |")
        if reps:
            rr = d.get("repeats") or []
            row += (" " + ", ".join(_fmt(r["median_pct"], pct=True) for r in rr) + " | "
                    + ", ".join(f"{_fmt(r['p10_pct'], pct=True)} .. {_fmt(r['p90_pct'], pct=True)}"
                                for r in rr) + " |")
        lines.append(row)
    return lines


def _fmt_num(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def _jitter_line(jit: dict) -> str:
    """One sentence: how the jitter floor was made (``report["jitter"]``)."""
    if jit.get("sigma_pct") is None:
        return ("Jitter floor: not known (the profile records no p10..p90 spread to draw per-pass "
                "noise from).")
    return (f"Jitter floor: the largest difference from the profile run of {jit['runs']} re-runs "
            f"of the profile side with each pass x exp(sigma z), sigma {jit['sigma_pct']:.2f}% "
            "(the profile's median p10..p90 spread / 2.563), seed "
            f"{jit['seed']}. It is the queue's amplification of per-pass noise; it does not "
            "cover an offset between machines or a bias of the profile.")


def _offset_cell(c: dict) -> str:
    """A whole-run check's values with every pass 1% faster / slower; ``-`` for other checks."""
    v = c.get("offset_pct")
    if not v:
        return " - |"
    cell = " / ".join(_fmt(x, pct=True) for x in v)
    return f" {cell}{' (flips)' if c.get('offset_flips') else ''} |"


def _offset_line(off: dict, checks: dict) -> str:
    """One sentence: the whole-run checks a uniform offset of every pass would decide."""
    flips = [n for n, c in checks.items() if c.get("offset_flips")]
    d = off["pct"]
    return (f"Offset: every profile pass x{1 - d / 100:g} and x{1 + d / 100:g} (machines differ by "
            f"about this much) changes the verdict of {len(flips)} of "
            f"{sum(1 for c in checks.values() if 'offset_pct' in c)} whole-run checks"
            + (f" ({', '.join(flips)}): those rest on the machines' agreement." if flips else "."))


def _checks_section(report: dict, reps: bool) -> list[str]:
    jit = bool((report.get("jitter") or {}).get("floor_pct"))
    off = report.get("offset")
    x = f"x{1 - off['pct'] / 100:g} / x{1 + off['pct'] / 100:g}" if off else ""
    head = ("| check | value | target | pass |" + (" a repeat differs by |" if reps else "")
            + (" jitter floor |" if jit else "") + (f" at {x} |" if off else ""))
    lines = ["", "## Checks", "", head,
             "|---|---|---|---|" + ("---|" if reps else "") + ("---|" if jit else "")
             + ("---|" if off else "")]
    noise = 0
    for name, c in report["checks"].items():
        what = name
        if c.get("band"):
            what += f" ({c['band']}, {c['steps']} steps)"
        verdict = {True: "yes", False: "NO", None: "n/a"}[c["pass"]]
        if c.get("within_noise"):
            verdict += " (within noise)"
            noise += 1
        lines.append(f"| {what} | {_fmt(c['value_pct'], pct=True)} | <= {c['target_pct']}% | "
                     f"{verdict} |" + _floor_col(c, reps)
                     + (f" {_abs(c.get('jitter_pct'))} |" if jit else "")
                     + (_offset_cell(c) if off else ""))
    passed = [c["pass"] for c in report["checks"].values() if c["pass"] is not None]
    missed = sum(1 for p in passed if not p)
    lines += ["", f"{sum(passed)} of {len(passed)} checks met."
              + (f" Misses within the target plus the jitter floor (within noise): {noise} of "
                 f"{missed}." if jit and missed else "")
              + ("" if reps else " No --repeat-run was given, so the noise floor under each "
                 "figure is not known" + (" (the jitter floor is simulated)." if jit else "."))]
    if off:
        lines += ["", _offset_line(off, report["checks"])]
    fragile = fragile_line(report.get("fragile") or {})
    if fragile:
        lines += ["", fragile]
    return lines
