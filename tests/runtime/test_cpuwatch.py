"""Foreign CPU load detection, and the collector measuring again when it was disturbed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autosync_transfer.runtime import cpuwatch
from autosync_transfer.runtime.cpuwatch import CpuSample, CpuWatch, foreign_share
from autosync_transfer.runtime.trial import TrialResult

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs /proc")

SPIN = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


_SPINNING_UNTIL = [0.0]


def _foreign_spinner(seconds: float) -> None:
    """A busy process outside this process tree (its parent exits, so it is re-parented)."""
    _SPINNING_UNTIL[0] = max(_SPINNING_UNTIL[0], time.monotonic() + seconds + 0.5)
    subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$0" >/dev/null 2>&1 &', SPIN.format(s=seconds)],
                   check=True)


def test_foreign_share_arithmetic() -> None:
    a = CpuSample(busy=100, total=1000, own={1: 50, 2: 10})
    b = CpuSample(busy=500, total=1800, own={1: 250, 3: 20})  # pid 3 is new, pid 2 ended
    # busy delta 400, own delta 200 + 20 = 220 -> foreign 180 of 800
    assert foreign_share(a, b) == pytest.approx(180 / 800)
    assert foreign_share(a, a) is None
    assert foreign_share(None, b) is None
    # own time larger than the machine's (counter skew) clamps at 0
    assert foreign_share(a, CpuSample(busy=110, total=1800, own={1: 500})) == 0.0


def test_own_children_are_not_foreign_but_other_processes_are() -> None:
    ncpu = os.cpu_count() or 1
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(s=3)])
    time.sleep(0.3)
    with CpuWatch() as own:
        time.sleep(1.5)
    child.wait()
    _foreign_spinner(3)
    time.sleep(0.3)
    with CpuWatch() as foreign:
        time.sleep(1.5)
    assert own.foreign is not None and foreign.foreign is not None
    # one busy process outside the tree is about one core of the machine
    assert foreign.foreign > 0.5 / ncpu
    assert foreign.foreign > own.foreign + 0.3 / ncpu


class _Pool:
    """A stand-in for WorkerPool.run whose first measurement has company on the machine."""

    def __init__(self, disturb_first: int) -> None:
        self.calls = 0
        self.disturb_first = disturb_first

    def run(self, strategy: object) -> TrialResult:
        self.calls += 1
        if self.calls <= self.disturb_first:
            _foreign_spinner(1.2)
            time.sleep(0.1)
        t0 = time.time()
        time.sleep(1.0)
        return TrialResult("ok", [time.time() - t0], wall_s=1.0)


def _threshold() -> float:
    """Half a core above what the machine does without us (other tenants, a running collection)."""
    time.sleep(max(0.0, _SPINNING_UNTIL[0] - time.monotonic()))  # earlier tests' spinners ended
    with CpuWatch() as base:
        time.sleep(1.0)
    return min((base.foreign or 0.0) + 0.5 / (os.cpu_count() or 1), 0.95)


def test_collector_measures_again_when_disturbed(monkeypatch: pytest.MonkeyPatch) -> None:
    from autosync_transfer.dataset import collect

    wait = cpuwatch.wait_until_quiet
    monkeypatch.setattr(cpuwatch, "wait_until_quiet",
                        lambda t, **kw: wait(t, window_s=1.0, max_wait_s=20))
    threshold = _threshold()
    pool = _Pool(disturb_first=1)
    res, _, facts = collect.measure_undisturbed(pool, None, threshold)  # type: ignore[arg-type]
    assert res.ok
    assert facts["attempts"] == 2, facts
    assert facts["foreign_cpu"] <= threshold and "disturbed" not in facts


def test_persistently_disturbed_trials_are_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    from autosync_transfer.dataset import collect

    monkeypatch.setattr(cpuwatch, "wait_until_quiet", lambda t, **kw: (0.0, None))
    pool = _Pool(disturb_first=99)
    res, _, facts = collect.measure_undisturbed(pool, None, _threshold())  # type: ignore[arg-type]
    assert res.ok and pool.calls == collect.DISTURBED_ATTEMPTS
    assert facts["disturbed"] is True and facts["attempts"] == collect.DISTURBED_ATTEMPTS

