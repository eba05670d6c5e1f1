"""Clusters: nodes, their workers and NICs; reads and writes AutoDist resource-spec YAML."""

from __future__ import annotations

import hashlib
import ipaddress
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from autosync_transfer.errors import SpecError, UnknownNameError, format_pydantic_error

__all__ = ["Cluster", "Node", "ResourceSpec", "ResourceSpecNode", "SSHConfig", "MAX_NODES",
           "MAX_WORKERS_PER_NODE", "ADDRESS_PATTERN"]

#: the most nodes a cluster has, and worker processes (devices) a node has
MAX_NODES = 4096
MAX_WORKERS_PER_NODE = 1024
#: a host name, IPv4 or IPv6 address (with an optional ``%zone``)
ADDRESS_PATTERN = r"^[A-Za-z0-9_.:%-]+$"


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

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    address: str = Field(min_length=1, max_length=255, pattern=ADDRESS_PATTERN)
    workers: int = Field(ge=1, le=MAX_WORKERS_PER_NODE)
    device: Literal["gpu", "cpu"] = "cpu"
    bandwidth_gbps: float = Field(gt=0, allow_inf_nan=False)
    latency_ms: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    chief: bool = False
    ssh_config: str | None = None

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9 / 8


class Cluster(BaseModel):
    """A set of nodes. Worker ranks are numbered node by node, in node order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    nodes: tuple[Node, ...] = Field(max_length=MAX_NODES)
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
        """Parse an AutoDist resource-spec mapping; errors name the node, the field and the value."""
        spec = ResourceSpec.parse(data)
        nodes = [
            {
                "name": rn.name or f"n{i}",
                "address": rn.address,
                "workers": len(rn.gpus or rn.cpus or ()),
                "device": "gpu" if rn.gpus else "cpu",
                "bandwidth_gbps": float(rn.network_bandwidth),
                "latency_ms": float(rn.latency_ms),
                "chief": rn.chief or len(spec.nodes) == 1,
                "ssh_config": rn.ssh_config,
            }
            for i, rn in enumerate(spec.nodes)
        ]
        try:
            return cls(name=spec.name or name, nodes=tuple(nodes), ssh=spec.ssh or {})
        except ValidationError as e:
            raise SpecError(format_pydantic_error(e, "resource spec")) from e

    @classmethod
    def from_yaml(cls, text: str, name: str = "custom") -> Cluster:
        """Parse resource-spec YAML (nesting, aliases and size bounded: :func:`.parsing.load_yaml`)."""
        from autosync_transfer.domains.parsing import load_yaml

        return cls.from_resource_spec(load_yaml(text, "resource spec"), name=name)

    @classmethod
    def from_file(cls, path: str | Path) -> Cluster:
        """Read a resource-spec YAML file (a regular file of at most 4 MiB); the cluster is
        named after the file unless the spec sets ``name:``."""
        from autosync_transfer.domains.parsing import MAX_YAML_BYTES, read_bounded

        p = Path(path)
        try:
            raw = read_bounded(p, MAX_YAML_BYTES, "resource spec")
            text = raw.decode("utf-8-sig")
        except OSError as e:
            raise SpecError(f"cannot read resource spec {str(p)!r}: {e.strerror}") from e
        except UnicodeDecodeError as e:
            raise SpecError(f"resource spec {str(p)!r} is not UTF-8 text ({e.reason} at byte "
                            f"{e.start})") from e
        return cls.from_yaml(text, name=p.stem)


# -- the AutoDist resource-spec file, as written -----------------------------------------------
_DeviceIndices = Annotated[list[Annotated[int, Field(strict=True, ge=0, lt=1 << 16)]],
                           Field(strict=True, max_length=MAX_WORKERS_PER_NODE)]


class ResourceSpecNode(BaseModel):
    """One entry of ``nodes:`` in an AutoDist resource spec (``network_bandwidth`` in Gbit/s).

    Exactly as AutoDist writes it: ``gpus`` (or ``cpus``) lists device indices, one worker
    each; ``name`` and ``latency_ms`` are this project's additions (AutoDist ignores them).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", coerce_numbers_to_str=True)

    address: str = Field(min_length=1, max_length=255, pattern=ADDRESS_PATTERN)
    name: str | None = None
    gpus: _DeviceIndices | None = None
    cpus: _DeviceIndices | None = None
    chief: bool = Field(default=False, strict=True)
    network_bandwidth: float = Field(default=1.0, strict=True, gt=0, allow_inf_nan=False)
    latency_ms: float = Field(default=0.0, strict=True, ge=0, allow_inf_nan=False)
    ssh_config: str | None = None

    @model_validator(mode="after")
    def _has_workers(self) -> ResourceSpecNode:
        if not (self.gpus or self.cpus):
            raise ValueError("needs a non-empty 'gpus' or 'cpus' list")
        return self


