"""The append-only trial store: round trip, duplicates, crash tolerance, locking, parquet."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from autosync_transfer.dataset.store import (
    TrialRecord,
    TrialStore,
    TruncatedRecordWarning,
    machine_info,
)
from autosync_transfer.errors import SpecError


def make_record(i: int, **kw) -> TrialRecord:
    base = dict(
        id=f"r{i}",
        domain="bert-A",
        model="bert",
        cluster="A",
        model_fingerprint="m" * 16,
        cluster_fingerprint="c" * 16,
        strategy_id=f"s{i}",
        strategy_kind="sampled",
        strategy={"id": f"s{i}", "kind": "sampled", "nodes": []},
        status="ok",
        iteration_times_s=[0.1 + i * 1e-3, 0.2, 0.3],
        median_s=0.2,
        protocol={"warmup": 2, "iters": 3},
        launcher="local",
        timestamp="2024-05-01T12:00:00.000+00:00",
        wall_s=1.5,
        machine=machine_info(),
    )
    base.update(kw)
    return TrialRecord(**base)


def test_round_trip_and_duplicates(tmp_path):
    store = TrialStore(tmp_path / "s.jsonl")
    assert not (tmp_path / "s.jsonl").exists()  # the constructor does no I/O
    assert list(store.records()) == [] and len(store) == 0
    recs = [make_record(i) for i in range(5)]
    assert all(store.append(r) for r in recs)
    assert list(store.records()) == recs
    assert store.ids() == {f"r{i}" for i in range(5)}
    size = store.path.stat().st_size
    assert store.append(make_record(3, median_s=9.0)) is False
    assert store.path.stat().st_size == size
    # a second handle on the same file sees the same ids
    other = TrialStore(store.path)
    assert other.append(make_record(4)) is False and len(other) == 5
    assert other.append(make_record(5)) is True
    assert store.append(make_record(5)) is False and "r5" in store


def test_record_rules():
    with pytest.raises(ValueError, match="needs median_s"):
        make_record(0, median_s=None)
    with pytest.raises(ValueError, match="UTC offset"):
        make_record(0, timestamp="2024-05-01T12:00:00")
    with pytest.raises(ValueError, match="finite"):
        make_record(0, iteration_times_s=[float("nan")])
    failed = make_record(0, status="failed", median_s=None, iteration_times_s=[], error="boom")
    assert failed.status == "failed"
    info = machine_info(start={"loadavg_1m": 1.25})
    assert info["loadavg_1m_start"] == 1.25 and info["loadavg_1m_end"] == info["loadavg_1m"]
    assert info["cpus"] >= 1 and info["hostname"] and "loadavg_1m_start" not in machine_info()
    # the machine type, as a profile's worker type names it
    from autosync_transfer.runtime.profile import worker_type
    assert info["processor"] and worker_type() == f"cpu:{info['processor']}:threads=1"
    code = ("import sys; from autosync_transfer.dataset.store import machine_info; "
            "machine_info(); assert 'torch' not in sys.modules")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_truncated_last_line_is_skipped_then_repaired(tmp_path):
    store = TrialStore(tmp_path / "s.jsonl")
    for i in range(3):
        store.append(make_record(i))
    with open(store.path, "ab") as f:
        f.write(make_record(3).model_dump_json().encode()[:40])  # a crash mid-write
    fresh = TrialStore(store.path)
    with pytest.warns(TruncatedRecordWarning, match="line 4"):
        assert [r.id for r in fresh.records()] == ["r0", "r1", "r2"]
    assert fresh.append(make_record(3))
    lines = store.path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(ln) for ln in lines[:-1]) and len(lines) == 5
    assert [r.id for r in TrialStore(store.path).records()] == ["r0", "r1", "r2", "r3"]


def test_complete_garbage_last_line_is_an_error_and_kept(tmp_path):
    """Only a last line without its newline is a torn write; a complete bad line is never cut."""
    store = TrialStore(tmp_path / "s.jsonl")
    store.append(make_record(0))
    with open(store.path, "ab") as f:
        f.write(b"\x00\x00{garbage\n")
    before = store.path.read_bytes()
    with pytest.raises(SpecError, match=r"s\.jsonl.*line 2 .*repair"):
        list(TrialStore(store.path).records())
    with pytest.raises(SpecError, match="line 2"):
        TrialStore(store.path).append(make_record(1))
    assert store.path.read_bytes() == before  # nothing deleted


def test_invalid_record_line_names_the_line(tmp_path):
    store = TrialStore(tmp_path / "s.jsonl")
    store.append(make_record(0))
    with open(store.path, "ab") as f:
        f.write(b'{"id": "x", "status": "nonsense"}\n')
    with pytest.raises(SpecError, match="line 2"):
        list(store.records())


def test_repair_moves_bad_lines_to_a_side_file(tmp_path):
    store = TrialStore(tmp_path / "s.jsonl")
    for i in range(3):
        store.append(make_record(i))
    lines = store.path.read_bytes().split(b"\n")[:-1]
    bad = [b"{not json", b'{"id": "x", "status": "nonsense"}', b"[1, 2]"]
    torn = make_record(3).model_dump_json().encode()[:40]
    body = [lines[0], bad[0], lines[1], b"", bad[1], lines[2], bad[2]]
    store.path.write_bytes(b"\n".join(body) + b"\n" + torn)  # torn last line, no newline
    report = TrialStore(store.path).repair()
    assert report.moved == (2, 5, 7, 8) and report.kept == 3
    side = tmp_path / "s.jsonl.bad.jsonl"
    assert report.bad_path == side
    assert side.read_bytes() == b"\n".join([*bad, torn]) + b"\n"
    assert [r.id for r in TrialStore(store.path).records()] == ["r0", "r1", "r2"]
    # a clean store: nothing moved, nothing rewritten; the side file grows only by new bad lines
    again = TrialStore(store.path)
    ino = store.path.stat().st_ino
    assert again.repair().moved == () and store.path.stat().st_ino == ino
    assert again.append(make_record(4))  # a held store object appends to the new file
    assert [r.id for r in TrialStore(store.path).records()] == ["r0", "r1", "r2", "r4"]


def test_append_after_a_concurrent_repair_goes_to_the_new_file(tmp_path):
    store = TrialStore(tmp_path / "s.jsonl")
    store.append(make_record(0))
    assert store.ids() == {"r0"}  # the id cache holds the old file
    with open(store.path, "ab") as f:
        f.write(b"{bad\n")
    TrialStore(store.path).repair()  # another process replaces the file
    assert store.append(make_record(1))
    assert [r.id for r in TrialStore(store.path).records()] == ["r0", "r1"]


def test_complete_last_record_without_newline_is_kept(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(make_record(0).model_dump_json())  # hand-written, no trailing newline
    store = TrialStore(path)
    assert [r.id for r in store.records()] == ["r0"]
    assert store.append(make_record(1))
    assert [r.id for r in store.records()] == ["r0", "r1"]


def test_middle_corruption_names_the_line(tmp_path):
    store = TrialStore(tmp_path / "s.jsonl")
    for i in range(3):
        store.append(make_record(i))
    lines = store.path.read_text().splitlines()
    lines[1] = lines[1][:30]
    store.path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match="line 2"):
        list(TrialStore(store.path).records())
    with pytest.raises(SpecError, match="line 2"):
        TrialStore(store.path).append(make_record(9))
    with pytest.raises(SpecError, match="is a folder"):
        list(TrialStore(store.path.parent).records())
    bad = json.loads(lines[0]) | {"status": "lost"}
    store.path.write_text(json.dumps(bad) + "\n" + lines[2] + "\n")
    with pytest.raises(SpecError, match="line 1.*status"):
        list(TrialStore(store.path).records())


_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from test_store import make_record
    from autosync_transfer.dataset.store import TrialStore
    store = TrialStore(sys.argv[1])
    prefix, n = sys.argv[2], int(sys.argv[3])
    for i in range(n):
        rec = make_record(i, id=f"{{prefix}}{{i}}", error="x" * 20000)
        store.append(rec)
        print(rec.id, flush=True)  # committed: append returned after fsync
""")


