"""Trial records and their append-only store (JSON Lines, one fsync per record).

A :class:`TrialStore` is one ``.jsonl`` file. Every :meth:`TrialStore.append` writes one whole
line under an exclusive ``flock`` and returns only after ``fsync``, so a committed record survives
a crash of the writer, and two collectors appending to one file never interleave their lines.
A crash in the middle of a write can leave a partial last line (one without its newline); readers
skip it with a :class:`TruncatedRecordWarning` and the next append cuts it off before writing, so
the file stays valid JSON Lines. Only such a line is a torn write: a complete (newline-terminated)
line that is not a valid record, anywhere in the file, is an error naming the file and the line
number and is never deleted; :meth:`TrialStore.repair` moves such lines to ``<store>.bad.jsonl``.

Next to the store, ``<store>.meta.json`` holds collection metadata (how the data was collected,
with which settings); :meth:`TrialStore.write_meta` merges keys into it atomically. Its
``domains`` entry describes every domain measured into the store (:meth:`TrialStore.record_domain`:
the model graph and the cluster as JSON, the workload spec and fingerprints), so that a domain
that is not in the catalog (a user's workload, a cluster file) can be rebuilt from the store
alone (:meth:`TrialStore.domains`, :func:`domains_from_meta`).
:meth:`TrialStore.compact` writes the records as one parquet file for shipping.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import platform
import socket
import sys
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autosync_transfer._files import atomic_write, open_nofollow, refuse_symlink
from autosync_transfer.errors import ConfigError, SpecError, format_pydantic_error

if TYPE_CHECKING:
    import pandas

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.runtime.trial import Protocol, TrialResult
    from autosync_transfer.strategies.types import Strategy

__all__ = [
    "SCHEMA_VERSION",
    "JSON_COLUMNS",
    "TrialRecord",
    "TrialStore",
    "RepairReport",
    "DOMAINS_KEY",
    "domain_entry",
    "domains_from_meta",
    "arrow_schema",
    "TruncatedRecordWarning",
    "machine_info",
    "new_trial_id",
    "require",
    "utc_now",
]

log = logging.getLogger(__name__)

#: version of the :class:`TrialRecord` layout written by this code (2 added ``supersedes``, 3
#: ``fidelity``)
SCHEMA_VERSION = 3
#: dict-valued record fields that tables (pandas, parquet) hold as JSON strings
JSON_COLUMNS: tuple[str, ...] = ("strategy", "protocol", "machine", "fidelity")

Status = Literal["ok", "failed", "timeout"]

#: key of the store metadata that describes the domains measured into the store
DOMAINS_KEY = "domains"


def domain_entry(domain: Domain) -> dict[str, Any]:
    """The JSON description of ``domain`` kept in a store's metadata: ``domain`` (the
    :class:`~autosync_transfer.domains.domain.Domain`: name, model graph, cluster), its
    ``fingerprint`` and those of its graph and cluster, and the ``workload`` spec and
    ``workload_fingerprint`` when the graph was traced from a workload (else None)."""
    from autosync_transfer.domains.workload import workload_of

    spec, wl_fp = workload_of(domain)
    return {"domain": domain.model_dump(mode="json"), "fingerprint": domain.fingerprint,
            "model_fingerprint": domain.model.fingerprint,
            "cluster_fingerprint": domain.cluster.fingerprint,
            "workload": spec, "workload_fingerprint": wl_fp}


def domains_from_meta(meta: Mapping[str, Any], where: str = "store metadata") -> dict[str, Domain]:
    """The domains a store's metadata describes (:func:`domain_entry`), by name. An entry that
    is not a valid domain, or whose fingerprint does not match its content, is a
    :class:`SpecError` naming ``where``."""
    from autosync_transfer.domains.domain import Domain

    entries = meta.get(DOMAINS_KEY) or {}
    if not isinstance(entries, Mapping):
        raise SpecError(f"{where}: {DOMAINS_KEY!r} must be an object of domains by name")
    out: dict[str, Domain] = {}
    for name, entry in entries.items():
        try:
            dom = Domain.model_validate((entry or {}).get("domain"))
        except (ValidationError, AttributeError) as e:
            raise SpecError(f"{where}: domain {name!r} is not a valid domain description "
                            f"({' '.join(str(e).split())[:200]})") from e
        if dom.name != name or dom.fingerprint != entry.get("fingerprint", dom.fingerprint):
            raise SpecError(f"{where}: domain {name!r} does not match its name or fingerprint "
                            f"(edited by hand?)")
        out[name] = dom
    return out


def utc_now() -> str:
    """The current time as ISO-8601 UTC with milliseconds (``2024-05-01T12:00:00.123+00:00``)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def new_trial_id() -> str:
    """A fresh, globally unique trial id."""
    return uuid.uuid4().hex