class ResourceSpec(BaseModel):
    """An AutoDist resource spec (``nodes: [{address, gpus | cpus, chief, network_bandwidth,
    ssh_config}]``, ``ssh: {group: {...}}``), validated as written; :meth:`Cluster.
    from_resource_spec` turns it into a :class:`Cluster`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: list[ResourceSpecNode] = Field(min_length=1, max_length=MAX_NODES, strict=True)
    ssh: dict[str, SSHConfig] | None = None
    name: str | None = None

    @classmethod
    def parse(cls, data: Any) -> ResourceSpec:
        """Validate ``data``; a mistake raises :class:`SpecError` in the spec's own words."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise SpecError(format_pydantic_error(_reworded(e), "resource spec")) from e


#: the rule a field states when its value is wrong, by field (or by (field, error type) where
#: the type and the bounds of one field read differently); other errors keep Pydantic's words
_RULES: dict[str | tuple[str, str], str] = {
    "": "must be a mapping with a 'nodes' list",
    "nodes": "'nodes' must be a non-empty list",
    "address": "missing field 'address'",
    ("address", "string_pattern_mismatch"): "'address' must be a host name or IP address",
    ("address", "string_too_long"): "'address' must be a host name or IP address",
    ("gpus", "too_long"): f"'gpus' lists more than {MAX_WORKERS_PER_NODE} devices",
    ("cpus", "too_long"): f"'cpus' lists more than {MAX_WORKERS_PER_NODE} devices",
    ("nodes", "too_long"): f"'nodes' lists more than {MAX_NODES} nodes",
    "gpus": "'gpus' must be a list of device indices",
    "cpus": "'cpus' must be a list of device indices",
    "chief": "'chief' must be true/false",
    "network_bandwidth": "'network_bandwidth' must be a number (Gbit/s)",
    ("network_bandwidth", "greater_than"): "'network_bandwidth' must be > 0 Gbit/s",
    ("network_bandwidth", "finite_number"): "'network_bandwidth' must be a finite number of "
                                            "Gbit/s",
    ("latency_ms", "finite_number"): "'latency_ms' must be a finite number >= 0",
    "latency_ms": "'latency_ms' must be a number >= 0",
    "ssh": "'ssh' must be a mapping of groups",
}


def _reworded(exc: ValidationError) -> ValidationError:
    """``exc`` with each error stated as the spec's rule, placed as a reader of the YAML names
    it (``nodes[1]: 'chief' must be true/false``)."""
    details: list[InitErrorDetails] = []
    for err in exc.errors():
        loc, kind = err["loc"], err["type"]
        msg = err["msg"].removeprefix("Value error, ")
        if kind == "extra_forbidden":
            where, rule = loc[:-1], f"unknown {'field' if loc[:-1] else 'top-level key'} {loc[-1]!r}"
        elif kind == "model_type":  # the spec, a node or an ssh group that is not a mapping
            where, rule = (), f"{_place(loc)} must be a mapping" if loc else _RULES[""]
        elif kind == "value_error":  # a rule checked across fields: the message states it
            where, rule = loc, msg
        else:
            at = max(i for i, p in enumerate(loc) if isinstance(p, str))
            field = str(loc[at])
            where = loc[:at]
            rule = _RULES.get((field, kind)) or _RULES.get(field) or f"{field!r}: {msg}"
        text = f"{_place(where)}: {rule}" if where else rule
        details.append({"type": PydanticCustomError("resource_spec", text.replace("{", "{{")
                                                    .replace("}", "}}")),
                        "loc": (), "input": err.get("input")})
    return ValidationError.from_exception_data(exc.title, details)


def _place(loc: tuple[str | int, ...]) -> str:
    """``nodes[0]`` for ``("nodes", 0)``, ``ssh[grp]`` for ``("ssh", "grp")``."""
    return "".join(f"[{p}]" if i else str(p) for i, p in enumerate(loc))

def _is_loopback(address: str) -> bool:
    if address in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
