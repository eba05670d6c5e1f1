"""Files written into folders that others may write to as well (a shared runs folder, ``/tmp``):
JSON Lines side files under an exclusive ``flock``, atomic replacement through an unpredictably
named temporary file, and no following of a symbolic link put where a file is expected.

The rules the trial store follows (:mod:`autosync_transfer.dataset.store`), for the files beside
it (the torchrun job queue and its results, the TPE journal): every append writes whole lines
under the file's exclusive lock and fsyncs them; only a last line without its newline is a torn
write (cut off by the next append, skipped by readers); a complete line a reader cannot parse is
an error that names the file and the line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from autosync_transfer.errors import SpecError

__all__ = ["FileLock", "append_line", "atomic_write", "complete_lines", "cut_torn_tail",
           "locked", "open_nofollow", "refuse_symlink"]


def refuse_symlink(path: str | Path, what: str) -> None:
    """A :class:`SpecError` when ``path`` is a symbolic link (``what`` names the file)."""
    if os.path.islink(path):
        raise SpecError(f"{what} {str(path)!r} is a symbolic link; give the file itself "
                        f"(links are not followed)")


def open_nofollow(path: str | Path, flags: int, what: str, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW | O_CLOEXEC)``; a link at ``path`` is a
    :class:`SpecError` naming ``what``, other errors propagate as :class:`OSError`."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            refuse_symlink(path, what)
        raise


@contextlib.contextmanager
def locked(path: str | Path, what: str, *, exclusive: bool = True) -> Iterator[int | None]:
    """The file at ``path`` (created when ``exclusive``; None when a shared open finds none)
    under an exclusive or shared ``flock``; closing releases the lock."""
    try:
        if exclusive:
            fd = open_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, what)
        else:
            fd = open_nofollow(path, os.O_RDONLY, what)
    except FileNotFoundError:
        if exclusive:
            raise SpecError(f"cannot open {what} {str(path)!r}: its folder does not exist"
                            ) from None
        yield None
        return
    except OSError as e:
        raise SpecError(f"cannot open {what} {str(path)!r}: {e.strerror}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield fd
    finally:
        os.close(fd)


def cut_torn_tail(fd: int) -> int:
    """Cut a last line without its newline (a writer killed mid-write) off the file behind
    ``fd`` (held under its exclusive lock); returns the bytes cut."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    pos = size
    while pos > 0:  # the last newline, reading backwards in blocks
        start = max(0, pos - (1 << 16))
        nl = os.pread(fd, pos - start, start).rfind(b"\n")
        if nl >= 0:
            keep = start + nl + 1
            os.ftruncate(fd, keep)
            return size - keep
        pos = start
    os.ftruncate(fd, 0)
    return size


def append_line(path: str | Path, line: str, what: str) -> None:
    """Append ``line`` and its newline to ``path`` under its exclusive lock, fsynced; a torn last
    line left by a killed writer is cut off first."""
    data = (line.rstrip("\n") + "\n").encode()
    with locked(path, what) as fd:
        assert fd is not None
        cut_torn_tail(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)


def complete_lines(path: str | Path, what: str, offset: int = 0
                   ) -> tuple[list[bytes], int]:
    """The complete lines of ``path`` after byte ``offset`` (without their newlines, blank ones
    included so that callers can count line numbers) and the offset after the last of them,
    read under the file's shared lock; a torn last line is left for later. A missing file has
    none."""
    with locked(path, what, exclusive=False) as fd:
        if fd is None:
            return [], offset
        chunks = []
        pos = offset
        while True:
            chunk = os.pread(fd, 1 << 20, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
    data = b"".join(chunks)
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    return data[:end].split(b"\n"), offset + end + 1


def atomic_write(path: str | Path, data: bytes, what: str, mode: int = 0o644) -> Path:
    """Replace ``path`` by ``data``: a temporary file with an unpredictable name in the same
    folder (created exclusively, never through a link), fsynced, renamed over ``path``. A link
    at ``path`` is refused (:class:`SpecError`) rather than replaced."""
    p = Path(path)
    refuse_symlink(p, what)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent or ".")
    except OSError as e:
        raise SpecError(f"cannot write {what} {str(p)!r}: {e.strerror}") from e
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise SpecError(f"cannot write {what} {str(p)!r}: {e.strerror}") from e
    with contextlib.suppress(OSError):
        dfd = os.open(p.parent or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return p


class FileLock:
    """An exclusive ``flock`` on ``path`` itself, as an object with ``acquire`` / ``release``
    (the lock interface of Optuna's journal file backend). Unlike a lock file, a lock held by a
    killed process is released by the kernel, and a link at ``path`` is refused."""

    def __init__(self, path: str | Path, what: str) -> None:
        self.path = Path(path)
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> bool:
        try:
            fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, self.what)
        except OSError as e:
            raise SpecError(f"cannot open {self.what} {str(self.path)!r}: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> int:
        self.acquire()
        assert self._fd is not None
        return self._fd

    def __exit__(self, *exc: object) -> None:
        self.release()
