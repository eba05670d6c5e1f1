"""AutoSync's Table-1 analogue on the measured dataset: in-domain ranking quality per ranker.

For every domain with enough ok trials, each ranker kind is trained on the domain's 70 % split and
evaluated on its 15 % test split (per-domain seeded splits), over several seeds; each cell prints
pairwise accuracy (mean ± std over seeds), the top-1 score ``t1`` and the regret ``rg`` of the
strategy the ranker picks from the test split (means over seeds). pick = argmin of the ranker's
score over the test strategies; ``t1`` = ``rankers.metrics.top1_score`` = measured(best) /
measured(pick) (1.0: the best picked); ``rg`` = ``rankers.metrics.regret`` = measured(pick) /
measured(best) - 1 (0: the best picked), on the drift-normalized runtimes the rankers train on.
The analytical cost model (``analytical``) and the step-time simulator (``stepsim``, its fallback
physics: cluster spec and model graph) need no training (zero trials) and are evaluated on the
same test split. The ``ceiling`` column is the pairwise accuracy a perfect simulator can expect
against measurements as noisy as the domain's reference re-measurements
(``rankers.metrics.noise_ceiling`` over the domain's strategy runtimes at the median robust CV
of the re-measurements: 1.4826 x MAD / median, which a few disturbed measurements barely move).
The rankers train and are scored on drift-normalized runtimes, so ``ceil_n`` is the ceiling of
those labels (``dataset.loader.normalized_reference_noise``: every re-measurement normalized by
the others, as a trial is by the re-measurements around it) and ``gap`` is the best learned
ranker's distance to it (negative: above it).
A second table covers the domains whose store has repeat runs (``benchmarks/repeatability.py``):
each kind is trained on the domain's strategies *other than* the re-measured ones and scores the
re-measured ones; ``pw`` = pairwise accuracy on all their pairs against the runs' consensus labels,
``res`` = on the pairs the runs resolve (count in the header), ``rg`` = top-1 regret of its pick
against the consensus-fastest, ``rg_res`` = against the confidently-best (0 where the runs cannot
tell the pick from the fastest; ``dataset.repeat.ranking_figures``), means over seeds. Where the
repeat runs leave fewer other strategies than ``--min-trials`` (a store re-measured nearly
whole: trained on those alone, a ranker would learn from a handful of strategies without a
validation split to gate it), a 3-fold cross-validation over the re-measured strategies
instead: each fold scored by rankers trained on the store without it, pairs counted within a
fold, no pick (``rg`` and ``rg_res`` nan). A held-out cluster's store
(``--stores benchmarks/results/heldout --min-trials 30``) trains on its own domain.
``--repeats DIRS`` (comma-separated folders) holds the repeat files where none sits beside a store
(another machine type's *twin* stores, e.g. ``--stores benchmarks/results/machines/intel-xeon/trials
--repeats datasets/trials``, run with that machine type's physics in ``$AUTOSYNC_PROFILES_DIR`` and
``$AUTOSYNC_CALIBRATIONS_DIR``, which the lookup takes before the shipped physics); the runs of
the store's own machine type judge it (``dataset.repeat.STORE_MACHINE``).
Below it, **the physics of the run**: for every complete repeat run measured with its own physics
(``benchmarks/repeatability.py --physics``: a profile and a calibration taken on the machine of the
run just before its first round), the same row with every kind trained and scored with that
physics (``dataset.repeat.using_run_physics``), judged on the run's strategies and the pairs that
run resolves by itself.
``--margin noise`` trains every learned ranker on the pairs its domain's labels can order
(``dataset.loader.label_margin``: the labels' 95 % noise band from the reference
re-measurements; the validation accuracy that picks the epoch counts the same pairs); a number
is one relative margin for every domain; the default 0 counts every pair. ``--start-margin``
(noise or a number; default ``--margin``'s) is the label gap counted where an epoch is weighed
against starting weights that already rank (``train_simulator(start_margin=)``). ``--tables resolved``
prints the second table only; ``--domains`` limits either table to those domains.
``--out FILE`` appends the tables, headed by the command line, to FILE.

    python benchmarks/ranker_table.py [--seeds 3] [--epochs 60] [--min-trials 40]
        [--kinds analytical,stepsim,linear,rnn,gat,transformer] [--margin 0|noise|FLOAT]
        [--start-margin 0|noise|FLOAT] [--tables split,resolved] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import statistics
import sys

#: the kinds that train nothing (zero trials of the domain)
PHYSICS = ("analytical", "stepsim")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--min-trials", type=int, default=40)
    ap.add_argument("--kinds", default="analytical,stepsim,linear,rnn,gat,transformer")
    ap.add_argument("--stores", default=None, help="trial stores (default: the shipped datasets/)")
    ap.add_argument("--domains", default=None, help="comma-separated subset")
    ap.add_argument("--repeats", default=None,
                    help="comma-separated folders holding the repeat files where none sits "
                         "beside a store (e.g. datasets/trials for another machine type's twin "
                         "stores); the runs of the store's own machine type judge it")
    ap.add_argument("--margin", default="0",
                    help="the ranking loss's relative margin: noise (each domain's label "
                         "noise band, dataset.loader.label_margin) or a number (default 0)")
    ap.add_argument("--start-margin", default=None,
                    help="the label gap the gate counts when an epoch is weighed against "
                         "starting weights that already rank: noise or a number (default: "
                         "--margin's)")
    ap.add_argument("--tables", default="split,resolved",
                    help="which tables: split (the test splits), resolved (the re-measured "
                         "strategies), comma-separated")
    ap.add_argument("--out", default=None, help="append the table to this file")
    args = ap.parse_args()
    tables = set(args.tables.split(","))
    if not tables or not tables <= {"split", "resolved"}:
        print(f"--tables must name split and/or resolved, got {args.tables!r}", file=sys.stderr)
        return 2
    from autosync_transfer.dataset.loader import parse_margins
    from autosync_transfer.errors import ConfigError

    try:
        args.margin_value, args.start_margin_value = parse_margins(args.margin, args.start_margin)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2

    import torch

    from autosync_transfer.dataset.loader import load_trials

    torch.set_num_threads(1)
    df = load_trials(args.stores)
    df = df[(df["status"] == "ok") & (df["strategy_kind"] != "torch_ddp")]
    counts = df.groupby("domain")["strategy_id"].nunique()
    domains = [d for d, n in counts.items() if n >= args.min_trials]
    if args.domains:
        domains = [d for d in domains if d in args.domains.split(",")]
    if not domains:
        print(f"no domain has {args.min_trials} measured strategies yet", file=sys.stderr)
        return 1
    kinds = args.kinds.split(",")
    lines: list[str] = []

    def out(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    if "split" in tables:
        split_table(df, domains, counts, kinds, args, out)
    if "resolved" in tables:
        resolved_table(df, kinds, args, out)
    if args.out:
        stamp = datetime.date.today().isoformat()
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(f"\n# {stamp}: python {' '.join(shlex.quote(a) for a in sys.argv)}\n"
                     + "\n".join(lines) + "\n")
    return 0


def margin_hparams(args, sub) -> dict[str, float] | None:  # noqa: ANN001
    """The learned rankers' hyper-parameters for one domain's trials ``sub``: ``--margin``."""
    from autosync_transfer.dataset.loader import margin_for

    margin = margin_for(args.margin_value, sub)
    return {"margin": margin} if margin > 0 else None


def start_margin(args, sub) -> float:  # noqa: ANN001
    """The start gate's label gap for one domain's trials ``sub``: ``--start-margin``."""
    from autosync_transfer.dataset.loader import margin_for

    return margin_for(args.start_margin_value, sub)


def split_table(df, domains, counts, kinds: list[str], args, out) -> None:  # noqa: ANN001
    """The kinds on every domain's seeded test split."""
    from autosync_transfer.dataset.loader import (normalized_noise_ceiling, reference_noise,
                                                  strategy_runtimes, strategy_table)
    from autosync_transfer.rankers.metrics import noise_ceiling
    from autosync_transfer.rankers.simulator import train_simulator

    out(f"{'domain':14s} {'n':>4s} {'ceiling':>7s} {'ceil_n':>6s} {'gap':>6s} "
        + " ".join(f"{k:>30s}" for k in kinds))
    best_learned, ceilings, norm_ceilings, gaps = [], [], [], []
    for d in domains:
        sub = df[df["domain"] == d]
        noise = reference_noise(sub)
        ceiling = (noise_ceiling(strategy_runtimes(sub)["median_s"].to_numpy(dtype=float),
                                 float(noise["median_robust_cv"])) if noise else float("nan"))
        if ceiling == ceiling:
            ceilings.append(ceiling)
        table = strategy_table(sub)  # the measured strategies, as the rankers train on them
        ceil_n = normalized_noise_ceiling(sub, table["runtime_s"])
        if ceil_n == ceil_n:
            norm_ceilings.append(ceil_n)
        cells = []
        accs: dict[str, float] = {}
        hparams = margin_hparams(args, sub)
        gate = start_margin(args, sub)
        for kind in kinds:
            pa, t1, rg = [], [], []
            for seed in range(args.seeds):
                _, m = train_simulator(kind, table, seed=seed, max_epochs=args.epochs,
                                       hparams=hparams if kind not in PHYSICS else None,
                                       start_margin=gate)
                pa.append(m["test_pairwise_accuracy"])
                t1.append(m["test_top1"])
                rg.append(m["test_regret"])
            sd = statistics.pstdev(pa) if len(pa) > 1 else 0.0
            accs[kind] = statistics.mean(pa)
            cells.append(f"{statistics.mean(pa):.3f}±{sd:.3f} t1 {statistics.mean(t1):.2f} "
                         f"rg {statistics.mean(rg):.3f}")
        learned = {k: v for k, v in accs.items() if k not in PHYSICS}
        gap = float("nan")
        if learned:
            best_learned.append(max(learned.values()))
            gap = ceil_n - best_learned[-1]
            if gap == gap:
                gaps.append(gap)
        out(f"{d:14s} {counts[d]:4d} {ceiling:7.3f} {ceil_n:6.3f} {gap:+6.3f} "
            + " ".join(f"{c:>30s}" for c in cells))
    out(f"\ncell: test pairwise accuracy mean±std over {args.seeds} seeds; t1 = top-1 score "
        f"(rankers.metrics.top1_score) = measured(best) / measured(pick); rg = regret = "
        f"measured(pick) / measured(best) - 1; pick = argmin of the score over the test split; "
        f"{', '.join(k for k in kinds if k in PHYSICS) or 'no kind'}: zero trials (no training)")
    if best_learned:
        out(f"median over domains of the best learned ranker's pairwise accuracy: "
            f"{statistics.median(best_learned):.3f} (goal >= 0.92); median noise ceiling: "
            f"{statistics.median(ceilings) if ceilings else float('nan'):.3f} (raw), "
            f"{statistics.median(norm_ceilings) if norm_ceilings else float('nan'):.3f} "
            f"(normalized labels); best learned within 0.02 of ceil_n (goal) on "
            f"{sum(g <= 0.02 for g in gaps)} of {len(gaps)} domains")


