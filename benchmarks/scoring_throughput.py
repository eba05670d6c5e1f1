"""Scoring throughput: strategies per second a simulator ranks (featurizing included).

Samples ``--n`` strategies of ``--domain`` (default bert-12l-A, the BERT-12-layer graph), then
times, side by side in one run, featurizing them and scoring them with every ranker kind
(networks with their default hyper-parameters and freshly initialized weights: throughput does
not depend on the weight values) with the step-time simulator (``stepsim``, :mod:`autosync_transfer.rankers.stepsim`) and with the
analytical cost model. Two inputs are timed:

* ``batch``: the sampler's :class:`~autosync_transfer.strategies.sampler.SampledBatch`, read
  from its arrays (what ``search`` and ``recommend`` score: thousands of candidates of which only
  the picks become objects);
* ``objects``: a list of :class:`~autosync_transfer.strategies.types.Strategy` objects (the same
  strategies, e.g. loaded from JSON or built by hand).

A ranker that reads only the aggregated table (``linear``) is featurized with
``Featurizer.aggregates``; the others need the per-row features. Prints strategies/s for
featurize+score and for scoring already-featurized strategies, and the sampler's own rate.

    python benchmarks/scoring_throughput.py [--domain bert-12l-A] [--n 2000] [--repeats 3]
        [--preset dataset] [--slack-ablation]

``--slack-ablation`` also times the step simulator with and without the allocator's heap slack
(:mod:`autosync_transfer._heap`), each in fresh processes, alternating, and prints the ratio.

``--preset`` picks the candidates' distribution (default ``dataset``: what collection samples and
what search and ``recommend`` score; ``default`` partitions variables of any size into up to
thousands of shards). The cost of featurizing grows with the rows (synchronized pieces) of a
strategy, so rows per strategy and rows/s are printed too.
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="bert-12l-A")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kinds", default="stepsim,analytical,linear,rnn,gat,transformer")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--preset", default="dataset")
    ap.add_argument("--slack-ablation", action="store_true",
                    help="also time the step simulator without the allocator's heap slack, "
                         "alternating with it (the ratio of the two in one run)")
    ap.add_argument("--slack-child", choices=("on", "off"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.slack_child:
        return _slack_child(args)

    import torch

    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.rankers.features import Featurizer
    from autosync_transfer.rankers.modules import build_ranker
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.strategies.sampler import StrategySampler, preset

    torch.set_num_threads(args.threads)
    domain = get_domain(args.domain)
    sampler = StrategySampler(domain, preset(args.preset), seed=0)
    t0 = time.perf_counter()
    batch = sampler.sample_batch(args.n)
    batch_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    strategies = StrategySampler(domain, preset(args.preset), seed=0).sample_n(args.n)
    sample_s = time.perf_counter() - t0
    rows = int(batch.pieces.sum())
    print(f"{args.domain}: {len(domain.model.variables)} variables; {args.n} strategies "
          f"(preset {args.preset}, {rows / args.n:,.0f} rows each); {args.threads} threads")
    print(f"sampling: {args.n / batch_s:,.0f}/s as a batch, {args.n / sample_s:,.0f}/s as "
          f"objects")
    inputs = {"batch": batch, "objects": strategies}
    featurizer = Featurizer(domain)
    print(f"{'featurize':24s} {'batch':>10s} {'objects':>10s}   (strategies/s, best of "
          f"{args.repeats})")
    for label, fn in (("full features", featurizer.featurize_many),
                      ("aggregates only", featurizer.aggregates)):
        rates = [args.n / min(_timed(lambda: fn(x)) for _ in range(args.repeats))
                 for x in inputs.values()]
        print(f"{label:24s} {rates[0]:>10,.0f} {rates[1]:>10,.0f}   "
              f"({rows * rates[0] / args.n:,.0f} rows/s from the batch)")
    feats = featurizer.featurize_many(strategies)
    print(f"{'ranker':12s} {'featurize+score':>24s} {'score only':>12s}")
    print(f"{'':12s} {'batch':>11s} {'objects':>12s}")
    for kind in args.kinds.split(","):
        if kind in ("analytical", "stepsim"):
            sim = Simulator(kind)
        else:
            sim = Simulator.from_module(build_ranker(kind, {}, seed=0))
        sim.score(strategies[:16], domain)  # warm-up (network build, first-call overheads)
        full = [min(_timed(lambda: sim.score(x, domain)) for _ in range(args.repeats))
                for x in inputs.values()]
        only = min(_timed(lambda: sim.score_features(feats)) for _ in range(args.repeats))
        print(f"{kind:12s} {args.n / full[0]:>11,.0f} {args.n / full[1]:>12,.0f} "
              f"{args.n / only:>12,.0f}")
    if args.slack_ablation:
        _slack_ablation(args)
    return 0


def _slack_ablation(args) -> None:  # noqa: ANN001
    """The step simulator from a batch with and without :func:`heap_slack`, each in a fresh
    process (the allocator's thresholds depend on what the process did before), alternating."""
    import subprocess

    import numpy as np

    rates: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(max(3, args.repeats)):
        for mode in ("on", "off"):
            out = subprocess.run(
                [sys.executable, __file__, "--domain", args.domain, "--n", str(args.n),
                 "--preset", args.preset, "--slack-child", mode],
                check=True, capture_output=True, text=True).stdout
            rates[mode].append(float(out.split()[-1]))
    med = {k: float(np.median(v)) for k, v in rates.items()}
    print(f"stepsim from the batch, {len(rates['on'])} fresh processes each, alternating: heap "
          f"slack {med['on']:,.0f}/s, none {med['off']:,.0f}/s (medians; ratio "
          f"{med['on'] / med['off']:.2f})")


def _slack_child(args) -> int:  # noqa: ANN001
    """One fresh process: sample, then the best of five scorings of the batch."""
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.rankers import stepsim
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.strategies.sampler import StrategySampler, preset

    if args.slack_child == "off":
        stepsim._HEAP_SLACK = 0
    domain = get_domain(args.domain)
    batch = StrategySampler(domain, preset(args.preset), seed=0).sample_batch(args.n)
    sim = Simulator("stepsim")
    sim.score(batch, domain)
    print(args.n / min(_timed(lambda: sim.score(batch, domain)) for _ in range(5)))
    return 0


def _timed(fn) -> float:  # noqa: ANN001
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
