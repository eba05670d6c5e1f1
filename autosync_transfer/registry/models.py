"""Simulators in the MLflow model registry: log, register, load, promote.

One registered model per domain, ``autosync-<domain>`` (e.g. ``autosync-bert-B``). Each version
is one logged simulator:

run artifacts
    ``simulator/config.json`` (``Simulator.config()`` plus ``trained_on``, the domain),
    ``simulator/weights.pt`` (its ``state_dict``, a plain dict of tensors written with
    ``torch.save``; empty for the analytical simulator) and ``plots/*.png``.
model (pyfunc, "models from code")
    the same two files as pyfunc artifacts ``config`` and ``weights``, so that
    ``mlflow.pyfunc.load_model("models:/autosync-bert-B@champion").predict(df)`` scores
    strategies (see :mod:`autosync_transfer.registry.pyfunc`).
version tags
    provenance (:data:`STANDARD_TAGS`): domain, model/cluster fingerprints, feature schema, ranker
    kind, trial count, test split, test metrics as ``metric.<name>``, and for adapted simulators
    the source model and version, method, shots and dataset fingerprint.
alias ``champion``
    the best version on the domain's test split (:func:`promote_if_better`).

Weights are only ever read with ``torch.load(weights_only=True)``: nothing in the registry is
unpickled as code. mlflow is imported inside functions only.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.errors import ConfigError, SpecError, UnknownNameError

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.simulator import Simulator

__all__ = [
    "CHAMPION",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "LINEAGE_KEYS",
    "LOWER_IS_BETTER",
    "STANDARD_TAGS",
    "ModelVersionInfo",
    "registered_name",
    "compare_links",
    "log_chart_images",
    "log_simulator",
    "load_simulator",
    "read_simulator_files",
    "write_simulator_files",
    "resolve",
    "promote",
    "champion",
    "list_models",
    "describe_model",
    "promote_if_better",
    "flat_metrics",
    "TrainedVersion",
    "TrainReport",
    "train_and_register",
    "evaluate_registered",
]

CHAMPION = "champion"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "weights.pt"
_PREFIX = "autosync-"
_MODEL_NAME = "simulator"  # name of the logged pyfunc model inside a run
_METRIC_TAG = "metric."
#: tags every version carries (values are strings; "" where unknown)
STANDARD_TAGS: tuple[str, ...] = (
    "domain", "model", "cluster", "model_fingerprint", "cluster_fingerprint",
    "domain_fingerprint", "feature_schema_version", "ranker_kind", "trial_count", "test_split",
    "dataset_fingerprint", "run_id", "autosync_version",
)
#: lineage tags of adapted simulators (:func:`log_simulator` ``lineage=``)
LINEAGE_KEYS: tuple[str, ...] = ("source_model", "source_version", "method", "shots",
                                 "dataset_fingerprint")
#: metrics where a smaller value is better (all others: larger is better)
LOWER_IS_BETTER: frozenset[str] = frozenset({"regret"})
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class ModelVersionInfo:
    """One registered simulator version as the registry shows it."""

    name: str
    version: str
    run_id: str
    source: str
    tags: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    created_ms: int = 0
    description: str = ""

    @property
    def model_uri(self) -> str:
        return f"models:/{self.name}/{self.version}"

    @property
    def metrics(self) -> dict[str, float]:
        """Test metrics recorded in the ``metric.<name>`` tags."""
        out: dict[str, float] = {}
        for k, v in self.tags.items():
            if k.startswith(_METRIC_TAG):
                try:
                    out[k[len(_METRIC_TAG):]] = float(v)
                except ValueError:
                    continue
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "model_uri": self.model_uri,
                "run_id": self.run_id, "source": self.source, "aliases": list(self.aliases),
                "created_ms": self.created_ms, "description": self.description,
                "tags": dict(sorted(self.tags.items())), "metrics": self.metrics}


# -- names ----------------------------------------------------------------------------------------
def registered_name(domain_name: str) -> str:
    """``'bert-B'`` -> ``'autosync-bert-B'`` (the registered model of a domain)."""
    if not isinstance(domain_name, str) or not _NAME_RE.match(domain_name):
        raise ConfigError(f"a domain name is letters, digits, '-', '_' and '.', "
                          f"got {domain_name!r}")
    return domain_name if domain_name.startswith(_PREFIX) else f"{_PREFIX}{domain_name}"


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(f"a registered model name is letters, digits, '-', '_' and '.', "
                          f"got {name!r}")
    return name


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
    state = {} if sim.kind == "analytical" else sim.state_dict()
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
    if kind == "gat":
        reqs.append(pin("torch-geometric"))
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

    from autosync_transfer import __version__
    from autosync_transfer.registry import store
    from autosync_transfer.registry.pyfunc import write_model_code

    dom = _as_domain(domain)
    name = registered_name(dom.name)
    flat = flat_metrics(metrics)
    lineage = dict(lineage or {})
    unknown = sorted(set(lineage) - set(LINEAGE_KEYS))
    if unknown:
        raise ConfigError(f"unknown lineage key {unknown[0]!r} (known: {', '.join(LINEAGE_KEYS)})")
    schema = sim.config().get("schema_version", "")
    version_tags: dict[str, str] = {
        "domain": dom.name,
        "model": dom.model.name,
        "cluster": dom.cluster.name,
        "model_fingerprint": dom.model.fingerprint,
        "cluster_fingerprint": dom.cluster.fingerprint,
        "domain_fingerprint": dom.fingerprint,
        "feature_schema_version": str(schema),
        "ranker_kind": str(sim.kind),
        "trial_count": "",
        "test_split": "",
        "dataset_fingerprint": "",
        "autosync_version": __version__,
    }
    version_tags.update({str(k): _tag_value(v) for k, v in (tags or {}).items()})
    version_tags.update({k: _tag_value(v) for k, v in lineage.items()})
    version_tags.update({f"{_METRIC_TAG}{k}": _tag_value(v) for k, v in flat.items()})
    if isinstance(plots, Mapping):
        plot_files = [Path(p) for p in plots.values()]
    else:
        plot_files = [Path(p) for p in (plots or [])]
    for p in plot_files:
        if not p.is_file():
            raise ConfigError(f"plot {str(p)!r} does not exist")

    c = store.client()
    exp_id = store.experiment_id(c)
    with tempfile.TemporaryDirectory(prefix="autosync-sim-") as tmp:
        config_path, weights_path = write_simulator_files(sim, tmp, domain=dom.name)
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
            for p in plot_files:
                mlflow.log_artifact(str(p), artifact_path="plots")
            log_chart_images(plot_files)
            with warnings.catch_warnings():
                # no input example on purpose: it would make MLflow score it while logging
                warnings.filterwarnings("ignore", message=".*input example was not provided")
                info = mlflow.pyfunc.log_model(
                    name=_MODEL_NAME,
                    python_model=str(code_path),
                    artifacts={"config": str(config_path), "weights": str(weights_path)},
                    pip_requirements=_pip_requirements(str(sim.kind)),
                    signature=_signature(),
                )
        _ensure_registered_model(c, name, dom.name)
        mv = c.create_model_version(name=name, source=info.model_uri, run_id=run_id,
                                    tags=version_tags, model_id=info.model_id,
                                    description=f"{sim.kind} simulator of {dom.name}")
    return _info(mv)


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


def _info(mv: Any, aliases_by_version: Mapping[str, list[str]] | None = None) -> ModelVersionInfo:
    aliases = tuple(getattr(mv, "aliases", None)
                    or (aliases_by_version or {}).get(str(mv.version), ()))
    return ModelVersionInfo(
        name=mv.name, version=str(mv.version), run_id=mv.run_id or "", source=mv.source or "",
        tags=dict(mv.tags or {}), aliases=aliases, created_ms=int(mv.creation_timestamp or 0),
        description=mv.description or "",
    )


# -- resolving and loading ------------------------------------------------------------------------
def _registered(c: MlflowClient, name: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return c.get_registered_model(_check_name(name))
    except MlflowException as e:
        if e.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise ConfigError(f"registry error for {name!r}: {e.message}") from e
    known = sorted(m.name for m in _all_registered(c))
    shown = ", ".join(known[:20]) + (" ..." if len(known) > 20 else "") if known else "none"
    raise UnknownNameError(f"no registered model {name!r} (registered: {shown})")


def _all_registered(c: MlflowClient) -> list[Any]:
    out, token = [], None
    while True:
        page = c.search_registered_models(max_results=100, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def _version(c: MlflowClient, name: str, version: str | int) -> Any:
    from mlflow.exceptions import MlflowException

    _registered(c, name)
    try:
        return c.get_model_version(name, str(int(str(version))))
    except ValueError:
        raise UnknownNameError(f"a model version is a number, got {version!r}") from None
    except MlflowException as e:
        if e.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise ConfigError(f"registry error for {name!r}: {e.message}") from e
    versions = sorted((int(v.version) for v in _versions(c, name)))
    raise UnknownNameError(f"{name!r} has no version {version} (versions: "
                           f"{', '.join(map(str, versions)) or 'none'})")


def _by_alias(c: MlflowClient, name: str, alias: str) -> Any | None:
    from mlflow.exceptions import MlflowException

    _registered(c, name)
    try:
        return c.get_model_version_by_alias(name, alias)
    except MlflowException as e:
        if e.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise ConfigError(f"registry error for {name!r}: {e.message}") from e


def _versions(c: MlflowClient, name: str) -> list[Any]:
    out, token = [], None
    while True:
        page = c.search_model_versions(f"name='{_check_name(name)}'", page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def _parse_uri(uri_or_name: str) -> tuple[str, str | None, str | None]:
    """``models:/name/3`` -> (name, '3', None); ``models:/name@alias`` -> (name, None, alias);
    a plain name -> (name, None, None)."""
    if not uri_or_name.startswith("models:/"):
        return uri_or_name, None, None
    rest = uri_or_name.removeprefix("models:/").strip("/")
    if "@" in rest:
        name, alias = rest.split("@", 1)
        return name, None, alias
    name, sep, ver = rest.rpartition("/")
    if not sep:
        raise ConfigError(f"a model URI is models:/<name>/<version> or models:/<name>@<alias>, "
                          f"got {uri_or_name!r}")
    return name, ver, None


def resolve(uri_or_name: str, version: str | int | None = None, alias: str = CHAMPION
            ) -> ModelVersionInfo:
    """The version named by a ``models:/`` URI, or by a registered name (or a domain name) with
    ``version`` or else ``alias``. Unknown names, versions and aliases are
    :class:`~autosync_transfer.errors.UnknownNameError`."""
    from autosync_transfer.registry import store

    c = store.client()
    name, uri_version, uri_alias = _parse_uri(str(uri_or_name))
    if uri_version is None and uri_alias is None and not name.startswith(_PREFIX):
        name = registered_name(name)  # a domain name such as bert-B
    if uri_version is not None or uri_alias is not None:
        version, alias = uri_version, uri_alias or alias
    if version is not None:
        return _info(_version(c, name, version))
    mv = _by_alias(c, name, alias)
    if mv is None:
        raise UnknownNameError(f"{name!r} has no version with alias {alias!r} (promote one with "
                               f"`autosync-transfer registry promote {name} VERSION`)")
    return _info(mv)


def load_simulator(uri_or_name: str, version: str | int | None = None, alias: str = CHAMPION
                   ) -> Simulator:
    """The simulator of a registered version (see :func:`resolve` for the accepted names):
    ``config.json`` and ``weights.pt`` of the version's pyfunc model, weights read with
    ``torch.load(weights_only=True)``."""
    import mlflow.artifacts

    from autosync_transfer.registry import store

    mv = resolve(uri_or_name, version, alias)
    with tempfile.TemporaryDirectory(prefix="autosync-load-") as tmp:
        local = Path(mlflow.artifacts.download_artifacts(
            artifact_uri=f"models:/{mv.name}/{mv.version}", dst_path=tmp,
            tracking_uri=store.tracking_uri(), registry_uri=store.tracking_uri()))
        config_path = local / "artifacts" / CONFIG_FILE  # pyfunc artifacts live there
        weights_path = local / "artifacts" / WEIGHTS_FILE
        if not config_path.is_file():
            raise SpecError(f"{mv.model_uri} has no {CONFIG_FILE}: not a simulator")
        return read_simulator_files(config_path, weights_path)


# -- aliases --------------------------------------------------------------------------------------
def promote(name: str, version: str | int, alias: str = CHAMPION) -> ModelVersionInfo:
    """Point ``alias`` of registered model ``name`` at ``version``."""
    from autosync_transfer.registry import store

    from mlflow.exceptions import MlflowException

    c = store.client()
    mv = _version(c, name, version)
    try:
        c.set_registered_model_alias(name, alias, str(mv.version))
    except MlflowException as e:
        raise ConfigError(f"cannot set alias {alias!r} of {name!r}: {e.message}") from e
    return _info(c.get_model_version(name, str(mv.version)))


def champion(name: str, alias: str = CHAMPION) -> str | None:
    """The version ``alias`` points at, or None; an unknown model is an
    :class:`~autosync_transfer.errors.UnknownNameError`."""
    from autosync_transfer.registry import store

    mv = _by_alias(store.client(), name, alias)
    return None if mv is None else str(mv.version)


def _better(metric: str, candidate: float, incumbent: float) -> bool:
    if math.isnan(candidate):
        return False
    if math.isnan(incumbent):
        return True
    return candidate < incumbent if metric in LOWER_IS_BETTER else candidate > incumbent


def promote_if_better(
    name: str,
    version: str | int,
    metric: str = "pairwise_acc",
    *,
    alias: str = CHAMPION,
    rescore: Callable[[Simulator], float] | None = None,
) -> bool:
    """Make ``version`` the ``alias`` (champion) if it beats the current one on ``metric``
    (:data:`LOWER_IS_BETTER` metrics: smaller wins; ties keep the incumbent); returns whether it
    promoted. With no champion it promotes.

    Metrics are compared only on the same test split (tag ``test_split``). When the champion's
    split differs, ``rescore`` (a function giving a simulator's ``metric`` on the candidate's test
    split) re-scores the champion (a champion this code cannot load, e.g. of an older feature
    schema, loses); without it the versions are not comparable and nothing changes.
    """
    from autosync_transfer.registry import store

    c = store.client()
    cand = _info(_version(c, name, version))
    if metric not in cand.metrics:
        raise ConfigError(f"{name} version {cand.version} has no metric {metric!r} "
                          f"(metrics: {', '.join(sorted(cand.metrics)) or 'none'})")
    cur = _by_alias(c, name, alias)
    if cur is None:
        c.set_registered_model_alias(name, alias, cand.version)
        return True
    incumbent = _info(cur)
    if incumbent.version == cand.version:
        return False
    same_split = incumbent.tags.get("test_split", "") == cand.tags.get("test_split", "")
    if same_split and metric in incumbent.metrics:
        inc_value = incumbent.metrics[metric]
    elif rescore is not None:
        try:
            inc_sim = load_simulator(name, incumbent.version)
        except ConfigError:  # e.g. an older feature schema: this code cannot use it
            inc_value = math.nan
        else:
            inc_value = float(rescore(inc_sim))
    else:
        return False
    if _better(metric, cand.metrics[metric], inc_value):
        c.set_registered_model_alias(name, alias, cand.version)
        return True
    return False


# -- listing --------------------------------------------------------------------------------------
def _aliases(rm: Any) -> dict[str, str]:
    """alias -> version of a registered model (MLflow returns a mapping)."""
    return {str(k): str(v) for k, v in dict(rm.aliases or {}).items()}


def list_models() -> list[dict[str, Any]]:
    """One entry per registered model: name, domain, number of versions, latest version,
    aliases (alias -> version), champion's ranker kind and metrics, last update."""
    from autosync_transfer.registry import store

    c = store.client()
    rows = []
    for rm in sorted(_all_registered(c), key=lambda m: m.name):
        versions = _versions(c, rm.name)
        aliases = _aliases(rm)
        champ = next((v for v in versions if str(v.version) == aliases.get(CHAMPION)), None)
        champ_info = _info(champ) if champ is not None else None
        rows.append({
            "name": rm.name,
            "domain": (rm.tags or {}).get("domain", ""),
            "versions": len(versions),
            "latest": max((int(v.version) for v in versions), default=0),
            "aliases": aliases,
            "champion": aliases.get(CHAMPION),
            "champion_kind": champ_info.tags.get("ranker_kind", "") if champ_info else "",
            "champion_metrics": champ_info.metrics if champ_info else {},
            "updated_ms": int(rm.last_updated_timestamp or 0),
        })
    return rows