def resolved_table(df, kinds: list[str], args, out) -> None:  # noqa: ANN001
    """The kinds on the re-measured strategies of every store with complete repeat runs."""
    from pathlib import Path

    from autosync_transfer.dataset.loader import dataset_files, find_domain
    from autosync_transfer.dataset.repeat import (load_repeatability, run_physics,
                                                  using_run_physics)

    rows = []
    repeats = tuple(x for x in (args.repeats or "").split(",") if x)
    for f in dataset_files(args.stores):
        if f.suffix != ".jsonl":
            continue
        name = Path(f).stem
        if args.domains and name not in args.domains.split(","):
            continue
        rep = load_repeatability(f, name, repeats=repeats)
        if rep is None or not rep.complete_runs() or name not in set(df["domain"]):
            continue
        rows.append((name, f, rep))
    if not rows:
        return
    out("\non the re-measured strategies (trained without them): pw / res [95 % interval] / rg / "
        "rg_res (means over the seeds; the interval's bounds too: dataset.repeat."
        "resolved_interval, a bootstrap over strategies)")
    paired = "stepsim" in kinds and any(k not in PHYSICS for k in kinds)
    out(f"{'domain':14s} {'n':>4s} {'resolved':>8s} " + " ".join(f"{k:>47s}" for k in kinds)
        + (f" {'best learned - stepsim [95 %]':>47s}" if paired else ""))
    run_lines: list[str] = []
    for name, f, rep in rows:
        sub = df[df["domain"] == name]
        domain = find_domain(name, [f])
        line = _resolved_line(name, sub, domain, rep, kinds, args, out, paired)
        if line is not None:
            out(line)
        for run in rep.complete_runs():
            if run_physics(f, domain, run, repeats) is None:
                continue
            with using_run_physics(f, domain, run, repeats):
                line = _resolved_line(name, sub, domain, rep, kinds, args, run_lines.append,
                                      paired, runs=[run])
            if line is not None:
                run_lines.append(line)
                print(line, file=sys.stderr, flush=True)
    if paired:
        out("best learned - stepsim: the learned kind with the highest res, its share of the "
            "resolved pairs ordered right minus the step-time simulator's on the same pairs, "
            "and its 95 % interval (paired, a bootstrap over strategies; means over the seeds)")
    if run_lines:
        out("\nthe physics of the run: for every repeat run measured with its physics "
            "(benchmarks/repeatability.py --physics: a profile and a calibration taken on the "
            "machine of the run just before its first round), every kind trained and scored "
            "with that physics (dataset.repeat.using_run_physics) and judged on the run's "
            "strategies against its own medians, on the pairs it resolves by itself; columns as "
            "above")
        out(f"{'domain':14s} {'run':4s} {'n':>4s} {'resolved':>8s} "
            + " ".join(f"{k:>47s}" for k in kinds)
            + (f" {'best learned - stepsim [95 %]':>47s}" if paired else ""))
        for line in run_lines:
            out(line)


