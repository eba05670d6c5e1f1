"""The registry's records of simulators: names, versions, aliases, lookups and listings.

One registered model per domain, ``autosync-<domain>`` (e.g. ``autosync-bert-B``); each version
is one logged simulator (see :mod:`autosync_transfer.registry.flavor`), described by a
:class:`ModelVersionInfo`. The alias ``champion`` points at the version that ranks the domain's
held-out strategies best as far as a paired comparison can tell
(:func:`~autosync_transfer.registry.workflows.promote_if_better` moves it only on a confident
gain).

The functions taking an ``MlflowClient`` are the lookups the other registry modules build on;
unknown names, versions and aliases are :class:`~autosync_transfer.errors.UnknownNameError`.
mlflow is imported inside functions only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autosync_transfer.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = [
    "CHAMPION",
    "REGISTERED_PREFIX",
    "METRIC_TAG",
    "ModelVersionInfo",
    "registered_name",
    "check_name",
    "parse_uri",
    "registered_model",
    "registered_models",
    "model_version",
    "model_versions",
    "version_by_alias",
    "version_info",
    "resolve",
    "promote",
    "champion",
    "list_models",
    "describe_model",
    "compare_links",
]

#: the alias of the best version of a domain's model
CHAMPION = "champion"
#: prefix of every registered model name: ``autosync-<domain>``
REGISTERED_PREFIX = "autosync-"
#: prefix of the version tags that hold test metrics (``metric.<name>``)
METRIC_TAG = "metric."
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
            if k.startswith(METRIC_TAG):
                try:
                    out[k[len(METRIC_TAG):]] = float(v)
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
    if domain_name.startswith(REGISTERED_PREFIX):
        return domain_name
    return f"{REGISTERED_PREFIX}{domain_name}"


def check_name(name: str) -> str:
    """``name`` if it is a valid registered model name, else a :class:`ConfigError`."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(f"a registered model name is letters, digits, '-', '_' and '.', "
                          f"got {name!r}")
    return name


def version_info(mv: Any, aliases_by_version: Mapping[str, list[str]] | None = None
                 ) -> ModelVersionInfo:
    """The :class:`ModelVersionInfo` of an MLflow ``ModelVersion`` (``aliases_by_version``:
    version -> aliases, for versions returned by a search, which carry none)."""
    aliases = tuple(getattr(mv, "aliases", None)
                    or (aliases_by_version or {}).get(str(mv.version), ()))
    return ModelVersionInfo(
        name=mv.name, version=str(mv.version), run_id=mv.run_id or "", source=mv.source or "",
        tags=dict(mv.tags or {}), aliases=aliases, created_ms=int(mv.creation_timestamp or 0),
        description=mv.description or "",
    )


# -- resolving and loading ------------------------------------------------------------------------
def registered_model(c: MlflowClient, name: str) -> Any:
    """The MLflow ``RegisteredModel`` ``name``."""
    from mlflow.exceptions import MlflowException

    try:
        return c.get_registered_model(check_name(name))
    except MlflowException as e:
        if e.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise ConfigError(f"registry error for {name!r}: {e.message}") from e
    known = sorted(m.name for m in registered_models(c))
    shown = ", ".join(known[:20]) + (" ..." if len(known) > 20 else "") if known else "none"
    raise UnknownNameError(f"no registered model {name!r} (registered: {shown})")


def registered_models(c: MlflowClient) -> list[Any]:
    """Every MLflow ``RegisteredModel`` of the store."""
    out, token = [], None
    while True:
        page = c.search_registered_models(max_results=100, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def model_version(c: MlflowClient, name: str, version: str | int) -> Any:
    """The MLflow ``ModelVersion`` ``version`` of registered model ``name``."""
    from mlflow.exceptions import MlflowException

    registered_model(c, name)
    try:
        return c.get_model_version(name, str(int(str(version))))
    except ValueError:
        raise UnknownNameError(f"a model version is a number, got {version!r}") from None
    except MlflowException as e:
        if e.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise ConfigError(f"registry error for {name!r}: {e.message}") from e
    versions = sorted((int(v.version) for v in model_versions(c, name)))
    raise UnknownNameError(f"{name!r} has no version {version} (versions: "
                           f"{', '.join(map(str, versions)) or 'none'})")


def version_by_alias(c: MlflowClient, name: str, alias: str) -> Any | None:
    """The MLflow ``ModelVersion`` ``alias`` points at, or None when the alias is unset."""
    from mlflow.exceptions import MlflowException

    registered_model(c, name)
    try:
        return c.get_model_version_by_alias(name, alias)
    except MlflowException as e:
        if e.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise ConfigError(f"registry error for {name!r}: {e.message}") from e


def model_versions(c: MlflowClient, name: str) -> list[Any]:
    """Every MLflow ``ModelVersion`` of registered model ``name``."""
    out, token = [], None
    while True:
        page = c.search_model_versions(f"name='{check_name(name)}'", page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def parse_uri(uri_or_name: str) -> tuple[str, str | None, str | None]:
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
    name, uri_version, uri_alias = parse_uri(str(uri_or_name))
    if uri_version is None and uri_alias is None and not name.startswith(REGISTERED_PREFIX):
        name = registered_name(name)  # a domain name such as bert-B
    if uri_version is not None or uri_alias is not None:
        version, alias = uri_version, uri_alias or alias
    if version is not None:
        return version_info(model_version(c, name, version))
    mv = version_by_alias(c, name, alias)
    if mv is None:
        raise UnknownNameError(f"{name!r} has no version with alias {alias!r} (promote one with "
                               f"`autosync-transfer registry promote {name} VERSION`)")
    return version_info(mv)


# -- aliases --------------------------------------------------------------------------------------
def promote(name: str, version: str | int, alias: str = CHAMPION) -> ModelVersionInfo:
    """Point ``alias`` of registered model ``name`` at ``version``; a version whose simulator
    and domain do not load (artifacts deleted or unreadable) is refused
    (:class:`ConfigError`), and the alias is left as it was."""
    from mlflow.exceptions import MlflowException

    from autosync_transfer.errors import AutosyncError
    from autosync_transfer.registry import store
    from autosync_transfer.registry.flavor import load_version

    c = store.client()
    mv = model_version(c, name, version)
    try:
        load_version(name, str(mv.version))
    except AutosyncError as e:
        raise ConfigError(f"version {mv.version} of {name!r} does not load, not promoted: "
                          f"{e}") from e
    try:
        c.set_registered_model_alias(name, alias, str(mv.version))
    except MlflowException as e:
        raise ConfigError(f"cannot set alias {alias!r} of {name!r}: {e.message}") from e
    return version_info(c.get_model_version(name, str(mv.version)))


def champion(name: str, alias: str = CHAMPION) -> str | None:
    """The version ``alias`` points at, or None; an unknown model is an
    :class:`~autosync_transfer.errors.UnknownNameError`."""
    from autosync_transfer.registry import store

    mv = version_by_alias(store.client(), name, alias)
    return None if mv is None else str(mv.version)


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
    for rm in sorted(registered_models(c), key=lambda m: m.name):
        versions = model_versions(c, rm.name)
        aliases = _aliases(rm)
        champ = next((v for v in versions if str(v.version) == aliases.get(CHAMPION)), None)
        champ_info = version_info(champ) if champ is not None else None
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
    rm = registered_model(c, name)
    aliases = _aliases(rm)
    by_version: dict[str, list[str]] = {}
    for a, v in aliases.items():
        by_version.setdefault(v, []).append(a)
    versions = sorted((version_info(mv, by_version) for mv in model_versions(c, name)),
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