def describe_model(name: str) -> dict[str, Any]:
    """A registered model with every version (tags, metrics, aliases), newest first."""
    from autosync_transfer.registry import store

    c = store.client()
    rm = _registered(c, name)
    aliases = _aliases(rm)
    by_version: dict[str, list[str]] = {}
    for a, v in aliases.items():
        by_version.setdefault(v, []).append(a)
    versions = sorted((_info(mv, by_version) for mv in _versions(c, name)),
                      key=lambda i: -int(i.version))
    return {"name": rm.name, "description": rm.description or "", "tags": dict(rm.tags or {}),
            "aliases": aliases, "versions": [v.to_dict() for v in versions],
            "updated_ms": int(rm.last_updated_timestamp or 0)}


def compare_links(name: str, versions: Sequence[str | int] | None = None,
                  base_url: str = "http://127.0.0.1:5000") -> dict[str, str]:
    """Addresses in the MLflow UI that compare versions of registered model ``name`` side by side
    (default: its two newest versions):

    - ``versions``: the registry's version comparison (run, lineage, every metric in one table);
    - ``charts``: the experiment's chart view restricted to those versions' runs (one bar per
      version for every metric, and each logged plot as an image card per run).
    """
    import urllib.parse

    from autosync_transfer.registry import store

    described = describe_model(name)
    by_version = {v["version"]: v for v in described["versions"]}
    if versions is None:
        chosen = [v["version"] for v in described["versions"][:2]][::-1]
    else:
        chosen = list(dict.fromkeys(str(v) for v in versions))  # "2,2" is one version
        missing = [v for v in chosen if v not in by_version]
        if missing:
            raise UnknownNameError(f"{name} has no version {missing[0]!r} (versions: "
                                   f"{', '.join(sorted(by_version, key=int)) or 'none'})")
    if len(chosen) < 2:
        raise ConfigError(f"{name} has {len(chosen)} version(s); comparing needs two")
    runs = {v: by_version[v]["run_id"] for v in chosen}
    base = base_url.rstrip("/")
    q = urllib.parse.quote
    runs_json = json.dumps(runs, separators=(",", ":"))
    versions_url = (f"{base}/#/compare-model-versions?name={q(json.dumps(name))}"
                    f"&runs={q(runs_json)}")
    exp_id = store.experiment_id(store.client())
    run_filter = "attributes.run_id IN (" + ", ".join(f"'{r}'" for r in runs.values()) + ")"
    charts_url = (f"{base}/#/experiments/{exp_id}/runs?compareRunsMode=CHART"
                  f"&searchFilter={q(run_filter)}")
    return {"versions": versions_url, "charts": charts_url}


