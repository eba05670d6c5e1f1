"""The model zoo: published sizes, sparse vs dense tables, graphs, and runnable forwards."""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import subprocess
import sys

import pytest
import torch

from autosync_transfer.domains import zoo
from autosync_transfer.domains.catalog import get_domain
from autosync_transfer.errors import ConfigError, UnknownNameError

#: published parameter totals (torchvision / Keras / the BERT paper) and the tolerance
PUBLISHED = {
    "vgg16": (138_357_544, 0.01),
    "resnet50": (25_557_032, 0.01),
    "resnet101": (44_549_160, 0.01),
    "densenet121": (7_978_856, 0.01),
    "inceptionv3": (23_851_784, 0.02),  # Keras total; its trainable part is 23,817,352
    "bert-base": (110_000_000, 0.02),
    "bert-large": (335_000_000, 0.02),
}

RUNNABLE = [name for name, spec in zoo.MODELS.items() if spec.runnable]


def test_catalog_names_are_all_present() -> None:
    assert set(zoo.MODELS) == {
        "bert-3l", "bert", "bert-12l", "bert-base", "bert-large", "ncf", "ncf-dense", "vgg16",
        "resnet50", "resnet101", "densenet121", "inceptionv3", "vgg16-s", "resnet50-s",
    }
    assert set(RUNNABLE) == {"bert-3l", "bert", "bert-12l", "ncf", "ncf-dense", "vgg16-s",
                             "resnet50-s"}


