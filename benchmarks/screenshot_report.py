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

A third check, :func:`page_problems`, loads the page through the DevTools protocol (over a
pipe: ``--remote-debugging-pipe``, no port, no extra package) and collects every console
message of level warning or error, every uncaught exception and every browser log entry of
level warning or error (a resource that failed to load, for example), and reads the body's
``data-figures-rendered``.  The report writes nothing to the console, so any entry is a fault.

Prints one line per figure and a summary; exits 1 when a plot did not render or the page had a
console problem, 2 when Chromium is missing (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, not an installed copy
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


def _high(fd: int) -> int:
    """A duplicate of ``fd`` numbered 10 or above (the original is closed)."""
    import fcntl

    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


class _Pipe:
    """Chromium's DevTools protocol over --remote-debugging-pipe: JSON messages ended by NUL,
    commands written to the browser's fd 3, answers and events read from its fd 4."""

    def __init__(self, chromium: str, profile: str):
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()
        # bash redirects 3<&X 4>&Y in order: X and Y must not be 3 or 4 (moved to 10 and up)
        cmd_r, res_w = (_high(fd) for fd in (cmd_r, res_w))
        script = f'exec "$0" "$@" 3<&{cmd_r} 4>&{res_w}'
        self.proc = subprocess.Popen(["bash", "-c", script, chromium, *FLAGS,
                                      f"--user-data-dir={profile}", "--remote-debugging-pipe",
                                      f"--window-size={WIDTH},1000", "about:blank"],
                                     pass_fds=(cmd_r, res_w), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(res_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def _read(self, deadline: float) -> dict | None:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._res_r], [], [], left)[0]:
                return None
            chunk = os.read(self._res_r, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60.0) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m is None:
                raise RuntimeError(f"chromium did not answer {method}")
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, method: str, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        if any(e.get("method") == method for e in self.events):
            return True
        while True:
            m = self._read(deadline)
            if m is None:
                return False
            self.events.append(m)
            if m.get("method") == method:
                return True

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (m := self._read(deadline)) is not None:
            self.events.append(m)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._res_r)


def page_problems(html: str | Path) -> dict:
    """Load ``html`` in headless Chromium; return ``{"problems": [...], "figures_rendered":
    "k/n" or None}`` where problems are console warnings/errors, uncaught exceptions and browser
    log warnings/errors, each as one line of text."""
    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("chromium is not installed (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="specsched-chromium-") as prof:
        pipe = _Pipe(chromium, prof)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            sid = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
                "sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                pipe.call(f"{domain}.enable", session=sid)
            pipe.call("Page.navigate", {"url": Path(html).resolve().as_uri()}, session=sid)
            loaded = pipe.wait_for("Page.loadEventFired", timeout=120)
            pipe.drain(0.5)  # late console messages
            got = pipe.call("Runtime.evaluate", {"expression": "document.body && document.body"
                                                 ".getAttribute('data-figures-rendered')",
                                                 "returnByValue": True}, session=sid)
        finally:
            pipe.close()
    problems = [] if loaded else ["the page did not finish loading"]
    for e in pipe.events:
        p = e.get("params", {})
        if e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning",
                                                                               "assert"):
            text = " ".join(str(a.get("value", a.get("description", "")))
                            for a in p.get("args", []))
            problems.append(f"console.{p['type']}: {text}")
        elif e.get("method") == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            problems.append("exception: " + str((d.get("exception") or {}).get("description")
                                                or d.get("text")))
        elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") in (
                "error", "warning"):
            ent = p["entry"]
            problems.append(f"{ent.get('source')} {ent['level']}: {ent.get('text')} "
                            f"{ent.get('url', '')}".strip())
    return {"problems": problems, "figures_rendered": got.get("result", {}).get("value")}


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
    console = page_problems(html)
    return {
        "html": str(html), "png": str(png), "chromium": chromium,
        "figures": len(figures),
        "figures_rendered": int(m.group(1)) if m else 0,
        "per_figure": per,
        "console_problems": console["problems"],
        "ok": bool(m) and m.group(1) == m.group(2) == str(len(figures)) and len(figures) > 0
        and all(f["ok"] for f in per) and not console["problems"],
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
    for line in res["console_problems"]:
        print(f"  console: {line}")
    print(f"{len(res['console_problems'])} console problems")
    print(f"{res['figures_rendered']}/{res['figures']} figures rendered; screenshot {res['png']} "
          f"({time.perf_counter() - t0:.1f} s, {res['chromium']})")
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
