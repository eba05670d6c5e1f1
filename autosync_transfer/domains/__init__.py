"""Domains: model graphs, clusters, and their named pairs (catalog), plus the model zoo."""

from __future__ import annotations

from autosync_transfer.domains.catalog import (
    CLUSTERS,
    cluster_names,
    domain_names,
    get_cluster,
    get_domain,
    get_model,
    model_names,
)
from autosync_transfer.domains.cluster import Cluster, Node, SSHConfig
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph, Variable

__all__ = [
    "CLUSTERS",
    "Cluster",
    "Domain",
    "ModelGraph",
    "Node",
    "SSHConfig",
    "Variable",
    "cluster_names",
    "domain_names",
    "get_cluster",
    "get_domain",
    "get_model",
    "model_names",
]
