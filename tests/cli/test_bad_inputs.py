"""Every user mistake gives one clear line naming the problem, exit code 2, no traceback."""

from __future__ import annotations

import json

import pytest

from autosync_transfer.testing.cli import assert_one_line_error

GOOD_NODE = "{address: 10.0.0.1, cpus: [0], chief: true, network_bandwidth: 1}"

YAML_CASES = {
    "not-yaml": ("nodes: [", "not valid YAML"),
    "scalar": ("42", "must be a mapping"),
    "missing-nodes": ("ssh: {}", "'nodes' must be a non-empty list"),
    "empty-nodes": ("nodes: []", "'nodes' must be a non-empty list"),
    "nodes-not-list": ("nodes: {a: 1}", "'nodes' must be a non-empty list"),
    "node-not-mapping": ("nodes: [10.0.0.1]", "nodes[0] must be a mapping"),
    "missing-address": ("nodes: [{cpus: [0], network_bandwidth: 1}]", "missing field 'address'"),
    "empty-address": ("nodes: [{address: '', cpus: [0]}]", "missing field 'address'"),
    "no-devices": ("nodes: [{address: 10.0.0.1}]", "non-empty 'gpus' or 'cpus'"),
    "gpus-not-list": ("nodes: [{address: 10.0.0.1, gpus: 2}]", "'gpus' must be a list"),
    "negative-gpu": ("nodes: [{address: 10.0.0.1, gpus: [-1]}]", "'gpus' must be a list"),
    "negative-bandwidth": ("nodes: [{address: 10.0.0.1, cpus: [0], network_bandwidth: -5}]",
                           "'network_bandwidth' must be > 0"),
    "infinite-bandwidth": ("nodes: [{address: 10.0.0.1, cpus: [0], network_bandwidth: .inf}]",
                           "'network_bandwidth' must be a finite number of Gbit/s (got inf)"),
    "nan-bandwidth": ("nodes: [{address: 10.0.0.1, cpus: [0], network_bandwidth: .nan}]",
                      "'network_bandwidth' must be a finite number of Gbit/s (got nan)"),
    "infinite-latency": ("nodes: [{address: 10.0.0.1, cpus: [0], latency_ms: .inf}]",
                         "'latency_ms' must be a finite number >= 0 (got inf)"),
    "zero-bandwidth": ("nodes: [{address: 10.0.0.1, cpus: [0], network_bandwidth: 0}]",
                       "'network_bandwidth' must be > 0"),
    "string-bandwidth": ("nodes: [{address: 10.0.0.1, cpus: [0], network_bandwidth: fast}]",
                         "'network_bandwidth' must be a number"),
    "chief-not-bool": ("nodes: [{address: 10.0.0.1, cpus: [0], chief: maybe}]",
                       "'chief' must be true/false"),
    "two-chiefs": (f"nodes: [{GOOD_NODE}, {{address: 10.0.0.2, cpus: [0], chief: true}}]",
                   "exactly one node must be chief"),
    "no-chief": ("nodes: [{address: 10.0.0.1, cpus: [0]}, {address: 10.0.0.2, cpus: [0]}]",
                 "exactly one node must be chief"),
    "duplicate-address": (f"nodes: [{GOOD_NODE}, {{address: 10.0.0.1, cpus: [0]}}]",
                          "'10.0.0.1' appears twice"),
    "loopback-multinode": (f"nodes: [{GOOD_NODE}, {{address: 127.0.0.1, cpus: [0]}}]",
                           "loopback address '127.0.0.1'"),
    "unknown-node-field": ("nodes: [{address: 10.0.0.1, cpus: [0], gpu_count: 4}]",
                           "unknown field 'gpu_count'"),
    "unknown-top-key": (f"nodes: [{GOOD_NODE}]\nnodez: 1", "unknown top-level key 'nodez'"),
    "missing-ssh-group": (
        f"nodes: [{GOOD_NODE}, {{address: 10.0.0.2, cpus: [0], ssh_config: grp}}]",
        "ssh_config 'grp'",
    ),
    "ssh-not-mapping": (f"nodes: [{GOOD_NODE}]\nssh: [a]", "'ssh' must be a mapping"),
    "negative-latency": ("nodes: [{address: 10.0.0.1, cpus: [0], latency_ms: -1}]",
                         "'latency_ms' must be a number >= 0"),
    "bad-ssh-port": (f"nodes: [{GOOD_NODE}]\nssh: {{grp: {{port: 0}}}}", "port"),
    "colon-in-node-name": ("nodes: [{address: 10.0.0.1, name: 'a:L', cpus: [0]}]", "name"),
}


