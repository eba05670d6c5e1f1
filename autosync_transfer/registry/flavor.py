"""The MLflow flavor of a simulator: save -> log -> load by URI.

Each version of a domain's registered model (``autosync-<domain>``, see
:mod:`autosync_transfer.registry.versions`) is one logged simulator:

run artifacts
    ``simulator/config.json`` (``Simulator.config()`` plus ``trained_on``, the domain),
    ``simulator/weights.pt`` (its ``state_dict``, a plain dict of tensors written with
    ``torch.save``; empty for the analytical simulator), ``simulator/domain.json`` (the domain it
    was trained for: model graph and cluster as JSON, and the workload spec, so that a domain
    outside the catalog, a user's workload on a cluster file, needs no catalog to be scored) and
    ``plots/*.png``.
model (pyfunc, "models from code")
    the same three files as pyfunc artifacts ``config``, ``weights`` and ``domain``, so that
    ``mlflow.pyfunc.load_model("models:/autosync-bert-B@champion").predict(df)`` scores
    strategies (see :mod:`autosync_transfer.registry.pyfunc`).
version tags
    provenance (:data:`STANDARD_TAGS`): domain, model/cluster fingerprints, the workload spec and
    fingerprint (workload domains), feature schema, ranker kind, trial count, test split, test
    metrics as ``metric.<name>``, and for adapted simulators the source model and version (and
    the URI it was named by), method, shots and dataset fingerprint (:data:`LINEAGE_KEYS`).

Weights are only ever read with ``torch.load(weights_only=True)``: nothing in the registry is
unpickled as code. mlflow is imported inside functions only.
"""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.errors import ConfigError, SpecError
from autosync_transfer.registry.versions import (
    CHAMPION,
    METRIC_TAG,
    ModelVersionInfo,
    registered_name,
    resolve,
    version_info,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.simulator import Simulator

__all__ = [
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "DOMAIN_FILE",
    "STANDARD_TAGS",
    "LINEAGE_KEYS",
    "write_simulator_files",
    "read_simulator_files",
    "flat_metrics",
    "log_simulator",
    "log_chart_images",
    "load_simulator",
    "load_domain",
    "load_version",
    "write_domain_file",
    "read_domain_file",
]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "weights.pt"
DOMAIN_FILE = "domain.json"
_MODEL_NAME = "simulator"  # name of the logged pyfunc model inside a run
#: tags every version carries (values are strings; "" where unknown)
STANDARD_TAGS: tuple[str, ...] = (
    "domain", "model", "cluster", "model_fingerprint", "cluster_fingerprint",
    "domain_fingerprint", "workload", "workload_fingerprint", "feature_schema_version",
    "ranker_kind", "trial_count", "test_split", "dataset_fingerprint", "run_id",
    "autosync_version",
)
#: lineage tags of adapted simulators (:func:`log_simulator` ``lineage=``); ``source_uri``: the
#: ``models:/`` URI (or domain) the source was named by
LINEAGE_KEYS: tuple[str, ...] = ("source_model", "source_version", "source_uri", "method",
                                 "shots", "dataset_fingerprint")


# -- files ----------------------------------------------------------------------------------------
def write_simulator_files(sim: Simulator, folder: str | Path, *, domain: str = ""
                          ) -> tuple[Path, Path]:
    """Write ``config.json`` and ``weights.pt`` (a plain ``state_dict``) of ``sim`` to
    ``folder``; returns their paths."""
    import torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        config_text = json.dumps({**sim.config(), "trained_on": domain}, indent=2,
                                 sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"simulator config is not plain JSON: {e}") from e
    state = sim.state_dict() if sim.learned else {}
    plain: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if not isinstance(v, torch.Tensor):
            raise ConfigError(f"state_dict entry {k!r} is a {type(v).__name__}, not a tensor")
        plain[str(k)] = v.detach().cpu().contiguous()
    config_path, weights_path = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    config_path.write_text(config_text + "\n")
    torch.save(plain, weights_path)
    return config_path, weights_path


def read_simulator_files(config_path: str | Path, weights_path: str | Path | None) -> Simulator:
    """The simulator of a ``config.json`` and its ``weights.pt``; the weights are read with
    ``torch.load(weights_only=True)`` (tensors only, never code)."""
    import torch

    from autosync_transfer.rankers.simulator import Simulator

    try:
        doc = json.loads(Path(config_path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SpecError(f"cannot read simulator config {str(config_path)!r}: {e}") from e
    if not isinstance(doc, dict) or "kind" not in doc:
        raise SpecError(f"{str(config_path)!r} is not a simulator config (a JSON object with "
                        f"'kind')")
    state: dict[str, Any] | None = None
    if weights_path is not None and Path(weights_path).exists():
        try:
            state = torch.load(weights_path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch raises several types for bad files
            raise SpecError(f"cannot read simulator weights {str(weights_path)!r} as a plain "
                            f"state_dict: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                            ) from e
        if not isinstance(state, dict) or not all(
                isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
            raise SpecError(f"{str(weights_path)!r} is not a state_dict (a dict of tensors)")
    doc.pop("trained_on", None)
    return Simulator.from_config(doc, state or None)


def write_domain_file(domain: Domain, folder: str | Path) -> Path:
    """Write ``domain.json`` (the domain: name, model graph, cluster; its fingerprint; the
    workload spec it was traced from, or null) to ``folder``; returns its path."""
    from autosync_transfer.domains.workload import workload_of

    spec, wl_fp = workload_of(domain)
    path = Path(folder) / DOMAIN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"domain": domain.model_dump(mode="json"),
                                "fingerprint": domain.fingerprint, "workload": spec,
                                "workload_fingerprint": wl_fp}, sort_keys=True) + "\n")
    return path


def read_domain_file(path: str | Path) -> Domain:
    """The domain of a ``domain.json`` (:func:`write_domain_file`), its fingerprint checked."""
    from pydantic import ValidationError

    from autosync_transfer.domains.domain import Domain

    try:
        doc = json.loads(Path(path).read_text())
        dom = Domain.model_validate(doc["domain"])
    except (OSError, ValueError, KeyError, TypeError, ValidationError) as e:
        raise SpecError(f"cannot read the domain of a simulator from {str(path)!r}: "
                        f"{' '.join(str(e).split())[:200]}") from e
    if doc.get("fingerprint", dom.fingerprint) != dom.fingerprint:
        raise SpecError(f"{str(path)!r}: the domain does not match its fingerprint")
    return dom



# -- logging --------------------------------------------------------------------------------------
def _canonical(key: str) -> str:
    """Test-metric names as the registry records them: ``test_pairwise_accuracy`` ->
    ``pairwise_acc``, ``test_top1`` -> ``top1`` (the tags are test metrics by definition)."""
    for pre in ("test_", "test/", "test."):
        if key.startswith(pre):
            key = key[len(pre):]
    return "pairwise_acc" if key == "pairwise_accuracy" else key


def _flatten(prefix: str, value: Any, out: dict[str, float]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            key = _canonical(str(k))
            _flatten(f"{prefix}.{key}" if prefix else key, v, out)
    elif isinstance(value, bool) or isinstance(value, (str, bytes)):
        return
    elif isinstance(value, (int, float)) or hasattr(value, "__float__"):
        try:
            out[prefix] = float(value)
        except (TypeError, ValueError, RuntimeError):  # e.g. a tensor of several values
            return


def flat_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Numeric entries of ``metrics`` under their registry names (:func:`_canonical`), nested
    mappings joined with '.': ``{'test_pairwise_accuracy': 0.8, 'test_per_domain': {'bert-A':
    {'top1': 0.9}}}`` -> ``{'pairwise_acc': 0.8, 'per_domain.bert-A.top1': 0.9}``. Lists (a
    training history) and strings are left out."""
    out: dict[str, float] = {}
    _flatten("", metrics, out)
    return out


def _tag_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else str(v)
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def _params(sim: Simulator) -> dict[str, str]:
    """Run params, prefixed ``simulator.`` (a Lightning logger may log the ranker's own
    hyper-parameters to the same run, and MLflow params cannot change value)."""
    config = sim.config()
    params: dict[str, str] = {"simulator.kind": str(sim.kind)}
    for k, v in sorted((config.get("hparams") or {}).items()):
        params[f"simulator.hparams.{k}"] = _tag_value(v)[:6000]
    params["simulator.feature_schema_version"] = str(config.get("schema_version", ""))
    return params


def _as_domain(domain: Domain | str) -> Domain:
    """``domain``, or the catalog domain it names (a domain outside the catalog is passed as a
    :class:`Domain`)."""
    if isinstance(domain, str):
        from autosync_transfer.domains.catalog import get_domain

        return get_domain(domain)
    return domain


def _pip_requirements(kind: str) -> list[str]:
    """Pinned requirements of the pyfunc model (explicit, so MLflow infers nothing)."""
    from importlib.metadata import PackageNotFoundError, version

    def pin(dist: str) -> str:
        try:
            return f"{dist}=={version(dist).split('+')[0]}"
        except PackageNotFoundError:
            return dist

    reqs = [pin("mlflow"), pin("torch"), pin("numpy"), pin("pandas"), pin("pydantic"),
            pin("lightning"), pin("autosync-transfer")]
    from autosync_transfer.rankers.kinds import kind_of

    reqs += [pin(dist) for dist in kind_of(kind).requirements()]
    return reqs


def _signature() -> Any:
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    return ModelSignature(
        inputs=Schema([ColSpec("string", "domain"), ColSpec("string", "strategy")]),
        outputs=Schema([ColSpec("double")]))


def log_simulator(
    sim: Simulator,
    *,
    domain: Domain | str,
    metrics: Mapping[str, Any],
    tags: Mapping[str, Any] | None = None,
    lineage: Mapping[str, Any] | None = None,
    plots: Iterable[str | Path] | Mapping[str, str | Path] | None = None,
    run_name: str | None = None,
    logger_run_id: str | None = None,
) -> ModelVersionInfo:
    """Log ``sim`` (config, weights, plots, params, metrics, a pyfunc model) to an MLflow run and
    register it as a new version of ``autosync-<domain>``.

    ``metrics``: test metrics (nested mappings are flattened with '.'); ``tags``: extra version
    tags, e.g. ``trial_count``, ``test_split`` (which test split the metrics are on), ``seed``;
    ``lineage``: for adapted simulators, :data:`LINEAGE_KEYS`; ``logger_run_id``: log into this
    existing run (a Lightning ``MLFlowLogger``'s) instead of a new one. Everything is validated
    before anything is written; a run that fails half-way is marked FAILED and not registered.
    """
    import mlflow

    from autosync_transfer.registry import store
    from autosync_transfer.registry.pyfunc import write_model_code

    dom = _as_domain(domain)
    name = registered_name(dom.name)
    flat = flat_metrics(metrics)
    version_tags = _version_tags(sim, dom, flat, tags, lineage)
    plot_files = _plot_files(plots)

    c = store.client()
    exp_id = store.experiment_id(c)
    with tempfile.TemporaryDirectory(prefix="autosync-sim-") as tmp:
        config_path, weights_path = write_simulator_files(sim, tmp, domain=dom.name)
        domain_path = write_domain_file(dom, tmp)
        code_path = write_model_code(tmp)
        run_ctx = (mlflow.start_run(run_id=logger_run_id) if logger_run_id
                   else mlflow.start_run(experiment_id=exp_id, run_name=run_name))
        with run_ctx as run:
            run_id = run.info.run_id
            version_tags["run_id"] = run_id
            mlflow.set_tags({k: v for k, v in version_tags.items() if k != "run_id"})
            mlflow.log_params(_params(sim))
            if flat:
                mlflow.log_metrics(flat)
            mlflow.log_artifact(str(config_path), artifact_path="simulator")
            mlflow.log_artifact(str(weights_path), artifact_path="simulator")
            mlflow.log_artifact(str(domain_path), artifact_path="simulator")
            for p in plot_files:
                mlflow.log_artifact(str(p), artifact_path="plots")
            log_chart_images(plot_files)
            with warnings.catch_warnings():
                # no input example on purpose: it would make MLflow score it while logging
                warnings.filterwarnings("ignore", message=".*input example was not provided")
                info = mlflow.pyfunc.log_model(
                    name=_MODEL_NAME,
                    python_model=str(code_path),
                    artifacts={"config": str(config_path), "weights": str(weights_path),
                               "domain": str(domain_path)},
                    pip_requirements=_pip_requirements(str(sim.kind)),
                    signature=_signature(),
                )
        _ensure_registered_model(c, name, dom.name)
        mv = c.create_model_version(name=name, source=info.model_uri, run_id=run_id,
                                    tags=version_tags, model_id=info.model_id,
                                    description=f"{sim.kind} simulator of {dom.name}")
    return version_info(mv)


def _version_tags(sim: Simulator, dom: Domain, flat: Mapping[str, float],
                  tags: Mapping[str, Any] | None, lineage: Mapping[str, Any] | None
                  ) -> dict[str, str]:
    """The version tags of ``sim`` (:data:`STANDARD_TAGS` but ``run_id``, then ``tags``,
    ``lineage`` and the metrics); an unknown lineage key is a ConfigError."""
    from autosync_transfer import __version__
    from autosync_transfer.domains.workload import workload_of

    lineage = dict(lineage or {})
    unknown = sorted(set(lineage) - set(LINEAGE_KEYS))
    if unknown:
        raise ConfigError(f"unknown lineage key {unknown[0]!r} (known: {', '.join(LINEAGE_KEYS)})")
    schema = sim.config().get("schema_version", "")
    spec, wl_fp = workload_of(dom)
    version_tags: dict[str, str] = {
        "domain": dom.name,
        "model": dom.model.name,
        "cluster": dom.cluster.name,
        "model_fingerprint": dom.model.fingerprint,
        "cluster_fingerprint": dom.cluster.fingerprint,
        "domain_fingerprint": dom.fingerprint,
        "workload": spec or "",
        "workload_fingerprint": wl_fp or "",
        "feature_schema_version": str(schema),
        "ranker_kind": str(sim.kind),
        "trial_count": "",
        "test_split": "",
        "dataset_fingerprint": "",
        "autosync_version": __version__,
    }
    version_tags.update({str(k): _tag_value(v) for k, v in (tags or {}).items()})
    version_tags.update({k: _tag_value(v) for k, v in lineage.items()})
    version_tags.update({f"{METRIC_TAG}{k}": _tag_value(v) for k, v in flat.items()})
    return version_tags


def _plot_files(plots: Iterable[str | Path] | Mapping[str, str | Path] | None) -> list[Path]:
    """The plot paths of :func:`log_simulator`'s ``plots``; a missing file is a ConfigError."""
    if isinstance(plots, Mapping):
        plot_files = [Path(p) for p in plots.values()]
    else:
        plot_files = [Path(p) for p in (plots or [])]
    for p in plot_files:
        if not p.is_file():
            raise ConfigError(f"plot {str(p)!r} does not exist")
    return plot_files


def log_chart_images(plot_files: Iterable[Path]) -> None:
    """Log PNG plots as keyed images too (key = file stem, step 0): the UI's chart view then shows
    each plot as an image card with one image per selected run, side by side."""
    import mlflow
    from PIL import Image

    for p in plot_files:
        if p.suffix.lower() == ".png":
            with Image.open(p) as im:
                mlflow.log_image(im.convert("RGB"), key=p.stem, step=0, synchronous=True)


def _ensure_registered_model(c: MlflowClient, name: str, domain: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        c.get_registered_model(name)
    except MlflowException as e:
        if e.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        try:
            c.create_registered_model(
                name, tags={"domain": domain},
                description=f"Learned simulators ranking synchronization strategies of domain "
                            f"{domain} (lower score = predicted faster); alias '{CHAMPION}' is "
                            f"the best on the domain's test split.")
        except MlflowException as e2:  # created concurrently
            if e2.error_code != "RESOURCE_ALREADY_EXISTS":
                raise



def _download(mv: ModelVersionInfo, tmp: str) -> Path:
    """The local folder of the pyfunc artifacts of version ``mv`` (downloaded into ``tmp``)."""
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    from autosync_transfer.registry import store

    try:
        local = Path(mlflow.artifacts.download_artifacts(
            artifact_uri=f"models:/{mv.name}/{mv.version}", dst_path=tmp,
            tracking_uri=store.tracking_uri(), registry_uri=store.tracking_uri()))
    except MlflowException as e:
        raise SpecError(f"the artifacts of {mv.model_uri} cannot be read (deleted or moved?): "
                        f"{' '.join(e.message.split())[:300]}") from e
    except OSError as e:
        raise SpecError(f"the artifacts of {mv.model_uri} cannot be read (deleted or moved?): "
                        f"{e}") from e
    folder = local / "artifacts"  # pyfunc artifacts live there
    if not folder.is_dir() or not any(folder.iterdir()):
        raise SpecError(f"the artifacts of {mv.model_uri} are missing (deleted or moved?)")
    return folder


def _simulator_in(folder: Path, mv: ModelVersionInfo) -> Simulator:
    config_path, weights_path = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    if not config_path.is_file():
        raise SpecError(f"{mv.model_uri} has no {CONFIG_FILE}: not a simulator")
    return read_simulator_files(config_path, weights_path)


def _domain_in(folder: Path, mv: ModelVersionInfo) -> Domain:
    """The domain of version ``mv``: its ``domain.json``, or (a version logged before domains
    travelled with simulators) the catalog domain its ``domain`` tag names."""
    path = folder / DOMAIN_FILE
    if path.is_file():
        return read_domain_file(path)
    name = mv.tags.get("domain", "")
    if not name:
        raise SpecError(f"{mv.model_uri} names no domain (no {DOMAIN_FILE}, no 'domain' tag)")
    return _as_domain(name)


def load_simulator(uri_or_name: str, version: str | int | None = None, alias: str = CHAMPION
                   ) -> Simulator:
    """The simulator of a registered version (see :func:`resolve` for the accepted names):
    ``config.json`` and ``weights.pt`` of the version's pyfunc model, weights read with
    ``torch.load(weights_only=True)``."""
    mv = resolve(uri_or_name, version, alias)
    with tempfile.TemporaryDirectory(prefix="autosync-load-") as tmp:
        return _simulator_in(_download(mv, tmp), mv)


def load_domain(uri_or_name: str, version: str | int | None = None, alias: str = CHAMPION
                ) -> Domain:
    """The domain a registered version was trained for (its ``domain.json``: no catalog needed;
    for older versions the catalog domain of its ``domain`` tag)."""
    mv = resolve(uri_or_name, version, alias)
    with tempfile.TemporaryDirectory(prefix="autosync-load-") as tmp:
        return _domain_in(_download(mv, tmp), mv)


def load_version(uri_or_name: str, version: str | int | None = None, alias: str = CHAMPION
                 ) -> tuple[Simulator, Domain, ModelVersionInfo]:
    """``(simulator, its domain, the version)`` of a registered version, read once."""
    mv = resolve(uri_or_name, version, alias)
    with tempfile.TemporaryDirectory(prefix="autosync-load-") as tmp:
        folder = _download(mv, tmp)
        return _simulator_in(folder, mv), _domain_in(folder, mv), mv
