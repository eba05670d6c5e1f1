"""The model zoo: the catalog's models as PyTorch modules, written out in plain ``nn.Module`` code.

Specs (:data:`MODELS`) are data and importing this module does not import torch. The module
classes are defined on first use by :func:`_arch` (torch is imported there) and are reachable as
attributes of this module (``zoo.Bert``, resolved lazily), so built modules pickle.

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

import functools
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    import torch

__all__ = [
    "ModelSpec",
    "MODELS",
    "get_spec",
    "bert_config",
    "build_module",
    "example_batch",
    "loss_fn",
    "model_graph",
]

#: ``family`` -> name of the module class that builds it (``spec.config`` are its arguments)
_FAMILY_CLASS: dict[str, str] = {
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

    def build(self, device: str = "meta", *, seed: int = 0) -> torch.nn.Module:
        """The module (see :func:`build_module`)."""
        return build_module(self.name, device, seed=seed)

    def graph(self) -> ModelGraph:
        """The graph (see :func:`model_graph`)."""
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


def _ncf_config(dense_embeddings: bool) -> dict[str, Any]:
    # MovieLens ml-20m sizes, NeuMF as in the MLPerf / TF-official / AutoDist NCF benchmark
    return {
        "users": 138493,
        "items": 26744,
        "factors": 8,
        "mlp_layers": [64, 32, 16, 8],
        "dense_embeddings": dense_embeddings,
    }


def _specs() -> dict[str, ModelSpec]:
    specs: list[ModelSpec] = []
    for name, layers in (("bert-3l", 3), ("bert", 6), ("bert-12l", 12)):
        specs.append(
            ModelSpec(
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
        )
    specs += [
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
            config=_ncf_config(dense_embeddings=False),
            batch_size=256,
            runnable=True,
        ),
        ModelSpec(
            name="ncf-dense",
            family="ncf",
            description="NeuMF as 'ncf' with dense-gradient embedding tables (every row of every "
            "table is synchronized every step)",
            config=_ncf_config(dense_embeddings=True),
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
    ]
    return {s.name: s for s in specs}


#: the zoo, keyed by catalog model name
MODELS: dict[str, ModelSpec] = _specs()


def get_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownNameError(f"unknown model {name!r} (known: {', '.join(MODELS)})") from None


# -- building ------------------------------------------------------------------------------
def build_module(name: str, device: str = "meta", *, seed: int = 0) -> torch.nn.Module:
    """Build zoo model ``name`` on ``device``.

    On ``meta`` no memory is allocated and no initialization runs. On any other device the
    weights are initialized on the CPU from ``seed`` (with a private copy of the CPU random
    state, so the global state is left untouched) and then moved to ``device``.
    """
    import torch

    spec = get_spec(name)
    cls = getattr(_arch(), _FAMILY_CLASS[spec.family])
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
    """A synthetic batch ``(inputs, targets)`` for model ``name`` (see the module docstring).

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
    cfg = spec.config

    def ints(high: int, *shape: int) -> torch.Tensor:
        return torch.randint(high, shape, generator=g)

    inputs: dict[str, torch.Tensor]
    targets: Any
    if spec.family == "bert":
        s = spec.seq_len
        inputs = {
            "input_ids": ints(cfg["vocab"], b, s),
            "token_type_ids": ints(cfg["type_vocab"], b, s),
        }
        targets = {"mlm": ints(cfg["mlm_classes"], b, s), "nsp": ints(2, b)}
    elif spec.family == "ncf":
        inputs = {"users": ints(cfg["users"], b), "items": ints(cfg["items"], b)}
        targets = ints(2, b).float()
    else:
        side = cfg["image_size"]
        inputs = {"images": torch.randn(b, 3, side, side, generator=g)}
        targets = ints(cfg["classes"], b)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    if isinstance(targets, dict):
        targets = {k: v.to(device) for k, v in targets.items()}
    else:
        targets = targets.to(device)
    return inputs, targets


def _bert_loss(
    outputs: tuple[torch.Tensor, torch.Tensor], targets: dict[str, torch.Tensor]
) -> torch.Tensor:
    import torch.nn.functional as F

    mlm_logits, nsp_logits = outputs
    mlm = F.cross_entropy(mlm_logits.flatten(0, 1), targets["mlm"].flatten())
    return mlm + F.cross_entropy(nsp_logits, targets["nsp"])


