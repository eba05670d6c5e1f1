"""Emulated multi-host clusters on one machine: one network namespace per node, shaped by ``tc``.

Each node of a :class:`~autosync_transfer.domains.cluster.Cluster` becomes a network namespace
with one NIC, ``eth0``, the end of a veth pair whose other end is a port of a bridge living in its
own namespace (the "switch"). Both ends are shaped with ``tbf`` to the node's ``bandwidth_gbps``:
the node end limits what the node sends (egress), the switch end what it receives (ingress), which
together behave like a full-duplex NIC of that line rate. Worker processes started with
:meth:`EmulatedCluster.popen` run inside a node's namespace, so torch.distributed (gloo) really
sends every byte through the shaped links. No namespace gets a default route: traffic cannot leave
the emulated cluster. Nothing is created in the host's own network namespace.

Shaping (``tbf``):

* ``rate`` is the node's line rate in bit/s.
* ``burst`` (the token bucket depth) is ``max(64 KiB, rate * 1 ms)`` unless given: at least one
  64 KiB GSO segment must fit (or tbf segments every super-packet and the CPU cost rises), and at
  multi-Gbit/s rates a bucket of one millisecond keeps the kernel's timer granularity from eating
  into the rate. Bursts above the line rate therefore last at most ~1 ms.
* ``latency 50ms`` bounds the queue (packets that would wait longer are dropped), as in the
  calibrated recipe of ``emulated-cluster.md``.

tbf counts whole Ethernet frames, so TCP goodput is ~0.957 of the shaped rate (1448 payload bytes
per 1514-byte frame); measured on a 2-core host with :meth:`measure_link_rate`, it is exactly that at
0.2, 1, 2 and 5 Gbit/s. On a CPU the links are only as fast as the machine can push packets
through veth pairs (about 10 Gbit/s unshaped on 2 cores, shared by every node), so shaped rates
close to that figure are not reached; :meth:`measure_link_rate` tells what a pair of nodes gets.

Latency: this kernel has no ``netem``, so ``Node.latency_ms`` is not applied to the links; it is
exposed (:attr:`EmulatedNode.latency_ms`) for emulation in application code.

Lifecycle: the constructor only stores; :meth:`EmulatedCluster.start` (or ``with``) creates the
namespaces; :meth:`EmulatedCluster.stop` (or leaving the ``with`` block, also on an exception)
kills every process left inside them and deletes them. While active, SIGINT/SIGTERM tear down and
then re-raise, and an ``atexit`` hook stops clusters still running at interpreter exit. A run killed
with SIGKILL cannot clean up: its namespaces are named ``<prefix>-<run_id>-n<i>`` /
``<prefix>-<run_id>-br`` and an owner record (pid) is kept under ``/run``, so that
:func:`cleanup_leftovers` finds and deletes them later while sparing clusters whose owner still runs
(``autosync-transfer cleanup``; the emulated launcher also runs it at the start of every launch).
"""

from __future__ import annotations

import atexit
import ipaddress
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from autosync_transfer._files import atomic_write
from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.errors import AutosyncError, ConfigError

__all__ = [
    "EmulatedCluster",
    "EmulatedNode",
    "available",
    "cleanup_leftovers",
    "list_namespaces",
    "default_burst_bytes",
]

logger = logging.getLogger(__name__)

#: the NIC name inside every node namespace (gloo needs ``GLOO_SOCKET_IFNAME`` set to it)
NODE_IFNAME = "eth0"
#: the bridge inside the switch namespace
BRIDGE_IFNAME = "br0"
#: tbf queue bound (``latency`` argument): packets that would wait longer are dropped
TBF_QUEUE_LATENCY_MS = 50
#: smallest tbf bucket: one 64 KiB GSO segment
MIN_BURST_BYTES = 64 * 1024
#: owner records of running emulated clusters (pid), read by :func:`cleanup_leftovers`
STATE_DIR = Path("/run/autosync-transfer/netns")

_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,4}$")
_RUN_ID_RE = re.compile(r"^[a-z0-9]{1,6}$")
_SUBNET_RE = re.compile(r"^\d{1,3}\.\d{1,3}\.\d{1,3}$")
_MAX_NODES = 254
_REQUIRES = "emulated clusters need root and iproute2 (ip, tc)"

# clusters started in this process and not yet stopped (for the atexit safety net)
_LIVE: set[EmulatedCluster] = set()
_LIVE_LOCK = threading.Lock()
_ATEXIT_REGISTERED = False


