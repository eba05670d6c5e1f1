"""``autosync-transfer search`` (the closed AutoSync loop and its baselines) and
``autosync-transfer recommend`` (the best strategy without running anything)."""

from __future__ import annotations

from typing import Any, Optional

import typer

from autosync_transfer.cli._choices import (Objective, RankerKind, SamplerPreset, SearchLauncher,
                                            SearchMethod)
from autosync_transfer.cli._params import (cluster_file_option, data_option, iters_option,
                                           json_option, model_option, store_option,
                                           timeout_option, warmup_option)

_CONTINUED = ", or the stored run's when continuing one"
_ALLOW_LOSSY_HELP = ("Export / recommend a lossy strategy (fp16, fp16_ef or PowerSGD compression) "
                     "even without a passed convergence check; default: the best lossless or "
                     "checked one instead.")


def _fmt(v: Any, spec: str = ".2f", suffix: str = "") -> str:
    if v is None:
        return "-"
    return f"{v:{spec}}{suffix}"


def _hidden(option: Any) -> Any:
    """``option`` (a typer.Option) hidden from ``--help``: an expert setting of ``search``."""
    option.hidden = True
    return option


def search(
    ctx: typer.Context,
    domain_name: Optional[str] = typer.Argument(None, metavar="[DOMAIN]", help="e.g. bert-B (or --model with --cluster-file)."),
    budget: int = typer.Option(200, "--budget", min=1, help="Real trials to spend (the builders and DDP measured as the reference come on top)."),
    method: SearchMethod = typer.Option(SearchMethod.autosync, "--method", help="autosync (simulator-guided, re-trained every round), random, tpe (Optuna TPE over a knob encoding), stepsim (step-time simulator ranking) or analytical (cost-model ranking)."),
    warm_start: Optional[str] = typer.Option(None, "--simulator", metavar="DOMAIN|MODEL_URI", help="Start from this simulator (a domain's registry champion, trained first if absent, or models:/NAME@ALIAS) and fine-tune it every round."),
    per_round: int = typer.Option(10, "--per-round", "-k", min=1, help="Trials per round (the simulator is re-trained between rounds).", hidden=True),
    candidates: int = typer.Option(1000, "--candidates", min=1, help="Sampled candidates scored per round.", hidden=True),
    neighbours: int = typer.Option(200, "--neighbours", min=0, help="Candidates per round near the 3 fastest strategies measured so far, builders included (ranked methods only; 0: none).", hidden=True),
    knob_candidates: Optional[int] = typer.Option(None, "--knob-candidates", min=0, help="Whole-model candidates per round decoded from uniform knob assignments, ranked with the rest (e.g. one compressor on every dense variable); default 200 for the ranked methods (autosync, analytical), 0: the per-variable sampler only.", hidden=True),
    launcher: SearchLauncher = typer.Option(SearchLauncher.emulated, "--launcher", help="emulated (network namespaces, needs root), local, or torchrun (real cluster: torchrun workers you start on every node follow the search's job queue; the command is printed)."),
    seed: int = typer.Option(0, "--seed", hidden=True),
    preset: SamplerPreset = typer.Option(SamplerPreset.mixture, "--preset", help="Sampler preset of the candidates (see strategies sample --preset); default: the space the dataset and its simulators were sampled from, each candidate with its own knob probabilities (dataset: AutoSync's uniform choices).", hidden=True),
    ranker: RankerKind = typer.Option(RankerKind.rnn, "--kind", help="Ranker trained by a cold autosync search (a learned one).", hidden=True),
    epochs: int = typer.Option(30, "--epochs", min=1, help="Maximum training epochs per round.", hidden=True),
    diversity: float = typer.Option(0.3, "--diversity", min=0.0, help="Weight of novelty against score rank when picking a round.", hidden=True),
    confirm: int = typer.Option(10, "--confirm", min=0, help="At the end, measure the best strategy found, the best builder, the best fp16 reference and torch DDP this many rounds, interleaved, for the confirmed speed-ups with their 95 % intervals (0: no confirmation)."),
    objective: Objective = typer.Option(Objective.time_to_loss, "--objective", help="time-to-loss: step time x steps to a target loss relative to exact synchronization (estimated during the search, measured by convergence runs of the lossy final candidates; a strategy that fails is excluded); step-time: seconds per step only."),
    lossless: bool = typer.Option(False, "--lossless", help="Propose lossless strategies only (no fp16 or PowerSGD compression)."),
    final_checks: int = typer.Option(3, "--final-checks", min=0, help="time-to-loss: lossy final candidates that get a convergence run (0: none, lossy strategies then never count).", hidden=True),
    final_rounds: int = typer.Option(3, "--final-rounds", min=1, help="time-to-loss: rounds of final checks; after a round whose candidates all failed, the next best that compress less are checked.", hidden=True),
    max_step_ratio: float = typer.Option(1.10, "--max-step-ratio", min=1.0, help="time-to-loss: a lossy strategy passes its convergence check when it needs at most this many times exact synchronization's steps to the target loss (and ends within 2 % of its loss); its time to loss is charged the measured ratio.", hidden=True),
    check_steps: int = typer.Option(150, "--check-steps", min=4, help="time-to-loss: training steps of each convergence run.", hidden=True),
    store: Optional[str] = store_option("The run's trial store (default runs/search/DOMAIN/RUN.jsonl; any trial store, e.g. one under datasets/); the search continues it."),
    data: Optional[str] = _hidden(data_option("Trial data to train a --simulator domain's simulator on when it has no champion: a trial store (.jsonl), a parquet file or a folder; default: the shipped datasets.")),
    warmup: Optional[int] = _hidden(warmup_option(_CONTINUED)),
    iters: Optional[int] = _hidden(iters_option(_CONTINUED)),
    timeout_s: Optional[float] = _hidden(timeout_option()),
    max_foreign_cpu: float = typer.Option(0.05, "--max-foreign-cpu", min=0.01, max=1.0, help="Measure a trial again when other processes took more than this share of the CPU (1 disables).", hidden=True),
    log: bool = typer.Option(True, "--log/--no-log", help="Log the run to MLflow and register the final simulator.", hidden=True),
    export_json: Optional[str] = typer.Option(None, "--export-json", metavar="PATH", help="Write the strategy to use as JSON: the fastest of the best found, the best builder and the best fp16 reference (by the confirmation when there is one)."),
    export_autodist: Optional[str] = typer.Option(None, "--export-autodist", metavar="PATH", help="Write the strategy to use (as --export-json) as an AutoDist strategy file."),
    allow_lossy: bool = typer.Option(False, "--allow-lossy", help=_ALLOW_LOSSY_HELP),
    cluster_file: Optional[str] = cluster_file_option(),
    model: Optional[str] = model_option(),
    json_out: bool = json_option("Print the summary as JSON."),
    config_file: Optional[str] = typer.Option(None, "--config", metavar="YAML", help="Expert settings from a YAML mapping of search settings (see below); options given on the command line win."),
) -> None:
    """Search DOMAIN's strategies (or your --model's on --cluster-file) with real trials:
    propose, rank, run, re-train, repeat.

    Expert settings, in a --config YAML file (or as options of the same names): per_round,
    candidates, neighbours, knob_candidates, seed, preset, ranker, max_epochs (--epochs),
    diversity, final_checks, final_rounds, max_step_ratio, check_steps; the measurement
    protocol --warmup, --iters, --timeout, --max-foreign-cpu; --data (trial data for the
    simulator's first training); --no-log (no MLflow run)."""
    from pathlib import Path

    from autosync_transfer.cli._common import err, resolve_target
    from autosync_transfer.cli._output import check_out, export_strategy
    from autosync_transfer.errors import AutosyncError, ConfigError
    from autosync_transfer.search.loop import Searcher, default_store_path, run_name
    from autosync_transfer.search.warm import warm_version

    if warm_start is not None and method != SearchMethod.autosync:
        raise ConfigError(f"--simulator needs --method autosync, got {method.value!r}")
    check_out(export_json, "--export-json")
    check_out(export_autodist, "--export-autodist")
    domain, workload = resolve_target(domain_name, cluster_file, model)
    if launcher == SearchLauncher.emulated:
        from autosync_transfer.adapt.workflow import check_collect

        check_collect(launcher.value)
    given = {"method": method.value, "budget": budget, "per_round": per_round,
             "candidates": candidates, "seed": seed, "preset": preset.value,
             "diversity": diversity, "ranker": ranker.value, "max_epochs": epochs,
             "neighbours": neighbours, "confirm": confirm, "knob_candidates": knob_candidates,
             "objective": objective.value, "lossless": lossless, "final_checks": final_checks,
             "final_rounds": final_rounds, "check_steps": check_steps,
             "max_step_ratio": max_step_ratio}
    config = _search_config(ctx, given, config_file)
    per_round, seed, epochs = config.per_round, config.seed, config.max_epochs
    warm = lineage = None
    if warm_start is not None:
        from autosync_transfer.search.warm import warm_simulator

        with err().status(f"loading the warm-start simulator {warm_start}", spinner="dots"):
            warm, lineage = warm_simulator(warm_start, trials=data, seed=seed, max_epochs=epochs)
    name = run_name(config, warm is not None)
    path = Path(store) if store else default_store_path(domain.name, name)
    searcher = Searcher(domain, path, config, warm=warm, warm_source=warm_start,
                        warm_version=warm_version(lineage), launcher=launcher.value,
                        workload=workload, protocol=_search_protocol(path, domain.name, name, warmup, iters,
                                                  timeout_s),
                        max_foreign_cpu=max_foreign_cpu, log_dir=path.parent / "logs" / name)
    if launcher == SearchLauncher.torchrun:
        err().print(f"start the trial workers on every node (node 0 runs this search):\n"
                    f"  {searcher.torchrun_command(cluster_file)}")
    result = _run_with_progress(searcher, f"search {domain.name} {name}", budget)
    from autosync_transfer.search.export import search_choice

    choice = search_choice(result, domain, allow_lossy=allow_lossy)
    # the strategy to use is written first: a failure to log below does not lose it
    if choice.strategy is not None:
        export_strategy(choice.strategy, domain, export_json, export_autodist)
    version = failure = None
    if log:
        try:
            version = _log_search(result, domain, name, config, path, per_round, launcher.value,
                                  warm_start, lineage)
        except AutosyncError as e:  # the measurements are in the store: report them first
            failure = e
    if json_out:
        _print_search_json(result, domain.name, name, path, version, choice)
    else:
        _print_search(result, domain.name, name, path, version, choice,
                      exported=bool(export_json or export_autodist))
    if failure is not None:
        raise ConfigError(f"{failure}; the search's trials are kept in {str(path)!r}: run the "
                          f"same command again to log it (nothing is measured twice)")
    if choice.strategy is None and (export_json or export_autodist):
        raise ConfigError(f"{choice.error}; nothing exported"
                          + ("; pass --allow-lossy to export it anyway" if choice.excluded else ""))