# -- train, log, register, promote ---------------------------------------------------------------
@dataclass(frozen=True)
class TrainedVersion:
    """One seed of :func:`train_and_register`: its registered version and training output
    (``train_simulator``'s metrics without the history)."""

    seed: int
    version: ModelVersionInfo
    metrics: dict[str, Any]


@dataclass(frozen=True)
class TrainReport:
    """What :func:`train_and_register` did."""

    domain: str
    kind: str
    name: str
    metric: str
    runs: tuple[TrainedVersion, ...]
    best: TrainedVersion
    promoted: bool
    champion: str | None
    test_split: str

    def summary(self) -> dict[str, dict[str, float]]:
        """Mean, standard deviation (sample; 0 for one seed) and count over seeds of each test
        metric (registry names)."""
        import statistics

        keys: list[str] = []
        for r in self.runs:
            keys += [k for k in r.version.metrics if "." not in k and k not in keys]
        out: dict[str, dict[str, float]] = {}
        for k in keys:
            vals = [r.version.metrics[k] for r in self.runs if k in r.version.metrics]
            vals = [v for v in vals if not math.isnan(v)]
            if vals:
                out[k] = {"mean": statistics.fmean(vals),
                          "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
                          "n": float(len(vals))}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"domain": self.domain, "ranker": self.kind, "registered_model": self.name,
                "metric": self.metric, "test_split": self.test_split,
                "versions": [{"seed": r.seed, "version": r.version.version,
                              "run_id": r.version.run_id, "metrics": r.version.metrics}
                             for r in self.runs],
                "best_version": self.best.version.version, "promoted": self.promoted,
                "champion": self.champion, "summary": self.summary()}