def _binary_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.binary_cross_entropy_with_logits(outputs, targets)


def _classification_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.cross_entropy(outputs, targets)


def loss_fn(name: str) -> Callable[[Any, Any], torch.Tensor]:
    """``loss(outputs, targets) -> scalar`` for model ``name``: masked-token + next-sentence
    cross-entropy (BERT), binary cross-entropy on logits (NCF), cross-entropy (image models)."""
    family = get_spec(name).family
    if family == "bert":
        return _bert_loss
    if family == "ncf":
        return _binary_loss
    return _classification_loss


def model_graph(name: str) -> ModelGraph:
    """The graph of zoo model ``name``: built on the meta device and imported with
    :func:`.importers.graph_from_torch`. Its ``config`` holds the family, the constructor
    arguments, ``parameters`` (count) and ``bytes``."""
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


# -- architectures (torch imported here, on first use) --------------------------------------
#: the classes :func:`_arch` defines, reachable as ``zoo.<Name>``
_ARCH_CLASSES = frozenset({
    "DenseTable", "BertEmbeddings", "BertLayer", "Bert", "NeuMF", "VGG", "Bottleneck", "ResNet",
    "DenseLayer", "DenseBlock", "Transition", "DenseNet", "BatchNormNoScale", "ConvBN",
    "InceptionA", "InceptionB", "InceptionC", "InceptionD", "InceptionE", "InceptionV3",
})


