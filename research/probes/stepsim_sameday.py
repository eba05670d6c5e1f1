"""The step-time simulator against a store measured again today, with inputs taken today.

A trial store, the shipped profile and the shipped calibration were each measured on a different
day; on a shared machine the level of a step moves by 10-25 % between days, which the stores'
step error mixes with the simulator's. This takes all three on one day, one after the other on a
quiet machine: it calibrates DOMAIN's cluster and profiles its model now (into a scratch folder;
nothing shipped is touched), then measures every strategy of the store again in one pool of
workers (``--launcher emulated``: network namespaces, needs root), appending to a scratch file
(resumable: a second run measures only what is missing; when the trial workers themselves fail
to run, e.g. the emulated cluster was torn down, it stops without recording anything against
the strategy in flight).

Printed: today's step against the store's (ratio and their pairwise agreement), then the
simulator's median error, pairwise accuracy and level (median log measured / predicted) against
today's measurement, with the shipped inputs, today's, and each mix. With ``--fit``, what is left
with today's inputs: the builders' log measured / predicted, and a least-squares fit of the
sampled strategies' on their structure (row-sparse PS pieces, those with local replication,
dense variables on PS, all-reduced variables, compressed ones). With ``--bands``, the pairwise
agreements again over only the pairs the store puts at least 5, 10, 20 % apart (near-ties are
where two measurements disagree), and how far the level wandered during today's run (a run of
an hour has no drift reference: a wandering level is noise today's labels carry); with
``--against SCRATCH`` also the agreement with another run's measurement (two runs of one day).
``--sim-option NAME=VALUE`` predicts with a
:class:`~autosync_transfer.rankers.stepsim.StepSimConfig` setting.

"Shipped" is the newest profile / calibration found by fingerprint in the usual folders (the
checkout's ``datasets/`` and the user's cache). A failed measurement is measured again on the
next run; the scratch folder's calibration and profile are those of the first run.

    sudo python research/probes/stepsim_sameday.py --domain ncf-B --scratch /tmp/sameday
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="ncf-B")
    ap.add_argument("--store", type=Path, default=None,
                    help="the trial store (default datasets/trials/DOMAIN.jsonl)")
    ap.add_argument("--scratch", type=Path, required=True,
                    help="folder for today's calibration, profile and measurements")
    ap.add_argument("--launcher", default="emulated", choices=["emulated", "local"])
    ap.add_argument("--fit", action="store_true",
                    help="also print what is left with today's inputs, by structure")
    ap.add_argument("--bands", action="store_true",
                    help="also print pairwise agreement by how far apart the store puts a pair, "
                         "and how the level wandered while today's measurement ran")
    ap.add_argument("--against", type=Path, default=None, metavar="SCRATCH",
                    help="with --bands, also the agreement with another run's measurement "
                         "(its scratch folder): what two measurements of one day agree on")
    ap.add_argument("--sim-option", action="append", default=[], metavar="NAME=VALUE",
                    help="predict with this StepSimConfig setting (repeatable)")
    args = ap.parse_args()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import numpy as np
    from _lab import pairwise, sim_options, simulator

    options = sim_options(args.sim_option, ap)
    if args.against is not None and not (args.against / f"{args.domain}.jsonl").is_file():
        ap.error(f"--against: {args.against}: holds no {args.domain}.jsonl")

    from autosync_transfer.dataset.loader import find_domain, load_trials, strategy_table
    from autosync_transfer.domains.physics import find_calibration, find_profile
    from autosync_transfer.runtime.calibrate import get_calibration
    from autosync_transfer.runtime.profile import get_profile
    from autosync_transfer.runtime.trial import Protocol, WorkerPool

    store = args.store or ROOT / "datasets" / "trials" / f"{args.domain}.jsonl"
    df = load_trials(store)
    domain = find_domain(args.domain, [store])
    table = strategy_table(df, normalize=False)
    proto = df["protocol"].dropna().iloc[0] if "protocol" in df else None
    proto = json.loads(proto) if isinstance(proto, str) else (proto or {})
    protocol = Protocol(warmup=int(proto.get("warmup", 3)), iters=int(proto.get("iters", 10)))
    args.scratch.mkdir(parents=True, exist_ok=True)
    cal_dir, prof_dir = args.scratch / "calibrations", args.scratch / "profiles"
    cal_today, _ = get_calibration(domain.cluster, args.launcher, folder=cal_dir)
    prof_today, _ = get_profile(f"zoo:{domain.model.name}", folder=prof_dir)
    out = args.scratch / f"{args.domain}.jsonl"

    done = {r["strategy_id"] for r in _records(out) if r.get("status") == "ok"}
    todo = [(sid, st) for sid, st in zip(table["strategy_id"], table["strategy"])
            if sid not in done]
    if todo:
        with WorkerPool(domain, args.launcher, protocol) as pool, out.open("a") as fh:
            for k, (sid, st) in enumerate(todo):
                res = pool.run(st)
                if res.infrastructure:  # the environment, not the strategy: nothing recorded
                    print(f"# stopped after {k} of {len(todo)}: the trial workers fail to run "
                          f"({res.error}); a next run measures the rest", file=sys.stderr)
                    return 1
                fh.write(json.dumps({"strategy_id": sid, "status": res.status,
                                     "median_s": res.median_s, "time": time.time()}) + "\n")
                fh.flush()
                if (k + 1) % 20 == 0:
                    print(f"# {k + 1} of {len(todo)} measured", file=sys.stderr, flush=True)
    today = {r["strategy_id"]: float(r["median_s"]) for r in _records(out)
             if r.get("status") == "ok" and r.get("median_s")}
    keep = [i for i, sid in enumerate(table["strategy_id"]) if sid in today]
    strategies = [table["strategy"].iloc[i] for i in keep]
    y = np.array([today[table["strategy_id"].iloc[i]] for i in keep])
    y_store = table["runtime_s"].to_numpy(float)[keep]
    world = domain.cluster.world_size
    host = ({"host_processes": world, "host_cores": os.cpu_count() or 1}
            if args.launcher == "emulated" else {})
    shipped_prof = find_profile(domain.model.fingerprint)
    shipped_cal = find_calibration(domain.cluster.fingerprint, args.launcher)
    print(f"# python {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(f"# {args.domain}: {len(y)} strategies measured today ({protocol.warmup} + "
          f"{protocol.iters} iterations); today / store median {np.median(y / y_store):.3f}, "
          f"pairwise agreement of the two {pairwise(y_store, y):.3f}")
    print(f"# shipped profile {shipped_prof.created_at if shipped_prof else '-'} (foreign CPU "
          f"{getattr(shipped_prof, 'foreign_cpu', None)}), today's {prof_today.created_at} "
          f"({prof_today.foreign_cpu}); shipped calibration "
          f"{shipped_cal.created_at if shipped_cal else '-'}, today's {cal_today.created_at}")
    print(f"{'profile':9s} {'calibration':12s} {'mape':>6s} {'pw':>6s} {'level':>7s}")
    mixes = {}
    for pname, prof in (("shipped", shipped_prof), ("today", prof_today)):
        for cname, cal in (("shipped", shipped_cal), ("today", cal_today)):
            pred = simulator(domain, prof, cal, host, options).simulate(
                strategies)["step_s"]
            mixes[pname, cname] = pred
            print(f"{pname:9s} {cname:12s} {np.median(np.abs(pred - y) / y):6.3f} "
                  f"{pairwise(pred, y):6.3f} {np.median(np.log(y / pred)):+7.3f}")
    if args.fit:
        _fit(domain, strategies, y, simulator(domain, prof_today, cal_today, host, options))
    if args.bands:
        y_norm = strategy_table(df).set_index("strategy_id")["runtime_s"].loc[
            [table["strategy_id"].iloc[i] for i in keep]].to_numpy(float)
        preds = {f"simulator ({p}/{p} inputs)": mixes[p, p] for p in ("shipped", "today")}
        order = [table["strategy_id"].iloc[i] for i in keep]
        when = {r["strategy_id"]: float(r.get("time", 0.0)) for r in _records(out)
                if r.get("status") == "ok"}
        other = None
        if args.against is not None:
            theirs = {r["strategy_id"]: float(r["median_s"])
                      for r in _records(args.against / f"{args.domain}.jsonl")
                      if r.get("status") == "ok" and r.get("median_s")}
            other = np.array([theirs.get(sid, np.nan) for sid in order])
        _bands(y_norm, y, preds, np.argsort([when.get(sid, 0.0) for sid in order],
                                             kind="stable"), other)
    return 0


def _records(path: Path) -> list[dict]:
    """A measurement file's records (a line cut by a kill is skipped: measured again)."""
    found = []
    for line in (path.read_text().splitlines() if path.exists() else []):
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return found


