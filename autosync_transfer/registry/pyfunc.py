"""The MLflow pyfunc face of a simulator: score strategies from
``models:/autosync-<domain>@champion``.

Input: a DataFrame with columns ``domain`` (the model's own domain, which travels with it as the
artifact ``domain``, e.g. a user's workload ``tiny_gpt-lab``, or a catalog domain name such as
``bert-B``) and ``strategy`` (the strategy as JSON text, ``Strategy.to_json()``; the model's
signature declares both as strings). Output: one score per row
(float64, **lower = predicted faster**), in input order. Scores are comparable only between rows
of the same domain.

The model is logged as "models from code" (:func:`write_model_code` writes the few lines MLflow
runs when loading), so loading never unpickles a Python object, and the weights artifact is read
with ``torch.load(weights_only=True)``.

This module subclasses ``mlflow.pyfunc.PythonModel``; it is imported only by registry code and by
MLflow when it loads a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd  # module globals: MLflow resolves predict's type hints here

__all__ = ["SimulatorPyfunc", "INPUT_COLUMNS", "write_model_code", "score_frame"]

#: columns of the input DataFrame
INPUT_COLUMNS: tuple[str, str] = ("domain", "strategy")

_MODEL_CODE = '''"""autosync-transfer simulator (MLflow model from code)."""
import mlflow.models

from autosync_transfer.registry.pyfunc import SimulatorPyfunc

mlflow.models.set_model(SimulatorPyfunc())
'''


def write_model_code(folder: str | Path) -> Path:
    """Write the model-from-code file MLflow stores with the model and runs to load it."""
    path = Path(folder) / "simulator_model.py"
    path.write_text(_MODEL_CODE)
    return path


def score_frame(sim: Any, model_input: pd.DataFrame | dict[str, Any],
                known: dict[str, Any] | None = None) -> np.ndarray:
    """Scores (numpy float64, input order) of the rows of ``model_input`` under ``sim``
    (``strategy`` as JSON text or, called directly, as its parsed object). ``known``: domains by
    name (the model's own); other names are looked up in the catalog."""
    import json

    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.errors import SpecError
    from autosync_transfer.strategies.types import Strategy

    if isinstance(model_input, dict):
        model_input = pd.DataFrame(model_input)
    if not isinstance(model_input, pd.DataFrame):
        raise SpecError(f"simulator input must be a DataFrame with columns {list(INPUT_COLUMNS)}, "
                        f"got {type(model_input).__name__}")
    missing = [c for c in INPUT_COLUMNS if c not in model_input.columns]
    if missing:
        raise SpecError(f"simulator input has no column {missing[0]!r} (needs "
                        f"{list(INPUT_COLUMNS)}, got {list(model_input.columns)})")
    scores = np.full(len(model_input), np.nan, dtype=np.float64)
    domains = model_input["domain"].astype(str).to_numpy()
    raw = model_input["strategy"].to_list()
    for name in dict.fromkeys(domains):  # first-appearance order
        domain = (known or {}).get(name) or get_domain(name)
        rows = np.flatnonzero(domains == name)
        strategies = [
            Strategy.from_dict(raw[i]) if isinstance(raw[i], dict) else Strategy.from_json(
                raw[i] if isinstance(raw[i], (str, bytes)) else json.dumps(raw[i]))
            for i in rows
        ]
        scores[rows] = np.asarray(sim.score(strategies, domain), dtype=np.float64).reshape(-1)
    return scores


class SimulatorPyfunc(mlflow.pyfunc.PythonModel):
    """Scores strategies with a registered simulator (artifacts ``config`` and ``weights``)."""

    def __init__(self) -> None:
        self._sim: Any = None
        self._domains: dict[str, Any] = {}

    def load_context(self, context: Any) -> None:
        from autosync_transfer.registry.flavor import read_domain_file, read_simulator_files

        self._sim = read_simulator_files(context.artifacts["config"], context.artifacts["weights"])
        domain_path = context.artifacts.get("domain")  # absent in versions logged before it
        if domain_path:
            dom = read_domain_file(domain_path)
            self._domains = {dom.name: dom}

    def predict(self, context: Any, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> np.ndarray:
        """Scores of ``model_input`` rows (see the module docstring)."""
        if self._sim is None:
            from autosync_transfer.errors import NotFittedError

            raise NotFittedError("SimulatorPyfunc.predict before load_context (load it with "
                                 "mlflow.pyfunc.load_model)")
        return score_frame(self._sim, model_input, self._domains)
