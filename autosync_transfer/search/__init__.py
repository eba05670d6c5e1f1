"""Search: the closed AutoSync loop and its baselines (``Searcher``, driven by a ``Proposer`` per
method), and ``recommend`` (the best strategy a simulator ranks, without running anything).

Rooms: ``config`` (how a search runs, run names), ``proposers`` (the methods), ``loop`` (the
``Searcher``), ``references`` (what a search must beat, and the confirmation), ``summary`` (the
figures), ``resume`` (the store as the state), ``export`` (what may be exported: no unchecked lossy
strategy), ``neighbours`` and ``selection`` (candidates near
the incumbents, diverse picks), ``warm`` (the warm-start simulator), ``remote`` (torchrun workers).
"""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

_EXPORTS = {
    "recommend": "recommend",
    "recommend_checked": "recommend",
    "search_choice": "export",
    "ExportChoice": "export",
    "Exclusion": "export",
    "Searcher": "loop",
    "SearchConfig": "config",
    "run_name": "config",
    "default_store_path": "config",
    "SearchProgress": "summary",
    "SearchResult": "summary",
    "summarize": "summary",
    "load_run": "resume",
    "run_meta": "resume",
    "FP16_REFERENCES": "references",
    "Proposer": "proposers",
    "RandomProposer": "proposers",
    "RankedProposer": "proposers",
    "AutoSyncProposer": "proposers",
    "AnalyticalProposer": "proposers",
    "TPEProposer": "proposers",
    "PROPOSERS": "proposers",
    "SEARCH_METHODS": "proposers",
    "make_proposer": "proposers",
    "select_diverse": "selection",
    "warm_simulator": "warm",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