def machine_info(start: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Facts about this machine and its load, for :attr:`TrialRecord.machine`.

    ``loadavg_1m`` is the current 1-minute load average. Call it once before a trial and pass
    that result as ``start`` to a second call after the trial: the result then also carries
    ``loadavg_1m_start`` (the first call's value) and ``loadavg_1m_end`` (now). ``torch`` is the
    version of an already imported torch (None otherwise); torch is never imported here.
    ``processor`` is the processor's model name, as in a workload profile's worker type
    (:func:`~autosync_transfer.runtime.profile.processor_name`): trials of one store measured on
    different machine types can be told apart.
    """
    from autosync_transfer.runtime.profile import processor_name

    try:
        load_now: float | None = os.getloadavg()[0]
    except OSError:  # not available on this platform
        load_now = None
    torch = sys.modules.get("torch")
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "processor": processor_name(),
        "loadavg_1m": load_now,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "torch": getattr(torch, "__version__", None) if torch is not None else None,
    }
    if start is not None:
        info["loadavg_1m_start"] = start.get("loadavg_1m")
        info["loadavg_1m_end"] = load_now
    return info


class TruncatedRecordWarning(UserWarning):
    """The last line of a trial store lacks its newline and is not a valid record (a crash
    mid-write): it is skipped."""


@dataclass(frozen=True)
class RepairReport:
    """What :meth:`TrialStore.repair` did: ``moved`` the (1-based) line numbers of the bad lines
    moved to ``bad_path``; ``kept`` the records left in the store."""

    path: Path
    bad_path: Path
    moved: tuple[int, ...]
    kept: int


class TrialRecord(BaseModel):
    """One measurement of one strategy on one domain (or its failure).

    ``median_s`` is the median of ``iteration_times_s`` (for imported data, the statistic named
    by ``protocol['statistic']``). ``strategy`` is the strategy in the compact positional form of
    :mod:`autosync_transfer.strategies.compact` (or, for imported data, its full JSON object), None for torch's
    own DDP. ``reference`` marks a re-measurement of an earlier strategy, taken to track drift
    and noise of the machine. ``wall_s`` is the time the trial took end to end (0 when unknown).
    ``supersedes`` is the id of an earlier record of the same domain and strategy that this one
    measures again and replaces (a trial measured before disturbance checks existed, or one
    stored as disturbed); the loader leaves a record out once an undisturbed record supersedes
    it, and the store keeps both. ``fidelity`` is the gradient-fidelity probe of a lossy
    strategy (:class:`~autosync_transfer.runtime.accuracy.GradientFidelity` as a dict: rel_error,
    cosine, per_variable, steps); ``None`` for a lossless one and in records that predate it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    domain: str = Field(min_length=1)
    model: str
    cluster: str
    model_fingerprint: str
    cluster_fingerprint: str
    strategy_id: str = Field(min_length=1)
    strategy_kind: str = Field(min_length=1)
    strategy: dict[str, Any] | None
    status: Status
    error: str = ""
    iteration_times_s: list[float]
    median_s: float | None
    protocol: dict[str, Any]
    launcher: str
    reference: bool = False
    seed: int = 0
    timestamp: str
    wall_s: float = Field(ge=0)
    machine: dict[str, Any]
    estimated_sync_s: float | None = None
    supersedes: str | None = Field(default=None, min_length=1)
    fidelity: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    @field_validator("iteration_times_s")
    @classmethod
    def _finite_times(cls, v: list[float]) -> list[float]:
        for i, t in enumerate(v):
            if not math.isfinite(t) or t < 0:
                raise ValueError(f"iteration times must be finite and >= 0 s, got {t!r} at index {i}")
        return v

    @field_validator("median_s", "estimated_sync_s")
    @classmethod
    def _finite_seconds(cls, v: float | None) -> float | None:
        if v is not None and (not math.isfinite(v) or v < 0):
            raise ValueError(f"must be finite and >= 0 s, got {v!r}")
        return v

    @field_validator("timestamp")
    @classmethod
    def _iso_utc(cls, v: str) -> str:
        try:
            parsed = datetime.fromisoformat(v)
        except ValueError:
            raise ValueError(f"timestamp must be ISO-8601 with a UTC offset, got {v!r}") from None
        if parsed.tzinfo is None:
            raise ValueError(f"timestamp must carry a UTC offset (e.g. +00:00), got {v!r}")
        return v

    @field_validator("fidelity")
    @classmethod
    def _fidelity(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        from autosync_transfer.runtime.accuracy import GradientFidelity

        return GradientFidelity.model_validate(v).model_dump(mode="json")

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if not 1 <= v <= SCHEMA_VERSION:
            raise ValueError(
                f"schema_version must be between 1 and {SCHEMA_VERSION} (this version of "
                f"autosync-transfer), got {v}"
            )
        return v

    @model_validator(mode="after")
    def _ok_has_time(self) -> TrialRecord:
        if self.status == "ok" and self.median_s is None:
            raise ValueError(f"an 'ok' trial needs median_s, got none (trial {self.id!r})")
        if self.supersedes is not None and (self.reference or self.supersedes == self.id):
            raise ValueError(f"supersedes must name another, non-reference trial, got "
                             f"{self.supersedes!r} (trial {self.id!r})")
        return self

    @classmethod
    def from_result(
        cls,
        *,
        domain: Domain,
        strategy: Strategy | None,
        result: TrialResult,
        protocol: Protocol | Mapping[str, Any],
        launcher: str,
        machine: Mapping[str, Any],
        seed: int = 0,
        reference: bool = False,
        estimated_sync_s: float | None = None,
        record_id: str | None = None,
        timestamp: str | None = None,
        supersedes: str | None = None,
    ) -> TrialRecord:
        """The record of one :class:`~autosync_transfer.runtime.trial.TrialResult`
        (``strategy=None``: torch's own DDP, recorded with id and kind
        :data:`~autosync_transfer.strategies.TORCH_DDP`)."""
        from autosync_transfer.strategies.compact import encode
        from autosync_transfer.strategies.types import TORCH_DDP

        proto = protocol if isinstance(protocol, Mapping) else protocol.model_dump(mode="json")
        return cls(
            id=record_id or new_trial_id(),
            domain=domain.name,
            model=domain.model.name,
            cluster=domain.cluster.name,
            model_fingerprint=domain.model.fingerprint,
            cluster_fingerprint=domain.cluster.fingerprint,
            strategy_id=strategy.id if strategy is not None else TORCH_DDP,
            strategy_kind=strategy.kind if strategy is not None else TORCH_DDP,
            strategy=encode(strategy, domain.model) if strategy is not None else None,
            status=result.status,
            error=result.error,
            iteration_times_s=list(result.iteration_times_s),
            median_s=result.median_s,
            protocol=dict(proto),
            launcher=launcher,
            reference=reference,
            seed=seed,
            timestamp=timestamp or utc_now(),
            wall_s=result.wall_s,
            machine=dict(machine),
            estimated_sync_s=estimated_sync_s,
            supersedes=supersedes,
            fidelity=(result.fidelity.model_dump(mode="json")
                      if getattr(result, "fidelity", None) is not None else None),
        )

    def to_row(self) -> dict[str, Any]:
        """A flat table row: the dict-valued fields (:data:`JSON_COLUMNS`) as JSON strings."""
        row = self.model_dump(mode="json")
        for key in JSON_COLUMNS:
            if row[key] is not None:
                row[key] = json.dumps(row[key], sort_keys=True, separators=(",", ":"))
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TrialRecord:
        """Inverse of :meth:`to_row` (JSON strings are parsed back into dicts)."""
        data = dict(row)
        for key in JSON_COLUMNS:
            if isinstance(data.get(key), str):
                data[key] = json.loads(data[key])
        return cls.model_validate(data)


@dataclass
class _IdCache:
    """What :meth:`TrialStore.ids` has read so far: the ids of the complete, valid lines in
    ``[0, offset)`` of the file with inode ``inode``."""

    inode: tuple[int, int] = (-1, -1)
    offset: int = 0
    lines: int = 0
    ids: set[str] = field(default_factory=set)


class TrialStore:
    """An append-only JSON Lines file of :class:`TrialRecord` (see the module docstring).

    The constructor only stores the path; the file is created by the first :meth:`append`.
    A path that does not exist yet is an empty store.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._cache = _IdCache()

    def __repr__(self) -> str:
        return f"TrialStore({str(self.path)!r})"

    @property
    def meta_path(self) -> Path:
        return self.path.with_name(self.path.name + ".meta.json")

    # -- locking --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _open_locked(self, exclusive: bool) -> Iterator[int | None]:
        """The store's file descriptor under a shared or exclusive ``flock`` (None when a
        shared open finds no file). A file replaced while waiting for the lock
        (:meth:`repair`) is opened again, so nothing is written to a replaced file."""
        for _ in range(100):
            with self._open_locked_once(exclusive) as (fd, current):
                if current:
                    yield fd
                    return
        raise SpecError(f"trial store {str(self.path)!r} keeps being replaced; try again")

    @contextlib.contextmanager
    def _open_locked_once(self, exclusive: bool) -> Iterator[tuple[int | None, bool]]:
        if self.path.is_dir():
            raise SpecError(f"trial store {str(self.path)!r} is a folder, not a .jsonl file")
        if exclusive:
            created = not self.path.exists()
            try:
                fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, "trial store")
            except OSError as e:
                raise SpecError(f"cannot open trial store {str(self.path)!r}: {e.strerror}") from e
            if created:
                _fsync_dir(self.path.parent)
        else:
            try:
                fd = open_nofollow(self.path, os.O_RDONLY, "trial store")
            except FileNotFoundError:
                yield None, True
                return
            except OSError as e:
                raise SpecError(f"cannot open trial store {str(self.path)!r}: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield fd, _same_file(fd, self.path)
        finally:
            os.close(fd)  # closing releases the lock

    # -- reading --------------------------------------------------------------------------------
    def _read_all(self) -> bytes:
        with self._open_locked(exclusive=False) as fd:
            if fd is None:
                return b""
            return _read_from(fd, 0)

    def records(self) -> Iterator[TrialRecord]:
        """Every record in file order. A last line without its newline that is not a valid
        record (a crash mid-write) is skipped with a :class:`TruncatedRecordWarning`; any other
        bad line raises :class:`SpecError` naming the file and the line."""
        data = self._read_all()  # read under the lock, parse without it
        lines = data.split(b"\n")
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            obj = _parse_line(raw)
            if obj is None:
                if i == len(lines) - 1:  # no newline after it: a torn write
                    msg = (f"{self.path}: line {i + 1} is an incomplete record without its "
                           f"newline (a crash while writing?); skipped")
                    warnings.warn(msg, TruncatedRecordWarning, stacklevel=2)
                    continue
                raise SpecError(_bad_line(self.path, i + 1, "is not a valid JSON record"))
            try:
                yield TrialRecord.model_validate(obj)
            except ValidationError as e:
                raise SpecError(
                    format_pydantic_error(e, f"trial store {str(self.path)!r} line {i + 1}")
                    + f" ({_REPAIR_HINT})"
                ) from e

    def __iter__(self) -> Iterator[TrialRecord]:
        return self.records()

    def _scan(self, fd: int) -> tuple[int, int | None]:
        """Bring the id cache up to date with the file behind ``fd``.

        Returns (offset after the last good line, start of a bad tail or None). A bad tail is a
        last line without its newline that is not a record (a torn write); any other malformed
        line raises."""
        st = os.fstat(fd)
        inode = (st.st_dev, st.st_ino)
        cache = self._cache
        if cache.inode != inode or st.st_size < cache.offset:
            self._cache = cache = _IdCache(inode=inode)
        data = _read_from(fd, cache.offset)
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            end = len(data) if nl < 0 else nl + 1
            raw = data[pos:end]
            line_no = cache.lines + 1
            if raw.strip():
                obj = _parse_line(raw)
                if obj is None:
                    if nl >= 0:  # complete: not a torn write, never cut off
                        raise SpecError(_bad_line(self.path, line_no,
                                                  "is not a valid JSON record"))
                    return cache.offset, cache.offset
                cache.ids.add(obj["id"])
                if nl < 0:  # a complete record without its newline: kept; append adds the newline
                    return cache.offset + len(raw), None
            elif nl < 0:  # trailing blanks without newline
                return cache.offset, cache.offset
            cache.offset += len(raw)
            cache.lines += 1
            pos = end
        return cache.offset, None

    def ids(self) -> set[str]:
        """The ids of every committed record (read incrementally: only new lines are parsed)."""
        with self._open_locked(exclusive=False) as fd:
            if fd is None:
                return set()
            self._scan(fd)
            return set(self._cache.ids)

    def __contains__(self, record_id: object) -> bool:
        return isinstance(record_id, str) and record_id in self.ids()

    def __len__(self) -> int:
        return len(self.ids())

    # -- writing --------------------------------------------------------------------------------
    def append(self, record: TrialRecord) -> bool:
        """Write ``record`` as one line and fsync it; False (nothing written) when a record with
        its id is already in the store."""
        if not isinstance(record, TrialRecord):
            raise ConfigError(f"append needs a TrialRecord, got {type(record).__name__}")
        line = (record.model_dump_json() + "\n").encode("utf-8")
        with self._open_locked(exclusive=True) as fd:
            assert fd is not None
            good_end, bad_tail = self._scan(fd)
            if bad_tail is not None:
                size = os.fstat(fd).st_size
                log.warning("%s: cutting off an incomplete last line (%d bytes at offset %d)",
                            self.path, size - bad_tail, bad_tail)
                os.ftruncate(fd, bad_tail)
            elif good_end > self._cache.offset:  # last record lacks its newline
                _write_all(fd, b"\n")
                self._scan(fd)
            if record.id in self._cache.ids:
                return False
            _write_all(fd, line)
            os.fsync(fd)
            self._cache.ids.add(record.id)
            self._cache.offset += len(line)
            self._cache.lines += 1
        return True

    def repair(self) -> RepairReport:
        """Move every line that is not a valid record (a torn last line included) to
        ``<store>.bad.jsonl`` (appended, as it was) and rewrite the store without them:
        atomically (a temporary file renamed into place) under the store's exclusive lock."""
        bad_path = self.path.with_name(self.path.name + ".bad.jsonl")
        with self._open_locked(exclusive=True) as fd:
            assert fd is not None
            data = _read_from(fd, 0)
            kept: list[bytes] = []
            moved: list[int] = []
            bad: list[bytes] = []
            for i, raw in enumerate(data.split(b"\n")):
                if not raw.strip():
                    continue
                if _valid_record(raw):
                    kept.append(raw + b"\n")
                else:
                    moved.append(i + 1)
                    bad.append(raw + b"\n")
            if moved:
                try:
                    bfd = os.open(bad_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                                  0o644)
                    try:
                        _write_all(bfd, b"".join(bad))
                        os.fsync(bfd)
                    finally:
                        os.close(bfd)
                except OSError as e:
                    raise SpecError(f"cannot write {str(bad_path)!r}: {e.strerror}") from e
                _atomic_write(self.path, b"".join(kept))
                self._cache = _IdCache()
        return RepairReport(self.path, bad_path, tuple(moved), len(kept))

    def extend(self, records: Iterator[TrialRecord] | list[TrialRecord]) -> int:
        """Append every record; returns how many were new."""
        return sum(1 for r in records if self.append(r))

    # -- tables ---------------------------------------------------------------------------------
    def to_pandas(self) -> pandas.DataFrame:
        """One row per record; ``strategy``, ``protocol`` and ``machine`` as JSON strings."""
        pd = require("pandas")
        rows = [r.to_row() for r in self.records()]
        return pd.DataFrame(rows, columns=list(TrialRecord.model_fields))

    def compact(self, parquet_path: str | Path) -> Path:
        """Write every record to ``parquet_path`` (atomically: a temporary file renamed into
        place). The collection metadata travels in the parquet schema metadata."""
        pa, pq = require("pyarrow"), require("pyarrow.parquet")
        target = Path(parquet_path)
        rows = [r.to_row() for r in self.records()]
        meta = {"autosync_schema_version": str(SCHEMA_VERSION),
                "autosync_meta": json.dumps(self.read_meta(), sort_keys=True)}
        table = pa.Table.from_pylist(rows, schema=arrow_schema().with_metadata(meta))
        refuse_symlink(target, "parquet file")
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                            dir=target.parent)
        except OSError as e:
            raise SpecError(f"cannot write parquet {str(target)!r}: {e.strerror}") from e
        tmp = Path(tmp_name)
        try:
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "wb") as f:  # the file mkstemp created, never one by its name
                pq.write_table(table, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise SpecError(f"cannot write parquet {str(target)!r}: {e.strerror}") from e
        _fsync_dir(target.parent)
        return target

    # -- collection metadata --------------------------------------------------------------------
    def read_meta(self) -> dict[str, Any]:
        """The sidecar metadata (empty when there is none)."""
        refuse_symlink(self.meta_path, "store metadata")
        try:
            text = self.meta_path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise SpecError(f"cannot read {str(self.meta_path)!r}: {e.strerror}") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{str(self.meta_path)!r} is not valid JSON: {e}") from e
        if not isinstance(data, dict):
            raise SpecError(f"{str(self.meta_path)!r} must hold a JSON object")
        return data

    def record_domain(self, domain: Domain) -> dict[str, Any]:
        """Describe ``domain`` in the metadata's ``domains`` (:func:`domain_entry`; other
        domains' entries are kept); returns the merged metadata."""
        entry = domain_entry(domain)
        return self._merge_meta(lambda meta: {DOMAINS_KEY: {
            **dict(meta.get(DOMAINS_KEY) or {}), domain.name: entry}})

    def domains(self) -> dict[str, Domain]:
        """The domains the metadata describes, by name (:func:`domains_from_meta`)."""
        return domains_from_meta(self.read_meta(), str(self.meta_path))

    def write_meta(self, updates: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``updates`` into the sidecar metadata (top-level keys replaced) and write it
        atomically; returns the merged metadata."""
        try:
            json.dumps(dict(updates))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"collection metadata must be JSON-serializable: {e}") from e
        return self._merge_meta(lambda _meta: updates)

    def _merge_meta(self, updates_of: Callable[[dict[str, Any]], Mapping[str, Any]]
                    ) -> dict[str, Any]:
        """Merge ``updates_of(current metadata)`` into the metadata under the store's lock."""
        with self._open_locked(exclusive=True):  # serializes concurrent merges
            current = self.read_meta()
            updates = updates_of(current)
            try:
                json.dumps(dict(updates))
            except (TypeError, ValueError) as e:
                raise ConfigError(f"collection metadata must be JSON-serializable: {e}") from e
            merged = {**current, **dict(updates)}
            text = json.dumps(merged, indent=2, sort_keys=True) + "\n"
            atomic_write(self.meta_path, text.encode(), "store metadata")
        return merged


def arrow_schema() -> Any:
    """The pyarrow schema of a trial table (the columns of :meth:`TrialRecord.to_row`)."""
    pa = require("pyarrow")

    s, f64 = pa.string(), pa.float64()
    return pa.schema([
        ("id", s), ("domain", s), ("model", s), ("cluster", s), ("model_fingerprint", s),
        ("cluster_fingerprint", s), ("strategy_id", s), ("strategy_kind", s), ("strategy", s),
        ("status", s), ("error", s), ("iteration_times_s", pa.list_(f64)), ("median_s", f64),
        ("protocol", s), ("launcher", s), ("reference", pa.bool_()), ("seed", pa.int64()),
        ("timestamp", s), ("wall_s", f64), ("machine", s), ("estimated_sync_s", f64),
        ("supersedes", s), ("fidelity", s), ("schema_version", pa.int64()),
    ])


def require(module: str) -> Any:
    """Import an optional dependency of trial tables (pandas, pyarrow) or say how to get it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        raise ConfigError(
            f"trial tables need {top}, which is not installed: pip install 'autosync-transfer[ml]'"
        ) from e


# ------------------------------------------------------------------------------------------------
# low-level file helpers
# ------------------------------------------------------------------------------------------------
_REPAIR_HINT = "repair the store to move bad lines to <store>.bad.jsonl"


def _bad_line(path: Path, line_no: int, what: str) -> str:
    return f"trial store {str(path)!r}: line {line_no} {what} ({_REPAIR_HINT})"


def _valid_record(raw: bytes) -> bool:
    obj = _parse_line(raw)
    if obj is None:
        return False
    try:
        TrialRecord.model_validate(obj)
    except ValidationError:
        return False
    return True


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (not replaced meanwhile)."""
    try:
        st, now = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)


def _atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data``: an unpredictably named temporary file in the same folder,
    fsynced, renamed into place."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise SpecError(f"cannot rewrite {str(path)!r}: {e.strerror}") from e
    try:
        try:
            os.fchmod(fd, os.stat(path).st_mode & 0o777)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise SpecError(f"cannot rewrite {str(path)!r}: {e.strerror}") from e
    _fsync_dir(path.parent)


def _parse_line(raw: bytes) -> dict[str, Any] | None:
    """The JSON object on one line, or None when the line is not an object with a string id
    (an incomplete or malformed line)."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, a 5000-digit number, nested
        return None
    return obj if isinstance(obj, dict) and isinstance(obj.get("id"), str) else None


def _read_from(fd: int, offset: int) -> bytes:
    chunks = []
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
