"""Trial records, their append-only store, dataset loading and the AutoSync importer.

Import the submodules (``store``, ``loader``, ``autosync_import``) directly; this package
imports nothing heavy.
"""
