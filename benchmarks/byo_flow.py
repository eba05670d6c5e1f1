"""Your model, your cluster: the whole flow with the command line, timed, with its figures.

Runs, as a new user would, with the real ``autosync-transfer`` commands:

1. ``collect`` ``--count`` strategies of the workload on the cluster (builders, DDP, sampled);
2. ``train`` the source's simulator when the registry has no champion of it (a domain source);
3. ``adapt`` the source to the workload's domain with each of ``--shots`` target trials (default
   0, 5 and 20; the same held-out strategies every time): held-out pairwise accuracy and top-1
   score of zero-shot, of the adapted simulator and of one trained from scratch on the same shots;
4. ``search`` warm-started from the version adapted with the most shots, budget ``--budget``:
   the best found vs the best hand-optimized builder (confirmed by interleaved re-measurements)
   and vs torch DDP (measured in the same run), the strategy to use exported as JSON;
5. train the workload with the exported strategy (``examples/train_workload.py``, ``--steps``
   steps, the loss printed).

Everything goes to ``--out`` (trial stores, the exported strategy, ``flow.json`` with every
step's result and wall time); the stores are append-only and a finished step is not run again,
so the same command continues an interrupted run (``--redo adapt,search,train`` runs those
steps again; a search continues its store). The summary table is printed at the end (and with
``--report``, from ``flow.json`` alone). The registry is ``$MLFLOW_TRACKING_URI`` (or the
project's default); ``--registry URI`` sets it for this run.

    sudo .venv/bin/python benchmarks/byo_flow.py --model examples/workloads/tiny_gpt.py:lab \\
        --cluster-file examples/clusters/lab.yml --source bert-3l-B --launcher emulated \\
        [--out runs/byo-flow/tiny_gpt_lab-lab] [--count 40] [--shots 0,5,20] [--budget 50] \\
        [--steps 300] [--registry sqlite:///runs/byo-flow/mlflow.db] [--report]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = ROOT / "examples" / "train_workload.py"


class Flow:
    """The steps' results in ``<out>/flow.json`` (written after every step)."""

    def __init__(self, out: Path, redo: set[str]) -> None:
        self.out = out
        self.path = out / "flow.json"
        self.steps: dict[str, Any] = (json.loads(self.path.read_text())
                                      if self.path.exists() else {})
        self.redo = redo

    def done(self, step: str, params: dict[str, Any]) -> dict[str, Any] | None:
        rec = self.steps.get(step)
        family = step.split(":")[0]
        if rec is None or family in self.redo or rec.get("params") != params:
            return None
        return rec

    def save(self, step: str, params: dict[str, Any], result: Any, wall_s: float) -> None:
        self.steps[step] = {"params": params, "result": result, "wall_s": round(wall_s, 1)}
        self.path.write_text(json.dumps(self.steps, indent=1, default=str) + "\n")


