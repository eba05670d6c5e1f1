"""The new user's flow, end to end with the ``local`` launcher: their own model file (the plain
convention, not in the zoo) and their own 2-node resource spec go through collect -> adapt from a
registered simulator of a shipped domain -> search warm-started from the adapted version ->
export -> training with ``DistributedModel`` and the exported strategy; on the way, nothing
needs the catalog: the trial store and every registered version carry the domain."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from autosync_transfer.testing.workloads import resource_spec

MODEL = """
'''A tiny classifier over token ids: an embedding (row-sparse gradients) and two layers.'''
import torch
from torch import nn

BATCH_SIZE = 4


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 6)
        self.fc1 = nn.Linear(6 * 5, 12)
        self.fc2 = nn.Linear(12, 3)

    def forward(self, ids):
        return self.fc2(torch.relu(self.fc1(self.emb(ids).flatten(1))))


def build_model():
    return Net()


def example_batch(batch_size, generator):
    ids = torch.randint(40, (batch_size, 5), generator=generator)
    return ids, ids[:, 0] % 3


def loss_fn(output, targets):
    return nn.functional.cross_entropy(output, targets)
"""

CLUSTER = resource_spec([(1, 1.0), (1, 0.5)])

DOMAIN = "mynet-duo"


def _train_with(rank: int, world: int, spec: str, strategy_json: str, cluster_json: str,
                steps: int) -> tuple[object, list[float]]:
    """A few steps of the workload with ``DistributedModel`` and the strategy; this rank's
    parameters and losses."""
    import torch

    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.domains.workload import load_workload
    from autosync_transfer.runtime.ddp import DistributedModel
    from autosync_transfer.strategies.types import Strategy

    wl = load_workload(spec)
    module = wl.build(seed=rank)  # different on purpose: rank 0's parameters are broadcast
    model = DistributedModel(module, Strategy.from_json(strategy_json),
                             Cluster.model_validate_json(cluster_json), graph=wl.graph())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)  # every rank its own batches
    losses = []
    for _ in range(steps):
        inputs, targets = wl.batch(gen)
        opt.zero_grad()
        loss = wl.loss(model, inputs, targets)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    model.close()
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]), losses


def _json(res) -> dict:  # noqa: ANN001
    assert res.code == 0, (res.code, res.out[-2000:], res.err[-2000:])
    return json.loads(res.out)


@pytest.mark.timeout(600)
def test_own_model_and_cluster_measure_adapt_search_export_train(cli, registry, tmp_path: Path,
                                                                  one_thread) -> None:
    import mlflow
    import pandas as pd
    import torch

    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.registry.versions import resolve
    from autosync_transfer.runtime.launch import spawn_local
    from autosync_transfer.strategies.types import Strategy

    model = tmp_path / "mynet.py"
    model.write_text(textwrap.dedent(MODEL))
    cluster = tmp_path / "duo.yml"
    cluster.write_text(CLUSTER)
    target = ["--model", str(model), "--cluster-file", str(cluster)]
    trials = tmp_path / "trials" / f"{DOMAIN}.jsonl"
    quick = ["--warmup", "1", "--iters", "2", "--max-foreign-cpu", "1", "--launcher", "local"]

    # 1. measure: builders, DDP, then sampled strategies of the user's model on their cluster
    collected = _json(cli("collect", *target, "-n", "14", "--store", str(trials), *quick,
                          "--json"))
    assert collected["domain"] == DOMAIN and collected["collected"]["trials"] == 14
    assert collected["workload"] == str(model)
    described = TrialStore(trials).domains()  # the store carries the domain
    assert list(described) == [DOMAIN] and described[DOMAIN].cluster.name == "duo"
    assert {v.name for v in described[DOMAIN].model.sparse_variables} == {"emb.weight"}

    # 2. a simulator of a shipped domain, then adapt it (named by its URI) to the user's domain
    _json(cli("train", "ncf-A", "--seeds", "1", "--epochs", "2", "--json"))
    source = "models:/autosync-ncf-A@champion"
    adapted = _json(cli("adapt", "--source", source, *target, "--data", str(trials),
                        "--shots", "5", "--epochs", "2", "--json"))
    assert adapted["registered_model"] == f"autosync-{DOMAIN}"
    assert adapted["result"]["shots"] == 5
    info = resolve(f"autosync-{DOMAIN}", adapted["version"])
    assert info.tags["source_uri"] == source and info.tags["source_model"] == "autosync-ncf-A"
    assert info.tags["source_version"] == adapted["source_version"]
    assert info.tags["workload"] == str(model) and info.tags["domain"] == DOMAIN

    # the store's description is enough: evaluate by the domain's name, no --model
    scored = _json(cli("evaluate", DOMAIN, "--simulator",
                       f"models:/autosync-{DOMAIN}/{adapted['version']}", "--data", str(trials),
                       "--json"))
    assert scored["on"] == DOMAIN and scored["metrics"]["strategies"] >= 10

    # 3. search warm-started from the adapted version; it registers without the catalog
    best = tmp_path / "best.json"
    searched = _json(cli("search", *target, "--budget", "6", "--per-round", "3",
                         "--simulator", f"models:/autosync-{DOMAIN}/{adapted['version']}",
                         "--candidates", "40", "--neighbours", "10", "--knob-candidates", "10",
                         "--epochs", "2", "--confirm", "1", "--check-steps", "30", "--store",
                         str(tmp_path / "search.jsonl"), "--export-json", str(best), *quick,
                         "--json"))
    assert searched["domain"] == DOMAIN and searched["trials"] == 6
    assert searched["registered_version"] is not None
    uri = f"models:/autosync-{DOMAIN}/{searched['registered_version']}"

    # the pyfunc of the new version scores strategies of the user's domain
    strategy = Strategy.from_file(best)
    scores = mlflow.pyfunc.load_model(uri).predict(
        pd.DataFrame({"domain": [DOMAIN], "strategy": [strategy.to_json()]}))
    assert len(scores) == 1 and bool(torch.isfinite(torch.as_tensor(scores)).all())
    # and recommend takes the domain from the version
    recommended = _json(cli("recommend", "--simulator", uri, "--candidates", "20", "--json"))
    assert recommended["id"]

    # 4. train with the exported strategy on 2 local gloo processes: the replicas stay equal
    from autosync_transfer.domains.cluster import Cluster

    results = spawn_local(_train_with, 2, str(model), strategy.to_json(),
                          Cluster.from_file(cluster).model_dump_json(), 8, timeout_s=240)
    (p0, losses0), (p1, _) = results
    assert torch.equal(p0, p1)
    assert all(torch.isfinite(torch.tensor(losses0)))


def test_the_example_pair_of_the_acceptance_run() -> None:
    """``examples/workloads/tiny_gpt.py:lab`` on ``examples/clusters/lab.yml``: a cluster unlike
    the catalog's and a model of a few MB of gradients."""
    from autosync_transfer.domains.catalog import CLUSTERS
    from autosync_transfer.domains.workload import workload_domain

    root = Path(__file__).resolve().parents[1]
    domain, spec = workload_domain(f"{root}/examples/workloads/tiny_gpt.py:lab",
                                   root / "examples" / "clusters" / "lab.yml")
    assert domain.name == "tiny_gpt_lab-lab" and spec.endswith("tiny_gpt.py:lab")
    shape = [(n.workers, n.bandwidth_gbps) for n in domain.cluster.nodes]
    assert shape == [(2, 0.5), (1, 0.2)]
    assert all(shape != [(n.workers, n.bandwidth_gbps) for n in c.nodes]
               for c in CLUSTERS.values())
    assert 1e6 <= domain.model.nbytes <= 4e6
    assert {v.name for v in domain.model.sparse_variables} == {"tokens.weight", "positions.weight"}
