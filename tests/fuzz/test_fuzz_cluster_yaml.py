"""Resource-spec YAML (``clusters show FILE``, ``--cluster-file``): arbitrary text, valid specs
with one field replaced by a nasty value, nesting, aliases and tags."""

from __future__ import annotations

import copy

import yaml
from hypothesis import given
from hypothesis import strategies as st

from fuzz_harness import NASTY_STRINGS, check, files, fuzz, nasty_values, run_cli, workdir

GOOD = {"nodes": [{"address": "10.0.0.1", "cpus": [0, 1], "chief": True, "network_bandwidth": 1},
                  {"address": "10.0.0.2", "gpus": [0], "network_bandwidth": 10,
                   "latency_ms": 0.5, "ssh_config": "g"}],
        "ssh": {"g": {"username": "u", "port": 22}}}
FIELDS = [("nodes",), ("ssh",), ("name",), ("nodes", 0), ("nodes", 1, "address"),
          ("nodes", 0, "cpus"), ("nodes", 0, "cpus", 0), ("nodes", 1, "gpus"),
          ("nodes", 0, "chief"), ("nodes", 0, "network_bandwidth"), ("nodes", 1, "latency_ms"),
          ("nodes", 1, "ssh_config"), ("nodes", 0, "name"), ("ssh", "g", "port"),
          ("ssh", "g"), ("ssh", "g", "shared_envs")]


def _show(text: str, *extra: str) -> None:
    with workdir() as d:
        spec = d / "spec.yml"
        spec.write_text(text, encoding="utf-8", errors="surrogatepass")
        before = files(d)
        res = run_cli("clusters", "show", str(spec), *extra)
        check(res, "cluster YAML", written=files(d) - before)


def _domain(text: str) -> None:
    """The spec as --cluster-file: its name becomes part of a domain name (and paths)."""
    with workdir() as d:
        spec = d / "lab.yml"
        spec.write_text(text)
        before = files(d)
        res = run_cli("domains", "show", "bert-3l", "--cluster-file", str(spec))
        check(res, "cluster YAML", written=files(d) - before)


@fuzz(150)
@given(st.text(st.characters(codec="utf-8"), max_size=200))
def test_any_text(text: str) -> None:
    _show(text)


@fuzz(200)
@given(st.sampled_from(FIELDS), nasty_values(), st.booleans())
def test_one_field_replaced(path: tuple, value: object, as_json: bool) -> None:
    data = copy.deepcopy(GOOD)
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    text = yaml.safe_dump(data) if not as_json else __import__("json").dumps(data, default=str)
    _show(text)


@fuzz(60)
@given(st.sampled_from(NASTY_STRINGS + ["lab", "lab_2", "x.y", "A", "bert", "a b"]))
def test_cluster_name(name: str) -> None:
    data = {**copy.deepcopy(GOOD), "name": name}
    _domain(yaml.safe_dump(data))
    _show(yaml.safe_dump(data))


@fuzz(40)
@given(st.integers(1, 5000), st.sampled_from(["[", "{a: ", "- "]))
def test_deep_nesting(depth: int, opener: str) -> None:
    closer = {"[": "]", "{a: ": "}", "- ": ""}[opener]
    if opener == "- ":
        text = "".join("  " * i + "- " + ("\n" if i < depth - 1 else "1\n") for i in range(depth))
    else:
        text = opener * depth + "1" + closer * depth
    _show(f"nodes: {text}" if opener != "- " else text)


@fuzz(30)
@given(st.integers(1, 12), st.integers(2, 12))
def test_alias_expansion(levels: int, width: int) -> None:
    lines = ["a0: &a0 [x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    lines.append(f"nodes: *a{levels}")
    _show("\n".join(lines) + "\n")


@fuzz(30)
@given(st.sampled_from(["!!python/object/apply:os.system ['true']", "!!binary AAAA", "!!set {a}",
                        "!!timestamp 2001-13-45", "!!int 0x" + "f" * 5000, "!!float nan",
                        "!!str", "? [a]\n: 1", "a: 1\n---\nb: 2", "\x00", "\ufeffnodes: []",
                        "&a [*a]", "*nope", "!custom 1", "nodes: !!omap [a: 1]"]),
       st.booleans())
def test_yaml_features(text: str, as_value: bool) -> None:
    _show(f"nodes: {text}" if as_value else text)


@fuzz(20)
@given(st.sampled_from(["/dev/zero", "/dev/null", "/", "/proc/self/mem", "no/such.yml"]))
def test_special_paths(path: str) -> None:
    with workdir() as d:
        before = files(d)
        res = run_cli("domains", "show", "bert-3l", "--cluster-file", path)
        check(res, "cluster YAML", written=files(d) - before)
