"""Building zoo models, their synthetic batches and losses (each imports torch when called).

A spec's ``family`` names a module of this package (``bert``, ``ncf``, ``vgg``, ...) that holds
the family's model class, its ``example_batch(config, batch_size, seq_len, generator)`` and its
``loss(outputs, targets)``; :data:`FAMILIES` is the one table from family to model class.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autosync_transfer.domains.zoo.specs import FAMILIES, get_spec
from autosync_transfer.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from autosync_transfer.domains.graph import ModelGraph

__all__ = ["build_module", "example_batch", "family_module", "loss_fn", "model_graph"]


def family_module(family: str) -> ModuleType:
    """The module of model family ``family`` (imports torch)."""
    if family not in FAMILIES:
        raise ConfigError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    return importlib.import_module(f"autosync_transfer.domains.zoo.{family}")


def build_module(name: str, device: str = "meta", *, seed: int = 0) -> torch.nn.Module:
    """Build zoo model ``name`` on ``device``.

    On ``meta`` no memory is allocated and no initialization runs. On any other device the
    weights are initialized on the CPU from ``seed`` (with a private copy of the CPU random
    state, so the global state is left untouched) and then moved to ``device``.
    """
    import torch

    spec = get_spec(name)
    cls = getattr(family_module(spec.family), FAMILIES[spec.family])
    if str(device) == "meta":
        with torch.device("meta"):
            return cls(**spec.config)
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        module = cls(**spec.config)
    return module.to(device)


def example_batch(
    name: str,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
    *,
    device: str = "cpu",
) -> tuple[dict[str, torch.Tensor], Any]:
    """A synthetic batch ``(inputs, targets)`` for model ``name`` (see the package docstring).

    ``batch_size`` defaults to the spec's per-worker batch; the sequence length is the spec's.
    Values are drawn on the CPU from ``generator`` (a fresh one seeded 0 if omitted) and moved to
    ``device``.
    """
    import torch

    spec = get_spec(name)
    b = spec.batch_size if batch_size is None else int(batch_size)
    if b < 1:
        raise ConfigError(f"batch_size must be >= 1, got {b}")
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    inputs, targets = family_module(spec.family).example_batch(spec.config, b, spec.seq_len, g)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    if isinstance(targets, dict):
        targets = {k: v.to(device) for k, v in targets.items()}
    else:
        targets = targets.to(device)
    return inputs, targets


def loss_fn(name: str) -> Callable[[Any, Any], torch.Tensor]:
    """``loss(outputs, targets) -> scalar`` for model ``name``: masked-token + next-sentence
    cross-entropy (BERT), binary cross-entropy on logits (NCF), cross-entropy (image models)."""
    return family_module(get_spec(name).family).loss


def model_graph(name: str) -> ModelGraph:
    """The graph of zoo model ``name``: built on the meta device and imported with
    :func:`~autosync_transfer.domains.importers.graph_from_torch`. Its ``config`` holds the
    family, the constructor arguments, ``parameters`` (count) and ``bytes``."""
    from autosync_transfer.domains.importers import graph_from_torch

    spec = get_spec(name)
    return graph_from_torch(
        build_module(name, "meta"),
        name,
        batch_size=spec.batch_size,
        seq_len=spec.seq_len,
        config={"family": spec.family, **spec.config},
        description=spec.description,
    )
