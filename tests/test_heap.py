"""Heap slack: the allocator's pad is raised while the block runs and restored after it, once
for nested and concurrent uses; a user's own MALLOC_TOP_PAD_ is left alone."""

from __future__ import annotations

import platform
import threading

import numpy as np
import pytest

from autosync_transfer import _heap


class _Recorder:
    """Stands in for the C library's mallopt to see the calls (the real one has no getter)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def test_the_pad_is_raised_once_and_restored_after_the_outermost_use(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _Recorder()
    monkeypatch.setattr(_heap, "_LIBC", rec)
    with _heap.heap_slack(8 << 20):
        with _heap.heap_slack(8 << 20):
            pass
        assert rec.calls == [(_heap._M_TOP_PAD, 8 << 20)]
    assert rec.calls[-1] == (_heap._M_TOP_PAD, _heap._DEFAULT_TOP_PAD) and len(rec.calls) == 2
    assert _heap._depth == 0

    rec.calls.clear()
    inside = threading.Barrier(3)

    def use() -> None:
        with _heap.heap_slack(8 << 20):
            inside.wait()
            inside.wait()

    threads = [threading.Thread(target=use) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()  # both threads inside: one raise, no restore yet
    assert rec.calls == [(_heap._M_TOP_PAD, 8 << 20)]
    inside.wait()
    for t in threads:
        t.join()
    assert rec.calls[-1] == (_heap._M_TOP_PAD, _heap._DEFAULT_TOP_PAD) and len(rec.calls) == 2


def test_an_exception_inside_restores_the_pad(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _Recorder()
    monkeypatch.setattr(_heap, "_LIBC", rec)
    with pytest.raises(RuntimeError), _heap.heap_slack(8 << 20):
        raise RuntimeError("boom")
    assert rec.calls[-1] == (_heap._M_TOP_PAD, _heap._DEFAULT_TOP_PAD) and _heap._depth == 0


def test_a_users_malloc_top_pad_or_a_small_slack_changes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TOP_PAD_", "1000000")
    assert _heap._libc() is None
    rec = _Recorder()
    monkeypatch.setattr(_heap, "_LIBC", rec)
    with _heap.heap_slack(_heap._DEFAULT_TOP_PAD):
        pass
    assert rec.calls == []


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_the_real_allocator_is_used_with_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_TOP_PAD_", raising=False)
    libc = _heap._libc()
    assert libc is not None
    with _heap.heap_slack(16 << 20):  # the real mallopt: arrays still allocate and free
        a = [np.ones(1 << 17) for _ in range(20)]
        del a
    assert _heap._depth == 0