@pytest.mark.parametrize("case", sorted(YAML_CASES))
def test_bad_resource_spec(cli, tmp_path, case):
    text, needle = YAML_CASES[case]
    spec = tmp_path / "spec.yml"
    spec.write_text(text)
    assert_one_line_error(cli("clusters", "show", str(spec)), needle)


def test_bad_resource_spec_via_domain(cli, tmp_path):
    spec = tmp_path / "spec.yml"
    spec.write_text(YAML_CASES["negative-bandwidth"][0])
    res = cli("domains", "show", "bert-3l", "--cluster-file", str(spec))
    assert_one_line_error(res, "'network_bandwidth' must be > 0")


def test_missing_resource_spec_file(cli, tmp_path):
    res = cli("domains", "show", "bert-3l", "--cluster-file", str(tmp_path / "nope.yml"))
    assert_one_line_error(res, "cannot read resource spec")


NAME_CASES = [
    (("domains", "show", "foo-A"), "no model 'foo'"),
    (("domains", "show", "bert-Z"), "no cluster 'Z'"),
    (("domains", "show", "bert"), "<model>-<cluster>"),
    (("clusters", "show", "Z"), "unknown cluster 'Z'"),
    (("strategies", "baseline", "bert-A", "fastest"), "unknown strategy builder 'fastest'"),
    (("strategies", "sample", "bert-A", "--preset", "magic"), "unknown sampler preset 'magic'"),
    (("strategies", "sample", "gpt-A", "-n", "2"), "no model 'gpt'"),
]


@pytest.mark.parametrize("argv,needle", NAME_CASES, ids=[" ".join(a) for a, _ in NAME_CASES])
def test_unknown_names(cli, argv, needle):
    assert_one_line_error(cli(*argv), needle)


DOMAIN = "bert-3l-A"


@pytest.fixture(scope="module")
def good_strategy() -> dict:
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.strategies.builders import build

    return json.loads(build("parallax", get_domain(DOMAIN)).to_json())


def _dense_var(s: dict) -> int:
    from autosync_transfer.domains.catalog import get_domain

    graph = get_domain(DOMAIN).model
    for i, n in enumerate(s["nodes"]):
        v = graph.variable(n["var_name"])
        if not v.sparse and len(v.shape) == 2:
            return i
    raise AssertionError("no dense matrix")


def _sparse_var(s: dict) -> int:
    from autosync_transfer.domains.catalog import get_domain

    graph = get_domain(DOMAIN).model
    return next(i for i, n in enumerate(s["nodes"]) if graph.variable(n["var_name"]).sparse)


