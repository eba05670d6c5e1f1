"""Emulated clusters: layout (pure), shaping rate, teardown on success/error/signal/kill, leftovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime import emulation
from autosync_transfer.runtime.emulation import (
    EmulatedCluster,
    available,
    cleanup_leftovers,
    default_burst_bytes,
    list_namespaces,
)


def _cluster(bandwidth_gbps: float = 0.2, n: int = 2, base: str = "10.88.0") -> Cluster:
    return Cluster(
        name="t",
        nodes=tuple(
            Node(name=f"w{i}", address=f"{base}.{i + 1}", workers=1 + (i == 0),
                 bandwidth_gbps=bandwidth_gbps, latency_ms=0.5 * i, chief=(i == 0))
            for i in range(n)
        ),
    )


@pytest.fixture(scope="module")
def netns() -> None:
    ok, why = available()
    if not ok:
        pytest.skip(why)


# -- pure: names, addresses, environment --------------------------------------------------------
def test_layout_names_addresses_and_env() -> None:
    ec = EmulatedCluster(_cluster(), run_id="abc123")
    assert ec.namespaces == ["ast-abc123-n0", "ast-abc123-n1", "ast-abc123-br"]
    assert all(len(n.veth) <= 15 for n in ec.nodes)
    assert [ec.address_of(f"w{i}") for i in range(2)] == ["10.88.0.1", "10.88.0.2"]
    assert [n.ranks for n in ec.nodes] == [(0, 1), (2,)]
    assert ec.node("w1").latency_ms == 0.5
    assert ec.node("w0").burst_bytes == 64 * 1024
    assert default_burst_bytes(2e9) == 250_000
    assert ec.exec_prefix("w1") == ["ip", "netns", "exec", "ast-abc123-n1"]
    env = ec.env_for("w1", master_port=29555)
    assert env == {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1",
                   "TORCH_CPP_LOG_LEVEL": "ERROR", "MASTER_ADDR": "10.88.0.1",
                   "MASTER_PORT": "29555"}
    assert EmulatedCluster(_cluster(), run_id="x").active is False  # constructor does nothing


def test_addresses_outside_subnet_are_reassigned() -> None:
    c = Cluster(name="t", nodes=(
        Node(name="a", address="192.168.1.7", workers=1, bandwidth_gbps=1, chief=True),
        Node(name="b", address="10.88.5.1", workers=1, bandwidth_gbps=1),
        Node(name="c", address="10.88.5.9", workers=1, bandwidth_gbps=1),
    ))
    ec = EmulatedCluster(c, subnet="10.88.5")
    assert [ec.address_of(n) for n in "abc"] == ["10.88.5.2", "10.88.5.1", "10.88.5.9"]
    assert ec.env_for("c")["MASTER_ADDR"] == "10.88.5.2"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"prefix": "Bad"}, "prefix"), ({"run_id": "toolong1"}, "run_id"),
     ({"subnet": "8.8.8"}, "private"), ({"subnet": "10.88"}, "three octets"),
     ({"burst_bytes": 100}, "burst_bytes")],
)
def test_bad_arguments_raise_config_error(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EmulatedCluster(_cluster(), **kwargs).nodes  # type: ignore[arg-type]


def test_clear_error_without_root_or_iproute2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emulation.os, "geteuid", lambda: 1000)
    with pytest.raises(ConfigError, match=r"not running as root .* need root and iproute2"):
        EmulatedCluster(_cluster()).start()
    assert available()[0] is False
    monkeypatch.setattr(emulation.shutil, "which", lambda tool: None if tool == "tc" else "/x")
    with pytest.raises(ConfigError, match=r"^tc not found on PATH; emulated clusters need root"):
        EmulatedCluster(_cluster()).start()


# -- real namespaces ----------------------------------------------------------------------------
@pytest.mark.netns
@pytest.mark.exclusive  # a rate measured on the machine: alone
def test_shaped_rate_200mbit(netns: None) -> None:
    with EmulatedCluster(_cluster(0.2)) as ec:
        rate = ec.measure_link_rate("w0", "w1", nbytes=20 * 1024 * 1024)  # ~0.9 s
    assert 0.7 * 0.2e9 <= rate <= 1.05 * 0.2e9, f"{rate / 1e6:.1f} Mbit/s"


_GLOO_WORKER = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.full((1 << 18,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    print(float(t[0]), flush=True)
    dist.destroy_process_group()
""")


@pytest.mark.netns
def test_gloo_all_reduce_across_namespaces(netns: None) -> None:
    c = Cluster(name="t", nodes=(
        Node(name="a", address="10.88.0.1", workers=1, bandwidth_gbps=1, chief=True),
        Node(name="b", address="10.88.0.2", workers=1, bandwidth_gbps=1),
    ))
    with EmulatedCluster(c) as ec:
        procs = [
            ec.popen(name, [sys.executable, "-c", _GLOO_WORKER],
                     env={"RANK": str(r), "WORLD_SIZE": "2", "MASTER_PORT": "29531"},
                     stdout=subprocess.PIPE, text=True)
            for r, name in enumerate("ab")
        ]
        outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert [float(o.split()[-1]) for o in outs] == [3.0, 3.0]


