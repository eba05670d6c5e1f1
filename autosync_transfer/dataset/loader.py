"""Load trial datasets (JSON Lines stores and parquet files) as pandas tables.

The default location is :func:`autosync_transfer.paths.datasets_dir`: ``$AUTOSYNC_DATASETS``,
else the checkout's ``datasets/`` folder, else the datasets shipped in the installed package.
Tables have the columns of :meth:`~autosync_transfer.dataset.store.TrialRecord.to_row` plus
``source`` (the file a row came from); ``strategy``, ``protocol``, ``machine`` and ``fidelity``
are JSON strings. The per-strategy tables (:func:`strategy_runtimes`, :func:`strategy_table`) add
``fidelity_rel_error`` and ``fidelity_cosine``: the worst gradient-fidelity probe of the
strategy's trials (largest relative error, smallest cosine; NaN for a lossless strategy and for
trials measured before the probe existed).

A domain that is not in the catalog (a user's workload, a cluster file) is rebuilt from the
metadata of the stores that hold its trials (:func:`store_domains`, :func:`find_domain`): the
collector and the search record the domain there, so nothing needs the catalog to decode, train
on or adapt to such trials.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer import paths
from autosync_transfer.dataset.store import TrialRecord, TrialStore, require
from autosync_transfer.errors import ConfigError, SpecError, UnknownNameError

if TYPE_CHECKING:
    import pandas

    from autosync_transfer.strategies.types import Strategy

__all__ = [
    "DATASETS_ENV",
    "FIDELITY_COLUMNS",
    "STATUSES",
    "default_datasets_dir",
    "dataset_files",
    "load_trials",
    "list_datasets",
    "describe_domain",
    "strategy_runtimes",
    "strategy_table",
    "strategies_and_runtimes",
    "reference_noise",
    "drift_normalized",
    "normalized_reference_noise",
    "normalized_noise_ceiling",
    "label_margin",
    "parse_margin", "parse_margins",
    "margin_for",
    "superseded_ids",
    "valid_remeasurement",
    "file_meta",
    "store_domains",
    "find_domain",
]

#: environment variable that replaces the default datasets folder
DATASETS_ENV = paths.DATASETS_ENV
STATUSES: tuple[str, ...] = ("ok", "failed", "timeout")

PathLike = str | os.PathLike[str]

#: columns added after schema version 1, with the value of a record that predates them
_ADDED_COLUMNS: dict[str, Any] = {"supersedes": None, "fidelity": None}

#: the gradient-fidelity columns of :func:`strategy_runtimes` and :func:`strategy_table`
FIDELITY_COLUMNS: tuple[str, ...] = ("fidelity_rel_error", "fidelity_cosine")


def _fidelity_figures(value: object) -> tuple[float, float]:
    """``(rel_error, cosine)`` of a trial's ``fidelity`` (a dict or its JSON; NaN when absent)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, dict):
        return math.nan, math.nan
    return float(value.get("rel_error", math.nan)), float(value.get("cosine", math.nan))


def default_datasets_dir() -> Path:
    """``$AUTOSYNC_DATASETS`` when set, else the checkout's ``datasets/`` folder, else the
    datasets shipped in the installed package (:func:`autosync_transfer.paths.datasets_dir`)."""
    return paths.datasets_dir()


def dataset_files(paths_or_dir: PathLike | Sequence[PathLike] | None = None) -> list[Path]:
    """The trial files named by ``paths_or_dir``: files as given, folders searched recursively
    for ``*.jsonl`` and ``*.parquet``. A path that does not exist is a :class:`SpecError`."""
    if paths_or_dir is None:
        targets = [default_datasets_dir()]
    elif isinstance(paths_or_dir, (str, os.PathLike)):
        targets = [Path(paths_or_dir)]
    else:
        targets = [Path(p) for p in paths_or_dir]
    files: list[Path] = []
    for t in targets:
        if t.is_dir():
            files.extend(_trial_files_under(t))
        elif t.is_file():
            files.append(t)
        else:
            raise SpecError(f"no trial dataset at {str(t)!r} (no such file or folder)")
    return files


