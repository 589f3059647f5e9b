"""benchmarks/gpu_live_session.sh, dry: every job's ``specsched`` command line parses.

Device time is the scarcest thing this project has, and a job whose command line no longer
parses (an option renamed or removed, a typo) fails on the GPU after the machine has started.
This runs the script on the CPU with ``python3`` replaced by a stub that parses each
``python3 -m specsched ...`` command with the real CLI (options, types, choices; nothing runs)
and succeeds for every other Python invocation, then requires every job's specsched commands
to parse. Every ``case`` label of the script must be matched by a job here, so a new job is
checked from the day it is written.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_live_session.sh"

#: one job per case label of the script (arguments where the label takes them)
JOBS = """info smoke tests prefill-wave-fill prefill-occupancy mla-tests host host-pin host-keep
graphlaunch replay stability mla straggler straggler2d straggler3d straggler70b straggler70b-wave2
bswaves70b bswaves8b straggler-mla straggler-mla-draft straggler8b-eager straggler8b-bs4
straggler-mla-order moe-prefill-sweep prefill-sweep:llama-3.1-8b prefill-protocols
prefill-protocols-short rates coarse8b profile8b heldout8b prefill-dense:llama-3.1-8b
prefill-dense:llama-3.1-70b prefill-line:llama-3.1-8b prefill-line:llama-3.1-70b calibrate8b
calibrate8b:a calibrate70b calibrate-conv:llama-3.1-8b:bucket:150
calibrate-conv:deepseek-v2-lite:pad:150 calibrate-conv:llama-3.1-70b:split:150 calibrate-v2lite
calibrate-v2lite:b calibrate-tokens:deepseek-v2-lite calibrate-tokens:llama-3.1-70b
capture-state capture-state70b capture-state8b capture-state-prefill
after-burst profile70b profile70b-prefill profile70b-eagerkv profile70b-eagerbs live-conv:150
live-split:150 live-convp:bucket:150 live-70bp:split:150 live-v2litep:pad:150 live-code
live-long:fixed live-long:split:180 live-long70b:fixed live-70b:400 live-adaptive:250
live-schedule:250 profile-v2lite profile-v2lite-long live-longmlap:deepseek-v2-lite:bucket
live-longmlap:deepseek-v2-lite:pad:100 live-v3p:split:60 live-longv2lite live-longv2lite:100
live-v2lite:400 v3-tests v3-moe profile-v3 profile-v3-long live-longv3 live-longv3:60 heldout-v3
firstpass70b stages70b stages70b:4 sweep70b sweepv3 firstpass8b eager-sync live-v3:60
live-v2lite-unsafe:60 fidelity-conv:150 fidelity-code""".split()

STUB = r'''
import sys
args = sys.argv[1:]
if args[:2] != ["-m", "specsched"]:
    sys.exit(0)  # pytest, benchmark scripts, the aiter check: not this test's business
import click
from specsched.cli import cli
try:
    ctx = cli.make_context("specsched", list(args[2:]))
    name, cmd, rest = cli.resolve_command(ctx, ctx.protected_args + ctx.args)
    cmd.make_context(name, rest, parent=ctx)
except click.exceptions.Exit:
    sys.exit(0)
except click.ClickException as e:
    print("STUB-REFUSED specsched " + " ".join(args[2:4]) + ": " + e.format_message())
    sys.exit(2)
print("STUB-PARSED specsched " + args[2])
'''


def _labels() -> list[str]:
    """The script's job case labels (each alternative of a ``a|b)`` label)."""
    text = SCRIPT.read_text()
    body = text[text.index('case "$j" in'):]
    out = []
    for m in re.finditer(r"^    ([a-z0-9:*|.-]+)\)", body, re.M):
        out += [x for x in m.group(1).split("|") if x != "*"]
    return out


def test_every_case_label_has_a_job_here():
    """Each job pattern of the script is matched by a job of :data:`JOBS`."""
    missing = [lab for lab in _labels() if not any(fnmatch.fnmatchcase(j, lab) for j in JOBS)]
    assert not missing, f"add a job for {missing} to JOBS"


def test_every_specsched_command_of_every_job_parses(tmp_path):
    """The script run with the stub: no job's specsched command is refused, and at least one
    command of each kind the jobs use (profile, calibrate, simulate, fidelity) parsed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    py = bin_dir / "python3"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {stub} \"$@\"\n")
    py.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", DEADLINE="100000",
               PYTHONPATH=str(ROOT))
    env.pop("SMI", None)
    res = subprocess.run(["bash", str(SCRIPT), "0", str(out), *JOBS], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    # the fidelity jobs send their stdout to OUT/fidelity_NAME.md, the rest to the log
    log = "\n".join(f.read_text() for f in [out / "gpu0.log", *sorted(out.glob("*.md"))])
    refused = [x for x in log.splitlines() if x.startswith("STUB-REFUSED")]
    assert not refused, "\n".join(refused)
    assert "unknown job" not in log, res.stdout[-2000:]
    parsed = {x.split()[2] for x in log.splitlines() if x.startswith("STUB-PARSED")}
    assert {"profile", "calibrate", "simulate", "fidelity"} <= parsed, parsed
