"""``autosync-transfer strategies sample|baseline|validate|show|check``."""

from __future__ import annotations

from typing import Optional

import typer

from autosync_transfer.cli._choices import Builder, Optimizer, SamplerPreset
from autosync_transfer.cli._params import (Command, cluster_file_option, json_option,
                                           model_option, store_option)

app = typer.Typer(help="Strategies: sample the space, build hand-optimized ones, validate files.",
                  no_args_is_help=True)


@app.command("sample", cls=Command)
def sample(
    domain_name: str = typer.Argument(..., metavar="DOMAIN", help="e.g. bert-large-B"),
    n: int = typer.Option(10, "--count", "-n", min=1, help="How many strategies."),
    seed: int = typer.Option(0, "--seed", help="Sampler seed (same seed, same strategies)."),
    preset: SamplerPreset = typer.Option(SamplerPreset.default, "--preset", help="Sampler preset (default: AutoSync's product space)."),
    out_path: Optional[str] = typer.Option(None, "--out", metavar="PATH", help="Write the strategies as JSON Lines."),
    json_out: bool = json_option("Print the strategies as JSON Lines."),
    estimate_cost: bool = typer.Option(False, "--estimate", help="Add the analytical sync-time estimate."),
    cluster_file: Optional[str] = cluster_file_option(),
) -> None:
    """Sample valid strategies from AutoSync's space with its knowledge constraints."""
    import sys

    from autosync_transfer.cli._common import out, resolve_domain
    from autosync_transfer.cli._output import (check_out, strategy_summary, strategy_table,
                                               write_jsonl)
    from autosync_transfer.strategies.sampler import StrategySampler, preset as get_preset
    from autosync_transfer.strategies.validate import validate

    domain = resolve_domain(domain_name, cluster_file)
    check_out(out_path, "--out")
    sampler = StrategySampler(domain, get_preset(preset.value), seed=seed)
    strategies = sampler.sample_n(n)
    for s in strategies:
        validate(s, domain)
    if out_path:
        write_jsonl(out_path, strategies)
    if json_out:
        for s in strategies:
            sys.stdout.write(s.to_json() + "\n")
        return
    rows = [strategy_summary(s, domain if estimate_cost else None) for s in strategies]
    shown = rows[:20]
    out().print(strategy_table(shown, f"{n} strategies sampled for {domain.name} (seed {seed}, "
                                      f"preset {preset.value})"))
    if len(rows) > len(shown):
        out().print(f"... {len(rows) - len(shown)} more (all valid)" + (f"; written to {out_path}" if out_path else ""))
    elif out_path:
        out().print(f"written to {out_path}")


@app.command("baseline", cls=Command)
def baseline(
    domain_name: str = typer.Argument(..., metavar="DOMAIN"),
    builder: Optional[Builder] = typer.Argument(None, metavar="BUILDER", help="Builder name; omit to compare all builders."),
    export_json: Optional[str] = typer.Option(None, "--export-json", metavar="PATH", help="Write the strategy as JSON."),
    export_autodist: Optional[str] = typer.Option(None, "--export-autodist", metavar="PATH", help="Write the strategy as an AutoDist strategy file."),
    json_out: bool = json_option(),
    cluster_file: Optional[str] = cluster_file_option(),
) -> None:
    """Build a hand-optimized strategy (ps, ps_lb, partitioned_ps, all_reduce, partitioned_ar,
    parallax, ddp), or rank all of them with the analytical cost model."""
    import sys

    from autosync_transfer.cli._common import out, print_json, resolve_domain
    from autosync_transfer.cli._output import (check_out, export_strategy, strategy_summary,
                                               strategy_table)
    from autosync_transfer.errors import ConfigError
    from autosync_transfer.strategies.builders import BUILDERS, build

    domain = resolve_domain(domain_name, cluster_file)
    if builder is None:
        if export_json or export_autodist:
            raise ConfigError("--export-json/--export-autodist need a BUILDER name")
        rows = sorted((strategy_summary(build(b, domain), domain) for b in BUILDERS),
                      key=lambda r: r["estimated_sync_s"])
        if json_out:
            print_json(rows)
            return
        out().print(strategy_table(rows, f"hand-optimized strategies on {domain.name}, "
                                         f"ranked by the analytical cost model (sync time per step)"))
        return
    check_out(export_json, "--export-json")
    check_out(export_autodist, "--export-autodist")
    strategy = build(builder.value, domain)
    export_strategy(strategy, domain, export_json, export_autodist)
    if json_out:
        sys.stdout.write(strategy.to_json(indent=2) + "\n")
        return
    out().print(strategy_table([strategy_summary(strategy, domain)],
                               f"{builder.value} on {domain.name}"))


@app.command("validate", cls=Command)
def validate_cmd(
    domain_name: str = typer.Argument(..., metavar="DOMAIN"),
    path: str = typer.Argument(..., metavar="FILE", help="Strategy JSON or AutoDist protobuf file."),
    all_errors: bool = typer.Option(False, "--all", help="List every violation, not only the first."),
    json_out: bool = json_option("Print the verdict as JSON (a violation is still an error)."),
    cluster_file: Optional[str] = cluster_file_option(),
) -> None:
    """Check a strategy file against a domain; exit 2 naming the first broken rule."""
    from autosync_transfer.cli._common import err, load_strategy, out, print_json, resolve_domain
    from autosync_transfer.errors import StrategyValidationError
    from autosync_transfer.strategies.validate import violations

    domain = resolve_domain(domain_name, cluster_file)
    strategy = load_strategy(path, domain)
    found = violations(strategy, domain)
    if found:
        if all_errors:
            for v in found[1:]:
                err().print(f"  {v}", markup=False, highlight=False)
        raise StrategyValidationError(found)
    if json_out:
        print_json({"valid": True, "strategy": strategy.id, "variables": len(strategy.nodes),
                    "domain": domain.name})
        return
    out().print(f"valid: {strategy.id} ({len(strategy.nodes)} variables) on {domain.name}",
                markup=False, highlight=False)


