"""Domains: model graphs, clusters, and their named pairs (catalog), plus the model zoo and
workloads (a runnable training step: a zoo model or the user's own)."""

from __future__ import annotations

from autosync_transfer.domains.catalog import (
    cluster_names,
    domain_names,
    get_cluster,
    get_domain,
    get_model,
    model_names,
    resolve_domain,
)
from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph, Variable
from autosync_transfer.domains.profile import ClusterCalibration, WorkloadProfile
from autosync_transfer.domains.workload import (Workload, load_workload, workload_domain,
                                                zoo_workload)

__all__ = [
    "ClusterCalibration",
    "WorkloadProfile",
    "Cluster",
    "Domain",
    "ModelGraph",
    "Node",
    "Variable",
    "Workload",
    "cluster_names",
    "domain_names",
    "get_cluster",
    "get_domain",
    "get_model",
    "load_workload",
    "model_names",
    "resolve_domain",
    "workload_domain",
    "zoo_workload",
]
