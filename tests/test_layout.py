"""The packages resolve to this checkout, and the import boundaries of docs/ARCHITECTURE.md hold."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_packages_resolve_to_this_checkout():
    import analysis
    import backends
    import simulator
    import specsched
    import traces

    for mod in (analysis, backends, simulator, specsched, traces):
        assert Path(mod.__file__).resolve().parent.parent == ROOT, mod.__file__


def test_engine_and_traces_do_not_import_torch():
    code = ("import sys, simulator, traces, backends.protocol, backends.latency_table; "
            "import specsched.cli; "
            "assert 'torch' not in sys.modules, 'torch was imported'; "
            "assert 'aiter' not in sys.modules, 'aiter was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_traces_imports_nothing_of_the_project():
    code = ("import sys, traces, traces.errors, traces.atomic; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('simulator','backends','analysis','specsched')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_docs_stand_alone():
    # the repository's docs (and docstrings) must not send a user to files it does not contain
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for pkg in ("specsched", "simulator", "traces", "backends", "analysis"):
        texts += sorted((ROOT / pkg).rglob("*.py"))
    bad = []
    for path in texts:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if "DESIGN.md" in line or "../shared" in line or "/work/shared" in line:
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)
