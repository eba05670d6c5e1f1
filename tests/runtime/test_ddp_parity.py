"""Parity with torch DDP: DistributedModel with a lossless strategy trains exactly like
``DistributedDataParallel`` where DDP defines the behaviour.

One pair of gloo processes runs every scenario side by side with DDP on the same seeds and data:
a model with BatchNorm (buffers broadcast from rank 0), an unused branch
(``find_unused_parameters``: its ``grad`` stays ``None`` and AdamW's weight decay leaves it alone),
gradient accumulation (``no_sync``) and a checkpoint resume in the middle (state_dict with DDP's
keys, optimizer state, sync state) — for the all-reduce and the parameter-server builders.
Also: repeated backward passes, ``sync_on="step"``, bf16 autocast, the error without
``find_unused_parameters``, compressor state in checkpoints, a resume on another world size.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.runtime.launch import spawn_local

STEPS, ACCUM, PER_RANK, RESUME_AT = 4, 2, 4, 2
BUILDERS = ("all_reduce", "ps")


class ParityNet(torch.nn.Module):
    """linear -> BatchNorm -> relu -> linear, plus a branch the forward never uses."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 3)
        self.aux = torch.nn.Linear(16, 3)  # unused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def _cluster() -> Cluster:
    return Cluster(name="t", nodes=(
        Node(name="n0", address="10.9.0.1", workers=1, bandwidth_gbps=1.0, chief=True),
        Node(name="n1", address="10.9.0.2", workers=1, bandwidth_gbps=1.0)))


