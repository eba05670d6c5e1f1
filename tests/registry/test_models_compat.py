"""The former ``registry.models`` module keeps its names for one release, and its trials-table
``train_and_register`` / ``evaluate_registered`` read the same strategies as the dataset loader."""

from __future__ import annotations

import numpy as np

from autosync_transfer.testing.synthetic import synthetic_trials


def test_old_names_are_the_new_objects() -> None:
    from autosync_transfer import registry
    from autosync_transfer.registry import flavor, models, versions, workflows

    assert models._PREFIX == versions.REGISTERED_PREFIX == "autosync-"
    for name in models.__all__:
        if name in ("train_and_register", "evaluate_registered"):
            continue  # these take a trials table here (a table of measured strategies there)
        new = next(getattr(m, name) for m in (versions, flavor, workflows) if hasattr(m, name))
        assert getattr(models, name) is new, name
        if name in registry.__all__:
            assert getattr(registry, name) is new, name


def test_a_trials_table_reads_as_the_loader_reads_it() -> None:
    from autosync_transfer.dataset.loader import strategy_table
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.rankers.datamodule import TrialDataModule
    from autosync_transfer.registry import models

    domain = get_domain("ncf-A")
    trials = synthetic_trials(domain, n=30, seed=3)
    trials = trials.assign(median_s=trials["median_s"] * 1.0)
    twice = trials.assign(id=trials["id"] + "-again", median_s=trials["median_s"] * 1.1)
    both = __import__("pandas").concat([trials, twice], ignore_index=True)
    measured, count = models._measured(both, domain)
    assert count == len(both)
    ours = TrialDataModule(measured, domains={domain.name: domain})
    loader = TrialDataModule(strategy_table(both), domains={domain.name: domain})
    ours.setup()
    loader.setup()
    assert ours.splits() == loader.splits()
    np.testing.assert_allclose(ours.domain_data[0].runtimes, loader.domain_data[0].runtimes)