#: the most entries a folder of trial data may hold (so that ``--data /`` is an error, not a
#: walk of the whole disk)
MAX_FOLDER_ENTRIES = 100_000


def _trial_files_under(folder: Path) -> list[Path]:
    """The ``*.jsonl`` and ``*.parquet`` files below ``folder`` (not hidden), sorted."""

    def refuse(e: OSError) -> None:
        raise SpecError(f"cannot read the trial data folder {str(folder)!r}: "
                        f"{e.strerror} ({e.filename})") from e

    found: list[Path] = []
    seen = 0
    for root, dirs, names in os.walk(folder, onerror=refuse):
        seen += len(dirs) + len(names)
        if seen > MAX_FOLDER_ENTRIES:
            raise SpecError(f"{str(folder)!r} holds more than {MAX_FOLDER_ENTRIES} files and "
                            f"folders; give the folder of the trial data")
        dirs.sort()
        for name in names:
            p = Path(root) / name
            if p.suffix in (".jsonl", ".parquet") and not name.startswith(".") and p.is_file():
                found.append(p)
    return sorted(found)


def _read_file(path: Path) -> pandas.DataFrame:
    columns = list(TrialRecord.model_fields)
    if path.suffix == ".parquet":
        pa, pq = require("pyarrow"), require("pyarrow.parquet")
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as e:
            raise SpecError(f"cannot read parquet {str(path)!r}: {e}") from e
        missing = [c for c in columns if c not in table.column_names and c not in _ADDED_COLUMNS]
        if missing:
            raise SpecError(f"{str(path)!r} is not a trial table: no column {missing[0]!r}")
        table = _checked_table(table.select([c for c in columns if c in table.column_names]),
                               path)
        df = table.to_pandas()
        for c, default in _ADDED_COLUMNS.items():  # written by an older schema version
            if c not in df.columns:
                df[c] = default
        df = df[columns]
        df["iteration_times_s"] = [
            [float(x) for x in v] if v is not None else [] for v in df["iteration_times_s"]
        ]
    else:
        df = TrialStore(path).to_pandas()
    df["source"] = str(path)
    return df


def _checked_table(table: Any, path: Path) -> Any:
    """``table`` with the trial table's column types, every row a valid
    :class:`TrialRecord`; else a :class:`SpecError` naming the column or row."""
    pa = require("pyarrow")
    from pydantic import ValidationError

    from autosync_transfer.dataset.store import arrow_schema
    from autosync_transfer.errors import format_pydantic_error

    schema = arrow_schema()
    for name in table.column_names:
        want = schema.field(name).type
        if table.schema.field(name).type != want:
            try:
                column = table.column(name).cast(want)
            except (pa.ArrowException, ValueError, TypeError) as e:
                got = str(table.schema.field(name).type)
                got = got if len(got) <= 40 else got[:37] + "..."
                raise SpecError(f"{str(path)!r} is not a trial table: column {name!r} is "
                                f"{got}, not {want}") from e
            table = table.set_column(table.column_names.index(name), name, column)
    for i, row in enumerate(table.to_pylist()):
        try:
            TrialRecord.from_row({**_ADDED_COLUMNS, **row})
        except ValidationError as e:
            raise SpecError(f"{str(path)!r} row {i}: {format_pydantic_error(e, 'trial')}") from e
        except (ValueError, TypeError, RecursionError) as e:  # a JSON column that is not JSON
            raise SpecError(f"{str(path)!r} row {i}: a JSON column does not hold JSON "
                            f"({' '.join(str(e).split())[:100]})") from e
    return table


def _disturbed(machine: object) -> bool:
    if isinstance(machine, str):
        if "disturbed" not in machine:
            return False
        try:
            machine = json.loads(machine)
        except ValueError:
            return False
    return bool(isinstance(machine, dict) and machine.get("disturbed"))


