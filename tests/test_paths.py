"""Where data, the registry and default stores resolve: in a checkout, installed, overridden."""

from __future__ import annotations

from pathlib import Path

import pytest

from autosync_transfer import paths
from autosync_transfer.dataset import loader
from autosync_transfer.registry import store
from autosync_transfer.search.config import default_store_path

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in (paths.DATASETS_ENV, paths.REGISTRY_DIR_ENV, "XDG_DATA_HOME",
                 "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The package as if imported from site-packages (no pyproject.toml beside it)."""
    package = tmp_path / "site-packages" / "autosync_transfer"
    package.mkdir(parents=True)
    monkeypatch.setattr(paths, "_PACKAGE", package)
    return package


def test_checkout_layout(clean_env: Path) -> None:
    assert paths.checkout_root() == ROOT
    assert paths.datasets_dir() == loader.default_datasets_dir() == ROOT / "datasets"
    assert paths.registry_dir() == store.registry_dir() == ROOT / "registry"
    assert paths.trials_dir() == ROOT / "datasets" / "trials"
    assert paths.parquet_dir() == ROOT / "datasets" / "parquet"
    assert paths.search_dir() == ROOT / "runs" / "search"
    assert default_store_path("bert-A", "r") == ROOT / "runs" / "search" / "bert-A" / "r.jsonl"


def test_installed_layout(clean_env: Path, installed: Path, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert paths.checkout_root() is None
    assert paths.datasets_dir() == loader.default_datasets_dir() == installed / "shipped"
    assert paths.registry_dir() == (tmp_path / "home" / ".local" / "share" / "autosync-transfer"
                                    / "registry")
    assert paths.trials_dir() == clean_env / "autosync-runs" / "trials"
    assert paths.parquet_dir() == clean_env / "autosync-runs" / "parquet"
    assert paths.search_dir() == clean_env / "autosync-runs" / "search"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert paths.registry_dir() == tmp_path / "xdg" / "autosync-transfer" / "registry"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the XDG spec: absolute only
    assert paths.user_data_dir() == tmp_path / "home" / ".local" / "share" / "autosync-transfer"


def test_a_foreign_pyproject_is_no_checkout(clean_env: Path, installed: Path) -> None:
    (installed.parent / "pyproject.toml").write_text('[project]\nname = "something-else"\n')
    assert paths.checkout_root() is None
    (installed.parent / "pyproject.toml").write_text("not toml [")
    assert paths.checkout_root() is None
    (installed.parent / "pyproject.toml").write_text('[project]\nname = "autosync-transfer"\n')
    assert paths.checkout_root() == installed.parent


@pytest.mark.parametrize("layout", ["checkout", "installed"])
def test_environment_overrides(layout: str, clean_env: Path, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    if layout == "installed":
        monkeypatch.setattr(paths, "_PACKAGE", tmp_path / "site-packages" / "autosync_transfer")
    monkeypatch.setenv(paths.DATASETS_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(paths.REGISTRY_DIR_ENV, str(tmp_path / "reg"))
    assert paths.datasets_dir() == tmp_path / "data"
    assert paths.trials_dir() == tmp_path / "data" / "trials"
    assert paths.parquet_dir() == tmp_path / "data" / "parquet"
    assert paths.registry_dir() == tmp_path / "reg"
    assert store.tracking_uri() == f"sqlite:///{tmp_path / 'reg' / 'mlflow.db'}"
