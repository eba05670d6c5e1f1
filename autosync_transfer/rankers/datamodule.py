"""Training data for learned rankers: measured strategies of several domains, featurized and split.

:class:`TrialDataModule` takes either ``(domain, strategies, runtimes)`` triples or a table of
measured strategies (one row per strategy: ``domain``, ``strategy``, ``runtime_s``), the table
:func:`~autosync_transfer.dataset.loader.strategy_table` makes of a trials table. ``setup()`` featurizes every domain once (features are kept per domain), and splits
each domain's strategies 70/15/15 (``fractions``) with a generator seeded by ``split_seed`` and
the domain's name, after sorting them by id, so a domain's split does not depend on the input
order or on which other domains are present.

Batches mix domains across an epoch but every batch holds ``batch_size`` strategies drawn from
one domain (``domains_per_batch`` > 1 joins chunks of several domains), so that it contains pairs
to rank; ``domain_id`` says which domain each strategy comes from (the loss and the metrics only
compare strategies of one domain). Shuffling uses a generator seeded by ``seed`` that every
``train_dataloader()`` call creates afresh, so two fits on one data module see the same batches.
"""

from __future__ import annotations

import copy
import math
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from autosync_transfer.errors import ConfigError, NotFittedError
from autosync_transfer.rankers.costmodel import CostModelConfig
from autosync_transfer.rankers.features import (
    FEATURE_SCHEMA,
    Featurizer,
    StrategyFeatures,
    collate,
)
from autosync_transfer.rankers.physics import MEASURED, check_physics, physics_for
from autosync_transfer.rankers.stepsim import StepSimulator
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    import pandas

    from autosync_transfer.domains.domain import Domain

__all__ = ["TrialDataModule", "DomainData", "SPLITS", "TABLE_COLUMNS", "collate_items"]

SPLITS: tuple[str, ...] = ("train", "val", "test")
#: the columns a table of measured strategies needs (``cluster_fingerprint`` is optional)
TABLE_COLUMNS: tuple[str, ...] = ("domain", "strategy", "runtime_s")

Triple = tuple["Domain", Sequence["Strategy"], Sequence[float]]


@dataclass(frozen=True)
class DomainData:
    """One domain's strategies (sorted by id), their runtimes (s) and features."""

    domain: Domain
    strategy_ids: tuple[str, ...]
    runtimes: np.ndarray
    features: tuple[StrategyFeatures, ...]


