"""The package works without the checkout: a wheel built from this tree, installed in a fresh
virtual environment outside it, runs ``domains list``, ``adapt`` and ``recommend`` on the data
shipped inside the wheel, with its registry where :mod:`autosync_transfer.paths` puts it.

The fresh environment reuses the installed dependencies (torch, lightning, mlflow, ...) through a
``.pth`` line naming this interpreter's site-packages (no network); the checkout itself, its
editable install and ``PYTHONPATH`` are kept out, and the test checks that the package imported
there is the wheel's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

#: what building the wheel reads from the checkout
WHEEL_SOURCES = ("pyproject.toml", "README.md", "autosync_transfer", "datasets/README.md",
                 "datasets/parquet", "datasets/profiles", "datasets/calibrations")


def test_pyproject_lists_every_package() -> None:
    config = PYPROJECT["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "autosync_transfer").rglob("__init__.py")}
    assert found - listed == set(), "add these packages to pyproject.toml [tool.setuptools]"
    shipped = {p for p in listed - found if p.startswith("autosync_transfer.shipped")}
    assert listed - found == shipped, "listed packages without a folder"
    folder = ROOT / config["package-dir"]["autosync_transfer.shipped"]
    assert folder == ROOT / "datasets" and any((folder / "parquet").glob("*.parquet"))


def test_package_exports_stay_light() -> None:
    code = ("import sys\n"
            "from autosync_transfer.domains import (Workload, load_workload,\n"
            "    resolve_domain, zoo_workload)\n"
            "from autosync_transfer.domains.cluster import ResourceSpec\n"
            "import autosync_transfer.cli\n"
            "heavy = [m for m in ('torch', 'tensorflow', 'lightning', 'mlflow') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "from autosync_transfer.strategies import StrategyBatch\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def _run(args: list[str | Path], what: str, timings: dict[str, float], **kwargs: Any
         ) -> subprocess.CompletedProcess[str]:
    start = time.perf_counter()
    res = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=400,
                         **kwargs)
    timings[what] = time.perf_counter() - start
    assert res.returncode == 0, f"{what} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return res


@pytest.mark.slow
def test_wheel_runs_outside_the_checkout(tmp_path: Path) -> None:
    from autosync_transfer.dataset.loader import list_datasets

    timings: dict[str, float] = {}
    # build the wheel from a copy of what it is made of (the checkout stays untouched)
    src = tmp_path / "src"
    for rel in WHEEL_SOURCES:
        if (ROOT / rel).is_dir():
            shutil.copytree(ROOT / rel, src / rel,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", dist, src], "build the wheel", timings)
    (wheel,) = dist.glob("autosync_transfer-*.whl")

    # a fresh venv outside the checkout; the installed dependencies through a .pth line
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], "create the venv", timings)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
          "-q", wheel], "install the wheel", timings)

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MLFLOW_TRACKING_URI", "PYTHONHOME")
           and not k.startswith("AUTOSYNC_")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               AUTOSYNC_REGISTRY_DIR=str(tmp_path / "registry"),
               XDG_DATA_HOME=str(tmp_path / "xdg"), MLFLOW_DISABLE_TELEMETRY="true",
               TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="2")
    here = {"cwd": work, "env": env}

    where = json.loads(_run([python, "-c", (
        "import json, sys, autosync_transfer as a\n"
        "from autosync_transfer import paths\n"
        "print(json.dumps({'file': a.__file__, 'checkout': str(paths.checkout_root()),\n"
        "  'datasets': str(paths.datasets_dir()), 'registry': str(paths.registry_dir()),\n"
        "  'trials': str(paths.trials_dir()), 'search': str(paths.search_dir()),\n"
        "  'finders': [type(f).__module__ for f in sys.meta_path]}))")],
        "locate the package", timings, **here).stdout)
    package = site / "autosync_transfer"
    assert Path(where["file"]) == package / "__init__.py", "not the wheel's package"
    assert not any("editable" in f for f in where["finders"]), where["finders"]
    assert where["checkout"] == "None"
    assert Path(where["datasets"]) == package / "shipped"
    assert Path(where["registry"]) == (tmp_path / "registry").resolve()
    assert Path(where["trials"]) == work / "autosync-runs" / "trials"
    assert Path(where["search"]) == work / "autosync-runs" / "search"
    script = venv / "bin" / "autosync-transfer"
    assert script.read_text().startswith(f"#!{python}"), "the script is not the venv's"

    _run([script, "domains", "list"], "domains list", timings, **here)
    shipped = json.loads(_run([script, "datasets", "list", "--json"], "datasets list",
                              timings, **here).stdout)
    expected = list_datasets(ROOT / "datasets" / "parquet")
    assert {r["domain"]: r["trials"] for r in shipped} == \
        dict(zip(expected["domain"], (int(t) for t in expected["trials"])))
    adapted = json.loads(_run([script, "adapt", "--source", "ncf-A", "--target", "ncf-B",
                               "--epochs", "2", "--json"], "adapt", timings, **here).stdout)
    assert adapted["registered_model"] == "autosync-ncf-B" and adapted["source_trained"]
    assert adapted["tracking_uri"] == f"sqlite:///{(tmp_path / 'registry').resolve()}/mlflow.db"
    best = json.loads(_run([script, "recommend", "ncf-B", "--simulator", "autosync-ncf-B",
                            "--candidates", "200", "--json"], "recommend (simulator)",
                           timings, **here).stdout)
    assert best["id"]
    _run([script, "recommend", "bert-B", "--candidates", "200"], "recommend (analytical)",
         timings, **here)
    # the measured physics ship too: a catalog cluster's calibration, a zoo model's profile
    shown = json.loads(_run([script, "clusters", "show", "A", "--json"], "clusters show",
                            timings, **here).stdout)
    assert shown["calibration"] is not None and shown["calibration"]["cluster"] == "A"
    assert len(list((package / "shipped" / "profiles").glob("*.json"))) == \
        len(list((ROOT / "datasets" / "profiles").glob("*.json"))) > 0
    assert not (tmp_path / "xdg").exists(), "wrote to the user data folder"
    print("\nwheel test timings (s): "
          + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
