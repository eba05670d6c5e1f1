"""Time to target loss: the final candidates' convergence runs and the figures they give.

A search with the ``time-to-loss`` objective ends (before its confirmation) by checking its lossy
final candidates (:func:`final_candidates`: the ``final_checks`` lossy strategies measured ok
whose estimated time to loss beats the best lossless strategy of the run, the best fp16
reference among them) with a convergence run each
(:func:`~autosync_transfer.runtime.convergence.check_convergence`, one exact run for all of them),
stored in the check store beside the trial store (:mod:`autosync_transfer.dataset.checks`) so a
continued search does not train twice. When every candidate of a round fails,
:func:`check_final` checks the next best ones that compress differently or less (not of a failed
one's :func:`compression_family`, not :func:`at_least_as_lossy` as a failed one: e.g. fp16 after
PowerSGD rank 1 damaged training), for up to ``final_rounds`` rounds.

:func:`time_to_loss_figures` turns a run and its checks into the summary's time-to-loss figures:
every strategy's time to the target loss is its median step time x its steps-to-target ratio
(1.0 for a lossless strategy, the measured ``step_ratio`` for a checked lossy one); a lossy
strategy that failed its check is *excluded* (with the check's verdict as the reason), one never
checked does not count. Speed-ups are over torch DDP and over the best hand-optimized builder of
the same run (both lossless).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.errors import AutosyncError
from autosync_transfer.runtime.accuracy import ConvergenceCheck, ConvergenceTolerance, is_lossless
from autosync_transfer.search.references import FP16_REFERENCES
from autosync_transfer.strategies.types import TORCH_DDP, Strategy

if TYPE_CHECKING:
    from autosync_transfer.dataset.store import TrialRecord
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.fidelity import FidelityModel
    from autosync_transfer.search.objective import Objective
    from autosync_transfer.search.summary import SearchProgress

__all__ = ["final_candidates", "check_final", "lossiness", "at_least_as_lossy",
           "compression_family", "run_checks",
           "time_to_loss_figures", "fit_fidelity"]


def _measured(progress: SearchProgress, strategies: Mapping[str, Strategy], prefix: str
              ) -> list[tuple[float, str, Strategy | None, TrialRecord | None]]:
    """``(median_s, name, strategy, record)`` of every ok trial and reference of the run
    (``None`` strategy: torch DDP)."""
    out: list[tuple[float, str, Strategy | None, Any]] = []
    for name, t in progress.references.items():
        if t:
            s = None if name == TORCH_DDP else strategies.get(f"{prefix}reference/{name}")
            if s is not None or name == TORCH_DDP:
                out.append((float(t), name, s, None))
    for r in progress.trials:
        if r.status == "ok" and r.median_s and r.id in strategies:
            out.append((float(r.median_s), strategies[r.id].id, strategies[r.id], r))
    return out


def lossiness(strategy: Strategy) -> dict[str, float]:
    """How lossy ``strategy`` is on every variable it compresses: 1 fp16 with error feedback,
    2 fp16, 3 + 1/rank PowerSGD (rank 1 the most lossy); the most lossy shard counts for a
    partitioned variable. Lossless variables (PS, uncompressed all-reduce) are left out."""
    from autosync_transfer.strategies.types import AllReduce

    out: dict[str, float] = {}
    for node in strategy.nodes:
        for _, sync in node.items():
            if not isinstance(sync, AllReduce) or sync.compressor == "none":
                continue
            level = {"fp16_ef": 1.0, "fp16": 2.0}.get(sync.compressor,
                                                      3.0 + 1.0 / sync.powersgd_rank)
            out[node.var_name] = max(out.get(node.var_name, 0.0), level)
    return out


def compression_family(strategy: Strategy) -> tuple[str, ...]:
    """The compressors ``strategy`` uses (PowerSGD with its ranks), sorted: strategies of one
    family differ only in which variables they compress and how they group them."""
    from autosync_transfer.strategies.types import AllReduce

    kinds = {s.compressor if s.compressor != "powersgd" else f"powersgd{s.powersgd_rank}"
             for n in strategy.nodes for _, s in n.items()
             if isinstance(s, AllReduce) and s.compressor != "none"}
    return tuple(sorted(kinds))


def at_least_as_lossy(candidate: Mapping[str, float], failed: Mapping[str, float]) -> bool:
    """Whether a strategy of :func:`lossiness` ``candidate`` compresses every variable that a
    strategy of lossiness ``failed`` compresses, at least as much: when ``failed`` damaged
    training, ``candidate`` is expected to as well and is not worth a convergence run."""
    return all(candidate.get(v, 0.0) >= level for v, level in failed.items())


def final_candidates(progress: SearchProgress, strategies: Mapping[str, Strategy], prefix: str,
                     objective: Objective, limit: int, model: FidelityModel | None = None,
                     graph: Any = None, *, skip: Collection[str] = (),
                     failed: Sequence[Strategy] = ()) -> list[Strategy]:
    """Up to ``limit`` lossy strategies measured ok to check: the run's trials, best estimated
    time to loss first, then the fp16 references (builders) in the slots they leave; only those
    whose estimate beats the best lossless strategy of the run (a lossy strategy that cannot
    win needs no check). Strategy ids in ``skip`` (checked already) are left out, and so is
    every strategy of the :func:`compression_family` of one of ``failed`` (strategies whose
    check failed), :func:`at_least_as_lossy` as one of them, or whose gradient error (its
    fidelity probe, else the fidelity model's estimate) is at least the smallest of a failed
    one."""
    rows = _measured(progress, strategies, prefix)
    lossless = [t for t, _, s, _ in rows if s is None or is_lossless(s)]
    bar = min(lossless) if lossless else math.inf
    failed_levels = [lossiness(f) for f in failed]
    failed_families = {compression_family(f) for f in failed}
    # the smallest gradient error (probed, else predicted) of a failed strategy: a candidate
    # whose averaged gradient is at least as far from the exact one is expected to fail too
    failed_ids = {f.id for f in failed}
    errors = [e for _, _, s, rec in rows if s is not None and s.id in failed_ids
              and (e := _gradient_error(s, rec, model, graph)) is not None]
    error_bar = min(errors) if errors else math.inf
    scored: dict[str, tuple[bool, float, Strategy]] = {}
    for t, _, s, rec in rows:
        if (s is None or is_lossless(s) or s.id in skip
                or compression_family(s) in failed_families):
            continue
        err = _gradient_error(s, rec, model, graph) if failed else None
        if err is not None and err >= error_bar:
            continue
        est = objective.score(t, objective.ratio(s, rec, model, graph))
        # the run's trials first: a strategy the search found is what it can export; an fp16
        # reference (a builder) only takes a slot they leave
        key = (rec is None, est)
        if est < bar and (s.content_key not in scored or key < scored[s.content_key][:2]):
            scored[s.content_key] = (*key, s)
    ranked = [s for *_, s in sorted(scored.values(), key=lambda v: v[:2])]
    if failed_levels:
        ranked = [s for s in ranked
                  if not any(at_least_as_lossy(lossiness(s), f) for f in failed_levels)]
    return ranked[:limit]


def _gradient_error(strategy: Strategy, record: Any, model: FidelityModel | None,
                    graph: Any) -> float | None:
    """The relative gradient error of ``strategy``: its trial's fidelity probe, else the
    fidelity model's prediction, else ``None``."""
    from autosync_transfer.search.objective import record_fidelity

    fid = record_fidelity(record) if record is not None else None
    if fid is not None and fid.get("rel_error") is not None:
        return float(fid["rel_error"])
    if model is not None and graph is not None:
        return float(model.predict([strategy], graph)[0])
    return None


def check_final(domain: Domain, progress: SearchProgress, strategies: Mapping[str, Strategy],
                prefix: str, objective: Objective, checks_file: str | Path, *, limit: int,
                rounds: int, steps: int, seed: int, model: FidelityModel | None = None,
                graph: Any = None, workload: Any = None, train: bool = True,
                stored: Sequence[str | Path] = (), on_message: Any = None,
                tolerance: ConvergenceTolerance | None = None
                ) -> tuple[dict[str, ConvergenceCheck], dict[str, str], list[Strategy]]:
    """Convergence checks of the final candidates, in up to ``rounds`` rounds of ``limit``:
    a round whose candidates all fail is followed by the next best candidates that are not
    :func:`at_least_as_lossy` as a failed one (less aggressive compression), until one passes.
    Returns ``(checks, errors, unchecked)`` by strategy id; ``unchecked``: candidates with no
    stored check when ``train`` is false (checks are then only read, from ``checks_file`` and
    the ``stored`` check stores). ``tolerance`` judges every check (default: each check's own)."""
    from autosync_transfer.dataset.checks import CheckStore

    checks: dict[str, ConvergenceCheck] = {}
    errors: dict[str, str] = {}
    failed: list[Strategy] = []
    known: list[tuple[CheckStore, dict[str, ConvergenceCheck]]] | None = None
    recipe: dict[str, Any] = {}
    for _ in range(max(0, rounds)):
        cands = final_candidates(progress, strategies, prefix, objective, limit, model, graph,
                                 skip=set(checks) | set(errors), failed=failed)
        if not cands:
            break
        if train:
            got, errs = run_checks(domain, cands, checks_file, steps=steps, seed=seed,
                                   workload=workload, on_message=on_message, tolerance=tolerance)
        else:
            got, errs = {}, {}
            if known is None:  # every store read once, the recipe resolved once
                recipe = _recipe(domain, workload)
                known = [(st, st.checks(domain.name))
                         for st in map(CheckStore, (checks_file, *stored))]
            for store, found in known:
                got.update({s.id: (c.judged(tolerance) if tolerance is not None else c)
                            for s in cands if s.id not in got
                            and (c := found.get(store.key(domain.name, s, steps, seed,
                                                          **recipe))) is not None})
            missing = [s for s in cands if s.id not in got]
            if missing:
                checks.update(got)
                return checks, errors, missing
        checks.update(got)
        errors.update(errs)
        if errs or any(c.passed for c in got.values()):
            break  # a winner (the best estimate that passed), or runs that cannot train
        failed += [s for s in cands if s.id in got]
    return checks, errors, []


def _recipe(domain: Domain, workload: Any) -> dict[str, Any]:
    """How a default convergence run trains ``workload`` on ``domain`` (the check store's key)."""
    from autosync_transfer.runtime.convergence import ConvergenceConfig, resolve_config
    from autosync_transfer.runtime.trial import workload_spec_of

    cfg = resolve_config(ConvergenceConfig(), workload_spec_of(domain, workload))
    return {"optimizer": cfg.optimizer, "lr": cfg.lr}


def run_checks(domain: Domain, candidates: Sequence[Strategy], checks_file: str | Path, *,
               steps: int, seed: int, workload: Any = None, on_message: Any = None,
               tolerance: ConvergenceTolerance | None = None
               ) -> tuple[dict[str, ConvergenceCheck], dict[str, str]]:
    """``(checks by strategy id, errors by strategy id)``: the checks of ``candidates`` stored
    in ``checks_file`` (a :class:`~autosync_transfer.dataset.checks.CheckStore`) and a
    convergence run for those without one (appended to it). A run that fails is an error
    (retried when the search continues). With ``tolerance``, every check (stored or new) is
    judged by it (the stored curves' figures do not depend on it)."""
    from autosync_transfer.dataset.checks import CheckStore
    from autosync_transfer.runtime.convergence import ConvergenceConfig, check_convergence

    store = CheckStore(checks_file)
    known = store.checks(domain.name)
    checks: dict[str, ConvergenceCheck] = {}
    missing: list[Strategy] = []
    recipe = _recipe(domain, workload)
    seeds = ConvergenceConfig().seeds
    for s in candidates:
        c = known.get(store.key(domain.name, s, steps, seed, **recipe))
        if c is not None and len(c.seeds or (c.seed,)) != seeds:
            c = None  # checked on another number of seeds (an earlier version's one): again
        if c is not None:
            checks[s.id] = c.judged(tolerance) if tolerance is not None else c
        else:
            missing.append(s)
    errors: dict[str, str] = {}
    if missing:
        if on_message:
            on_message(f"convergence runs: {len(missing)} strategies x {steps} steps "
                       f"vs exact synchronization")
        try:
            config = ConvergenceConfig(steps=steps, seed=seed,
                                       **({"tolerance": tolerance} if tolerance else {}))
            runs = check_convergence(domain, missing, workload=workload, config=config)
        except AutosyncError as e:
            line = " ".join(str(e).split())[:300]
            return checks, {s.id: f"convergence run failed: {line}" for s in missing}
        for s, run in zip(missing, runs):
            store.append(domain.name, s, run)
            checks[s.id] = run.check
    return checks, errors


def fit_fidelity(model: FidelityModel, records: Sequence[Any],
                 strategies: Mapping[str, Strategy], graph: Any) -> FidelityModel:
    """Fit ``model`` on the fidelity probes of ``records`` (lossy trials whose record holds
    one); unchanged without any."""
    from autosync_transfer.search.objective import record_fidelity

    xs, ys = [], []
    for r in records:
        fid = record_fidelity(r)
        s = strategies.get(r.id)
        if fid is None or s is None or fid.get("rel_error") is None:
            continue
        xs.append(s)
        ys.append(float(fid["rel_error"]))
    return model.fit(xs, graph, ys) if xs else model


def time_to_loss_figures(progress: SearchProgress, strategies: Mapping[str, Strategy],
                         prefix: str, checks: Mapping[str, ConvergenceCheck],
                         summary: Mapping[str, Any], errors: Mapping[str, str] | None = None
                         ) -> dict[str, Any]:
    """The summary's time-to-loss figures (module docstring): ``ttl_best`` / ``ttl_best_s``
    (step time x ratio of the best strategy found that counts), ``ttl_speedup_vs_builder``,
    ``ttl_speedup_vs_ddp``, ``confirmed_ttl_speedup_vs_builder`` (the confirmation's medians of
    the confirmed best strategy, x its ratio, when it counts), ``convergence`` (every check by
    strategy id), ``excluded`` (strategy id -> reason), ``unchecked_lossy`` (lossy trials never
    checked) and ``convergence_minutes`` (the checks' training time)."""
    by_id: dict[str, ConvergenceCheck] = dict(checks)
    excluded: dict[str, str] = {sid: c.summary() for sid, c in by_id.items() if not c.passed}
    excluded.update(errors or {})
    best: tuple[float, str, float] | None = None
    unchecked = 0
    for r in progress.trials:
        if r.status != "ok" or not r.median_s or r.id not in strategies:
            continue
        s = strategies[r.id]
        if is_lossless(s):
            ratio = 1.0
        elif s.id in by_id and by_id[s.id].passed:
            ratio = by_id[s.id].credited_step_ratio
        else:
            unchecked += s.id not in by_id and s.id not in excluded
            continue
        ttl = float(r.median_s) * ratio
        if best is None or ttl < best[0]:
            best = (ttl, s.id, ratio)
    builder_s, ddp_s = summary.get("best_builder_s"), summary.get("ddp_s")
    out: dict[str, Any] = {
        "ttl_best": best[1] if best else None,
        "ttl_best_s": best[0] if best else None,
        "ttl_best_ratio": best[2] if best else None,
        "ttl_speedup_vs_builder": builder_s / best[0] if best and builder_s else None,
        "ttl_speedup_vs_ddp": None,  # from the confirmation only (below)
        "confirmed_ttl_speedup_vs_builder": None,
        "convergence": {sid: c.model_dump(mode="python") for sid, c in by_id.items()},
        "excluded": excluded,
        "unchecked_lossy": unchecked,
        "convergence_minutes": sum(c.seconds for c in by_id.values()) / 60.0,
    }
    # the confirmed strategy's time to loss, when it counts (lossless, or checked and passed)
    conf = summary.get("confirmed") or {}
    conf_ratio = None
    ratio_high = None  # the ratio's upper bound over seeds: the interval's conservative end
    if conf.get("best") is not None:
        if conf["best"] in by_id:
            c = by_id[conf["best"]]
            conf_ratio = c.credited_step_ratio if c.passed else None
            ratio_high = c.step_ratio_high
        elif any(s.id == conf["best"] and is_lossless(s) for s in strategies.values()):
            conf_ratio = ratio_high = 1.0
    if conf_ratio is not None and conf.get("best_s") and conf.get("builder_s"):
        out["confirmed_ttl_speedup_vs_builder"] = conf["builder_s"] / (conf["best_s"] * conf_ratio)
        # a lower bound: the per-step interval's low end over the ratio's upper bound (at
        # least 1: a ratio below 1 that is not significant is not credited)
        low = conf.get("speedup_vs_builder_low")
        if low is not None and ratio_high is not None and math.isfinite(ratio_high):
            out["confirmed_ttl_speedup_vs_builder_low"] = low / max(1.0, ratio_high) \
                if conf_ratio >= 1.0 else low / ratio_high
    if conf_ratio is not None and conf.get("speedup_vs_ddp"):
        out["ttl_speedup_vs_ddp"] = conf["speedup_vs_ddp"] / conf_ratio
    # the best fp16 reference, by time to loss when it was checked
    fp16 = {k: v for k, v in progress.references.items() if k in FP16_REFERENCES and v}
    for name in sorted(fp16, key=lambda k: fp16[k]):  # type: ignore[arg-type,return-value]
        s = strategies.get(f"{prefix}reference/{name}")
        if s is not None and s.id in by_id and by_id[s.id].passed and builder_s:
            out["ttl_fp16_reference"] = name
            out["ttl_speedup_of_fp16_reference_vs_builder"] = builder_s / (
                fp16[name] * by_id[s.id].credited_step_ratio)
            break
    return out