def valid_remeasurement(status: str, machine: object) -> bool:
    """Whether a re-measurement (a record with ``supersedes``) replaces the trial it names: it
    ran ok, was not stored as disturbed and stayed within the foreign-CPU threshold it was
    measured under (``machine.max_foreign_cpu``, when recorded)."""
    if status != "ok":
        return False
    if isinstance(machine, str):
        try:
            machine = json.loads(machine)
        except ValueError:
            return False
    if not isinstance(machine, dict) or machine.get("disturbed"):
        return False
    foreign, limit = machine.get("foreign_cpu"), machine.get("max_foreign_cpu")
    return not (isinstance(foreign, (int, float)) and isinstance(limit, (int, float))
                and foreign > limit)


def superseded_ids(df: pandas.DataFrame) -> set[str]:
    """The ids of the trials in ``df`` that a valid re-measurement in ``df`` supersedes
    (:func:`valid_remeasurement`); of several valid re-measurements of one trial only the
    latest counts, the earlier ones are superseded too."""
    if "supersedes" not in df.columns:
        return set()
    by = df[df["supersedes"].notna()]
    by = by[[valid_remeasurement(s, m) for s, m in zip(by["status"], by["machine"])]]
    if not len(by):
        return set()
    latest = by.sort_values("timestamp", kind="stable").groupby("supersedes").tail(1)
    return set(by["supersedes"]) | (set(by["id"]) - set(latest["id"]))


def _as_set(value: str | Iterable[str] | None, what: str, known: Sequence[str] | None = None
            ) -> set[str] | None:
    if value is None:
        return None
    values = {value} if isinstance(value, str) else set(value)
    if known is not None:
        bad = sorted(values - set(known))
        if bad:
            raise ConfigError(f"{what} must be one of {', '.join(known)}, got {bad[0]!r}")
    return values


def load_trials(
    paths_or_dir: PathLike | Sequence[PathLike] | None = None,
    *,
    domain: str | Iterable[str] | None = None,
    status: str | Iterable[str] | None = "ok",
    disturbed: bool = False,
    superseded: bool = False,
) -> pandas.DataFrame:
    """Every trial in the given stores / parquet files / folders (default: the shipped
    datasets), one row per trial, filtered by ``domain`` and ``status`` (``None`` or ``"all"``:
    every status). A record found in several files (a store and its parquet copy) appears once.
    Trials the collector stored as disturbed by foreign CPU load (``machine.disturbed``) are left
    out unless ``disturbed=True``; trials that a valid re-measurement replaced (its
    ``supersedes``; :func:`valid_remeasurement`) are left out unless ``superseded=True``.
    """
    pd = require("pandas")

    statuses = None if status == "all" else _as_set(status, "status", STATUSES)
    domains = _as_set(domain, "domain")
    frames = [df for df in (_read_file(p) for p in dataset_files(paths_or_dir)) if len(df)]
    columns = [*TrialRecord.model_fields, "source"]
    if not frames:
        return pd.DataFrame(columns=columns)
    df = pd.concat(frames, ignore_index=True)
    df = df.drop_duplicates(subset="id", keep="first")
    if not superseded and len(df):
        replaced = superseded_ids(df)
        if replaced:
            df = df[~df["id"].isin(replaced)]
    if domains is not None:
        df = df[df["domain"].isin(domains)]
    if statuses is not None:
        df = df[df["status"].isin(statuses)]
    if not disturbed and len(df):
        df = df[~df["machine"].map(_disturbed)]
    return df.reset_index(drop=True)


