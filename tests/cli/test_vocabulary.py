"""One option vocabulary: the old option names still work (hidden, with a deprecation note), the
choices are the library's and are listed by ``--help``, a wrong choice is one line naming the
option and the value, the measurement protocol defaults to the library's, and every command that
reports has ``--json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autosync_transfer.testing.cli import assert_one_line_error

DOMAIN = "bert-3l-A"


def _commands() -> dict[str, Any]:
    from typer.main import get_command

    from autosync_transfer.cli import app

    found: dict[str, Any] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs is None:
            found[" ".join(path)] = cmd
            return
        for name, sub in subs.items():
            walk(sub, [*path, name])

    walk(get_command(app), [])
    return found


def _aliases() -> list[tuple[str, str, str]]:
    from autosync_transfer.cli._params import deprecated_aliases

    return [(path, old, new) for path, cmd in sorted(_commands().items())
            for old, new in sorted(deprecated_aliases(cmd).items())]


def _notes(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("note: ")]


# -- old names ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path,old,new", _aliases(), ids=lambda v: v)
def test_every_old_name_maps_to_the_new_option(path: str, old: str, new: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Parsed (not run): the old name fills the new option's parameter and prints one note."""
    cmd = _commands()[path]
    (param,) = [p for p in cmd.params if new in p.opts]
    assert old not in {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    value = "7" if getattr(param.type_descriptor, "annotation", None) is int else "some/path"
    args: list[str] = []
    for p in cmd.params:  # the other required parameters, with a placeholder
        if p.required and p is not param:
            args += ["x"] if p.param_type_name == "argument" else [p.opts[0], "x"]
    ctx = cmd.make_context(path, [*args, old, value])
    assert str(ctx.params[param.name]) == value
    err = capsys.readouterr().err
    assert _notes(err) == [f"note: {old} is deprecated and goes in the next release; use {new}"]


def test_old_names_are_hidden_from_help(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    monkeypatch.setenv("COLUMNS", "400")
    for path, old, new in _aliases():
        res = cli(*path.split(), "--help")
        assert res.code == 0, res.err
        assert new in res.out and not re.search(rf"(?<![\w-]){old}(?![\w-])", res.out), (path, old)


def test_old_and_new_name_together_is_a_usage_error(cli: Any, tmp_path: Path) -> None:
    res = cli("strategies", "baseline", DOMAIN, "ps", "--out", str(tmp_path / "a.json"),
              "--export-json", str(tmp_path / "b.json"))
    assert res.code == 2
    errors = [ln for ln in res.err.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "--out and --export-json are the same option" in errors[0]
    assert not list(tmp_path.iterdir())


def test_old_names_run_end_to_end(cli: Any, tmp_path: Path) -> None:
    res = cli("strategies", "sample", DOMAIN, "--num", "3", "--json")
    assert res.code == 0, res.err
    assert len(res.out.splitlines()) == 3
    assert _notes(res.err) == ["note: --num is deprecated and goes in the next release; "
                               "use --count"]
    js, pb = tmp_path / "ddp.json", tmp_path / "ddp.pb"
    res = cli("strategies", "baseline", DOMAIN, "ddp", "--out", str(js), "--autodist-out", str(pb))
    assert res.code == 0, res.err
    assert js.exists() and pb.exists() and len(_notes(res.err)) == 2
    best = tmp_path / "best.json"
    res = cli("recommend", "ncf-C", "--candidates", "20", "--out", str(best))
    assert res.code == 0, res.err
    assert best.exists()


def test_old_data_name_reads_the_same_data(cli: Any, tmp_path: Path) -> None:
    from autosync_transfer.testing.synthetic import write_synthetic_store

    store = tmp_path / "ncf-A.jsonl"
    write_synthetic_store(store, "ncf-A", 5, 0)
    new = cli("datasets", "list", "--data", str(store), "--json")
    old = cli("datasets", "list", "--path", str(store), "--json")
    assert new.code == old.code == 0, (new.err, old.err)
    assert json.loads(new.out) == json.loads(old.out)
    assert not _notes(new.err) and len(_notes(old.err)) == 1


# -- choices -----------------------------------------------------------------------------------
def test_choices_are_the_librarys() -> None:
    from autosync_transfer.adapt.core import METHODS as ADAPT_METHODS
    from autosync_transfer.adapt.data import METRIC_NAMES
    from autosync_transfer.cli import _choices as c
    from autosync_transfer.dataset.collect import planned_strategies
    from autosync_transfer.rankers.modules import RANKERS
    from autosync_transfer.rankers.simulator import ANALYTICAL, STEPSIM
    from autosync_transfer.search.loop import LAUNCHERS, METHODS
    from autosync_transfer.strategies.builders import BUILDERS
    from autosync_transfer.strategies.sampler import PRESETS

    def values(e: Any) -> list[str]:
        return [m.value for m in e]

    assert values(c.SamplerPreset) == list(PRESETS)
    assert values(c.Builder) == list(BUILDERS)
    assert set(values(c.RankerKind)) == {ANALYTICAL, STEPSIM, *RANKERS}
    assert values(c.SearchMethod) == list(METHODS)
    from autosync_transfer.search.objective import OBJECTIVES

    assert values(c.Objective) == list(OBJECTIVES)
    assert values(c.Optimizer) == ["adam", "sgd"]
    assert values(c.SearchLauncher) == list(LAUNCHERS)
    assert set(values(c.Launcher)) == set(LAUNCHERS) - {"torchrun"}
    assert values(c.AdaptMethod) == list(ADAPT_METHODS)
    assert values(c.Metric) == ["pairwise_acc" if m == "pairwise_accuracy" else m
                                for m in METRIC_NAMES]
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.errors import ConfigError

    for sampler in values(c.CollectSampler):  # the collector accepts each
        next(iter(planned_strategies(get_domain("ncf-A"), sampler, 0, 1)))
    with pytest.raises(ConfigError):
        next(iter(planned_strategies(get_domain("ncf-A"), "grid", 0, 1)))


def test_help_lists_the_choices(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    res = cli("search", "--help")
    assert res.code == 0
    flat = "".join(res.out.split())
    assert "autosync|random|tpe|analytical" in flat and "emulated|local|torchrun" in flat


@pytest.mark.parametrize("argv,needle", [
    (("strategies", "sample", DOMAIN, "--preset", "odd"),
     "--preset: unknown sampler preset 'odd' (known: default, product,"),
    (("run", DOMAIN, "-s", "ps", "--launcher", "ssh"),
     "--launcher must be one of emulated, local, got 'ssh'"),
    (("collect", DOMAIN, "-n", "2", "--sampler", "grid"),
     "--sampler must be one of random, builders, got 'grid'"),
    (("strategies", "baseline", DOMAIN, "fastest"), "BUILDER: unknown strategy builder 'fastest'"),
    (("train", DOMAIN, "--metric", "acc"), "--metric: unknown metric 'acc'"),
    (("strategies", "sample", DOMAIN, "--bogus"), "No such option: --bogus"),
    (("strategies", "sample"), "Missing argument"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_usage_errors_are_one_line_naming_option_and_value(cli: Any, argv: tuple[str, ...],
                                                           needle: str) -> None:
    assert_one_line_error(cli(*argv), needle)


def test_the_cli_names_its_own_flags(cli: Any, tmp_path: Path) -> None:
    assert_one_line_error(cli("collect", DOMAIN, "--store", str(tmp_path / "s.jsonl")),
                          "-n/--count is required (unless --remeasure is given)")
    assert_one_line_error(cli("strategies", "baseline", DOMAIN, "--export-json",
                              str(tmp_path / "x.json")), "--export-json/--export-autodist need")
    assert_one_line_error(cli("datasets", "compact", "--data", str(tmp_path)),
                          f"--data {str(tmp_path)!r}: no trial stores")


# -- the measurement protocol ------------------------------------------------------------------
def test_protocol_defaults_are_the_librarys() -> None:
    from autosync_transfer.cli._params import PROTOCOL_HELP_DEFAULTS, protocol
    from autosync_transfer.runtime.trial import Protocol

    lib = Protocol()
    assert PROTOCOL_HELP_DEFAULTS == {"warmup": lib.warmup, "iters": lib.iters,
                                      "timeout_s": lib.timeout_s}
    assert protocol(None, None, None) == lib
    assert protocol(3, None, 60.0) == Protocol(warmup=3, timeout_s=60.0)
    commands = _commands()
    for path in ("collect", "run", "search"):
        helps = {p.name: p.help for p in commands[path].params}
        assert f"(default {lib.warmup}, the library's protocol" in helps["warmup"], path
        assert f"(default {lib.iters}, the library's protocol" in helps["iters"], path
        assert f"(default {lib.timeout_s:g}, the library's protocol" in helps["timeout_s"], path


def test_a_continued_search_keeps_its_protocol(tmp_path: Path) -> None:
    from autosync_transfer.cli.search import _search_protocol
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.runtime.trial import Protocol
    from autosync_transfer.testing.synthetic import write_synthetic_store

    src, store = tmp_path / "src.jsonl", tmp_path / "run.jsonl"
    write_synthetic_store(src, "ncf-A", 2, 0)
    for i, r in enumerate(TrialStore(src).records()):
        TrialStore(store).append(r.model_copy(update={
            "id": f"ncf-A/search/random-seed0/s{i}",
            "protocol": {"warmup": 3, "iters": 10, "timeout_s": 300.0}}))
    assert _search_protocol(store, "ncf-A", "random-seed0", None, None, None) == \
        Protocol(warmup=3, iters=10)
    assert _search_protocol(store, "ncf-A", "random-seed0", 5, None, 30.0) == \
        Protocol(warmup=5, iters=10, timeout_s=30.0)
    # another run of the store, or no store: the library's protocol
    assert _search_protocol(store, "ncf-A", "tpe-seed0", None, None, None) == Protocol()
    assert _search_protocol(tmp_path / "none.jsonl", "ncf-A", "random-seed0", None, None,
                            None) == Protocol()


# -- --json ------------------------------------------------------------------------------------
REPORTING = {"collect", "run", "train", "evaluate", "adapt", "search", "recommend",
             "domains list", "domains show", "domains profile", "clusters list", "clusters show",
             "clusters calibrate",
             "strategies sample", "strategies baseline", "strategies validate", "strategies show",
             "strategies check",
             "datasets list", "datasets show", "datasets import-autosync", "datasets compact",
             "datasets repair",
             "registry list", "registry show", "registry promote", "cleanup"}


def test_every_reporting_command_has_json() -> None:
    commands = _commands()
    visible = {path for path, cmd in commands.items() if not cmd.hidden}
    assert REPORTING | {"ui"} == visible, "a new command: does it report? add it here"
    for path in REPORTING:
        assert any("--json" in p.opts for p in commands[path].params), path


def test_collect_json(cli: Any, tmp_path: Path) -> None:
    """--remeasure with nothing to measure again on this launcher runs no worker."""
    from autosync_transfer.testing.synthetic import write_synthetic_store

    store = tmp_path / "ncf-A.jsonl"
    write_synthetic_store(store, "ncf-A", 3, 0)
    res = cli("collect", "ncf-A", "--remeasure", "unchecked", "--store", str(store),
              "--launcher", "local", "--json")
    assert res.code == 0, res.err
    data = json.loads(res.out)
    assert data["domain"] == "ncf-A" and data["store"] == str(store)
    assert data["remeasured"]["trials"] == 0 and "collected" not in data
    assert data["protocol"]["warmup"] == 10 and data["protocol"]["iters"] == 40


def test_registry_promote_json(cli: Any, registry: Path) -> None:
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.registry import models

    info = models.log_simulator(Simulator("analytical", {}, 1), domain="ncf-C",
                                metrics={"test_pairwise_accuracy": 0.8},
                                tags={"trial_count": 1, "test_split": "none"})
    res = cli("registry", "promote", "ncf-C", info.version, "--alias", "best", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out) == {"model": info.name, "alias": "best", "version": info.version,
                                   "model_uri": f"models:/{info.name}@best"}
