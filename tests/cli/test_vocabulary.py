"""One option vocabulary: one name per thing (the simulator is ``--simulator``, the domain the
positional argument), the old names of an unreleased vocabulary refused, ``search --help`` short, the
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


#: option names of an unreleased vocabulary, now refused like any unknown option
OLD_NAMES = [("strategies sample", "--num"), ("strategies baseline", "--out"),
             ("strategies baseline", "--autodist-out"), ("recommend", "--out"),
             ("datasets list", "--path"), ("collect", "--trials"), ("search", "--warm-start"),
             ("evaluate", "--on"), ("train", "--ranker")]


# -- one vocabulary ----------------------------------------------------------------------------
@pytest.mark.parametrize("path,old", OLD_NAMES, ids=lambda v: v)
def test_old_names_are_gone(path: str, old: str) -> None:
    cmd = _commands()[path]
    assert old not in {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def test_an_old_name_is_a_usage_error_writing_nothing(cli: Any, tmp_path: Path) -> None:
    res = cli("strategies", "baseline", DOMAIN, "ps", "--out", str(tmp_path / "a.json"))
    assert res.code == 2 and "--out" in res.err and "Traceback" not in res.err
    assert not list(tmp_path.iterdir())


def test_a_simulator_is_always_given_as_simulator() -> None:
    """Every command that reads a registered simulator takes it as ``--simulator``; a kind of
    simulator to train is ``--kind``; the domain is the positional argument (adapt's
    ``--source``/``--target`` name the transfer's two ends)."""
    commands = _commands()
    for path in ("search", "recommend", "evaluate"):
        opts = {o for p in commands[path].params for o in p.opts}
        assert "--simulator" in opts, path
    for path, cmd in commands.items():
        opts = {o for p in cmd.params for o in p.opts}
        assert not opts & {"--warm-start", "--on", "--ranker", "--domain"} or path == "worker", \
            (path, opts & {"--warm-start", "--on", "--ranker", "--domain"})


def test_search_help_shows_at_most_15_options(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    monkeypatch.setenv("COLUMNS", "200")
    res = cli("search", "--help")
    assert res.code == 0, res.err
    shown = set(re.findall(r"(?m)^\S?\s+(--[a-z][a-z-]+)", res.out)) - {"--help"}
    assert 8 <= len(shown) <= 15, sorted(shown)
    assert "--config" in shown and "--per-round" not in shown


def test_search_config_file_sets_expert_settings(tmp_path: Path) -> None:
    """``--config`` fills the settings left at their defaults; a given option wins; an unknown
    setting or a bad value is one line naming it."""
    from typer.main import get_command

    from autosync_transfer.cli import app
    from autosync_transfer.cli.search import _search_config

    cmd = get_command(app).commands["search"]  # type: ignore[attr-defined]
    cfg = tmp_path / "search.yml"
    cfg.write_text("per_round: 4\ncandidates: 50\nmax_epochs: 3\n")
    ctx = cmd.make_context("search", ["ncf-A", "--candidates", "70", "--config", str(cfg)])
    given = {"per_round": ctx.params["per_round"], "candidates": ctx.params["candidates"],
             "max_epochs": ctx.params["epochs"]}
    config = _search_config(ctx, given, str(cfg))
    assert (config.per_round, config.candidates, config.max_epochs) == (4, 70, 3)
    from autosync_transfer.errors import ConfigError

    for text, needle in (("per_round: 0\n", "per_round=0"), ("nope: 1\n", "'nope'"),
                         ("[1, 2]\n", "mapping"), ("a: [\n", "not YAML")):
        cfg.write_text(text)
        ctx = cmd.make_context("search", ["ncf-A", "--config", str(cfg)])
        with pytest.raises(ConfigError, match=needle):
            _search_config(ctx, {"per_round": 10}, str(cfg))


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
