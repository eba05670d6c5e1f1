"""Target data for adaptation: the target's measured strategies, a fixed held-out split, shots.

:func:`split_target` turns the target's trials into a :class:`TargetSplit`: the measured
strategies (sorted by id, runtime = median over trials), a **held-out** set that adaptation never
sees, and the **pool** the shots are drawn from. The held-out set is the test split of
:class:`~autosync_transfer.rankers.datamodule.TrialDataModule` for the same ``split_seed`` and
``holdout_fraction`` (by default the 15 % that ``train_and_register`` tests on), so a target
champion trained by ``autosync-transfer train`` never trained on it, and the registry's
``test_split`` tag of both is the same digest.

A shot is one measured strategy (its trials merged). :meth:`TargetSplit.shots` draws them from
the pool with a generator seeded by ``seed`` and the domain name, as a prefix of one permutation:
the 5 shots of a seed are among its 10 shots.

:class:`ShotDataModule` is a ``TrialDataModule`` whose train/val split is given explicitly (the
validation strategies carved from the shots, or one fold of a cross-validation).
"""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autosync_transfer.errors import ConfigError, UnknownNameError
from autosync_transfer.rankers import metrics as ranking_metrics
from autosync_transfer.rankers.datamodule import SPLITS, DomainData, TrialDataModule

if TYPE_CHECKING:
    import pandas

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.costmodel import CostModelConfig
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.strategies.types import Strategy

__all__ = [
    "DEFAULT_HOLDOUT_FRACTION",
    "METRIC_NAMES",
    "TargetData",
    "TargetSplit",
    "ShotDataModule",
    "split_target",
    "target_data",
    "evaluate_on",
    "digest",
]

#: share of the target's strategies held out for evaluation (the registry's test split)
DEFAULT_HOLDOUT_FRACTION = 0.15
#: the held-out metrics, as ``evaluate_simulator`` names them
METRIC_NAMES: tuple[str, ...] = ("pairwise_accuracy", "kendall_tau", "top1", "regret")


