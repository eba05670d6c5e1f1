"""The demo task the examples and benchmarks share: learnable data, the classifier's shape, and
``run_emulated`` running a script on every worker of an emulated cluster with torchrun's
environment."""

from __future__ import annotations

import json

import pytest
import torch

from autosync_transfer.domains.cluster import Cluster, Node


def test_the_task_s_labels_are_readable_from_its_tokens_and_reproducible() -> None:
    from autosync_transfer.demos import TOKENS, TextClassifier, classifier_batch
    from autosync_transfer.demos.task import CLASSES, VOCAB

    x, y = classifier_batch(torch.Generator().manual_seed(3), 64)
    assert x.shape == (64, TOKENS) and y.shape == (64,)
    assert torch.equal(x // (VOCAB // CLASSES), y[:, None].expand(-1, TOKENS))
    x2, y2 = classifier_batch(torch.Generator().manual_seed(3), 64)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert TextClassifier()(x).shape == (64, CLASSES)
    assert sum(p.numel() for p in TextClassifier().parameters()) == 2000 * 64 + 64 * 512 + 512 + \
        512 * 512 + 512 + 512 * CLASSES + CLASSES


def test_lightning_layout_describes_uneven_nodes_as_one_node_per_worker(monkeypatch) -> None:  # noqa: ANN001
    from autosync_transfer.demos import lightning_layout

    even = Cluster(name="e", nodes=(Node(name="a", address="10.0.0.1", workers=2, bandwidth_gbps=1, chief=True),
                                    Node(name="b", address="10.0.0.2", workers=2, bandwidth_gbps=1)))
    uneven = Cluster(name="u", nodes=(Node(name="a", address="10.0.0.1", workers=2, bandwidth_gbps=1, chief=True),
                                      Node(name="b", address="10.0.0.2", workers=1, bandwidth_gbps=1)))
    for name in ("GLOO_SOCKET_IFNAME", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.setenv(name, "x")  # recorded, so that what the layout sets is undone
        monkeypatch.delenv(name)
    assert lightning_layout(uneven, "local") == (3, 1)
    assert lightning_layout(even, "emulated") == (2, 2)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("NODE_RANK", "1")
    assert lightning_layout(uneven, "emulated") == (1, 3)
    import os

    assert (os.environ["NODE_RANK"], os.environ["LOCAL_RANK"]) == ("2", "0")


_REPORT = """
import json, os, sys
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
        "MASTER_PORT")
with open(os.path.join(sys.argv[1], "r" + os.environ["RANK"]), "w") as f:
    json.dump({k: os.environ.get(k) for k in keys}, f)
sys.exit(int(sys.argv[2]) if os.environ["RANK"] == "2" else 0)
"""


@pytest.mark.netns
@pytest.mark.parametrize("code", [0, 3])
def test_run_emulated_runs_every_worker_in_its_node_with_torchrun_s_environment(
        tmp_path, code, two_emulated_hosts, monkeypatch) -> None:  # noqa: ANN001
    """Three workers on two emulated nodes: each sees its rank, its node's rank and local rank,
    and rank 0's address; a failing worker's exit code is returned, and the run's namespaces
    are gone (its own: tests running beside it may hold theirs)."""
    from autosync_transfer.demos import run_emulated
    from autosync_transfer.runtime.emulation import EmulatedCluster, list_namespaces

    made: list[EmulatedCluster] = []
    enter = EmulatedCluster.__enter__

    def recorded(self):  # noqa: ANN001, ANN202 - the real __enter__, remembering the cluster
        made.append(self)
        return enter(self)

    monkeypatch.setattr(EmulatedCluster, "__enter__", recorded)
    c = two_emulated_hosts
    script = tmp_path / "report.py"
    script.write_text(_REPORT)
    assert run_emulated(c, [str(script), str(tmp_path), str(code)], timeout_s=120) == code
    mine = {n for ec in made for n in ec.namespaces}
    assert len(mine) == 3 and not mine & set(list_namespaces())  # two nodes + the bridge: gone
    if code:
        return
    env = [json.loads((tmp_path / f"r{r}").read_text()) for r in range(3)]
    assert [(e["RANK"], e["LOCAL_RANK"], e["NODE_RANK"], e["LOCAL_WORLD_SIZE"]) for e in env] == \
        [("0", "0", "0", "2"), ("1", "1", "0", "2"), ("2", "0", "1", "1")]
    assert {e["WORLD_SIZE"] for e in env} == {"3"}
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in env}) == 1
