"""MLflow model URIs and names (``registry show NAME``, ``registry promote NAME VERSION``, and
the library's ``registry.models.resolve``) against a real sqlite registry holding one model."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_harness import NASTY_STRINGS, CASES, check, fuzz, run_cli

NAME = "autosync-bert-3l-A"
PARTS = st.one_of(st.sampled_from(NASTY_STRINGS), st.sampled_from(
    ["1", "0", "-1", "2", "01", "1.0", "1e3", "9" * 40, "9" * 5000, "champion", "@", "/", "%00",
     NAME, "bert-3l-A", "autosync-", "autosync-x"]), st.text(max_size=12))


@pytest.fixture(scope="module")
def registry(tmp_path_factory):  # noqa: ANN001, ANN201
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    d = tmp_path_factory.mktemp("fuzz-registry")
    uri = f"sqlite:///{d}/mlflow.db"
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "AUTOSYNC_REGISTRY_ARTIFACTS")}
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ["AUTOSYNC_REGISTRY_ARTIFACTS"] = str(d / "artifacts")
    c = MlflowClient(tracking_uri=uri, registry_uri=uri)
    c.create_registered_model(NAME)
    (d / "src").mkdir()
    mv = c.create_model_version(NAME, source=str(d / "src"))
    c.set_registered_model_alias(NAME, "champion", mv.version)
    yield d
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@fuzz(80)
@given(st.sampled_from(["models:/{}/{}", "models:/{}@{}", "{}", "models:{}/{}", "runs:/{}/{}",
                        "models:/{}", "models://{}/{}", "models:/{}/{}/{}"]), PARTS, PARTS)
def test_resolve(registry, form: str, a: str, b: str) -> None:  # noqa: ANN001
    from autosync_transfer.errors import AutosyncError
    from autosync_transfer.registry import models

    uri = form.format(a, b, b)
    CASES["MLflow model URIs"] += 1
    try:
        models.resolve(uri)
    except AutosyncError as e:
        assert "\n" not in str(e)


@fuzz(60)
@given(PARTS, PARTS, st.sampled_from(["champion", "x", "[/]", "", "a" * 300]))
def test_registry_cli(registry, name: str, version: str, alias: str) -> None:  # noqa: ANN001
    check(run_cli("registry", "show", name), "MLflow model URIs")
    check(run_cli("registry", "promote", name, version, "--alias", alias), "MLflow model URIs")
