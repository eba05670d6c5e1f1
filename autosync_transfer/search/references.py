"""The references a search has to beat, and the confirmation of its result.

**References**: every hand-optimized builder and torch DDP, measured first in the same run (not
counted in the budget), and, as a stricter reference reported beside them, the all-reduce builders
with fp16 compression (:data:`FP16_REFERENCES`: the builders default to no compression, and on a
slow link compression alone can explain much of a search's win).

**Confirmation**: the best strategy found, the best builder and the best fp16 reference measured
again, interleaved (:func:`confirmation_group`), so that drift cancels and the speed-up reported
does not rest on the minimum of many noisy measurements against one of the builder. The strategy
to use is the fastest of the three (:func:`choose`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from autosync_transfer.strategies.types import TORCH_DDP, Strategy

if TYPE_CHECKING:
    from autosync_transfer.dataset.store import TrialRecord
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.search.summary import SearchProgress

__all__ = ["FP16_REFERENCES", "choose", "confirmation_group", "is_builder", "reference_names",
           "reference_strategy"]

#: reference name -> (builder, options): the all-reduce builders with fp16 compression
FP16_REFERENCES: dict[str, tuple[str, dict[str, Any]]] = {
    f"{name}+fp16": (name, {"compressor": "fp16"}) for name in ("all_reduce", "partitioned_ar", "ddp")
}


def is_builder(name: str) -> bool:
    """Whether reference ``name`` is a hand-optimized builder as it comes (not torch DDP, not
    an fp16 variant)."""
    return name != TORCH_DDP and name not in FP16_REFERENCES


def reference_names() -> list[str]:
    """The references a search measures first, in measuring order: the builders, torch DDP,
    the fp16 variants."""
    from autosync_transfer.strategies.builders import BUILDERS

    return [*BUILDERS, TORCH_DDP, *FP16_REFERENCES]


def reference_strategy(name: str, domain: Domain) -> Strategy | None:
    """The strategy of reference ``name`` on ``domain`` (``None``: torch DDP)."""
    from autosync_transfer.strategies.builders import build

    if name == TORCH_DDP:
        return None
    if name in FP16_REFERENCES:
        builder, options = FP16_REFERENCES[name]
        strategy = build(builder, domain, **options)
        return strategy.model_copy(update={"id": f"{strategy.id}+fp16"})
    return build(name, domain)


def confirmation_group(progress: SearchProgress, strategies: Mapping[str, Strategy],
                       domain: Domain, prefix: str,
                       key: Callable[[TrialRecord], float] | None = None
                       ) -> list[tuple[str, Strategy | None]]:
    """``(who, strategy)`` to confirm together, in one interleaved pool: the best strategy found
    (``best``: by ``key`` when given, e.g. time to loss, where ``inf`` does not count; else by
    median step time), the best lossless strategy found when the best is lossy (``lossless``),
    the best builder (``builder``), the best fp16 reference (``fp16``, when one was measured ok)
    and torch DDP itself (``ddp``, strategy ``None``); empty when nothing was measured ok.
    ``strategies``: by record id; ``prefix``: the run's record ids'."""
    from autosync_transfer.runtime.accuracy import is_lossless

    ok = [r for r in progress.trials if r.status == "ok" and r.median_s]
    if key is not None:
        ok = [r for r in ok if key(r) < float("inf")]
    refs = {k: v for k, v in progress.references.items() if is_builder(k) and v}
    fp16_refs = {k: v for k, v in progress.references.items() if k in FP16_REFERENCES and v}
    if not ok or not refs:
        return []
    from autosync_transfer.strategies.builders import build

    best_rec = min(ok, key=key or (lambda r: r.median_s))  # type: ignore[arg-type,return-value]
    best = strategies.get(best_rec.id)
    builder_name = min(refs, key=lambda k: refs[k])  # type: ignore[arg-type,return-value]
    builder = strategies.get(f"{prefix}reference/{builder_name}") or build(builder_name, domain)
    if best is None:
        return []
    group: list[tuple[str, Strategy | None]] = [("best", best), ("builder", builder)]
    if not is_lossless(best):
        lossless = [r for r in progress.trials if r.status == "ok" and r.median_s
                    and r.id in strategies and is_lossless(strategies[r.id])]
        if lossless:
            group.append(("lossless", strategies[min(lossless, key=lambda r: r.median_s).id]))  # type: ignore[arg-type,return-value]
    if fp16_refs:
        fp16_name = min(fp16_refs, key=lambda k: fp16_refs[k])  # type: ignore[arg-type,return-value]
        fp16 = strategies.get(f"{prefix}reference/{fp16_name}")
        if fp16 is not None:
            group.append(("fp16", fp16))
    group.append(("ddp", None))
    return group


def choose(summary: Mapping[str, Any], strategies: Mapping[str, Strategy], best: Strategy | None,
           prefix: str) -> tuple[Strategy | None, str | None]:
    """The strategy to use and where it comes from (``search``, or the reference's name): the
    fastest of the best found, the best builder and the best fp16 reference, by the
    confirmation's medians when the summary has one, else by their measurements."""
    c = summary.get("confirmed") or {}
    builder, fp16 = summary["best_builder"], summary["best_fp16_builder"]
    if c:
        times = {"search": c["best_s"], builder: c["builder_s"], fp16: c.get("fp16_builder_s")}
    else:
        times = {"search": summary["best_s"], builder: summary["best_builder_s"],
                 fp16: summary["best_fp16_builder_s"]}
    options = []
    for i, (name, t) in enumerate(times.items()):
        s = best if name == "search" else strategies.get(f"{prefix}reference/{name}")
        if name is not None and t and s is not None:
            options.append((t, i, name, s))
    if not options:
        return None, None
    _, _, name, s = min(options, key=lambda o: o[:2])
    return s, name