def __getattr__(attr: str) -> Any:
    """Resolve the module classes (``zoo.Bert``, ...) lazily, so that pickling finds them;
    any other missing attribute fails without importing torch."""
    if attr in _ARCH_CLASSES:
        return getattr(_arch(), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


@functools.cache
def _arch() -> SimpleNamespace:
    """Define the zoo's module classes (imports torch)."""
    from collections import OrderedDict
    from itertools import pairwise

    import torch
    import torch.nn.functional as F
    from torch import nn

    class DenseTable(nn.Module):
        """A lookup table whose gradient is dense: a plain parameter indexed by ids (the
        counterpart of ``nn.Embedding``, whose gradient touches only the looked-up rows)."""

        def __init__(self, rows: int, width: int, std: float = 0.02):
            super().__init__()
            self.std = std
            self.weight = nn.Parameter(torch.empty(rows, width))
            nn.init.normal_(self.weight, std=std)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.weight[ids]

    # -- BERT ----------------------------------------------------------------------------
    class BertEmbeddings(nn.Module):
        """Word embeddings (``nn.Embedding``: row-sparse gradient) plus position and token-type
        tables (plain parameters, sliced / indexed: dense gradient, as in TF BERT)."""

        def __init__(self, vocab: int, hidden: int, max_positions: int, type_vocab: int,
                     dropout: float):
            super().__init__()
            self.word_embeddings = nn.Embedding(vocab, hidden)
            self.position_embeddings = DenseTable(max_positions, hidden)
            self.token_type_embeddings = DenseTable(type_vocab, hidden)
            self.layer_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.dropout = nn.Dropout(dropout)
            nn.init.normal_(self.word_embeddings.weight, std=0.02)

        def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
            seq = input_ids.shape[1]
            positions = self.position_embeddings.weight[:seq].unsqueeze(0)
            x = self.word_embeddings(input_ids) + positions
            x = x + self.token_type_embeddings(token_type_ids)
            return self.dropout(self.layer_norm(x))

    class BertLayer(nn.Module):
        """Self-attention and feed-forward sublayers, each with a residual and a post-LayerNorm."""

        def __init__(self, hidden: int, heads: int, intermediate: int, dropout: float):
            super().__init__()
            self.heads = heads
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.attention_output = nn.Linear(hidden, hidden)
            self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.intermediate = nn.Linear(hidden, intermediate)
            self.output = nn.Linear(intermediate, hidden)
            self.output_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
            b, s, h = x.shape

            def split(t: torch.Tensor) -> torch.Tensor:
                return t.view(b, s, self.heads, h // self.heads).transpose(1, 2)

            p = self.dropout.p if self.training else 0.0
            a = F.scaled_dot_product_attention(
                split(self.query(x)), split(self.key(x)), split(self.value(x)),
                attn_mask=mask, dropout_p=p,
            )
            a = a.transpose(1, 2).reshape(b, s, h)
            x = self.attention_norm(x + self.dropout(self.attention_output(a)))
            y = self.output(F.gelu(self.intermediate(x)))
            return self.output_norm(x + self.dropout(y))

    class Bert(nn.Module):
        """BERT encoder with a masked-token head over ``mlm_classes`` token buckets and a
        next-sentence head on the pooled first token. ``forward`` returns
        ``(mlm_logits [B, S, mlm_classes], nsp_logits [B, 2])``."""

        def __init__(self, layers: int, hidden: int, heads: int, intermediate: int, vocab: int,
                     max_positions: int, type_vocab: int, mlm_classes: int,
                     dropout: float = 0.1):
            super().__init__()
            self.embeddings = BertEmbeddings(vocab, hidden, max_positions, type_vocab, dropout)
            self.layers = nn.ModuleList(
                BertLayer(hidden, heads, intermediate, dropout) for _ in range(layers)
            )
            self.mlm_transform = nn.Linear(hidden, hidden)
            self.mlm_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.mlm_decoder = nn.Linear(hidden, mlm_classes)
            self.pooler = nn.Linear(hidden, hidden)
            self.nsp = nn.Linear(hidden, 2)

        def forward(
            self,
            input_ids: torch.Tensor,
            token_type_ids: torch.Tensor | None = None,
            attention_mask: torch.Tensor | None = None,
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            mask = None
            if attention_mask is not None:  # [B, S] of 1 (attend) / 0 (padding)
                mask = attention_mask.bool()[:, None, None, :]
            x = self.embeddings(input_ids, token_type_ids)
            for layer in self.layers:
                x = layer(x, mask)
            mlm = self.mlm_decoder(self.mlm_norm(F.gelu(self.mlm_transform(x))))
            nsp = self.nsp(torch.tanh(self.pooler(x[:, 0])))
            return mlm, nsp

    # -- NCF -----------------------------------------------------------------------------
    class NeuMF(nn.Module):
        """Neural matrix factorization: a GMF path and an MLP path over user/item embeddings,
        joined by one output unit. ``forward`` returns logits ``[B]``."""

        def __init__(self, users: int, items: int, factors: int, mlp_layers: list[int],
                     dense_embeddings: bool = False):
            super().__init__()
            if len(mlp_layers) < 1 or mlp_layers[0] % 2:
                raise ConfigError(
                    f"mlp_layers must start with an even width (user and item halves), "
                    f"got {mlp_layers}"
                )
            table: Callable[[int, int], nn.Module] = (
                DenseTable if dense_embeddings else nn.Embedding
            )
            half = mlp_layers[0] // 2
            self.mf_user_embedding = table(users, factors)
            self.mf_item_embedding = table(items, factors)
            self.mlp_user_embedding = table(users, half)
            self.mlp_item_embedding = table(items, half)
            self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(mlp_layers))
            self.output = nn.Linear(factors + mlp_layers[-1], 1)
            for t in (self.mf_user_embedding, self.mf_item_embedding,
                      self.mlp_user_embedding, self.mlp_item_embedding):
                nn.init.normal_(t.weight, std=0.01)

        def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
            mf = self.mf_user_embedding(users) * self.mf_item_embedding(items)
            h = torch.cat([self.mlp_user_embedding(users), self.mlp_item_embedding(items)], dim=-1)
            for layer in self.mlp:
                h = F.relu(layer(h))
            return self.output(torch.cat([mf, h], dim=-1)).squeeze(-1)

    # -- VGG -----------------------------------------------------------------------------
    vgg_stacks = {16: [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]]}

    class VGG(nn.Module):
        """VGG: blocks of 3x3 convolutions and 2x2 max-pooling, then fully connected layers
        ``fc6, fc7, ...`` (``classifier`` hidden widths, then ``classes``)."""

        def __init__(self, depth: int, classifier: list[int], classes: int, image_size: int,
                     dropout: float = 0.0):
            super().__init__()
            if depth not in vgg_stacks:
                raise ConfigError(f"VGG depth must be one of {sorted(vgg_stacks)}, got {depth}")
            self.image_size = image_size
            features: OrderedDict[str, nn.Module] = OrderedDict()
            c = 3
            for block, widths in enumerate(vgg_stacks[depth], start=1):
                for i, w in enumerate(widths, start=1):
                    features[f"conv{block}_{i}"] = nn.Conv2d(c, w, 3, padding=1)
                    features[f"relu{block}_{i}"] = nn.ReLU(inplace=True)
                    c = w
                features[f"pool{block}"] = nn.MaxPool2d(2)
            self.features = nn.Sequential(features)
            side = image_size // 2 ** len(vgg_stacks[depth])
            dims = [c * side * side, *classifier, classes]
            head: OrderedDict[str, nn.Module] = OrderedDict()
            last = len(dims) - 2
            for i, (a, b) in enumerate(pairwise(dims)):
                head[f"fc{6 + i}"] = nn.Linear(a, b)
                if i < last:
                    head[f"relu{6 + i}"] = nn.ReLU(inplace=True)
                    if dropout > 0:
                        head[f"drop{6 + i}"] = nn.Dropout(dropout)
            self.classifier = nn.Sequential(head)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            return self.classifier(torch.flatten(self.features(images), 1))

    # -- ResNet --------------------------------------------------------------------------
    class Bottleneck(nn.Module):
        """1x1 reduce, 3x3 (strided, v1.5), 1x1 expand x4, plus the (projected) shortcut."""

        def __init__(self, cin: int, width: int, stride: int):
            super().__init__()
            out = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
            self.downsample: nn.Module | None = None
            if stride != 1 or cin != out:
                self.downsample = nn.Sequential(
                    nn.Conv2d(cin, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)
                )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.relu(self.bn1(self.conv1(x)))
            y = F.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            shortcut = x if self.downsample is None else self.downsample(x)
            return F.relu(y + shortcut)

    class ResNet(nn.Module):
        """Bottleneck ResNet. ``stem='imagenet'``: 7x7/2 convolution and 3x3/2 max-pool;
        ``stem='cifar'``: one 3x3/1 convolution (for 32x32 inputs)."""

        def __init__(self, blocks: list[int], width: int, classes: int, image_size: int,
                     stem: str = "imagenet"):
            super().__init__()
            if stem not in ("imagenet", "cifar"):
                raise ConfigError(f"stem must be 'imagenet' or 'cifar', got {stem!r}")
            self.image_size = image_size
            if stem == "imagenet":
                self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
                self.pool: nn.Module = nn.MaxPool2d(3, stride=2, padding=1)
            else:
                self.conv1 = nn.Conv2d(3, width, 3, stride=1, padding=1, bias=False)
                self.pool = nn.Identity()
            self.bn1 = nn.BatchNorm2d(width)
            stages = []
            cin = width
            for i, n in enumerate(blocks):
                w = width * 2**i
                stage = []
                for j in range(n):
                    stage.append(Bottleneck(cin, w, 2 if (j == 0 and i > 0) else 1))
                    cin = w * 4
                stages.append(nn.Sequential(*stage))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.fc = nn.Linear(cin, classes)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            x = self.pool(F.relu(self.bn1(self.conv1(images))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    # -- DenseNet ------------------------------------------------------------------------
    class DenseLayer(nn.Module):
        """BN-ReLU-1x1 conv (to ``bn_size * growth``), BN-ReLU-3x3 conv (to ``growth``)."""

        def __init__(self, cin: int, growth: int, bn_size: int):
            super().__init__()
            self.norm1 = nn.BatchNorm2d(cin)
            self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
            self.norm2 = nn.BatchNorm2d(bn_size * growth)
            self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv1(F.relu(self.norm1(x)))
            return self.conv2(F.relu(self.norm2(y)))

    class DenseBlock(nn.ModuleList):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            features = [x]
            for layer in self:
                features.append(layer(torch.cat(features, 1)))
            return torch.cat(features, 1)

    class Transition(nn.Module):
        def __init__(self, cin: int, cout: int):
            super().__init__()
            self.norm = nn.BatchNorm2d(cin)
            self.conv = nn.Conv2d(cin, cout, 1, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.avg_pool2d(self.conv(F.relu(self.norm(x))), 2)

    class DenseNet(nn.Module):
        """DenseNet-BC: dense blocks joined by transitions that halve the channels."""

        def __init__(self, blocks: list[int], growth: int, init_features: int, bn_size: int,
                     classes: int, image_size: int):
            super().__init__()
            self.image_size = image_size
            self.conv0 = nn.Conv2d(3, init_features, 7, stride=2, padding=3, bias=False)
            self.norm0 = nn.BatchNorm2d(init_features)
            stages: list[nn.Module] = []
            c = init_features
            for i, n in enumerate(blocks):
                stages.append(
                    DenseBlock(DenseLayer(c + j * growth, growth, bn_size) for j in range(n))
                )
                c += n * growth
                if i < len(blocks) - 1:
                    stages.append(Transition(c, c // 2))
                    c //= 2
            self.stages = nn.Sequential(*stages)
            self.norm5 = nn.BatchNorm2d(c)
            self.classifier = nn.Linear(c, classes)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            x = F.max_pool2d(F.relu(self.norm0(self.conv0(images))), 3, stride=2, padding=1)
            x = F.relu(self.norm5(self.stages(x)))
            return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    # -- Inception-v3 (Keras layout) -----------------------------------------------------
    class BatchNormNoScale(nn.Module):
        """Batch norm with a trainable offset and no scale (Keras ``BatchNormalization(scale=
        False)``): one trainable vector ``bias``; the moving statistics are buffers."""

        def __init__(self, channels: int, eps: float = 1e-3, momentum: float = 0.01):
            super().__init__()
            self.eps = eps
            self.momentum = momentum
            self.bias = nn.Parameter(torch.zeros(channels))
            self.register_buffer("running_mean", torch.zeros(channels))
            self.register_buffer("running_var", torch.ones(channels))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.batch_norm(x, self.running_mean, self.running_var, None, self.bias,
                                self.training, self.momentum, self.eps)

    class ConvBN(nn.Module):
        """Keras ``conv2d_bn``: convolution without bias, batch norm without scale, ReLU.
        ``same`` padding keeps the size at stride 1; ``valid`` pads nothing."""

        def __init__(self, cin: int, cout: int, kernel: tuple[int, int] | int, stride: int = 1,
                     padding: str = "same"):
            super().__init__()
            kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
            pad = (kh // 2, kw // 2) if padding == "same" else (0, 0)
            self.conv = nn.Conv2d(cin, cout, (kh, kw), stride=stride, padding=pad, bias=False)
            self.bn = BatchNormNoScale(cout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.relu(self.bn(self.conv(x)))

    def avg_pool_same(x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)

    class InceptionA(nn.Module):  # mixed0-2, 35x35
        def __init__(self, cin: int, pool_features: int):
            super().__init__()
            self.branch1x1 = ConvBN(cin, 64, 1)
            self.branch5x5_1 = ConvBN(cin, 48, 1)
            self.branch5x5_2 = ConvBN(48, 64, 5)
            self.branch3x3dbl_1 = ConvBN(cin, 64, 1)
            self.branch3x3dbl_2 = ConvBN(64, 96, 3)
            self.branch3x3dbl_3 = ConvBN(96, 96, 3)
            self.branch_pool = ConvBN(cin, pool_features, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b5 = self.branch5x5_2(self.branch5x5_1(x))
            b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
            return torch.cat([self.branch1x1(x), b5, b3, self.branch_pool(avg_pool_same(x))], 1)

    class InceptionB(nn.Module):  # mixed3, 35x35 -> 17x17
        def __init__(self, cin: int):
            super().__init__()
            self.branch3x3 = ConvBN(cin, 384, 3, stride=2, padding="valid")
            self.branch3x3dbl_1 = ConvBN(cin, 64, 1)
            self.branch3x3dbl_2 = ConvBN(64, 96, 3)
            self.branch3x3dbl_3 = ConvBN(96, 96, 3, stride=2, padding="valid")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
            return torch.cat([self.branch3x3(x), b3, F.max_pool2d(x, 3, stride=2)], 1)

    class InceptionC(nn.Module):  # mixed4-7, 17x17, factorized 7x7
        def __init__(self, cin: int, c7: int):
            super().__init__()
            self.branch1x1 = ConvBN(cin, 192, 1)
            self.branch7x7_1 = ConvBN(cin, c7, 1)
            self.branch7x7_2 = ConvBN(c7, c7, (1, 7))
            self.branch7x7_3 = ConvBN(c7, 192, (7, 1))
            self.branch7x7dbl_1 = ConvBN(cin, c7, 1)
            self.branch7x7dbl_2 = ConvBN(c7, c7, (7, 1))
            self.branch7x7dbl_3 = ConvBN(c7, c7, (1, 7))
            self.branch7x7dbl_4 = ConvBN(c7, c7, (7, 1))
            self.branch7x7dbl_5 = ConvBN(c7, 192, (1, 7))
            self.branch_pool = ConvBN(cin, 192, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
            d = x
            for conv in (self.branch7x7dbl_1, self.branch7x7dbl_2, self.branch7x7dbl_3,
                         self.branch7x7dbl_4, self.branch7x7dbl_5):
                d = conv(d)
            return torch.cat([self.branch1x1(x), b7, d, self.branch_pool(avg_pool_same(x))], 1)

    class InceptionD(nn.Module):  # mixed8, 17x17 -> 8x8
        def __init__(self, cin: int):
            super().__init__()
            self.branch3x3_1 = ConvBN(cin, 192, 1)
            self.branch3x3_2 = ConvBN(192, 320, 3, stride=2, padding="valid")
            self.branch7x7x3_1 = ConvBN(cin, 192, 1)
            self.branch7x7x3_2 = ConvBN(192, 192, (1, 7))
            self.branch7x7x3_3 = ConvBN(192, 192, (7, 1))
            self.branch7x7x3_4 = ConvBN(192, 192, 3, stride=2, padding="valid")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b3 = self.branch3x3_2(self.branch3x3_1(x))
            b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
            return torch.cat([b3, b7, F.max_pool2d(x, 3, stride=2)], 1)

    class InceptionE(nn.Module):  # mixed9-10, 8x8, expanded filter bank
        def __init__(self, cin: int):
            super().__init__()
            self.branch1x1 = ConvBN(cin, 320, 1)
            self.branch3x3_1 = ConvBN(cin, 384, 1)
            self.branch3x3_2a = ConvBN(384, 384, (1, 3))
            self.branch3x3_2b = ConvBN(384, 384, (3, 1))
            self.branch3x3dbl_1 = ConvBN(cin, 448, 1)
            self.branch3x3dbl_2 = ConvBN(448, 384, 3)
            self.branch3x3dbl_3a = ConvBN(384, 384, (1, 3))
            self.branch3x3dbl_3b = ConvBN(384, 384, (3, 1))
            self.branch_pool = ConvBN(cin, 192, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b3 = self.branch3x3_1(x)
            b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
            d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
            d = torch.cat([self.branch3x3dbl_3a(d), self.branch3x3dbl_3b(d)], 1)
            return torch.cat([self.branch1x1(x), b3, d, self.branch_pool(avg_pool_same(x))], 1)

    class InceptionV3(nn.Module):
        """Inception-v3 as Keras builds it (``keras.applications.InceptionV3``), without the
        auxiliary classifier."""

        def __init__(self, classes: int, image_size: int):
            super().__init__()
            self.image_size = image_size
            self.stem = nn.Sequential(
                ConvBN(3, 32, 3, stride=2, padding="valid"),
                ConvBN(32, 32, 3, padding="valid"),
                ConvBN(32, 64, 3),
                nn.MaxPool2d(3, stride=2),
                ConvBN(64, 80, 1, padding="valid"),
                ConvBN(80, 192, 3, padding="valid"),
                nn.MaxPool2d(3, stride=2),
            )
            self.mixed = nn.Sequential(OrderedDict(
                mixed0=InceptionA(192, 32),
                mixed1=InceptionA(256, 64),
                mixed2=InceptionA(288, 64),
                mixed3=InceptionB(288),
                mixed4=InceptionC(768, 128),
                mixed5=InceptionC(768, 160),
                mixed6=InceptionC(768, 160),
                mixed7=InceptionC(768, 192),
                mixed8=InceptionD(768),
                mixed9=InceptionE(1280),
                mixed10=InceptionE(2048),
            ))
            self.fc = nn.Linear(2048, classes)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            x = self.mixed(self.stem(images))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    classes = [
        DenseTable, BertEmbeddings, BertLayer, Bert, NeuMF, VGG, Bottleneck, ResNet, DenseLayer,
        DenseBlock, Transition, DenseNet, BatchNormNoScale, ConvBN, InceptionA, InceptionB,
        InceptionC, InceptionD, InceptionE, InceptionV3,
    ]
    assert {cls.__name__ for cls in classes} == _ARCH_CLASSES
    for cls in classes:  # make them importable (and picklable) as zoo.<Name>
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
    return SimpleNamespace(**{cls.__name__: cls for cls in classes})