def _writer(tmp_path: Path, store: Path, prefix: str, n: int) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(_WRITER.format(tests=str(Path(__file__).parent)))
    return subprocess.Popen([sys.executable, str(script), str(store), prefix, str(n)],
                            stdout=subprocess.PIPE, text=True)


def test_sigkill_while_appending_loses_no_committed_record(tmp_path):
    path = tmp_path / "s.jsonl"
    proc = _writer(tmp_path, path, "k", 200)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # appending has started
    assert first.strip() == "k0"
    time.sleep(random.uniform(0.0, 0.05))  # 200 appends take ~0.1 s here
    proc.kill()
    proc.wait(timeout=30)
    # through the same buffered reader as the first line (it may have read ahead of it;
    # communicate() would read the pipe past that buffer)
    rest = proc.stdout.read()
    committed = {first.strip(), *rest.split()}
    raw = path.read_bytes().split(b"\n")
    complete = [ln for ln in raw[:-1] if ln]  # every line but possibly a partial last one
    ids = [json.loads(ln)["id"] for ln in complete]
    assert len(ids) == len(set(ids))
    assert committed <= set(ids) and len(ids) - len(committed) <= 1
    store = TrialStore(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncatedRecordWarning)  # a partial last line may remain
        got = [r.id for r in store.records()]
    assert got == ids
    assert store.append(make_record(999, id="after-crash"))
    assert [r.id for r in TrialStore(path).records()] == [*ids, "after-crash"]


