"""Trial stores describe their domains: a workload domain is rebuilt from a store (or its parquet
copy) alone, and its compactly stored strategies decode without the catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autosync_transfer.dataset.loader import (file_meta, find_domain, load_trials,
                                              store_domains, strategy_table)
from autosync_transfer.dataset.store import TrialStore, domain_entry, domains_from_meta
from autosync_transfer.errors import SpecError, UnknownNameError
from autosync_transfer.testing.workloads import embedding_classifier_source

MODEL = embedding_classifier_source()


@pytest.fixture
def domain(tmp_path: Path) -> Any:
    from autosync_transfer.domains.catalog import get_cluster
    from autosync_transfer.domains.workload import load_workload

    model = tmp_path / "tinywl.py"
    model.write_text(MODEL)
    cluster = get_cluster("C").model_copy(update={"name": "three"})
    return load_workload(str(model)).domain(cluster)


def _store(tmp_path: Path, domain: Any) -> Path:
    from autosync_transfer.dataset.collect import record_for
    from autosync_transfer.runtime.trial import Protocol, TrialResult
    from autosync_transfer.strategies.builders import BUILDERS, build

    path = tmp_path / "trials.jsonl"
    store = TrialStore(path)
    for i, name in enumerate(BUILDERS):
        s = build(name, domain)
        res = TrialResult(status="ok", iteration_times_s=[0.01 * (i + 1)] * 2,
                          wall_s=0.1)
        store.append(record_for(domain, s, res, Protocol(warmup=0, iters=2), "local", seed=0,
                                record_id=f"{domain.name}/{s.id}"))
    store.record_domain(domain)
    return path


def test_the_store_describes_its_domain(tmp_path: Path, domain: Any) -> None:
    path = _store(tmp_path, domain)
    entry = json.loads(Path(f"{path}.meta.json").read_text())["domains"][domain.name]
    assert entry == json.loads(json.dumps(domain_entry(domain)))
    assert entry["workload"] == str(tmp_path / "tinywl.py")
    assert TrialStore(path).domains() == {domain.name: domain}
    assert store_domains(path) == {domain.name: domain}
    assert find_domain(domain.name, path) == domain
    assert find_domain("ncf-A", path).name == "ncf-A"  # the catalog first


def test_recording_keeps_other_domains(tmp_path: Path, domain: Any) -> None:
    from autosync_transfer.domains.catalog import get_domain

    path = _store(tmp_path, domain)
    TrialStore(path).write_meta({"launcher": "local"})
    TrialStore(path).record_domain(get_domain("ncf-A"))
    assert set(TrialStore(path).domains()) == {domain.name, "ncf-A"}
    assert TrialStore(path).read_meta()["launcher"] == "local"


def test_compact_strategies_decode_from_the_store_and_its_parquet(tmp_path: Path,
                                                                   domain: Any) -> None:
    path = _store(tmp_path, domain)
    table = strategy_table(load_trials(path))
    assert len(table) == 7 and set(table["domain"]) == {domain.name}
    (tmp_path / "copy").mkdir()
    parquet = TrialStore(path).compact(tmp_path / "copy" / "trials.parquet")
    assert file_meta(parquet)["domains"][domain.name]["fingerprint"] == domain.fingerprint
    path.unlink()
    Path(f"{path}.meta.json").unlink()
    assert find_domain(domain.name, tmp_path / "copy") == domain
    assert len(strategy_table(load_trials(tmp_path / "copy"))) == 7


def test_an_unknown_name_says_where_it_looked(tmp_path: Path, domain: Any) -> None:
    path = _store(tmp_path, domain)
    with pytest.raises(UnknownNameError, match=r"no trial store in .* describes it either "
                                               r"\(described there: tinywl-three\)"):
        find_domain("other-three", path)


def test_an_edited_description_is_refused(tmp_path: Path, domain: Any) -> None:
    meta = {"domains": {domain.name: domain_entry(domain)}}
    meta["domains"][domain.name]["fingerprint"] = "0" * 16
    with pytest.raises(SpecError, match="does not match its name or fingerprint"):
        domains_from_meta(meta)
    with pytest.raises(SpecError, match="not a valid domain description"):
        domains_from_meta({"domains": {"x-y": {"domain": {"name": "x-y"}}}})