def default_burst_bytes(rate_bit_per_s: float) -> int:
    """tbf bucket depth for a rate: ``max(64 KiB, rate * 1 ms)`` in bytes."""
    return max(MIN_BURST_BYTES, int(rate_bit_per_s / 8 * 1e-3))


@dataclass(frozen=True)
class EmulatedNode:
    """One node of an emulated cluster: its namespace, address and shaping."""

    name: str
    index: int
    namespace: str
    address: str
    veth: str  # the switch-side end of the node's veth pair (in the bridge namespace)
    workers: int
    ranks: tuple[int, ...]
    bandwidth_gbps: float
    rate_bit_per_s: int
    burst_bytes: int
    latency_ms: float  # not applied to the links (no netem); for application-level emulation
    chief: bool


class EmulatedCluster:
    """A :class:`Cluster` emulated with network namespaces, veth pairs, a bridge and ``tbf``.

    Args:
        cluster: the cluster to emulate (at most 254 nodes).
        prefix: first part of every namespace name (1-5 lowercase letters/digits, starting with a
            letter); :func:`cleanup_leftovers` takes the same prefix.
        subnet: the first three octets of the /24 the nodes live in. A node keeps its own
            ``address`` when it is a host address inside this /24 (and not taken); the others get
            ``<subnet>.<i+1>`` (or the next free host number). See :meth:`address_of`.
        shape_ingress: also shape the switch-side end (traffic towards the node); without it only
            what a node sends is limited.
        burst_bytes: tbf bucket depth for every link; default :func:`default_burst_bytes` of each
            node's rate.
        run_id: short id in every name (1-6 lowercase letters/digits); default random, so that
            several emulated clusters can coexist.
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        prefix: str = "ast",
        subnet: str = "10.88.0",
        shape_ingress: bool = True,
        burst_bytes: int | None = None,
        run_id: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.prefix = prefix
        self.subnet = subnet
        self.shape_ingress = shape_ingress
        self.burst_bytes = burst_bytes
        self.run_id = run_id if run_id is not None else secrets.token_hex(3)
        self._nodes: tuple[EmulatedNode, ...] | None = None
        self._active = False
        self._stopping = False
        self._created: list[str] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self._prev_handlers: dict[int, Any] = {}
        self._deferred_signal: int | None = None

    # -- names and addresses (pure) -------------------------------------------------------------
    @property
    def bridge_namespace(self) -> str:
        return f"{self.prefix}-{self.run_id}-br"

    @property
    def nodes(self) -> tuple[EmulatedNode, ...]:
        """The emulated nodes, in cluster order (derived from the arguments; no I/O)."""
        if self._nodes is None:
            self._nodes = self._layout()
        return self._nodes

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of this cluster: one per node, then the bridge's."""
        return [n.namespace for n in self.nodes] + [self.bridge_namespace]

    @property
    def active(self) -> bool:
        return self._active

    def node(self, node_name: str) -> EmulatedNode:
        """The emulated node ``node_name``; ``UnknownNameError`` names the known nodes."""
        index = self.cluster.node_names.index(self.cluster.node(node_name).name)
        return self.nodes[index]

    def address_of(self, node_name: str) -> str:
        """The node's address inside the emulated cluster (may differ from ``Node.address``)."""
        return self.node(node_name).address

    def namespace_of(self, node_name: str) -> str:
        return self.node(node_name).namespace

    @property
    def chief_address(self) -> str:
        return self.address_of(self.cluster.chief.name)

    def _layout(self) -> tuple[EmulatedNode, ...]:
        if not _PREFIX_RE.match(self.prefix):
            raise ConfigError(
                f"emulation prefix must be 1-5 lowercase letters/digits starting with a letter, "
                f"got {self.prefix!r}"
            )
        if not _RUN_ID_RE.match(self.run_id):
            raise ConfigError(
                f"emulation run_id must be 1-6 lowercase letters/digits, got {self.run_id!r}"
            )
        network = _subnet_network(self.subnet)
        if self.burst_bytes is not None and self.burst_bytes < 2048:
            raise ConfigError(
                f"burst_bytes must be >= 2048 (one MTU-sized packet must fit), "
                f"got {self.burst_bytes}"
            )
        nodes = self.cluster.nodes
        if len(nodes) > _MAX_NODES:
            raise ConfigError(
                f"an emulated cluster has at most {_MAX_NODES} nodes (one /24), got {len(nodes)}"
            )
        # keep the cluster's own addresses where they are free host addresses of the subnet
        hosts = {str(h) for h in network.hosts()}
        chosen: dict[int, str] = {}
        for i, n in enumerate(nodes):
            if n.address in hosts and n.address not in chosen.values():
                chosen[i] = n.address
        taken = set(chosen.values())
        for i, _ in enumerate(nodes):
            if i in chosen:
                continue
            k = i + 1
            while f"{self.subnet}.{k}" in taken or f"{self.subnet}.{k}" not in hosts:
                k = k % _MAX_NODES + 1
            chosen[i] = f"{self.subnet}.{k}"
            taken.add(chosen[i])
        out = []
        rank = 0
        chief = self.cluster.chief.name
        for i, n in enumerate(nodes):
            rate = int(round(n.bandwidth_gbps * 1e9))
            out.append(
                EmulatedNode(
                    name=n.name,
                    index=i,
                    namespace=f"{self.prefix}-{self.run_id}-n{i}",
                    address=chosen[i],
                    veth=f"{self.prefix}{self.run_id}v{i}",
                    workers=n.workers,
                    ranks=tuple(range(rank, rank + n.workers)),
                    bandwidth_gbps=n.bandwidth_gbps,
                    rate_bit_per_s=rate,
                    burst_bytes=self.burst_bytes or default_burst_bytes(rate),
                    latency_ms=n.latency_ms,
                    chief=n.name == chief,
                )
            )
            rank += n.workers
        return tuple(out)

    # -- processes inside a node ----------------------------------------------------------------
    def exec_prefix(self, node_name: str) -> list[str]:
        """argv prefix that runs a command inside the node's namespace."""
        return ["ip", "netns", "exec", self.namespace_of(node_name)]

    def env_for(self, node_name: str, master_port: int | None = None) -> dict[str, str]:
        """Environment for a torch.distributed (gloo) worker on ``node_name``."""
        self.node(node_name)
        env = {
            "GLOO_SOCKET_IFNAME": NODE_IFNAME,
            "OMP_NUM_THREADS": "1",
            "TORCH_CPP_LOG_LEVEL": "ERROR",
            "MASTER_ADDR": self.chief_address,
        }
        if master_port is not None:
            env["MASTER_PORT"] = str(master_port)
        return env

    def popen(
        self,
        node_name: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        **popen_kwargs: Any,
    ) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the node's namespace.

        The environment is this process's, plus :meth:`env_for`, plus ``env``. The process is
        killed by :meth:`stop` if it still runs then.
        """
        if not self._active:
            raise ConfigError(
                f"emulated cluster {self.cluster.name!r} is not started; use it as a context "
                f"manager or call start() first"
            )
        full_env = dict(os.environ)
        full_env.update(self.env_for(node_name))
        if env:
            full_env.update(env)
        proc: subprocess.Popen[Any] = subprocess.Popen(
            [*self.exec_prefix(node_name), *argv], env=full_env, **popen_kwargs
        )
        self._procs.append(proc)
        return proc

    def measure_link_rate(
        self,
        src_node: str,
        dst_node: str,
        *,
        nbytes: int = 32 * 1024 * 1024,
        port: int = 29400,
        timeout_s: float = 60.0,
    ) -> float:
        """Send ``nbytes`` over TCP from ``src_node`` to ``dst_node``; return the rate in bit/s.

        The rate is measured by the receiver, from its first to its last byte.
        """
        dst_addr = self.address_of(dst_node)
        recv = self.popen(
            dst_node,
            [sys.executable, "-I", "-c", _RECEIVER, dst_addr, str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        send = None
        try:
            assert recv.stdout is not None
            first = recv.stdout.readline()
            if first.strip() != "listening":
                raise ConfigError(f"link-rate receiver on {dst_node!r} failed to listen: {first!r}")
            send = self.popen(
                src_node,
                [sys.executable, "-I", "-c", _SENDER, dst_addr, str(port), str(nbytes)],
            )
            out, _ = recv.communicate(timeout=timeout_s)
            send.wait(timeout=timeout_s)
            res = json.loads(out.strip().splitlines()[-1])
        finally:
            for p in (recv, send):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
        if res["bytes"] < nbytes or res["seconds"] <= 0:
            raise ConfigError(f"link-rate transfer {src_node}->{dst_node} incomplete: {res}")
        return float(res["measured_bytes"] * 8 / res["seconds"])

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> EmulatedCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> EmulatedCluster:
        """Create the namespaces, veth pairs, bridge, addresses and shaping."""
        if self._active:
            return self
        _require_tools()
        nodes = self.nodes  # validates the arguments
        existing = set(list_namespaces())
        clash = [ns for ns in self.namespaces if ns in existing]
        if clash:
            raise ConfigError(
                f"network namespace {clash[0]!r} already exists (run_id {self.run_id!r} in use; "
                f"pick another or run cleanup_leftovers({self.prefix!r}))"
            )
        self._active = True
        self._stopping = False
        with _LIVE_LOCK:
            _LIVE.add(self)
        _ensure_atexit()
        self._install_signal_handlers()
        try:
            _write_owner_record(self.prefix, self.run_id, self.namespaces)
            self._create(nodes)
        except BaseException:
            self.stop()
            raise
        logger.info(
            "emulated cluster %r up: %s",
            self.cluster.name,
            ", ".join(f"{n.name}={n.address}@{n.bandwidth_gbps:g}Gbit/s" for n in nodes),
        )
        return self

    def _create(self, nodes: Sequence[EmulatedNode]) -> None:
        br = self.bridge_namespace
        self._add_namespace(br)
        _run(["ip", "-n", br, "link", "set", "lo", "up"])
        _run(["ip", "-n", br, "link", "add", BRIDGE_IFNAME, "type", "bridge"])
        _run(["ip", "-n", br, "link", "set", BRIDGE_IFNAME, "up"])
        for n in nodes:
            self._add_namespace(n.namespace)
            _run(["ip", "link", "add", n.veth, "netns", br, "type", "veth",
                  "peer", "name", NODE_IFNAME, "netns", n.namespace])
            _run(["ip", "-n", br, "link", "set", n.veth, "master", BRIDGE_IFNAME])
            _run(["ip", "-n", br, "link", "set", n.veth, "up"])
            _run(["ip", "-n", n.namespace, "addr", "add", f"{n.address}/24", "dev", NODE_IFNAME])
            _run(["ip", "-n", n.namespace, "link", "set", NODE_IFNAME, "up"])
            _run(["ip", "-n", n.namespace, "link", "set", "lo", "up"])
            _run(["tc", "-n", n.namespace, "qdisc", "add", "dev", NODE_IFNAME, "root",
                  *_tbf_args(n)])
            if self.shape_ingress:
                _run(["tc", "-n", br, "qdisc", "add", "dev", n.veth, "root", *_tbf_args(n)])

    def _add_namespace(self, ns: str) -> None:
        _run(["ip", "netns", "add", ns])
        self._created.append(ns)

    def stop(self) -> None:
        """Kill every process left in the namespaces and delete them (idempotent)."""
        if not self._active or self._stopping:
            return
        self._stopping = True
        try:
            self._terminate_procs()
            for ns in self._created:
                _kill_namespace_pids(ns)
            for ns in reversed(self._created):
                _delete_namespace(ns)
            _remove_owner_record(self.prefix, self.run_id)
            logger.info("emulated cluster %r torn down", self.cluster.name)
        finally:
            self._created = []
            self._procs = []
            self._active = False
            self._stopping = False
            with _LIVE_LOCK:
                _LIVE.discard(self)
            self._restore_signal_handlers()
            deferred, self._deferred_signal = self._deferred_signal, None
            if deferred is not None:
                self._reraise(deferred, None)

    def _terminate_procs(self) -> None:
        live = [p for p in self._procs if p.poll() is None]
        for p in live:
            p.terminate()
        deadline = time.monotonic() + 2.0
        for p in live:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    # -- signals --------------------------------------------------------------------------------
    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            logger.debug("not in the main thread: no signal handlers (atexit still cleans up)")
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._prev_handlers[sig] = signal.getsignal(sig)
            signal.signal(sig, self._on_signal)

    def _restore_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in self._prev_handlers.items():
            # leave a handler installed later (e.g. by another emulated cluster) in place: it
            # chains to ours, which from now on only passes the signal on
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, prev if prev is not None else signal.SIG_DFL)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stopping:
            self._deferred_signal = signum  # re-raised once teardown is complete
            return
        if self._active:
            logger.warning(
                "%s: tearing down emulated cluster %r", signal.Signals(signum).name,
                self.cluster.name,
            )
            self.stop()
        self._reraise(signum, frame)

    def _reraise(self, signum: int, frame: FrameType | None) -> None:
        prev = self._prev_handlers.get(signum, signal.SIG_DFL)
        if callable(prev):
            prev(signum, frame)  # e.g. default_int_handler raises KeyboardInterrupt
        elif prev == signal.SIG_IGN:
            return
        else:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def __repr__(self) -> str:
        state = "active" if self._active else "stopped"
        return f"EmulatedCluster({self.cluster.name!r}, run_id={self.run_id!r}, {state})"


# -- probes and leftovers -----------------------------------------------------------------------
def available(prefix: str = "ast") -> tuple[bool, str]:
    """Whether emulated clusters work here: root, ``ip``/``tc``, namespaces and ``tbf``.

    Creates and deletes one probe namespace. Returns ``(ok, reason)``; ``reason`` says what is
    missing when ``ok`` is false.
    """
    try:
        _require_tools()
    except ConfigError as e:
        return False, str(e)
    probe = f"pr{os.getpid() % 10000:04d}"
    ns = f"{prefix}-{probe}-br"
    _write_owner_record(prefix, probe, [ns])  # a concurrent cleanup spares a live probe
    try:
        _run(["ip", "netns", "add", ns])
    except ConfigError as e:
        _remove_owner_record(prefix, probe)
        return False, f"cannot create a network namespace ({e}); {_REQUIRES}"
    try:
        _run(["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "tbf",
              "rate", "1gbit", "burst", "64kb", "latency", "50ms"])
    except ConfigError as e:
        return False, f"tc tbf does not work ({e})"
    finally:
        _delete_namespace(ns)
        _remove_owner_record(prefix, probe)
    return True, "root, iproute2, network namespaces and tbf are available"


def list_namespaces() -> list[str]:
    """Names of all network namespaces (``ip netns list``)."""
    out = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def cleanup_leftovers(prefix: str = "ast", *, include_live: bool = False,
                      run_id: str | None = None) -> list[str]:
    """Delete namespaces that emulated clusters with ``prefix`` left behind; return their names.

    A namespace named ``<prefix>-<run_id>-n<i>`` or ``<prefix>-<run_id>-br`` (the bridge's) is a
    leftover unless the process that created it still runs (its owner record names a live pid);
    ``include_live`` deletes those as well. ``run_id``: only that run's namespaces. Processes
    still inside a leftover namespace are killed first.
    """
    _require_tools()
    if not _PREFIX_RE.match(prefix):
        raise ConfigError(
            f"emulation prefix must be 1-5 lowercase letters/digits starting with a letter, "
            f"got {prefix!r}"
        )
    if run_id is not None and not _RUN_ID_RE.match(run_id):
        raise ConfigError(f"emulation run_id must be 1-6 lowercase letters/digits, got {run_id!r}")
    pattern = re.compile(rf"^{re.escape(prefix)}-([a-z0-9]{{1,6}})-(n\d+|br)$")
    by_run: dict[str, list[str]] = {}
    for ns in list_namespaces():
        m = pattern.match(ns)
        if m and (run_id is None or m.group(1) == run_id):
            by_run.setdefault(m.group(1), []).append(ns)
    removed: list[str] = []
    for run, names in sorted(by_run.items()):
        if not include_live and _owner_alive(prefix, run):
            logger.info("namespaces of run %s-%s belong to a live process; kept", prefix, run)
            continue
        for ns in names:
            _kill_namespace_pids(ns)
        for ns in sorted(names):
            if _delete_namespace(ns):
                removed.append(ns)
        _remove_owner_record(prefix, run)
    if removed:
        logger.info("removed %d leftover namespaces: %s", len(removed), ", ".join(removed))
    return removed


# -- helpers ------------------------------------------------------------------------------------
def _subnet_network(subnet: str) -> ipaddress.IPv4Network:
    if not _SUBNET_RE.match(subnet):
        raise ConfigError(f"emulation subnet must be three octets like '10.88.0', got {subnet!r}")
    try:
        net = ipaddress.IPv4Network(f"{subnet}.0/24")
    except ValueError as e:
        raise ConfigError(f"emulation subnet {subnet!r} is not a valid /24: {e}") from e
    if not net.is_private or net.is_loopback:
        raise ConfigError(f"emulation subnet must be a private /24, got {subnet!r}")
    return net


def _tbf_args(n: EmulatedNode) -> list[str]:
    return ["tbf", "rate", f"{n.rate_bit_per_s}bit", "burst", str(n.burst_bytes),
            "latency", f"{TBF_QUEUE_LATENCY_MS}ms"]


def _require_tools() -> None:
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise ConfigError(f"{' and '.join(missing)} not found on PATH; {_REQUIRES}")
    if os.geteuid() != 0:
        raise ConfigError(f"not running as root (euid {os.geteuid()}); {_REQUIRES}")


def _run(argv: Sequence[str]) -> str:
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"`{' '.join(argv)}` failed: {e}") from e
    if res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().replace("\n", " ")
        raise ConfigError(f"`{' '.join(argv)}` failed (exit {res.returncode}): {msg}")
    return res.stdout


def _kill_namespace_pids(ns: str) -> None:
    try:
        out = _run(["ip", "netns", "pids", ns])
    except ConfigError:
        return
    pids = [int(p) for p in out.split() if p.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except OSError as e:
            logger.warning("cannot kill pid %d in namespace %s: %s", pid, ns, e)
    if pids:
        logger.debug("killed %d processes in namespace %s", len(pids), ns)


def _delete_namespace(ns: str) -> bool:
    try:
        _run(["ip", "netns", "del", ns])
        return True
    except ConfigError as e:
        if ns in _safe_list_namespaces():
            logger.warning("could not delete namespace %s: %s", ns, e)
        return False


def _safe_list_namespaces() -> list[str]:
    try:
        return list_namespaces()
    except ConfigError:
        return []


def _owner_path(prefix: str, run_id: str) -> Path:
    return STATE_DIR / f"{prefix}-{run_id}.json"


def _proc_start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # field 22 (starttime); the command name (field 2) may contain spaces, so split after ')'
    return int(stat.rsplit(")", 1)[1].split()[19])


def _write_owner_record(prefix: str, run_id: str, namespaces: list[str]) -> None:
    pid = os.getpid()
    record = {"pid": pid, "start_ticks": _proc_start_ticks(pid), "namespaces": namespaces}
    try:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        # whole or not at all: a concurrent cleanup never reads half a record as a dead owner
        atomic_write(_owner_path(prefix, run_id), json.dumps(record).encode(), "owner record")
    except (OSError, AutosyncError) as e:  # the record only protects live clusters from cleanup_leftovers
        logger.warning("cannot write owner record under %s: %s", STATE_DIR, e)


def _remove_owner_record(prefix: str, run_id: str) -> None:
    try:
        _owner_path(prefix, run_id).unlink(missing_ok=True)
    except OSError as e:
        logger.warning("cannot remove owner record: %s", e)


def _owner_alive(prefix: str, run_id: str) -> bool:
    try:
        record = json.loads(_owner_path(prefix, run_id).read_text())
        pid = int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    ticks = _proc_start_ticks(pid)
    return ticks is not None and ticks == record.get("start_ticks")


def _ensure_atexit() -> None:
    global _ATEXIT_REGISTERED
    with _LIVE_LOCK:
        if _ATEXIT_REGISTERED:
            return
        _ATEXIT_REGISTERED = True
    atexit.register(_stop_all)


def _stop_all() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for c in live:
        logger.warning("interpreter exit: tearing down emulated cluster %r", c.cluster.name)
        try:
            c.stop()
        except Exception as e:  # keep going: the other clusters must be torn down too
            logger.warning("teardown of %r failed: %s", c, e)


# receiver/sender of measure_link_rate (run with ``python -c`` inside the node namespaces)
_RECEIVER = r"""
import json, socket, sys, time
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], int(sys.argv[2])))
srv.listen(1)
print("listening", flush=True)
conn, _ = srv.accept()
buf = bytearray(1 << 20)
total = first = 0
t0 = t1 = None
while True:
    k = conn.recv_into(buf)
    if not k:
        break
    t1 = time.perf_counter()
    if t0 is None:
        t0, first = t1, k
    total += k
print(json.dumps({"bytes": total, "measured_bytes": total - first,
                  "seconds": (t1 - t0) if t0 is not None else 0.0}), flush=True)
"""

_SENDER = r"""
import socket, sys, time
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(100):
    try:
        s = socket.create_connection((addr, port), timeout=10)
        break
    except OSError:
        time.sleep(0.05)
else:
    sys.exit("cannot connect")
chunk = memoryview(bytes(1 << 20))
while n > 0:
    k = min(n, len(chunk))
    s.sendall(chunk[:k])
    n -= k
s.shutdown(socket.SHUT_WR)
s.close()
"""
