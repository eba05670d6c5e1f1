"""Profiling a workload on one process: compute and gradient-ready times of the model graph's
variables in backward order, action costs increasing with size, a cache keyed by fingerprint."""

from __future__ import annotations

import json

import pytest

from autosync_transfer.domains.physics import find_profiles, profile_file_name
from autosync_transfer.domains.profile import ACTIONS
from autosync_transfer.domains.workload import load_workload
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.profile import (get_profile, profile_workload, size_grid,
                                               worker_type)
from autosync_transfer.testing.workloads import write_workload

MLP = (
    "import torch\n"
    "from torch import nn\n\n"
    "BATCH_SIZE = {batch}\n\n"
    "def build_model():\n"
    "    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),\n"
    "                         nn.Linear(64, 4))\n\n"
    "def example_batch(batch_size, generator):\n"
    "    x = torch.randn(batch_size, 32, generator=generator)\n"
    "    return x, torch.randint(4, (batch_size,), generator=generator)\n\n"
    "def loss_fn(output, targets):\n"
    "    return nn.functional.cross_entropy(output, targets)\n"
)

FAST = {"steps": 3, "warmup": 1, "attempts": 1, "largest": 1 << 18}


def _mlp(tmp_path, batch: int = 8, name: str = "mlp"):  # noqa: ANN202
    return load_workload(str(write_workload(tmp_path, name, MLP.format(batch=batch))))


def test_size_grid_is_geometric_and_ends_at_largest() -> None:
    assert size_grid(256) == [256]
    assert size_grid(5000) == [256, 1024, 4096, 5000]
    assert size_grid(4096) == [256, 1024, 4096]


def test_profile_of_a_tiny_model(tmp_path) -> None:
    wl = _mlp(tmp_path)
    graph = wl.graph()
    prof = profile_workload(wl, **FAST)
    assert prof.fingerprint == graph.fingerprint
    assert prof.worker_type == worker_type(1) and prof.clock == "cpu" and prof.threads == 1
    assert prof.batch_size == 8 and prof.steps == 3
    assert prof.forward_s > 0 and prof.backward_s > 0 and prof.optimizer_s > 0
    # every variable of the model graph, by the graph's names
    assert set(prof.ready_s) == {v.name for v in graph.variables}
    # backward runs the layers in reverse: a later layer's gradients are ready before an
    # earlier layer's
    layer = {v.name: int(v.name.split(".")[0]) for v in graph.variables}
    by_time = sorted(prof.ready_s, key=prof.ready_s.get)
    layers = [layer[n] for n in by_time]
    assert layers == sorted(layers, reverse=True), by_time
    assert all(0 <= t <= prof.backward_s * 1.5 for t in prof.ready_s.values())
    # every action, costs not decreasing with size and growing over the range
    assert set(prof.actions) == set(ACTIONS)
    for cost in prof.actions.values():
        assert cost.elements == tuple(size_grid(FAST["largest"]))
        assert all(b >= a for a, b in zip(cost.seconds, cost.seconds[1:])), cost
        assert cost.seconds[-1] > cost.seconds[0], cost
    assert prof.seconds > 0 and prof.foreign_cpu is not None
    assert "torch" in prof.versions


def test_profile_is_cached_by_fingerprint_and_worker_type(tmp_path) -> None:
    folder = tmp_path / "profiles"
    wl = _mlp(tmp_path)
    first, measured = get_profile(wl, folder=folder, **FAST)
    assert measured
    name = profile_file_name(first.fingerprint, first.worker_type, first.workload)
    assert json.loads((folder / name).read_text())["fingerprint"] == first.fingerprint
    again, measured = get_profile(wl, folder=folder, **FAST)
    assert not measured and again == first  # a cache hit: nothing measured
    # another batch size is another graph: its fingerprint finds no profile
    other_wl = _mlp(tmp_path, batch=16, name="mlp16")
    assert other_wl.graph().fingerprint != wl.graph().fingerprint
    other, measured = get_profile(other_wl, folder=folder, **FAST)
    assert measured and other.fingerprint == other_wl.graph().fingerprint
    assert len(find_profiles(folder=folder)) == 2
    # --force measures again and replaces the cached profile of that key
    forced, measured = get_profile(wl, folder=folder, force=True, **FAST)
    assert measured and forced.created_at >= first.created_at
    assert len(find_profiles(first.fingerprint, first.worker_type, folder=folder)) == 1
    # another worker type (threads) is another key
    assert get_profile(wl, folder=folder, threads=2, **FAST)[1]


def test_a_reused_disturbed_profile_says_so(tmp_path, monkeypatch, capsys) -> None:
    """``domains profile`` reusing a stored profile measured under foreign CPU load (above
    PROFILE_MAX_FOREIGN_CPU) says it is disturbed and how to measure again; a quiet one does not."""
    from autosync_transfer.cli import main
    from autosync_transfer.cli._common import reset_consoles
    from autosync_transfer.runtime.profile import PROFILE_MAX_FOREIGN_CPU

    folder = tmp_path / "profiles"
    monkeypatch.setenv("AUTOSYNC_PROFILES_DIR", str(folder))
    wl = _mlp(tmp_path)
    prof, _ = get_profile(wl, folder=folder, **FAST)
    path = folder / profile_file_name(prof.fingerprint, prof.worker_type, prof.workload)
    for share, disturbed in ((PROFILE_MAX_FOREIGN_CPU + 0.5, True), (0.0, False)):
        path.write_text(prof.model_copy(update={"foreign_cpu": share}).model_dump_json())
        reset_consoles()
        try:
            main(["domains", "profile", "--model", str(wl.spec)])
        except SystemExit as e:
            assert e.code in (0, None)
        finally:
            reset_consoles()
        printed = capsys.readouterr().out
        assert "stored profile reused" in printed
        assert ("disturbed" in printed) is disturbed, printed


def test_bad_arguments_name_the_parameter(tmp_path) -> None:
    wl = _mlp(tmp_path)
    with pytest.raises(ConfigError, match="steps must be an int >= 1, got 0"):
        profile_workload(wl, steps=0)
    with pytest.raises(ConfigError, match="max_foreign_cpu must be in"):
        profile_workload(wl, max_foreign_cpu=2.0)
