"""The model zoo: the catalog's models as PyTorch modules, written out in plain ``nn.Module`` code.

One module per family (:mod:`.bert`, :mod:`.ncf`, :mod:`.vgg`, :mod:`.resnet`, :mod:`.densenet`,
:mod:`.inception`) holds its module classes, its synthetic batch and its loss; :mod:`.specs`
is the table of named models (:data:`MODELS`). Importing this package does not import torch:
the family modules are imported on first use (by :func:`build_module`, or by naming a class,
``zoo.Bert``), and built modules pickle by their family module's path.

Every model is built on the ``meta`` device for its graph (shapes only, no memory, no
downloads). Models marked ``runnable`` are small enough to train on a CPU with synthetic data.

Training convention, the same for every model::

    module = build_module(name, device="cpu")
    inputs, targets = example_batch(name, batch_size, generator)
    loss = loss_fn(name)(module(**inputs), targets)   # a scalar tensor

``inputs`` is a dict of tensors passed as keyword arguments; ``targets`` is a tensor, or a dict of
tensors for BERT (``mlm``, ``nsp``). Embedding tables built with ``nn.Embedding`` produce dense
gradient tensors by default; set ``embedding.sparse = True`` on them for ``torch.sparse``
gradients.
"""

from __future__ import annotations

import importlib
from typing import Any

from autosync_transfer.domains.zoo.build import build_module, example_batch, loss_fn, model_graph
from autosync_transfer.domains.zoo.specs import (
    FAMILIES,
    MODELS,
    ModelSpec,
    bert_config,
    get_spec,
    ncf_config,
)

__all__ = [
    "FAMILIES",
    "MODELS",
    "ModelSpec",
    "bert_config",
    "build_module",
    "example_batch",
    "get_spec",
    "loss_fn",
    "model_graph",
    "ncf_config",
]

#: module classes reachable as ``zoo.<Name>`` (imported on first access) -> their module
_CLASSES: dict[str, str] = {
    "DenseTable": "_common",
    **dict.fromkeys(("Bert", "BertEmbeddings", "BertLayer"), "bert"),
    "NeuMF": "ncf",
    "VGG": "vgg",
    **dict.fromkeys(("Bottleneck", "ResNet"), "resnet"),
    **dict.fromkeys(("DenseLayer", "DenseBlock", "Transition", "DenseNet"), "densenet"),
    **dict.fromkeys(("BatchNormNoScale", "ConvBN", "InceptionA", "InceptionB", "InceptionC",
                     "InceptionD", "InceptionE", "InceptionV3"), "inception"),
}


def __getattr__(attr: str) -> Any:
    """Resolve the module classes (``zoo.Bert``, ...) lazily; any other missing attribute
    fails without importing torch."""
    if attr in _CLASSES:
        return getattr(importlib.import_module(f"{__name__}.{_CLASSES[attr]}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
