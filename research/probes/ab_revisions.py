"""The runtime at two revisions on the same strategies, measured interleaved: per-step speed-up.

A change to the runtime (the executor, the plan) is judged by the step time of the same
strategies before and after it. This checks the base revision out into a temporary git worktree
and, round after round, measures every strategy once with the base revision's runtime and once
with the working tree's (``autosync-transfer run DOMAIN -s STRATEGY --json``, workers started by
the emulated launcher), alternating which goes first, so that drift of the machine falls on both
sides alike. Printed per strategy: the median step (ms) of each side over the rounds, every
round's figures, and head / base.

    sudo .venv/bin/python research/probes/ab_revisions.py --base HEAD~1 --domain ncf-C \\
        --strategies ddp,ps,s0-31-c8a1b52f --store benchmarks/results/packed/ncf-C.jsonl

A strategy is a builder name, a strategy file, or a strategy id of ``--store`` (a trial store).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _strategy_arg(name: str, store: Path | None, folder: Path) -> str:
    """A ``run -s`` argument for ``name``: a builder or a file as it is, a store's id as a file."""
    if Path(name).exists() or store is None:
        return name
    from autosync_transfer.dataset.loader import load_trials, strategy_table

    table = strategy_table(load_trials(store), normalize=False).set_index("strategy_id")
    if name not in table.index:
        return name  # a builder name
    path = folder / f"{name}.json"
    path.write_text(table.loc[name, "strategy"].to_json())
    return str(path)


def _measure(tree: Path, domain: str, strategy: str, warmup: int, iters: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-m", "autosync_transfer", "run", domain, "-s", strategy, "--warmup",
         str(warmup), "--iters", str(iters), "--json"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"run {strategy} at {tree}: exit {out.returncode}: "
                         f"{out.stderr.strip().splitlines()[-1:]}")
    return float(json.loads(out.stdout)["median_s"]) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD~1", help="git revision of the 'base' side")
    ap.add_argument("--domain", required=True)
    ap.add_argument("--strategies", required=True, help="comma-separated (see above)")
    ap.add_argument("--store", type=Path, default=None, help="trial store to take ids from")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    base_rev = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    head_rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=ROOT, capture_output=True, text=True).stdout.strip())
    print(f"# python {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(f"# {args.domain}: base {base_rev} vs head {head_rev}{' + changes' if dirty else ''}; "
          f"median step (ms) over {args.rounds} interleaved rounds of run --warmup "
          f"{args.warmup} --iters {args.iters}")
    with tempfile.TemporaryDirectory(prefix="ab-") as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base_tree), base_rev],
                       cwd=ROOT, check=True)
        try:
            strategies = [(s, _strategy_arg(s, args.store, Path(tmp)))
                          for s in args.strategies.split(",")]
            print(f"{'strategy':28s} {'base':>8s} {'head':>8s} {'head/base':>9s}   rounds "
                  f"(base/head)")
            for label, arg in strategies:
                got: dict[str, list[float]] = {"base": [], "head": []}
                for r in range(args.rounds):
                    order = ("base", "head") if r % 2 == 0 else ("head", "base")
                    for side in order:
                        tree = base_tree if side == "base" else ROOT
                        got[side].append(_measure(tree, args.domain, arg, args.warmup,
                                                  args.iters))
                b, h = statistics.median(got["base"]), statistics.median(got["head"])
                rounds = " ".join(f"{x:.1f}/{y:.1f}" for x, y in zip(got["base"], got["head"]))
                print(f"{label:28s} {b:8.1f} {h:8.1f} {h / b:9.3f}   {rounds}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT,
                           capture_output=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