def _data(world: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``data[micro_batch] = (x[world, PER_RANK, 6], y[world, PER_RANK])``."""
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(world, PER_RANK, 6, generator=g) * 3 + 1,
             torch.randint(0, 3, (world, PER_RANK), generator=g)) for _ in range(STEPS * ACCUM)]


def _net(rank: int) -> ParityNet:
    torch.manual_seed(rank)  # different on purpose: rank 0's parameters and buffers are broadcast
    return ParityNet()


def _opt(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)


def _steps(model, opt, data, rank: int, start: int, stop: int, *, autocast: bool = False) -> None:  # noqa: ANN001
    """Optimizer steps ``start..stop``, each over ACCUM micro-batches (no_sync on all but the last)."""
    for s in range(start, stop):
        opt.zero_grad()
        for k in range(ACCUM):
            x, y = data[s * ACCUM + k]
            quiet = model.no_sync() if k < ACCUM - 1 else nullcontext()
            amp = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else nullcontext()
            with quiet:
                with amp:
                    loss = F.cross_entropy(model(x[rank]), y[rank]) / ACCUM
                loss.backward()
        opt.step()


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _strategy(builder: str, module: torch.nn.Module, **options):  # noqa: ANN202
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.strategies.builders import build

    graph = ModelGraph.from_torch(module, name="parity")
    return build(builder, Domain(name="parity-t", model=graph, cluster=_cluster()), **options)


def _ddp_run(rank: int, world: int, data, *, autocast: bool = False) -> dict:  # noqa: ANN001
    from torch.nn.parallel import DistributedDataParallel

    net = _net(rank)
    ddp = DistributedDataParallel(net, find_unused_parameters=True)
    opt = _opt(ddp)
    _steps(ddp, opt, data, rank, 0, STEPS, autocast=autocast)
    return {"state": _state(net), "keys": list(ddp.state_dict()), "aux_grad": net.aux.weight.grad}


def _ours_run(rank: int, world: int, data, builder: str) -> dict:  # noqa: ANN001
    """RESUME_AT steps, a checkpoint (rank 0's, as a single file would hold), a fresh process
    state (new module, wrapper, optimizer), the remaining steps."""
    import torch.distributed as dist

    from autosync_transfer.runtime.ddp import DistributedModel

    net = _net(rank)
    initial_aux = None
    model = DistributedModel(net, _strategy(builder, net), _cluster(), find_unused_parameters=True)
    opt = _opt(model)
    _steps(model, opt, data, rank, 0, RESUME_AT)
    initial_aux = net.aux.weight.detach().clone()
    box = [{"model": model.state_dict(), "sync": model.sync_state_dict()}]
    dist.broadcast_object_list(box, src=0)
    ckpt = {**box[0], "optim": opt.state_dict()}
    syncs = model.executor.syncs
    del model, opt, net  # nothing to close

    net = _net(rank + 7)
    model = DistributedModel(net, None, _cluster(), find_unused_parameters=True)  # default strategy
    model.load_state_dict(ckpt["model"])  # DDP's keys
    model.load_sync_state_dict(ckpt["sync"])  # brings the checkpoint's strategy back
    opt = _opt(model)
    opt.load_state_dict(ckpt["optim"])
    _steps(model, opt, data, rank, RESUME_AT, STEPS)
    return {"state": _state(net), "keys": list(model.state_dict()), "aux_grad": net.aux.weight.grad,
            "aux_moved": not torch.equal(net.aux.weight, initial_aux), "strategy": model.strategy,
            "syncs": syncs + model.executor.syncs}


def _repeated_backward(rank: int, world: int, data, sync_on: str | None) -> dict:  # noqa: ANN001
    """Two forward/backward passes per optimizer step; ``sync_on=None`` is torch DDP."""
    from torch.nn.parallel import DistributedDataParallel

    from autosync_transfer.runtime.ddp import DistributedModel

    net = _net(rank)
    net.aux = torch.nn.Identity()  # every parameter used
    if sync_on is None:
        model = DistributedDataParallel(net)
    else:
        model = DistributedModel(net, _strategy("all_reduce", net), _cluster(), sync_on=sync_on)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for s in range(STEPS):
        opt.zero_grad()
        for k in range(2):
            x, y = data[s * 2 + k]
            F.cross_entropy(model(x[rank]), y[rank]).backward()
        opt.step()
    return {"state": _state(net), "syncs": None if sync_on is None else model.executor.syncs}


def _refusals(rank: int, world: int, data) -> dict:  # noqa: ANN001
    import warnings

    from autosync_transfer.errors import ConfigError
    from autosync_transfer.runtime.ddp import DistributedModel

    out: dict = {}
    # on DDP's reducer (the all-reduce builder fits it) DDP finds the unused parameter at the
    # next forward: refused there in one line, and the model stays usable
    net = _net(rank)
    model = DistributedModel(net, _strategy("all_reduce", net), _cluster())
    x, y = data[0]
    F.cross_entropy(model(x[rank]), y[rank]).backward()
    try:
        model(x[rank])
        out["reducer_unused_error"] = None
    except ConfigError as e:
        out["reducer_unused_error"] = str(e)
    loss = F.cross_entropy(model(x[rank]), y[rank]) + 0 * model.module.aux(torch.zeros(1, 16)).sum()
    loss.backward()
    out["reducer_backend"] = model.backend
    out["reducer_grads_after_refusal"] = net.fc1.weight.grad.clone()

    # on the executor the refusal comes at the end of the backward itself
    net = _net(rank)
    model = DistributedModel(net, _strategy("all_reduce", net), _cluster(), use_ddp_reducer=False)
    try:
        F.cross_entropy(model(x[rank]), y[rank]).backward()
        out["unused_error"] = None
    except ConfigError as e:
        out["unused_error"] = str(e)
    # the executor stays usable after the refusal: use every parameter, train one step
    loss = F.cross_entropy(model(x[rank]), y[rank]) + 0 * model.module.aux(torch.zeros(1, 16)).sum()
    loss.backward()
    out["grads_equal_after_refusal"] = net.fc1.weight.grad.clone()

    # a checkpoint of another world size: planned again, compressor state reset, a warning
    state = model.sync_state_dict()
    fresh = DistributedModel(_net(rank), None, _cluster(), find_unused_parameters=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh.load_sync_state_dict({**state, "world_size": 3})
        fresh.setup()
    out["resize_warning"] = [str(w.message) for w in caught]
    out["resize_strategy_kind"] = fresh.strategy.kind
    return out


def _compressor_resume(rank: int, world: int, data, resume: bool | None) -> dict:  # noqa: ANN001
    """PowerSGD with error feedback: uninterrupted (``resume=None``), or a resume at RESUME_AT
    with (``True``) or without (``False``) the sync state."""
    from autosync_transfer.runtime.ddp import DistributedModel

    def fresh(seed_rank: int):  # noqa: ANN202
        net = _net(seed_rank)
        net.aux = torch.nn.Identity()
        return net, DistributedModel(net, _strategy("all_reduce", net, compressor="powersgd",
                                                    powersgd_rank=2), _cluster())

    net, model = fresh(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _steps(model, opt, data, rank, 0, RESUME_AT if resume is not None else STEPS)
    if resume is not None:
        ckpt = {"model": model.state_dict(), "sync": model.sync_state_dict()}
        del model
        net, model = fresh(rank)
        model.load_state_dict(ckpt["model"])
        if resume:
            model.load_sync_state_dict(ckpt["sync"])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _steps(model, opt, data, rank, RESUME_AT, STEPS)
    return _state(net)


def _bf16(rank: int, world: int, data) -> dict:  # noqa: ANN001
    from autosync_transfer.runtime.ddp import DistributedModel

    net = _net(rank)
    model = DistributedModel(net, _strategy("all_reduce", net), _cluster(),
                             find_unused_parameters=True)
    opt = _opt(model)
    _steps(model, opt, data, rank, 0, STEPS, autocast=True)
    return {"state": _state(net), "grad_dtypes": sorted({str(p.grad.dtype) for p in net.parameters()
                                                         if p.grad is not None})}


def _worker(rank: int, world: int) -> dict:
    data = _data(world)
    out = {"ddp": _ddp_run(rank, world, data)}
    for builder in BUILDERS:
        out[builder] = _ours_run(rank, world, data, builder)
    out["repeat_ddp"] = _repeated_backward(rank, world, data, None)
    out["repeat_backward"] = _repeated_backward(rank, world, data, "backward")
    out["repeat_step"] = _repeated_backward(rank, world, data, "step")
    out["refusals"] = _refusals(rank, world, data)
    out["psgd_straight"] = _compressor_resume(rank, world, data, None)
    out["psgd_resumed"] = _compressor_resume(rank, world, data, True)
    out["psgd_reset"] = _compressor_resume(rank, world, data, False)
    out["ddp_bf16"] = _ddp_run(rank, world, data, autocast=True)
    out["bf16"] = _bf16(rank, world, data)
    return out


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return spawn_local(_worker, 2, timeout_s=300)


def _close(a: dict, b: dict, what: str, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    assert a.keys() == b.keys(), what
    for k in a:
        if a[k].is_floating_point():
            assert torch.allclose(a[k], b[k], atol=atol, rtol=rtol), (what, k, (a[k] - b[k]).abs().max())
        else:
            assert torch.equal(a[k], b[k]), (what, k)


@pytest.mark.parametrize("builder", BUILDERS)
def test_lossless_strategy_matches_ddp(runs: list[dict], builder: str) -> None:
    """BatchNorm buffers, the unused branch, accumulation and the resume: same as DDP."""
    for rank in range(2):
        _close(runs[rank][builder]["state"], runs[rank]["ddp"]["state"], f"{builder} rank {rank}")
        assert runs[rank][builder]["aux_grad"] is None and runs[rank]["ddp"]["aux_grad"] is None
        assert not runs[rank][builder]["aux_moved"]  # AdamW's weight decay never touched it
        assert runs[rank][builder]["syncs"] == STEPS  # once per optimizer step (no_sync)
    assert runs[0][builder]["strategy"].kind == builder  # the checkpoint's strategy resumed


def test_state_dict_keys_are_ddps(runs: list[dict]) -> None:
    assert runs[0]["all_reduce"]["keys"] == runs[0]["ddp"]["keys"]
    assert all(k.startswith("module.") for k in runs[0]["ddp"]["keys"])


def test_repeated_backward_passes(runs: list[dict]) -> None:
    for rank in range(2):
        _close(runs[rank]["repeat_backward"]["state"], runs[rank]["repeat_ddp"]["state"], "backward")
        _close(runs[rank]["repeat_step"]["state"], runs[rank]["repeat_ddp"]["state"], "step")
    assert runs[0]["repeat_backward"]["syncs"] == 2 * STEPS  # like DDP: every backward
    assert runs[0]["repeat_step"]["syncs"] == STEPS  # once per optimizer step


def test_parameter_without_gradient_is_refused_clearly(runs: list[dict]) -> None:
    for r in runs:
        msg = r["refusals"]["unused_error"]
        assert msg is not None and msg.startswith("parameter 'aux.weight' got no gradient"), msg
        assert "find_unused_parameters=True" in msg
    assert torch.equal(runs[0]["refusals"]["grads_equal_after_refusal"],
                       runs[1]["refusals"]["grads_equal_after_refusal"])
    for r in runs:  # DDP's reducer: at the next forward, the same words
        msg = r["refusals"]["reducer_unused_error"]
        assert msg is not None and msg.startswith("parameter 'aux.weight' got no gradient"), msg
        assert "find_unused_parameters=True" in msg
        assert r["refusals"]["reducer_backend"] == "ddp_reducer"
    assert torch.equal(runs[0]["refusals"]["reducer_grads_after_refusal"],
                       runs[1]["refusals"]["reducer_grads_after_refusal"])


def test_compressor_state_survives_a_resume(runs: list[dict]) -> None:
    for rank in range(2):
        _close(runs[rank]["psgd_resumed"], runs[rank]["psgd_straight"], "powersgd resume",
               atol=0, rtol=0)
    differs = any(not torch.equal(runs[0]["psgd_reset"][k], runs[0]["psgd_straight"][k])
                  for k in runs[0]["psgd_straight"])
    assert differs  # without the sync state, the error feedback restarts from zero


def test_new_world_size_plans_again_with_a_warning(runs: list[dict]) -> None:
    r = runs[0]["refusals"]
    assert any("written by 3 workers, this job has 2" in w for w in r["resize_warning"]), r
    assert r["resize_strategy_kind"] == "ddp"


def test_bf16_autocast_keeps_fp32_gradients_and_matches_ddp(runs: list[dict]) -> None:
    for rank in range(2):
        assert runs[rank]["bf16"]["grad_dtypes"] == ["torch.float32"]
        _close(runs[rank]["bf16"]["state"], runs[rank]["ddp_bf16"]["state"], "bf16", atol=1e-5)


_NCCL_WORKER = """
import os, torch, torch.distributed as dist
from autosync_transfer.runtime.ddp import DistributedModel
from autosync_transfer.runtime.launch import init_from_env
init_from_env()  # NCCL when CUDA is available
assert dist.get_backend() == "nccl", dist.get_backend()
net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)).cuda()
model = DistributedModel(net)
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(torch.randn(4, 8, device="cuda")).float().pow(2).mean()
loss.backward()
assert all(p.grad is not None and p.grad.dtype == torch.float32 and p.grad.is_cuda
           for p in net.parameters())
dist.destroy_process_group()
print("ok")
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (NCCL backend)")
def test_nccl_on_a_gpu() -> None:
    """The backend is NCCL on GPUs (runtime launchers and Lightning's default); all-reduce
    buckets run on the GPU, parameter-server messages over gloo."""
    import os
    import subprocess
    import sys

    from autosync_transfer import AutoSyncStrategy
    from autosync_transfer.runtime.launch import free_port

    s = AutoSyncStrategy(accelerator="gpu", parallel_devices=[torch.device("cuda", 0)])
    assert s._get_process_group_backend() == "nccl"
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    out = subprocess.run([sys.executable, "-c", _NCCL_WORKER], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]