def _resolved_line(name: str, sub, domain, rep, kinds: list[str], args, say,  # noqa: ANN001
                   paired: bool, runs: list[str] | None = None) -> str | None:
    """One store's row of the resolved table: every kind trained on the store's strategies other
    than the re-measured ones of ``runs`` (default: every complete run) and judged on those
    runs' resolved pairs; None (with a line through ``say``) where it is left out."""
    from autosync_transfer.dataset.loader import strategy_table
    from autosync_transfer.dataset.repeat import ranking_figures
    from autosync_transfer.rankers.datamodule import TrialDataModule
    from autosync_transfer.rankers.simulator import train_simulator

    lead = f"{name:14s}" + (f" {runs[0]:4s}" if runs and len(runs) == 1 else "")
    runs = runs or rep.complete_runs()
    table = strategy_table(sub)
    held = set(rep.strategy_ids(runs))
    test = table[table["strategy_id"].isin(held)]
    # the store's other strategies train; where the repeat runs leave fewer of them than a
    # domain needs to be trained on at all (--min-trials), a cross-validation over the
    # re-measured ones: each fold predicted by simulators trained without it (on the others and
    # the other folds), pairs counted within a fold
    folds = _folds(sorted(held & set(test["strategy_id"])), len(table) - len(test),
                   min_train=args.min_trials)
    groups = ({s: k for k, fold in enumerate(folds) for s in fold} if len(folds) > 1
              else None)
    if len(table) - len(test) < 2 and groups is None:
        say(f"{lead} {len(test):4d}: left out, its repeat runs cover {len(test)} of its "
            f"{len(table)} strategies, too few to cross-validate over")
        return None
    if groups is not None:
        say(f"{lead} {len(test):4d}: its repeat runs cover {len(test)} of its "
            f"{len(table)} strategies, leaving {len(table) - len(test)} to train on (fewer than "
            f"--min-trials {args.min_trials}): {len(folds)}-fold cross-validation over them, "
            f"pairs within a fold (no pick: rg and rg_res are nan)")
    cells = []
    n_res = 0
    hparams = margin_hparams(args, sub)
    gate = start_margin(args, sub)
    predictions: dict[str, list[dict[str, float]]] = {}
    resolved_of: dict[str, float] = {}
    for kind in kinds:
        figs = []
        for seed in range(args.seeds):
            pred: dict[str, float] = {}
            for fold in folds:
                part = test[test["strategy_id"].isin(fold)]
                # the store's own domain (a held-out cluster is not in the catalog)
                data = TrialDataModule(table[~table["strategy_id"].isin(fold)],
                                       split_seed=seed, seed=seed, domains={name: domain})
                sim, _ = train_simulator(kind, data, seed=seed, max_epochs=args.epochs,
                                         hparams=hparams if kind not in PHYSICS else None,
                                         start_margin=gate)
                pred.update(zip(part["strategy_id"],
                                map(float, sim.score(list(part["strategy"]), domain))))
            predictions.setdefault(kind, []).append(pred)
            figs.append(ranking_figures(pred, rep, runs, groups=groups))
        n_res = figs[0]["resolved_pairs"]
        resolved_of[kind] = statistics.mean(x["pairwise_resolved"] for x in figs)
        lo = statistics.mean(x["pairwise_resolved_low"] for x in figs)
        hi = statistics.mean(x["pairwise_resolved_high"] for x in figs)
        cells.append(f"{statistics.mean(x['pairwise'] for x in figs):.3f} / "
                     f"{statistics.mean(x['pairwise_resolved'] for x in figs):.3f} "
                     f"[{lo:.3f}, {hi:.3f}] / "
                     f"{statistics.mean(x['top1_regret'] for x in figs):.3f} / "
                     f"{statistics.mean(x['top1_regret_resolved'] for x in figs):.3f}")
    if paired:
        cells.append(_learning_adds(predictions, resolved_of, rep, groups, runs))
    return f"{lead} {len(test):4d} {n_res:8d} " + " ".join(f"{c:>47s}" for c in cells)


