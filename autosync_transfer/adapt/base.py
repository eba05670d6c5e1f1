"""The adapter interface: how a simulator of a target domain is obtained from a source one.

An :class:`Adapter` is configured in its constructor (which only stores) and does its work in
:meth:`Adapter.fit`: given the source simulator and N target shots it returns an
:class:`Adapted` (the target simulator and how it was trained). Adapters are stateless between
calls (beyond memoizing work that depends only on their configuration, the target and the seed,
such as multi-source pretraining), so one instance serves every seed and N of a learning curve.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from autosync_transfer.errors import ConfigError
from autosync_transfer.rankers.features import FEATURE_SCHEMA_VERSION

if TYPE_CHECKING:
    from autosync_transfer.adapt.data import TargetData
    from autosync_transfer.rankers.simulator import Simulator

__all__ = ["Adapter", "Adapted", "check_source"]


@dataclass(frozen=True)
class Adapted:
    """What an adapter produced: ``simulator`` (None when there was nothing to train on, e.g.
    from scratch with fewer than 2 shots), the adapter's ``method`` name, the number of target
    strategies it trained on (``shots``) and ``details`` (how epochs were chosen, the epochs, the
    cross-validation score, ...; JSON-serializable). ``held_out``: where the adapter trained
    with held-out shots, ``{strategy id: (fold, score)}``, what ``simulator``'s training line
    scored the shots it was not trained on (``fit_on_shots(held_out=)``); not part of
    ``details``."""

    simulator: Simulator | None
    method: str
    shots: int
    details: dict[str, Any] = field(default_factory=dict)
    held_out: dict[str, tuple[int, float]] | None = field(default=None, repr=False,
                                                          compare=False)


def check_source(source: Simulator | None, method: str, *, learned: bool = False) -> Simulator:
    """``source`` if an adapter can start from it: present, of the current feature schema, and
    (``learned``) with weights; otherwise a :class:`ConfigError` saying why."""
    if source is None:
        raise ConfigError(f"{method} needs a source simulator")
    if source.schema_version != FEATURE_SCHEMA_VERSION:
        raise ConfigError(
            f"incompatible feature schema: the source simulator was trained on feature schema "
            f"version {source.schema_version}, the target is featurized with version "
            f"{FEATURE_SCHEMA_VERSION}; retrain the source on the current features")
    if learned and not source.learned:
        raise ConfigError(f"{method} needs a learned source simulator, but the source is the "
                          f"{source.kind} model (no weights); use zero-shot or multi-source")
    return source


class Adapter(abc.ABC):
    """One transfer routine. Subclasses set :attr:`name` and implement :meth:`fit`."""

    #: the method name (``--method``)
    name: ClassVar[str]
    #: whether the routine starts from the source simulator
    uses_source: ClassVar[bool] = True

    @abc.abstractmethod
    def fit(self, source: Simulator | None, shots: TargetData, *, seed: int = 0) -> Adapted:
        """A simulator of ``shots.domain`` from ``source`` and the target ``shots`` (which may be
        empty). Randomness comes from ``seed`` only."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"
