"""Test doubles shipped with the package (tiny graphs, clusters, domains, strategies)."""

from __future__ import annotations

from autosync_transfer.testing.tiny import tiny_cluster, tiny_domain, tiny_graph, tiny_strategies

__all__ = ["tiny_graph", "tiny_cluster", "tiny_domain", "tiny_strategies"]
