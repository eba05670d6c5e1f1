"""Foreign CPU load during a measurement: CPU time spent on this machine outside our process tree.

A trial's workers share the machine's cores with everything else that runs on it. ``CpuWatch``
reads ``/proc/stat`` (user + nice + system time of the whole machine) and ``/proc/<pid>/stat``
(user + system time, with reaped children, of this process and all its descendants) at the start
and the end of an interval; the difference is the CPU time that other processes took, reported
as a share of the machine's capacity over the interval (0: nobody else ran; 0.5 on two cores: one
foreign process kept a core busy). Interrupt time (network emulation) is not counted. On systems
without ``/proc`` the share is None.

The tree is this process's unless ``AUTOSYNC_CPUWATCH_ROOT`` names the pid of one of its
ancestors: a supervisor that runs several measuring processes side by side (a test runner's
workers, a job array's steps) declares so that its siblings' work is not foreign to each other.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CpuWatch", "CpuSample", "default_root", "foreign_share", "wait_until_quiet"]

_PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU counters at one instant, in clock ticks."""

    busy: int  # user + nice + system of the whole machine
    total: int  # every /proc/stat field except guest time (already inside user)
    own: dict[int, int]  # pid -> utime + stime + cutime + cstime, this process tree
    parent: dict[int, int] = field(default_factory=dict)  # pid -> ppid, this process tree


def _machine() -> tuple[int, int] | None:
    try:
        with open(_PROC / "stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    v = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return v[0] + v[1] + v[2], sum(v)


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, cpu ticks incl. reaped children) for every process readable now."""
    procs: dict[int, tuple[int, int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        rest = raw[raw.rfind(")") + 2:].split()  # fields after "(comm)": state ppid ...
        try:
            ppid = int(rest[1])
            cpu = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
        except (IndexError, ValueError):
            continue
        procs[int(entry.name)] = (ppid, cpu)
    return procs


def _own_tree(root: int) -> tuple[dict[int, int], dict[int, int]]:
    """(pid -> cpu ticks, pid -> ppid) of ``root`` and its descendants."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    own: dict[int, int] = {}
    parent: dict[int, int] = {}
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in procs and pid not in own:
            parent[pid], own[pid] = procs[pid]
            stack.extend(children.get(pid, ()))
    return own, parent


def _ancestors(pid: int) -> set[int]:
    """``pid`` and its ancestors below init, read up the parent chain (not the whole table)."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        try:
            raw = (_PROC / str(pid) / "stat").read_text()
        except OSError:
            break
        seen.add(pid)
        pid = int(raw[raw.rfind(")") + 2:].split()[1])
    return seen


def default_root() -> int:
    """The root of the process tree whose CPU time is not foreign: ``AUTOSYNC_CPUWATCH_ROOT``
    when it names an ancestor of this process (or this process), else this process."""
    me = os.getpid()
    raw = os.environ.get("AUTOSYNC_CPUWATCH_ROOT", "").strip()
    if raw.isdigit() and int(raw) > 1 and int(raw) in _ancestors(me):
        return int(raw)
    return me


def sample(root: int | None = None) -> CpuSample | None:
    m = _machine()
    if m is None:
        return None
    own, parent = _own_tree(root or default_root())
    return CpuSample(busy=m[0], total=m[1], own=own, parent=parent)


def foreign_share(start: CpuSample | None, end: CpuSample | None) -> float | None:
    """The share of the machine's CPU capacity used outside the process tree between two samples."""
    if start is None or end is None or end.total <= start.total:
        return None
    own = sum(cpu - start.own.get(pid, 0) for pid, cpu in end.own.items())
    # a process of the tree that ended and was reaped by its parent, still in the tree, moved its
    # whole lifetime's time into the parent's (reaped children's) counters: only what it spent
    # since the start belongs to the interval. Processes of the tree that ended otherwise are
    # lost; their time then counts as foreign, which errs on the side of re-measuring
    own -= sum(cpu for pid, cpu in start.own.items()
               if pid not in end.own and start.parent.get(pid) in end.own)
    foreign = (end.busy - start.busy) - max(own, 0)
    return min(max(foreign / (end.total - start.total), 0.0), 1.0)


class CpuWatch:
    """``with CpuWatch() as w: ...`` then ``w.foreign``: the foreign CPU share of that interval."""

    def __init__(self, root: int | None = None):
        self.root = root or default_root()
        self.foreign: float | None = None
        self._start: CpuSample | None = None

    def __enter__(self) -> CpuWatch:
        self._start = sample(self.root)
        return self

    def __exit__(self, *exc: object) -> None:
        self.foreign = foreign_share(self._start, sample(self.root))


def wait_until_quiet(threshold: float, *, window_s: float = 3.0, max_wait_s: float = 900.0,
                     root: int | None = None) -> tuple[float, float | None]:
    """Block until one ``window_s`` window has a foreign CPU share <= ``threshold`` (or until
    ``max_wait_s``); returns (seconds waited, the last window's share)."""
    t0 = time.monotonic()
    share: float | None = None
    while True:
        with CpuWatch(root) as w:
            time.sleep(window_s)
        share = w.foreign
        waited = time.monotonic() - t0
        if share is None or share <= threshold or waited >= max_wait_s:
            return waited, share
