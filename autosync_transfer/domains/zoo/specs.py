"""The zoo's spec table: every named model as data (family, constructor arguments, batch).

Importing this module does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autosync_transfer.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    import torch

    from autosync_transfer.domains.graph import ModelGraph

__all__ = ["FAMILIES", "MODELS", "ModelSpec", "bert_config", "get_spec", "ncf_config"]

#: model family -> its model class; the family's code is the module ``zoo.<family>``
FAMILIES: dict[str, str] = {
    "bert": "Bert",
    "ncf": "NeuMF",
    "vgg": "VGG",
    "resnet": "ResNet",
    "densenet": "DenseNet",
    "inception": "InceptionV3",
}


class ModelSpec(BaseModel):
    """How to build one zoo model: its family, the family's constructor arguments, its batch.

    ``batch_size`` and ``seq_len`` are per worker. ``runnable`` models are sized to train on a
    CPU; the others exist for their graph (shapes) only.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    family: str
    description: str
    config: dict[str, Any]
    batch_size: int = Field(ge=1)
    seq_len: int = Field(default=1, ge=1)
    runnable: bool = False

    @field_validator("family")
    @classmethod
    def _known_family(cls, v: str) -> str:
        if v not in FAMILIES:
            raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {v!r}")
        return v

    def build(self, device: str = "meta", *, seed: int = 0) -> torch.nn.Module:
        """The module (see :func:`~autosync_transfer.domains.zoo.build_module`)."""
        from autosync_transfer.domains.zoo.build import build_module

        return build_module(self.name, device, seed=seed)

    def graph(self) -> ModelGraph:
        """The graph (see :func:`~autosync_transfer.domains.zoo.model_graph`)."""
        from autosync_transfer.domains.zoo.build import model_graph

        return model_graph(self.name)


# -- configurations ------------------------------------------------------------------------
def bert_config(
    layers: int,
    hidden: int,
    heads: int,
    intermediate: int,
    vocab: int = 30522,
    *,
    max_positions: int = 512,
    type_vocab: int = 2,
    mlm_classes: int = 1024,
) -> dict[str, Any]:
    """Constructor arguments of a BERT encoder.

    The masked-token head predicts ``mlm_classes`` token buckets (token id modulo
    ``mlm_classes``) instead of the vocabulary through a tied decoder: it keeps the head's
    compute small and keeps the word-embedding gradient row-sparse.
    """
    if min(layers, hidden, heads, intermediate, vocab, max_positions, type_vocab, mlm_classes) < 1:
        raise ConfigError(
            f"every BERT size must be >= 1, got layers={layers}, hidden={hidden}, heads={heads}, "
            f"intermediate={intermediate}, vocab={vocab}"
        )
    if hidden % heads:
        raise ConfigError(f"hidden must be a multiple of heads, got hidden={hidden}, heads={heads}")
    return {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "intermediate": intermediate,
        "vocab": vocab,
        "max_positions": max_positions,
        "type_vocab": type_vocab,
        "mlm_classes": mlm_classes,
    }


def ncf_config(*, dense_embeddings: bool) -> dict[str, Any]:
    """Constructor arguments of NeuMF at MovieLens ml-20m sizes (as in the MLPerf /
    TF-official / AutoDist NCF benchmark)."""
    return {
        "users": 138493,
        "items": 26744,
        "factors": 8,
        "mlp_layers": [64, 32, 16, 8],
        "dense_embeddings": dense_embeddings,
    }


def _scaled_bert(name: str, layers: int) -> ModelSpec:
    return ModelSpec(
        name=name,
        family="bert",
        description=(
            f"BERT encoder, scaled: not BERT-base ({layers} layers, hidden 256, 4 heads, "
            f"intermediate 1024, full 30522-token vocabulary, masked-token head over "
            f"1024 token buckets + next-sentence head)"
        ),
        config=bert_config(layers, 256, 4, 1024),
        batch_size=4,
        seq_len=64,
        runnable=True,
    )


