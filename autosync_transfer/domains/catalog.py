"""The catalog of named clusters, models and domains (``<model>-<cluster>``, e.g. ``bert-A``).

Cluster specs are data (no torch needed); model graphs are built from the zoo on the meta device
on first use and cached.
"""

from __future__ import annotations

from functools import lru_cache

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import UnknownNameError

__all__ = [
    "CLUSTERS",
    "cluster_names",
    "get_cluster",
    "model_names",
    "get_model",
    "get_domain",
    "domain_names",
    "split_domain_name",
    "resolve_domain",
]


def _nodes(bandwidths: list[float], workers: list[int]) -> tuple[Node, ...]:
    return tuple(
        Node(
            name=f"n{i}",
            address=f"10.88.0.{i + 1}",
            workers=w,
            device="cpu",
            bandwidth_gbps=bw,
            chief=(i == 0),
        )
        for i, (bw, w) in enumerate(zip(bandwidths, workers))
    )


#: named clusters; every one can be emulated on one machine (network namespaces + tc)
CLUSTERS: dict[str, Cluster] = {
    "A": Cluster(
        name="A",
        nodes=_nodes([1.0] * 4, [1] * 4),
        description="4 nodes x 1 worker, 1 Gbit/s NICs (the shape of AutoSync's cluster A: "
        "many nodes with one accelerator each)",
    ),
    "B": Cluster(
        name="B",
        nodes=_nodes([2.0] * 2, [2] * 2),
        description="2 nodes x 2 workers, 2 Gbit/s NICs (the shape of AutoSync's cluster B: "
        "few nodes with several accelerators each, faster links)",
    ),
    "C": Cluster(
        name="C",
        nodes=_nodes([1.0, 1.0, 0.25], [1, 1, 1]),
        description="3 nodes x 1 worker, heterogeneous NICs: 1, 1 and 0.25 Gbit/s "
        "(one slow node: placement matters)",
    ),
}


def cluster_names() -> list[str]:
    return list(CLUSTERS)


def get_cluster(name: str) -> Cluster:
    try:
        return CLUSTERS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown cluster {name!r} (known: {', '.join(CLUSTERS)})"
        ) from None


def model_names() -> list[str]:
    from autosync_transfer.domains.zoo import MODELS

    return list(MODELS)


@lru_cache(maxsize=None)
def get_model(name: str) -> ModelGraph:
    """The graph of catalog model ``name`` (built on the meta device, cached)."""
    from autosync_transfer.domains.zoo import MODELS, model_graph

    if name not in MODELS:
        raise UnknownNameError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    return model_graph(name)


def split_domain_name(name: str) -> tuple[str, str]:
    """``'bert-large-B'`` -> ``('bert-large', 'B')``; the cluster is the part after the last '-'."""
    model, sep, cluster = name.rpartition("-")
    if not sep or not model or not cluster:
        raise UnknownNameError(
            f"unknown domain {name!r}: a domain is named <model>-<cluster>, e.g. bert-A"
        )
    return model, cluster


def get_domain(name: str) -> Domain:
    model_name, cluster_name = split_domain_name(name)
    from autosync_transfer.domains.zoo import MODELS

    if cluster_name not in CLUSTERS:
        raise UnknownNameError(
            f"unknown domain {name!r}: no cluster {cluster_name!r} (clusters: {', '.join(CLUSTERS)})"
        )
    if model_name not in MODELS:
        raise UnknownNameError(
            f"unknown domain {name!r}: no model {model_name!r} (models: {', '.join(MODELS)})"
        )
    return Domain(name=name, model=get_model(model_name), cluster=CLUSTERS[cluster_name])


def domain_names() -> list[str]:
    return [f"{m}-{c}" for m in model_names() for c in CLUSTERS]


def resolve_domain(name: str, cluster_file: str | None = None) -> Domain:
    """A catalog domain, or a catalog model on a cluster read from a resource-spec YAML file.

    With ``cluster_file``, ``name`` may be a plain model name (``bert``) or a domain name whose
    cluster part is replaced; the cluster is named after the file (or its top-level ``name:``).
    """
    if cluster_file is None:
        return get_domain(name)
    from autosync_transfer.errors import ConfigError

    from autosync_transfer.domains.parsing import is_safe_name

    cluster = Cluster.from_file(cluster_file)
    if not is_safe_name(cluster.name) or cluster.name in CLUSTERS:
        raise ConfigError(
            f"cluster_file {cluster_file!r}: the cluster is named after the file ({cluster.name!r}), "
            f"which must not contain '-' nor be a catalog cluster ({', '.join(CLUSTERS)}), and "
            f"must be 1-64 letters, digits, '_' or '.'; rename the file or set a top-level "
            f"'name:'"
        )
    model_name = name
    if name not in model_names():
        model_name, cluster_name = split_domain_name(name)
        get_cluster(cluster_name)  # the replaced part must still name a cluster
    return Domain(name=f"{model_name}-{cluster.name}", model=get_model(model_name), cluster=cluster)