def _bands(y_norm, y, preds: dict, measured_order, other=None,  # noqa: ANN001
           block: int = 10) -> None:
    """Pairwise agreement over the pairs the store (drift-normalized labels) puts at least a
    given log gap apart, and the level's wandering during today's run: the median log today /
    store of consecutive blocks of ``block`` strategies in the order they were measured."""
    import numpy as np

    ref = np.log(y_norm)
    i, j = np.triu_indices(len(ref), 1)
    gap = np.abs(ref[i] - ref[j])
    cuts = (0.0, 0.05, 0.1, 0.2)
    print("# pairwise agreement over the pairs at least this log gap apart in the store "
          "(share of pairs): " + ", ".join(f">= {c:.2f} ({np.mean(gap >= c):.2f})" for c in cuts))
    everywhere = np.ones(len(ref), dtype=bool)
    rows = {"today's measurement vs the store": (np.log(y), ref, everywhere)}
    rows.update({f"{name} vs today's": (np.log(p), np.log(y), everywhere)
                 for name, p in preds.items()})
    rows.update({f"{name} vs the store": (np.log(p), ref, everywhere)
                 for name, p in preds.items()})
    if other is not None:
        both = np.isfinite(other)
        mine = np.log(y)
        rows[f"the other run's vs today's ({int(both.sum())} both measured)"] = (
            np.log(np.where(both, other, 1.0)), mine, both)
        for name, p in preds.items():
            rows[f"{name} vs the other run's"] = (
                np.log(p), np.log(np.where(both, other, 1.0)), both)
    for name, (a, b, valid) in rows.items():
        ok = np.sign(a[i] - a[j]) == np.sign(b[i] - b[j])
        pair_valid = valid[i] & valid[j]
        print(f"#   {name:56s} " + " ".join(
            f"{ok[(gap >= c) & pair_valid].mean():.3f}" if ((gap >= c) & pair_valid).any()
            else "  -  " for c in cuts))
    d = np.log(y / y_norm)[measured_order]
    meds = np.array([np.median(d[k:k + block]) for k in range(0, len(d) - block + 1, block)])
    if meds.size:
        print(f"# level while measuring: median log today / store per {block} strategies in "
              f"measurement order from {meds.min():+.3f} to {meds.max():+.3f} "
              f"(interquartile {np.subtract(*np.percentile(meds, [75, 25])):.3f}; the store's "
              f"own spread p95 / p5 {np.exp(np.percentile(ref, 95) - np.percentile(ref, 5)):.2f})")


