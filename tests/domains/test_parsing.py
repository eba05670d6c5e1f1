"""Bounded readers of user files: nesting, aliases, size, huge numbers, FIFOs and devices."""

from __future__ import annotations

import os
import threading

import pytest

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.parsing import (MAX_DEPTH, MAX_YAML_ALIASES, is_safe_name,
                                               load_json, load_yaml, read_bounded)
from autosync_transfer.errors import SpecError
from autosync_transfer.strategies.types import Strategy


def test_yaml_nesting_is_bounded() -> None:
    assert load_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, "x") is not None
    with pytest.raises(SpecError, match=f"x is not valid YAML: nested deeper than {MAX_DEPTH}"):
        load_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "x")
    with pytest.raises(SpecError, match="nested deeper"):
        load_yaml("[" * 100_000, "x")  # was a RecursionError


def test_yaml_aliases_are_bounded() -> None:
    ok = "a: &a [1]\n" + "".join(f"b{i}: *a\n" for i in range(MAX_YAML_ALIASES))
    assert len(load_yaml(ok, "x")) == MAX_YAML_ALIASES + 1
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 13)]
    with pytest.raises(SpecError, match=f"more than {MAX_YAML_ALIASES} aliases"):
        load_yaml("\n".join(lines), "x")  # a billion laughs


@pytest.mark.parametrize("text", ["a: !!int 0x" + "f" * 5000, "a: " + "9" * 5000, "\x00",
                                  "!!python/object/apply:os.system ['true']", "a: 1\n---\nb: 2",
                                  "a: !!timestamp 2001-13-45"])
def test_yaml_failures_are_spec_errors(text: str) -> None:
    with pytest.raises(SpecError, match="resource spec is not valid YAML"):
        Cluster.from_yaml(text)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000, '{"id": 1' + "0" * 5000 + "}",
                                  "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)])
def test_json_failures_are_spec_errors(text: str) -> None:
    with pytest.raises(SpecError, match="strategy is not valid JSON"):
        Strategy.from_json(text)
    with pytest.raises(SpecError):
        load_json(text, "x")


def test_read_bounded_refuses_devices_fifos_and_large_files(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(SpecError, match="is not a regular file"):
        read_bounded("/dev/zero", 10, "x")
    fifo = tmp_path / "spec.yml"
    os.mkfifo(fifo)
    done: list[BaseException] = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(SpecError, Cluster.from_file,
                                                                  fifo).value), daemon=True)
    t.start()
    t.join(10)
    assert done and "is not a regular file" in str(done[0])  # no hang on a FIFO
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 101)
    with pytest.raises(SpecError, match="larger than"):
        read_bounded(big, 100, "x")
    assert read_bounded(big, 101, "x") == b" " * 101
    with pytest.raises(IsADirectoryError):
        read_bounded(tmp_path, 100, "x")


def test_safe_names() -> None:
    assert all(map(is_safe_name, ["lab", "lab_2", "x.y", "A"]))
    assert not any(map(is_safe_name, ["", "a-b", "../x", "a/b", ".hidden", "[red]x", "a b",
                                      "x" * 65, "é"]))


def test_cluster_bounds() -> None:
    with pytest.raises(SpecError, match="'cpus' lists more than 1024 devices"):
        Cluster.from_yaml("nodes: [{address: 10.0.0.1, cpus: [" + ",".join(["0"] * 1025) + "]}]")
    with pytest.raises(SpecError, match="'address' must be a host name or IP address"):
        Cluster.from_yaml('nodes: [{address: "a\\nb", cpus: [0]}]')
    c = Cluster.from_yaml("nodes: [{address: 'fe80::1%eth0', cpus: [0]}]")
    assert c.nodes[0].address == "fe80::1%eth0"
