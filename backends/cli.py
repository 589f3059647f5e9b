"""The ``verify-metadata`` and ``profile`` commands (registered in ``specsched/cli.py``);
``calibrate`` is in :mod:`backends.cli_calibrate`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from backends.heldout import DEFAULT_HELDOUT
from traces.errors import SpecschedError

__all__ = ["verify_metadata", "profile", "parse_int_list", "verify_metadata_json"]


def parse_int_list(text: str, *, option: str, minimum: int = 0) -> list[int]:
    """``"4,4,2"``, ``"[4,4,2]"``, ranges ``"1-8"`` and repeats ``"4x32"`` (32 times 4)
    (``traces.textlist``: the same forms as ``--set`` list values)."""
    from traces.textlist import parse_int_list as parse

    return parse(text, what=option, minimum=minimum)


def verify_metadata_json(widths: list[int], kv_lens: list[int], *, mla: bool = False,
                         num_draft_tokens: int | None = None, page_size: int = 16,
                         capture_bs: list[int] | None = None, capture_widths: list[int] | None = None,
                         max_context: int | None = None, num_heads: int | None = None) -> dict[str, Any]:
    """What ``specsched verify-metadata --json`` prints, as a dict (a test can call this)."""
    from backends.aiter import metadata as md

    return md.build_verify_metadata(
        widths, kv_lens, mla=mla, num_draft_tokens=num_draft_tokens, page_size=page_size,
        capture_bs=md.SPEC_CAPTURE_BS if capture_bs is None else capture_bs,
        capture_widths=md.DEFAULT_CAPTURE_WIDTHS if capture_widths is None else capture_widths,
        max_context=md.DEFAULT_MAX_CONTEXT if max_context is None else max_context,
        num_heads=num_heads, allow_graph=capture_bs is None or len(capture_bs) > 0).to_dict()


def _human(d: dict[str, Any]) -> str:
    lines = []
    path = "MLA (width fixed at start-up)" if d["path"] == "mla" else "non-MLA unified (width = tokens // bs)"
    lines.append(f"path        {path}")
    lines.append(f"batch       bs {d['bs']}, {d['tokens']} query rows -> "
                 + (f"graph replay at padded bs {d['padded_bs']}" if d["graph"]
                    else f"eager ({d['eager_reason']})"))
    lines.append(f"width       {d['width']}  (max_seqlen_q {d['max_seqlen_q']}, max_seqlen_k {d['max_seqlen_k']})")
    lines.append(f"seq_lens    {d['seq_lens']}  (padded rows: {d['seq_len_fill_value']})")
    lines.append(f"qo_indptr   {d['qo_indptr']}")
    lines.append(f"kv_indptr   {d['kv_indptr']}")
    if d["seqused_k"] is not None:
        lines.append(f"seqused_k   {d['seqused_k']}")
    cap = d["kv_indices_capacity"]
    lines.append(f"kv_indices  {d['kv_indices_needed']} needed"
                 + (f" of {cap} (assert_buffer_fits)" if cap is not None else " (eager: no captured buffer)"))
    if d["mla"]:
        lines.append(f"mla         {d['mla']}")
    for n in d["notes"]:
        lines.append(f"note        {n}")
    lines.append(f"error       {d['error'] or 'none: SGLang runs this batch'}")
    v = d["violation"]
    if v is None:
        lines.append("violation   none (uniform batch)")
    else:
        lines.append(f"violation   {v['misattributed_rows']} of {d['tokens']} query rows attributed to the "
                     f"wrong request ({v['rows_past_layout']} past bs x width), {v['misplaced_rows']} "
                     f"at the wrong position; real qo_indptr {v['real_qo_indptr']}")
    return "\n".join(lines)


@click.command("verify-metadata")
@click.option("--widths", required=True, metavar="LIST",
              help="Query rows per request (last committed token + drafts), e.g. 4,4,2 or 4x32.")
@click.option("--kv-lens", required=True, metavar="LIST",
              help="Tokens each request has cached before the verify (SGLang's seq_lens), e.g. 100,200,300.")
@click.option("--mla", is_flag=True, help="The MLA path: width fixed at --num-draft-tokens.")
@click.option("--num-draft-tokens", type=int, default=None,
              help="SGLang's speculative_num_draft_tokens (required with --mla; default: the largest width).")
@click.option("--page-size", type=int, default=16, show_default=True, help="KV page size in tokens.")
@click.option("--capture-bs", default=None, metavar="LIST",
              help="Captured batch sizes (default: SGLang's speculative ladder 1-8,10-32/2,40-64/4,72-256/8); "
                   "'none' for no graphs.")
@click.option("--capture-widths", default=None, metavar="LIST",
              help="Widths with captured graphs on the non-MLA path (default 1-8).")
@click.option("--max-context", type=int, default=None,
              help="The model's context length (sizes the page table and max_seqlen_k; default 131072).")
@click.option("--num-heads", type=int, default=None,
              help="Query heads per GPU, checked against the MLA kernels (with --mla).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def verify_metadata(widths, kv_lens, mla, num_draft_tokens, page_size, capture_bs, capture_widths,
                    max_context, num_heads, as_json):
    """Print the attention metadata SGLang's AITER backend gives a verify batch.

    \b
    Examples:
      specsched verify-metadata --widths 4,4,2 --kv-lens 100,200,300 --json
      specsched verify-metadata --widths 4x3 --kv-lens 100,200,300 --mla --num-draft-tokens 4
      specsched verify-metadata --widths 4x300 --kv-lens 2000x300 --json     # beyond the ladder: eager

    The non-MLA path derives the width as tokens // bs; a mixed batch gets the wrong
    qo_indptr and the "violation" object says which rows land in the wrong request.  "error"
    is set when SGLang would refuse the batch (an MLA width the kernels lack, a KV-index buffer
    overflow).  Exit code 0 whenever the metadata was printed, 2 for arguments that do not
    describe a batch.
    """
    w = parse_int_list(widths, option="--widths", minimum=1)
    kv = parse_int_list(kv_lens, option="--kv-lens", minimum=1)
    cbs = None
    if capture_bs is not None:
        cbs = [] if capture_bs.strip().lower() == "none" else parse_int_list(capture_bs, option="--capture-bs", minimum=1)
    cw = None if capture_widths is None else parse_int_list(capture_widths, option="--capture-widths", minimum=1)
    if page_size < 1:
        raise SpecschedError(f"--page-size must be >= 1, got {page_size}")
    d = verify_metadata_json(w, kv, mla=mla, num_draft_tokens=num_draft_tokens, page_size=page_size,
                             capture_bs=cbs, capture_widths=cw, max_context=max_context,
                             num_heads=num_heads)
    if as_json:
        click.echo(json.dumps(d))
    else:
        click.echo(_human(d))


def executor_setup_options(command):
    """The live executor's setup options that `profile` and `calibrate` share (--settle-s,
    --page-size, --max-context, --kv-pool-gib), in that order in --help."""
    for option in reversed((
            click.option("--settle-s", type=float, default=0.2, show_default=True,
                         help="Untimed running before the first point of each graph and eager section."),
            click.option("--page-size", type=int, default=16, show_default=True),
            click.option("--max-context", type=int, default=None, help="Context length (default 131072)."),
            click.option("--kv-pool-gib", type=float, default=None,
                         help="Physical KV pool size (default: what fits)."))):
        command = option(command)
    return command


@click.command("profile")
@click.option("--model", required=True, help="Preset name (e.g. llama-3.1-8b) or a config.json path.")
@click.option("--tp", type=int, default=None, help="Tensor-parallel degree (default: the preset's).")
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False),
              help="Profile parquet file to write (atomically).")
@click.option("--bs", default=None, metavar="LIST",
              help="Verify, draft and draft-extend graph batch sizes (ladder points).")
@click.option("--widths", default=None, metavar="LIST",
              help="Verify widths (default 1-8; MLA models: 1-4, width 3 timed as 4).")
@click.option("--kv-lens", default=None, metavar="LIST",
              help="KV lengths (default 128,512,1024,2048,4096,8192,16384,32768).")
@click.option("--eager-bs", default=None, metavar="LIST",
              help="Eager verify, draft and draft-extend batch sizes.")
@click.option("--eager-widths", default=None, metavar="LIST", help="Eager verify widths.")
@click.option("--eager-kv-lens", default=None, metavar="LIST", help="Eager KV lengths.")
@click.option("--prefill-tokens", default=None, metavar="LIST", help="Prefill chunk sizes.")
@click.option("--prefill-prefix", default=None, metavar="LIST", help="Prefill cached prefixes.")
@click.option("--prefill-line", type=int, default=0, show_default=True, metavar="N",
              help="Also time one-request prefills at prefix 0 at every count from 1 to N, read "
                   "at the exact count (split=line; docs/backends.md, \"Prefill line\"): about "
                   "550 s for N=1536 on Llama-3.1-8B; 0 turns it off.")
@click.option("--extend-widths", default=None, metavar="LIST",
              help="Draft-extend graph widths (rows per request: SGLang's speculative_num_steps "
                   "+ 1; default 2-8; MLA models: 2-4, width 3 timed as 4).")
@click.option("--extend-eager-widths", default=None, metavar="LIST",
              help="Eager draft-extend widths (over the eager batch sizes and KV lengths; "
                   "default 1,2,4,8; MLA models: 1,2,4).")
@click.option("--no-extend", is_flag=True, help="Skip the draft-extend pass (the profile backend then "
                                                "times it as one draft-decode pass, and says so).")
@click.option("--draft-kind", type=click.Choice(["eagle", "eagle3"]), default="eagle",
              show_default=True, help="The EAGLE draft model: SGLang's llama_eagle (fc over "
                                      "embedding + hidden) or llama_eagle3 (fusion of 3 target layers).")
@click.option("--extend-logits", type=click.Choice(["last", "all"]), default="last",
              show_default=True, help="Draft-extend logits: each request's last row (SGLang's EAGLE "
                                      "worker) or every row (its overlap worker, spec v2).")
@click.option("--reps", type=int, default=5, show_default=True, help="Timed repetitions per graph point.")
@click.option("--warmup", type=int, default=2, show_default=True, help="Untimed runs before them.")
@click.option("--eager-reps", type=int, default=5, show_default=True, help="Timed repetitions per eager point.")
@executor_setup_options
@click.option("--gpu", "gpu_sheet", default="H200", show_default=True,
              help="GPU sheet for the modelled tensor-parallel all-reduce.")
@click.option("--progress", is_flag=True, help="Show progress on stderr even when it is not a terminal.")
@click.option("--heldout", type=int, default=DEFAULT_HELDOUT, show_default=True, metavar="N",
              help="After the grid, measure N random shapes off it (split=heldout, kept out of "
                   "the tables, scored by `specsched fidelity`); 0 turns it off.")
@click.option("--heldout-seed", type=int, default=0, show_default=True, metavar="S",
              help="Seed the held-out shapes are drawn from.")
@click.option("--heldout-only", is_flag=True,
              help="Measure only held-out points, off the grid of --base, and write the base's "
                   "rows plus them to -o (a new file).")
@click.option("--base", type=click.Path(dir_okay=False), default=None, metavar="PROFILE.parquet",
              help="With --heldout-only: the profile whose grid the points are held out from.")
@click.option("--journal", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Keep each grid row in FILE as it is measured. Run again with the same FILE "
                   "and settings, the sweep takes the rows FILE holds and measures the rest: a "
                   "profile longer than one sitting (held-out shapes are measured afresh).")
def profile(model, tp, out, bs, widths, kv_lens, eager_bs, eager_widths, eager_kv_lens, prefill_tokens,
            prefill_prefix, prefill_line, extend_widths, extend_eager_widths, no_extend, draft_kind,
            extend_logits, reps, warmup, eager_reps, settle_s, page_size, max_context,
            kv_pool_gib, gpu_sheet, progress, heldout, heldout_seed, heldout_only, base, journal):
    """Record a latency profile of MODEL on this machine's GPU (AITER executor).

    \b
    Examples:
      specsched profile --model llama-3.1-8b -o backends/profiles/llama-3.1-8b__H200.parquet
      specsched profile --model llama-3.1-70b --tp 8 --bs 1,8,32,128 -o 70b.parquet
      specsched profile --model llama-3.1-8b --heldout-only --heldout 48 \\
          --base backends/profiles/llama-3.1-8b__H200.parquet -o 8b_heldout.parquet

    Sweeps verify graph replays over batch sizes x widths x KV lengths (one graph per batch
    size and width, KV varied through the metadata), eager verify launches, draft-model steps,
    draft-extend passes (graphs over batch sizes x --extend-widths x KV lengths, eager at a few
    points) and prefill passes, each repeated; writes the median and the 10th/90th percentiles
    per point (schema: docs/aiter.md).  Then measures --heldout shapes off that grid, drawn from
    --heldout-seed (docs/backends.md, "Held-out points").  Needs a CUDA or ROCm GPU (exit 2
    without one).
    """
    from backends.aiter import bridge
    from backends.aiter.profiling import DEFAULT_BS, DEFAULT_KV, ProfileSpec, run_profile
    from backends.models import load_model

    from pathlib import Path

    from traces.atomic import check_output_file

    inputs = (model,) if Path(model).is_file() else ()
    if heldout < 0:
        raise SpecschedError(f"--heldout must be >= 0, got {heldout}")
    if heldout_only:
        grid_opts = {"--bs": bs, "--widths": widths, "--kv-lens": kv_lens, "--eager-bs": eager_bs,
                     "--eager-widths": eager_widths, "--eager-kv-lens": eager_kv_lens,
                     "--prefill-tokens": prefill_tokens, "--prefill-prefix": prefill_prefix,
                     "--prefill-line": prefill_line or None, "--extend-widths": extend_widths,
                     "--extend-eager-widths": extend_eager_widths, "--no-extend": no_extend or None}
        _check_heldout_only(out, base, heldout, [k for k, v in grid_opts.items() if v is not None])
        inputs += (base,)
    elif base is not None:
        raise SpecschedError("--base is read only with --heldout-only (a full profile measures "
                             "its own grid)")
    if journal is not None and (heldout_only or Path(journal).resolve() in
                                {Path(out).resolve(), *(Path(i).resolve() for i in inputs)}):
        raise SpecschedError(f"--journal {journal}: " + (
            "not with --heldout-only (held-out shapes are measured afresh)" if heldout_only else
            "the output file or a file this command reads"))
    check_output_file(out, inputs=inputs, kind="parquet")  # before the measurements, not after
    bridge.require_gpu()
    shape = load_model(model, tp=tp, draft_kind=draft_kind)
    if heldout_only:
        _profile_heldout_only(shape, out, base, heldout, heldout_seed, progress,
                              ProfileSpec(reps=reps, warmup=warmup, eager_reps=eager_reps,
                                          settle_s=settle_s),
                              _executor_opts(gpu_sheet, page_size, extend_logits, max_context,
                                             kv_pool_gib))
        return

    def lst(text, name, default, minimum=1):
        return default if text is None else parse_int_list(text, option=name, minimum=minimum)

    # MLA models: only the widths AITER's MLA kernels take (1, 2, 4; 3 runs as 4), checked here
    # rather than at the first refused point of the sweep
    mla = shape.is_mla
    spec = ProfileSpec(
        bs=lst(bs, "--bs", DEFAULT_BS),
        widths=lst(widths, "--widths", (1, 2, 3, 4) if mla else tuple(range(1, 9))),
        kv=lst(kv_lens, "--kv-lens", DEFAULT_KV),
        eager_bs=lst(eager_bs, "--eager-bs", ProfileSpec.eager_bs),
        eager_widths=lst(eager_widths, "--eager-widths", (1, 2, 4) if mla else ProfileSpec.eager_widths),
        eager_kv=lst(eager_kv_lens, "--eager-kv-lens", ProfileSpec.eager_kv),
        prefill_tokens=lst(prefill_tokens, "--prefill-tokens", ProfileSpec.prefill_tokens),
        prefill_prefix=lst(prefill_prefix, "--prefill-prefix", ProfileSpec.prefill_prefix, 0),
        prefill_line=prefill_line, extend=not no_extend,
        extend_widths=lst(extend_widths, "--extend-widths",
                          (2, 3, 4) if mla else ProfileSpec.extend_widths),
        extend_eager_widths=lst(extend_eager_widths, "--extend-eager-widths",
                                (1, 2, 4) if mla else ProfileSpec.extend_eager_widths),
        reps=reps, warmup=warmup, eager_reps=eager_reps, settle_s=settle_s)
    spec.check()
    if mla:
        from backends.aiter.mla import mla_kernel_width

        for w in sorted(set(spec.widths) | set(spec.eager_widths)):
            mla_kernel_width(w)
        if spec.extend:
            for w in sorted(set(spec.extend_widths) | set(spec.extend_eager_widths)):
                mla_kernel_width(w, "draft-extend")
    opts = _executor_opts(gpu_sheet, page_size, extend_logits, max_context, kv_pool_gib)
    summary = _with_progress(progress, lambda prog, log: run_profile(
        shape, out, spec, executor_opts=opts, command=_command(), progress=prog, log=log,
        heldout=heldout, heldout_seed=heldout_seed, journal=journal))
    click.echo(json.dumps({k: summary[k] for k in ("rows", "out", "skipped", "heldout",
                                                      "prefill_line", "timed_runs_still_starved",
                                                      "rows_from_journal", "wall_s")}))


def _executor_opts(gpu_sheet, page_size, extend_logits, max_context, kv_pool_gib) -> dict[str, Any]:
    opts: dict[str, Any] = {"gpu": gpu_sheet, "page_size": page_size, "extend_logits": extend_logits}
    if max_context is not None:
        opts["max_context"] = max_context
    if kv_pool_gib is not None:
        opts["kv_pool_gib"] = kv_pool_gib
    return opts


def _command() -> str:
    return "specsched profile " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "specsched profile"


def _with_progress(progress: bool, work):
    """``work(progress_callback, log)`` with a progress bar and log lines on stderr when it is a
    terminal or ``--progress`` was given (both silent otherwise)."""
    show = progress or sys.stderr.isatty()

    def log(msg: str) -> None:
        if show:
            click.echo(msg, err=True)

    if not show:
        return work(None, log)
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task("profiling", total=None)

        def prog(what, done, total):
            bar.update(task, completed=done, total=total, description=what)

        return work(prog, log)


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (any spelling, links included; a missing file is itself)."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    return Path(a).exists() and Path(b).exists() and os.path.samefile(a, b)


def _check_heldout_only(out: str, base: str | None, heldout: int, grid_opts: list[str]) -> None:
    """Refuse a ``--heldout-only`` call that cannot do what it says, before the GPU is touched;
    the base file is read and validated here."""
    from backends.profile import read_profile

    if base is None:
        raise SpecschedError("--heldout-only needs --base PROFILE.parquet: the profile whose grid "
                             "the points are held out from")
    if heldout == 0:
        raise SpecschedError("--heldout-only with --heldout 0 would measure nothing")
    if grid_opts:
        raise SpecschedError(f"{', '.join(grid_opts)}: the grid is the --base file's with "
                             "--heldout-only (no grid is measured)")
    if same_file(out, base):
        raise SpecschedError(f"-o {out} is the --base file: --heldout-only writes the base's rows "
                             "and the held-out points to a new file and never overwrites the base")
    read_profile(base)


def _profile_heldout_only(shape, out, base, heldout, seed, progress, spec, opts) -> None:
    from backends.aiter.heldout_sweep import run_heldout_only

    spec.check()
    summary = _with_progress(progress, lambda prog, log: run_heldout_only(
        shape, out, base, spec, n=heldout, seed=seed, executor_opts=opts, command=_command(),
        progress=prog, log=log))
    click.echo(json.dumps({k: summary[k] for k in ("rows", "out", "base_rows", "heldout",
                                                   "wall_s")}))