#: option parameter -> SearchConfig field, where they differ
_CONFIG_FIELD = {"epochs": "max_epochs"}


def _search_config(ctx: Any, given: dict[str, Any], config_file: str | None):  # noqa: ANN202
    """The SearchConfig of the options ``given``, over the settings of ``--config`` where the
    option was left at its default; a bad file or setting is one line naming it."""
    from pydantic import ValidationError

    from autosync_transfer.errors import ConfigError
    from autosync_transfer.search.loop import SearchConfig

    values = dict(given)
    if config_file is not None:
        import yaml

        try:
            data = yaml.safe_load(open(config_file, encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"--config: cannot read {config_file!r}: {e.strerror}") from e
        except yaml.YAMLError as e:
            raise ConfigError(f"--config: {config_file!r} is not YAML: "
                              f"{' '.join(str(e).split())[:200]}") from e
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"--config: {config_file!r} must be a mapping of settings, got "
                              f"{type(data).__name__}")
        fields = set(SearchConfig.model_fields)
        for key, value in data.items():
            if key not in fields:
                raise ConfigError(f"--config: unknown setting {key!r} in {config_file!r} "
                                  f"(settings: {', '.join(sorted(fields))})")
        params = {_CONFIG_FIELD.get(k, k): k for k in ctx.params}
        for key, value in data.items():
            param = params.get(key)
            source = ctx.get_parameter_source(param) if param is not None else None
            # typer's click and click itself have different ParameterSource classes: the name
            if param is None or getattr(source, "name", None) in ("DEFAULT", "DEFAULT_MAP"):
                values[key] = value
    try:
        return SearchConfig(**values)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"--config: {where}={values.get(where)!r}: {err['msg']}") from e


