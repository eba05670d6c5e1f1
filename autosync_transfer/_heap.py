"""Heap slack for vectorized code that allocates many large temporaries.

glibc's allocator gives the free memory at the top of a heap back to the kernel as soon as it
exceeds a small pad (``M_TOP_PAD``, 128 KiB). Code that allocates and frees arrays of a few
hundred KiB thousands of times (the step simulator's batches) then pays a page fault for every
page of every temporary, and two threads doing it serialize in the kernel. :func:`heap_slack`
raises the pad while such code runs, so freed pages are reused, and restores it afterwards (the
allocator gives the slack back at a later free; an explicit trim would make the next call fault
every page in again). It does nothing where the C library has no ``mallopt`` (not glibc) or
where the user set ``MALLOC_TOP_PAD_`` (their choice stands).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["heap_slack"]

_M_TOP_PAD = -2  # mallopt parameter (malloc.h)
_DEFAULT_TOP_PAD = 128 * 1024  # glibc's default M_TOP_PAD
_lock = threading.Lock()
_depth = 0


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or "MALLOC_TOP_PAD_" in os.environ:
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.gnu_get_libc_version  # noqa: B018  (glibc only)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


@contextmanager
def heap_slack(nbytes: int = 64 << 20) -> Iterator[None]:
    """Keep up to ``nbytes`` of freed memory at the top of each heap while the block runs
    (nested and concurrent uses share one setting; the outermost exit restores the default)."""
    global _depth
    if _LIBC is None or nbytes <= _DEFAULT_TOP_PAD:
        yield
        return
    with _lock:
        if _depth == 0:
            _LIBC.mallopt(_M_TOP_PAD, int(min(nbytes, 1 << 30)))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _LIBC.mallopt(_M_TOP_PAD, _DEFAULT_TOP_PAD)
