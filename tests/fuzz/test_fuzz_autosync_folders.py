"""AutoSync dataset folders (``datasets import-autosync ROOT --store PATH``): trees of v1/v2
layout whose strategy, runtime and resource-spec files are valid, mutated or garbage, and whose
folder names are nasty. A failed import writes no store."""

from __future__ import annotations

import json
from functools import lru_cache

import yaml
from hypothesis import given
from hypothesis import strategies as st

from fuzz_harness import NASTY_STRINGS, check, files, fuzz, json_values, run_cli, workdir

SPEC = {"nodes": [{"address": "10.0.0.1", "gpus": [0, 1], "chief": True,
                   "network_bandwidth": 10}]}
FOLDER_NAMES = [n for n in NASTY_STRINGS if n and "/" not in n and "\x00" not in n
                and n not in (".", "..") and len(n) < 200] + ["BERT", "bert_large", "cluster-A"]


@lru_cache(maxsize=1)
def _good_strategy() -> bytes:
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.strategies.autodist import strategy_to_autodist
    from autosync_transfer.strategies.builders import build

    domain = get_domain("bert-3l-A")
    cluster = Cluster.from_resource_spec(SPEC)
    from autosync_transfer.domains.domain import Domain

    d = Domain(name="bert-X", model=domain.model, cluster=cluster)
    return strategy_to_autodist(build("ps", d), cluster)


def _runtime() -> st.SearchStrategy[bytes]:
    good = st.builds(lambda a, ts: json.dumps({"average": a, "runtime": ts}).encode(),
                     st.floats(allow_nan=False, allow_infinity=False), st.lists(st.floats(
                         allow_nan=False, allow_infinity=False), max_size=3))
    nasty = st.one_of(
        json_values().map(lambda v: json.dumps(v).encode()),
        st.sampled_from([b"average: .nan", b"average: .inf", b"average: 1e999",
                         b"average: " + b"9" * 5000, b"{average: [" * 200, b"\xff\xfe",
                         b"average: 0.1\nruntime: [a, b]", b"average: !!binary AAAA",
                         b'{"average": 1' + b"0" * 400 + b"}", b"average: 0.5"]),
        st.binary(max_size=50))
    return st.one_of(good, nasty)


def _strategy() -> st.SearchStrategy[bytes]:
    def mutate(buf: bytes, i: int, b: int) -> bytes:
        i %= len(buf)
        return buf[:i] + bytes([buf[i] ^ b]) + buf[i + 1:]

    return st.one_of(st.just(b"GOOD"), st.tuples(st.integers(0, 10_000), st.integers(1, 255))
                     .map(lambda t: b"MUT%d,%d" % t), st.binary(max_size=60))


def _spec() -> st.SearchStrategy[bytes]:
    return st.one_of(st.just(yaml.safe_dump(SPEC).encode()),
                     json_values().map(lambda v: yaml.safe_dump(v).encode()),
                     st.text(max_size=80).map(str.encode),
                     st.sampled_from([b"[" * 1000, b"nodes: *x", b"\x00"]))


@fuzz(60)
@given(st.sampled_from(FOLDER_NAMES), st.sampled_from(FOLDER_NAMES), st.booleans(),
       st.lists(st.tuples(st.sampled_from(FOLDER_NAMES + ["1", "2", "3"]), _strategy(),
                          st.one_of(st.none(), _runtime()), st.sampled_from(["", ".json", ".yml"])),
                max_size=3),
       st.one_of(st.none(), _spec()))
def test_import_tree(model: str, cluster: str, v2: bool, samples: list, spec: bytes | None) -> None:
    with workdir() as d:
        root = d / "root"
        folder = root / model / cluster
        (folder / "strategies").mkdir(parents=True)
        for sid, strat, runtime, suffix in samples:
            if strat == b"GOOD":
                strat = _good_strategy()
            elif strat.startswith(b"MUT"):
                i, b = map(int, strat[3:].split(b","))
                buf = _good_strategy()
                i %= len(buf)
                strat = buf[:i] + bytes([buf[i] ^ b]) + buf[i + 1:]
            (folder / "strategies" / sid).write_bytes(strat)
            if runtime is not None:
                (folder / "runtime").mkdir(exist_ok=True)
                (folder / "runtime" / f"{sid}{suffix}").write_bytes(runtime)
            if spec is not None and v2:
                (folder / "resource_spec").mkdir(exist_ok=True)
                (folder / "resource_spec" / sid).write_bytes(spec)
        if spec is not None and not v2:
            (folder / "resource_spec.yml").write_bytes(spec)
        store = d / "out.jsonl"
        before = files(d)
        res = run_cli("datasets", "import-autosync", str(root), "--store", str(store))
        check(res, "AutoSync folders", written=files(d) - before)


@fuzz(10)
@given(st.sampled_from(["/dev/zero", "/nonexistent", "", "[/]", "/proc/self/fd"]))
def test_special_roots(root: str) -> None:
    with workdir() as d:
        before = files(d)
        res = run_cli("datasets", "import-autosync", root, "--store", str(d / "out.jsonl"))
        check(res, "AutoSync folders", written=files(d) - before)
