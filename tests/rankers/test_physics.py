"""Measured physics found by fingerprint: the step simulator's inputs for scoring and training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.physics import save_calibration, save_profile
from autosync_transfer.domains.profile import (ClusterCalibration, NodeCalibration,
                                               WorkloadProfile)
from autosync_transfer.errors import ConfigError
from autosync_transfer.rankers.datamodule import TrialDataModule
from autosync_transfer.rankers.features import FEATURE_SCHEMA
from autosync_transfer.rankers.physics import clear_physics_cache, measured_physics
from autosync_transfer.rankers.simulator import STEPSIM, Simulator
from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimulator
from autosync_transfer.testing import tiny_domain, tiny_strategies


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Empty folders for written profiles and calibrations (the shipped ones hold nothing of
    the tiny domains)."""
    profiles, calibrations = tmp_path / "profiles", tmp_path / "calibrations"
    monkeypatch.setenv("AUTOSYNC_PROFILES_DIR", str(profiles))
    monkeypatch.setenv("AUTOSYNC_CALIBRATIONS_DIR", str(calibrations))
    clear_physics_cache()
    yield profiles, calibrations
    clear_physics_cache()


@pytest.fixture(scope="module")
def domain() -> Domain:
    return tiny_domain(3, [2, 1, 2], [1.0, 2.0, 0.5], name="tiny-physics")


def _profile(domain: Domain, *, compute_s: float = 0.5, created: str = "2026-01-01") -> (
        WorkloadProfile):
    graph = domain.model
    n = len(graph.variables)
    return WorkloadProfile(
        workload=graph.name, fingerprint=graph.fingerprint, worker_type="cpu:test",
        batch_size=1, forward_s=compute_s / 3, backward_s=2 * compute_s / 3,
        ready_s={v.name: 2 * compute_s / 3 * (n - i) / n for i, v in enumerate(graph.variables)},
        created_at=created)


def _calibration(domain: Domain, launcher: str, *, gbps: float = 0.05, cores: int = 2,
                 created: str = "2026-01-01") -> ClusterCalibration:
    return ClusterCalibration(
        cluster=domain.cluster.name, fingerprint=domain.cluster.fingerprint, launcher=launcher,
        nodes=tuple(NodeCalibration(name=n.name, bandwidth_gbps=gbps, latency_s=1e-4)
                    for n in domain.cluster.nodes),
        intra_bandwidth_gbps=1.0, compute_slowdown={1: 1.0, 2: 1.2, 4: 2.5}, host_cores=cores,
        created_at=created)


def test_stored_physics_changes_the_stepsim_scores(dirs: tuple[Path, Path],
                                                   domain: Domain) -> None:
    strategies = tiny_strategies(domain, 12, seed=3)
    sim = Simulator(STEPSIM)
    fallback = Simulator(STEPSIM, physics="fallback").score(strategies, domain)
    np.testing.assert_array_equal(sim.score(strategies, domain), fallback)  # nothing stored yet

    profile, calibration = _profile(domain), _calibration(domain, "torchrun")
    save_profile(profile)
    save_calibration(calibration)
    measured = sim.score(strategies, domain)  # the same simulator sees the written files
    assert not np.allclose(measured, fallback)
    expected = StepSimulator(domain, profile, calibration).simulate(strategies)["step_s"]
    np.testing.assert_allclose(measured, expected, rtol=1e-12)
    # explicit inputs win; physics="fallback" still forces the fallback
    explicit = Simulator(STEPSIM, profiles=[profile], calibrations=[]).score(strategies, domain)
    np.testing.assert_allclose(
        explicit, StepSimulator(domain, profile).simulate(strategies)["step_s"], rtol=1e-12)
    np.testing.assert_array_equal(
        Simulator(STEPSIM, physics="fallback").score(strategies, domain), fallback)


