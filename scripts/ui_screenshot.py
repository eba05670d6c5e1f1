"""Screenshot the MLflow UI comparing two versions of a simulator, in headless Chromium.

Starts ``autosync-transfer ui`` on a free port against the registry in use ($AUTOSYNC_REGISTRY_DIR
or $MLFLOW_TRACKING_URI, else ``registry/``), opens the two comparison pages of
``autosync-transfer ui --compare MODEL`` and writes one PNG each:

- ``<out>/<model>-versions.png``: the registry's version comparison (runs, every metric);
- ``<out>/<model>-charts.png``: the experiment's chart view of the same runs (one bar per version
  for every metric, the logged plots as image cards).

Needs Chromium (Debian: ``apt-get install chromium``). Example, on the registry ``make demo``
fills plus a second adaptation:

    autosync-transfer adapt --source bert-3l-B --target bert-B --method finetune --shots 20
    python scripts/ui_screenshot.py autosync-bert-B --out docs/img
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"error: the MLflow UI did not answer on {url} in {timeout_s:.0f} s")
            time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="registered model or domain, e.g. autosync-bert-B or bert-B")
    ap.add_argument("--versions", default=None, help="V1,V2 (default: the two newest)")
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--wait-s", type=float, default=25.0,
                    help="virtual time each page gets to load before the screenshot")
    args = ap.parse_args()
    if not Path(args.chromium).is_file():
        print(f"error: --chromium {args.chromium!r} does not exist (apt-get install chromium)",
              file=sys.stderr)
        return 2

    from autosync_transfer.errors import AutosyncError
    from autosync_transfer.registry.versions import compare_links, registered_name

    name = args.model if args.model.startswith("autosync-") else registered_name(args.model)
    port = _free_port()
    versions = args.versions.split(",") if args.versions else None
    try:
        links = compare_links(name, versions, f"http://127.0.0.1:{port}")
    except AutosyncError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).with_name("autosync-transfer")
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    server = subprocess.Popen([str(exe), "ui", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/", 90)
        with tempfile.TemporaryDirectory(prefix="autosync-chromium-") as profile:
            shots = [(page, size, Path(profile) / f"warm-{page}.png")
                     for page, size in (("versions", "1400,1500"), ("charts", "1400,2300"))]
            # a first pass warms the server (its first answers are slow), the second one counts
            shots += [(page, size, out / f"{name}-{page}.png") for page, size, _ in shots]
            for page, size, png in shots:
                subprocess.run(
                    [args.chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                     f"--window-size={size}", f"--virtual-time-budget={int(args.wait_s * 1000)}",
                     f"--screenshot={png}", links[page]],
                    check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if png.parent == out:
                    print(f"{png}  <- {links[page]}")
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
