"""Importers: torch modules and Keras models -> ModelGraph."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch
from torch import nn

from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.domains.importers import graph_from_keras, graph_from_torch
from autosync_transfer.errors import ConfigError


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(50, 8)
        self.bag = nn.EmbeddingBag(20, 8, mode="sum")
        self.norm = nn.LayerNorm(8)
        self.frozen = nn.Linear(8, 8)
        self.frozen.requires_grad_(False)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # pragma: no cover - not run
        return self.head(self.frozen(self.norm(self.tokens(ids).mean(1))))


def test_torch_variables_in_registration_order_with_shapes_and_modules() -> None:
    g = graph_from_torch(_Tiny(), "tiny", batch_size=4, seq_len=7)
    assert [v.name for v in g.variables] == [
        "tokens.weight", "bag.weight", "norm.weight", "norm.bias", "head.weight", "head.bias",
    ]
    assert [v.order for v in g.variables] == list(range(6))
    assert g.variable("tokens.weight").shape == (50, 8)
    assert g.variable("head.weight").shape == (3, 8)
    assert g.variable("norm.bias").module == "norm"
    assert all(v.dtype == "float32" for v in g.variables)
    assert (g.batch_size, g.seq_len) == (4, 7)
    assert g.config["parameters"] == 50 * 8 + 20 * 8 + 16 + 24 + 3
    assert g.config["bytes"] == 4 * g.config["parameters"]


def test_torch_embedding_weights_are_sparse_other_parameters_dense() -> None:
    g = graph_from_torch(_Tiny(), "tiny")
    assert {v.name for v in g.sparse_variables} == {"tokens.weight", "bag.weight"}


def test_torch_frozen_parameters_are_left_out() -> None:
    g = graph_from_torch(_Tiny(), "tiny")
    assert not any(v.name.startswith("frozen.") for v in g.variables)


def test_torch_edges_chain_consecutive_leaf_modules() -> None:
    g = graph_from_torch(_Tiny(), "tiny")
    assert set(g.edges) == {
        ("tokens.weight", "bag.weight"),
        ("bag.weight", "norm.weight"),
        ("bag.weight", "norm.bias"),
        ("norm.weight", "head.weight"),
        ("norm.weight", "head.bias"),
        ("norm.bias", "head.weight"),
        ("norm.bias", "head.bias"),
    }


def test_torch_sparse_override_by_names_and_by_predicate() -> None:
    by_names = graph_from_torch(_Tiny(), "tiny", sparse={"head.weight"})
    assert [v.name for v in by_names.sparse_variables] == ["head.weight"]
    by_predicate = graph_from_torch(_Tiny(), "tiny", sparse=lambda n: n.startswith("bag"))
    assert [v.name for v in by_predicate.sparse_variables] == ["bag.weight"]


def test_torch_sparse_override_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="unknown variables"):
        graph_from_torch(_Tiny(), "tiny", sparse={"nope.weight"})
    with pytest.raises(ConfigError, match="rank >= 2"):
        graph_from_torch(_Tiny(), "tiny", sparse={"head.bias"})


def test_torch_meta_device_and_half_precision() -> None:
    with torch.device("meta"):
        module = nn.Sequential(nn.Embedding(10_000_000, 64), nn.Linear(64, 2)).half()
    g = graph_from_torch(module, "meta")
    assert g.variable("0.weight").shape == (10_000_000, 64)
    assert g.variable("0.weight").dtype == "float16"
    assert g.nbytes == 2 * g.num_parameters


def test_torch_rejects_non_modules_and_parameterless_modules() -> None:
    with pytest.raises(ConfigError, match="torch.nn.Module"):
        graph_from_torch(object(), "x")
    with pytest.raises(ConfigError, match="no trainable variables"):
        graph_from_torch(nn.ReLU(), "x")


def test_modelgraph_from_torch_delegates() -> None:
    g = ModelGraph.from_torch(_Tiny(), "tiny", description="d")
    assert g.name == "tiny" and g.description == "d"


def test_keras_missing_tensorflow_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # makes `import tensorflow` fail
    with pytest.raises(ConfigError, match=r"pip install autosync-transfer\[tensorflow\]"):
        graph_from_keras(object())


# -- Keras ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def keras() -> Any:
    pytest.importorskip("tensorflow")
    import keras

    return keras


def _functional(keras: Any) -> Any:
    inp = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(100, 8)(inp)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(4)(x)  # two Dense layers with default names: paths must differ
    x = keras.layers.Dense(2)(x)
    return keras.Model(inp, x, name="tiny_keras")


@pytest.mark.tensorflow
def test_keras_embedding_is_sparse_dense_layers_are_not(keras: Any) -> None:
    g = graph_from_keras(_functional(keras), batch_size=3, seq_len=5)
    assert g.name == "tiny_keras"
    assert (g.batch_size, g.seq_len) == (3, 5)
    emb = g.variables[0]
    assert emb.name.endswith("embeddings") and emb.shape == (100, 8) and emb.sparse
    assert [v.sparse for v in g.variables[1:]] == [False] * 4
    assert g.num_parameters == 800 + 8 * 4 + 4 + 4 * 2 + 2
    assert g.config["source"] == "keras"


@pytest.mark.tensorflow
def test_keras_names_are_unique_variable_paths(keras: Any) -> None:
    model = _functional(keras)
    g = graph_from_keras(model, "named")
    assert [v.name for v in g.variables] == [v.path for v in model.trainable_variables]
    assert len({v.name for v in g.variables}) == len(g.variables)
    kernels = [v for v in g.variables if v.name.endswith("/kernel")]
    assert len(kernels) == 2 and kernels[0].module != kernels[1].module
    assert (g.variables[0].name, g.variables[1].name) in g.edges


@pytest.mark.tensorflow
def test_keras_sparseness_is_measured_from_the_gradient(keras: Any) -> None:
    class Lookup(keras.layers.Layer):
        """A gathered table that is not an Embedding layer: only the gradient tells."""

        def build(self, input_shape: Any) -> None:
            self.table = self.add_weight(shape=(30, 4), name="table")

        def call(self, ids: Any) -> Any:
            return keras.ops.take(self.table, ids, axis=0)

    inp = keras.Input(shape=(2,), dtype="int32")
    out = keras.layers.Dense(1)(keras.layers.Flatten()(Lookup()(inp)))
    g = graph_from_keras(keras.Model(inp, out))
    assert [v.sparse for v in g.variables] == [True, False, False]


@pytest.mark.tensorflow
def test_keras_without_symbolic_inputs_falls_back_to_layer_types(keras: Any) -> None:
    class Sub(keras.Model):
        def __init__(self) -> None:
            super().__init__(name="sub")
            self.emb = keras.layers.Embedding(50, 4)
            self.out = keras.layers.Dense(2)

        def call(self, ids: Any) -> Any:
            return self.out(self.emb(ids))

    model = Sub()
    model(keras.ops.zeros((2, 3), dtype="int32"))
    g = graph_from_keras(model)
    assert [v.sparse for v in g.variables] == [True, False, False]


@pytest.mark.tensorflow
def test_keras_unbuilt_model_is_a_config_error(keras: Any) -> None:
    with pytest.raises(ConfigError, match="no trainable variables"):
        graph_from_keras(keras.Sequential([keras.layers.Dense(2)]), "unbuilt")
