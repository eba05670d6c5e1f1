"""How noisy is a convergence check's final-loss gap when nothing is lossy?

One process trains a zoo workload ``--steps`` steps twice per seed, on the same seeds, weights,
batches and dropout masks as a convergence run: once as is, once with every gradient multiplied
by ``1 + eps * N(0, 1)`` (``--eps 1e-6``: a rounding-sized perturbation, what a different
summation order does). Printed per seed: the final-loss gap as the check measures it (mean
training loss of the last ``--smoothing`` steps) and the gap of the loss on ``--eval-batches``
held-out batches at the end (the same batches in both runs) and of the mean training loss of the last ``--tail`` shares of
the steps, then each gap's mean, standard
deviation and the one-sided 95 % upper bound over the seeds (Student's t, as the check).

    python research/probes/convergence_noise.py --model resnet50-s [--seeds 5] [--steps 150]
"""

from __future__ import annotations

import argparse
import statistics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50-s")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--smoothing", type=int, default=10)
    ap.add_argument("--eval-batches", type=int, default=16)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--eval-mode", action="store_true",
                    help="held-out loss with the module in eval mode (default: as trained)")
    ap.add_argument("--tail", type=float, nargs="*", default=[0.25],
                    help="also the mean training loss of these last shares of the steps")
    args = ap.parse_args()

    import torch
    from scipy import stats

    from autosync_transfer.domains.tasks import learnable_batches, training_lr
    from autosync_transfer.domains.workload import load_workload
    from autosync_transfer.runtime.convergence import _step_seed  # a convergence run's batches

    workload = load_workload(f"zoo:{args.model}")
    batches = learnable_batches(workload, seed=0)
    lr = training_lr(workload)
    torch.set_num_threads(2)

    def run(seed: int, eps: float) -> tuple[float, float]:
        module = workload.build("cpu", seed=seed)
        opt = torch.optim.Adam(module.parameters(), lr=lr)
        noise = torch.Generator().manual_seed(10_007 * seed + 1)
        losses = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 1009)
            for k in range(args.steps):
                x, y = batches(workload.batch_size,
                               torch.Generator().manual_seed(_step_seed(seed, k, 0)))
                opt.zero_grad()
                loss = workload.loss(module, x, y)
                loss.backward()
                if eps:
                    for p in module.parameters():
                        if p.grad is not None:
                            p.grad.mul_(1 + eps * torch.randn(p.grad.shape, generator=noise))
                opt.step()
                losses.append(float(loss.detach()))
            module.train(not args.eval_mode)
            with torch.no_grad():
                ev = [float(workload.loss(module, *batches(workload.batch_size, torch.Generator()
                      .manual_seed(987_654_321 + 7919 * seed + j))))
                      for j in range(args.eval_batches)]
        tails = {w: sum(losses[-w:]) / w for w in windows}
        return tails, sum(ev) / len(ev)

    windows = sorted({args.smoothing, *(max(1, round(f * args.steps)) for f in args.tail)})
    gaps: dict[str, list[float]] = {f"last{w}": [] for w in windows}
    gaps["eval"] = []
    for seed in range(args.seeds):
        (t0, e0), (t1, e1) = run(seed, 0.0), run(seed, args.eps)
        for w in windows:
            gaps[f"last{w}"].append((t1[w] - t0[w]) / abs(t0[w]))
        gaps["eval"].append((e1 - e0) / abs(e0))
        print(f"seed {seed}: " + "; ".join(
            f"mean training loss of the last {w} steps {t0[w]:.4f} vs {t1[w]:.4f} "
            f"({gaps[f'last{w}'][-1]:+.2%})" for w in windows)
            + f"; held-out loss {e0:.4f} vs {e1:.4f} ({gaps['eval'][-1]:+.2%})", flush=True)
    n = args.seeds
    for k, g in gaps.items():
        mean, sd = statistics.fmean(g), statistics.stdev(g)
        high = mean + stats.t.ppf(0.95, n - 1) * sd / n ** 0.5
        print(f"{k:7s} gap: mean {mean:+.2%}, sd {sd:.2%}, one-sided 95 % upper bound {high:+.2%} "
              f"({n} seeds, eps {args.eps:g}, {args.steps} steps)")


if __name__ == "__main__":
    main()
