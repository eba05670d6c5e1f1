"""Search: choose strategies with a simulator (``recommend``); the closed AutoSync loop builds on it."""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

_EXPORTS = {"recommend": "recommend"}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
