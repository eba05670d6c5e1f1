"""How much of a trial iteration is communication, per runnable model.

Times one training step (forward, backward, SGD step) of each runnable zoo model in a single
process with one thread and no synchronization (pure compute, what a worker does between
communications), and sets it beside the median iteration time of the ``ddp`` builder measured on
each cluster in the trial stores. ``comm share = 1 - compute / iteration`` (4 workers share 2
cores on these machines, so compute per worker is slower inside a trial; the share is a lower
bound on how much the strategy matters).

    python research/probes/trial_models.py [--steps 10] [--stores datasets/trials]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def compute_step_s(name: str, steps: int) -> float:
    import torch

    from autosync_transfer.domains.zoo import build_module, example_batch, loss_fn

    torch.set_num_threads(1)
    module = build_module(name, "cpu", seed=0)
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)
    loss = loss_fn(name)
    inputs, targets = example_batch(name, None, torch.Generator().manual_seed(0))
    times = []
    for _ in range(steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss(module(**inputs), targets).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--stores", default=None, help="trial stores (default: the shipped datasets/)")
    args = ap.parse_args()

    from autosync_transfer.domains.zoo import MODELS

    try:
        from autosync_transfer.dataset.loader import load_trials

        df = load_trials(args.stores)
        df = df[(df["strategy_kind"] == "ddp") & (df["status"] == "ok")]
    except Exception as e:  # no data yet: compute times only
        print(f"(no trial data: {e})", file=sys.stderr)
        df = None
    print(f"{'model':10s} {'compute ms':>10s}   iteration ms (ddp builder) and comm share per cluster")
    for name, spec in MODELS.items():
        if not spec.runnable:
            continue
        c = compute_step_s(name, args.steps) * 1000
        cells = []
        if df is not None:
            for cluster in ("A", "B", "C"):
                sub = df[df["domain"] == f"{name}-{cluster}"]["median_s"]
                if len(sub):
                    it = float(sub.median()) * 1000
                    cells.append(f"{cluster}: {it:.0f} ms ({max(0.0, 1 - c / it):.0%})")
        print(f"{name:10s} {c:10.1f}   {'; '.join(cells)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