def test_importing_the_zoo_does_not_import_torch() -> None:
    code = (
        "import sys, autosync_transfer.domains.zoo as z; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert len(z.MODELS) > 0; "
        "assert not hasattr(z, 'nothing_here'); "
        "assert 'torch' not in sys.modules, 'torch imported by getattr'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_parameter_totals_match_published_values(name: str) -> None:
    expected, tolerance = PUBLISHED[name]
    g = zoo.model_graph(name)
    assert g.num_parameters == pytest.approx(expected, rel=tolerance)
    assert g.config["parameters"] == g.num_parameters


def test_exact_totals_of_reproduced_layouts() -> None:
    # torchvision layouts are reproduced exactly; Inception-v3 matches Keras' trainable count
    assert zoo.model_graph("vgg16").num_parameters == 138_357_544
    assert zoo.model_graph("resnet50").num_parameters == 25_557_032
    assert zoo.model_graph("inceptionv3").num_parameters == 23_817_352


def test_vgg16_fc6_is_25088_by_4096() -> None:
    fc6 = zoo.model_graph("vgg16").variable("classifier.fc6.weight")
    assert sorted(fc6.shape) == [4096, 25088]


@pytest.mark.parametrize("name", ["bert-3l", "bert", "bert-12l", "bert-base", "bert-large"])
def test_bert_word_embedding_is_sparse_position_and_type_tables_dense(name: str) -> None:
    g = zoo.model_graph(name)
    hidden = g.config["hidden"]
    word = g.variable("embeddings.word_embeddings.weight")
    assert word.sparse and word.shape == (30522, hidden)
    positions = g.variable("embeddings.position_embeddings.weight")
    assert not positions.sparse and positions.shape == (512, hidden)
    types = g.variable("embeddings.token_type_embeddings.weight")
    assert not types.sparse and types.shape == (2, hidden)
    assert [v.name for v in g.sparse_variables] == [word.name]
    assert g.variables[0] == word


@pytest.mark.parametrize(
    ("name", "layers", "hidden", "batch", "seq"),
    [("bert-3l", 3, 256, 4, 64), ("bert", 6, 256, 4, 64), ("bert-12l", 12, 256, 4, 64),
     ("bert-base", 12, 768, 8, 128), ("bert-large", 24, 1024, 8, 128)],
)
def test_bert_sizes(name: str, layers: int, hidden: int, batch: int, seq: int) -> None:
    g = zoo.model_graph(name)
    queries = [v for v in g.variables if v.name.endswith("query.weight")]
    assert len(queries) == layers and queries[0].shape == (hidden, hidden)
    assert (g.batch_size, g.seq_len) == (batch, seq)
    assert (g.config["layers"], g.config["hidden"], g.config["vocab"]) == (layers, hidden, 30522)


def test_scaled_models_say_so() -> None:
    for name in ("bert-3l", "bert", "bert-12l"):
        assert "scaled: not BERT-base" in zoo.MODELS[name].description
    for name in ("vgg16-s", "resnet50-s"):
        assert "scaled" in zoo.MODELS[name].description


def test_ncf_sparse_tables_and_ncf_dense_dense_tables() -> None:
    sparse, dense = zoo.model_graph("ncf"), zoo.model_graph("ncf-dense")
    assert [(v.name, v.shape) for v in sparse.variables] == [
        (v.name, v.shape) for v in dense.variables
    ]
    tables = {
        "mf_user_embedding.weight": (138493, 8),
        "mf_item_embedding.weight": (26744, 8),
        "mlp_user_embedding.weight": (138493, 32),
        "mlp_item_embedding.weight": (26744, 32),
    }
    assert {v.name: v.shape for v in sparse.sparse_variables} == tables
    assert dense.sparse_variables == []
    assert sparse.num_parameters == (138493 + 26744) * 40 + (64 * 32 + 32) + (32 * 16 + 16) + (
        16 * 8 + 8
    ) + (16 + 1)
    assert (sparse.batch_size, sparse.seq_len) == (256, 1)


def test_ncf_tables_are_embeddings_and_ncf_dense_tables_plain_parameters() -> None:
    for name, expect_dense in (("ncf", False), ("ncf-dense", True)):
        module = zoo.build_module(name, "cpu")
        inputs, targets = zoo.example_batch(name, 4, torch.Generator().manual_seed(0))
        zoo.loss_fn(name)(module(**inputs), targets).backward()
        table = module.mf_user_embedding
        assert isinstance(table, torch.nn.Embedding) != expect_dense
        assert table.weight.grad is not None and table.weight.grad.layout == torch.strided


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_every_model_builds_a_graph(name: str) -> None:
    spec = zoo.MODELS[name]
    g = zoo.model_graph(name)
    assert g.name == name and g.description == spec.description
    assert (g.batch_size, g.seq_len) == (spec.batch_size, spec.seq_len)
    assert g.config["family"] == spec.family
    assert g.config["bytes"] == g.nbytes == 4 * g.num_parameters
    assert g.edges  # a dataflow chain


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_every_model_runs_forward_on_meta(name: str) -> None:
    module = zoo.build_module(name, "meta")
    inputs, targets = zoo.example_batch(name, 1, device="meta")
    outputs = module(**inputs)
    loss = zoo.loss_fn(name)(outputs, targets)
    assert loss.shape == ()
    spec = zoo.MODELS[name]
    if spec.family in ("vgg", "resnet", "densenet", "inception"):
        assert outputs.shape == (1, spec.config["classes"])


@pytest.mark.parametrize("name", RUNNABLE)
def test_runnable_models_train_on_cpu(name: str) -> None:
    module = zoo.build_module(name, "cpu")
    inputs, targets = zoo.example_batch(name, 2, torch.Generator().manual_seed(0))
    loss = zoo.loss_fn(name)(module(**inputs), targets)
    assert loss.shape == () and math.isfinite(loss.item())
    loss.backward()
    missing = [n for n, p in module.named_parameters() if p.grad is None]
    assert missing == []  # every parameter is used (no unused-parameter surprises in DDP)


def test_example_batch_is_owned_randomness() -> None:
    a = zoo.example_batch("bert-3l", 2, torch.Generator().manual_seed(5))
    b = zoo.example_batch("bert-3l", 2, torch.Generator().manual_seed(5))
    assert torch.equal(a[0]["input_ids"], b[0]["input_ids"])
    assert torch.equal(a[1]["mlm"], b[1]["mlm"])
    assert a[0]["input_ids"].shape == (2, 64)
    images, labels = zoo.example_batch("vgg16-s")
    assert images["images"].shape == (8, 3, 32, 32) and labels.shape == (8,)
    with pytest.raises(ConfigError, match="batch_size"):
        zoo.example_batch("ncf", 0)


def test_build_is_seeded_and_leaves_the_global_rng_alone() -> None:
    state = torch.random.get_rng_state()
    a = zoo.build_module("ncf", "cpu", seed=3)
    b = zoo.build_module("ncf", "cpu", seed=3)
    c = zoo.build_module("ncf", "cpu", seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(a.output.weight, b.output.weight)
    assert not torch.equal(a.output.weight, c.output.weight)


def test_built_modules_pickle() -> None:
    module = zoo.build_module("resnet50-s", "cpu")
    clone = pickle.loads(pickle.dumps(module))
    assert type(clone) is zoo.ResNet
    assert torch.equal(clone.fc.weight, module.fc.weight)


def test_meta_build_allocates_nothing() -> None:
    module = zoo.MODELS["bert-large"].build()
    assert all(p.is_meta for p in module.parameters())


def test_unknown_names_and_bad_configs() -> None:
    with pytest.raises(UnknownNameError, match="unknown model 'gpt'"):
        zoo.model_graph("gpt")
    with pytest.raises(ConfigError, match="multiple of heads"):
        zoo.bert_config(2, 100, 3, 64)


def test_catalog_domain_uses_the_zoo() -> None:
    domain = get_domain("bert-large-B")
    assert domain.model.num_parameters == zoo.model_graph("bert-large").num_parameters


# -- the layout and initialization of every model, pinned (computed before the zoo became a
# package of one module per family; a change to any of these is a change of the models)
#: name -> (graph fingerprint, sha256[:16] of the state dict's [(key, shape)] as JSON)
LAYOUTS = {
    "bert-3l": ("165814ad82f399c9", "831a4894ed044e3a"),
    "bert": ("8e78c83611dcd298", "3568b63d7ad92bfd"),
    "bert-12l": ("8af6a0c7a9588a80", "1122363367194959"),
    "bert-base": ("cbd867eca468a6e3", "f7d5405fba4c0964"),
    "bert-large": ("fd3f9ec29555cff4", "7f744d0038cbf87d"),
    "ncf": ("739d0da484aba9d5", "527eedbf415d346c"),
    "ncf-dense": ("362b54cd69225a10", "527eedbf415d346c"),
    "vgg16": ("eccc6abb8f28588d", "1c1878f4fc61eff4"),
    "resnet50": ("22bec596263a5384", "218340f9d3037dea"),
    "resnet101": ("14eec2b762dca3e4", "55fe4f809238a5be"),
    "densenet121": ("a3bc85e876f72db9", "e2fb3723651933b2"),
    "inceptionv3": ("7ef7a7b9b4bd20e7", "6b55ab638db17a01"),
    "vgg16-s": ("de6a648e352f3b67", "84f44cbe99fe1d47"),
    "resnet50-s": ("867424c35d5fc111", "42629efd91416d6b"),
}

#: name -> (sum of parameters, sum of |parameters|, sums of the eval-mode forward outputs) for
#: ``build_module(name, "cpu", seed=7)`` on ``example_batch(name, 2, Generator().manual_seed(1))``
SEEDED = {
    "bert-3l": (1959.655990969368, 202900.3618034044,
                [134.6962011686992, 0.16022100299596786]),
    "bert": (3373.925889030077, 266061.73652948753,
                [127.17980969377095, 0.21158234030008316]),
    "bert-12l": (6488.8778653740665, 392403.35106964724,
                [-1126.09960658825, -0.2027842476963997]),
    "ncf": (-7.636829915541387, 52918.98016274716,
                [-0.37956883013248444]),
    "ncf-dense": (-7.636829915541387, 52918.98016274716,
                [-0.37956883013248444]),
    "vgg16-s": (-51.914459361698384, 261675.31759519805,
                [0.013479126879246905]),
    "resnet50-s": (6676.394501564193, 49827.581130541235,
                [-0.19370434619486332]),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_is_pinned(name: str) -> None:
    fingerprint, keys = LAYOUTS[name]
    assert zoo.model_graph(name).fingerprint == fingerprint
    state = zoo.build_module(name, "meta").state_dict()
    layout = json.dumps([(k, list(v.shape)) for k, v in state.items()])
    assert hashlib.sha256(layout.encode()).hexdigest()[:16] == keys


@pytest.mark.parametrize("name", list(SEEDED))
def test_seeded_initialization_and_forward_are_pinned(name: str) -> None:
    total, total_abs, outputs = SEEDED[name]
    module = zoo.build_module(name, "cpu", seed=7).eval()
    with torch.no_grad():
        params = list(module.parameters())
        assert sum(float(p.double().sum()) for p in params) == pytest.approx(total, rel=1e-6)
        assert sum(float(p.double().abs().sum()) for p in params) == pytest.approx(total_abs,
                                                                                   rel=1e-6)
        inputs, _ = zoo.example_batch(name, 2, torch.Generator().manual_seed(1))
        out = module(**inputs)
    out = out if isinstance(out, tuple) else (out,)
    assert [float(t.double().sum()) for t in out] == pytest.approx(outputs, rel=1e-4, abs=1e-4)