def _folds(ids: list[str], others: int, k: int = 3, min_train: int = 2) -> list[list[str]]:
    """The re-measured strategies ``ids`` as one test set where the store has ``others`` >=
    ``min_train`` strategies besides them to train on, else ``k`` folds of them (a fixed
    shuffle; one test set too where there are fewer than ``2 k`` of them)."""
    if others >= max(2, min_train) or len(ids) < 2 * k:
        return [ids]
    import random

    order = list(ids)
    random.Random(0).shuffle(order)
    return [sorted(order[i::k]) for i in range(k)]


def _learning_adds(predictions: dict[str, list[dict[str, float]]],
                   resolved_of: dict[str, float], rep, groups=None,  # noqa: ANN001
                   runs: list[str] | None = None) -> str:
    """What the best learned kind adds over the step-time simulator on the resolved pairs
    (within one fold, with ``groups``)."""
    from autosync_transfer.dataset.repeat import resolved_interval

    learned = [k for k in predictions if k not in PHYSICS]
    best = max(learned, key=lambda k: (resolved_of[k], -learned.index(k)))
    base = predictions["stepsim"][0]
    resolved = {p: v for p, v in rep.resolved(runs or rep.complete_runs()).items()
                if p[0] in base and p[1] in base
                and (groups is None or groups[p[0]] == groups[p[1]])}
    if not resolved:
        return f"{best}: -"
    # the same resolved pairs for both: the gain is the difference of their resolved figures
    gain = resolved_of[best] - resolved_of["stepsim"]
    bounds = [resolved_interval(pred, resolved, baseline=base) for pred in predictions[best]]
    return (f"{best} {gain:+.3f} [{statistics.mean(b[0] for b in bounds):+.3f}, "
            f"{statistics.mean(b[1] for b in bounds):+.3f}]")


if __name__ == "__main__":
    sys.exit(main())