def _mutate(name: str, s: dict) -> dict:
    s = json.loads(json.dumps(s))
    nodes = s["nodes"]
    d, sp = _dense_var(s), _sparse_var(s)
    ps = {"kind": "ps", "destination": "n1"}
    ar = {"kind": "ar", "group": 0}
    if name == "missing-variable":
        nodes.pop(d)
    elif name == "duplicated-variable":
        nodes.append(nodes[d])
    elif name == "unknown-variable":
        nodes.append({"var_name": "does/not/exist", "synchronizer": ps})
    elif name == "shards-over-axis":
        nodes[d] = {"var_name": nodes[d]["var_name"],
                    "partition": {"axis": 0, "shards": 100000, "synchronizers": [ps] * 100000}}
    elif name == "axis-missing":
        nodes[d] = {"var_name": nodes[d]["var_name"],
                    "partition": {"axis": 5, "shards": 2, "synchronizers": [ps, ps]}}
    elif name == "sparse-on-ar":
        nodes[sp] = {"var_name": nodes[sp]["var_name"], "synchronizer": ar}
    elif name == "sparse-shard-on-ar":
        nodes[sp] = {"var_name": nodes[sp]["var_name"],
                     "partition": {"axis": 0, "shards": 2, "synchronizers": [ps, ar]}}
    elif name == "sparse-axis-1":
        nodes[sp] = {"var_name": nodes[sp]["var_name"],
                     "partition": {"axis": 1, "shards": 2, "synchronizers": [ps, ps]}}
    elif name == "destination-not-node":
        nodes[d] = {"var_name": nodes[d]["var_name"], "synchronizer": {"kind": "ps", "destination": "n9"}}
    elif name == "both-sync-and-partition":
        nodes[d] = {"var_name": nodes[d]["var_name"], "synchronizer": ps,
                    "partition": {"axis": 0, "shards": 2, "synchronizers": [ps, ps]}}
    elif name == "neither":
        nodes[d] = {"var_name": nodes[d]["var_name"]}
    elif name == "one-shard":
        nodes[d] = {"var_name": nodes[d]["var_name"],
                    "partition": {"axis": 0, "shards": 1, "synchronizers": [ps]}}
    elif name == "sync-count":
        nodes[d] = {"var_name": nodes[d]["var_name"],
                    "partition": {"axis": 0, "shards": 3, "synchronizers": [ps, ps]}}
    elif name == "unknown-compressor":
        nodes[d] = {"var_name": nodes[d]["var_name"],
                    "synchronizer": {"kind": "ar", "compressor": "zip"}}
    elif name == "negative-group":
        nodes[d] = {"var_name": nodes[d]["var_name"], "synchronizer": {"kind": "ar", "group": -1}}
    elif name == "stale-async":
        nodes[d] = {"var_name": nodes[d]["var_name"],
                    "synchronizer": {"kind": "ps", "destination": "n0", "sync": False, "staleness": 2}}
    elif name == "async-ps":
        nodes[d] = {"var_name": nodes[d]["var_name"],
                    "synchronizer": {"kind": "ps", "destination": "n0", "sync": False}}
    elif name == "unknown-kind":
        nodes[d] = {"var_name": nodes[d]["var_name"], "synchronizer": {"kind": "gossip"}}
    elif name == "missing-nodes":
        del s["nodes"]
    elif name == "extra-field":
        s["colour"] = "blue"
    else:  # pragma: no cover
        raise AssertionError(name)
    return s


STRATEGY_CASES = {
    "missing-variable": "has no synchronizer",
    "duplicated-variable": "configured more than once",
    "unknown-variable": "'does/not/exist' is not a trainable variable",
    "shards-over-axis": "shards must be >= 2 and <=",
    "axis-missing": "partition axis 5 does not exist",
    "sparse-on-ar": "must use a parameter server",
    "sparse-shard-on-ar": "must use a parameter server",
    "sparse-axis-1": "only be partitioned along axis 0",
    "destination-not-node": "PS destination 'n9' is not a node",
    "both-sync-and-partition": "exactly one of 'synchronizer' or 'partition'",
    "neither": "exactly one of 'synchronizer' or 'partition'",
    "one-shard": "shards",
    "sync-count": "one synchronizer per shard",
    "unknown-compressor": "compressor",
    "negative-group": "group",
    "stale-async": "staleness > 0 requires sync=true",
    "async-ps": "asynchronous or stale parameter servers",
    "unknown-kind": "gossip",
    "missing-nodes": "nodes",
    "extra-field": "colour",
}


@pytest.mark.parametrize("case", sorted(STRATEGY_CASES))
def test_bad_strategy(cli, tmp_path, good_strategy, case):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_mutate(case, good_strategy)))
    assert_one_line_error(cli("strategies", "validate", DOMAIN, str(path)), STRATEGY_CASES[case])


def test_good_strategy_validates(cli, tmp_path, good_strategy):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(good_strategy))
    res = cli("strategies", "validate", DOMAIN, str(path))
    assert res.code == 0, res.err
    assert "valid" in res.out


@pytest.mark.parametrize(
    "content,needle",
    [("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object"), ("", "")],
    ids=["bad-json", "json-list", "empty-file"],
)
def test_bad_strategy_file_content(cli, tmp_path, content, needle):
    path = tmp_path / "s.json"
    path.write_text(content)
    assert_one_line_error(cli("strategies", "validate", DOMAIN, str(path)), needle)


def test_missing_strategy_file(cli, tmp_path):
    res = cli("strategies", "validate", DOMAIN, str(tmp_path / "none.json"))
    assert_one_line_error(res, "cannot read strategy file")


