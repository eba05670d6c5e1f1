"""Workloads: every spec form, the graph facts of one real step, and one-line errors for bad specs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from autosync_transfer.domains.catalog import get_cluster, get_model
from autosync_transfer.domains.workload import (Workload, ZooWorkload, absolute_spec, call_model,
                                                load_workload, zoo_workload)
from autosync_transfer.errors import ConfigError, WorkloadError

ROOT = Path(__file__).resolve().parents[2]
TINY_GPT = ROOT / "examples" / "workloads" / "tiny_gpt.py"

PLAIN = """
import torch
from torch import nn

BATCH_SIZE = 4

def build_model():
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))

def example_batch(batch_size, generator):
    return (torch.randn(batch_size, 6, generator=generator),
            torch.randint(2, (batch_size,), generator=generator))

def loss_fn(output, targets):
    return nn.functional.cross_entropy(output, targets)
"""


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


# -- spec forms ----------------------------------------------------------------------------------
def test_path_spec_tiny_gpt_graph_facts() -> None:
    w = load_workload(str(TINY_GPT))
    assert w.name == "tiny_gpt" and w.spec == str(TINY_GPT) and w.batch_size == 8
    g = w.graph()
    assert g.name == "tiny_gpt"
    assert g.batch_size == 8 and g.seq_len == 15  # (batch, SEQ_LEN - 1) token inputs
    assert {v.name for v in g.sparse_variables} == {"tokens.weight", "positions.weight"}
    assert w.fingerprint == load_workload(str(TINY_GPT)).fingerprint  # stable
    d = w.domain(get_cluster("B"))
    assert d.name == "tiny_gpt-B" and d.model == g and d.cluster.name == "B"


def test_module_spec_and_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "wl_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    _write(pkg, "small_mlp.py", PLAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    w = load_workload("wl_pkg.small_mlp")
    assert w.name == "wl_pkg.small_mlp" and w.batch_size == 4
    g = w.graph()
    assert g.batch_size == 4 and g.seq_len == 1 and not g.sparse_variables
    assert [v.name for v in g.variables] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_named_workload_object_and_factory(tmp_path: Path) -> None:
    path = _write(tmp_path, "objects.py", PLAIN + """
from autosync_transfer.domains.workload import Workload

MLP = Workload(name="mlp", build_model=build_model, example_batch=example_batch,
               loss_fn=loss_fn, batch_size=3)

def make():
    return MLP.model_copy(update={"name": "made", "batch_size": 2})