def _cli(args: list[str], env: dict[str, str]) -> tuple[Any, float]:
    """Run ``autosync-transfer ARGS --json``; (its JSON output, wall seconds). Progress goes to
    the terminal; a failure stops the flow with the command's exit code."""
    cmd = [sys.executable, "-m", "autosync_transfer", *args, "--json"]
    print(f"\n$ autosync-transfer {shlex.join(args)}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stdout, file=sys.stderr)
        raise SystemExit(proc.returncode)
    return json.loads(proc.stdout), wall


def _has_champion(source: str, env: dict[str, str]) -> bool:
    """Whether the registry has a champion of domain ``source`` (a models:/ URI: assumed)."""
    if source.startswith("models:/"):
        return True
    cmd = [sys.executable, "-m", "autosync_transfer", "registry", "show", source, "--json"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          env=env, cwd=ROOT)
    if proc.returncode != 0:
        return False
    return "champion" in json.loads(proc.stdout).get("aliases", {})


def run_flow(args: argparse.Namespace, flow: Flow, env: dict[str, str]) -> None:
    target = ["--model", args.model, "--cluster-file", args.cluster_file]
    quick = [*(["--warmup", str(args.warmup)] if args.warmup is not None else []),
             *(["--iters", str(args.iters)] if args.iters is not None else [])]
    trials = flow.out / "trials.jsonl"
    epochs = ["--epochs", str(args.epochs)] if args.epochs is not None else []
    if args.max_foreign_cpu is not None:
        quick += ["--max-foreign-cpu", str(args.max_foreign_cpu)]

    # 1. collect (the store is the state: a larger --count continues it)
    params = {"count": args.count, "launcher": args.launcher, "protocol": quick}
    if not flow.done("collect", params):
        res, wall = _cli(["collect", *target, "-n", str(args.count), "--launcher", args.launcher,
                          "--store", str(trials), *quick], env)
        flow.save("collect", params, res, wall)
    domain = flow.steps["collect"]["result"]["domain"]

    # 2. the source's simulator
    params = {"source": args.source}
    if not flow.done("source", params):
        if _has_champion(args.source, env):
            flow.save("source", params, {"trained": False}, 0.0)
        else:
            res, wall = _cli(["train", args.source, "--seeds", "1", *epochs], env)
            flow.save("source", params, {"trained": True, "version": res["best_version"]}, wall)

    # 3. adapt with each number of target trials
    for shots in args.shots:
        step, params = f"adapt:{shots}", {"source": args.source, "shots": shots,
                                          "count": args.count}
        if flow.done(step, params):
            continue
        res, wall = _cli(["adapt", "--source", args.source, *target, "--data", str(trials),
                          "--shots", str(shots), *epochs], env)
        flow.save(step, params, res, wall)

    # 4. search warm-started from the version adapted with the most shots
    most = max(args.shots)
    version = flow.steps[f"adapt:{most}"]["result"]["version"]
    warm = f"models:/autosync-{domain}/{version}"
    strategy = flow.out / "strategy.json"
    params = {"warm": warm, "budget": args.budget, "launcher": args.launcher}
    if not flow.done("search", params):
        res, wall = _cli(["search", *target, "--budget", str(args.budget), "--simulator", warm,
                          "--launcher", args.launcher, "--store", str(flow.out / "search.jsonl"),
                          "--export-json", str(strategy), *quick, *epochs], env)
        flow.save("search", params, res, wall)

    # 5. train with the exported strategy
    params = {"steps": args.steps, "launcher": args.launcher,
              "strategy": json.loads(strategy.read_text())["id"]}
    if not flow.done("train", params):
        result_path = flow.out / "train.json"
        cmd = [sys.executable, str(TRAIN_SCRIPT), "--model", args.model, "--cluster-file",
               args.cluster_file, "--strategy", str(strategy), "--steps", str(args.steps),
               "--launcher", args.launcher]
        print(f"\n$ python {shlex.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.call(cmd, env={**env, "AUTOSYNC_RESULT_JSON": str(result_path)},
                               cwd=ROOT)
        wall = time.perf_counter() - t0
        if code != 0:
            raise SystemExit(code)
        flow.save("train", params, json.loads(result_path.read_text()), wall)


def _f(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def summary(flow: Flow) -> str:
    s = flow.steps
    lines: list[str] = []
    if "collect" in s:
        c = s["collect"]["result"]
        lines.append(f"domain {c['domain']} (workload {c.get('workload', '-')}), trials in "
                     f"{c['store']}")
    lines.append("")
    lines.append(f"{'step':<28} {'wall s':>8}  result")
    if "collect" in s:
        got = s["collect"]["result"].get("collected", {})
        lines.append(f"{'collect':<28} {s['collect']['wall_s']:>8.1f}  {got.get('trials')} "
                     f"trials ({got.get('failures')} failed), best "
                     f"{_f(got.get('best_s') and got['best_s'] * 1000, '.1f')} ms")
    if "source" in s:
        r = s["source"]["result"]
        what = f"trained version {r['version']}" if r.get("trained") else "registry champion"
        lines.append(f"{'source simulator':<28} {s['source']['wall_s']:>8.1f}  {what}")
    adapts = sorted((k for k in s if k.startswith("adapt:")), key=lambda k: int(k.split(":")[1]))
    for k in adapts:
        r = s[k]["result"]
        rows = {row["row"]: row for row in r["result"]["rows"]}
        a = rows["adapted"]
        lines.append(f"{'adapt ' + k.split(':')[1] + ' shots':<28} {s[k]['wall_s']:>8.1f}  "
                     f"{r['result']['method']}: pairwise {_f(a['pairwise_accuracy'])}, top-1 "
                     f"{_f(a['top1'])} (from scratch {_f(rows['from-scratch']['pairwise_accuracy'])}"
                     f"/{_f(rows['from-scratch']['top1'])}); version {r['version']}")
    if "search" in s:
        r = s["search"]["result"]
        conf = r.get("confirmed") or {}
        lines.append(f"{'search':<28} {s['search']['wall_s']:>8.1f}  {r['trials']} trials, best "
                     f"{_f(r.get('best_s') and r['best_s'] * 1000, '.1f')} ms, best builder "
                     f"{r.get('best_builder')} {_f(r.get('best_builder_s') and r['best_builder_s'] * 1000, '.1f')}"
                     f" ms, torch DDP {_f(r.get('ddp_s') and r['ddp_s'] * 1000, '.1f')} ms")
    if "train" in s:
        r = s["train"]["result"]
        lines.append(f"{'train (exported strategy)':<28} {s['train']['wall_s']:>8.1f}  loss "
                     f"{r['first_loss']:.3f} -> {r['final_loss']:.3f}, median "
                     f"{r['median_step_ms']:.1f} ms/step, replicas identical "
                     f"{'yes' if r['replicas_identical'] else 'NO'}")
    if adapts:
        lines += ["", "held-out strategies (the same for every row)",
                  f"{'simulator':<24} {'target trials':>13} {'pairwise':>9} {'top-1':>7}"]
        first = s[adapts[0]]["result"]["result"]
        zero = next(row for row in first["rows"] if row["row"] == "zero-shot")
        lines.append(f"{'zero-shot':<24} {0:>13} {_f(zero['pairwise_accuracy']):>9} "
                     f"{_f(zero['top1']):>7}")
        for k in adapts:
            res = s[k]["result"]["result"]
            if res["shots"] == 0:
                continue
            a = next(row for row in res["rows"] if row["row"] == "adapted")
            lines.append(f"{'adapted (' + res['method'] + ')':<24} {res['shots']:>13} "
                         f"{_f(a['pairwise_accuracy']):>9} {_f(a['top1']):>7}")
        lines.append(f"(held out: {len(first['holdout_ids'])} strategies)")
    if "search" in s:
        r = s["search"]["result"]
        conf = r.get("confirmed") or {}
        lines += ["", "search (warm-started, measured in the same run)"]
        lines.append(f"  best found vs best builder: {_f(r.get('speedup_vs_builder'), '.2f')}x; "
                     f"confirmed ({conf.get('measurements', '-')} interleaved re-measurements "
                     f"each): {_f(conf.get('best_s') and conf['best_s'] * 1000, '.1f')} ms vs "
                     f"{_f(conf.get('builder_s') and conf['builder_s'] * 1000, '.1f')} ms -> "
                     f"{_f(conf.get('speedup_vs_builder'), '.2f')}x")
        ddp, best_conf = r.get("ddp_s"), conf.get("best_s")
        lines.append(f"  vs torch DDP: {_f(r.get('speedup_vs_ddp'), '.2f')}x (best found); "
                     f"confirmed best vs DDP: {_f(ddp / best_conf if ddp and best_conf else None, '.2f')}x")
        lines.append(f"  exported: {r.get('chosen_strategy')} ({r.get('chosen_from')}); "
                     f"simulator version {r.get('registered_version')}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="examples/workloads/tiny_gpt.py:lab")
    ap.add_argument("--cluster-file", default="examples/clusters/lab.yml")
    ap.add_argument("--source", default="bert-3l-B",
                    help="a shipped domain (its champion, trained first if absent) or models:/...")
    ap.add_argument("--launcher", choices=["emulated", "local"], default="emulated")
    ap.add_argument("--out", default=None, help="default runs/byo-flow/<model>-<cluster file>")
    ap.add_argument("--count", type=int, default=40, help="trials to collect (>= 40)")
    ap.add_argument("--shots", default="0,5,20", help="target trials per adaptation")
    ap.add_argument("--budget", type=int, default=50)
    ap.add_argument("--steps", type=int, default=300, help="training steps with the strategy")
    ap.add_argument("--warmup", type=int, default=None, help="protocol (default: the library's)")
    ap.add_argument("--iters", type=int, default=None, help="protocol (default: the library's)")
    ap.add_argument("--max-foreign-cpu", type=float, default=None,
                    help="collect and search: re-measure a trial disturbed by other processes "
                         "beyond this CPU share (default: theirs, 0.05; 1 disables)")
    ap.add_argument("--epochs", type=int, default=None,
                    help="cap on training epochs of train, adapt and search (default: theirs)")
    ap.add_argument("--registry", default=None, help="MLflow tracking URI for this run")
    ap.add_argument("--redo", default="", help="steps to run again: collect,source,adapt,search,train")
    ap.add_argument("--report", action="store_true", help="print the summary of --out only")
    args = ap.parse_args()
    args.shots = sorted({int(x) for x in args.shots.split(",") if x.strip()})
    stem = Path(args.model.split(":")[0]).stem + (f"_{args.model.rsplit(':', 1)[1]}"
                                                  if ":" in args.model else "")
    out = Path(args.out or ROOT / "runs" / "byo-flow" / f"{stem}-{Path(args.cluster_file).stem}")
    out.mkdir(parents=True, exist_ok=True)
    flow = Flow(out, {x.strip() for x in args.redo.split(",") if x.strip()})
    if not args.report:
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                           os.environ.get("PYTHONPATH")]))}
        if args.registry:
            env["MLFLOW_TRACKING_URI"] = args.registry
        t0 = time.perf_counter()
        run_flow(args, flow, env)
        print(f"\nflow done in {time.perf_counter() - t0:.0f} s (this session)")
    text = summary(flow)
    (out / "summary.txt").write_text(text + "\n")
    print("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
