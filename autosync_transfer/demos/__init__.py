"""Demos: a small learnable training task and the helpers to run it on a cluster, shared by the
examples, the benchmarks that reproduce their figures and the tests that run them (in the spirit
of ``lightning.pytorch.demos``).

- :class:`TextClassifier` and :func:`classifier_batch`: an embedding (row-sparse gradients) and a
  two-layer MLP on synthetic, learnable token data (:mod:`.task`);
- :func:`run_emulated`: run a script once per worker of a cluster, each inside its node's network
  namespace with torchrun's environment (needs root; :mod:`.task`);
- :class:`LitClassifier`, :class:`StepTimer`, :func:`fit_classifier`, :func:`lightning_layout`,
  :func:`quiet_lightning`: the task as a LightningModule, trained and timed under any Lightning
  strategy (:mod:`.lightning`; imports Lightning when first used).

Names are imported lazily: ``from autosync_transfer.demos import TextClassifier``.
"""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

_EXPORTS = {
    "HIDDEN": "task",
    "TOKENS": "task",
    "TextClassifier": "task",
    "classifier_batch": "task",
    "run_emulated": "task",
    "LitClassifier": "lightning",
    "StepTimer": "lightning",
    "fit_classifier": "lightning",
    "lightning_layout": "lightning",
    "quiet_lightning": "lightning",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