def strategy_runtimes(df: pandas.DataFrame) -> pandas.DataFrame:
    """One row per (domain, strategy_id) over the ok trials of ``df``: ``strategy_kind``,
    ``median_s`` (median of the trials' medians), ``measurements``, ``references`` (how many are
    drift-reference re-measurements), ``min_s``/``max_s``, ``strategy`` (JSON or None) and the
    worst gradient fidelity of its trials (``fidelity_rel_error``, ``fidelity_cosine``; NaN when
    none was probed); fastest first within each domain."""
    pd = require("pandas")
    cols = ["domain", "strategy_id", "strategy_kind", "median_s", "measurements", "references",
            "min_s", "max_s", "strategy", *FIDELITY_COLUMNS]
    ok = df[(df["status"] == "ok") & df["median_s"].notna()] if len(df) else df
    if not len(ok):
        return pd.DataFrame(columns=cols)
    figures = [_fidelity_figures(v) for v in
               (ok["fidelity"] if "fidelity" in ok.columns else [None] * len(ok))]
    ok = ok.assign(fidelity_rel_error=[f[0] for f in figures],
                   fidelity_cosine=[f[1] for f in figures])
    grouped = ok.groupby(["domain", "strategy_id"], sort=False)
    out = grouped.agg(
        strategy_kind=("strategy_kind", "first"),
        median_s=("median_s", "median"),
        measurements=("median_s", "size"),
        references=("reference", "sum"),
        min_s=("median_s", "min"),
        max_s=("median_s", "max"),
        strategy=("strategy", "first"),
        fidelity_rel_error=("fidelity_rel_error", "max"),
        fidelity_cosine=("fidelity_cosine", "min"),
    ).reset_index()
    out["references"] = out["references"].astype(int)
    return out.sort_values(["domain", "median_s"], kind="stable").reset_index(drop=True)[cols]


def list_datasets(paths_or_dir: PathLike | Sequence[PathLike] | None = None) -> pandas.DataFrame:
    """Per-domain summary: trial counts by status, distinct strategies, reference
    re-measurements, the median of the strategies' medians, the best and worst strategy and
    ``spread`` = worst / best."""
    pd = require("pandas")
    cols = ["domain", "model", "cluster", "trials", "ok", "failed", "timeout", "strategies",
            "references", "median_s", "best_s", "worst_s", "spread"]
    df = load_trials(paths_or_dir, status=None)
    if not len(df):
        return pd.DataFrame(columns=cols)
    per_strategy = strategy_runtimes(df)
    rows = []
    for name, group in df.groupby("domain", sort=True):
        counts = group["status"].value_counts()
        runtimes = per_strategy[per_strategy["domain"] == name]["median_s"]
        best = float(runtimes.min()) if len(runtimes) else math.nan
        worst = float(runtimes.max()) if len(runtimes) else math.nan
        rows.append({
            "domain": name,
            "model": group["model"].iloc[0],
            "cluster": group["cluster"].iloc[0],
            "trials": len(group),
            **{s: int(counts.get(s, 0)) for s in STATUSES},
            "strategies": len(runtimes),
            "references": int(group["reference"].sum()),
            "median_s": float(runtimes.median()) if len(runtimes) else math.nan,
            "best_s": best,
            "worst_s": worst,
            "spread": worst / best if len(runtimes) and best > 0 else math.nan,
        })
    return pd.DataFrame(rows, columns=cols)


def reference_noise(df: pandas.DataFrame) -> dict[str, Any] | None:
    """How much repeated measurements of one strategy differ, over the strategies that have a
    drift-reference re-measurement (of one domain's trials ``df``): per strategy the coefficient
    of variation, its robust form (1.4826 x median absolute deviation / median: a few disturbed
    measurements barely move it) and the relative range (max - min) / median of its medians;
    None without re-measurements."""
    ok = df[(df["status"] == "ok") & df["median_s"].notna()]
    with_ref = set(ok.loc[ok["reference"].astype(bool), "strategy_id"])
    cvs, robust, ranges, n = [], [], [], 0
    for sid, group in ok[ok["strategy_id"].isin(with_ref)].groupby("strategy_id"):
        values = [float(v) for v in group["median_s"]]
        if len(values) < 2:
            continue
        mid = statistics.median(values)
        cvs.append(statistics.stdev(values) / statistics.fmean(values))
        mad = statistics.median(abs(v - mid) for v in values)
        robust.append(1.4826 * mad / mid if mid > 0 else math.nan)
        ranges.append((max(values) - min(values)) / mid if mid > 0 else math.nan)
        n += len(values)
    if not cvs:
        return None
    return {
        "strategies": len(cvs),
        "measurements": n,
        "median_cv": statistics.median(cvs),
        "median_robust_cv": statistics.median(robust),
        "max_cv": max(cvs),
        "max_relative_range": max(ranges),
    }