def test_two_writers_do_not_interleave(tmp_path):
    path = tmp_path / "s.jsonl"
    procs = [_writer(tmp_path, path, p, 40) for p in ("a", "b")]
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    ids = [r.id for r in TrialStore(path).records()]
    assert sorted(ids) == sorted([f"a{i}" for i in range(40)] + [f"b{i}" for i in range(40)])


def test_parquet_compaction_and_meta(tmp_path):
    import pandas as pd

    store = TrialStore(tmp_path / "s.jsonl")
    store.append(make_record(0))
    store.append(make_record(1, strategy=None, strategy_id="torch_ddp", strategy_kind="torch_ddp",
                             estimated_sync_s=0.01, reference=True))
    store.append(make_record(2, status="timeout", median_s=None, iteration_times_s=[]))
    assert store.write_meta({"launcher": "local", "seed": 1}) == {"launcher": "local", "seed": 1}
    assert store.write_meta({"seed": 2})["launcher"] == "local"
    assert store.read_meta() == {"launcher": "local", "seed": 2}
    df = store.to_pandas()
    assert len(df) == 3 and isinstance(df.loc[0, "strategy"], str)
    assert json.loads(df.loc[0, "strategy"])["id"] == "s0" and pd.isna(df.loc[1, "strategy"])
    out = store.compact(tmp_path / "s.parquet")
    assert not list(tmp_path.glob(".*tmp"))
    back = pd.read_parquet(out)
    assert list(back.columns) == list(df.columns)
    rows = back.to_dict(orient="records")
    for row in rows:
        row["iteration_times_s"] = list(row["iteration_times_s"])
        for k, v in row.items():
            if isinstance(v, float) and v != v:
                row[k] = None
    assert [TrialRecord.from_row(r) for r in rows] == list(store.records())
    import pyarrow.parquet as pq

    meta = pq.read_schema(out).metadata
    assert json.loads(meta[b"autosync_meta"]) == {"launcher": "local", "seed": 2}
    empty = TrialStore(tmp_path / "none.jsonl")
    assert len(pd.read_parquet(empty.compact(tmp_path / "none.parquet"))) == 0
