"""Learnable tasks: batches of the zoo's shapes whose targets follow from the inputs, so that a
few training steps on a CPU lower the loss (what convergence checks compare strategies on)."""

from __future__ import annotations

import pytest
import torch

from autosync_transfer.domains.tasks import TASKS, learnable_batches, task_for, training_lr
from autosync_transfer.domains.workload import load_workload, zoo_workload
from autosync_transfer.domains.zoo import MODELS, example_batch
from autosync_transfer.testing.workloads import write_workload

RUNNABLE = [name for name, spec in MODELS.items() if spec.runnable]


def _shapes(obj):  # noqa: ANN001, ANN202
    if isinstance(obj, dict):
        return {k: _shapes(v) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return [_shapes(v) for v in obj]
    return (tuple(obj.shape), obj.dtype)


@pytest.mark.parametrize("name", RUNNABLE)
def test_a_task_batch_has_the_shapes_of_the_zoo_batch(name: str) -> None:
    g = torch.Generator().manual_seed(3)
    want = example_batch(name, 5, g)
    got = task_for(name).batch(5, torch.Generator().manual_seed(3))
    assert _shapes(got) == _shapes(want)
    # the same generator state gives the same batch; the hidden model comes from the task seed
    again = task_for(name).batch(5, torch.Generator().manual_seed(3))
    assert all(torch.equal(a, b) for a, b in zip(
        [*got[0].values(), *(got[1].values() if isinstance(got[1], dict) else [got[1]])],
        [*again[0].values(), *(again[1].values() if isinstance(again[1], dict) else [again[1]])]))


def test_every_zoo_family_has_a_registered_task() -> None:
    from autosync_transfer.domains.tasks import FAMILY_TASKS
    from autosync_transfer.domains.zoo import FAMILIES

    assert set(FAMILY_TASKS) == set(FAMILIES) and set(FAMILY_TASKS.values()) <= set(TASKS)


@pytest.mark.parametrize("name, steps, lr, drop", [("ncf", 120, 3e-3, 0.05),
                                                   ("bert-3l", 40, 1e-3, 0.5),
                                                   ("vgg16-s", 70, None, 0.2)])
def test_the_loss_falls_within_a_few_hundred_steps(name: str, steps: int, lr: float,
                                                   drop: float) -> None:
    torch.set_num_threads(1)
    wl = zoo_workload(name)
    model = wl.build("cpu", seed=0)
    batches = learnable_batches(wl)
    opt = torch.optim.Adam(model.parameters(), lr=lr if lr is not None else training_lr(wl))
    losses = []
    for k in range(steps):
        x, y = batches(wl.batch_size * 2, torch.Generator().manual_seed(k))
        loss = wl.loss(model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last < first * (1 - drop), (first, last)


def test_a_user_workload_trains_on_its_own_batches(tmp_path) -> None:  # noqa: ANN001
    wl = load_workload(str(write_workload(tmp_path)))
    assert learnable_batches(wl) is wl.example_batch


def test_the_default_learning_rate_is_the_family_s_then_the_task_s() -> None:
    assert training_lr(zoo_workload("vgg16-s")) == 1e-4  # no batch normalization
    assert training_lr("zoo:vgg16-s") == training_lr("vgg16-s") == 1e-4
    assert training_lr("zoo:bert-3l") == training_lr(zoo_workload("ncf")) == 1e-3
    assert training_lr("examples/workloads/tiny_gpt.py:lab") == 1e-3  # a user's workload


def test_prototype_labels_follow_the_image_except_the_label_noise() -> None:
    task = task_for("vgg16-s")
    images, labels = task.batch(2000, torch.Generator().manual_seed(0))
    patterns = torch.nn.functional.interpolate(task.hidden()["patterns"], size=(32, 32))
    nearest = torch.cdist(images["images"].flatten(1), patterns.flatten(1)).argmin(dim=1)
    agree = float((nearest == labels).float().mean())
    assert 0.85 < agree < 0.95  # 10 % of the labels drawn at random, 1 in 10 of those right
