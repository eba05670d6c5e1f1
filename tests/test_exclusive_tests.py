"""Tests marked ``exclusive`` measure the whole machine: under pytest-xdist (``make test``) no
other test may run meanwhile (``tests/conftest.py``). Checked on a run of its own: two workers,
exclusive tests among ordinary ones, every test's start and end recorded."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_TESTS = '''
import os, time, pytest
LOG = os.environ["LOCK_CHECK_LOG"]
def _rec(kind):
    t0 = time.time(); time.sleep(0.2); t1 = time.time()
    with open(LOG, "a") as f:
        f.write(f"{kind} {t0} {t1}\\n")
@pytest.mark.parametrize("i", range(12))
def test_ordinary(i): _rec("n")
@pytest.mark.exclusive
@pytest.mark.parametrize("i", range(3))
def test_alone(i): _rec("x")
@pytest.mark.parametrize("i", range(12))
def test_ordinary_again(i): _rec("n")
@pytest.mark.exclusive
def test_alone_at_the_end(): _rec("x")
'''


def _overlaps(log: Path) -> tuple[int, int, int]:
    rows = [line.split() for line in log.read_text().splitlines()]
    alone = [(float(a), float(b)) for k, a, b in rows if k == "x"]
    others = [(float(a), float(b)) for k, a, b in rows if k == "n"]
    return len(alone), len(others), sum(1 for a in alone for o in others
                                        if o[0] < a[1] and a[0] < o[1])


@pytest.mark.parametrize("dist", ["worksteal", "load"])
def test_an_exclusive_test_runs_while_no_other_does(tmp_path: Path, dist: str) -> None:
    pytest.importorskip("xdist")
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    exclusive: alone\n")
    (tmp_path / "test_lock.py").write_text(_TESTS)
    log = tmp_path / "log.txt"
    env = {**__import__("os").environ, "LOCK_CHECK_LOG": str(log)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", dist,
                          "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "tmp"),
                          str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    alone, others, overlaps = _overlaps(log)
    assert (alone, others) == (4, 24)
    assert overlaps == 0