class _Items(Dataset[tuple[StrategyFeatures, float, int]]):
    """Items ``(features, runtime_s, domain_id)`` addressed by a flat index."""

    def __init__(self, items: list[tuple[StrategyFeatures, float, int]]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[StrategyFeatures, float, int]:
        return self.items[i]


def collate_items(items: Sequence[tuple[StrategyFeatures, float, int]]) -> dict[str, torch.Tensor]:
    """:func:`~autosync_transfer.rankers.features.collate` plus ``runtime [B]`` (float32, s) and
    ``domain_id [B]`` (int64)."""
    batch = collate([f for f, _, _ in items])
    batch["runtime"] = torch.tensor([r for _, r, _ in items], dtype=torch.float32)
    batch["domain_id"] = torch.tensor([d for _, _, d in items], dtype=torch.int64)
    return batch


class _DomainBatchSampler(Sampler[list[int]]):
    """Batches of ``batch_size`` indices of one domain (``join`` chunks of different domains per
    batch when > 1); with ``generator``, shuffled within domains and across batches each epoch,
    else in order. A last chunk of a single strategy joins the previous chunk of its domain."""

    def __init__(self, groups: Sequence[np.ndarray], batch_size: int, join: int = 1,
                 generator: np.random.Generator | None = None):
        self.groups = [np.asarray(g, dtype=np.int64) for g in groups if len(g)]
        self.batch_size = batch_size
        self.join = join
        self.generator = generator

    def _chunks(self) -> list[list[int]]:
        chunks: list[list[int]] = []
        for g in self.groups:
            idx = self.generator.permutation(g) if self.generator is not None else g
            own = [idx[a: a + self.batch_size].tolist()
                   for a in range(0, len(idx), self.batch_size)]
            if len(own) > 1 and len(own[-1]) == 1:
                own[-2].extend(own.pop())
            chunks.extend(own)
        if self.generator is not None:
            order = self.generator.permutation(len(chunks))
            chunks = [chunks[i] for i in order]
        return chunks

    def __iter__(self) -> Iterator[list[int]]:
        chunks = self._chunks()
        for a in range(0, len(chunks), self.join):
            yield [i for c in chunks[a: a + self.join] for i in c]

    def __len__(self) -> int:
        n = 0
        for g in self.groups:
            k = math.ceil(len(g) / self.batch_size)
            if k > 1 and len(g) % self.batch_size == 1:
                k -= 1
            n += k
        return math.ceil(n / self.join)


class TrialDataModule(L.LightningDataModule):
    """Featurized, split measurements of strategies on one or more domains.

    ``data``: a sequence of ``(domain, strategies, runtimes_s)`` triples, or a table of measured
    strategies with the columns ``domain`` (a name), ``strategy``
    (:class:`~autosync_transfer.strategies.types.Strategy` objects), ``runtime_s`` and optionally
    ``cluster_fingerprint`` (what :func:`~autosync_transfer.dataset.loader.strategy_table` makes
    of a trials table). Strategies measured several times (same id in one domain) are merged
    with the median runtime. ``domains`` resolves the domain names of a table (a mapping or a
    function; default: the catalog's ``get_domain``); a table whose cluster fingerprint differs
    from the resolved domain's is a :class:`ConfigError`.

    Step-simulator features (``sim_*``) are computed with the physics a
    :class:`~autosync_transfer.rankers.simulator.Simulator` scores with
    (:func:`~autosync_transfer.rankers.physics.physics_for`): ``physics="measured"`` (default)
    the stored profile and calibration of each domain, ``"fallback"`` the simulator's fallback
    constants. ``launcher`` picks the calibration: a name for every domain or a mapping of domain
    names; a domain it does not name takes the ``launcher`` column of the table when all of its
    rows agree, else any calibration (a non-emulated one preferred).

    ``batch_size`` strategies of one domain per training batch (``domains_per_batch`` domains
    joined); ``eval_batch_size`` for validation/test (default ``batch_size``); ``fractions`` the
    train/val/test shares per domain; ``split_seed`` seeds the splits, ``seed`` the shuffling.
    The constructor only stores; :meth:`setup` featurizes and splits (once).
    """

    def __init__(
        self,
        data: pandas.DataFrame | Sequence[Triple],
        *,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        domains_per_batch: int = 1,
        fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
        split_seed: int = 0,
        seed: int = 0,
        domains: Mapping[str, Domain] | Callable[[str], Domain] | None = None,
        costmodel_config: CostModelConfig | None = None,
        physics: str = MEASURED,
        launcher: str | Mapping[str, str | None] | None = None,
    ) -> None:
        super().__init__()
        if batch_size < 2 or (eval_batch_size is not None and eval_batch_size < 1):
            raise ConfigError(f"batch_size must be >= 2 (pairs within a batch) and "
                              f"eval_batch_size >= 1, got batch_size={batch_size}, "
                              f"eval_batch_size={eval_batch_size}")
        if domains_per_batch < 1:
            raise ConfigError(f"domains_per_batch must be >= 1, got {domains_per_batch}")
        if len(fractions) != 3 or any(f < 0 for f in fractions) or not math.isclose(
                sum(fractions), 1.0, abs_tol=1e-9):
            raise ConfigError(f"fractions must be three shares (train, val, test) >= 0 summing "
                              f"to 1, got {tuple(fractions)}")
        self.data = data
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.domains_per_batch = domains_per_batch
        self.fractions = tuple(float(f) for f in fractions)
        self.split_seed = split_seed
        self.seed = seed
        self.domains = domains
        self.costmodel_config = costmodel_config
        self.physics = check_physics(physics)
        self.launcher = launcher
        #: launcher of each domain read from the table's ``launcher`` column
        self._table_launchers: dict[str, str] = {}
        self._domains: list[DomainData] | None = None
        self._split_idx: dict[str, list[np.ndarray]] = {}
        self._items: list[tuple[StrategyFeatures, float, int]] = []
        self._offsets: list[int] = []

    # -- setup ------------------------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        """Featurize every domain and split it (only the first call does work)."""
        if self._domains is not None:
            return
        triples = self._triples()
        if not triples:
            raise ConfigError("no measured strategies to train on (empty data)")
        doms: list[DomainData] = []
        for domain, strategies, runtimes in sorted(triples, key=lambda t: t[0].name):
            doms.append(self._domain_data(domain, strategies, runtimes))
        names = [d.domain.name for d in doms]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ConfigError(f"domain {dup!r} appears twice in the data with different "
                              f"definitions (merge its strategies into one triple)")
        self._items, self._offsets = [], []
        for d_id, d in enumerate(doms):
            self._offsets.append(len(self._items))
            self._items.extend(
                (f, float(r), d_id) for f, r in zip(d.features, d.runtimes.tolist()))
        self._split_idx = {s: [] for s in SPLITS}
        for d_id, d in enumerate(doms):
            for split, idx in zip(SPLITS, self._split_domain(d)):
                self._split_idx[split].append(idx + self._offsets[d_id])
        self._domains = doms

    def _triples(self) -> list[Triple]:
        data = self.data
        if hasattr(data, "columns") and hasattr(data, "groupby"):
            return self._triples_from_table(data)
        out: list[Triple] = []
        for t in data:  # type: ignore[union-attr]
            if len(t) != 3:
                raise ConfigError("data must be a trials table or (domain, strategies, "
                                  "runtimes) triples")
            out.append((t[0], list(t[1]), [float(r) for r in t[2]]))
        return out

    def _resolve(self, name: str) -> Domain:
        if self.domains is None:
            from autosync_transfer.domains.catalog import get_domain

            return get_domain(name)
        if callable(self.domains):
            return self.domains(name)
        try:
            return self.domains[name]
        except KeyError:
            raise ConfigError(f"no Domain given for domain {name!r} of the trials table "
                              f"(domains: {', '.join(sorted(self.domains))})") from None

    def _triples_from_table(self, df: pandas.DataFrame) -> list[Triple]:
        missing = [c for c in TABLE_COLUMNS if c not in df.columns]
        if missing:
            raise ConfigError(f"data is a table without column {missing[0]!r}: a table of measured "
                              f"strategies has the columns {', '.join(TABLE_COLUMNS)} (make one "
                              f"of a trials table with dataset.loader.strategy_table)")
        out: list[Triple] = []
        for name in sorted(set(df["domain"])):
            sub = df[df["domain"] == name]
            domain = self._resolve(str(name))
            if "cluster_fingerprint" in sub.columns:
                fps = {str(f) for f in sub["cluster_fingerprint"] if f}
                if fps and fps != {domain.cluster.fingerprint}:
                    raise ConfigError(
                        f"the trials of domain {name!r} were measured on cluster fingerprint "
                        f"{sorted(fps)[0]!r}, but the resolved domain's cluster has "
                        f"{domain.cluster.fingerprint!r} (pass domains= with the cluster "
                        f"that was measured)")
            if "launcher" in sub.columns:
                launchers = {str(x) for x in sub["launcher"] if isinstance(x, str) and x}
                if len(launchers) == 1:
                    self._table_launchers[str(name)] = launchers.pop()
            strategies = list(sub["strategy"])
            bad = next((s for s in strategies if not isinstance(s, Strategy)), None)
            if bad is not None:
                raise ConfigError(f"column 'strategy' of domain {name!r} holds a "
                                  f"{type(bad).__name__}, not a Strategy (make the table of a "
                                  f"trials table with dataset.loader.strategy_table)")
            if strategies:
                out.append((domain, strategies, [float(r) for r in sub["runtime_s"]]))
        return out

    def _domain_data(self, domain: Domain, strategies: Sequence[Strategy],
                     runtimes: Sequence[float]) -> DomainData:
        if len(strategies) != len(runtimes):
            raise ConfigError(f"domain {domain.name!r}: {len(strategies)} strategies but "
                              f"{len(runtimes)} runtimes")
        by_id: dict[str, tuple[Strategy, list[float]]] = {}
        for s, r in zip(strategies, runtimes):
            if not (math.isfinite(r) and r > 0):
                raise ConfigError(f"domain {domain.name!r}: runtime of strategy {s.id!r} must "
                                  f"be a finite number of seconds > 0, got {r!r}")
            by_id.setdefault(s.id, (s, []))[1].append(float(r))
        ids = sorted(by_id)
        stepsim = StepSimulator(domain, *physics_for(domain, self.physics,
                                                     self.launcher_of(domain.name)))
        feats = Featurizer(domain, self.costmodel_config, stepsim).featurize_many(
            [by_id[i][0] for i in ids])
        return DomainData(
            domain=domain,
            strategy_ids=tuple(ids),
            runtimes=np.array([float(np.median(by_id[i][1])) for i in ids]),
            features=tuple(feats),
        )

    def with_physics(self, physics: str) -> TrialDataModule:
        """This data module featurized with ``physics`` (``self`` when it already is; else a
        copy, set up: the same data, splits and batches)."""
        if check_physics(physics) == self.physics:
            return self
        other = copy.copy(self)
        other.physics = physics
        other._domains, other._split_idx, other._items, other._offsets = None, {}, [], []
        other._table_launchers = {}
        if self._domains is not None:
            other.setup()
        return other

    def launcher_of(self, name: str) -> str | None:
        """The launcher whose calibration featurizes domain ``name`` (``None``: any)."""
        if isinstance(self.launcher, str):
            return self.launcher
        if self.launcher is not None and name in self.launcher:
            return self.launcher[name]
        return self._table_launchers.get(name)

    def _split_domain(self, d: DomainData) -> list[np.ndarray]:
        n = len(d.strategy_ids)
        rng = np.random.default_rng([self.split_seed, zlib.crc32(d.domain.name.encode())])
        perm = rng.permutation(n)
        n_val = int(round(n * self.fractions[1]))
        n_test = int(round(n * self.fractions[2]))
        n_train = max(0, n - n_val - n_test)
        cuts = [0, n_train, n_train + n_val, n]
        return [np.sort(perm[cuts[k]: cuts[k + 1]]) for k in range(3)]

    # -- views ----------------------------------------------------------------------------------

    def _need(self) -> list[DomainData]:
        if self._domains is None:
            raise NotFittedError("TrialDataModule.setup() has not run yet")
        return self._domains

    @property
    def domain_names(self) -> list[str]:
        """Domain names in ``domain_id`` order."""
        return [d.domain.name for d in self._need()]

    @property
    def domain_data(self) -> list[DomainData]:
        """Per-domain strategies, runtimes and features, in ``domain_id`` order."""
        return list(self._need())

    def splits(self) -> dict[str, dict[str, list[str]]]:
        """``split -> domain name -> strategy ids`` (sorted) for train, val and test."""
        doms = self._need()
        out: dict[str, dict[str, list[str]]] = {}
        for split in SPLITS:
            out[split] = {}
            for d_id, (d, idx) in enumerate(zip(doms, self._split_idx[split])):
                local = idx - self._offsets[d_id]
                out[split][d.domain.name] = [d.strategy_ids[i] for i in local]
        return out

    def split_size(self, split: str) -> int:
        """Strategies in ``split`` over all domains."""
        self._need()
        return int(sum(len(i) for i in self._split_idx[self._check_split(split)]))

    def split_items(self, split: str) -> list[tuple[StrategyFeatures, float, int]]:
        """``(features, runtime_s, domain_id)`` of every strategy of ``split``, by domain."""
        self._need()
        return [self._items[i] for idx in self._split_idx[self._check_split(split)] for i in idx]

    @staticmethod
    def _check_split(split: str) -> str:
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        return split

    def feature_stats(self, split: str = "train") -> dict[str, np.ndarray]:
        """Per-column mean and standard deviation of every feature table over the strategies of
        ``split`` (rows, servers and groups weighted by count), the keys
        :meth:`~autosync_transfer.rankers.modules.RankerModule.set_feature_stats` takes."""
        items = self.split_items(split) or self.split_items("train")
        widths = {"row": FEATURE_SCHEMA.num_row, "agg": FEATURE_SCHEMA.num_agg,
                  "server": FEATURE_SCHEMA.num_server, "group": FEATURE_SCHEMA.num_group}
        acc = {t: [0.0, np.zeros(w), np.zeros(w)] for t, w in widths.items()}
        for f, _, _ in items:
            for table, arr in (("row", f.rows), ("agg", f.agg[None, :]),
                               ("server", f.server_feats), ("group", f.group_feats)):
                if arr.shape[0]:
                    a = acc[table]
                    a[0] += arr.shape[0]
                    a[1] += arr.sum(axis=0, dtype=np.float64)
                    a[2] += np.square(arr, dtype=np.float64).sum(axis=0)
        out: dict[str, np.ndarray] = {}
        for table, (n, s, sq) in acc.items():
            n = max(float(n), 1.0)
            mean = s / n
            var = np.maximum(sq / n - mean ** 2, 0.0)
            out[f"{table}_mean"] = mean.astype(np.float32)
            out[f"{table}_std"] = np.sqrt(var).astype(np.float32)
        return out

    # -- loaders --------------------------------------------------------------------------------

    def _loader(self, split: str, shuffle: bool) -> DataLoader[Any]:
        self._need()
        sampler = _DomainBatchSampler(
            self._split_idx[split],
            self.batch_size if shuffle else self.eval_batch_size,
            self.domains_per_batch if shuffle else 1,
            np.random.default_rng(self.seed) if shuffle else None,
        )
        return DataLoader(_Items(self._items), batch_sampler=sampler, collate_fn=collate_items,
                          num_workers=0)

    def train_dataloader(self) -> DataLoader[Any]:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader[Any]:
        return self._loader("test", shuffle=False)

    def loader(self, split: str) -> DataLoader[Any]:
        """An in-order loader over ``split`` (batches of ``eval_batch_size`` from one domain)."""
        return self._loader(self._check_split(split), shuffle=False)
