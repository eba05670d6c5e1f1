"""``recommend``: the best strategy without running anything, exported as JSON and AutoDist."""

from __future__ import annotations

from pathlib import Path

from autosync_transfer.domains.catalog import get_domain
from autosync_transfer.strategies.autodist import read_autodist_file
from autosync_transfer.strategies.types import Strategy
from autosync_transfer.strategies.validate import validate


def test_recommend_exports_json_and_autodist(cli, tmp_path: Path) -> None:
    j, pb = tmp_path / "best.json", tmp_path / "best.pb"
    res = cli("recommend", "ncf-C", "--candidates", "50", "--export-json", str(j),
              "--export-autodist", str(pb))
    assert res.code == 0, res.err
    d = get_domain("ncf-C")
    s = Strategy.from_json(j.read_text())
    validate(s, d)
    back = read_autodist_file(pb, d.cluster)
    assert [n.var_name for n in back.nodes] == [n.var_name for n in s.nodes]
    assert "recommended for ncf-C" in res.out
    # the same again refuses to overwrite, one line, exit 2
    again = cli("recommend", "ncf-C", "--export-json", str(j))
    assert again.code == 2 and "already exists" in again.err


def test_recommend_takes_catalog_names_and_registry_references(registry: Path) -> None:
    """The library call accepts a cluster's catalog name and a simulator's registry reference,
    and picks what the same objects pick."""
    import pytest

    from autosync_transfer import recommend
    from autosync_transfer.domains.catalog import get_cluster, get_model
    from autosync_transfer.errors import UnknownNameError
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.registry import models

    model = get_model("ncf")
    # by default the step-time simulator ranks
    default = recommend(model, get_cluster("C"), Simulator("stepsim"), candidates=30)
    assert recommend(model, "C", candidates=30) == default
    by_objects = recommend(model, get_cluster("C"), Simulator("analytical", {}, 1), candidates=30)
    info = models.log_simulator(Simulator("analytical", {}, 1), domain="ncf-C",
                                metrics={"test_pairwise_accuracy": 0.8},
                                tags={"trial_count": 1, "test_split": "none"})
    assert recommend(model, "C", f"models:/{info.name}/{info.version}", candidates=30) == by_objects
    with pytest.raises(UnknownNameError, match="'Z'"):
        recommend(model, "Z", candidates=30)


def test_recommend_passes_over_unchecked_lossy_candidates(cli, tmp_path: Path) -> None:
    """On vgg16-A the cost model ranks compressed candidates first: without --allow-lossy the
    best lossless one is recommended and the lossy ones passed over are named."""
    from autosync_transfer.runtime.accuracy import is_lossless

    safe, lossy = tmp_path / "safe.json", tmp_path / "lossy.json"
    res = cli("recommend", "vgg16-A", "--candidates", "100", "--export-json", str(safe))
    assert res.code == 0, res.err
    assert is_lossless(Strategy.from_json(safe.read_text()))
    assert "passed over" in res.err and "no convergence check" in res.err
    assert "--allow-lossy" in res.err
    res = cli("recommend", "vgg16-A", "--candidates", "100", "--allow-lossy", "--export-json",
              str(lossy))
    assert res.code == 0, res.err
    assert not is_lossless(Strategy.from_json(lossy.read_text()))
    assert "passed over" not in res.err
