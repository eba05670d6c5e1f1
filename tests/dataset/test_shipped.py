"""The dataset shipped in datasets/: schema, provenance and counts."""

from __future__ import annotations

import pytest

pd = pytest.importorskip("pandas")

#: floors for what is shipped
MIN_TRIALS_PER_DOMAIN = 20
MIN_DOMAINS = 15
#: every domain is collected to the full 200 successful trials
FULL_DOMAINS = ("ncf-A", "ncf-B", "ncf-C", "bert-3l-A", "bert-3l-B", "bert-3l-C", "bert-A",
                "bert-B", "bert-C", "bert-12l-A", "bert-12l-B", "bert-12l-C", "vgg16-s-A",
                "vgg16-s-B", "vgg16-s-C")
FULL_TRIALS = 200


@pytest.fixture(scope="module")
def shipped():
    from autosync_transfer.dataset.loader import default_datasets_dir, load_trials

    if not any(default_datasets_dir().rglob("*.jsonl")):
        pytest.skip("no shipped trial stores")
    return load_trials(status=None)


def test_schema(shipped):
    for col in ("id", "domain", "model", "cluster", "model_fingerprint", "cluster_fingerprint",
                "strategy_id", "strategy_kind", "strategy", "status", "iteration_times_s",
                "median_s", "protocol", "launcher", "reference", "timestamp", "machine"):
        assert col in shipped.columns, col
    assert shipped["id"].is_unique
    assert set(shipped["status"]) <= {"ok", "failed", "timeout"}
    ok = shipped[shipped["status"] == "ok"]
    assert (ok["median_s"] > 0).all()


def test_domains_models_and_clusters(shipped):
    from autosync_transfer.domains.catalog import get_domain

    domains = sorted(shipped["domain"].unique())
    assert len(domains) >= MIN_DOMAINS
    assert shipped["model"].nunique() >= 5 and shipped["cluster"].nunique() >= 3
    for name in domains:
        d = get_domain(name)
        sub = shipped[shipped["domain"] == name]
        assert set(sub["model_fingerprint"]) == {d.model.fingerprint}, name
        assert set(sub["cluster_fingerprint"]) == {d.cluster.fingerprint}, name
        assert set(sub["launcher"]) == {"emulated"}, name


def test_counts_builders_and_ddp(shipped):
    from autosync_transfer.strategies.builders import BUILDERS

    for name, sub in shipped.groupby("domain"):
        trials = sub[~sub["reference"]]
        assert len(trials) >= MIN_TRIALS_PER_DOMAIN, name
        kinds = set(trials[trials["status"] == "ok"]["strategy_kind"])
        assert set(BUILDERS) | {"torch_ddp"} <= kinds, (name, kinds)
        assert sub["reference"].any(), name  # drift references were taken


def test_full_domains_have_200_successful_trials(shipped):
    for name in FULL_DOMAINS:
        sub = shipped[(shipped["domain"] == name) & ~shipped["reference"]]
        assert (sub["status"] == "ok").sum() >= FULL_TRIALS, name
        assert sub["id"].is_unique, name


def test_strategies_decode_and_validate(shipped):
    from autosync_transfer.dataset.loader import strategies_and_runtimes
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.strategies.validate import validate

    for name, sub in shipped.groupby("domain"):
        pairs = strategies_and_runtimes(sub)
        assert pairs, name
        d = get_domain(name)
        for strategy, runtime in pairs[:5] + pairs[-5:]:
            validate(strategy, d)
            assert runtime > 0
