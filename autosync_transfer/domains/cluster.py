"""Clusters: nodes, their workers and NICs; reads and writes AutoDist resource-spec YAML."""

from __future__ import annotations

import hashlib
import ipaddress
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autosync_transfer.errors import SpecError, UnknownNameError, format_pydantic_error

__all__ = ["Node", "SSHConfig", "Cluster"]


class SSHConfig(BaseModel):
    """An AutoDist ``ssh:`` group (kept so that specs round-trip unchanged)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    username: str = ""
    port: int = Field(default=22, ge=1, le=65535)
    python_venv: str = ""
    key_file: str = ""
    shared_envs: dict[str, str] = Field(default_factory=dict)


class Node(BaseModel):
    """One machine: ``workers`` training processes (one per GPU, or CPU worker processes).

    ``bandwidth_gbps`` is the NIC's line rate in Gbit/s (full duplex); ``latency_ms`` an optional
    one-way per-message latency.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    address: str = Field(min_length=1)
    workers: int = Field(ge=1)
    device: Literal["gpu", "cpu"] = "cpu"
    bandwidth_gbps: float = Field(gt=0)
    latency_ms: float = Field(default=0.0, ge=0)
    chief: bool = False
    ssh_config: str | None = None

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9 / 8


class Cluster(BaseModel):
    """A set of nodes. Worker ranks are numbered node by node, in node order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    nodes: tuple[Node, ...]
    ssh: dict[str, SSHConfig] = Field(default_factory=dict)
    description: str = ""

    @field_validator("nodes")
    @classmethod
    def _non_empty(cls, v: tuple[Node, ...]) -> tuple[Node, ...]:
        if not v:
            raise ValueError("a cluster needs at least one node, got none")
        return v

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        names = [n.name for n in self.nodes]
        addrs = [n.address for n in self.nodes]
        for label, seq in (("name", names), ("address", addrs)):
            dup = {x for x in seq if seq.count(x) > 1}
            if dup:
                raise ValueError(f"node {label}s must be unique, {sorted(dup)[0]!r} appears twice")
        chiefs = [n.name for n in self.nodes if n.chief]
        if len(self.nodes) > 1 and len(chiefs) != 1:
            raise ValueError(
                f"exactly one node must be chief in a multi-node cluster, got {len(chiefs)}"
            )
        if len(self.nodes) > 1:
            for n in self.nodes:
                if _is_loopback(n.address):
                    raise ValueError(
                        f"loopback address {n.address!r} (node {n.name!r}) is not allowed "
                        f"in a multi-node cluster"
                    )
        for n in self.nodes:
            if n.ssh_config is not None and n.ssh_config not in self.ssh:
                raise ValueError(
                    f"node {n.name!r} names ssh_config {n.ssh_config!r}, which is not under 'ssh'"
                )
        return self

    # -- derived --------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def world_size(self) -> int:
        return sum(n.workers for n in self.nodes)

    @property
    def chief(self) -> Node:
        for n in self.nodes:
            if n.chief:
                return n
        return self.nodes[0]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise UnknownNameError(
            f"cluster {self.name!r} has no node {name!r} (nodes: {', '.join(self.node_names)})"
        )

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def node_ranks(self, name: str) -> list[int]:
        """Global worker ranks on node ``name`` (ranks are numbered node by node)."""
        start = 0
        for n in self.nodes:
            if n.name == name:
                return list(range(start, start + n.workers))
            start += n.workers
        raise UnknownNameError(f"cluster {self.name!r} has no node {name!r}")

    def rank_nodes(self) -> list[str]:
        """Node name of every global rank."""
        return [n.name for n in self.nodes for _ in range(n.workers)]

    def node_of_address(self, address: str) -> Node:
        for n in self.nodes:
            if n.address == address:
                return n
        raise UnknownNameError(f"cluster {self.name!r} has no node with address {address!r}")

    @property
    def min_bandwidth_gbps(self) -> float:
        return min(n.bandwidth_gbps for n in self.nodes)

    @property
    def fingerprint(self) -> str:
        payload = [
            [n.name, n.workers, n.device, n.bandwidth_gbps, n.latency_ms] for n in self.nodes
        ]
        return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]

    # -- AutoDist resource-spec YAML ------------------------------------------------------------
    def to_resource_spec(self) -> dict[str, Any]:
        """The AutoDist resource-spec mapping (plus ``name``/``latency_ms`` that AutoDist ignores)."""
        nodes = []
        for n in self.nodes:
            d: dict[str, Any] = {"address": n.address, "name": n.name}
            d["gpus" if n.device == "gpu" else "cpus"] = list(range(n.workers))
            if n.chief:
                d["chief"] = True
            d["network_bandwidth"] = n.bandwidth_gbps
            if n.latency_ms:
                d["latency_ms"] = n.latency_ms
            if n.ssh_config:
                d["ssh_config"] = n.ssh_config
            nodes.append(d)
        out: dict[str, Any] = {"nodes": nodes}
        if self.ssh:
            out["ssh"] = {k: v.model_dump(exclude_defaults=True) for k, v in self.ssh.items()}
        return out

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_resource_spec(), sort_keys=False)

    @classmethod
    def from_resource_spec(cls, data: Any, name: str = "custom") -> Cluster:
        """Parse an AutoDist resource-spec mapping; errors name the node and the field."""
        if not isinstance(data, dict):
            raise SpecError(
                f"resource spec must be a mapping with a 'nodes' list, got {type(data).__name__}"
            )
        unknown_top = set(data) - {"nodes", "ssh", "name"}
        if unknown_top:
            raise SpecError(f"resource spec: unknown top-level key {sorted(unknown_top)[0]!r}")
        raw_nodes = data.get("nodes")
        if not isinstance(raw_nodes, list) or not raw_nodes:
            raise SpecError(f"resource spec: 'nodes' must be a non-empty list, got {raw_nodes!r}")
        known = {"address", "name", "gpus", "cpus", "chief", "network_bandwidth", "latency_ms",
                 "ssh_config"}
        nodes = []
        for i, rn in enumerate(raw_nodes):
            where = f"nodes[{i}]"
            if not isinstance(rn, dict):
                raise SpecError(f"resource spec: {where} must be a mapping, got {rn!r}")
            extra = set(rn) - known
            if extra:
                raise SpecError(f"resource spec: {where}: unknown field {sorted(extra)[0]!r}")
            if "address" not in rn or rn["address"] in (None, ""):
                raise SpecError(f"resource spec: {where}: missing field 'address'")
            where = f"{where} ({rn['address']})"
            gpus, cpus = rn.get("gpus"), rn.get("cpus")
            for key, val in (("gpus", gpus), ("cpus", cpus)):
                if val is not None and (
                    not isinstance(val, list) or not all(isinstance(x, int) and x >= 0 for x in val)
                ):
                    raise SpecError(
                        f"resource spec: {where}: '{key}' must be a list of device indices, "
                        f"got {val!r}"
                    )
            if gpus:
                workers, device = len(gpus), "gpu"
            elif cpus:
                workers, device = len(cpus), "cpu"
            else:
                raise SpecError(
                    f"resource spec: {where}: needs a non-empty 'gpus' or 'cpus' list"
                )
            bw = rn.get("network_bandwidth", 1)
            if isinstance(bw, bool) or not isinstance(bw, (int, float)):
                raise SpecError(
                    f"resource spec: {where}: 'network_bandwidth' must be a number (Gbit/s), "
                    f"got {bw!r}"
                )
            if bw <= 0:
                raise SpecError(
                    f"resource spec: {where}: 'network_bandwidth' must be > 0 Gbit/s, got {bw!r}"
                )
            chief = rn.get("chief", False)
            if not isinstance(chief, bool):
                raise SpecError(f"resource spec: {where}: 'chief' must be true/false, got {chief!r}")
            lat = rn.get("latency_ms", 0.0)
            if isinstance(lat, bool) or not isinstance(lat, (int, float)) or lat < 0:
                raise SpecError(
                    f"resource spec: {where}: 'latency_ms' must be a number >= 0, got {lat!r}"
                )
            nodes.append(
                {
                    "name": str(rn.get("name") or f"n{i}"),
                    "address": str(rn["address"]),
                    "workers": workers,
                    "device": device,
                    "bandwidth_gbps": float(bw),
                    "latency_ms": float(lat),
                    "chief": chief or len(raw_nodes) == 1,
                    "ssh_config": rn.get("ssh_config"),
                }
            )
        ssh = data.get("ssh") or {}
        if not isinstance(ssh, dict):
            raise SpecError(f"resource spec: 'ssh' must be a mapping of groups, got {ssh!r}")
        try:
            return cls(name=str(data.get("name") or name), nodes=tuple(nodes), ssh=ssh)
        except ValidationError as e:
            raise SpecError(format_pydantic_error(e, "resource spec")) from e

    @classmethod
    def from_yaml(cls, text: str, name: str = "custom") -> Cluster:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            first = str(e).replace("\n", " ")
            raise SpecError(f"resource spec is not valid YAML: {first}") from e
        return cls.from_resource_spec(data, name=name)

    @classmethod
    def from_file(cls, path: str | Path) -> Cluster:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as e:
            raise SpecError(f"cannot read resource spec {str(p)!r}: {e.strerror}") from e
        return cls.from_yaml(text, name=p.stem)


def _is_loopback(address: str) -> bool:
    if address in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