@pytest.mark.netns
def test_teardown_on_exit_and_on_error(netns: None) -> None:
    with EmulatedCluster(_cluster()) as ec:
        names = ec.namespaces
        assert set(names) <= set(list_namespaces())
    assert not set(names) & set(list_namespaces())
    ec2 = EmulatedCluster(_cluster())
    with pytest.raises(RuntimeError, match="boom"), ec2:
        assert set(ec2.namespaces) <= set(list_namespaces())
        raise RuntimeError("boom")
    assert not set(ec2.namespaces) & set(list_namespaces())
    assert not ec2.active


@pytest.mark.netns
def test_teardown_after_worker_sigkill_and_with_stray_process(netns: None) -> None:
    with EmulatedCluster(_cluster()) as ec:
        victim = ec.popen("w0", ["sleep", "60"])
        survivor = ec.popen("w1", ["sleep", "60"])
        stray = subprocess.Popen([*ec.exec_prefix("w1"), "sleep", "60"])  # not tracked by popen
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=5) == -signal.SIGKILL
        names = ec.namespaces
    assert survivor.poll() is not None
    assert stray.wait(timeout=5) == -signal.SIGKILL
    assert not set(names) & set(list_namespaces())


_OWNER = textwrap.dedent("""
    import json, signal, sys, time
    # a shell's background job starts with SIGINT ignored; an interactive user's process does not
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from autosync_transfer.domains.cluster import Cluster, Node
    from autosync_transfer.runtime.emulation import EmulatedCluster
    c = Cluster(name="t", nodes=tuple(Node(name=f"w{i}", address=f"10.88.0.{i + 1}", workers=1,
                bandwidth_gbps=0.2, chief=i == 0) for i in range(2)))
    ec = EmulatedCluster(c, prefix=sys.argv[1]).start()
    ec.popen("w0", ["sleep", "60"])
    print(json.dumps(ec.namespaces), flush=True)
    time.sleep(60)
""")


def _start_owner(prefix: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-c", _OWNER, prefix], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


@pytest.mark.netns
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_tears_down_and_reraises(netns: None, sig: int) -> None:
    proc, names = _start_owner("asts")
    assert set(names) <= set(list_namespaces())
    proc.send_signal(sig)
    rc = proc.wait(timeout=10)
    assert rc == -sig  # SIGINT: KeyboardInterrupt, which Python turns into death by SIGINT
    assert not set(names) & set(list_namespaces())


@pytest.mark.netns
def test_cleanup_leftovers_of_killed_run(netns: None) -> None:
    proc, names = _start_owner("astq")
    try:
        assert cleanup_leftovers("astq") == []  # owner alive: kept
        assert set(names) <= set(list_namespaces())
    finally:
        proc.send_signal(signal.SIGKILL)  # no teardown possible: leaves namespaces and a process
        proc.wait(timeout=5)
    time.sleep(0.1)
    assert set(names) <= set(list_namespaces())
    assert os.path.exists(f"/proc/{int(_ns_pids(names[0])[0])}")
    assert sorted(cleanup_leftovers("astq")) == sorted(names)
    assert not set(names) & set(list_namespaces())


def _ns_pids(ns: str) -> list[str]:
    return subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                          check=True).stdout.split()


@pytest.mark.netns
def test_cleanup_command_and_launch_remove_only_dead_runs(netns: None, cli) -> None:
    """A SIGKILLed run's namespaces go (``cleanup``, and the start of every emulated launch);
    a live run's stay."""
    from autosync_transfer.runtime.launch import EmulatedLauncher

    live, live_names = _start_owner("asth")
    dead, dead_names = _start_owner("asth")
    dead2 = None
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=5)
        assert set(dead_names) <= set(list_namespaces())
        res = cli("cleanup", "--prefix", "asth", "--json")
        assert res.code == 0, res.err
        assert sorted(json.loads(res.out)["removed"]) == sorted(dead_names)
        assert set(live_names) <= set(list_namespaces())
        assert not set(dead_names) & set(list_namespaces())
        res = cli("cleanup", "--prefix", "asth", "--run", "Bad-Id")
        assert res.code == 2 and "Bad-Id" in res.err and len(res.err.splitlines()) == 1

        dead2, dead2_names = _start_owner("asth")
        dead2.send_signal(signal.SIGKILL)
        dead2.wait(timeout=5)
        launcher = EmulatedLauncher(prefix="asth")
        try:
            launcher.start(_cluster(n=2, base="10.88.7"))  # removes the dead run's first
            assert not set(dead2_names) & set(list_namespaces())
            assert set(live_names) <= set(list_namespaces())
            mine = launcher._emu.namespaces
            assert set(mine) <= set(list_namespaces())
        finally:
            launcher.stop()
        assert not set(mine) & set(list_namespaces())
    finally:
        for p in (live, dead, dead2):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)  # tears its cluster down
                p.wait(timeout=10)
        cleanup_leftovers("asth")
    assert not [ns for ns in list_namespaces() if ns.startswith("asth-")]