def _structure(strategy, sparse_vars: set[str]) -> list[float]:  # noqa: ANN001
    """Row-sparse PS pieces, those with local replication, dense variables on PS, all-reduced
    variables, compressed all-reduced variables."""
    sparse = lr = dense_ps = ar = comp = 0
    for c in strategy.nodes:
        syncs = c.partition.synchronizers if c.partition else (c.synchronizer,)
        for sy in syncs:
            if sy.kind == "ps":
                if c.var_name in sparse_vars:
                    sparse += 1
                    lr += int(sy.local_replication)
                else:
                    dense_ps += 1
            else:
                ar += 1
                comp += int(sy.compressor != "none")
    return [sparse, lr, dense_ps, ar, comp]


def _fit(domain, strategies, y, sim) -> None:  # noqa: ANN001
    import numpy as np

    sparse_vars = {v.name for v in domain.model.variables if v.sparse}
    r = np.log(y / sim.simulate(strategies)["step_s"])
    builders = [k for k, st in enumerate(strategies) if st.kind != "sampled"]
    print("# with today's inputs, log measured / predicted of the builders: "
          + ", ".join(f"{strategies[k].kind} {r[k]:+.3f}" for k in builders))
    sampled = [k for k, st in enumerate(strategies) if st.kind == "sampled"]
    if len(sampled) < 7:
        return
    X = np.array([[1.0] + _structure(strategies[k], sparse_vars) for k in sampled])
    coef, *_ = np.linalg.lstsq(X, r[sampled], rcond=None)
    resid = r[sampled] - X @ coef
    r2 = 1.0 - float(np.var(resid)) / max(float(np.var(r[sampled])), 1e-12)
    names = ["intercept", "sparse pieces", "local repl.", "dense PS", "all-reduced", "compressed"]
    print(f"# sampled ({len(sampled)}): median {np.median(r[sampled]):+.3f}; least-squares fit "
          + ", ".join(f"{n} {c:+.4f}" for n, c in zip(names, coef)) + f"; R2 {r2:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