def _search_protocol(path, domain: str, name: str, warmup: int | None,  # noqa: ANN001, ANN202
                     iters: int | None, timeout_s: float | None):
    """The protocol of a search: the options given, over the warm-up, timed iterations and
    timeout of the run's stored trials when it continues one (so a continued run measures as it began), else
    over the library's ``Protocol()``."""
    from autosync_transfer.cli._common import err
    from autosync_transfer.cli._params import protocol

    base = protocol(None, None, None)
    if None in (warmup, iters, timeout_s) and path.exists():
        from autosync_transfer.dataset.store import TrialStore

        prefix = f"{domain}/search/{name}/"  # the record ids of one run (search.loop)
        stored = next((r.protocol for r in TrialStore(path).records()
                       if r.id.startswith(prefix) and r.protocol), None)
        if stored:
            kept = {k: stored[k] for k in ("warmup", "iters", "timeout_s") if k in stored}
            base = base.model_copy(update=kept)
            if any(getattr(base, k) != getattr(protocol(None, None, None), k) for k in kept):
                err().print(f"continuing {name} in {path} with its protocol: {base.warmup} "
                            f"warm-up + {base.iters} timed iterations, timeout "
                            f"{base.timeout_s:g} s", markup=False, highlight=False)
    return protocol(warmup, iters, timeout_s, base=base)