def digest(obj: Any) -> str:
    """16 hex digits of the SHA-256 of ``obj`` as canonical JSON (the registry's recipe for the
    ``test_split`` and ``dataset_fingerprint`` tags)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class TargetData:
    """Measured strategies of one domain: ids (sorted), strategies and runtimes (s);
    ``launcher``: what they were measured with (picks the cluster calibration of the
    step-simulator features; ``None``: unknown, any calibration)."""

    domain: Domain
    strategy_ids: tuple[str, ...]
    strategies: tuple[Strategy, ...]
    runtimes_s: tuple[float, ...]
    launcher: str | None = None

    def __len__(self) -> int:
        return len(self.strategy_ids)

    def subset(self, ids: Collection[str]) -> TargetData:
        """The strategies whose id is in ``ids`` (kept in id order)."""
        wanted = set(ids)
        missing = sorted(wanted - set(self.strategy_ids))
        if missing:
            raise ConfigError(f"strategy {missing[0]!r} is not a measured strategy of "
                              f"{self.domain.name!r}")
        keep = [i for i, s in enumerate(self.strategy_ids) if s in wanted]
        return TargetData(self.domain, tuple(self.strategy_ids[i] for i in keep),
                          tuple(self.strategies[i] for i in keep),
                          tuple(self.runtimes_s[i] for i in keep), self.launcher)

    def triple(self) -> tuple[Domain, list[Strategy], list[float]]:
        """``(domain, strategies, runtimes_s)``, the input of ``TrialDataModule``."""
        return self.domain, list(self.strategies), list(self.runtimes_s)

    @property
    def fingerprint(self) -> str:
        """Digest of the ids and runtimes (the registry's ``dataset_fingerprint``)."""
        return digest([list(self.strategy_ids), [f"{r:.6g}" for r in self.runtimes_s]])


def target_data(domain: Domain, trials: pandas.DataFrame) -> TargetData:
    """The measured strategies of ``domain`` in a trials table (ok trials of that domain; a
    strategy measured several times gets the median runtime). Trials measured on another cluster
    (a different cluster fingerprint) are a :class:`ConfigError`; none at all an
    :class:`UnknownNameError`."""
    from autosync_transfer.dataset.loader import strategies_and_runtimes

    df = trials[trials["domain"] == domain.name] if len(trials) else trials
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    if "cluster_fingerprint" in df.columns:
        fps = sorted({str(f) for f in df["cluster_fingerprint"] if f})
        if fps and fps != [domain.cluster.fingerprint]:
            raise ConfigError(
                f"the trials of {domain.name!r} were measured on cluster fingerprint "
                f"{fps[0]!r}, but cluster {domain.cluster.name!r} has "
                f"{domain.cluster.fingerprint!r}: they belong to another cluster")
    pairs = strategies_and_runtimes(df) if len(df) else []
    if not pairs:
        raise UnknownNameError(f"no ok trials with a strategy for domain {domain.name!r}")
    by_id: dict[str, tuple[Strategy, float]] = {}
    for s, r in pairs:
        if not (math.isfinite(r) and r > 0):
            raise ConfigError(f"domain {domain.name!r}: runtime of strategy {s.id!r} must be a "
                              f"finite number of seconds > 0, got {r!r}")
        by_id.setdefault(s.id, (s, float(r)))
    ids = sorted(by_id)
    launchers = ({str(x) for x in df["launcher"] if isinstance(x, str) and x}
                 if "launcher" in df.columns else set())
    return TargetData(domain, tuple(ids), tuple(by_id[i][0] for i in ids),
                      tuple(by_id[i][1] for i in ids),
                      launchers.pop() if len(launchers) == 1 else None)


@dataclass(frozen=True)
class TargetSplit:
    """The target's strategies split once: ``holdout_ids`` (evaluation only) and ``pool_ids``
    (where shots come from). ``test_split`` identifies the held-out set like the registry's
    ``test_split`` tag."""

    data: TargetData
    holdout_ids: tuple[str, ...]
    pool_ids: tuple[str, ...]
    split_seed: int
    holdout_fraction: float

    @property
    def domain(self) -> Domain:
        return self.data.domain

    @property
    def test_split(self) -> str:
        return digest({"split_seed": self.split_seed,
                       "test": {self.domain.name: sorted(self.holdout_ids)}})

    @property
    def available(self) -> int:
        """How many shots can be drawn (strategies outside the held-out set)."""
        return len(self.pool_ids)

    def holdout(self) -> TargetData:
        return self.data.subset(self.holdout_ids)

    def check_shots(self, n: int) -> None:
        """A :class:`ConfigError` unless ``0 <= n <=`` :attr:`available`."""
        if n < 0:
            raise ConfigError(f"shots must be >= 0, got {n}")
        if n > self.available:
            raise ConfigError(
                f"shots={n} is more than the {self.available} target trials available for "
                f"adaptation ({self.domain.name!r} has {len(self.data)} measured strategies, "
                f"{len(self.holdout_ids)} of them held out for evaluation)")

    def shot_order(self, seed: int) -> tuple[str, ...]:
        """The pool in the seeded order shots are taken in."""
        rng = np.random.default_rng([int(seed), zlib.crc32(self.domain.name.encode())])
        perm = rng.permutation(len(self.pool_ids))
        return tuple(self.pool_ids[i] for i in perm)

    def shots(self, n: int, seed: int) -> TargetData:
        """``n`` strategies of the pool, the first ``n`` of :meth:`shot_order`."""
        self.check_shots(n)
        return self.data.subset(self.shot_order(seed)[:n])

    def chosen(self, ids: Collection[str]) -> TargetData:
        """The given strategies as shots (e.g. ones measured for this adaptation); a held-out
        or unmeasured id is a :class:`ConfigError`."""
        held = set(self.holdout_ids)
        leaked = sorted(s for s in ids if s in held)
        if leaked:
            raise ConfigError(f"strategy {leaked[0]!r} is held out for evaluation and cannot "
                              f"be a shot")
        return self.data.subset(ids)


def split_target(
    domain: Domain,
    trials: pandas.DataFrame | TargetData,
    *,
    split_seed: int = 0,
    holdout_fraction: float = DEFAULT_HOLDOUT_FRACTION,
    reserved: Collection[str] = (),
) -> TargetSplit:
    """Split the target's strategies into a held-out set and the shot pool.

    The held-out set is ``TrialDataModule``'s test split for ``fractions=(1 - h, 0, h)`` and
    ``split_seed`` (the same strategies as its 70/15/15 test split when ``h = 0.15``).
    ``reserved`` strategy ids (e.g. ones measured for this adaptation) are never held out: the
    split is drawn from the others. Fewer than 2 held-out strategies is a :class:`ConfigError`.
    """
    if not 0.0 < holdout_fraction < 1.0:
        raise ConfigError(f"holdout_fraction must be in (0, 1), got {holdout_fraction}")
    data = trials if isinstance(trials, TargetData) else target_data(domain, trials)
    reserved_set = set(reserved)
    candidates = data.subset([s for s in data.strategy_ids if s not in reserved_set])
    holdout: tuple[str, ...] = ()
    if len(candidates):
        dm = TrialDataModule([candidates.triple()],
                             fractions=(1.0 - holdout_fraction, 0.0, holdout_fraction),
                             split_seed=split_seed, launcher=data.launcher)
        dm.setup()
        holdout = tuple(dm.splits()["test"][domain.name])
    if len(holdout) < 2:
        need = math.ceil(2 / holdout_fraction - 0.5)
        raise ConfigError(
            f"{domain.name!r} has {len(candidates)} measured strategies to hold out from; "
            f"evaluation needs at least 2 held-out strategies (about {need} measured strategies)")
    held = set(holdout)
    pool = tuple(s for s in data.strategy_ids if s not in held)
    return TargetSplit(data, holdout, pool, int(split_seed), float(holdout_fraction))


class ShotDataModule(TrialDataModule):
    """A ``TrialDataModule`` of one domain's strategies whose split is given: ``assignment``
    maps each strategy id to ``"train"``, ``"val"`` or ``"test"`` (ids not in it: train).
    Batching, shuffling and featurization are ``TrialDataModule``'s."""

    def __init__(
        self,
        data: TargetData,
        assignment: Mapping[str, str] | None = None,
        *,
        batch_size: int = 32,
        seed: int = 0,
        costmodel_config: CostModelConfig | None = None,
    ) -> None:
        super().__init__([data.triple()], batch_size=batch_size, seed=seed,
                         costmodel_config=costmodel_config, launcher=data.launcher)
        assignment = dict(assignment or {})
        bad = sorted({v for v in assignment.values() if v not in SPLITS})
        if bad:
            raise ConfigError(f"a split is one of {', '.join(SPLITS)}, got {bad[0]!r}")
        self.assignment = assignment

    def _split_domain(self, d: DomainData) -> list[np.ndarray]:
        labels = [self.assignment.get(s, "train") for s in d.strategy_ids]
        return [np.array([i for i, lab in enumerate(labels) if lab == split], dtype=np.int64)
                for split in SPLITS]


def evaluate_on(sim: Simulator | None, data: TargetData) -> dict[str, float]:
    """Ranking metrics (:data:`METRIC_NAMES`) of ``sim`` on ``data``'s strategies, scored with
    the simulator's own featurization, for ``data``'s launcher when it is known (all ``nan``
    when ``sim`` is None: nothing trained)."""
    if sim is None or len(data) == 0:
        return {k: math.nan for k in METRIC_NAMES}
    if data.launcher is not None:
        sim = sim.with_launcher(data.launcher)
    scores = sim.score(list(data.strategies), data.domain)
    runtimes = np.asarray(data.runtimes_s, dtype=np.float64)
    return {
        "pairwise_accuracy": float(ranking_metrics.pairwise_accuracy(scores, runtimes)),
        "kendall_tau": float(ranking_metrics.kendall_tau(scores, runtimes)),
        "top1": float(ranking_metrics.top1_score(scores, runtimes)),
        "regret": float(ranking_metrics.regret(scores, runtimes)),
    }

