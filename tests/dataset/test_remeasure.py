"""Measuring stored trials again: which trials, superseding records, loader, resumption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autosync_transfer.dataset.collect import remeasure_candidates
from autosync_transfer.dataset.loader import load_trials, superseded_ids
from autosync_transfer.dataset.store import TrialRecord, TrialStore, arrow_schema

_BASE = dict(domain="ncf-A", model="ncf", cluster="A", model_fingerprint="m",
             cluster_fingerprint="c", strategy_kind="sampled", strategy=None,
             iteration_times_s=[0.1], protocol={"warmup": 1, "iters": 2}, launcher="local",
             timestamp="2024-05-01T12:00:00+00:00", wall_s=1.0)


def rec(rid: str, sid: str, *, machine: dict, median: float = 0.1, status: str = "ok",
        reference: bool = False, supersedes: str | None = None) -> TrialRecord:
    return TrialRecord(id=rid, strategy_id=sid, status=status,  # type: ignore[arg-type]
                       median_s=median if status == "ok" else None, machine=machine,
                       reference=reference, supersedes=supersedes, **_BASE)


CHECKED = {"foreign_cpu": 0.01}


def test_candidates_are_unchecked_or_disturbed_first_measurements() -> None:
    records = [
        rec("a", "s1", machine={}),                                   # unchecked
        rec("b", "s2", machine=CHECKED),                              # fine
        rec("c", "s3", machine={"foreign_cpu": 0.5, "disturbed": True}),
        rec("d", "s4", machine={}, status="failed"),                  # unchecked but failed
        rec("r", "ddp", machine={}, reference=True),                  # references are never
        rec("e", "s5", machine={}),
        rec("e@1", "s5", machine=CHECKED, supersedes="e"),            # already done
        rec("f", "s6", machine={}),
        rec("f@1", "s6", machine={"foreign_cpu": 0.4, "disturbed": True}, supersedes="f"),
        rec("g", "s7", machine={"foreign_cpu": 0.12}),                # above today's 5 %
        rec("h", "s8", machine={}),
        rec("h@1", "s8", machine={"foreign_cpu": 0.08, "max_foreign_cpu": 0.05},
            supersedes="h"),                                          # over its own threshold
        rec("i", "s9", machine={}),
        rec("i@1", "s9", machine=CHECKED, status="timeout", supersedes="i"),  # redo failed
        rec("ncf-A/search/run/x", "s10", machine={}),                 # a search run's state
    ]
    ids = lambda reasons: [r.id for r in remeasure_candidates(records, reasons)]  # noqa: E731
    assert ids(("unchecked",)) == ["a", "f", "h", "i"]  # f, h, i: their redo does not count
    assert ids(("disturbed",)) == ["c", "g"]
    assert ids(("unchecked", "disturbed")) == ["a", "c", "f", "g", "h", "i"]
    assert [r.id for r in remeasure_candidates(records, ("disturbed",), 0.2)] == ["c"]
    with pytest.raises(Exception, match="--remeasure must be among"):
        remeasure_candidates(records, ("noisy",))


def test_loader_uses_the_undisturbed_remeasurement(tmp_path: Path) -> None:
    store = TrialStore(tmp_path / "t.jsonl")
    for r in [rec("a", "s1", machine={}, median=0.5),
              rec("a@1", "s1", machine=CHECKED, median=0.2, supersedes="a"),
              rec("b", "s2", machine={}, median=0.3),
              rec("b@1", "s2", machine={"foreign_cpu": 0.6, "disturbed": True}, median=0.9,
                  supersedes="b")]:
        assert store.append(r)
    df = load_trials(tmp_path)
    assert sorted(df["id"]) == ["a@1", "b"]
    assert dict(zip(df["strategy_id"], df["median_s"])) == {"s1": 0.2, "s2": 0.3}
    assert superseded_ids(load_trials(tmp_path, superseded=True, disturbed=True)) == {"a"}
    everything = load_trials(tmp_path, superseded=True, disturbed=True)
    assert sorted(everything["id"]) == ["a", "a@1", "b", "b@1"]
    # a second re-measurement (the first was above today's threshold) replaces the first too
    later = rec("a@2", "s1", machine=CHECKED, median=0.25, supersedes="a")
    assert store.append(later.model_copy(update={"timestamp": "2024-05-02T12:00:00+00:00"}))
    df = load_trials(tmp_path)
    assert sorted(df["id"]) == ["a@2", "b"]
    assert superseded_ids(load_trials(tmp_path, superseded=True)) == {"a", "a@1"}
    # a re-measurement that failed, or went over its threshold, leaves the trial in place
    assert store.append(rec("c", "s3", machine={}, median=0.4))
    assert store.append(rec("c@1", "s3", machine=CHECKED, status="timeout", supersedes="c"))
    assert store.append(rec("d", "s4", machine={}, median=0.5))
    assert store.append(rec("d@1", "s4", machine={"foreign_cpu": 0.3, "max_foreign_cpu": 0.05},
                            median=0.7, supersedes="d"))
    df = load_trials(tmp_path)
    assert {"c", "d"} <= set(df["id"]) and "c@1" not in set(df["id"])


def test_parquet_written_before_supersedes_still_loads(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = rec("a", "s1", machine={}).to_row()
    del row["supersedes"]
    row["schema_version"] = 1
    old = pa.schema([f for f in arrow_schema() if f.name != "supersedes"])
    pq.write_table(pa.Table.from_pylist([row], schema=old), tmp_path / "old.parquet")
    df = load_trials(tmp_path)
    assert list(df["id"]) == ["a"] and df["supersedes"].isna().all()


def test_supersedes_must_name_another_first_measurement() -> None:
    with pytest.raises(Exception, match="supersedes must name another"):
        rec("a", "s1", machine={}, supersedes="a")
    with pytest.raises(Exception, match="supersedes must name another"):
        rec("r", "ddp", machine={}, reference=True, supersedes="x")


def _strip_checks(path: Path, unchecked: set[str], disturbed: set[str]) -> None:
    """Rewrite a store as collections before the disturbance check wrote it (``unchecked``:
    no foreign-CPU record) or as a collection whose trials stayed disturbed."""
    lines = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["id"] in unchecked:
            r["machine"] = {k: v for k, v in r["machine"].items()
                            if k not in ("foreign_cpu", "attempts")}
            r["schema_version"] = 1
            del r["supersedes"]
        if r["id"] in disturbed:
            r["machine"]["disturbed"] = True
        lines.append(json.dumps(r))
    path.write_text("\n".join(lines) + "\n")


def test_collect_remeasure_for_real(cli, tmp_path: Path) -> None:  # noqa: ANN001
    store = tmp_path / "ncf-A.jsonl"
    common = ("--launcher", "local", "--warmup", "1", "--iters", "2", "--store", str(store),
              "--seed", "3", "--reference-every", "0", "--max-foreign-cpu", "1")
    r = cli("collect", "ncf-A", "--count", "4", *common)
    assert r.code == 0, r.err
    first = [TrialRecord.model_validate_json(x) for x in store.read_text().splitlines()]
    ids = [x.id for x in first]
    _strip_checks(store, unchecked={ids[0], ids[2]}, disturbed={ids[3]})
    assert len(load_trials(store)) == 3  # the disturbed one is left out

    r = cli("collect", "ncf-A", "--remeasure", "unchecked,disturbed", *common)
    assert r.code == 0, r.err
    assert "3 trials measured again" in r.out
    records = [TrialRecord.model_validate_json(x) for x in store.read_text().splitlines()]
    new = [x for x in records if x.supersedes]
    assert sorted(x.supersedes for x in new) == sorted([ids[0], ids[2], ids[3]])
    assert all(x.id == f"{x.supersedes}@1" and "foreign_cpu" in x.machine for x in new)
    by_id = {x.id: x for x in first}
    assert all(x.strategy_id == by_id[x.supersedes].strategy_id for x in new)
    assert sum(x.reference for x in records) == 1  # one drift reference at the start
    df = load_trials(store)
    df = df[~df["reference"]]
    assert len(df) == 4 and set(df["strategy_id"]) == {x.strategy_id for x in first}
    assert not set(df["id"]) & {ids[0], ids[2]}

    # nothing left to measure again; the collection target still counts first measurements
    before = store.read_text()
    r = cli("collect", "ncf-A", "--count", "4", "--remeasure", "unchecked", *common)
    assert r.code == 0, r.err
    assert "0 trials measured again" in r.out and "4 trials" in r.out
    assert store.read_text() == before


def test_remeasure_leaves_other_protocols_alone_and_refuses_bad_input(cli, tmp_path: Path) -> None:  # noqa: ANN001
    from autosync_transfer.domains.catalog import get_domain

    d = get_domain("ncf-A")
    store = tmp_path / "t.jsonl"
    TrialStore(store).append(rec("ncf-A/x", "s1", machine={}).model_copy(update={
        "model_fingerprint": d.model.fingerprint, "cluster_fingerprint": d.cluster.fingerprint}))
    before = store.read_text()
    r = cli("collect", "ncf-A", "--remeasure", "unchecked", "--store", str(store),
            "--launcher", "local", "--warmup", "1", "--iters", "5", "--max-foreign-cpu", "1")
    assert r.code == 0, r.err
    assert "0 trials measured again" in r.out and "1 measured with another launcher" in r.out
    r = cli("collect", "ncf-A", "--remeasure", "unchecked", "--store", str(store),
            "--launcher", "emulated", "--warmup", "1", "--iters", "2")
    assert r.code == 0 and "1 measured with another launcher" in r.out, r.err
    assert store.read_text() == before
    r = cli("collect", "ncf-A", "--remeasure", "unchecked", "--count", "3", "--store",
            str(store), "--preset", "odd")
    assert r.code == 2 and "unknown sampler preset 'odd'" in r.err
    r = cli("collect", "ncf-A", "--remeasure", "noisy", "--store", str(store))
    assert r.code == 2 and "--remeasure must be among" in r.err and "'noisy'" in r.err
    r = cli("collect", "ncf-A", "--store", str(store))
    assert r.code == 2 and "--count is required" in r.err
    assert store.read_text().count("\n") == 1
