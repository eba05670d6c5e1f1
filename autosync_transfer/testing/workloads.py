"""Files a user brings, written for tests: a plain-convention workload module and an AutoDist
resource spec (the inputs of ``--model`` and ``--cluster-file``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["embedding_classifier_source", "write_workload", "resource_spec", "write_cluster"]


def embedding_classifier_source(*, vocab: int = 30, tokens: int = 2, width: int = 4,
                                classes: int = 3, batch_size: int | None = None) -> str:
    """The source of a plain-convention workload module: token ids -> an embedding (row-sparse
    gradients) -> a linear classifier; the label is the first token modulo ``classes``."""
    batch = f"BATCH_SIZE = {batch_size}\n\n" if batch_size is not None else ""
    return (
        "import torch\n"
        "from torch import nn\n\n"
        f"{batch}"
        "def build_model():\n"
        f"    return nn.Sequential(nn.Embedding({vocab}, {width}), nn.Flatten(),\n"
        f"                         nn.Linear({width * tokens}, {classes}))\n\n"
        "def example_batch(batch_size, generator):\n"
        f"    ids = torch.randint({vocab}, (batch_size, {tokens}), generator=generator)\n"
        f"    return ids, ids[:, 0] % {classes}\n\n"
        "def loss_fn(output, targets):\n"
        "    return nn.functional.cross_entropy(output, targets)\n"
    )


def write_workload(folder: str | Path, name: str = "user_model", source: str | None = None,
                   **sizes: int) -> Path:
    """``<folder>/<name>.py`` holding ``source`` (default: :func:`embedding_classifier_source`
    with ``sizes``); returns its path."""
    path = Path(folder) / f"{name}.py"
    path.write_text(source if source is not None else embedding_classifier_source(**sizes))
    return path


def resource_spec(nodes: Sequence[tuple[int, float]] = ((1, 1.0), (1, 0.5))) -> str:
    """An AutoDist resource spec: one node per ``(cpu workers, Gbit/s)``, the first the chief,
    addresses 10.0.0.1, 10.0.0.2, ..."""
    lines = ["nodes:"]
    for i, (workers, gbps) in enumerate(nodes):
        lines.append(f"  - address: 10.0.0.{i + 1}")
        lines.append(f"    cpus: [{', '.join(str(c) for c in range(workers))}]")
        if i == 0:
            lines.append("    chief: true")
        lines.append(f"    network_bandwidth: {gbps:g}")
    return "\n".join(lines) + "\n"


def write_cluster(folder: str | Path, name: str = "lab",
                  nodes: Sequence[tuple[int, float]] = ((1, 1.0), (1, 0.5))) -> Path:
    """``<folder>/<name>.yml`` with :func:`resource_spec` of ``nodes``; the cluster is named
    after the file, the workload domain ``<workload>-<name>``."""
    path = Path(folder) / f"{name}.yml"
    path.write_text(resource_spec(nodes))
    return path
