"""Transfer across clusters, across models and both: zero-shot, few-shot fine-tuning, from scratch.

For every (source, target) setting: a ``--ranker`` simulator is trained on all the source's
measured strategies; then :func:`~autosync_transfer.adapt.core.learning_curve` evaluates, on the
target's held-out **evaluation strategies** (never used for adaptation), the source as is
(zero-shot), fine-tuned on N target trials, and a simulator trained from scratch on the same N
trials, over ``--seeds`` seeds. N = 200 (or every non-held-out target strategy, when fewer: the
column says how many) is the from-scratch reference that <= 20 adapted trials should match.

Evaluation share: 15 % of the target's measured strategies (the registry's test split), but at
least ``--min-eval`` (default 10) of them: a target of n strategies holds out
``max(0.15, min_eval / n)`` of them (40 strategies -> 25 %, 10 held out; the 200-strategy
targets keep 15 %, 30 held out). The ``eval`` column says how many.

Two tables:

* **pairwise**: pairwise accuracy on the evaluation strategies (pairs of different measured
  runtime whose order the scores get right), as before;
* **pick**: what a user of the simulator gets from it. On the target's evaluation strategies,
  ``pick = argmin`` of the simulator's score (the first on ties);
  ``regret = measured(pick) / measured(best) - 1`` and top-1 is ``rankers.metrics.top1_score``
  (``measured(best) / measured(pick)``: 1.0 when the pick is the best, 0.5 when it takes twice
  as long), with the measured runtimes drift-normalized like the pairwise labels
  (``dataset.loader.strategies_and_runtimes``); means over seeds. Beside the learned ones, the
  zero-trial physics on the same evaluation strategies: the step-time simulator
  (``Simulator("stepsim")`` with its measured physics: the target's shipped workload profile and
  cluster calibration, found by fingerprint, ``rankers.physics``) and the analytical sync-only
  cost model (``Simulator("analytical")``).

A third table, for the targets whose store has repeat runs (``benchmarks/repeatability.py``):
the re-measured strategies are the evaluation set (the shots come from the others; where fewer
than 20 others are left, a second line draws the 20 shots from the re-measured strategies, per
seed, and judges zero-shot, the 20 trials and the simulator on the ones left), judged
against the runs' consensus labels (``dataset.repeat.ranking_figures``): pairwise accuracy on all
their pairs, on the pairs the runs resolve (their count), and the top-1 regret, zero-shot and
with 20 target trials (means over seeds), beside the step-time simulator. ``--repeats DIRS``
(comma-separated folders) holds the repeat files where none sits beside a target's store (another
machine type's *twin* stores in ``--trials`` and ``--heldout``, with that machine type's physics
in ``$AUTOSYNC_PROFILES_DIR`` and ``$AUTOSYNC_CALIBRATIONS_DIR``); the runs of the store's own
machine type judge it (``dataset.repeat.STORE_MACHINE``).

A fourth table, **the physics of the run**, for every complete repeat run of the target's
machine type measured with its own physics (``benchmarks/repeatability.py --physics``: a profile
and a calibration taken on the machine of the run just before its first round): the same three
columns with the target's strategies featurized and simulated with that physics
(``dataset.repeat.using_run_physics``; the source keeps the physics it was trained with), judged
on the run's own strategies and the pairs that run resolves by itself. Its last line names the
lowest zero-shot figure and the highest zero-shot regret, each with its run.

``--heldout DIR``: the trial stores of a held-out cluster (``<model>-heldout.jsonl``, e.g.
``benchmarks/results/heldout``; cluster ``examples/clusters/heldout.yml``, which nothing shipped
is trained or tuned on); its domains are found from the stores' metadata and the settings
bert-3l-C -> bert-3l-heldout, ncf-A -> ncf-heldout, vgg16-s-A -> vgg16-s-heldout are added to the
default ones (with ``--settings``, exactly the given pairs run: ``--heldout`` then only supplies
the stores). ``--margin noise`` trains the source on the pairs its labels can order
(``dataset.loader.label_margin`` of the source's trials; fine-tuning keeps the source's
hyper-parameters, margin included); ``--start-margin`` (noise or a number; default
``--margin``'s) is the label gap the source's training counts where an epoch is weighed against
its starting weights (``ShotTraining.start_margin``). ``--out FILE`` appends the tables, headed by the command
line, to FILE.

    python benchmarks/transfer_table.py [--seeds 3] [--epochs 40] [--settings bert-A:bert-B,...]
        [--heldout benchmarks/results/heldout] [--min-eval 10] [--margin 0|noise|FLOAT]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import shlex
import sys
import time
from pathlib import Path

DEFAULT_SETTINGS = (
    ("clusters", "bert-A", "bert-B"),
    ("models", "bert-3l-B", "bert-12l-B"),
    ("both", "bert-3l-A", "bert-12l-B"),
    ("clusters", "ncf-A", "ncf-C"),
    ("clusters", "vgg16-s-A", "vgg16-s-B"),
)
#: the settings ``--heldout`` adds: a catalog source to the held-out cluster
HELDOUT_SETTINGS = (
    ("held-out", "bert-3l-C", "bert-3l-heldout"),
    ("held-out", "ncf-A", "ncf-heldout"),
    ("held-out", "vgg16-s-A", "vgg16-s-heldout"),
)
PHYSICS = ("stepsim", "analytical")
#: their column labels
PHYSICS_LABELS = {"stepsim": "stepsim pw", "analytical": "analyt. pw"}


def _f(v: float | None, digits: int = 3) -> str:
    return "  -  " if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def holdout_fraction(n: int, min_eval: int, base: float = 0.15) -> float:
    """The evaluation share of a target with ``n`` measured strategies: ``base``, raised so that
    about ``min_eval`` strategies are held out (never more than half)."""
    return min(0.5, max(base, min_eval / max(n, 1)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--ranker", default="rnn")
    ap.add_argument("--hparams", default=None,
                    help='JSON hyper-parameters of the ranker, for the source and the '
                         'from-scratch baselines alike (e.g. \'{"use_agg": true}\': the RNN also '
                         'reads the aggregates, the step-time simulator\'s terms among them)')
    ap.add_argument("--method", default="finetune", help="finetune | finetune-head | multi-source | guarded")
    ap.add_argument("--shots", default="5,20,50")
    ap.add_argument("--reference", type=int, default=200, help="from-scratch reference N")
    ap.add_argument("--settings", default=None,
                    help="comma-separated SOURCE:TARGET pairs (default: the five of the paper's "
                         "settings, plus the held-out ones with --heldout)")
    ap.add_argument("--trials", default=None, help="trial stores (default: the shipped datasets)")
    ap.add_argument("--heldout", default=None,
                    help="folder of the held-out cluster's trial stores (adds its settings)")
    ap.add_argument("--repeats", default=None,
                    help="comma-separated folders holding the targets' repeat files where none "
                         "sits beside the store (e.g. datasets/trials for another machine "
                         "type's twin stores); the runs of the store's own machine type judge it")
    ap.add_argument("--margin", default="0",
                    help="the source ranker's relative margin: noise (the source's label "
                         "noise band, dataset.loader.label_margin) or a number (default 0); "
                         "fine-tuning keeps the source's")
    ap.add_argument("--start-margin", default=None,
                    help="the label gap the source's training counts when an epoch is weighed "
                         "against its simulator prior: noise (the source's label noise band) or "
                         "a number (default: --margin's)")
    ap.add_argument("--min-eval", type=int, default=10,
                    help="hold out at least this many target strategies for evaluation")
    ap.add_argument("--out", default=None, help="append the tables to this file")
    ap.add_argument("--cv-below", type=int, default=None,
                    help="fine-tuning selects epochs by cross-validation below this many shots "
                         "(default: ShotTraining's)")
    ap.add_argument("--physics-only", action="store_true",
                    help="train nothing: only the zero-trial physics columns (step-time simulator, "
                         "analytical model) on every setting's evaluation strategies, which do "
                         "not depend on the source")
    args = ap.parse_args()
    try:
        hparams = json.loads(args.hparams) if args.hparams else None
    except json.JSONDecodeError as e:
        print(f"--hparams must be a JSON object, got {args.hparams!r}: {e}", file=sys.stderr)
        return 2
    if hparams is not None and not isinstance(hparams, dict):
        print(f"--hparams must be a JSON object, got {args.hparams!r}", file=sys.stderr)
        return 2
    from autosync_transfer.dataset.loader import parse_margins
    from autosync_transfer.errors import ConfigError

    try:
        args.margin_value, args.start_margin_value = parse_margins(args.margin, args.start_margin)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    if args.min_eval < 2:
        print(f"--min-eval must be >= 2, got {args.min_eval}", file=sys.stderr)
        return 2

    import pandas as pd
    import torch

    from autosync_transfer.adapt.core import learning_curve
    from autosync_transfer.adapt.data import evaluate_on, split_target, target_data
    from autosync_transfer.adapt.methods import FromScratch
    from autosync_transfer.adapt.training import ShotTraining
    from autosync_transfer.dataset.loader import (dataset_files, find_domain, load_trials,
                                                  margin_for)
    from autosync_transfer.domains.catalog import split_domain_name
    from autosync_transfer.rankers.simulator import Simulator

    torch.set_num_threads(1)
    heldout_files = sorted(Path(args.heldout).glob("*.jsonl")) if args.heldout else []
    if args.heldout and not heldout_files:
        print(f"--heldout {args.heldout}: no trial stores (*.jsonl) there", file=sys.stderr)
        return 2
    heldout_names = set()
    if heldout_files:
        heldout_names = set(load_trials(heldout_files, status="all")["domain"].unique())
    if args.settings:
        settings = []
        for pair in args.settings.split(","):
            src, tgt = pair.split(":", 1)
            (sm, sc), (tm, tc) = split_domain_name(src), split_domain_name(tgt)
            kind = ("held-out" if tgt in heldout_names else "clusters" if sm == tm
                    else "models" if sc == tc else "both")
            settings.append((kind, src, tgt))
    else:
        settings = list(DEFAULT_SETTINGS) + (list(HELDOUT_SETTINGS) if heldout_files else [])
    shots = [int(x) for x in args.shots.split(",")]
    pick_shots = [n for n in shots if n <= 20]  # the regret / top-1 columns: ft@5, ft@20
    df = load_trials(args.trials)
    if heldout_files:
        df = pd.concat([df, load_trials(heldout_files)], ignore_index=True)
    training = (ShotTraining(max_epochs=args.epochs) if args.cv_below is None
                else ShotTraining(max_epochs=args.epochs, cv_below=args.cv_below))

    def domain_of(name: str):
        return find_domain(name, heldout_files) if name in heldout_names else find_domain(name)

    head = (f"{'setting':9s} {'source -> target':28s} {'src n':>5s} {'tgt n':>5s} {'eval':>4s} "
            f"{'zero':>6s} " + " ".join(f"{'ft@' + str(n):>6s}" for n in shots) + " "
            + " ".join(f"{'fs@' + str(n):>6s}" for n in shots)
            + f" {'fs@ref':>10s} {'goal':>5s} {'time':>5s}")
    pick_head = (f"{'setting':9s} {'source -> target':28s} {'eval':>4s} {'rg zero':>7s} "
                 + " ".join(f"{'rg@' + str(n):>6s}" for n in pick_shots) + " "
                 + " ".join(f"{'fs rg@' + str(n):>8s}" for n in pick_shots)
                 + f" {'t1 zero':>7s} " + " ".join(f"{'t1@' + str(n):>6s}" for n in pick_shots)
                 + " | " + " ".join(f"{PHYSICS_LABELS[p]:>10s} {'rg':>6s} {'t1':>5s}"
                                    for p in PHYSICS))
    if args.physics_only:
        return _physics_only(args, settings, df, domain_of)
    rows, pick_rows, res_rows, run_rows = [], [], [], []
    run_best: list[tuple[float, float, str]] = []
    for kind, src, tgt in settings:
        t0 = time.monotonic()
        sdom, tdom = domain_of(src), domain_of(tgt)
        src_df = df[(df["domain"] == src) & (df["status"] == "ok")]
        tgt_df = df[(df["domain"] == tgt) & (df["status"] == "ok")]
        if not len(src_df) or not len(tgt_df):
            print(f"skipping {src} -> {tgt}: no trials of {src if not len(src_df) else tgt}",
                  file=sys.stderr)
            continue
        source_data = target_data(sdom, src_df)
        tgt_data = target_data(tdom, tgt_df)
        margin = margin_for(args.margin_value, src_df)
        src_hparams = {**(hparams or {}), "margin": margin} if margin > 0 else hparams
        gate = margin_for(args.start_margin_value, src_df)
        source = FromScratch(args.ranker, hparams=src_hparams,
                             training=dataclasses.replace(training, start_margin=gate)).fit(
            None, source_data, seed=0).simulator
        split = split_target(tdom, tgt_data, split_seed=0,
                             holdout_fraction=holdout_fraction(len(tgt_data), args.min_eval))
        n_eval = len(split.holdout_ids)
        ref_n = min(args.reference, split.available)
        wanted = sorted({0, *[n for n in shots if n <= split.available], ref_n})
        lc = learning_curve(source, tdom, split, wanted, args.seeds, method=args.method,
                            pretrain_trials=df, training=training,
                            control=FromScratch(args.ranker, hparams=hparams, training=training))
        tables = {m: {r["shots"]: r for r in lc.table(m)}
                  for m in ("pairwise_accuracy", "regret", "top1")}

        def cell(n: int, key: str, metric: str = "pairwise_accuracy") -> float:
            r = tables[metric].get(n)
            return r[f"{key}_mean"] if r else math.nan

        zero = lc.zero_shot.get("pairwise_accuracy", math.nan)
        ft = [cell(n, "adapted") for n in shots]
        fs = [cell(n, "scratch") for n in shots]
        ref = cell(ref_n, "scratch")
        # zero-shot counts: it uses no target trial at all
        best_small = max([v for n, v in zip([0, *shots], [zero, *ft]) if n <= 20 and not math.isnan(v)],
                         default=math.nan)
        goal = "yes" if best_small >= ref else "no"
        holdout = split.holdout()
        physics = {p: evaluate_on(Simulator(p), holdout) for p in PHYSICS}
        name = f"{src} -> {tgt}"
        rows.append(f"{kind:9s} {name:28s} {len(source_data):5d} {len(tgt_data):5d} {n_eval:4d} "
                    f"{_f(zero):>6s} " + " ".join(f"{_f(v):>6s}" for v in ft) + " "
                    + " ".join(f"{_f(v):>6s}" for v in fs)
                    + f" {_f(ref) + f' (N={ref_n})':>10s} {goal:>5s} {time.monotonic() - t0:4.0f}s")
        pick_rows.append(
            f"{kind:9s} {name:28s} {n_eval:4d} {_f(lc.zero_shot['regret']):>7s} "
            + " ".join(f"{_f(cell(n, 'adapted', 'regret')):>6s}" for n in pick_shots) + " "
            + " ".join(f"{_f(cell(n, 'scratch', 'regret')):>8s}" for n in pick_shots)
            + f" {_f(lc.zero_shot['top1']):>7s} "
            + " ".join(f"{_f(cell(n, 'adapted', 'top1')):>6s}" for n in pick_shots)
            + " | " + " ".join(f"{_f(physics[p]['pairwise_accuracy']):>10s} "
                               f"{_f(physics[p]['regret']):>6s} {_f(physics[p]['top1'], 2):>5s}"
                               for p in PHYSICS))
        print(rows[-1], file=sys.stderr, flush=True)
        print(pick_rows[-1], file=sys.stderr, flush=True)
        store = next((f for f in [*dataset_files(args.trials), *heldout_files]
                      if f.suffix == ".jsonl" and f.stem == tgt and f.exists()), None)
        row = resolved_row(args, kind, name, tdom, tgt_data, source, store, df, training)
        if row:
            res_rows.append(row)
            print(row, file=sys.stderr, flush=True)
        for run_row in run_physics_rows(args, name, tdom, tgt_data, source, store, df,
                                        training, run_best):
            run_rows.append(run_row)
            print(run_row, file=sys.stderr, flush=True)
    lines = [
        head, *rows,
        f"held-out pairwise accuracy (mean over {args.seeds} seeds); ft = {args.method} from the "
        f"source ({args.ranker} trained on all source strategies), fs = {args.ranker} from scratch "
        f"on the same target trials; eval = target strategies held out for evaluation "
        f"(15 %, at least {args.min_eval}); goal: zero-shot or ft with <= 20 trials >= fs at the "
        f"reference N",
        "",
        pick_head, *pick_rows,
        "pick = argmin of the simulator's score over the eval strategies; rg = regret = "
        "measured(pick) / measured(best) - 1; t1 = top-1 score (rankers.metrics.top1_score) = "
        "measured(best) / measured(pick), 1.0 = the best picked; measured = drift-normalized "
        f"runtimes (the pairwise labels); rg@N / t1@N: {args.method} with N target trials, fs rg@N: "
        f"from scratch, means over {args.seeds} seeds; zero: the source as is; stepsim / "
        "analytical: the step-time simulator (measured physics: shipped profile + calibration) and the analytical sync-only "
        "model, zero target trials (pw = their pairwise accuracy)",
    ]
    if res_rows:
        lines += ["", f"{'setting':9s} {'source -> target':28s} {'eval':>4s} {'resolved':>8s} "
                      f"{'zero pw/res[ci]/rg/rgr':>42s} {'ft@20 pw/res[ci]/rg/rgr':>42s} "
                      f"{'stepsim pw/res[ci]/rg/rgr':>42s}",
                  *res_rows,
                  "on the target's re-measured strategies (benchmarks/repeatability.py), against the "
                  "repeat runs' consensus labels: pw = pairwise accuracy on all pairs, res = on the "
                  "pairs the runs resolve, ci = its 95 % interval over strategies (dataset.repeat."
                  "resolved_interval; with seeds, the bounds' means), rg = top-1 regret of the pick against the consensus-"
                  "fastest, rgr = against the confidently-best (0 where the runs cannot tell the "
                  f"pick from the fastest); ft@20: {args.method} on 20 other target trials, mean over "
                  f"{args.seeds} seeds; where fewer than 20 others are left, a second line "
                  f"'20 shots of the N': per seed, 20 shots drawn from the N re-measured "
                  f"strategies, and all three judged on the N - 20 left (resolved: their mean "
                  f"count over the seeds)"]
    if run_rows:
        lines += ["", f"{'run':9s} {'source -> target':28s} {'eval':>4s} {'resolved':>8s} "
                      f"{'zero pw/res[ci]/rg/rgr':>42s} {'ft@20 pw/res[ci]/rg/rgr':>42s} "
                      f"{'stepsim pw/res[ci]/rg/rgr':>42s}",
                  *run_rows,
                  "the physics of the run: for every repeat run measured with its physics "
                  "(benchmarks/repeatability.py --physics: a profile and a calibration taken on "
                  "the machine of the run just before its first round), the target's strategies "
                  "featurized and simulated with that physics (dataset.repeat.using_run_physics; "
                  "the source as trained, with its own), judged on the run's strategies against "
                  "its own medians, on the pairs it resolves by itself; columns as in the table "
                  "above; run*: a run of another machine type than the target store's trials, "
                  "zero-shot and the simulator only (no target trial is used; the 20 shots would "
                  "be labels of another machine type)",
                  *([_run_footer(run_best)] if _run_footer(run_best) else [])]
    _emit("\n".join(lines), args.out)
    return 0


def run_physics_rows(args, name: str, tdom, tgt_data, source, store, df,  # noqa: ANN001
                     training, best: list[tuple[float, float, str]]) -> list[str]:  # noqa: ANN001
    """The setting's rows of the physics-of-the-run table: one per complete repeat run that has
    its physics (:func:`resolved_row` judged on that run, with the run's physics in place),
    the runs of the target store's machine type first, then those of other machine types
    (labelled ``run*``: zero-shot and the simulator only, which use no target trials; the 20
    shots would be labels of another machine type); each row's zero-shot (resolved accuracy,
    regret against the confidently-best, label) is appended to ``best``."""
    from autosync_transfer.dataset.repeat import (find_repeat_file, load_repeatability,
                                                  repeat_processors, run_physics,
                                                  store_processor, using_run_physics)

    repeats = _folders(args.repeats)
    if store is None or find_repeat_file(store, tdom.name, repeats) is None:
        return []
    processors = repeat_processors(store, tdom.name, repeats)
    own = store_processor(store) or processors[0]
    out = []
    for proc in sorted(processors, key=lambda p: p != own):
        rep = load_repeatability(store, tdom.name, processor=proc, repeats=repeats)
        if rep is None:
            continue
        other = proc != own
        for run in rep.complete_runs():
            if run_physics(store, tdom, run, repeats) is None:
                continue
            zero: dict = {}
            label = run + ("*" if other else "")
            with using_run_physics(store, tdom, run, repeats):
                row = resolved_row(args, label, name, tdom, tgt_data, source, store, df,
                                   training, runs=[run], zero_out=zero, processor=proc,
                                   shots=not other)
            if row is None:
                continue
            fig = zero["figures"]
            best.append((fig["pairwise_resolved"], fig["top1_regret_resolved"],
                         f"{name} {label}"))
            out.append(row)
    return out


def _run_footer(best: list[tuple[float, float, str]]) -> str:
    """The last line of the physics-of-the-run table: the lowest zero-shot figure on resolved
    pairs and the highest zero-shot regret against the confidently-best, each with its run."""
    best = [b for b in best if not math.isnan(b[0])]
    if not best:
        return ""
    low = min(best, key=lambda b: (b[0], b[2]))
    worst = max(best, key=lambda b: (b[1], b[2]))
    return (f"lowest zero-shot figure on the pairs a run resolves: {low[0]:.3f} over "
            f"{len(best)} rows ({low[2]}); highest zero-shot regret against the "
            f"confidently-best: {worst[1]:.1%} ({worst[2]})")


def resolved_row(args, kind: str, name: str, tdom, tgt_data, source, store, df,  # noqa: ANN001
                 training, runs: list[str] | None = None,  # noqa: ANN001
                 zero_out: dict | None = None, processor=None,  # noqa: ANN001
                 shots: bool = True) -> str | None:
    """The setting's row on the target's re-measured strategies, or None without repeat runs;
    ``runs``: judged on those runs' strategies and the pairs they resolve (default: every
    complete run of the target's machine type); ``processor``: the machine type whose runs
    judge (default: the target store's, ``dataset.repeat.STORE_MACHINE``); ``shots=False``:
    no ft@20 (the target's trials are another machine type's labels than the runs');
    ``zero_out["figures"]`` receives the zero-shot figures of the row."""
    import statistics

    from autosync_transfer.adapt.core import make_adapter, resolve_method
    from autosync_transfer.adapt.data import TargetSplit
    from autosync_transfer.dataset.repeat import (STORE_MACHINE, load_repeatability,
                                                  ranking_figures)
    from autosync_transfer.rankers.simulator import Simulator

    rep = (load_repeatability(store, tdom.name, repeats=_folders(args.repeats),
                              processor=STORE_MACHINE if processor is None else processor)
           if store is not None else None)
    if rep is None or not rep.complete_runs():
        return None
    held = sorted(set(rep.strategy_ids(runs or rep.complete_runs()))
                  & set(tgt_data.strategy_ids))
    pool = tuple(s for s in tgt_data.strategy_ids if s not in set(held))
    if len(held) < 2:
        return None
    split = TargetSplit(tgt_data, tuple(held), pool, 0, len(held) / len(tgt_data))
    holdout = split.holdout()

    def figures(sim, on=None) -> dict:  # noqa: ANN001
        on = holdout if on is None else on
        scores = sim.score(list(on.strategies), tdom)
        return ranking_figures(dict(zip(on.strategy_ids, map(float, scores))), rep, runs)

    def cell(figs: list[dict]) -> str:
        def mean(k: str) -> str:
            return _f(statistics.mean(f[k] for f in figs))

        lo, hi = (mean(f"pairwise_resolved_{b}") for b in ("low", "high"))
        return (f"{mean('pairwise')}/{mean('pairwise_resolved')}[{lo},{hi}]/"
                f"{mean('top1_regret')}/{mean('top1_regret_resolved')}")

    adapter = make_adapter(resolve_method(args.method, 1), training=training, pretrain_trials=df)
    zero = figures(source)
    if zero_out is not None:
        zero_out["figures"] = zero
    ft = [figures(adapter.fit(source, split.shots(20, seed), seed=seed).simulator)
          for seed in range(args.seeds)] if len(pool) >= 20 and shots else []
    phys = figures(Simulator("stepsim"))
    no_ft = "- (< 20 others)" if shots else "- (other machine type)"
    row = (f"{kind:9s} {name:28s} {len(held):4d} {zero['resolved_pairs']:8d} "
           f"{cell([zero]):>42s} {cell(ft) if ft else no_ft:>42s} "
           f"{cell([phys]):>42s}")
    if len(pool) >= 20 or args.seeds < 1 or len(held) < 20 + _LEFT_AT_LEAST or not shots:
        return row
    # the repeat runs cover the target (nearly) whole: the 20 shots come from the re-measured
    # strategies themselves, and all three are judged on the ones left (per seed)
    import random

    kept = {"zero": [], "ft": [], "stepsim": []}
    for seed in range(args.seeds):
        shots = tuple(sorted(random.Random(seed).sample(held, 20)))
        rest = tuple(x for x in held if x not in set(shots))
        inner = TargetSplit(tgt_data, rest, shots, seed, len(rest) / len(tgt_data))
        on = inner.holdout()
        kept["zero"].append(figures(source, on))
        kept["ft"].append(figures(adapter.fit(source, inner.shots(20, seed), seed=seed)
                                  .simulator, on))
        kept["stepsim"].append(figures(Simulator("stepsim"), on))
    left = statistics.mean(f["resolved_pairs"] for f in kept["ft"])
    return (row + f"\n{'':9s} {f'  20 shots of the {len(held)}':28s} {len(held) - 20:4d} "
            f"{left:8.0f} {cell(kept['zero']):>42s} {cell(kept['ft']):>42s} "
            f"{cell(kept['stepsim']):>42s}")


#: where the 20 shots are drawn from the re-measured strategies, how many must be left to judge
_LEFT_AT_LEAST = 10


def _folders(spec: str | None) -> tuple[str, ...]:
    return tuple(x for x in (spec or "").split(",") if x)


def _emit(text: str, out: str | None) -> None:
    """Print ``text``; with ``out``, append it to that file headed by the command line."""
    print(text)
    if out:
        stamp = datetime.date.today().isoformat()
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(f"\n# {stamp}: python {' '.join(shlex.quote(a) for a in sys.argv)}\n"
                     f"{text}\n")


def _physics_only(args, settings, df, domain_of) -> int:  # noqa: ANN001
    """The zero-trial columns alone: each physics ranker on the setting's evaluation strategies
    (the same split as the full table) and on every measured strategy of the target."""
    from autosync_transfer.adapt.data import evaluate_on, split_target, target_data
    from autosync_transfer.dataset.loader import normalized_noise_ceiling
    from autosync_transfer.rankers.simulator import Simulator

    head = (f"{'setting':9s} {'source -> target':28s} {'tgt n':>5s} {'eval':>4s} {'ceil_n':>6s} | "
            + " ".join(f"{PHYSICS_LABELS[p]:>10s} {'rg':>6s} {'t1':>5s} {'all pw':>6s}"
                       for p in PHYSICS) + f" {'>= 0.85':>7s}")
    rows = []
    for kind, src, tgt in settings:
        tdom = domain_of(tgt)
        tgt_df = df[(df["domain"] == tgt) & (df["status"] == "ok")]
        if not len(tgt_df):
            print(f"skipping {src} -> {tgt}: no trials of {tgt}", file=sys.stderr)
            continue
        tgt_data = target_data(tdom, tgt_df)
        split = split_target(tdom, tgt_data, split_seed=0,
                             holdout_fraction=holdout_fraction(len(tgt_data), args.min_eval))
        holdout = split.holdout()
        ceil_n = normalized_noise_ceiling(tgt_df, tgt_data.runtimes_s)
        cells, ok = [], True
        for p in PHYSICS:
            sim = Simulator(p)
            m = evaluate_on(sim, holdout)
            every = evaluate_on(sim, tgt_data)
            if p == "stepsim":
                ok = m["pairwise_accuracy"] >= 0.85
            cells.append(f"{_f(m['pairwise_accuracy']):>10s} {_f(m['regret']):>6s} "
                         f"{_f(m['top1'], 2):>5s} {_f(every['pairwise_accuracy']):>6s}")
        rows.append(f"{kind:9s} {src + ' -> ' + tgt:28s} {len(tgt_data):5d} "
                    f"{len(split.holdout_ids):4d} {_f(ceil_n):>6s} | " + " ".join(cells)
                    + f" {'yes' if ok else 'no':>7s}")
        print(rows[-1], file=sys.stderr, flush=True)
    text = "\n".join([
        head, *rows,
        "zero target trials: pw = pairwise accuracy on the setting's evaluation strategies (the "
        "full table's split), rg = regret and t1 = top-1 score of the pick among them, all pw = "
        "pairwise accuracy over every measured strategy of the target; ceil_n = the noise "
        "ceiling of the target's drift-normalized labels (what a perfect simulator can expect "
        "over all its strategies); >= 0.85: the step-time "
        "simulator's zero-shot goal on the evaluation strategies"])
    _emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
