"""autosync-transfer: learned, transferable simulators that choose how to synchronize gradients
in data-parallel training, and a runtime that executes the chosen strategies on torch.distributed.

The public API is the names below (``docs/api.md``); everything else is internal. They are
imported lazily: ``import autosync_transfer`` imports neither torch, Lightning nor MLflow.

- domain types: :class:`Cluster`, :class:`Workload`, :class:`Domain`; :class:`Strategy`;
- training: :class:`DistributedModel` (a plain PyTorch loop), :class:`AutoSyncStrategy`
  (Lightning), :class:`AutotuneConfig` (try candidates in the job, keep the fastest);
- choosing: :func:`recommend` (nothing run), :func:`run_search` (real trials),
  :func:`adapt_simulator` (transfer a simulator to another domain), :func:`load_simulator`
  (from the registry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autosync_transfer._lazy import combine_exports, lazy_exports

__version__ = "0.1.0"

__all__, __getattr__ = combine_exports(
    __name__,
    lazy_exports("autosync_transfer.domains",
                 {"Cluster": "cluster", "Domain": "domain", "Workload": "workload"}),
    lazy_exports("autosync_transfer.strategies", {"Strategy": "types"}),
    lazy_exports("autosync_transfer.runtime",
                 {"DistributedModel": "ddp", "AutotuneConfig": "autotune"}),
    lazy_exports("autosync_transfer.search",
                 {"AutoSyncStrategy": "lightning", "recommend": "recommendation",
                  "run_search": "loop:search"}),
    lazy_exports("autosync_transfer.adapt", {"adapt_simulator": "workflow:adapt_and_register"}),
    lazy_exports("autosync_transfer.registry", {"load_simulator": "flavor"}),
)
__all__ = ["__version__", *__all__]

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from autosync_transfer.adapt.workflow import adapt_and_register as adapt_simulator
    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.domains.workload import Workload
    from autosync_transfer.registry.flavor import load_simulator
    from autosync_transfer.runtime.autotune import AutotuneConfig
    from autosync_transfer.runtime.ddp import DistributedModel
    from autosync_transfer.search.lightning import AutoSyncStrategy
    from autosync_transfer.search.loop import search as run_search
    from autosync_transfer.search.recommendation import recommend
    from autosync_transfer.strategies.types import Strategy
