"""Open a `specsched report` HTML file in headless Chromium, take a screenshot, and check that
every plot rendered.

    python benchmarks/screenshot_report.py                      # simulate the sample trace (pad
                                                                # and split), report, check
    python benchmarks/screenshot_report.py report.html [-o shot.png]

Two checks, both must pass:

1. DOM: Chromium's ``--dump-dom`` gives the page after its scripts ran; the report's inline
   script marks every ``<figure class="plot">`` with ``data-rendered`` (its SVG was laid out
   with a size and has drawn elements) and ``data-box`` (where it is on the page), and the
   body with ``data-figures-rendered="k/n"``.
2. Pixels: in the screenshot, the box of every figure must hold drawn (non-white) pixels.

Prints one line per figure and a summary; exits 1 when a plot did not render, 2 when Chromium
is missing (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1300

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(chromium: str, args: list[str], profile: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


def check(html: str | Path, png: str | Path) -> dict:
    """Render ``html``, write the screenshot to ``png``, and report what rendered."""
    import numpy as np
    from matplotlib import image as mpimg

    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("chromium is not installed (Debian: apt-get install chromium)")
    url = Path(html).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="specsched-chromium-") as prof:
        dom = _run(chromium, [f"--window-size={WIDTH},1000", "--dump-dom", url], prof).stdout
    m = re.search(r'data-figures-rendered="(\d+)/(\d+)"', dom)
    tags = re.findall(r'(<figure class="plot" id="([^"]+)"[^>]*>)', dom)
    attrs = {fid: tag for tag, fid in tags}
    figures = [fid for _, fid in tags]
    boxes = {}
    for fid, tag in attrs.items():
        b = re.search(r'data-box="([\d,.-]+)"', tag)
        boxes[fid] = [int(float(x)) for x in b.group(1).split(",")] if b else None
    height = max([b[1] + b[3] for b in boxes.values() if b] + [1000]) + 40
    with tempfile.TemporaryDirectory(prefix="specsched-chromium-") as prof:
        _run(chromium, [f"--window-size={WIDTH},{height}", f"--screenshot={png}", url], prof)
    img = mpimg.imread(str(png))[..., :3]
    per = []
    for fid in figures:
        tag = attrs[fid]
        rendered = 'data-rendered="1"' in tag
        b = boxes.get(fid)
        ink = 0.0
        if b:
            x, y, w, h = b
            region = img[max(0, y):y + h, max(0, x):x + w]
            if region.size:
                ink = float(np.mean(np.any(region < 0.9, axis=-1)))
        per.append({"figure": fid, "dom_rendered": rendered, "ink_fraction": ink,
                    "ok": rendered and ink > 0.01})
    return {
        "html": str(html), "png": str(png), "chromium": chromium,
        "figures": len(figures),
        "figures_rendered": int(m.group(1)) if m else 0,
        "per_figure": per,
        "ok": bool(m) and m.group(1) == m.group(2) == str(len(figures)) and len(figures) > 0
        and all(f["ok"] for f in per),
    }


def _sample_report(folder: Path) -> Path:
    """Simulate the sample trace under pad and split, and write their report."""
    from analysis.report import write_report
    from analysis.results import load_run
    from simulator.config import SimConfig
    from specsched.setup import load_trace, simulate_to

    trace = load_trace(ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet")
    runs = []
    for policy in ("pad", "split"):
        try:
            cfg = SimConfig.load(None, {"engine.policy": policy})
            simulate_to(trace, cfg, folder / policy)
        except Exception:  # noqa: BLE001 - no shipped profile: fall back to the roofline
            cfg = SimConfig.load(None, {"engine.policy": policy, "backend.name": "roofline"})
            simulate_to(trace, cfg, folder / policy)
        runs.append(load_run(folder / policy))
    out = folder / "report.html"
    write_report(runs, out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("html", nargs="?", help="report to check (default: build one)")
    ap.add_argument("-o", "--png", default="runs/report-screenshot.png", help="screenshot path")
    a = ap.parse_args()
    if find_chromium() is None:
        print("chromium is not installed (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    tmp = None
    html = a.html
    if html is None:
        tmp = tempfile.mkdtemp(prefix="specsched-shot-")
        t0 = time.perf_counter()
        html = _sample_report(Path(tmp))
        print(f"built {html} in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    Path(a.png).parent.mkdir(parents=True, exist_ok=True)
    res = check(html, a.png)
    for f in res["per_figure"]:
        print(f"  {f['figure']:<20} DOM rendered: {f['dom_rendered']!s:<5}  "
              f"drawn pixels: {100 * f['ink_fraction']:5.1f}%  {'ok' if f['ok'] else 'FAILED'}")
    print(f"{res['figures_rendered']}/{res['figures']} figures rendered; screenshot {res['png']} "
          f"({time.perf_counter() - t0:.1f} s, {res['chromium']})")
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
