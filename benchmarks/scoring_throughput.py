"""Scoring throughput: strategies per second a simulator ranks (featurizing included).

Samples ``--n`` strategies of ``--domain`` (default bert-12l-A, the BERT-12-layer graph), then
times, side by side in one run, featurizing them and scoring them with every ranker kind
(networks with their default hyper-parameters and freshly initialized weights: throughput does
not depend on the weight values) and with the analytical cost model. Prints strategies/s for
featurize+score and for scoring already-featurized strategies.

    python benchmarks/scoring_throughput.py [--domain bert-12l-A] [--n 2000] [--repeats 3]
        [--preset dataset]

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
    ap.add_argument("--kinds", default="analytical,linear,rnn,gat,transformer")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--preset", default="dataset")
    args = ap.parse_args()

    import torch

    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.rankers.features import Featurizer
    from autosync_transfer.rankers.modules import build_ranker
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.strategies.sampler import StrategySampler, preset

    torch.set_num_threads(args.threads)
    domain = get_domain(args.domain)
    t0 = time.perf_counter()
    strategies = StrategySampler(domain, preset(args.preset), seed=0).sample_n(args.n)
    sample_s = time.perf_counter() - t0
    rows = sum(1 if c.partition is None else c.partition.shards
               for s in strategies for c in s.nodes)
    print(f"{args.domain}: {len(domain.model.variables)} variables; sampled {args.n} strategies "
          f"(preset {args.preset}, {rows / args.n:,.0f} rows each) in {sample_s:.2f} s "
          f"({args.n / sample_s:,.0f}/s); {args.threads} threads")
    featurizer = Featurizer(domain)
    best_feat = min(_timed(lambda: featurizer.featurize_many(strategies)) for _ in range(args.repeats))
    feats = featurizer.featurize_many(strategies)
    print(f"{'featurize':12s} {args.n / best_feat:>12,.0f} strategies/s "
          f"({rows / best_feat:,.0f} rows/s)")
    print(f"{'ranker':12s} {'featurize+score':>16s} {'score only':>12s}   (strategies/s, best of {args.repeats})")
    for kind in args.kinds.split(","):
        if kind == "analytical":
            sim = Simulator("analytical")
        else:
            sim = Simulator.from_module(build_ranker(kind, {}, seed=0))
        sim.score(strategies[:16], domain)  # warm-up (network build, first-call overheads)
        full = min(_timed(lambda: sim.score(strategies, domain)) for _ in range(args.repeats))
        only = min(_timed(lambda: sim.score_features(feats)) for _ in range(args.repeats))
        print(f"{kind:12s} {args.n / full:>16,.0f} {args.n / only:>12,.0f}")
    return 0


def _timed(fn) -> float:  # noqa: ANN001
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
