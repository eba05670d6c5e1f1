"""Tiny test doubles: a small model graph, small clusters, domains and sampled strategies.

Every object is built from its arguments alone (no catalog, no torch), so tests of any package can
use them without building a model.
"""

from __future__ import annotations

from collections.abc import Sequence

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph, Variable
from autosync_transfer.errors import ConfigError
from autosync_transfer.strategies.types import Strategy

__all__ = ["tiny_graph", "tiny_cluster", "tiny_domain", "tiny_strategies"]


def tiny_graph(
    name: str = "tiny",
    *,
    vocab: int = 97,
    hidden: int = 16,
    layers: int = 2,
    sparse_embedding: bool = True,
    batch_size: int = 4,
    seq_len: int = 8,
) -> ModelGraph:
    """An embedding (row-sparse gradient when ``sparse_embedding``) followed by ``layers`` dense
    layers (kernel ``hidden x 2*hidden``, bias, back-projection), a gate of shape ``(1, hidden)``
    (an axis of length 1) and a scalar temperature. The default vocabulary is prime (97) so that
    shard sizes are uneven."""
    if layers < 1 or hidden < 2 or vocab < 2:
        raise ConfigError(
            f"tiny_graph needs layers >= 1, hidden >= 2 and vocab >= 2, "
            f"got layers={layers}, hidden={hidden}, vocab={vocab}"
        )
    specs: list[tuple[str, tuple[int, ...], bool, str]] = [
        ("embedding/table", (vocab, hidden), sparse_embedding, "embedding"),
    ]
    for i in range(layers):
        m = f"layer{i}"
        specs += [
            (f"{m}/up/kernel", (hidden, 2 * hidden), False, m),
            (f"{m}/up/bias", (2 * hidden,), False, m),
            (f"{m}/down/kernel", (2 * hidden, hidden), False, m),
            (f"{m}/down/bias", (hidden,), False, m),
        ]
    specs += [
        ("head/gate", (1, hidden), False, "head"),
        ("head/temperature", (), False, "head"),
    ]
    variables = tuple(
        Variable(name=n, shape=shape, sparse=sparse, order=i, module=module)
        for i, (n, shape, sparse, module) in enumerate(specs)
    )
    edges = tuple((a.name, b.name) for a, b in zip(variables, variables[1:]))
    return ModelGraph(
        name=name,
        variables=variables,
        edges=edges,
        batch_size=batch_size,
        seq_len=seq_len,
        config={"vocab": vocab, "hidden": hidden, "layers": layers},
        description="tiny test model",
    )


def tiny_cluster(
    nodes: int = 2,
    workers: int | Sequence[int] = 1,
    bandwidths: Sequence[float] | None = None,
    name: str | None = None,
) -> Cluster:
    """``nodes`` CPU nodes ``n0..`` (``n0`` is chief) with ``workers`` each (one int, or one per
    node) and NICs of ``bandwidths`` Gbit/s (default 1 each)."""
    if nodes < 1:
        raise ConfigError(f"tiny_cluster needs nodes >= 1, got {nodes}")
    per_node = [workers] * nodes if isinstance(workers, int) else list(workers)
    bws = [1.0] * nodes if bandwidths is None else [float(b) for b in bandwidths]
    if len(per_node) != nodes or len(bws) != nodes:
        raise ConfigError(
            f"tiny_cluster needs one worker count and one bandwidth per node ({nodes}), "
            f"got workers={per_node}, bandwidths={bws}"
        )
    return Cluster(
        name=name or f"tiny{nodes}x{'_'.join(map(str, per_node))}",
        nodes=tuple(
            Node(
                name=f"n{i}",
                address=f"10.99.0.{i + 1}",
                workers=w,
                device="cpu",
                bandwidth_gbps=bw,
                chief=(i == 0),
            )
            for i, (w, bw) in enumerate(zip(per_node, bws))
        ),
        description="tiny test cluster",
    )


def tiny_domain(
    nodes: int = 2,
    workers: int | Sequence[int] = 1,
    bandwidths: Sequence[float] | None = None,
    *,
    name: str | None = None,
    **graph_options: object,
) -> Domain:
    """:func:`tiny_graph` (``graph_options``) on :func:`tiny_cluster` (``nodes``, ``workers``,
    ``bandwidths``)."""
    graph = tiny_graph(**graph_options)  # type: ignore[arg-type]
    cluster = tiny_cluster(nodes, workers, bandwidths)
    return Domain(name=name or f"{graph.name}-{cluster.name}", model=graph, cluster=cluster)


def tiny_strategies(domain: Domain, n: int = 8, seed: int = 0) -> list[Strategy]:
    """``n`` strategies sampled for ``domain`` with the default sampler configuration."""
    from autosync_transfer.strategies.sampler import StrategySampler

    return StrategySampler(domain, seed=seed).sample_n(n)
