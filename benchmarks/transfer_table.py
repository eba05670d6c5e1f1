"""Transfer across clusters, across models and both: zero-shot, few-shot fine-tuning, from scratch.

For every (source, target) setting: a ``--ranker`` simulator is trained on all the source's
measured strategies; then :func:`~autosync_transfer.adapt.core.learning_curve` evaluates, on the
target's held-out strategies (15 %, never used for adaptation), the source as is (zero-shot),
fine-tuned on N target trials, and a simulator trained from scratch on the same N trials, over
``--seeds`` seeds. N = 200 (or every non-held-out target strategy, when fewer: the column says
how many) is the from-scratch reference that ≤ 20 adapted trials should match.

    python benchmarks/transfer_table.py [--seeds 3] [--epochs 40] [--settings bert-A:bert-B,...]
"""

from __future__ import annotations

import argparse
import math
import sys
import time

DEFAULT_SETTINGS = (
    ("clusters", "bert-A", "bert-B"),
    ("models", "bert-3l-B", "bert-12l-B"),
    ("both", "bert-3l-A", "bert-12l-B"),
    ("clusters", "ncf-A", "ncf-C"),
    ("clusters", "vgg16-s-A", "vgg16-s-B"),
)


def _f(v: float) -> str:
    return "  -  " if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--ranker", default="rnn")
    ap.add_argument("--method", default="finetune", help="finetune | finetune-head | multi-source")
    ap.add_argument("--shots", default="5,20,50")
    ap.add_argument("--reference", type=int, default=200, help="from-scratch reference N")
    ap.add_argument("--settings", default=None,
                    help="comma-separated SOURCE:TARGET pairs (default: the five of the paper's settings)")
    ap.add_argument("--trials", default=None, help="trial stores (default: the shipped datasets)")
    ap.add_argument("--cv-below", type=int, default=None,
                    help="fine-tuning selects epochs by cross-validation below this many shots "
                         "(default: ShotTraining's)")
    args = ap.parse_args()

    import torch

    from autosync_transfer.adapt.core import learning_curve
    from autosync_transfer.adapt.data import split_target, target_data
    from autosync_transfer.adapt.methods import FromScratch
    from autosync_transfer.adapt.training import ShotTraining
    from autosync_transfer.dataset.loader import load_trials
    from autosync_transfer.domains.catalog import get_domain

    torch.set_num_threads(1)
    if args.settings:
        from autosync_transfer.domains.catalog import split_domain_name

        settings = []
        for pair in args.settings.split(","):
            src, tgt = pair.split(":", 1)
            (sm, sc), (tm, tc) = split_domain_name(src), split_domain_name(tgt)
            settings.append(("clusters" if sm == tm else "models" if sc == tc else "both", src, tgt))
    else:
        settings = list(DEFAULT_SETTINGS)
    shots = [int(x) for x in args.shots.split(",")]
    df = load_trials(args.trials)
    training = (ShotTraining(max_epochs=args.epochs) if args.cv_below is None
                else ShotTraining(max_epochs=args.epochs, cv_below=args.cv_below))
    head = (f"{'setting':9s} {'source -> target':24s} {'src n':>5s} {'tgt n':>5s} {'zero':>6s} "
            + " ".join(f"{'ft@' + str(n):>6s}" for n in shots) + " "
            + " ".join(f"{'fs@' + str(n):>6s}" for n in shots) + f" {'fs@ref':>10s} {'goal':>5s} {'time':>5s}")
    rows = []
    for kind, src, tgt in settings:
        t0 = time.monotonic()
        sdom, tdom = get_domain(src), get_domain(tgt)
        src_df = df[(df["domain"] == src) & (df["status"] == "ok")]
        tgt_df = df[(df["domain"] == tgt) & (df["status"] == "ok")]
        if not len(src_df) or not len(tgt_df):
            print(f"skipping {src} -> {tgt}: no trials of {src if not len(src_df) else tgt}",
                  file=sys.stderr)
            continue
        source_data = target_data(sdom, src_df)
        source = FromScratch(args.ranker, training=training).fit(None, source_data, seed=0).simulator
        split = split_target(tdom, tgt_df, split_seed=0)
        ref_n = min(args.reference, split.available)
        wanted = sorted({0, *[n for n in shots if n <= split.available], ref_n})
        lc = learning_curve(source, tdom, split, wanted, args.seeds, method=args.method,
                            pretrain_trials=df, training=training)
        table = {r["shots"]: r for r in lc.table()}

        def cell(n: int, key: str) -> float:
            r = table.get(n)
            return r[f"{key}_mean"] if r else math.nan

        zero = lc.zero_shot.get("pairwise_accuracy", math.nan)
        ft = [cell(n, "adapted") for n in shots]
        fs = [cell(n, "scratch") for n in shots]
        ref = cell(ref_n, "scratch")
        # zero-shot counts: it uses no target trial at all
        best_small = max([v for n, v in zip([0, *shots], [zero, *ft]) if n <= 20 and not math.isnan(v)],
                         default=math.nan)
        goal = "yes" if best_small >= ref else "no"
        rows.append(f"{kind:9s} {src + ' -> ' + tgt:24s} {len(source_data):5d} {split.available + len(split.holdout()):5d} "
                    f"{_f(zero):>6s} " + " ".join(f"{_f(v):>6s}" for v in ft) + " "
                    + " ".join(f"{_f(v):>6s}" for v in fs)
                    + f" {_f(ref) + f' (N={ref_n})':>10s} {goal:>5s} {time.monotonic() - t0:4.0f}s")
        print(rows[-1], file=sys.stderr, flush=True)
    print(head)
    print("\n".join(rows))
    print(f"\nheld-out pairwise accuracy (mean over {args.seeds} seeds); ft = {args.method} from the "
          f"source ({args.ranker} trained on all source strategies), fs = {args.ranker} from scratch "
          f"on the same target trials; goal: zero-shot or ft with <= 20 trials >= fs at the reference N")
    return 0


if __name__ == "__main__":
    sys.exit(main())