def test_garbage_autodist_file(cli, tmp_path):
    path = tmp_path / "strategy.pb"
    path.write_bytes(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
    assert_one_line_error(cli("strategies", "validate", DOMAIN, str(path)), "AutoDist strategy")


def test_sample_refuses_to_overwrite(cli, tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("keep me\n")
    res = cli("strategies", "sample", DOMAIN, "-n", "2", "--out", str(path))
    assert_one_line_error(res, "already exists")
    assert path.read_text() == "keep me\n"


def test_nothing_written_on_error(cli, tmp_path):
    path = tmp_path / "out.jsonl"
    res = cli("strategies", "sample", "bert-Z", "-n", "2", "--out", str(path))
    assert res.code == 2
    assert not path.exists()


def test_baseline_out_into_missing_folder(cli, tmp_path):
    res = cli("strategies", "baseline", DOMAIN, "ps", "--export-json", str(tmp_path / "no" / "x.json"))
    assert_one_line_error(res, "does not exist")


def test_baseline_out_refuses_to_overwrite_and_writes_nothing_half(cli, tmp_path):
    ok = tmp_path / "ok.json"
    res = cli("strategies", "baseline", DOMAIN, "ps", "--export-json", str(ok),
              "--export-autodist", str(tmp_path / "no" / "x.pb"))
    assert_one_line_error(res, "does not exist")
    assert not ok.exists()


def test_cluster_file_shadowing_a_catalog_cluster(cli, tmp_path):
    spec = tmp_path / "A.yml"
    spec.write_text("nodes: [{address: 10.0.0.1, cpus: [0]}]")
    assert_one_line_error(cli("domains", "show", "ncf", "--cluster-file", str(spec)), "catalog cluster")


@pytest.mark.parametrize("argv", [("strategies", "sample", DOMAIN, "-n", "0"), ("strategies", "sample"),
                                  ("bogus",), ("run", DOMAIN, "-s", "ps", "--timeout", "0")],
                         ids=["n-zero", "missing-argument", "unknown-command", "zero-timeout"])
def test_usage_errors_exit_2_without_traceback(cli, argv):
    res = cli(*argv)
    assert res.code == 2, (res.code, res.err)
    assert "Traceback" not in res.err + res.out


def test_cluster_name_that_would_be_a_path(cli, tmp_path):
    spec = tmp_path / "lab.yml"
    spec.write_text("name: ../../x\nnodes: [{address: 10.0.0.1, cpus: [0]}]")
    res = cli("strategies", "sample", "bert-3l", "--cluster-file", str(spec), "-n", "1")
    assert_one_line_error(res, "1-64 letters, digits, '_' or '.'")


@pytest.mark.parametrize("argv,needle", [
    (("strategies", "sample", DOMAIN, "-n", "9" * 30), "--count must be <= 1000000"),
    (("strategies", "sample", DOMAIN, "-n", "2", "--seed", str(2**32)), "--seed must be <="),
    (("run", DOMAIN, "-s", "ps", "--timeout", "inf"), "--timeout must be a finite number"),
    (("search", DOMAIN, "--diversity", "inf"), "--diversity must be a finite number"),
    (("strategies", "sample", DOMAIN, "-n", "1e3"), "got '1e3'"),
], ids=["huge-count", "huge-seed", "inf-timeout", "inf-diversity", "float-count"])
def test_numbers_are_finite_and_bounded(cli, argv, needle):
    assert_one_line_error(cli(*argv), needle)


def test_markup_in_a_strategy_id_is_printed_as_is(cli, tmp_path, good_strategy):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**good_strategy, "id": "[/][red]x"}))
    res = cli("strategies", "show", str(path))
    assert res.code == 0, res.err
    assert "[/][red]x" in res.out


def test_unexpected_errors_are_one_line_unless_debug(cli, monkeypatch):
    """A bug (any exception that is not a user mistake) is one line and exit 2; --debug or
    AUTOSYNC_DEBUG=1 gives the traceback."""
    import autosync_transfer.domains.catalog as catalog

    def broken(name):  # noqa: ANN001, ANN202 - stands in for a bug in a parser
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(catalog, "get_cluster", broken)
    res = cli("clusters", "show", "Z")
    assert_one_line_error(res, "unexpected RuntimeError: boom second line (run with --debug")
    with pytest.raises(RuntimeError, match="boom"):
        cli("--debug", "clusters", "show", "Z")
    monkeypatch.setenv("AUTOSYNC_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        cli("clusters", "show", "Z")
