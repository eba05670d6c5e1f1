"""The autotune table's workload as a plain workload file: ``autosync_transfer.demos``'
``TextClassifier`` on its synthetic token task, so the search can be run on exactly what
``benchmarks/autotune_table.py`` trains (``--model research/workloads/demo_classifier.py`` for
the short step, ``...:bandwidth`` for the table's bandwidth-bound one, hidden width 1024).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autosync_transfer.demos import TextClassifier, classifier_batch

#: samples per worker and step (the table's ``--batch-size``)
BATCH_SIZE = 32


def build_model() -> torch.nn.Module:
    return TextClassifier()


def example_batch(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return classifier_batch(generator, batch_size)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, targets)


def bandwidth():  # noqa: ANN201 - a Workload
    """The table's bandwidth-bound workload (``benchmarks/autotune_table.py``'s ``bandwidth``):
    hidden width 1024 (1.25 M parameters, 5 MB of gradients per step)."""
    from functools import partial

    from autosync_transfer import Workload

    return Workload(name="demo_classifier_1024", batch_size=BATCH_SIZE,
                    build_model=partial(TextClassifier, hidden=1024),
                    example_batch=example_batch, loss_fn=loss_fn,
                    description="the demos' text classifier at hidden width 1024")
