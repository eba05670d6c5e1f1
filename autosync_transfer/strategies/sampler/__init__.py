"""Random strategies from AutoSync's strategy space, under its knowledge constraints.

The space and the heuristics follow AutoSync's ``RandomStrategySampler`` (per variable: partition or
not, then a synchronizer per piece; then a global pass that places parameter-server pieces and fuses
all-reduce pieces into groups), with these differences:

* a single fixed ``maybe_partition`` choice is honoured (``(False,)`` never partitions, ``(True,)``
  always partitions a partitionable variable);
* ``"num_nodes"`` works as either bound of ``num_group_bounds`` / ``num_partition_bounds``;
* a variable whose shard range ``[max(2, lb), min(dim, ub)]`` is empty on every allowed axis is not
  partitioned (instead of sampling from an empty range);
* the randomized balancers divide their logits by ``balance_temperature x total load``, so that they
  really sample (AutoSync's raw byte differences made them an argmax after the first item);
* all-reduce groups are 0-based and numbered by first appearance in forward order; the
  ``ordered_balanced`` fill never runs past the last group.

Knowledge constraints every sample satisfies: a sparse variable is synchronized by parameter servers
only (whatever ``synchronizer_types`` says) and partitioned only along axis 0; scalars and axes of
length 1 are never partitioned; PS synchronizers are synchronous with staleness 0; local replication
is only sampled when some node of the cluster has more than one worker (it aggregates the workers of
each node before the push; with one worker per node it does nothing, so it is always off there).

Performance: every random decision of a strategy is drawn in a few vectorized numpy calls; the
sequential load-balancing and group-filling passes run batched across the strategies of a
:meth:`StrategySampler.sample_n` call; synchronizer objects and whole-variable configs are shared
between strategies (they are frozen), and the objects the sampler builds itself skip re-validation
(as ``model_construct`` does: they are valid by construction). Sampling 2,000 strategies for
``bert-large-B`` (about 4,400 synchronized pieces each) takes about 4 s on a 2-core machine.

Modules, by role: :mod:`.config` (the space and its presets), :mod:`.space` (the space on one
domain, knowledge constraints applied), :mod:`.sampling` (:class:`StrategySampler`: the
decisions), :mod:`.kernels` (the batched sequential passes), :mod:`.codes` (one integer per
synchronizer), :mod:`.batch` (:class:`StrategyBatch`, the typed arrays, and
:class:`SampledBatch`), :mod:`.objects` (strategy objects built from the arrays).
"""

from __future__ import annotations

from autosync_transfer.strategies.sampler.batch import SampledBatch, StrategyBatch
from autosync_transfer.strategies.sampler.codes import SynchronizerTable
from autosync_transfer.strategies.sampler.config import (
    MAX_INT32,
    PRESETS,
    SamplerConfig,
    preset,
    preset_names,
)
from autosync_transfer.strategies.sampler.sampling import StrategySampler

__all__ = [
    "MAX_INT32",
    "PRESETS",
    "SampledBatch",
    "SamplerConfig",
    "StrategyBatch",
    "StrategySampler",
    "SynchronizerTable",
    "preset",
    "preset_names",
]