""")
    obj = load_workload(f"{path}:MLP")
    assert obj.name == "mlp" and obj.spec == f"{path}:MLP" and obj.graph().batch_size == 3
    made = load_workload(f"{path}:make")
    assert made.name == "made" and made.graph().batch_size == 2
    assert obj.fingerprint != made.fingerprint


def test_file_name_is_sanitized(tmp_path: Path) -> None:
    path = _write(tmp_path, "my-model v2.py", PLAIN)
    assert load_workload(str(path)).name == "my_model_v2"


@pytest.mark.parametrize("spec", ["zoo:ncf", "ncf"])
def test_zoo_models_are_workloads(spec: str) -> None:
    w = load_workload(spec)
    assert isinstance(w, ZooWorkload) and w.name == "ncf" and w.spec == "zoo:ncf"
    assert w.graph() == get_model("ncf")  # the catalog's graph: fingerprints unchanged
    assert w.domain(get_cluster("A")).fingerprint == \
        __import__("autosync_transfer.domains.catalog", fromlist=["x"]).get_domain("ncf-A").fingerprint
    module = w.build("cpu", seed=1)
    inputs, targets = w.batch()
    assert w.loss(module, inputs, targets).dim() == 0


def test_a_workload_object_passes_through_and_call_model_forms() -> None:
    w = zoo_workload("ncf")
    assert load_workload(w) is w
    seen = []

    def model(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append((args, kwargs))

    call_model(model, {"a": 1})
    call_model(model, (1, 2))
    call_model(model, 3)
    assert seen == [((), {"a": 1}), ((1, 2), {}), ((3,), {})]


def test_absolute_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_spec("zoo:ncf") == "zoo:ncf"
    assert absolute_spec("pkg.mod:NAME") == "pkg.mod:NAME"
    assert absolute_spec("w.py") == str(tmp_path / "w.py")
    assert absolute_spec("sub/w.py:MAKE") == f"{tmp_path / 'sub' / 'w.py'}:MAKE"


# -- graph facts from a real step ----------------------------------------------------------------
def test_sparse_gradients_and_dict_inputs_are_detected(tmp_path: Path) -> None:
    path = _write(tmp_path, "sparse_model.py", """
        import torch
        from torch import nn

        BATCH_SIZE = 5

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(50, 4, sparse=True)
                # a raw parameter looked up with a sparse gradient: only the real backward shows it
                self.table = nn.Parameter(torch.randn(30, 4))
                self.out = nn.Linear(4, 1)

            def forward(self, ids, other, scale):
                x = self.emb(ids).mean(1) + nn.functional.embedding(other, self.table, sparse=True)
                return self.out(x * scale).squeeze(-1)

        def build_model():
            return Model()

        def example_batch(batch_size, generator):
            inputs = {"ids": torch.randint(50, (batch_size, 7), generator=generator),
                      "other": torch.randint(30, (batch_size,), generator=generator),
                      "scale": torch.ones(batch_size, 1)}
            return inputs, torch.randn(batch_size, generator=generator)

        def loss_fn(output, targets):
            return ((output - targets) ** 2).mean()
    """)
    g = load_workload(str(path)).graph()
    assert g.batch_size == 5 and g.seq_len == 7
    assert {v.name for v in g.sparse_variables} == {"emb.weight", "table"}
    assert not g.variable("out.weight").sparse


# -- bad specs: one line naming the spec ----------------------------------------------------------
def _bad(tmp_path: Path, body: str) -> str:
    return str(_write(tmp_path, "bad.py", body))


BAD_FILES = {
    "missing-piece": (PLAIN.replace("def loss_fn", "def not_the_loss"), "has no loss_fn"),
    "not-callable": (PLAIN + "\nbuild_model = 3\n", "build_model must be callable"),
    "bad-batch-size": (PLAIN.replace("BATCH_SIZE = 4", "BATCH_SIZE = 0"), "BATCH_SIZE must be an int >= 1"),
    "import-raises": ("raise RuntimeError('broken\\nworkload')\n", "importing"),
    "build-raises": (PLAIN + "\ndef build_model():\n    raise ValueError('no model')\n", "build_model() raised ValueError: no model"),
    "not-a-module": (PLAIN + "\ndef build_model():\n    return 3\n", "build_model() must return a torch.nn.Module"),
    "forward-raises": (PLAIN.replace("torch.randn(batch_size, 6,", "torch.randn(batch_size, 7,"), "the forward pass raised"),
    "loss-not-scalar": (PLAIN.replace("nn.functional.cross_entropy(output, targets)", "output.sum(1)"), "loss_fn must return a scalar tensor, got shape [4]"),
    "loss-not-tensor": (PLAIN.replace("return nn.functional.cross_entropy(output, targets)", "return 1.0"), "loss_fn must return a scalar tensor, got float"),
    "no-grad": (PLAIN.replace("return nn.functional.cross_entropy(output, targets)", "return output.detach().sum()"), "backward raised"),
    "batch-not-pair": (PLAIN + "\ndef example_batch(batch_size, generator):\n    return torch.zeros(batch_size, 6)\n", "example_batch must return (inputs, targets), got Tensor"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_specs_are_one_line(tmp_path: Path, case: str) -> None:
    body, expected = BAD_FILES[case]
    spec = _bad(tmp_path, body)
    with pytest.raises(WorkloadError) as info:
        load_workload(spec).check()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"workload {spec!r}: ") and expected in message, message


@pytest.mark.parametrize("spec, expected", [
    ("no/such/file.py", "no such file"),
    ("no_such_module_xyz", "cannot import module 'no_such_module_xyz'"),
    ("zoo:nope", "no zoo model 'nope'"),
    ("a b c", "expected path/to/file.py"),
    ("pkg.mod:1x", "NAME a Python name"),
    ("", "non-empty string"),
])
def test_bad_spec_strings_are_one_line(spec: str, expected: str) -> None:
    with pytest.raises(WorkloadError) as info:
        load_workload(spec)
    assert "\n" not in str(info.value) and expected in str(info.value), str(info.value)


def test_bad_named_objects(tmp_path: Path) -> None:
    path = _write(tmp_path, "named.py", PLAIN + """
NUMBER = 3

def wrong():
    return 3

def raises():
    raise KeyError("x")
""")
    cases = {"MISSING": "has no attribute 'MISSING'", "NUMBER": "must be a Workload or a factory",
             "wrong": "wrong() must return a Workload, got int", "raises": "raises() raised KeyError"}
    for attr, expected in cases.items():
        with pytest.raises(WorkloadError, match=None) as info:
            load_workload(f"{path}:{attr}")
        assert expected in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_workload_errors_are_config_errors_and_names_are_checked() -> None:
    assert issubclass(WorkloadError, ConfigError)
    with pytest.raises(ValueError):
        Workload(name="bad name", build_model=lambda: None, example_batch=lambda b, g: None,
                 loss_fn=lambda o, t: None)
    from autosync_transfer.domains.cluster import Cluster, Node

    c = Cluster(name="x-y", nodes=(Node(name="n0", address="10.0.0.1", workers=1,
                                        bandwidth_gbps=1.0, chief=True),))
    with pytest.raises(ConfigError, match="must not contain '-'"):
        load_workload(str(TINY_GPT)).domain(c)


def test_path_spec_does_not_leave_the_module_shadowing(tmp_path: Path) -> None:
    path = _write(tmp_path, "json.py", PLAIN)  # a file named like a standard module
    w = load_workload(str(path))
    assert w.name == "json"
    import json

    assert json.__name__ == "json" and hasattr(json, "dumps")
    assert sys.modules["json"] is json
