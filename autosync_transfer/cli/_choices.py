"""The closed sets of words the command line accepts, as Enum types.

Typer turns an Enum annotation into a choice: ``--help`` lists the values and a wrong one is a
usage error (exit 2) before any work. The values mirror names the library registers (sampler
presets, builders, ranker kinds, search and adapt methods, launchers); ``tests/cli`` checks that
each set equals the library's, so a name added there fails a test until it is added here. They
are spelled out here, not read from the library, because importing it would make ``--help`` slow.

:func:`choice_error` words the one-line error of a value outside a set.
"""

from __future__ import annotations

from enum import Enum, StrEnum

__all__ = [
    "Launcher", "SearchLauncher", "CollectSampler", "SamplerPreset", "Builder", "RankerKind",
    "SearchMethod", "AdaptMethod", "Metric", "Objective", "Optimizer", "choice_error",
]


class Launcher(StrEnum):
    """Where the trial workers of ``collect`` and ``run`` start."""

    emulated = "emulated"
    local = "local"


class SearchLauncher(StrEnum):
    """Where the trial workers of ``collect`` and ``search`` start (torchrun: workers started on
    every node)."""

    emulated = "emulated"
    local = "local"
    torchrun = "torchrun"


class Objective(StrEnum):
    """What a search minimizes (``search.objective.OBJECTIVES``)."""

    time_to_loss = "time-to-loss"
    step_time = "step-time"


class Optimizer(StrEnum):
    """The optimizer of a convergence run (``runtime.convergence.ConvergenceConfig``)."""

    adam = "adam"
    sgd = "sgd"


class CollectSampler(StrEnum):
    """What ``collect`` measures: builders, DDP, then sampled strategies; or the builders only."""

    random = "random"
    builders = "builders"


class SamplerPreset(StrEnum):
    """The strategy sampler's named configurations (``strategies.sampler.PRESETS``)."""

    default = "default"
    product = "product"
    autosync_default = "autosync_default"
    ps_only = "ps_only"
    ar_only = "ar_only"
    compressed = "compressed"
    large_partitions = "large_partitions"
    mixture = "mixture"
    dataset = "dataset"


class Builder(StrEnum):
    """The hand-optimized strategy builders (``strategies.builders.BUILDERS``)."""

    ps = "ps"
    ps_lb = "ps_lb"
    partitioned_ps = "partitioned_ps"
    all_reduce = "all_reduce"
    partitioned_ar = "partitioned_ar"
    parallax = "parallax"
    ddp = "ddp"


class RankerKind(StrEnum):
    """Simulator kinds: the learned rankers, the step-time simulator and the analytical cost model."""

    rnn = "rnn"
    gat = "gat"
    linear = "linear"
    residual = "residual"
    transformer = "transformer"
    analytical = "analytical"
    stepsim = "stepsim"


class SearchMethod(StrEnum):
    """How ``search`` proposes the strategies it measures."""

    autosync = "autosync"
    random = "random"
    tpe = "tpe"
    analytical = "analytical"
    stepsim = "stepsim"


class AdaptMethod(StrEnum):
    """How ``adapt`` transfers a simulator (auto: finetune with target trials, else zero-shot)."""

    auto = "auto"
    zero_shot = "zero-shot"
    finetune = "finetune"
    finetune_head = "finetune-head"
    multi_source = "multi-source"
    guarded = "guarded"


class Metric(StrEnum):
    """Test metrics of a simulator (regret: lower is better; the others: higher)."""

    pairwise_acc = "pairwise_acc"
    kendall_tau = "kendall_tau"
    top1 = "top1"
    regret = "regret"


#: what a wrong value is called in its error, as the library words the same mistake
_NOUNS: dict[type[Enum], str] = {
    SamplerPreset: "sampler preset",
    Builder: "strategy builder",
    RankerKind: "ranker",
    SearchMethod: "method",
    AdaptMethod: "method",
    Metric: "metric",
}


def choice_error(choices: type[Enum], flag: str, value: object) -> str:
    """The one-line error of ``value`` given to ``flag``, outside ``choices``:
    ``--preset: unknown sampler preset 'odd' (known: default, ...)``, or for a set without a
    noun ``--launcher must be one of emulated, local, got 'ssh'``."""
    known = ", ".join(str(c.value) for c in choices)
    noun = _NOUNS.get(choices)
    if noun is None:
        return f"{flag} must be one of {known}, got {value!r}"
    return f"{flag}: unknown {noun} {value!r} (known: {known})"