def _reference_points(ok: pandas.DataFrame) -> tuple[Any, Any]:
    """(times in s since the epoch, medians) of one domain's ok reference re-measurements,
    sorted by time."""
    import numpy as np

    pd = require("pandas")
    refs = ok[ok["reference"].astype(bool)]
    t = pd.to_datetime(refs["timestamp"], utc=True, errors="coerce")
    keep = t.notna().to_numpy()
    times = (t[keep].astype("int64") / 1e9).to_numpy(dtype=float)
    values = refs["median_s"].to_numpy(dtype=float)[keep]
    order = np.argsort(times, kind="stable")
    return times[order], values[order]


def drift_normalized(df: pandas.DataFrame) -> pandas.DataFrame:
    """A copy of a trials table whose ``median_s`` are drift-normalized labels: each ok trial's
    median divided by its domain's drift reference at the trial's time (linear interpolation
    between the reference re-measurements, the nearest one before the first and after the last)
    and multiplied by the median of the domain's reference measurements, so labels stay in
    seconds while drift between measuring periods cancels. Domains without a reference
    re-measurement are unchanged."""
    import numpy as np

    pd = require("pandas")
    out = df.copy()
    ok_mask = (out["status"] == "ok") & out["median_s"].notna()
    for _, idx in out[ok_mask].groupby("domain").groups.items():
        sub = out.loc[idx]
        times, values = _reference_points(sub)
        if not len(values):
            continue
        t = pd.to_datetime(sub["timestamp"], utc=True, errors="coerce")
        tt = (t.astype("int64") / 1e9).to_numpy(dtype=float)
        ref = np.interp(tt, times, values)
        ref = np.where(t.notna().to_numpy(), ref, float(np.median(values)))
        out.loc[idx, "median_s"] = sub["median_s"].to_numpy(dtype=float) / ref * float(
            np.median(values))
    return out


def normalized_reference_noise(df: pandas.DataFrame) -> dict[str, Any] | None:
    """The noise of drift-normalized labels of one domain: every reference re-measurement is
    normalized by the reference interpolated from the *other* re-measurements (leave one out),
    and the robust CV (1.4826 x MAD / median) of those ratios is reported with the plain CV;
    None with fewer than 3 re-measurements."""
    import numpy as np

    ok = df[(df["status"] == "ok") & df["median_s"].notna()]
    times, values = _reference_points(ok)
    if len(values) < 3:
        return None
    ratios = []
    for i in range(len(values)):
        others = np.delete(np.arange(len(values)), i)
        ratios.append(values[i] / float(np.interp(times[i], times[others], values[others])))
    r = np.array(ratios)
    mid = float(np.median(r))
    return {"measurements": len(r),
            "median_robust_cv": float(1.4826 * np.median(np.abs(r - mid)) / mid),
            "cv": float(np.std(r, ddof=1) / np.mean(r))}


def normalized_noise_ceiling(df: pandas.DataFrame, runtimes: Sequence[float] | Any) -> float:
    """The pairwise accuracy a perfect simulator can expect against one domain's
    drift-normalized ``runtimes`` (its labels): :func:`~autosync_transfer.rankers.metrics.
    noise_ceiling` at the robust CV of :func:`normalized_reference_noise` of ``df``; nan with
    fewer than 3 reference re-measurements."""
    import numpy as np

    from autosync_transfer.rankers.metrics import noise_ceiling

    noise = normalized_reference_noise(df)
    if noise is None:
        return math.nan
    return noise_ceiling(np.asarray(runtimes, dtype=np.float64), float(noise["median_robust_cv"]))


