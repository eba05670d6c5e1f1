"""A domain: the pair (model graph, cluster) a simulator is trained and evaluated on."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict, Field

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.graph import ModelGraph

__all__ = ["Domain"]


class Domain(BaseModel):
    """A named (ModelGraph, Cluster) pair such as ``bert-A``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    model: ModelGraph
    cluster: Cluster

    @property
    def fingerprint(self) -> str:
        blob = f"{self.model.fingerprint}:{self.cluster.fingerprint}".encode()
        return hashlib.sha256(blob).hexdigest()[:16]