# -- the table -----------------------------------------------------------------------------
_TABLE: tuple[ModelSpec, ...] = (
    _scaled_bert("bert-3l", 3),
    _scaled_bert("bert", 6),
    _scaled_bert("bert-12l", 12),
    ModelSpec(
        name="bert-base",
        family="bert",
        description="BERT-base (12 layers, hidden 768, 12 heads, intermediate 3072, "
        "~110M parameters; head over 1024 token buckets)",
        config=bert_config(12, 768, 12, 3072),
        batch_size=8,
        seq_len=128,
    ),
    ModelSpec(
        name="bert-large",
        family="bert",
        description="BERT-large (24 layers, hidden 1024, 16 heads, intermediate 4096, "
        "~335M parameters; head over 1024 token buckets)",
        config=bert_config(24, 1024, 16, 4096),
        batch_size=8,
        seq_len=128,
    ),
    ModelSpec(
        name="ncf",
        family="ncf",
        description="NeuMF on MovieLens-20m sizes (138493 users, 26744 items, 8 MF factors, "
        "MLP 64-32-16-8); four embedding tables with row-sparse gradients",
        config=ncf_config(dense_embeddings=False),
        batch_size=256,
        runnable=True,
    ),
    ModelSpec(
        name="ncf-dense",
        family="ncf",
        description="NeuMF as 'ncf' with dense-gradient embedding tables (every row of every "
        "table is synchronized every step)",
        config=ncf_config(dense_embeddings=True),
        batch_size=256,
        runnable=True,
    ),
    ModelSpec(
        name="vgg16",
        family="vgg",
        description="VGG-16 (224x224, 1000 classes, fc6 25088x4096; ~138.4M parameters)",
        config={"depth": 16, "classifier": [4096, 4096], "classes": 1000, "image_size": 224,
                "dropout": 0.5},
        batch_size=32,
    ),
    ModelSpec(
        name="resnet50",
        family="resnet",
        description="ResNet-50 v1.5 (224x224, 1000 classes; ~25.6M parameters)",
        config={"blocks": [3, 4, 6, 3], "width": 64, "classes": 1000, "image_size": 224,
                "stem": "imagenet"},
        batch_size=32,
    ),
    ModelSpec(
        name="resnet101",
        family="resnet",
        description="ResNet-101 v1.5 (224x224, 1000 classes; ~44.5M parameters)",
        config={"blocks": [3, 4, 23, 3], "width": 64, "classes": 1000, "image_size": 224,
                "stem": "imagenet"},
        batch_size=32,
    ),
    ModelSpec(
        name="densenet121",
        family="densenet",
        description="DenseNet-121 (224x224, 1000 classes, growth 32; ~8.0M parameters)",
        config={"blocks": [6, 12, 24, 16], "growth": 32, "init_features": 64, "bn_size": 4,
                "classes": 1000, "image_size": 224},
        batch_size=32,
    ),
    ModelSpec(
        name="inceptionv3",
        family="inception",
        description="Inception-v3 in the Keras layout (299x299, 1000 classes, no auxiliary "
        "head, batch norm without scale; ~23.8M trainable parameters)",
        config={"classes": 1000, "image_size": 299},
        batch_size=32,
    ),
    ModelSpec(
        name="vgg16-s",
        family="vgg",
        description="VGG-16 conv stack, scaled: 32x32 inputs, 10 classes, classifier "
        "512-512-10 (~15.0M parameters)",
        config={"depth": 16, "classifier": [512], "classes": 10, "image_size": 32,
                "dropout": 0.0},
        batch_size=8,
        runnable=True,
    ),
    ModelSpec(
        name="resnet50-s",
        family="resnet",
        description="ResNet-50 bottleneck layout, scaled: base width 16 instead of 64, "
        "3x3 stem, 32x32 inputs, 10 classes (~1.5M parameters)",
        config={"blocks": [3, 4, 6, 3], "width": 16, "classes": 10, "image_size": 32,
                "stem": "cifar"},
        batch_size=8,
        runnable=True,
    ),
)

#: the zoo, keyed by catalog model name
MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _TABLE}


def get_spec(name: str) -> ModelSpec:
    """The spec of zoo model ``name``."""
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownNameError(f"unknown model {name!r} (known: {', '.join(MODELS)})") from None
