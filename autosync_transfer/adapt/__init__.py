"""Adaptation: transfer a simulator from a source domain to a target domain.

One interface (:class:`Adapter`) with four routines: :class:`ZeroShot`, :class:`FineTune`
(few-shot, ``mode="full"`` with an L2 penalty toward the source weights or ``mode="head"``),
:class:`MultiSource` and :class:`FromScratch` (the control). :func:`adapt` evaluates one
adaptation against zero-shot and from-scratch on held-out target strategies;
:func:`learning_curve` repeats it over N target trials and seeds; :func:`adapt_and_register`
is the ``autosync-transfer adapt`` workflow (registry, lineage, promotion), which the package's
top level names ``autosync_transfer.adapt``.

Names are imported lazily (torch and Lightning are heavy):
``from autosync_transfer.adapt import adapt``.
"""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

_EXPORTS = {
    "Adapter": "base",
    "Adapted": "base",
    "ZeroShot": "methods",
    "FineTune": "methods",
    "MultiSource": "methods",
    "FromScratch": "methods",
    "ShotTraining": "training",
    "TargetSplit": "data",
    "split_target": "data",
    "METHODS": "core",
    "AdaptResult": "core",
    "LearningCurve": "core",
    "adapt": "core",
    "learning_curve": "core",
    "AdaptReport": "workflow",
    "adapt_and_register": "workflow",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
