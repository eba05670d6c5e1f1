"""Learnable tasks: batches with structure, so that a few hundred training steps on a CPU really
lower the loss (what a convergence check compares strategies on).

The zoo's :func:`~autosync_transfer.domains.zoo.example_batch` draws inputs and targets
independently (fine for timing a step, useless for training). A :class:`LearnableTask` draws
batches of the same shapes and dtypes (the model graphs do not change) whose targets follow from
the inputs, through a fixed hidden model built from the task's ``seed``:

- :class:`PrototypeImages` (``prototypes``, the image models): every class has a fixed random
  pattern; an image is its label's pattern plus noise, and a tenth of the labels are drawn at
  random (so the loss has a floor above zero, and a final-loss gap stays measurable);
- :class:`TeacherImages` (``teacher``): a latent vector ``z`` is decoded by a fixed random
  network into an image (plus noise); the label is the argmax of a fixed random linear teacher on
  ``z`` (a linear classifier learns it in 100 steps; a batch-norm-free VGG-16 does not within a
  few hundred);
- :class:`CopyTokens` (``copy``, BERT): tokens from a sub-vocabulary; the masked-token target of
  every position is the bucket of its own token (a copy task), the next-sentence target whether
  the first token lies in the lower half of the sub-vocabulary;
- :class:`LatentFactors` (``latent-factors``, NCF): users and items from the first rows of the
  tables, each with fixed latent factors and a bias; a click is ``u . v + b_u + b_i > 0``.

A user's workload trains on its own ``example_batch``: :func:`learnable_batches` returns the
task's batch function for a zoo workload and the workload's own otherwise. Batches are drawn from
the ``generator`` given (a caller seeds one per step and rank, so two runs see the same batches);
the hidden model comes from the task's own ``seed``, never from the global random state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from autosync_transfer.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from autosync_transfer.domains.workload import Workload

__all__ = ["LearnableTask", "PrototypeImages", "TeacherImages", "CopyTokens", "LatentFactors",
           "TASKS", "FAMILY_TASKS", "FAMILY_LR", "task_for", "training_lr", "learnable_batches"]


class LearnableTask(ABC):
    """Batches ``(inputs, targets)`` of zoo model family ``config`` whose targets follow from
    the inputs. Subclasses set :attr:`name` and implement :meth:`batch`; the hidden model is
    built on first use from ``seed``."""

    #: the task's name in :data:`TASKS`
    name: ClassVar[str]
    #: the Adam learning rate at which the task's models learn it in a few hundred steps (the
    #: default of a convergence run; a family can override it in :data:`FAMILY_LR`)
    lr: ClassVar[float] = 1e-3

    def __init__(self, config: dict[str, Any], seq_len: int = 1, *, seed: int = 0) -> None:
        self.config = dict(config)
        self.seq_len = int(seq_len)
        self.seed = int(seed)
        self._hidden: dict[str, torch.Tensor] | None = None

    def hidden(self) -> dict[str, torch.Tensor]:
        """The task's fixed hidden model (built once, from ``seed``)."""
        import torch

        if self._hidden is None:
            self._hidden = self.make_hidden(torch.Generator().manual_seed(10007 + self.seed))
        return self._hidden

    @abstractmethod
    def make_hidden(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The hidden model's tensors, drawn from ``generator``."""

    @abstractmethod
    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[Any, Any]:
        """One batch ``(inputs, targets)`` drawn from ``generator``."""


class TeacherImages(LearnableTask):
    """Images decoded from a latent ``z`` (``latent`` dims) by a fixed random decoder (an 8x8
    pattern per latent dimension, upsampled), plus Gaussian noise of std ``noise``; label =
    argmax of a fixed random linear teacher on ``z``."""

    name = "teacher"
    latent = 16
    noise = 0.5

    def make_hidden(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        import torch

        classes = int(self.config["classes"])
        return {"decoder": torch.randn(self.latent, 3 * 8 * 8, generator=generator),
                "teacher": torch.randn(self.latent, classes, generator=generator)}

    def batch(self, batch_size: int, generator: torch.Generator
              ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        import torch
        import torch.nn.functional as F

        h = self.hidden()
        side = int(self.config["image_size"])
        z = torch.randn(batch_size, self.latent, generator=generator)
        pattern = (z @ h["decoder"]).view(batch_size, 3, 8, 8) / self.latent ** 0.5
        images = F.interpolate(pattern, size=(side, side), mode="nearest")
        images = images + self.noise * torch.randn(images.shape, generator=generator)
        return {"images": images}, (z @ h["teacher"]).argmax(dim=1)


class PrototypeImages(LearnableTask):
    """Images of ``classes`` classes: the label's fixed random pattern (8x8 per channel,
    upsampled) plus Gaussian noise of std ``noise``; with probability ``label_noise`` the label
    is replaced by a uniformly drawn one (Bayes-optimal loss about 0.5 with 10 classes)."""

    name = "prototypes"
    noise = 1.0
    label_noise = 0.1

    def make_hidden(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        import torch

        classes = int(self.config["classes"])
        return {"patterns": torch.randn(classes, 3, 8, 8, generator=generator)}

    def batch(self, batch_size: int, generator: torch.Generator
              ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        import torch
        import torch.nn.functional as F

        patterns = self.hidden()["patterns"]
        classes, side = patterns.shape[0], int(self.config["image_size"])
        labels = torch.randint(0, classes, (batch_size,), generator=generator)
        images = F.interpolate(patterns[labels], size=(side, side), mode="nearest")
        images = images + self.noise * torch.randn(images.shape, generator=generator)
        flip = torch.rand(batch_size, generator=generator) < self.label_noise
        random_labels = torch.randint(0, classes, (batch_size,), generator=generator)
        return {"images": images}, torch.where(flip, random_labels, labels)


class CopyTokens(LearnableTask):
    """Token ids from the first ``vocab_used`` ids (random segment ids); masked-token target =
    the bucket of the position's own token (``id % mlm_classes``: a copy task), next-sentence
    target = whether the first token is below ``vocab_used / 2``."""

    name = "copy"
    vocab_used = 256

    def make_hidden(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return {}

    def batch(self, batch_size: int, generator: torch.Generator
              ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        import torch

        used = min(self.vocab_used, int(self.config["vocab"]))
        ids = torch.randint(used, (batch_size, self.seq_len), generator=generator)
        types = torch.randint(int(self.config["type_vocab"]), (batch_size, self.seq_len),
                              generator=generator)
        targets = {"mlm": ids % int(self.config["mlm_classes"]),
                   "nsp": (ids[:, 0] < used // 2).long()}
        return {"input_ids": ids, "token_type_ids": types}, targets


class LatentFactors(LearnableTask):
    """Users from the first ``users_used`` rows and items from the first ``items_used`` rows,
    each with ``factors`` fixed latent factors and a bias; click target =
    ``u . v + b_u + b_i > 0`` (float)."""

    name = "latent-factors"
    users_used = 1024
    items_used = 512
    factors = 4

    def make_hidden(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        import torch

        u = min(self.users_used, int(self.config["users"]))
        i = min(self.items_used, int(self.config["items"]))
        return {"users": torch.randn(u, self.factors, generator=generator),
                "items": torch.randn(i, self.factors, generator=generator),
                "user_bias": torch.randn(u, generator=generator),
                "item_bias": torch.randn(i, generator=generator)}

    def batch(self, batch_size: int, generator: torch.Generator
              ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        import torch

        h = self.hidden()
        users = torch.randint(h["users"].shape[0], (batch_size,), generator=generator)
        items = torch.randint(h["items"].shape[0], (batch_size,), generator=generator)
        score = ((h["users"][users] * h["items"][items]).sum(1) + h["user_bias"][users]
                 + h["item_bias"][items])
        return {"users": users, "items": items}, (score > 0).float()


#: the tasks by name
TASKS: dict[str, type[LearnableTask]] = {
    cls.name: cls for cls in (PrototypeImages, TeacherImages, CopyTokens, LatentFactors)
}

#: zoo model family -> the name of its task
FAMILY_TASKS: dict[str, str] = {
    "bert": "copy", "ncf": "latent-factors", "vgg": "prototypes", "resnet": "prototypes",
    "densenet": "prototypes", "inception": "prototypes",
}

#: zoo model family -> its Adam learning rate where the task's :attr:`LearnableTask.lr` is too
#: high (VGG has no batch normalization: at 3e-4 and above its loss stays at log(classes))
FAMILY_LR: dict[str, float] = {"vgg": 1e-4}


def task_for(model: str, *, seed: int = 0) -> LearnableTask:
    """The learnable task of zoo model ``model``."""
    from autosync_transfer.domains.zoo import get_spec

    spec = get_spec(model)
    if spec.family not in FAMILY_TASKS:
        raise ConfigError(f"model {model!r}: family {spec.family!r} has no learnable task")
    return TASKS[FAMILY_TASKS[spec.family]](spec.config, spec.seq_len, seed=seed)


def training_lr(workload: Workload | str) -> float:
    """The Adam learning rate a convergence run trains ``workload`` (a workload or its spec) at
    by default: its zoo family's (:data:`FAMILY_LR`), else its task's; a user's workload 1e-3."""
    from autosync_transfer.domains.workload import ZooWorkload
    from autosync_transfer.domains.zoo import MODELS

    if isinstance(workload, ZooWorkload):
        name: str | None = workload.zoo_name
    elif isinstance(workload, str):
        name = workload.removeprefix("zoo:")
    else:
        name = None
    if name not in MODELS or MODELS[name].family not in FAMILY_TASKS:
        return LearnableTask.lr
    family = MODELS[name].family
    return FAMILY_LR.get(family, TASKS[FAMILY_TASKS[family]].lr)


def learnable_batches(workload: Workload, *, seed: int = 0
                      ) -> Callable[[int, Any], tuple[Any, Any]]:
    """``(batch_size, generator) -> (inputs, targets)`` to train ``workload`` on: its zoo
    model's learnable task, or the workload's own ``example_batch`` (a user's model)."""
    from autosync_transfer.domains.workload import ZooWorkload

    if isinstance(workload, ZooWorkload):
        return task_for(workload.zoo_name, seed=seed).batch
    return workload.example_batch