def test_lookup_prefers_the_launcher_asked_for_else_a_real_cluster(
        dirs: tuple[Path, Path], domain: Domain) -> None:
    save_calibration(_calibration(domain, "emulated", cores=3, created="2026-03-01"))
    found = measured_physics(domain)
    assert found.profile is None and found.calibration is not None
    assert found.calibration.launcher == "emulated"
    # an emulated cluster runs every worker on one host: the config says so
    world = sum(n.workers for n in domain.cluster.nodes)
    assert (found.config.host_processes, found.config.host_cores) == (world, 3)
    none = measured_physics(domain, "torchrun")
    assert none.calibration is None and none.config == StepSimConfig()

    save_calibration(_calibration(domain, "torchrun", created="2026-01-01"))
    save_calibration(_calibration(domain, "torchrun", gbps=0.07, created="2026-02-01"))
    real = measured_physics(domain)  # older than the emulated one, but a real cluster
    assert real.calibration.launcher == "torchrun"
    assert real.calibration.nodes[0].bandwidth_gbps == 0.07  # the newest of its launcher
    assert real.config.host_processes is None
    assert measured_physics(domain, "emulated").calibration.launcher == "emulated"
    # an explicit config keeps its own host
    own = measured_physics(domain, "emulated", config=StepSimConfig(host_processes=2))
    assert own.config.host_processes == 2


def test_the_calibration_of_the_profiles_machine_type_wins(dirs: tuple[Path, Path],
                                                           domain: Domain) -> None:
    """A calibration names the processor it was measured on; the lookup takes the one of the
    profile's machine type, then one that does not say, and another type's only when nothing
    else is stored, however new it is."""
    profile = _profile(domain).model_copy(update={"worker_type": "cpu:AMD EPYC:threads=1"})
    save_profile(profile)
    save_calibration(_calibration(domain, "emulated", gbps=0.01, created="2026-01-01"))
    save_calibration(_calibration(domain, "emulated", gbps=0.03, created="2026-03-01")
                     .model_copy(update={"processor": "Intel Xeon"}))
    assert measured_physics(domain).calibration.nodes[0].bandwidth_gbps == 0.01  # unknown
    save_calibration(_calibration(domain, "emulated", gbps=0.02, created="2026-02-01")
                     .model_copy(update={"processor": "AMD EPYC"}))
    assert measured_physics(domain).calibration.nodes[0].bandwidth_gbps == 0.02  # the same
    save_profile(profile.model_copy(update={"worker_type": "cpu:Intel Xeon:threads=1",
                                            "created_at": "2026-04-01"}))
    found = measured_physics(domain)  # the newest profile is the Intel one
    assert found.profile.worker_type.startswith("cpu:Intel Xeon")
    assert found.calibration.processor == "Intel Xeon"


def test_unreadable_files_are_skipped(dirs: tuple[Path, Path], domain: Domain) -> None:
    profiles, calibrations = dirs
    profiles.mkdir(parents=True)
    calibrations.mkdir(parents=True)
    (profiles / "broken.json").write_text("{not json")
    (calibrations / "broken.v1.json").write_text('{"cluster": "x"}')
    strategies = tiny_strategies(domain, 4, seed=1)
    assert measured_physics(domain)[:2] == (None, None)
    scores = Simulator(STEPSIM).score(strategies, domain)
    np.testing.assert_array_equal(
        scores, Simulator(STEPSIM, physics="fallback").score(strategies, domain))
    save_calibration(_calibration(domain, "emulated"))
    assert measured_physics(domain).calibration is not None
    # a calibration that misses a node of the cluster is not used either
    other = tiny_domain(2, 1, name="tiny-two")
    partial = _calibration(other, "torchrun").model_copy(
        update={"nodes": _calibration(other, "torchrun").nodes[:1]})
    save_calibration(partial)
    assert measured_physics(other).calibration is None


