"""autosync-transfer: learned, transferable simulators that choose how to synchronize gradients
in data-parallel training, and a runtime that executes the chosen strategies on torch.distributed.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
