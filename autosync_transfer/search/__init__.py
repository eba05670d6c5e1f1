"""Search: the closed AutoSync loop and its baselines (:func:`search`, or a :class:`Searcher`
driven by a :class:`Proposer` per method), :func:`recommend` (the best strategy a simulator
ranks, without running anything) and the Lightning :class:`AutoSyncStrategy` (a given strategy,
or one a simulator chooses at setup time; autotuning with the simulator's candidates, recorded
by a :class:`TrialRecorder`).

Rooms: ``config`` (how a search runs, run names), ``proposers`` (the methods), ``loop`` (the
``Searcher``), ``references`` (what a search must beat, and the confirmation), ``summary`` (the
figures), ``resume`` (the store as the state), ``export`` (what may be exported: no unchecked lossy
strategy), ``neighbours`` and ``selection`` (candidates near
the incumbents, diverse picks), ``warm`` (the warm-start simulator), ``remote`` (torchrun workers),
``lightning`` (the Lightning strategy), ``autotune`` (the search room's side of autotuning).

Names are imported lazily (torch and Lightning are heavy): ``from autosync_transfer.search import
Searcher``; ``AutoSyncStrategy`` is the only name that imports Lightning.
"""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

_EXPORTS = {
    "search": "loop",
    "Searcher": "loop",
    "SearchConfig": "config",
    "SearchProgress": "summary",
    "SearchResult": "summary",
    "recommend": "recommendation",
    "recommend_checked": "recommendation",
    "search_choice": "export",
    "ExportChoice": "export",
    "Exclusion": "export",
    "Proposer": "proposers",
    "PROPOSERS": "proposers",
    "AutoSyncStrategy": "lightning",
    "SimulatorProposer": "autotune",
    "TrialRecorder": "autotune",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