def test_training_features_equal_scoring_features(dirs: tuple[Path, Path],
                                                  domain: Domain) -> None:
    save_profile(_profile(domain))
    save_calibration(_calibration(domain, "emulated"))
    save_calibration(_calibration(domain, "torchrun", gbps=0.2))
    strategies = tiny_strategies(domain, 10, seed=5)
    table = pd.DataFrame({"domain": domain.name, "strategy": strategies,
                          "runtime_s": np.linspace(1.0, 2.0, len(strategies)),
                          "launcher": "emulated"})
    cols = [FEATURE_SCHEMA.agg_index(n) for n in FEATURE_SCHEMA.agg_columns if n.startswith("sim_")]
    assert cols

    def features(dm: TrialDataModule) -> dict[str, np.ndarray]:
        dm.setup()
        d = dm.domain_data[0]
        return {i: f.agg for i, f in zip(d.strategy_ids, d.features)}

    def scored(sim: Simulator) -> dict[str, np.ndarray]:
        return {s.id: f.agg for s, f in zip(
            strategies, sim._featurizer_for(domain).featurize_many(strategies))}

    trained = features(TrialDataModule(table, domains={domain.name: domain}))
    served = scored(Simulator("rnn", launcher="emulated"))
    assert trained.keys() == served.keys()
    for i in trained:
        np.testing.assert_array_equal(trained[i], served[i])
    # the table's launcher picked the emulated calibration, not the (preferred) real one
    real = scored(Simulator("rnn"))
    fallback = features(TrialDataModule(table, domains={domain.name: domain},
                                         physics="fallback"))
    assert any(not np.array_equal(trained[i][cols], real[i][cols]) for i in trained)
    assert any(not np.array_equal(trained[i][cols], fallback[i][cols]) for i in trained)
    assert scored(Simulator("rnn", physics="fallback")).keys() == fallback.keys()
    for i, agg in scored(Simulator("rnn", physics="fallback")).items():
        np.testing.assert_array_equal(agg, fallback[i])


def test_physics_mode_is_part_of_the_config() -> None:
    assert Simulator(STEPSIM).config()["physics"] == "measured"
    assert Simulator(STEPSIM, physics="fallback").config()["physics"] == "fallback"
    with pytest.raises(ConfigError, match="physics must be one of measured, fallback, got 'x'"):
        Simulator(STEPSIM, physics="x")
    # a stepsim config saved without it finds the stored physics; with_launcher copies
    back = Simulator.from_config({"kind": STEPSIM, "schema_version": 1})
    assert back.physics == "measured"
    other = back.with_launcher("torchrun")
    assert other is not back and other.launcher == "torchrun" and back.launcher is None
    assert back.with_launcher(None) is back


def test_evaluation_featurizes_with_the_simulators_physics(dirs: tuple[Path, Path],
                                                           domain: Domain) -> None:
    from autosync_transfer.rankers.simulator import evaluate_simulator

    save_profile(_profile(domain, compute_s=0.05))
    save_calibration(_calibration(domain, "torchrun", gbps=0.01))
    strategies = tiny_strategies(domain, 30, seed=8)
    runtimes = StepSimulator(domain).simulate(strategies)["step_s"]  # the fallback's order
    triples = [(domain, strategies, list(runtimes))]
    measured = TrialDataModule(triples, fractions=(0.0, 0.0, 1.0))
    fallback = TrialDataModule(triples, fractions=(0.0, 0.0, 1.0), physics="fallback")
    measured.setup()
    fallback.setup()
    again = measured.with_physics("fallback")
    assert again is not measured and measured.with_physics("measured") is measured
    assert again.splits() == fallback.splits()
    for a, b in zip(again.domain_data[0].features, fallback.domain_data[0].features):
        np.testing.assert_array_equal(a.agg, b.agg)
    # a simulator trained on the fallback's features (a saved one without "physics") is
    # evaluated on them, whatever the data module was made with
    old = Simulator(STEPSIM, physics="fallback")
    assert evaluate_simulator(old, measured) == evaluate_simulator(old, fallback)
    assert evaluate_simulator(old, measured)["pairwise_accuracy"] == 1.0
    assert evaluate_simulator(Simulator(STEPSIM), measured)["pairwise_accuracy"] < 1.0


