"""What may be exported or recommended: no silently lossy strategy.

A lossy strategy (an all-reduce with ``fp16``, ``fp16_ef`` or ``powersgd`` compression,
:func:`~autosync_transfer.runtime.accuracy.is_lossless`) changes the gradients training sees. It
is exported (``search --export-json/--export-autodist``) or recommended (``recommend``) only
when its convergence check passed (``checks[strategy.id].passed``:
:class:`~autosync_transfer.runtime.accuracy.ConvergenceCheck` within its
:class:`~autosync_transfer.runtime.accuracy.ConvergenceTolerance`: at most 1.10x the exact run's
steps to the target loss and a final loss at most 2 % above it, by default), or when the caller
allows lossy strategies outright (``allow_lossy=True``, ``--allow-lossy``). Otherwise the best
strategy that may be exported takes its place, and the refusals are reported
(:class:`Exclusion`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autosync_transfer.runtime.accuracy import ConvergenceCheck, GradientFidelity, is_lossless
from autosync_transfer.runtime.fidelity import compressors
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.search.summary import SearchResult

__all__ = ["Exclusion", "ExportChoice", "CONVERGENCE_KEY", "checks_of", "compressors",
           "refusal", "first_allowed", "search_choice"]

#: key of a search summary that holds its convergence checks ({strategy id: check as a dict})
CONVERGENCE_KEY = "convergence"


@dataclass(frozen=True)
class Exclusion:
    """A lossy strategy that was not exported: its id, why (one line), and its convergence check
    (``None``: it has none)."""

    strategy_id: str
    reason: str
    check: ConvergenceCheck | None = None

    def line(self) -> str:
        return f"{self.strategy_id}: {self.reason}"


@dataclass(frozen=True)
class ExportChoice:
    """The strategy to export (``None``: nothing may be), where it comes from (``search`` or a
    reference's name, for a search), and the lossy strategies ranked above it that were refused.
    ``error``: one line saying why nothing may be exported (empty when something may)."""

    strategy: Strategy | None
    source: str | None = None
    excluded: tuple[Exclusion, ...] = field(default_factory=tuple)
    error: str = ""


def checks_of(data: Mapping[str, Any] | None) -> dict[str, ConvergenceCheck]:
    """Convergence checks by strategy id from their dicts (a search summary's
    :data:`CONVERGENCE_KEY`); checks given as objects are kept."""
    return {sid: c if isinstance(c, ConvergenceCheck) else ConvergenceCheck.model_validate(c)
            for sid, c in (data or {}).items()}


def refusal(strategy: Strategy, checks: Mapping[str, ConvergenceCheck] | None = None,
            allow_lossy: bool = False, fidelity: GradientFidelity | None = None
            ) -> Exclusion | None:
    """``None`` when ``strategy`` may be exported (lossless, ``allow_lossy``, or its convergence
    check in ``checks`` passed), else the :class:`Exclusion` that says why not (with the
    figures of its gradient-fidelity probe, when given)."""
    if allow_lossy or is_lossless(strategy):
        return None
    check = (checks or {}).get(strategy.id)
    if check is not None and check.passed:
        return None
    what = f"lossy ({', '.join(compressors(strategy))}"
    if fidelity is not None:
        what += (f"; gradient error {fidelity.rel_error:.2%}, cosine {fidelity.cosine:.4f} "
                 f"over {fidelity.steps} probed steps")
    what += ")"
    if check is None:
        return Exclusion(strategy.id, f"{what}, no convergence check")
    return Exclusion(strategy.id, f"{what}, {check.summary()}", check)


def first_allowed(candidates: Iterable[Strategy],
                  checks: Mapping[str, ConvergenceCheck] | None = None,
                  allow_lossy: bool = False) -> tuple[Strategy | None, list[Exclusion]]:
    """The first of ``candidates`` (best first) that may be exported, and the refusals before
    it."""
    excluded: list[Exclusion] = []
    for s in candidates:
        why = refusal(s, checks, allow_lossy)
        if why is None:
            return s, excluded
        excluded.append(why)
    return None, excluded


def search_choice(result: SearchResult, domain: Domain,
                  checks: Mapping[str, ConvergenceCheck] | None = None,
                  allow_lossy: bool = False) -> ExportChoice:
    """The strategy search ``result`` (of ``domain``) exports: the fastest of the best found, the
    best builder and the best fp16 reference that may be exported (see the module docstring).
    When the best found is refused, the fastest strategy the search measured that may be
    exported stands in for it. Compared by the confirmation's medians when there is one, else
    (and whenever such a stand-in, which the confirmation did not measure, is compared) by the
    trials' medians. ``checks`` default to the summary's
    :data:`CONVERGENCE_KEY`."""
    from autosync_transfer.search.resume import load_run, record_prefix

    if checks is None:
        checks = checks_of(result.summary.get(CONVERGENCE_KEY))
    summary = result.summary
    confirmed = summary.get("confirmed") or {}
    builder, fp16 = summary.get("best_builder"), summary.get("best_fp16_builder")
    excluded: list[Exclusion] = []
    refs: dict[str, Strategy] = {}
    stand_in: tuple[Strategy, float] | None = None
    prefix = record_prefix(result.domain, result.run)
    progress, strategies = load_run(domain, result.store, result.run, result.config.budget)
    probes = _probes(result.store, prefix)

    def refused(s: Strategy) -> Exclusion | None:
        return refusal(s, checks, allow_lossy, probes.get(s.id))

    for name in (builder, fp16):
        s = strategies.get(f"{prefix}reference/{name}") if name else None
        if s is not None:
            refs[name] = s  # type: ignore[index]
    best = result.best
    search_ok = best is not None and (why := refused(best)) is None
    if best is not None and not search_ok:
        excluded.append(why)  # type: ignore[arg-type]
        ok = sorted((r.median_s, r.id) for r in progress.trials
                    if r.status == "ok" and r.median_s and r.id in strategies)
        for t, rid in ok:
            if refused(strategies[rid]) is None:
                stand_in = (strategies[rid], float(t))
                break
    options: list[tuple[str, Strategy, float | None, float | None]] = []  # name, s, trial, conf
    if search_ok:
        options.append(("search", best, summary.get("best_s"), confirmed.get("best_s")))  # type: ignore[arg-type]
    elif stand_in is not None:
        options.append(("search", stand_in[0], stand_in[1], None))
    if builder in refs:
        options.append((builder, refs[builder], summary.get("best_builder_s"),
                        confirmed.get("builder_s")))
    if fp16 in refs:
        why = refused(refs[fp16])
        if why is None:
            options.append((fp16, refs[fp16], summary.get("best_fp16_builder_s"),
                            confirmed.get("fp16_builder_s")))
        else:
            excluded.append(Exclusion(f"{why.strategy_id} (reference {fp16})", why.reason,
                                      why.check))
    # as the unchecked choice does: by the confirmation when there is one, unless a stand-in
    # for the best found (never confirmed) is compared, then by every one's trials
    by_confirmation = bool(confirmed) and (search_ok or stand_in is None)
    timed = [(o[3] if by_confirmation else o[2], i, o) for i, o in enumerate(options)
             if (o[3] if by_confirmation else o[2])]
    if not timed:
        first = excluded[0].line() if excluded else "no strategy measured ok"
        return ExportChoice(None, None, tuple(excluded), f"nothing may be exported: {first}")
    _, _, (name, s, _, _) = min(timed, key=lambda x: x[:2])
    return ExportChoice(s, name, tuple(excluded))


def _probes(store_path: Any, prefix: str) -> dict[str, GradientFidelity]:
    """The gradient-fidelity probes of a run's trials, by strategy id (the worst of its trials)."""
    from autosync_transfer.dataset.store import TrialStore

    out: dict[str, GradientFidelity] = {}
    for r in TrialStore(store_path).records():
        if r.fidelity is None or not r.id.startswith(prefix):
            continue
        f = GradientFidelity.model_validate(r.fidelity)
        if r.strategy_id not in out or f.rel_error > out[r.strategy_id].rel_error:
            out[r.strategy_id] = f
    return out