def _run_with_progress(searcher, title: str, budget: int):  # noqa: ANN001, ANN202
    """``searcher.run()`` with a progress bar on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autosync_transfer.cli._common import err

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=err()) as bar:
        task = bar.add_task(title, total=budget, status="starting workers")

        def on_event(p) -> None:  # noqa: ANN001
            best = p.best_s
            ref = p.best_builder_s
            speed = f"  best {best * 1000:.1f} ms ({ref / best:.2f}x builders)" if best and ref else ""
            bar.update(task, completed=p.done, status=f"{p.message}{speed}")

        searcher.on_event = on_event
        return searcher.run()


def _log_search(result, domain, name: str, config, path, per_round: int,  # noqa: ANN001, ANN202
                launcher: str, warm_start: str | None, lineage: dict | None):
    """Log the run to MLflow (and register its simulator); the registered version or None."""
    import json

    from autosync_transfer.cli._common import err
    from autosync_transfer.registry.searches import log_search

    s = result.summary
    tags = {"launcher": launcher, "store": str(path)}
    if warm_start:
        tags["warm_start"] = warm_start
    with err().status("logging to MLflow", spinner="dots"):
        lin = None
        if result.simulator is not None:
            from autosync_transfer.adapt.data import digest

            lin = {**(lineage or {}), **({"source_uri": warm_start} if lineage else {}),
                   "method": f"search-{name.rsplit('-seed', 1)[0]}",
                   "shots": s["trials"], "dataset_fingerprint": digest(
                       [s["trials"], s.get("best_s"), str(path)])}
        _, version = log_search(domain=domain, run=name, summary=s,
                                config=config.model_dump(mode="json"), per_round=per_round,
                                best_strategy=json.loads(result.best.to_json()) if result.best else None,
                                simulator=result.simulator, lineage=lin, tags=tags)
    return version


def _print_search_json(result, domain: str, name: str, path, version,  # noqa: ANN001
                       choice) -> None:  # noqa: ANN001
    from autosync_transfer.cli._common import print_json

    print_json({"domain": domain, "run": name, "store": str(path),
                "best_strategy": result.best.id if result.best else None,
                "chosen_strategy": choice.strategy.id if choice.strategy else None,
                "chosen_from": choice.source,
                "excluded": [{"strategy": e.strategy_id, "reason": e.reason}
                             for e in choice.excluded],
                "registered_version": version.version if version else None,
                **dict(result.summary)})


def _print_search(result, domain: str, name: str, path, version, choice,  # noqa: ANN001
                  exported: bool) -> None:
    from autosync_transfer.cli._common import out

    s = result.summary
    con = out()
    con.print(f"{domain} {name}: {s['trials']} trials ({s['failed']} failed) in {path}")
    con.print(f"  best found      {_fmt(s['best_s'] and s['best_s'] * 1000, '.1f', ' ms')}"
              f"  ({result.best.id if result.best else '-'})")
    con.print(f"  best builder    {_fmt(s['best_builder_s'] and s['best_builder_s'] * 1000, '.1f', ' ms')}"
              f"  ({s['best_builder'] or '-'})  -> speed-up {_fmt(s['speedup_vs_builder'], '.2f', 'x')}")
    from autosync_transfer.search.summary import format_speedup

    if s.get("confirmed"):
        c = s["confirmed"]
        con.print(f"  confirmed       {c['best_s'] * 1000:.1f} ms vs {c['builder_s'] * 1000:.1f} ms "
                  f"(medians of {c['measurements']} interleaved rounds)  -> speed-up "
                  f"{format_speedup(c, 'speedup_vs_builder')} (95 % interval)")
        if c.get("fp16_builder_s"):
            con.print(f"  vs fp16 builder {c['fp16_builder_s'] * 1000:.1f} ms ({c['fp16_builder']}, "
                      f"confirmed the same way)  -> {format_speedup(c, 'speedup_vs_fp16_builder')}")
        if c.get("lossless_s"):
            con.print(f"  best lossless   {c['lossless_s'] * 1000:.1f} ms ({c['lossless']})  -> "
                      f"{format_speedup(c, 'lossless_speedup_vs_builder')} vs the builder, "
                      f"{format_speedup(c, 'lossless_speedup_vs_ddp')} vs torch DDP")
    for e in choice.excluded:
        con.print(f"  not chosen      {e.line()}", markup=False, highlight=False)
    if choice.strategy is not None:
        where = "the best found" if choice.source == "search" else f"reference {choice.source}"
        con.print(f"  chosen          {choice.strategy.id} ({where}{', exported' if exported else ''})",
                  markup=False, highlight=False)
    conf = s.get("confirmed") or {}
    ddp_ms = conf.get("ddp_s") or s["ddp_s"]
    con.print(f"  torch DDP       {_fmt(ddp_ms and ddp_ms * 1000, '.1f', ' ms')}"
              f"  -> speed-up {format_speedup(conf, 'speedup_vs_ddp') if conf else '- (not confirmed)'}")
    if s.get("objective") == "time-to-loss":
        con.print(f"  time to loss    {_fmt(s.get('ttl_best_s') and s['ttl_best_s'] * 1000, '.1f', ' ms')}"
                  f" per exact-equivalent step ({s.get('ttl_best') or '-'})  -> speed-up "
                  f"{_fmt(s.get('ttl_speedup_vs_builder'), '.2f', 'x')} vs the best builder, "
                  f"{_fmt(s.get('ttl_speedup_vs_ddp'), '.2f', 'x')} vs torch DDP")
        for sid, why in (s.get("excluded") or {}).items():
            con.print(f"  excluded        {sid}: {why}", markup=False, highlight=False)
    con.print(f"  trials to 1.1x / 1.2x / 1.3x over the best builder: {_fmt(s['trials_to_1.1x'], 'd')}"
              f" / {_fmt(s['trials_to_1.2x'], 'd')} / {_fmt(s['trials_to_1.3x'], 'd')}")
    con.print("  hit rate per round (trials >= 2 % faster than the best builder): "
              + " ".join(f"{h:.1f}" for h in s["hit_rate"]))
    if version is not None:
        con.print(f"  simulator registered as {version.name} version {version.version} "
                  f"(promote it with `autosync-transfer registry promote {version.name} {version.version}`)")


def recommend(
    domain_name: Optional[str] = typer.Argument(None, metavar="[DOMAIN]", help="e.g. bert-B (or --model with --cluster-file; default with --simulator: the simulator's own domain)."),
    simulator: Optional[str] = typer.Option(None, "--simulator", metavar="MODEL_URI", help="models:/NAME@ALIAS or a registered name (its champion); default: the step-time simulator."),
    candidates: int = typer.Option(2000, "--candidates", min=1, help="Sampled candidates to rank (the builders are always included)."),
    seed: int = typer.Option(0, "--seed"),
    preset: SamplerPreset = typer.Option(SamplerPreset.dataset, "--preset", help="Sampler preset of the candidates."),
    export_json: Optional[str] = typer.Option(None, "--export-json", metavar="PATH", help="Write the strategy as JSON."),
    export_autodist: Optional[str] = typer.Option(None, "--export-autodist", metavar="PATH", help="Write the strategy as an AutoDist strategy file."),
    allow_lossy: bool = typer.Option(False, "--allow-lossy", help=_ALLOW_LOSSY_HELP),
    cluster_file: Optional[str] = cluster_file_option(),
    model: Optional[str] = model_option(),
    json_out: bool = json_option("Print the strategy as JSON."),
) -> None:
    """The strategy a simulator ranks fastest for DOMAIN, without running anything."""
    import sys

    from autosync_transfer.cli._common import out, resolve_target
    from autosync_transfer.cli._output import (check_out, export_strategy, strategy_summary,
                                               strategy_table)
    from autosync_transfer.errors import ConfigError
    from autosync_transfer.search.recommendation import recommend_checked

    check_out(export_json, "--export-json")
    check_out(export_autodist, "--export-autodist")
    sim = None
    if simulator is not None and domain_name is None and model is None and cluster_file is None:
        from autosync_transfer.registry.flavor import load_version

        sim, domain, _ = load_version(simulator)  # the simulator's own domain
    else:
        domain, _ = resolve_target(domain_name, cluster_file, model)
    if simulator is not None and sim is None:
        from autosync_transfer.registry.flavor import load_simulator

        sim = load_simulator(simulator)
    choice = recommend_checked(domain.model, domain.cluster, sim, candidates=candidates,
                               seed=seed, preset=preset.value, allow_lossy=allow_lossy)
    best = choice.strategy
    if best is None:
        raise ConfigError(choice.error)
    export_strategy(best, domain, export_json, export_autodist)
    if json_out:
        sys.stdout.write(best.to_json(indent=2) + "\n")
        return
    out().print(strategy_table([strategy_summary(best, domain)],
                               f"recommended for {domain.name} by "
                               f"{simulator or 'the step-time simulator'}"))
    if choice.excluded:
        from autosync_transfer.cli._common import err

        shown = "; ".join(e.line() for e in choice.excluded[:3])
        more = f" and {len(choice.excluded) - 3} more" if len(choice.excluded) > 3 else ""
        err().print(f"passed over {len(choice.excluded)} lossy candidates ranked faster "
                    f"without a passed convergence check ({shown}{more}); --allow-lossy "
                    f"recommends them", markup=False, highlight=False)
