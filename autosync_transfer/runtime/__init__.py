"""Runtime: plan strategies, execute them on torch.distributed, measure trials, emulate clusters.

:class:`DistributedModel` trains a ``torch.nn.Module`` with any strategy (``autotune``: an
:class:`AutotuneConfig` tries candidates in the job and locks in the fastest). Trials are
measured by a :class:`TrialPool` that a :class:`Launcher` opens (``local``, ``emulated``,
``torchrun``: :data:`LAUNCHERS`, :func:`get_launcher`, :func:`open_pool`). The step-time
simulator's physics are measured here too: :func:`profile_workload` (one worker, no cluster) and
:func:`calibrate_cluster` (a cluster's links and cores, through the launchers). The Lightning
strategy is :class:`autosync_transfer.search.lightning.AutoSyncStrategy` (a simulator may choose
its strategy); nothing in this package imports Lightning.

Names are imported lazily (torch is heavy): ``from autosync_transfer.runtime import WorkerPool``.
"""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

_EXPORTS = {
    "DistributedModel": "ddp",
    "AutotuneConfig": "autotune",
    "ConvergenceCheck": "accuracy",
    "ConvergenceTolerance": "accuracy",
    "ConvergenceConfig": "convergence",
    "check_convergence": "convergence",
    "Protocol": "trial",
    "TrialResult": "trial",
    "TrialPool": "trial",
    "WorkerPool": "trial",
    "Launcher": "launch",
    "LocalLauncher": "launch",
    "EmulatedLauncher": "launch",
    "TorchrunLauncher": "launch",
    "LAUNCHERS": "launch",
    "get_launcher": "launch",
    "open_pool": "launch",
    "spawn_local": "launch",
    "init_from_env": "launch",
    "EmulatedCluster": "emulation",
    "profile_workload": "profile",
    "calibrate_cluster": "calibrate",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
