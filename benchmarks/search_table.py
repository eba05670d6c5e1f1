"""Search in the same harness and budget: AutoSync cold and warm-started, random, TPE, analytical.

For every domain, every method runs its own search (real trials on the emulated cluster, as
root) with the same budget; each run measures every hand-optimized builder and torch DDP
itself, so the speed-ups compare measurements of one run. Runs are stored in
``--store-dir/<domain>/<run>.jsonl`` and continue when the benchmark is started again.

Printed per domain and method: best found (ms), best hand-optimized builder of that run (ms),
speed-up over it and over torch DDP, the confirmed speed-up (``conf``: the best found and the best
builder measured again 3 times each, interleaved, at the end of the run; medians), the confirmed
speed-up over the best all-reduce builder with fp16 compression (``fp16``: the builders come
uncompressed; a stricter reference, measured and confirmed the same way), trials needed
to reach 1.1x / 1.2x over the best builder, mean hit rate (trials >= 2 % faster than the best
builder). A plot of best-so-far speed-up vs trials (all methods of a domain, hit rates
below) goes to ``--store-dir/<domain>/search_curves.png``. ``wall`` is the measuring time of the
run (the sum of its trials' end-to-end times, references and confirmation included, over every
session that continued it; training the simulator between rounds is not in it).

The stores are kept in git (``benchmarks/results/search-table/``), so a table measured over several
sessions continues where the last one stopped; ``--report`` prints the table and draws the plots
from the stores as they are, measuring nothing (no root needed).

    sudo .venv/bin/python benchmarks/search_table.py --domains ncf-C,bert-3l-B,vgg16-s-B \\
        [--budget 200] [--per-round 10] [--warm-from ncf-A,bert-3l-A,vgg16-s-A] \\
        [--methods autosync-cold,autosync-warm,random,tpe,analytical] [--report]

Time to target loss (``--objective time-to-loss``, the default): a run's lossy final candidates get
a convergence run (the model trained ``--check-steps`` steps with the strategy and with exact
synchronization, same seeds and batches; stored beside the run's store as
``<run>.jsonl.convergence.jsonl``); a strategy's time to the target loss is its step time x its
measured steps-to-target ratio (lossless: 1.0), a failing one is excluded. The columns ``ttl``
(best found that counts vs the best builder), ``ttl-c`` (the confirmed best strategy's time to loss vs
the best builder's, from the confirmation's medians, when that strategy counts) and ``ttl-ddp`` (vs torch DDP) stand beside the
step-time ones; below the table every excluded strategy with the reason, and the convergence
runs' training minutes per domain. ``--check`` runs the convergence checks of stored runs
(searched with ``--objective step-time`` before checks existed) without searching again.

A ``+knobs`` suffix (``autosync-cold+knobs``, ``autosync-warm+knobs``, ``analytical+knobs``) adds
``--knob-candidates`` whole-model strategies per round, decoded from uniform knob assignments, to
the ranked candidates (runs named ``...-knobsN-seed0``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def _fmt(v: object, spec: str) -> str:
    if v is None:
        width = "".join(ch for ch in spec.split(".")[0] if ch.isdigit())
        return "-".rjust(int(width) if width else 1)
    return format(v, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", default="ncf-C,bert-3l-B,vgg16-s-B")
    ap.add_argument("--warm-from", default=None,
                    help="source domain per target domain (comma-separated, same order); "
                         "default: the same model on cluster A (B for targets on A)")
    ap.add_argument("--methods", default="autosync-cold,autosync-warm,random,tpe,analytical")
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--candidates", type=int, default=1000)
    ap.add_argument("--neighbours", type=int, default=200,
                    help="candidates per round near the fastest measured strategies (0: none)")
    ap.add_argument("--knob-candidates", type=int, default=200,
                    help="for methods with a '+knobs' suffix (autosync-cold+knobs, "
                         "autosync-warm+knobs, analytical+knobs): whole-model candidates per "
                         "round decoded from uniform knob assignments, ranked with the rest")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--confirm", type=int, default=3,
                    help="re-measurements of the best found and the best builder at the end")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--launcher", default="emulated")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--store-dir", default="benchmarks/results/search-table")
    ap.add_argument("--report", action="store_true",
                    help="print the table from the stores as they are; measure nothing")
    ap.add_argument("--objective", default="time-to-loss", choices=["time-to-loss", "step-time"])
    ap.add_argument("--final-checks", type=int, default=3,
                    help="lossy final candidates per run that get a convergence run")
    ap.add_argument("--max-step-ratio", type=float, default=1.10,
                    help="a lossy strategy passes its check within this many times exact "
                         "synchronization's steps to the target loss (charged to its time to loss)")
    ap.add_argument("--final-rounds", type=int, default=3,
                    help="rounds of final checks (the next round: candidates that compress less)")
    ap.add_argument("--check-steps", type=int, default=150,
                    help="training steps of each convergence run")
    ap.add_argument("--check", action="store_true",
                    help="with --report: run the missing convergence checks of the stored runs")
    ap.add_argument("--trials", default=None, help="trials to train warm-start sources on "
                                                   "(default: the shipped datasets)")
    args = ap.parse_args()

    from autosync_transfer.domains.catalog import get_domain, split_domain_name
    from autosync_transfer.registry.plots import search_curves
    from autosync_transfer.runtime.trial import Protocol
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.errors import ConfigError
    from autosync_transfer.search.config import SearchConfig, run_name
    from autosync_transfer.search.loop import Searcher
    from autosync_transfer.search.resume import load_run, run_meta
    from autosync_transfer.search.summary import summarize
    from autosync_transfer.search.warm import warm_simulator, warm_version

    domains = args.domains.split(",")
    methods = args.methods.split(",")
    known = {"autosync-cold", "autosync-warm", "random", "tpe", "analytical"}
    ranked = {"autosync-cold", "autosync-warm", "analytical"}
    known |= {f"{m}+knobs" for m in ranked}
    if bad := [m for m in methods if m not in known]:
        print(f"error: unknown method {bad[0]!r} (known: {', '.join(sorted(known))})", file=sys.stderr)
        return 2
    if args.warm_from:
        sources = args.warm_from.split(",")
        if len(sources) != len(domains):
            print("error: --warm-from needs one source per domain", file=sys.stderr)
            return 2
    else:
        sources = []
        for d in domains:
            model, cluster = split_domain_name(d)
            sources.append(f"{model}-{'B' if cluster == 'A' else 'A'}")
    protocol = Protocol(warmup=args.warmup, iters=args.iters)
    rows = []
    for dname, src in zip(domains, sources):
        domain = get_domain(dname)
        curves, hits = {}, {}
        for spec in methods:
            m, _, knobs = spec.partition("+")
            method = "autosync" if m.startswith("autosync") else m
            cfg = SearchConfig(method=method, budget=args.budget, per_round=args.per_round,  # type: ignore[arg-type]
                               candidates=args.candidates, seed=args.seed, max_epochs=args.epochs,
                               neighbours=args.neighbours, confirm=args.confirm,
                               knob_candidates=args.knob_candidates if knobs else 0,
                               objective=args.objective, final_checks=args.final_checks,
                               final_rounds=args.final_rounds, check_steps=args.check_steps,
                               max_step_ratio=args.max_step_ratio)
            name = run_name(cfg, m == "autosync-warm")
            store = Path(args.store_dir) / dname / f"{name}.jsonl"
            knob_tag = f"+knobs{cfg.knob_candidates}" if cfg.knob_candidates else ""
            label = (m if m != "autosync-warm" else f"autosync-warm({src})") + knob_tag
            t0 = time.monotonic()
            if args.report:
                if not store.exists():
                    print(f"  [{dname} {spec}] not run ({store})", file=sys.stderr)
                    continue
                meta = run_meta(store, name)
                try:
                    progress, strategies = load_run(domain, store, name, args.budget)
                except ConfigError as e:
                    print(f"  [{dname} {spec}] skipped: {e}", file=sys.stderr)
                    continue
                source = meta.get("warm_source")
                label = (m if m != "autosync-warm" else f"autosync-warm({source or src})") + knob_tag
                # the rounds of the run as it was measured
                per_round = (meta.get("config") or {}).get("per_round", args.per_round)
                s = summarize(progress.trials, progress.references, per_round,
                              progress.confirmations)
                if args.objective == "time-to-loss":
                    s = {**s, **_time_to_loss(domain, store, name, progress, strategies, s,
                                              args)}
            else:
                warm = lineage = None
                if m == "autosync-warm":
                    warm, lineage = warm_simulator(src, trials=args.trials, seed=args.seed,
                                                   max_epochs=args.epochs)

                def say(p, _m=spec, _d=dname) -> None:  # noqa: ANN001
                    if p.message.startswith("round") and "measuring" not in p.message:
                        print(f"  [{_d} {_m}] {p.done}/{p.budget} {p.message}", file=sys.stderr,
                              flush=True)

                s = Searcher(domain, store, cfg, warm=warm, warm_source=src if warm else None,
                             warm_version=warm_version(lineage),
                             launcher=args.launcher,
                             protocol=protocol, on_event=say).run().summary
                print(f"  [{dname} {spec}] done in {time.monotonic() - t0:.0f} s", file=sys.stderr,
                      flush=True)
            prefix = f"{dname}/search/{name}/"
            wall = sum(r.wall_s for r in TrialStore(store).records() if r.id.startswith(prefix))
            curves[label], hits[label] = s["curve"], s["hit_rate"]
            rows.append((dname, label, s, wall))
        if not curves:
            continue
        search_curves(curves, hits, Path(args.store_dir) / dname / "search_curves.png",
                      per_round=args.per_round, title=f"{dname}: budget {args.budget}")

    head = (f"{'domain':11s} {'method':28s} {'trials':>6s} {'best ms':>8s} {'builder':>16s} "
            f"{'ddp ms':>8s} {'vs bld':>7s} {'conf':>6s} {'fp16':>6s} {'vs ddp':>7s} {'to1.1x':>6s} {'to1.2x':>6s} "
            f"{'hit':>5s} {'wall':>6s} {'ttl':>6s} {'ttl-c':>6s} {'ttl-ddp':>7s} {'excl':>4s}")
    print(head)
    for dname, label, s, wall in rows:
        bld = f"{s['best_builder']} {_fmt(s['best_builder_s'] and s['best_builder_s'] * 1000, '.1f')}"
        hit = statistics.mean(s["hit_rate"]) if s["hit_rate"] else None
        print(f"{dname:11s} {label:28s} {s['trials']:6d} {_fmt(s['best_s'] and s['best_s'] * 1000, '8.1f')} "
              f"{bld:>16s} {_fmt(s['ddp_s'] and s['ddp_s'] * 1000, '8.1f')} "
              f"{_fmt(s['speedup_vs_builder'], '6.2f')}x "
              f"{_fmt(s.get('confirmed_speedup_vs_builder'), '5.2f')}x "
              f"{_fmt(s.get('confirmed_speedup_vs_fp16_builder'), '5.2f')}x {_fmt(s['speedup_vs_ddp'], '6.2f')}x "
              f"{_fmt(s['trials_to_1.1x'], '6d')} {_fmt(s['trials_to_1.2x'], '6d')} "
              f"{_fmt(hit, '5.2f')} {wall / 60:5.1f}m "
              f"{_fmt(s.get('ttl_speedup_vs_builder'), '5.2f')}x "
              f"{_fmt(s.get('confirmed_ttl_speedup_vs_builder'), '5.2f')}x "
              f"{_fmt(s.get('ttl_speedup_vs_ddp'), '6.2f')}x {len(s.get('excluded') or {}):4d}")
    # the confirmed speed-ups with their 95 % intervals (paired by round, interleaved pool)
    from autosync_transfer.search.summary import format_speedup

    print("confirmed (best found vs): the best builder | torch DDP | the best fp16 reference")
    for dname, label, s, _ in rows:
        c = s.get("confirmed") or {}
        ttl = s.get("confirmed_ttl_speedup_vs_builder")
        ttl_low = s.get("confirmed_ttl_speedup_vs_builder_low")
        print(f"{dname:11s} {label:28s} {format_speedup(c, 'speedup_vs_builder')} | "
              f"{format_speedup(c, 'speedup_vs_ddp')} | "
              f"{format_speedup(c, 'speedup_vs_fp16_builder')}"
              + (f" | time to loss {ttl:.2f}x (lower bound {ttl_low:.2f}x)"
                 if ttl is not None and ttl_low is not None else ""))
    seconds: dict[str, dict[str, float]] = {}
    for dname, label, s, _ in rows:
        for sid, why in (s.get("excluded") or {}).items():
            print(f"excluded: {dname} {label}: {sid}: {why}")
        for sid, c in (s.get("convergence") or {}).items():
            seconds.setdefault(dname, {})[sid] = c["seconds"]
    for dname, by_sid in seconds.items():
        print(f"convergence runs on {dname}: {sum(by_sid.values()) / 60:.1f} min of training "
              f"({len(by_sid)} strategies checked, their share of the exact runs included)")
    print(f"\nspeed-ups are over the best hand-optimized builder / torch DDP measured in the same "
          f"run; protocol {args.warmup}+{args.iters}, launcher {args.launcher}, per round "
          f"{args.per_round}, {args.candidates} candidates; wall: measuring time of the run; plots in "
          f"{args.store_dir}/<domain>/")
    return 0


def _time_to_loss(domain, store, name, progress, strategies, summary, args):  # noqa: ANN001, ANN202
    """The time-to-loss figures of a stored run (its checks from the check store beside it;
    with ``--check`` the missing ones are run first)."""
    from autosync_transfer.dataset.checks import checks_path
    from autosync_transfer.runtime.accuracy import ConvergenceTolerance
    from autosync_transfer.rankers.fidelity import FidelityModel
    from autosync_transfer.search.objective import get_objective
    from autosync_transfer.search.resume import record_prefix
    from autosync_transfer.search.timetoloss import check_final, time_to_loss_figures

    prefix = record_prefix(domain.name, name)
    # the domain's checks, shared by its runs (a strategy several runs found is trained once)
    shared = Path(args.store_dir) / domain.name / "convergence.jsonl"
    if args.check:
        print(f"  [{domain.name} {name}] convergence runs of the final candidates",
              file=sys.stderr, flush=True)
    checks, errors, unchecked = check_final(
        domain, progress, strategies, prefix, get_objective(args.objective), shared,
        limit=args.final_checks, rounds=args.final_rounds, steps=args.check_steps,
        seed=args.seed, model=FidelityModel(), graph=domain.model, train=args.check,
        stored=[checks_path(store)],  # and those the search ran itself
        tolerance=ConvergenceTolerance(max_step_ratio=args.max_step_ratio))
    out = time_to_loss_figures(progress, strategies, prefix, checks, summary, errors)
    for s in unchecked:
        out["excluded"][s.id] = "not checked (run --report --check)"
    return out


if __name__ == "__main__":
    sys.exit(main())
