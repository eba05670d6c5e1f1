"""Runtime: plan strategies, execute them on torch.distributed, measure trials, emulate clusters.

Trials are measured by a :class:`TrialPool` that a :class:`Launcher` opens (``local``,
``emulated``, ``torchrun``: :data:`LAUNCHERS`, :func:`get_launcher`, :func:`open_pool`).
Names are imported lazily (torch is heavy): ``from autosync_transfer.runtime import WorkerPool``;
``AutoSyncStrategy`` (a Lightning strategy) is the only name that imports Lightning.
The step-time simulator's physics are measured here too: :func:`profile_workload` (one worker,
no cluster) and :func:`calibrate_cluster` (a cluster's links and cores, through the launchers).
"""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

_EXPORTS = {
    "make_plan": "plan",
    "SyncPlan": "plan",
    "StrategyExecutor": "executor",
    "DistributedModel": "ddp",
    "AutotuneConfig": "autotune",
    "GradientFidelity": "accuracy",
    "ConvergenceCheck": "accuracy",
    "ConvergenceTolerance": "accuracy",
    "is_lossless": "accuracy",
    "probe_fidelity": "fidelity",
    "ConvergenceConfig": "convergence",
    "check_convergence": "convergence",
    "AutoSyncStrategy": "lightning",
    "CommGroups": "executor",
    "Protocol": "trial",
    "TrialResult": "trial",
    "TrialPool": "trial",
    "WorkerPool": "trial",
    "TorchrunPool": "torchrun",
    "Launcher": "launch",
    "LocalLauncher": "launch",
    "EmulatedLauncher": "launch",
    "TorchrunLauncher": "launch",
    "LAUNCHERS": "launch",
    "get_launcher": "launch",
    "open_pool": "launch",
    "TrialHarness": "worker",
    "EmulatedCluster": "emulation",
    "spawn_local": "launch",
    "init_from_env": "launch",
    "profile_workload": "profile",
    "get_profile": "profile",
    "worker_type": "profile",
    "calibrate_cluster": "calibrate",
    "get_calibration": "calibrate",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