def label_margin(df: pandas.DataFrame, *, confidence: float = 0.95) -> float:
    """The relative runtime gap below which two of one domain's labels cannot be ordered with
    ``confidence``: ``exp(z * sqrt(2) * cv) - 1``, with ``z`` the two-sided normal quantile and
    ``cv`` the plain coefficient of variation of the domain's reference re-measurements
    (:func:`reference_noise`: drift within the run included, which is what separates two
    labels measured at different times); 0.0 without re-measurements. As a ranker's
    ``margin``, the ranking loss and the validation accuracy count only the pairs the labels
    order (about 0.1 for a store whose references vary by 3.5 %)."""
    from statistics import NormalDist

    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence}")
    noise = reference_noise(df)
    if noise is None or not math.isfinite(float(noise["median_cv"])):
        return 0.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    return math.expm1(z * math.sqrt(2.0) * float(noise["median_cv"]))


def parse_margin(value: str) -> float | None:
    """A ranker margin as a user writes it: ``"noise"`` (``None``: each domain's
    :func:`label_margin`) or a relative margin >= 0; a :class:`ConfigError` naming the value
    otherwise."""
    if value == "noise":
        return None
    try:
        margin = float(value)
    except ValueError:
        margin = math.nan
    if not margin >= 0:
        raise ConfigError(f"margin must be noise or a number >= 0, got {value!r}")
    return margin


def parse_margins(margin: str, start_margin: str | None) -> tuple[float | None, float | None]:
    """The loss margin and the start gate's margin of a ranking table's ``--margin`` and
    ``--start-margin`` (:func:`parse_margin`; no ``start_margin``: the loss margin's); a bad one
    is a :class:`ConfigError` naming its option and the value."""
    try:
        value = parse_margin(margin)
    except ConfigError as e:
        raise ConfigError(f"--{e}") from None
    if start_margin is None:
        return value, value
    try:
        return value, parse_margin(start_margin)
    except ConfigError as e:
        raise ConfigError(f"--start-{e}") from None


def margin_for(value: float | None, df: pandas.DataFrame) -> float:
    """A margin as :func:`parse_margin` gives it, for one domain's trials ``df``: a number as
    it is, ``None`` (``"noise"``) the trials' :func:`label_margin`."""
    return label_margin(df) if value is None else value


def describe_domain(
    domain: str, paths_or_dir: PathLike | Sequence[PathLike] | None = None, *, top: int = 10
) -> dict[str, Any]:
    """What the datasets hold for one domain: fingerprints, protocols, launchers, counts,
    the ``top`` fastest strategies and the noise of reference re-measurements (None if none)."""
    df = load_trials(paths_or_dir, status=None)
    sub = df[df["domain"] == domain]
    if not len(sub):
        known = sorted(set(df["domain"])) if len(df) else []
        shown = ", ".join(known[:20]) + (" ..." if len(known) > 20 else "") if known else "none"
        raise UnknownNameError(f"no trials for domain {domain!r} (domains: {shown})")
    counts = sub["status"].value_counts()
    protocols = sub["protocol"].value_counts(sort=True)
    per_strategy = strategy_runtimes(sub)
    fastest = [
        {"strategy_id": r.strategy_id, "kind": r.strategy_kind, "median_s": float(r.median_s),
         "measurements": int(r.measurements),
         "fidelity_rel_error": (None if math.isnan(r.fidelity_rel_error)
                                else float(r.fidelity_rel_error)),
         "fidelity_cosine": (None if math.isnan(r.fidelity_cosine)
                             else float(r.fidelity_cosine))}
        for r in per_strategy.head(top).itertuples()
    ]
    ok_times = per_strategy["median_s"]
    return {
        "domain": domain,
        "models": sorted(set(sub["model"])),
        "clusters": sorted(set(sub["cluster"])),
        "model_fingerprints": sorted(set(sub["model_fingerprint"])),
        "cluster_fingerprints": sorted(set(sub["cluster_fingerprint"])),
        "protocols": [{"protocol": json.loads(p), "trials": int(c)} for p, c in protocols.items()],
        "launchers": sorted(set(sub["launcher"])),
        "trials": len(sub),
        "counts": {s: int(counts.get(s, 0)) for s in STATUSES},
        "references": int(sub["reference"].sum()),
        "strategies": len(per_strategy),
        "best_s": float(ok_times.min()) if len(ok_times) else None,
        "worst_s": float(ok_times.max()) if len(ok_times) else None,
        "fastest": fastest,
        "reference_noise": reference_noise(sub),
        "runtimes_s": [float(v) for v in ok_times],
        "sources": sorted(set(sub["source"])),
    }


