"""Model graphs: the trainable variables of a model, in forward order, and their dataflow."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["DTYPE_BYTES", "Variable", "ModelGraph"]

#: bytes per element of the dtypes a variable may have
DTYPE_BYTES: dict[str, int] = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
}


class Variable(BaseModel):
    """One trainable variable (a parameter tensor).

    ``sparse`` means its gradient is row-sparse (an embedding lookup): only the rows touched by a
    batch carry a gradient, and only parameter servers can synchronize it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    shape: tuple[int, ...]
    dtype: str = "float32"
    sparse: bool = False
    order: int = Field(ge=0, description="position in forward order")
    module: str = ""

    @field_validator("shape")
    @classmethod
    def _positive_dims(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for d in v:
            if d < 1:
                raise ValueError(f"every dimension must be >= 1, got shape {list(v)}")
        return v

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        if v not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {v!r}")
        return v

    @model_validator(mode="after")
    def _sparse_needs_rows(self) -> Variable:
        if self.sparse and len(self.shape) < 2:
            raise ValueError(
                f"a sparse variable needs a row axis and a row width (rank >= 2), "
                f"got shape {list(self.shape)} for {self.name!r}"
            )
        return self

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.num_elements * self.itemsize

    @property
    def row_elements(self) -> int:
        """Elements per row along axis 0 (the width of an embedding row)."""
        return math.prod(self.shape[1:]) if len(self.shape) > 1 else 1

    def partitionable_axes(self) -> list[int]:
        """Axes a partition may split: axis 0 for sparse variables, else every axis longer than 1."""
        if self.sparse:
            return [0] if self.shape[0] > 1 else []
        return [i for i, d in enumerate(self.shape) if d > 1]


class ModelGraph(BaseModel):
    """A model as synchronization sees it: its variables, their dataflow, and the per-worker batch.

    ``batch_size`` and ``seq_len`` are per worker; sparse traffic (rows touched per step) depends on
    them. ``config`` records how the model was built (layers, hidden size, ...) for display.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    variables: tuple[Variable, ...]
    edges: tuple[tuple[str, str], ...] = ()
    batch_size: int = Field(default=1, ge=1)
    seq_len: int = Field(default=1, ge=1)
    config: dict[str, Any] = Field(default_factory=dict)
    description: str = ""

    @model_validator(mode="after")
    def _check(self) -> ModelGraph:
        if not self.variables:
            raise ValueError(f"model {self.name!r} has no trainable variables")
        names: set[str] = set()
        for i, v in enumerate(self.variables):
            if v.name in names:
                raise ValueError(f"variable names must be unique, {v.name!r} appears twice")
            names.add(v.name)
            if v.order != i:
                raise ValueError(
                    f"variables must be listed in forward order with order == position, "
                    f"{v.name!r} has order {v.order} at position {i}"
                )
        for a, b in self.edges:
            for end in (a, b):
                if end not in names:
                    raise ValueError(f"edge ({a!r}, {b!r}) names unknown variable {end!r}")
        return self

    # -- derived ------------------------------------------------------------------------------
    @property
    def num_parameters(self) -> int:
        return sum(v.num_elements for v in self.variables)

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.variables)

    @property
    def sparse_variables(self) -> list[Variable]:
        return [v for v in self.variables if v.sparse]

    def variable(self, name: str) -> Variable:
        for v in self.variables:
            if v.name == name:
                return v
        from autosync_transfer.errors import UnknownNameError

        raise UnknownNameError(f"model {self.name!r} has no variable {name!r}")

    def by_name(self) -> dict[str, Variable]:
        return {v.name: v for v in self.variables}

    @property
    def fingerprint(self) -> str:
        """Content hash of what synchronization depends on (variables, edges, batch, seq)."""
        payload = {
            "variables": [
                [v.name, list(v.shape), v.dtype, v.sparse, v.order] for v in self.variables
            ],
            "edges": [list(e) for e in self.edges],
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
        }
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    # -- importers (heavy imports stay inside) -----------------------------------------------
    @classmethod
    def from_torch(cls, module: Any, name: str, **kwargs: Any) -> ModelGraph:
        """Build a graph from a ``torch.nn.Module`` (see :func:`.importers.graph_from_torch`)."""
        from autosync_transfer.domains.importers import graph_from_torch

        return graph_from_torch(module, name=name, **kwargs)

    @classmethod
    def from_keras(cls, model: Any, name: str | None = None, **kwargs: Any) -> ModelGraph:
        """Build a graph from a Keras model (see :func:`.importers.graph_from_keras`)."""
        from autosync_transfer.domains.importers import graph_from_keras

        return graph_from_keras(model, name=name, **kwargs)
