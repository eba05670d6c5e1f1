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

# the machine's foreign CPU share is what these tests measure: they run alone (``exclusive``)
pytestmark = [pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs /proc"),
              pytest.mark.exclusive]

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


def test_a_child_reaped_during_the_interval_counts_only_its_time_in_it() -> None:
    """A child that ran before the interval and is reaped inside it moves its lifetime's CPU time
    into our counters at once; only its time inside the interval is ours, so a foreign busy core
    still shows."""
    ncpu = os.cpu_count() or 1
    a = CpuSample(busy=1000, total=2000, own={1: 100, 2: 500}, parent={1: 0, 2: 1})
    # child 2 ran 20 more ticks and was reaped by 1: 1's counters gained its 520
    b = CpuSample(busy=1400, total=2800, own={1: 620}, parent={1: 0})
    assert foreign_share(a, b) == pytest.approx((400 - 20) / 800)
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(s=2.0)])
    time.sleep(1.6)
    _foreign_spinner(3)
    time.sleep(0.3)
    with CpuWatch() as w:
        child.wait()
        time.sleep(1.5)
    assert w.foreign is not None and w.foreign > 0.5 / ncpu


_MEASURE = ("import time\nfrom autosync_transfer.runtime.cpuwatch import CpuWatch\n"
            "with CpuWatch() as w:\n    time.sleep(1.5)\nprint(w.foreign)\n")


def test_a_declared_supervisors_other_children_are_not_foreign() -> None:
    """A process measuring beside a sibling (both children of this one): the sibling's busy core
    is foreign unless AUTOSYNC_CPUWATCH_ROOT names this process, an ancestor of both."""
    ncpu = os.cpu_count() or 1
    shares = {}
    for declared in (False, True):
        env = {k: v for k, v in os.environ.items() if k != "AUTOSYNC_CPUWATCH_ROOT"}
        if declared:
            env["AUTOSYNC_CPUWATCH_ROOT"] = str(os.getpid())
        sibling = subprocess.Popen([sys.executable, "-c", SPIN.format(s=2.5)])
        try:
            time.sleep(0.3)
            out = subprocess.run([sys.executable, "-c", _MEASURE], env=env, capture_output=True,
                                 text=True, check=True).stdout
        finally:
            sibling.wait()
        shares[declared] = float(out.strip().splitlines()[-1])
    assert shares[False] > 0.5 / ncpu
    assert shares[True] < shares[False] - 0.3 / ncpu


def test_a_root_that_is_not_an_ancestor_is_ignored(monkeypatch) -> None:
    from autosync_transfer.runtime.cpuwatch import default_root

    monkeypatch.setenv("AUTOSYNC_CPUWATCH_ROOT", str(os.getppid()))
    assert default_root() == os.getppid()
    for bad in ("1", "0", "-5", "x", "", str(2**22 + 7)):
        monkeypatch.setenv("AUTOSYNC_CPUWATCH_ROOT", bad)
        assert default_root() == os.getpid(), bad
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    try:  # a live process that is not an ancestor (a child) does not widen the tree
        monkeypatch.setenv("AUTOSYNC_CPUWATCH_ROOT", str(child.pid))
        assert default_root() == os.getpid()
    finally:
        child.kill()
        child.wait()


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

