"""Strategies: typed per-variable synchronization, validation, the sampler, the builders and
AutoDist strategy files. ``TORCH_DDP`` is the strategy id trial records give torch's own DDP."""

from __future__ import annotations

from autosync_transfer.strategies.autodist import read_autodist_file, write_autodist_file
from autosync_transfer.strategies.builders import BUILDERS, build
from autosync_transfer.strategies.sampler import (SamplerConfig, StrategyBatch, StrategySampler,
                                                  preset)
from autosync_transfer.strategies.types import (PS, TORCH_DDP, AllReduce, Partition, Strategy,
                                                VarConfig)
from autosync_transfer.strategies.validate import validate, violations

__all__ = [
    "BUILDERS",
    "PS",
    "AllReduce",
    "Partition",
    "SamplerConfig",
    "Strategy",
    "StrategyBatch",
    "StrategySampler",
    "TORCH_DDP",
    "VarConfig",
    "build",
    "preset",
    "read_autodist_file",
    "validate",
    "violations",
    "write_autodist_file",
]
