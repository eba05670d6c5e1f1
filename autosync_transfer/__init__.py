"""autosync-transfer: learned, transferable simulators that choose how to synchronize gradients
in data-parallel training, and a runtime that executes the chosen strategies on torch.distributed.
"""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

__version__ = "0.1.0"

#: ``autosync_transfer.recommend(model, cluster, simulator)``: the best strategy, nothing run
__all__, __getattr__ = lazy_exports("autosync_transfer.search", {"recommend": "recommend"})
__all__ = ["__version__", *__all__]
