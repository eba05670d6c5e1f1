"""DistributedModel's lifetime: start -> train -> exit, many times, never aborts.

A launcher interpreter imports torch and the runtime once, then, round after round, forks W
fresh worker processes (so each round costs a process group, not an interpreter start-up; the
launcher builds an optimizer first, which imports what every worker's optimizer needs). Each
worker trains a few steps with the lossless all-reduce builder and ends its interpreter the way
users end a job: ``destroy_process_group()`` without ``close()``, ``del model`` first, no destroy
at all, an exception in the middle of a training step (uncaught, or caught and training goes on)
— then a normal interpreter exit
(``sys.exit``: atexit handlers, finalization). A worker killed by a signal (the reported
``terminate called without an active exception``, SIGABRT) or exiting non-zero fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from autosync_transfer.runtime.launch import free_port

_LAUNCHER = r"""
import json, os, sys, time
import torch
import torch.distributed as dist
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.runtime.ddp import DistributedModel, cluster_from_process_group
from autosync_transfer.strategies.builders import build
from autosync_transfer.testing.models import TinyNet, tiny_batches

ENDINGS = ("destroy", "del", "no-destroy", "raise", "recover")
# a process's first optimizer imports torch's compiler modules (about a second): imported here
# once, before the forks
torch.optim.SGD(TinyNet().parameters(), lr=0.1)


def train(rank, world, port, ending):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    net = TinyNet(vocab=400, dim=32, hidden=64)
    cluster = cluster_from_process_group()
    graph = ModelGraph.from_torch(net, name="m", batch_size=4, seq_len=5)
    strategy = build("all_reduce", Domain(name="m", model=graph, cluster=cluster))
    model = DistributedModel(net, strategy, cluster, graph=graph)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = tiny_batches(3, world, vocab=400)
    for i, step in enumerate(steps):
        opt.zero_grad()
        loss = model(*step[rank])
        if ending in ("raise", "recover") and i == len(steps) - 1:
            def boom(_g):  # an exception in backward, after some gradients were ready
                raise RuntimeError("failing step")
            handle = model.module.emb.weight.register_hook(boom)
            if ending == "raise":
                loss.backward()  # raises: the interpreter exits with the exception
            try:
                loss.backward()
            except RuntimeError:
                pass
            handle.remove()  # and train on: the next forward abandons the unfinished sync
            opt.zero_grad()
            model(*step[rank]).backward()
            opt.step()
            break
        loss.backward()
        opt.step()
    if ending == "del":
        del model
    if ending != "no-destroy":
        dist.destroy_process_group()


rounds, world, first_port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
report = []
for i in range(rounds):
    ending = ENDINGS[i % len(ENDINGS)]
    t0 = time.time()
    port = first_port + i
    pids = []
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            try:
                train(rank, world, port, ending)
            except RuntimeError as e:
                if ending != "raise" or "failing step" not in str(e):
                    raise
                sys.exit(3)  # the expected failure: a clean non-zero exit
            sys.exit(0)  # a normal interpreter exit: atexit handlers, finalization
        pids.append(pid)
    statuses = []
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        statuses.append(-os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st))
    report.append({"round": i, "ending": ending, "status": statuses, "s": round(time.time() - t0, 2)})
print("REPORT " + json.dumps(report), flush=True)
"""


def _run(rounds: int, world: int, timeout_s: float) -> list[dict]:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "TORCH_CPP_LOG_LEVEL": "ERROR"}
    port = free_port()
    if port + rounds > 65000:
        port = 20000
    out = subprocess.run([sys.executable, "-c", _LAUNCHER, str(rounds), str(world), str(port)],
                         env=env, capture_output=True, text=True, timeout=timeout_s)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("REPORT ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("REPORT "))


def test_start_train_exit_many_times_never_aborts() -> None:
    rounds = int(os.environ.get("AUTOSYNC_LIFETIME_ROUNDS", "10"))
    report = _run(rounds, 3, timeout_s=600)
    expected = {"destroy": 0, "del": 0, "no-destroy": 0, "raise": 3, "recover": 0}
    bad = [r for r in report if any(s != expected[r["ending"]] for s in r["status"])]
    assert len(report) == rounds
    assert not bad, bad
