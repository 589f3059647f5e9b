"""backends and its CPU executors never import torch or aiter."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_backends_do_not_import_torch():
    code = ("import sys, backends; from backends import make_executor; "
            "import backends.models, backends.hardware, backends.roofline, backends.profile; "
            "import backends.heldout, backends.cli, backends.cli_calibrate, backends.calibrate; "
            "make_executor('roofline', model='llama-3.1-8b'); "
            "assert 'torch' not in sys.modules and 'aiter' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
