"""Step-time simulator accuracy, with no learning and zero trials of the domain.

For every trial store (default: the 15 shipped domains, ``datasets/trials/*.jsonl``, plus the
held-out cluster's stores given with ``--heldout``), compares the simulator's predicted step time
with each strategy's measured runtime (median of its trials' medians):

* ``mape``: median absolute percentage error of the predicted step time;
* ``pw``: pairwise accuracy of the simulator's ranking (pairs of strategies of one domain)
  against the drift-normalized labels the rankers train on (``dataset.loader.drift_normalized``);
* ``pw_an``: pairwise accuracy of the analytical sync-only model (the old baseline), beside it;
* ``pw_res`` / ``regret`` / ``rg_res`` / ``err_rep``: where the store has repeat runs
  (``benchmarks/repeatability.py``) on the profile's machine type (its worker type's processor),
  the profile simulator's pairwise accuracy on the pairs those runs resolve (its 95 % interval
  over strategies, ``dataset.repeat.resolved_interval``, and the pairs' count in brackets), the top-1 regret of its pick among the re-measured strategies against the fastest
  by the runs' consensus, the same against the confidently-best (``rg_res``: 0 where the runs
  cannot tell the pick from the fastest), and the median step error against that consensus
  (labels of the same
  machine type as the profile and calibration, whichever machine measured the store);
* a second table, **the physics of the run**, for every repeat run measured with its own
  physics (``benchmarks/repeatability.py --physics``: a calibration and a profile taken on the
  machine of the run just before its first round): the simulator with that physics, zero trials,
  judged on the pairs the run resolves by itself (``by run``) and on the pairs every run of its
  machine type resolves (``all runs``), each beside the physics of record on the same pairs,
  and the median step error against the run's own medians with either (``err_run``,
  ``err_rec``);
* with ``--linear-fit``, ``lin pw``: what simple structure explains, as a yardstick: the pairwise
  accuracy of a linear fit of the log normalized runtime on eight numbers of each strategy
  (:func:`strategy_numbers`), 5-fold cross-validated within the domain (it uses the domain's
  trials; the simulator uses none);
* with ``--builders``, a second table: every hand-optimized builder's strategy (``kind`` other
  than ``sampled``) of every domain, its measured step (raw and drift-normalized) beside the
  simulator's prediction; and every calibration's
  measured all-reduce (``ClusterCalibration.allreduce_s``, taken with no worker computing)
  against the ring the simulator charges at the calibrated rates (:func:`ring_seconds`).

Two inputs per domain: ``fallback`` (the cluster spec and the model graph only) and ``profile``
(the shipped :class:`~autosync_transfer.domains.profile.WorkloadProfile` of the model and
:class:`~autosync_transfer.domains.profile.ClusterCalibration` of the cluster, matched by
fingerprint in ``--profiles`` / ``--calibrations``; ``-`` where none is shipped).

A store whose metadata says ``launcher: emulated`` ran every worker on one machine: the simulator
is told so (``StepSimConfig.host_processes`` = world size, ``host_cores`` = the ``cpus`` the
records' ``machine`` field reports); this is a property of the launcher, not a fitted number.

``--datasets DIR`` takes other stores, e.g. another machine type's twins
(``benchmarks/results/machines/intel-xeon/trials``, with ``--heldout`` its ``heldout/``), and
``--repeats DIRS`` (comma-separated folders) the repeat files where none sits beside a store.

    python benchmarks/stepsim_accuracy.py [--datasets DIR] [--heldout DIR] [--repeats DIRS]
        [--profiles DIR] [--calibrations DIR] [--linear-fit] [--builders] [--out benchmarks/results/stepsim_accuracy.txt]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np


def pairwise(pred: np.ndarray, y: np.ndarray) -> float:
    i, j = np.triu_indices(len(y), 1)
    m = y[i] != y[j]
    return float(np.mean(np.sign(pred[i] - pred[j])[m] == np.sign(y[i] - y[j])[m]))


def strategy_numbers(strategy, domain) -> list[float]:
    """PS, fp16 and local-replication byte shares, PowerSGD byte share, all-reduce groups,
    partitioned variables, synchronized pieces and PS servers used."""
    from autosync_transfer.strategies.types import PS

    size = {v.name: v.nbytes for v in domain.model.variables}
    total = float(sum(size.values())) or 1.0
    ps = fp16 = psgd = lr = 0.0
    groups, servers = set(), set()
    shards = pieces = 0
    for n in strategy.nodes:
        items = list(n.items())
        share = size.get(n.var_name, 0) / len(items) / total
        shards += n.partition is not None
        for _, sync in items:
            pieces += 1
            if isinstance(sync, PS):
                ps += share
                lr += share * sync.local_replication
                servers.add(sync.destination)
            else:
                groups.add((sync.group, sync.compressor))
                fp16 += share * (sync.compressor in ("fp16", "fp16_ef"))
                psgd += share * (sync.compressor == "powersgd")
    return [ps, fp16, psgd, lr, len(groups), shards, pieces, len(servers)]


def linear_fit_pairwise(x: np.ndarray, y: np.ndarray, folds: int = 5, seed: int = 0) -> float:
    """Pairwise accuracy of a least-squares fit of ``log y`` on ``x`` (plus a constant),
    each strategy predicted by the fit on the other folds."""
    m = np.hstack([x, np.ones((len(x), 1))])
    idx = np.random.default_rng(seed).permutation(len(y))
    pred = np.empty(len(y))
    for part in np.array_split(idx, folds):
        train = np.setdiff1d(idx, part)
        w, *_ = np.linalg.lstsq(m[train], np.log(y[train]), rcond=None)
        pred[part] = m[part] @ w
    return pairwise(pred, y)


def ring_seconds(cal, cluster, nbytes: int) -> float:
    """The simulator's all-reduce of ``nbytes`` over every worker of ``cluster`` at ``cal``'s
    rates, not slowed (``StepSimulator``'s ring: ``2 (W - 1) / W`` of the bytes at the slowest
    link, ``2 (W - 1)`` message latencies and the collective latency)."""
    world = sum(n.workers for n in cluster.nodes)
    by_name = {c.name: c for c in cal.nodes}
    rates = [by_name[n.name].bandwidth_gbps * 1e9 / 8 for n in cluster.nodes]
    if max(n.workers for n in cluster.nodes) >= 2 or len(rates) == 1:
        rates.append(cal.intra_bandwidth_gbps * 1e9 / 8)
    lat = max(by_name[n.name].latency_s for n in cluster.nodes)
    if world < 2:
        return 0.0
    return (2 * (world - 1) / world * nbytes / min(rates) + 2 * (world - 1) * lat
            + cal.collective_latency_s)


def host_settings(store: Path, df, domain) -> dict[str, int]:  # noqa: ANN001
    """``StepSimConfig`` settings for a store whose metadata says ``launcher: emulated`` (every
    worker on one machine: ``host_processes`` = world size, ``host_cores`` = the ``cpus`` its
    records' ``machine`` field reports); empty otherwise."""
    from autosync_transfer.dataset.loader import file_meta

    if file_meta(store).get("launcher") != "emulated":
        return {}
    world = sum(n.workers for n in domain.cluster.nodes)
    cpus = [json.loads(m).get("cpus") for m in df["machine"] if m]
    cores = int(np.median([c for c in cpus if c])) if any(cpus) else None
    return {"host_processes": world, **({"host_cores": cores} if cores else {})}


def physics_of(domain, profiles: list, calibrations: list) -> tuple:  # noqa: ANN001
    """The profile of ``domain``'s model and the first calibration of its cluster (newest first,
    as :func:`main` sorts them) measured on the profile's processor, else one that does not
    record its processor (as ``autosync_transfer.rankers.physics`` picks it), matched by
    fingerprint; None where none is found."""
    prof = next((p for p in profiles if p.fingerprint == domain.model.fingerprint), None)
    mine = [c for c in calibrations if c.fingerprint == domain.cluster.fingerprint]
    proc = prof.processor if prof is not None else None
    if proc is not None:
        mine = ([c for c in mine if c.processor == proc]
                or [c for c in mine if c.processor is None] or mine)
    return prof, (mine[0] if mine else None)


def machine_type(prof, cal):  # noqa: ANN001, ANN201
    """The machine type whose repeat runs judge a simulation with ``prof`` and ``cal``: the
    profile's processor, else the calibration's, else the store's first repeat run's."""
    from autosync_transfer.dataset.repeat import FIRST_RUN

    proc = (prof.processor if prof is not None else None) or (
        cal.processor if cal is not None else None)
    return proc if proc is not None else FIRST_RUN


def _run_physics_rows(store: Path, name: str, domain, raw, config, of_record,  # noqa: ANN001
                      repeats: tuple[str, ...], best: list[tuple[float, float, str]]
                      ) -> list[str]:
    """The rows of the physics-of-the-run table for one store: one per complete repeat run
    (of any machine type) that was measured with its physics; ``of_record``: the simulator's
    predictions with the physics of record (None: no such physics). The 'by run' figures are
    appended to ``best``: (resolved-pair accuracy, top-1 regret against the confidently-best,
    ``store run``)."""
    from autosync_transfer.dataset.repeat import (load_repeatability, ranking_figures,
                                                  repeat_processors, run_physics)
    from autosync_transfer.rankers.stepsim import StepSimulator

    rows = []
    ids = list(raw["strategy_id"])
    record = dict(zip(ids, map(float, of_record))) if of_record is not None else None
    for proc in repeat_processors(store, name, repeats):
        rep = load_repeatability(store, name, processor=proc, repeats=repeats)
        if rep is None:
            continue
        for run in rep.complete_runs():
            phys = run_physics(store, domain, run, repeats)
            if phys is None:
                continue
            prof, cal = phys
            pred = dict(zip(ids, map(float, StepSimulator(domain, prof, cal, config).simulate(
                list(raw["strategy"]))["step_s"])))
            cells = []
            for runs in ([run], None):
                fig = ranking_figures(pred, rep, runs)
                cell = (f"{fig['pairwise_resolved']:.3f} [{fig['pairwise_resolved_low']:.3f}, "
                        f"{fig['pairwise_resolved_high']:.3f}] ({fig['resolved_pairs']:3d})")
                rec = (f"{ranking_figures(record, rep, runs)['pairwise_resolved']:.3f}"
                       if record is not None else "-")
                cells.append(f"{cell:>33s} {fig['top1_regret']:6.1%} "
                             f"{fig['top1_regret_resolved']:6.1%} {rec:>9s}")
                if runs is not None:
                    best.append((fig["pairwise_resolved"], fig["top1_regret_resolved"],
                                 f"{name} {run}"))
            labels = rep.consensus([run])
            errs = [_median_error(p, labels) if p is not None else None for p in (pred, record)]
            rows.append(f"{name:16s} {run:4s} {cal.created_at[:16].replace('T', ' '):17s} "
                        f"{1e6 * (cal.ps_piece_s or 0):8.0f} {1e6 * (cal.ar_collective_s or 0):6.0f}"
                        f"  {'  '.join(cells)}  "
                        + " ".join(f"{e:7.3f}" if e is not None else f"{'-':>7s}" for e in errs))
            print(rows[-1], flush=True)
    return rows


def _run_footer(best: list[tuple[float, float, str]]) -> str:
    """The last line of the physics-of-the-run table: its lowest 'by run' accuracy and its
    highest 'by run' top-1 regret against the confidently-best, each with the run it is of."""
    low = min(best, key=lambda b: (b[0] if b[0] == b[0] else 2.0, b[2]))
    worst = max(best, key=lambda b: (b[1] if b[1] == b[1] else -1.0, b[2]))
    return (f"# lowest 'by run' figure: {low[0]:.3f} over {len(best)} runs ({low[2]}); highest "
            f"'by run' top-1 regret against the confidently-best: {worst[1]:.1%} ({worst[2]})\n")


def _median_error(predicted: dict[str, float], labels: dict[str, float]) -> float:
    """Median ``|predicted - label| / label`` over the strategies both hold."""
    return float(np.median([abs(predicted[k] - v) / v for k, v in labels.items()
                            if k in predicted]))


def _load_json_models(folder: Path | None, cls: type) -> list:
    out = []
    if folder is None or not folder.is_dir():
        return out
    for p in sorted(folder.glob("*.json")):
        try:
            data = json.loads(p.read_text())
            # fields a newer version of the record added are not needed by the simulator
            data = {k: v for k, v in data.items() if k in cls.model_fields}
            out.append(cls.model_validate(data))
        except Exception as e:  # a file of another kind or version: skipped, said so
            print(f"# skipped {p}: {str(e).splitlines()[0]}", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="datasets/trials")
    ap.add_argument("--heldout", default=None, help="folder of the held-out cluster's stores")
    ap.add_argument("--profiles", default="datasets/profiles")
    ap.add_argument("--calibrations", default="datasets/calibrations")
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeats", default=None,
                    help="comma-separated folders holding the repeat files where none sits "
                         "beside a store (e.g. datasets/trials for another machine type's twin "
                         "stores in --datasets)")
    ap.add_argument("--sparse-call-s", type=float, default=0.0,
                    help="StepSimConfig.sparse_call_s: the cost of a row-sparse PS push or pull "
                         "beyond its bytes and latency (default 0: not modelled)")
    ap.add_argument("--domains", default=None, help="only these domains (comma-separated)")
    ap.add_argument("--linear-fit", action="store_true",
                    help="also a cross-validated linear fit on eight strategy numbers (lin pw)")
    ap.add_argument("--builders", action="store_true",
                    help="also list every builder strategy: measured against predicted seconds")
    args = ap.parse_args()

    from autosync_transfer.dataset.repeat import load_repeatability, ranking_figures
    from autosync_transfer.dataset.loader import (find_domain, load_trials,
                                                  normalized_noise_ceiling, reference_noise,
                                                  strategy_table)
    from autosync_transfer.rankers.metrics import noise_ceiling
    from autosync_transfer.domains.profile import ClusterCalibration, WorkloadProfile
    from autosync_transfer.rankers.costmodel import AnalyticalRanker
    from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimulator

    profiles = _load_json_models(Path(args.profiles), WorkloadProfile)
    # the newest calibration of a cluster first (as autosync_transfer.domains.physics finds it)
    calibrations = sorted(_load_json_models(Path(args.calibrations), ClusterCalibration),
                          key=lambda c: c.created_at, reverse=True)
    files = sorted(Path(args.datasets).glob("*.jsonl"))
    if args.heldout:
        files += sorted(Path(args.heldout).glob("*.jsonl"))
    header = (f"# python {' '.join(shlex.quote(a) for a in sys.argv)}\n"
              f"# {len(profiles)} profiles, {len(calibrations)} calibrations found; "
              f"mape = median |pred - measured| / measured of the step time; pw = pairwise "
              f"accuracy; pw_an = the analytical sync-only model's pairwise accuracy\n")
    lines = [f"{'domain':16s} {'n':>4s} {'fallback mape':>13s} {'pw':>6s} "
             f"{'profile mape':>13s} {'pw':>6s} {'pw_an':>6s} {'ceil_raw':>8s} "
             f"{'ceil_norm':>9s} {'pw_res [95 % interval] (pairs)':>32s} {'regret':>6s} {'rg_res':>6s} {'err_rep':>7s}"
             + (f" {'lin pw':>6s}" if args.linear_fit else "")]
    summary: dict[str, list[float]] = {"fb_mape": [], "fb_pw": [], "pr_mape": [], "pr_pw": [],
                                       "an_pw": [], "ceil_raw": [], "ceil_norm": [],
                                       "pw_res": [], "regret": [], "rg_res": [], "err_rep": [],
                                       "lin_pw": []}
    ring_lines: dict[str, str] = {}
    repeats = tuple(x for x in (args.repeats or "").split(",") if x)
    run_lines = [f"{'domain':16s} {'run':4s} {'physics measured':17s} {'PS piece':>8s} "
                 f"{'coll.':>6s}  {'by run: physics of the run':>33s} {'regret':>6s} "
                 f"{'rg_res':>6s} {'of record':>9s}  {'all runs: of the run':>33s} "
                 f"{'regret':>6s} {'rg_res':>6s} {'of record':>9s}  {'err_run':>7s} "
                 f"{'err_rec':>7s}"]
    run_best: list[tuple[float, float, str]] = []
    builder_lines = [f"{'domain':16s} {'builder':24s} {'measured':>8s} {'norm':>7s} "
                     f"{'pred':>7s}"]
    for f in files:
        df = load_trials(f)
        if not len(df):
            lines.append(f"{f.stem:16s}    0   (no trials yet)")
            continue
        name = str(df["domain"].iloc[0])
        if args.domains and name not in args.domains.split(","):
            continue
        domain = find_domain(name, [f])
        raw = strategy_table(df, normalize=False)
        if len(raw) < 2:
            lines.append(f"{name:16s} {len(raw):4d}   (too few strategies)")
            continue
        norm = strategy_table(df).set_index("strategy_id")["runtime_s"]
        strategies = list(raw["strategy"])
        y = raw["runtime_s"].to_numpy(dtype=float)  # measured step time (mape)
        yn = norm.loc[raw["strategy_id"]].to_numpy(dtype=float)  # drift-normalized (pw)
        config = StepSimConfig(sparse_call_s=args.sparse_call_s, **host_settings(f, df, domain))
        fb = StepSimulator(domain, config=config).simulate(strategies)["step_s"]
        prof, cal = physics_of(domain, profiles, calibrations)
        an = AnalyticalRanker().score(strategies, domain)
        fb_mape = float(np.median(np.abs(fb - y) / y))
        row = f"{name:16s} {len(y):4d} {fb_mape:13.3f} {pairwise(fb, yn):6.3f} "
        summary["fb_mape"].append(fb_mape)
        summary["fb_pw"].append(pairwise(fb, yn))
        if prof is not None or cal is not None:
            pr = StepSimulator(domain, prof, cal, config).simulate(strategies)["step_s"]
            pr_mape = float(np.median(np.abs(pr - y) / y))
            row += f"{pr_mape:13.3f} {pairwise(pr, yn):6.3f} "
            summary["pr_mape"].append(pr_mape)
            summary["pr_pw"].append(pairwise(pr, yn))
            if prof is None or cal is None:
                row += "(partial) "
        else:
            row += f"{'-':>13s} {'-':>6s} "
        row += f"{pairwise(an, yn):6.3f}"
        summary["an_pw"].append(pairwise(an, yn))
        # noise ceilings: raw reference CV on raw runtimes; leave-one-out CV of the normalized
        # references on the normalized runtimes
        raw_noise = reference_noise(df)
        c_raw = (noise_ceiling(y, float(raw_noise["median_robust_cv"])) if raw_noise
                 else float("nan"))
        c_norm = normalized_noise_ceiling(df, yn)
        row += f" {c_raw:8.3f} {c_norm:9.3f}"
        summary["ceil_raw"].append(c_raw)
        summary["ceil_norm"].append(c_norm)
        pr_or_fb = pr if (prof is not None or cal is not None) else fb
        rep = load_repeatability(f, name, processor=machine_type(prof, cal), repeats=repeats)
        run_lines += _run_physics_rows(f, name, domain, raw, config, pr_or_fb if (
            prof is not None and cal is not None) else None, repeats, run_best)
        if rep is not None and rep.complete_runs():
            predicted = dict(zip(raw["strategy_id"], (float(v) for v in pr_or_fb)))
            fig = ranking_figures(predicted, rep)
            labels = rep.consensus(rep.complete_runs())
            err = float(np.median([abs(predicted[k] - v) / v for k, v in labels.items()
                                   if k in predicted]))
            lo, hi = fig["pairwise_resolved_low"], fig["pairwise_resolved_high"]
            cell = (f"{fig['pairwise_resolved']:.3f} [{lo:.3f}, {hi:.3f}] "
                    f"({fig['resolved_pairs']:3d})")
            row += (f" {cell:>32s} "
                    f"{fig['top1_regret']:6.1%} {fig['top1_regret_resolved']:6.1%} {err:7.3f}")
            summary["pw_res"].append(fig["pairwise_resolved"])
            summary["regret"].append(fig["top1_regret"])
            summary["rg_res"].append(fig["top1_regret_resolved"])
            summary["err_rep"].append(err)
        else:
            row += f" {'-':>32s} {'-':>6s} {'-':>6s} {'-':>7s}"
        if args.linear_fit:
            lin = linear_fit_pairwise(np.array([strategy_numbers(s, domain)
                                                for s in strategies]), yn)
            row += f" {lin:6.3f}"
            summary["lin_pw"].append(lin)
        lines.append(row)
        print(row, flush=True)
        if args.builders and cal is not None and cal.fingerprint not in ring_lines:
            ring_lines[cal.fingerprint] = "  ".join(
                f"{b} B {t * 1e3:.2f} ms / {ring_seconds(cal, domain.cluster, b) * 1e3:.2f} ms "
                f"= {t / ring_seconds(cal, domain.cluster, b):.2f}x"
                for b, t in sorted(cal.allreduce_s.items()) if ring_seconds(cal, domain.cluster, b))
            ring_lines[cal.fingerprint] = f"{cal.cluster:16s} " + ring_lines[cal.fingerprint]
        if args.builders:
            for i, st in enumerate(strategies):
                if st.kind != "sampled":
                    builder_lines.append(
                        f"{name:16s} {st.kind:24s} {y[i]:8.3f} {yn[i]:7.3f} {pr_or_fb[i]:7.3f}")
    med = {k: (f"{np.nanmedian(v):.3f}" if v else "-") for k, v in summary.items()}
    lines.append(f"{'median':16s} {'':4s} {med['fb_mape']:>13s} {med['fb_pw']:>6s} "
                 f"{med['pr_mape']:>13s} {med['pr_pw']:>6s} {med['an_pw']:>6s} "
                 f"{med['ceil_raw']:>8s} {med['ceil_norm']:>9s} {med['pw_res']:>12s} "
                 f"{med['regret']:>6s} {med['rg_res']:>6s} {med['err_rep']:>7s}"
                 + (f" {med['lin_pw']:>6s}" if args.linear_fit else ""))
    text = header + "\n".join(lines) + "\n"
    if len(run_lines) > 1:
        text += ("\n# the physics of the run: the simulator with the profile and calibration "
                 "measured on the machine of a repeat run just before its first round (zero "
                 "trials; PS piece and per-collective cost in us), judged on the pairs that run "
                 "resolves by itself and on the pairs every run of its machine type resolves; "
                 "'of record' = the physics of record (the table above) on the same pairs; "
                 "err_run / err_rec = the median step error against the run's own medians with "
                 "the run's physics / the physics of record\n"
                 + "\n".join(run_lines) + "\n"
                 + _run_footer(run_best))
    if args.builders:
        text += ("\n# builders: measured = median step seconds, norm = drift-normalized, pred = "
                 "the simulator (profile + calibration, else fallback)\n"
                 + "\n".join(builder_lines) + "\n"
                 + "\n# calibrations: measured all-reduce / the simulator's ring at the "
                 "calibrated rates (no worker computing)\n" + "\n".join(ring_lines.values())
                 + "\n")
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
