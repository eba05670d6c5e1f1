"""AutoDist's strategy schema, vendored (``strategy.proto``, ``synchronizers.proto``; Apache-2.0,
Copyright 2020 Petuum) with the modules ``protoc`` generates from it (``make proto``)."""

from __future__ import annotations

__all__: list[str] = []