def strategy_table(df: pandas.DataFrame, *, normalize: bool = True) -> pandas.DataFrame:
    """The measured strategies of a trials table as the rankers' data module takes them: one row
    per distinct (domain, strategy_id) with an ok measurement, columns ``domain``,
    ``cluster_fingerprint`` and ``launcher`` (the first non-empty ones of its ok trials: the data
    module picks the cluster calibration of the step-simulator features by the launcher),
    ``strategy_id``,
    ``strategy`` (a :class:`~autosync_transfer.strategies.types.Strategy`), ``runtime_s`` (median
    of its trials' medians, reference re-measurements included), ``measurements`` and the worst
    gradient fidelity of its trials (``fidelity_rel_error``, ``fidelity_cosine``; NaN when none
    was probed). Trials without a strategy (torch's own DDP) are left out. Fastest first within
    each domain.

    ``normalize``: the trials' medians are first drift-normalized (:func:`drift_normalized`:
    divided by the drift reference interpolated at their time, in the scale of the median
    reference), so that drift between measuring periods does not look like signal; ``False``
    gives the raw medians."""
    pd = require("pandas")

    cols = ["domain", "cluster_fingerprint", "launcher", "strategy_id", "strategy",
            "runtime_s", "measurements", *FIDELITY_COLUMNS]
    missing = {"domain", "strategy_id", "strategy", "status", "median_s"} - set(df.columns)
    if missing:
        raise ConfigError(f"not a trial table: no column {sorted(missing)[0]!r}")
    graphs = _graphs_by_domain(df)
    fingerprints = _first_of_ok(df, "cluster_fingerprint")
    launchers = _first_of_ok(df, "launcher")
    if normalize and {"reference", "timestamp"} <= set(df.columns):
        df = drift_normalized(df)
    rows = []
    for r in strategy_runtimes(df).itertuples():
        if r.strategy is None or (isinstance(r.strategy, float) and math.isnan(r.strategy)):
            continue
        data = json.loads(r.strategy) if isinstance(r.strategy, str) else r.strategy
        rows.append({"domain": r.domain,
                     "cluster_fingerprint": fingerprints.get((r.domain, r.strategy_id), ""),
                     "launcher": launchers.get((r.domain, r.strategy_id), ""),
                     "strategy_id": r.strategy_id,
                     "strategy": strategy_from_record(data, graphs.get(r.domain)),
                     "runtime_s": float(r.median_s), "measurements": int(r.measurements),
                     "fidelity_rel_error": float(r.fidelity_rel_error),
                     "fidelity_cosine": float(r.fidelity_cosine)})
    return pd.DataFrame(rows, columns=cols)


def strategies_and_runtimes(df: pandas.DataFrame, *, normalize: bool = True
                            ) -> list[tuple[Strategy, float]]:
    """(strategy, runtime in s) for every distinct (domain, strategy_id) with an ok measurement,
    runtime = median of its trials' medians (reference re-measurements included). Trials without
    a strategy (torch's own DDP) are left out. Fastest first within each domain
    (:func:`strategy_table` as pairs)."""
    table = strategy_table(df, normalize=normalize)
    return list(zip(table["strategy"], (float(r) for r in table["runtime_s"])))


def _first_of_ok(df: pandas.DataFrame, column: str) -> dict[tuple[str, str], str]:
    """(domain, strategy_id) -> the first non-empty ``column`` of its ok trials."""
    if column not in df.columns or not len(df):
        return {}
    ok = df[(df["status"] == "ok") & df["median_s"].notna()]
    out: dict[tuple[str, str], str] = {}
    for d, sid, value in zip(ok["domain"], ok["strategy_id"], ok[column]):
        if isinstance(value, str) and value and (d, sid) not in out:
            out[(str(d), str(sid))] = value
    return out