@app.command("show", cls=Command)
def show(
    path: str = typer.Argument(..., metavar="FILE", help="Strategy JSON or AutoDist protobuf file."),
    domain_name: Optional[str] = typer.Argument(None, metavar="[DOMAIN]", help="Validate and estimate on this domain."),
    json_out: bool = json_option("Print the strategy as JSON."),
    cluster_file: Optional[str] = cluster_file_option(),
) -> None:
    """Summarize a strategy FILE (and its analytical cost on DOMAIN)."""
    import sys

    from autosync_transfer.cli._common import load_strategy, out, resolve_domain
    from autosync_transfer.cli._output import strategy_summary, strategy_table
    from autosync_transfer.strategies.validate import validate

    domain = resolve_domain(domain_name, cluster_file) if domain_name else None
    strategy = load_strategy(path, domain)
    if domain is not None:
        validate(strategy, domain)
    if json_out:
        sys.stdout.write(strategy.to_json(indent=2) + "\n")
        return
    out().print(strategy_table([strategy_summary(strategy, domain)], path))


@app.command("check", cls=Command)
def check(
    domain_name: Optional[str] = typer.Argument(None, metavar="[DOMAIN]", help="e.g. ncf-dense-C (or --model with --cluster-file)."),
    strategy: str = typer.Option(..., "--strategy", "-s", help="A strategy file (JSON or AutoDist) or a builder name."),
    steps: int = typer.Option(150, "--steps", min=4, help="Training steps of each run (the strategy's and exact synchronization's)."),
    seed: int = typer.Option(0, "--seed", help="The first seed of the weights and the batches (the same in both runs)."),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Seeds SEED, SEED+1, ...: the verdict is the one-sided 95 % upper bound over them."),
    optimizer: Optimizer = typer.Option(Optimizer.adam, "--optimizer", help="adam or sgd (momentum 0.9)."),
    lr: Optional[float] = typer.Option(None, "--lr", min=0.0, help="Learning rate [default: the workload's: 1e-4 for VGG, 1e-3 otherwise]."),
    max_step_ratio: float = typer.Option(1.10, "--max-step-ratio", min=1.0, help="Pass when the strategy needs at most this many times the exact run's steps to the target loss (upper bound over the seeds) ..."),
    max_final_gap: float = typer.Option(0.02, "--max-final-gap", min=0.0, help="... and its final loss is at most this much (relative) above the exact run's (upper bound)."),
    store: Optional[str] = store_option("Append the check to this check store (JSON Lines); a check stored there already is shown, not run again."),
    json_out: bool = json_option("Print the check as JSON."),
    cluster_file: Optional[str] = cluster_file_option(),
    model: Optional[str] = model_option(),
) -> None:
    """Train DOMAIN's workload (or your --model) with a strategy and with exact synchronization,
    same seeds and batches, on --seeds seeds, and compare the loss curves: steps to the target
    loss (the exact run's smoothed loss at 3/4 of the steps) and the final-loss gap, each with
    its one-sided 95 % upper bound over the seeds; it passes only when both bounds lie within
    the tolerance. Exit 1 when the check fails."""
    import time

    from autosync_transfer.cli._common import err, load_strategy, out, print_json, resolve_target
    from autosync_transfer.runtime.accuracy import ConvergenceTolerance
    from autosync_transfer.runtime.convergence import (ConvergenceConfig, check_convergence,
                                                       resolve_config)
    from autosync_transfer.runtime.trial import workload_spec_of
    from autosync_transfer.strategies.builders import BUILDERS, build
    from autosync_transfer.strategies.validate import validate

    from autosync_transfer.errors import ConfigError

    if lr is not None and not lr > 0:
        raise ConfigError(f"--lr must be > 0, got {lr:g}")
    domain, workload = resolve_target(domain_name, cluster_file, model)
    strat = (build(strategy, domain) if strategy in BUILDERS
             else validate(load_strategy(strategy, domain), domain))
    cfg = resolve_config(
        ConvergenceConfig(steps=steps, seed=seed, seeds=seeds, optimizer=optimizer.value, lr=lr,
                          tolerance=ConvergenceTolerance(max_step_ratio=max_step_ratio,
                                                         max_final_gap=max_final_gap)),
        workload_spec_of(domain, workload))
    checks = None
    found = None
    if store:
        from autosync_transfer.dataset.checks import CheckStore

        checks = CheckStore(store)
        found = checks.get(domain.name, strat, steps, seed, optimizer=cfg.optimizer, lr=cfg.lr)
        if found is not None and (found.tolerance != cfg.tolerance
                                  or len(found.seeds or (found.seed,)) != cfg.seeds):
            found = None
    t0 = time.monotonic()
    if found is None:
        with err().status(f"training {steps} steps of {domain.name} with {strat.id} and with "
                          f"exact synchronization", spinner="dots"):
            run = check_convergence(domain, [strat], workload=workload, config=cfg)[0]
        if checks is not None:
            checks.append(domain.name, strat, run, {"config": cfg.model_dump(mode="json")})
        found = run.check
    if json_out:
        print_json(found.model_dump(mode="json"))
    else:
        out().print(f"{strat.id} on {domain.name}: {found.summary()}", markup=False,
                    highlight=False)
        out().print(f"  {found.seconds / 60:.1f} min of training (this call "
                    f"{(time.monotonic() - t0) / 60:.1f} min)", markup=False, highlight=False)
    if not found.passed:
        raise typer.Exit(1)
