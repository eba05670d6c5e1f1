"""Search: the closed AutoSync loop and its baselines (``Searcher``), and ``recommend`` (the best
strategy a simulator ranks, without running anything)."""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

_EXPORTS = {
    "recommend": "recommend",
    "Searcher": "loop",
    "SearchConfig": "loop",
    "SearchResult": "loop",
    "summarize": "loop",
    "select_diverse": "selection",
    "warm_simulator": "warm",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
