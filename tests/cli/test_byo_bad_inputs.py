"""Bad workload specs, bad cluster files and bad combinations of DOMAIN, --model and
--cluster-file: every command says so in one line, exits 2 before any worker starts, and writes
nothing (no trial store, no log folder, no registry entry)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autosync_transfer.testing.cli import assert_one_line_error
from autosync_transfer.testing.workloads import resource_spec

GOOD = """
import torch
from torch import nn

BATCH_SIZE = 2

def build_model():
    return nn.Linear(3, 2)

def example_batch(batch_size, generator):
    return (torch.randn(batch_size, 3, generator=generator),
            torch.randint(2, (batch_size,), generator=generator))

def loss_fn(output, targets):
    return nn.functional.cross_entropy(output, targets)
"""

CLUSTER = resource_spec([(1, 1.0), (1, 1.0)])

#: (file name, file text or None for no file, spec suffix, what the error line names)
BAD_SPECS = {
    "missing file": ("absent.py", None, "", "no such file"),
    "syntax error": ("broken.py", "def build_model(:\n", "", "SyntaxError"),
    "import error": ("imports.py", "import no_such_package_here\n" + GOOD, "",
                     "No module named 'no_such_package_here'"),
    "no build_model": ("nobuild.py", GOOD.replace("def build_model", "def make_model"), "",
                       "has no build_model"),
    "no example_batch": ("nobatch.py", GOOD.replace("def example_batch", "def a_batch"), "",
                         "has no example_batch"),
    "no loss_fn": ("noloss.py", GOOD.replace("def loss_fn", "def the_loss"), "",
                   "has no loss_fn"),
    "step raises": ("raises.py", GOOD.replace("return nn.functional.cross_entropy(output, targets)",
                                             "raise RuntimeError('boom in the loss')"), "",
                    "loss_fn raised RuntimeError: boom in the loss"),
    "forward fails": ("shapes.py", GOOD.replace("torch.randn(batch_size, 3,",
                                                "torch.randn(batch_size, 5,"), "",
                      "the forward pass raised"),
    "non-scalar loss": ("vector.py", GOOD.replace(
        "return nn.functional.cross_entropy(output, targets)",
        "return nn.functional.cross_entropy(output, targets, reduction='none')"), "",
        "loss_fn must return a scalar tensor"),
    "non-finite loss": ("nanloss.py", GOOD.replace(
        "return nn.functional.cross_entropy(output, targets)",
        "return nn.functional.cross_entropy(output, targets) * float('nan')"), "",
        "the example step's loss is nan"),
    "non-finite gradient": ("infgrad.py", GOOD.replace(
        "return nn.functional.cross_entropy(output, targets)",
        "return nn.functional.cross_entropy(output, targets) + 0 * (output.abs().sum() * 0).sqrt()"),
        "", "gradient of 'weight' is not finite"),
    "NAME not found": ("named.py", GOOD, ":MISSING", "has no attribute 'MISSING'"),
    "NAME not a Workload": ("notwl.py", GOOD + "\nTHING = 3\n", ":THING",
                            "THING must be a Workload or a factory"),
}


def _spec(tmp_path: Path, case: str) -> str:
    name, text, suffix, _ = BAD_SPECS[case]
    path = tmp_path / "models" / name
    path.parent.mkdir(exist_ok=True)
    if text is not None:
        path.write_text(textwrap.dedent(text))
    return f"{path}{suffix}"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "models").mkdir()
    good = tmp_path / "models" / "good.py"
    good.write_text(GOOD)
    cluster = tmp_path / "duo.yml"
    cluster.write_text(CLUSTER)
    bad_yaml = tmp_path / "badyaml.yml"
    bad_yaml.write_text("nodes: [\n")
    invalid = tmp_path / "invalid.yml"
    invalid.write_text("nodes:\n  - address: 10.0.0.1\n    network_bandwidth: 1\n")
    catalog_named = tmp_path / "A.yml"
    catalog_named.write_text(CLUSTER)
    return {"good": str(good), "cluster": str(cluster), "bad_yaml": str(bad_yaml),
            "invalid": str(invalid), "catalog_named": str(catalog_named),
            "missing_cluster": str(tmp_path / "absent.yml")}


def _assert_nothing_written(tmp_path: Path) -> None:
    """No trial store, store metadata, log folder or registry artifacts under ``tmp_path``."""
    written = [p for p in tmp_path.rglob("*")
               if p.suffix in (".jsonl", ".json") or p.name in ("logs", "artifacts", "runs")]
    assert not written, written


def _no_registered_models() -> None:
    from autosync_transfer.registry import store
    from autosync_transfer.registry.versions import registered_models

    assert registered_models(store.client()) == []


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_bad_workload_spec_collect(cli, tmp_path: Path, files: dict[str, str], case: str) -> None:
    store = tmp_path / "out" / "trials.jsonl"
    res = cli("collect", "--model", _spec(tmp_path, case), "--cluster-file", files["cluster"],
              "--launcher", "local", "-n", "2", "--store", str(store))
    assert_one_line_error(res, BAD_SPECS[case][3])
    assert not (tmp_path / "out").exists()
    _assert_nothing_written(tmp_path)


@pytest.mark.parametrize("cluster, needle", [
    ("missing_cluster", "cannot read resource spec"),
    ("bad_yaml", "badyaml.yml"),
    ("invalid", "gpus' or 'cpus'"),
    ("catalog_named", "must not contain '-' nor be a catalog cluster"),
])
def test_bad_cluster_file_collect(cli, tmp_path: Path, files: dict[str, str], cluster: str,
                                  needle: str) -> None:
    res = cli("collect", "--model", files["good"], "--cluster-file", files[cluster],
              "--launcher", "local", "-n", "2", "--store", str(tmp_path / "out" / "t.jsonl"))
    assert_one_line_error(res, needle)
    assert not (tmp_path / "out").exists()
    _assert_nothing_written(tmp_path)


def test_bad_cluster_file_names_the_option(cli, tmp_path: Path, files: dict[str, str]) -> None:
    res = cli("domains", "show", "--model", files["good"], "--cluster-file",
              files["catalog_named"])
    assert_one_line_error(res, "--cluster-file")
    assert files["catalog_named"] in res.err


@pytest.mark.parametrize("argv, needle", [
    (("collect", "--model", "{good}", "-n", "2", "--launcher", "local"),
     "--model needs --cluster-file"),
    (("collect", "ncf-A", "--model", "{good}", "--cluster-file", "{cluster}", "-n", "2",
      "--launcher", "local"), "give DOMAIN or --model, not both"),
    (("collect", "-n", "2", "--launcher", "local"), "give DOMAIN (e.g. bert-A), or --model"),
    (("run", "--model", "{good}", "-s", "ddp", "--launcher", "local"),
     "--model needs --cluster-file"),
    (("run", "ncf-A", "--model", "{good}", "--cluster-file", "{cluster}", "-s", "ddp"),
     "give DOMAIN or --model, not both"),
    (("search", "--model", "{good}", "--budget", "2", "--launcher", "local"),
     "--model needs --cluster-file"),
    (("search", "--budget", "2", "--launcher", "local"), "give DOMAIN"),
    (("recommend", "--model", "{good}"), "--model needs --cluster-file"),
    (("recommend",), "give DOMAIN"),
    (("train", "--model", "{good}", "--data", "{tmp}"), "--model needs --cluster-file"),
    (("evaluate", "ncf-A", "--model", "{good}", "--cluster-file", "{cluster}", "--simulator",
      "ncf-A"), "give DOMAIN or --model, not both"),
    (("adapt", "--source", "ncf-A", "--model", "{good}"), "--model needs --cluster-file"),
    (("adapt", "--source", "ncf-A", "--target", "ncf-B", "--model", "{good}", "--cluster-file",
      "{cluster}"), "give --target or --model, not both"),
    (("adapt", "--source", "ncf-A"), "give --target (e.g. bert-A), or --model"),
    (("domains", "show", "--model", "{good}"), "--model needs --cluster-file"),
])
def test_bad_combinations(cli, registry, tmp_path: Path, files: dict[str, str],
                          argv: tuple[str, ...], needle: str) -> None:
    args = [a.format(**files, tmp=tmp_path) for a in argv]
    if args[0] in ("collect", "run", "search"):
        args += ["--store", str(tmp_path / "out" / "t.jsonl")]
    res = cli(*args)
    assert_one_line_error(res, needle)
    assert not (tmp_path / "out").exists()
    _no_registered_models()


@pytest.mark.parametrize("command", ["run", "search", "recommend", "train", "evaluate", "adapt",
                                     "domains"])
def test_every_command_refuses_a_failing_step(cli, registry, tmp_path: Path,
                                              files: dict[str, str], command: str) -> None:
    spec = _spec(tmp_path, "step raises")
    common = ["--model", spec, "--cluster-file", files["cluster"]]
    store = ["--store", str(tmp_path / "out" / "t.jsonl")]
    argv = {
        "run": ["run", *common, "-s", "ddp", "--launcher", "local", *store],
        "search": ["search", *common, "--budget", "2", "--launcher", "local", *store],
        "recommend": ["recommend", *common],
        "train": ["train", *common, "--data", str(tmp_path / "models")],
        "evaluate": ["evaluate", "--simulator", "models:/autosync-x@champion", *common],
        "adapt": ["adapt", "--source", "ncf-A", *common],
        "domains": ["domains", "show", *common],
    }[command]
    res = cli(*argv)
    assert_one_line_error(res, "boom in the loss")
    assert not (tmp_path / "out").exists()
    _no_registered_models()