def test_a_newer_profile_of_an_uncalibrated_machine_does_not_displace_a_matched_pair(
        dirs: tuple[Path, Path], domain: Domain) -> None:
    """A profile taken later on a machine type no calibration was measured on (a laptop) does
    not pair with another type's calibration while a profile of that type exists: the physics
    stays one machine's. With no matched pair, the newest profile is taken as before."""
    amd = _profile(domain, compute_s=0.5).model_copy(update={
        "worker_type": "cpu:AMD EPYC:threads=1", "created_at": "2026-01-01"})
    laptop = _profile(domain, compute_s=0.2).model_copy(update={
        "worker_type": "cpu:Laptop:threads=1", "created_at": "2026-05-01"})
    save_profile(laptop)
    save_calibration(_calibration(domain, "emulated", gbps=0.02, created="2026-02-01")
                     .model_copy(update={"processor": "AMD EPYC"}))
    alone = measured_physics(domain)  # no AMD profile yet: the newest, with what there is
    assert alone.profile.worker_type.startswith("cpu:Laptop")
    assert alone.calibration.processor == "AMD EPYC"
    save_profile(amd)
    clear_physics_cache()
    found = measured_physics(domain)
    assert found.profile.worker_type.startswith("cpu:AMD EPYC")
    assert found.calibration.processor == "AMD EPYC"


def test_what_was_measured_here_comes_before_what_was_shipped(
        dirs: tuple[Path, Path], domain: Domain, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A newer shipped pair (another machine's, a package upgrade) does not displace the profile
    and calibration written here, however old they are; with nothing written, the shipped pair
    is taken."""
    from autosync_transfer.domains import physics as stored

    shipped_p, shipped_c = tmp_path / "shipped-profiles", tmp_path / "shipped-calibrations"
    monkeypatch.setattr(stored, "shipped_profiles_dir", lambda: shipped_p)
    monkeypatch.setattr(stored, "shipped_calibrations_dir", lambda: shipped_c)
    clear_physics_cache()
    save_profile(_profile(domain, compute_s=0.5).model_copy(update={
        "worker_type": "cpu:AMD EPYC:threads=1", "created_at": "2026-06-01"}), folder=shipped_p)
    save_calibration(_calibration(domain, "emulated", gbps=0.02, created="2026-06-01")
                     .model_copy(update={"processor": "AMD EPYC"}), folder=shipped_c)
    shipped = measured_physics(domain)  # nothing written: the shipped pair
    assert shipped.profile.worker_type.startswith("cpu:AMD EPYC")
    assert shipped.calibration.nodes[0].bandwidth_gbps == 0.02
    save_profile(_profile(domain, compute_s=0.2).model_copy(update={
        "worker_type": "cpu:Intel Xeon:threads=1", "created_at": "2026-01-01"}))
    save_calibration(_calibration(domain, "emulated", gbps=0.03, created="2026-01-01")
                     .model_copy(update={"processor": "Intel Xeon"}))
    clear_physics_cache()
    here = measured_physics(domain)
    assert here.profile.worker_type.startswith("cpu:Intel Xeon")
    assert here.calibration.processor == "Intel Xeon"
    assert here.calibration.nodes[0].bandwidth_gbps == 0.03
    # a calibration written here without a profile of its machine type pairs with none: the
    # shipped pair stays one machine's
    monkeypatch.setenv("AUTOSYNC_PROFILES_DIR", str(tmp_path / "no-profiles"))
    clear_physics_cache()
    mixed = measured_physics(domain)
    assert mixed.profile.worker_type.startswith("cpu:AMD EPYC")
    assert mixed.calibration.processor == "AMD EPYC"