def _digest(obj: Any) -> str:
    import hashlib

    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


#: registry metric name -> key of ``evaluate_simulator``'s result
_EVAL_KEYS = {"pairwise_acc": "pairwise_accuracy"}


def _simulator_plots(sim: Simulator, dm: Any, out: Mapping[str, Any], folder: Path,
                     title: str) -> list[Path]:
    import numpy as np

    from autosync_transfer.registry import plots

    paths: list[Path] = []
    test = dm.split_items("test")
    if test:
        scores = sim.score_features([f for f, _, _ in test])
        runtimes = np.array([r for _, r, _ in test])
        paths.append(plots.rank_scatter(scores, runtimes, folder / "rank_scatter_test.png",
                                        title=f"{title}: test split"))
    every = [f for split in ("train", "val", "test") for f, _, _ in dm.split_items(split)]
    if every:
        paths.append(plots.score_histogram(sim.score_features(every), folder / "scores.png",
                                           title=f"{title}: scores of all strategies"))
    history = out.get("history") or {}
    if any(len(v) for v in history.values()):
        paths.append(plots.training_curves(history, folder / "training_curves.png", title=title))
    return paths


def train_and_register(
    kind: str,
    domain: Domain | str,
    trials: Any,
    *,
    seeds: Iterable[int] = (0, 1, 2),
    max_epochs: int | None = None,
    metric: str = "pairwise_acc",
    split_seed: int = 0,
    trials_source: str = "",
    on_seed: Callable[[int, ModelVersionInfo, Mapping[str, Any]], None] | None = None,
) -> TrainReport:
    """Train a ``kind`` simulator of ``domain`` once per seed on the domain's ok trials (a
    trials table as :func:`~autosync_transfer.dataset.loader.load_trials` returns), log each run
    with Lightning's ``MLFlowLogger`` in the store, register each as a version of
    ``autosync-<domain>`` (with plots), then :func:`promote_if_better` the best seed.

    Every seed uses the same 70/15/15 split (``split_seed``) so their test metrics compare; the
    version tag ``test_split`` identifies it. The data are checked before anything is logged: no
    trials of the domain is an :class:`~autosync_transfer.errors.UnknownNameError`.
    """
    from autosync_transfer.rankers.datamodule import TrialDataModule
    from autosync_transfer.rankers.modules import RANKERS
    from autosync_transfer.rankers.simulator import ANALYTICAL, evaluate_simulator, train_simulator
    from autosync_transfer.registry import store

    kinds = [ANALYTICAL, *RANKERS]
    if kind not in kinds:
        raise UnknownNameError(f"unknown ranker {kind!r} (known: {', '.join(kinds)})")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ConfigError("need at least one seed")
    dom = _as_domain(domain)
    df = trials[trials["domain"] == dom.name] if len(trials) else trials
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    if not len(df):
        raise UnknownNameError(f"no ok trials for domain {dom.name!r}")
    dm = TrialDataModule(df.reset_index(drop=True), split_seed=split_seed, seed=seeds[0],
                         domains={dom.name: dom})
    dm.setup()
    data = dm.domain_data[0]
    if dm.split_size("test") < 2:
        raise ConfigError(f"domain {dom.name!r} has {len(data.strategy_ids)} measured "
                          f"strategies; the test split needs at least 2 (about 14 strategies)")
    test_split = _digest({"split_seed": split_seed, "test": dm.splits()["test"]})
    common_tags = {
        "trial_count": len(df),
        "strategies": len(data.strategy_ids),
        "test_split": test_split,
        "split_seed": split_seed,
        "dataset_fingerprint": _digest([data.strategy_ids, [f"{r:.6g}" for r in data.runtimes]]),
        "trials_source": trials_source,
    }
    name = registered_name(dom.name)
    runs: list[TrainedVersion] = []
    for seed in seeds:
        dm.seed = seed  # the batch order of this seed (the split stays the same)
        run_name = f"{kind}-{dom.name}-seed{seed}"
        logger = store.lightning_logger(run_name=run_name)
        kwargs: dict[str, Any] = {} if max_epochs is None else {"max_epochs": max_epochs}
        sim, out = train_simulator(kind, dm, seed=seed, logger=logger, **kwargs)
        test_metrics = {k: v for k, v in out.items()
                        if k.startswith("test_") and k != "test_strategies"}  # a size: a tag
        tags = {**common_tags, "seed": seed,
                **{k: out[k] for k in ("train_strategies", "val_strategies", "test_strategies",
                                       "epochs", "best_epoch") if k in out}}
        with tempfile.TemporaryDirectory(prefix="autosync-plots-") as tmp:
            figs = _simulator_plots(sim, dm, out, Path(tmp), f"{kind} on {dom.name}, seed {seed}")
            info = log_simulator(sim, domain=dom, metrics=test_metrics, tags=tags, plots=figs,
                                 run_name=run_name, logger_run_id=logger.run_id)
        runs.append(TrainedVersion(seed, info, {k: v for k, v in out.items() if k != "history"}))
        if on_seed is not None:
            on_seed(seed, info, out)

    def key(r: TrainedVersion) -> float:
        v = r.version.metrics.get(metric, math.nan)
        return -math.inf if math.isnan(v) else (-v if metric in LOWER_IS_BETTER else v)

    best = max(runs, key=key)
    eval_key = _EVAL_KEYS.get(metric, metric)

    def rescore(champion_sim: Simulator) -> float:
        return float(evaluate_simulator(champion_sim, dm, "test")[eval_key])

    promoted = promote_if_better(name, best.version.version, metric, rescore=rescore)
    return TrainReport(domain=dom.name, kind=kind, name=name, metric=metric, runs=tuple(runs),
                       best=best, promoted=promoted, champion=champion(name),
                       test_split=test_split)


def evaluate_registered(uri_or_name: str, domain: Domain | str, trials: Any) -> dict[str, float]:
    """Test metrics (registry names, as :func:`flat_metrics` gives them: ``pairwise_acc``,
    ``kendall_tau``, ``top1``, ``regret``, ``strategies``, ``per_domain.<domain>.*``) of a
    registered simulator on every measured strategy of ``domain`` in ``trials`` (a trials table),
    computed like the test metrics of training (``evaluate_simulator``)."""
    from autosync_transfer.rankers.datamodule import TrialDataModule
    from autosync_transfer.rankers.simulator import evaluate_simulator

    dom = _as_domain(domain)
    df = trials[trials["domain"] == dom.name] if len(trials) else trials
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    if not len(df):
        raise UnknownNameError(f"no ok trials for domain {dom.name!r}")
    sim = load_simulator(uri_or_name)
    dm = TrialDataModule(df.reset_index(drop=True), fractions=(0.0, 0.0, 1.0),
                         domains={dom.name: dom})
    return flat_metrics(evaluate_simulator(sim, dm, "test"))
