"""Lazy package exports: heavy subpackages name their public objects without importing them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports", "combine_exports"]

#: ``(__all__, __getattr__)`` of a package
Exports = tuple[list[str], Callable[[str], Any]]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Exports:
    """``(__all__, __getattr__)`` for ``package``: ``exports`` maps a public name to the submodule
    that defines it (``"core"``), or to ``"submodule:name"`` where the object has another name
    there; the submodule is imported on first access."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            module, _, attr = exports[name].partition(":")
            return getattr(importlib.import_module(f"{package}.{module}"), attr or name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return sorted(exports), __getattr__


def combine_exports(package: str, *parts: Exports) -> Exports:
    """``(__all__, __getattr__)`` for ``package`` from the :func:`lazy_exports` of several
    subpackages (the package's top level re-exports a few names of each)."""
    owners: dict[str, Callable[[str], Any]] = {}
    for names, get in parts:
        for name in names:
            if name in owners:
                raise ValueError(f"{package}: {name!r} is exported twice")
            owners[name] = get

    def __getattr__(name: str) -> Any:
        get = owners.get(name)
        if get is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return get(name)

    return sorted(owners), __getattr__