def strategy_from_record(data: dict[str, Any], graph: Any | None) -> Strategy:
    """The Strategy of a record's ``strategy`` field (compact form needs the model graph)."""
    from autosync_transfer.strategies.compact import decode, is_compact
    from autosync_transfer.strategies.types import Strategy

    if is_compact(data):
        if graph is None:
            raise SpecError(f"strategy {data.get('id')!r} is stored compactly but its model graph "
                            f"is unknown (not a catalog model, or a different fingerprint)")
        return decode(data, graph)
    return Strategy.from_dict(data)


def _graphs_by_domain(df: pandas.DataFrame) -> dict[str, Any]:
    """domain -> the ModelGraph whose fingerprint matches the records: the catalog model's, else
    the one the metadata of the records' files describes (absent if none matches)."""
    from autosync_transfer.domains.catalog import get_model

    out: dict[str, Any] = {}
    if "model" not in df.columns or "model_fingerprint" not in df.columns:
        return out
    described: dict[str, Any] | None = None
    for (domain, model, fp), _ in df.groupby(["domain", "model", "model_fingerprint"]):
        try:
            g = get_model(str(model))
        except UnknownNameError:
            g = None
        if g is not None and g.fingerprint == fp:
            out[str(domain)] = g
            continue
        if described is None:
            sources = sorted(set(df["source"])) if "source" in df.columns else []
            described = _described(sources)
        dom = described.get(str(domain))
        if dom is not None and dom.model.fingerprint == fp:
            out[str(domain)] = dom.model
    return out


def file_meta(path: PathLike) -> dict[str, Any]:
    """The collection metadata of a trial file: a store's ``.meta.json`` sidecar, or the
    metadata a parquet file carries (:meth:`~autosync_transfer.dataset.store.TrialStore.compact`
    puts it there); empty when there is none."""
    p = Path(path)
    if p.suffix == ".parquet":
        pa, pq = require("pyarrow"), require("pyarrow.parquet")
        try:
            meta = pq.read_schema(p).metadata or {}
        except (OSError, pa.ArrowException) as e:
            raise SpecError(f"cannot read parquet {str(p)!r}: {e}") from e
        raw = meta.get(b"autosync_meta")
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise SpecError(f"{str(p)!r}: its autosync metadata is not valid JSON: {e}") from e
        return data if isinstance(data, dict) else {}
    return TrialStore(p).read_meta()


def _described(files: Iterable[PathLike]) -> dict[str, Any]:
    """The domains the metadata of ``files`` describe (the first description of a name wins)."""
    from autosync_transfer.dataset.store import domains_from_meta

    out: dict[str, Any] = {}
    for f in files:
        try:
            meta = file_meta(f)
        except FileNotFoundError:
            continue
        for name, dom in domains_from_meta(meta, str(f)).items():
            out.setdefault(name, dom)
    return out


def store_domains(paths_or_dir: PathLike | Sequence[PathLike] | None = None
                  ) -> dict[str, Any]:
    """The domains described by the metadata of the trial files named by ``paths_or_dir``
    (default: the shipped datasets), by name (the first description of a name wins)."""
    return _described(dataset_files(paths_or_dir))


def find_domain(name: str, paths_or_dir: PathLike | Sequence[PathLike] | None = None) -> Any:
    """The :class:`~autosync_transfer.domains.domain.Domain` named ``name``: the catalog's, else
    the one the metadata of the trial files ``paths_or_dir`` (default: the shipped datasets)
    describes. Neither is an :class:`~autosync_transfer.errors.UnknownNameError`."""
    from autosync_transfer.domains.catalog import get_domain

    try:
        return get_domain(name)
    except UnknownNameError as e:
        catalog_error = str(e)
    described = store_domains(paths_or_dir)
    if name in described:
        return described[name]
    where = (str(paths_or_dir) if isinstance(paths_or_dir, (str, os.PathLike))
             else "the given trial files" if paths_or_dir is not None
             else str(default_datasets_dir()))
    shown = ", ".join(sorted(described)[:10]) or "none"
    raise UnknownNameError(f"{catalog_error}; no trial store in {where} describes it either "
                           f"(described there: {shown})")
