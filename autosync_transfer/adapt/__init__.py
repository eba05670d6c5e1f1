"""Adaptation: transfer a simulator from a source domain to a target domain.

One interface (:class:`Adapter`) with four routines: :class:`ZeroShot`, :class:`FineTune`
(few-shot, ``mode="full"`` with an L2 penalty toward the source weights or ``mode="head"``),
:class:`MultiSource` and :class:`FromScratch` (the control). :func:`adapt` evaluates one
adaptation against zero-shot and from-scratch on held-out target strategies;
:func:`learning_curve` repeats it over N target trials and seeds; :func:`adapt_and_register`
is the ``autosync-transfer adapt`` workflow (registry, lineage, promotion).

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
    "fit_on_shots": "training",
    "finetune_full": "training",
    "L2SPFineTuning": "training",
    "TargetData": "data",
    "TargetSplit": "data",
    "split_target": "data",
    "evaluate_on": "data",
    "METHODS": "core",
    "CURVE_SHOTS": "core",
    "AdaptResult": "core",
    "LearningCurve": "core",
    "adapt": "core",
    "learning_curve": "core",
    "make_adapter": "core",
    "learning_curve_plot": "plots",
    "AdaptReport": "workflow",
    "adapt_and_register": "workflow",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
