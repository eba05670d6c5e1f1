"""Strategy files (``strategies validate DOMAIN FILE``, ``strategies show FILE``): JSON with one
value replaced anywhere in a valid strategy, arbitrary JSON, text and nesting; AutoDist protobuf
bytes: a valid file with bytes flipped, cut, or spliced, and arbitrary bytes."""

from __future__ import annotations

import json
from functools import lru_cache

from hypothesis import given
from hypothesis import strategies as st

from fuzz_harness import check, files, fuzz, json_values, nasty_values, run_cli, workdir

DOMAIN = "bert-3l-A"


@lru_cache(maxsize=1)
def _good() -> tuple[dict, bytes]:
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.strategies.autodist import strategy_to_autodist
    from autosync_transfer.strategies.builders import build

    domain = get_domain(DOMAIN)
    s = build("partitioned_ps", domain)
    return json.loads(s.to_json()), strategy_to_autodist(s, domain.cluster)


def _paths(data: object, prefix: tuple = ()) -> list[tuple]:
    """Every path into ``data`` (keys and indices)."""
    found = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data[:3]):
            found += _paths(v, (*prefix, i))
    return found


def _check_file(content: bytes, surface: str, name: str = "s.json", validate: bool = True) -> None:
    with workdir() as d:
        path = d / name
        path.write_bytes(content)
        before = files(d)
        argv = ("strategies", "validate", DOMAIN, str(path)) if validate else \
            ("strategies", "show", str(path))
        check(run_cli(*argv), surface, written=files(d) - before)


@fuzz(200)
@given(st.data(), nasty_values(), st.booleans())
def test_json_one_value_replaced(data: st.DataObject, value: object, validate: bool) -> None:
    strategy = json.loads(json.dumps(_good()[0]))
    path = data.draw(st.sampled_from(_paths(strategy)[1:]))
    target = strategy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    _check_file(json.dumps(strategy, default=str).encode(), "strategy JSON", validate=validate)


@fuzz(80)
@given(json_values(), st.booleans())
def test_json_any_value(value: object, validate: bool) -> None:
    _check_file(json.dumps(value).encode(), "strategy JSON", validate=validate)


@fuzz(60)
@given(st.text(max_size=200), st.booleans())
def test_json_any_text(text: str, validate: bool) -> None:
    _check_file(text.encode("utf-8", "surrogatepass"), "strategy JSON", validate=validate)


@fuzz(20)
@given(st.integers(1, 100_000), st.sampled_from(["[", '{"id": ', '{"nodes": [']))
def test_json_deep_nesting(depth: int, opener: str) -> None:
    _check_file((opener * depth).encode(), "strategy JSON")


@fuzz(20)
@given(st.sampled_from(['{"id": "x", "nodes": [], "kind": 1' + "0" * 5000 + "}",
                        '{"id": NaN, "nodes": []}', '{"id": "x", "nodes": [], "kind": Infinity}',
                        '{"id": "\\ud800", "nodes": []}', '\ufeff{"id": "x", "nodes": []}',
                        '{"id": "[/]", "nodes": []}', '{"id": "[red]x", "nodes": []}',
                        '{"id": "x", "nodes": [], "id": "y"}']), st.booleans())
def test_json_edge_cases(text: str, validate: bool) -> None:
    _check_file(text.encode("utf-8", "surrogatepass"), "strategy JSON", validate=validate)


@fuzz(150)
@given(st.data(), st.sampled_from(["flip", "cut", "splice", "repeat"]), st.booleans())
def test_autodist_mutated(data: st.DataObject, how: str, validate: bool) -> None:
    buf = bytearray(_good()[1])
    i = data.draw(st.integers(0, len(buf) - 1))
    if how == "flip":
        buf[i] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        del buf[i:]
    elif how == "splice":
        buf[i:i] = data.draw(st.binary(min_size=1, max_size=16))
    else:
        buf = buf[:i] + buf[i:] * data.draw(st.integers(2, 4))
    _check_file(bytes(buf), "AutoDist bytes", name="s.pb", validate=validate)


@fuzz(80)
@given(st.binary(max_size=300), st.booleans())
def test_autodist_any_bytes(raw: bytes, validate: bool) -> None:
    _check_file(b"\n" + raw, "AutoDist bytes", name="s.pb", validate=validate)


@fuzz(10)
@given(st.sampled_from(["/dev/zero", "/dev/urandom", "/", "/nonexistent.json"]), st.booleans())
def test_special_paths(path: str, validate: bool) -> None:
    with workdir() as d:
        before = files(d)
        argv = ("strategies", "validate", DOMAIN, path) if validate else \
            ("strategies", "show", path)
        check(run_cli(*argv), "strategy JSON", written=files(d) - before)


@fuzz(60)
@given(st.lists(st.one_of(st.just("GOOD"), st.just("torch_ddp"), json_values().map(json.dumps),
                          st.text(max_size=40)), max_size=4),
       st.sampled_from(["utf-8", "latin-1-garbage", "nested"]))
def test_strategies_jsonl(lines: list, how: str) -> None:
    """The strategies file of a torchrun collection (``worker --strategies``), as the library
    reads it on every rank: a ConfigError naming the line, or the lines to measure."""
    from fuzz_harness import CASES

    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.dataset.torchrun import read_strategies
    from autosync_transfer.errors import ConfigError

    good = json.dumps(_good()[0])
    text = "\n".join(good if ln == "GOOD" else ln for ln in lines)
    raw = text.encode("utf-8", "surrogatepass")
    if how == "latin-1-garbage":
        raw += b"\n\xff\xfe"
    elif how == "nested":
        raw += b"\n" + b"[" * 10_000
    CASES["strategies JSONL"] += 1
    with workdir() as d:
        path = d / "s.jsonl"
        path.write_bytes(raw)
        try:
            read_strategies(path, get_domain(DOMAIN))
        except ConfigError as e:
            assert "\n" not in str(e)
