"""The step-time simulator: hand-computed iterations, vectorization, inputs and rankers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph, Variable
from autosync_transfer.domains.profile import (ACTIONS, ActionCost, ClusterCalibration,
                                               NodeCalibration, WorkloadProfile)
from autosync_transfer.errors import ConfigError, StrategyValidationError
from autosync_transfer.rankers.simulator import STEPSIM, Simulator
from autosync_transfer.rankers import stepsim
from autosync_transfer.rankers.stepsim import TERMS, StepSimConfig, StepSimulator, StepSimVariant
from autosync_transfer.strategies.sampler import SamplerConfig, StrategySampler
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig
from autosync_transfer.testing import hypothesis_strategies as hs
from autosync_transfer.testing import tiny_cluster, tiny_domain, tiny_strategies

MB = 1_000_000


def _graph(sizes: list[int]) -> ModelGraph:
    """Dense 1-D float32 variables of ``sizes`` elements, in forward order."""
    return ModelGraph(name="g", variables=tuple(
        Variable(name=f"v{i}", shape=(n,), order=i) for i, n in enumerate(sizes)))


def _profile(graph: ModelGraph, ready: list[float], *, fwd: float = 0.1, bwd: float = 0.2,
             opt: float = 0.05, actions: dict[str, ActionCost] | None = None) -> WorkloadProfile:
    zero = {a: ActionCost(action=a, elements=(1,), seconds=(0.0,))  # type: ignore[arg-type]
            for a in ("copy", "fp16_cast", "error_feedback", "powersgd", "ps_aggregate")}
    return WorkloadProfile(
        workload=graph.name, fingerprint=graph.fingerprint, worker_type="cpu", batch_size=1,
        forward_s=fwd, backward_s=bwd, optimizer_s=opt,
        ready_s={v.name: r for v, r in zip(graph.variables, ready)},
        actions={**zero, **(actions or {})})


def _calibration(domain: Domain, gbps: float = 8.0, latency_s: float = 0.0,
                 slowdown: dict[int, float] | None = None) -> ClusterCalibration:
    return ClusterCalibration(
        cluster=domain.cluster.name, fingerprint=domain.cluster.fingerprint, launcher="test",
        nodes=tuple(NodeCalibration(name=n.name, bandwidth_gbps=gbps, latency_s=latency_s)
                    for n in domain.cluster.nodes),
        intra_bandwidth_gbps=80.0, compute_slowdown=slowdown or {1: 1.0})


def _strategy(syncs: list[PS | AllReduce]) -> Strategy:
    return Strategy(id="s", nodes=tuple(VarConfig(var_name=f"v{i}", synchronizer=s)
                                        for i, s in enumerate(syncs)))


def _sim(sizes: list[int], ready: list[float], workers: int = 1, nodes: int = 2,
         **profile_kw: object) -> StepSimulator:
    g = _graph(sizes)
    dom = Domain(name="d", model=g, cluster=tiny_cluster(nodes, workers))
    return StepSimulator(dom, _profile(g, ready, **profile_kw),  # type: ignore[arg-type]
                         _calibration(dom))


def test_one_bucket_waits_for_its_last_gradient() -> None:
    # 2 workers, 8 Gbit/s = 1e9 B/s: a ring moves 2 (W-1)/W = 1 x the bytes: 4 MB -> 4 ms
    sim = _sim([MB, 1000], [0.2, 0.05])
    out = sim.simulate([_strategy([AllReduce(group=0), AllReduce(group=0)])])[0]
    bucket = (4 * MB + 4000) / 1e9
    # v0 (first in forward order) is ready last, at forward + 0.2 = 0.3 s
    assert out["sync_end_s"] == pytest.approx(0.3 + bucket)
    assert out["step_s"] == pytest.approx(0.3 + bucket + 0.05)
    assert out["exposed_comm_s"] == pytest.approx(bucket)
    assert out["compute_s"] == pytest.approx(0.35)
    assert out["nic_contention_s"] == pytest.approx(0.0)


def test_separate_buckets_overlap_with_backward() -> None:
    # v1's bucket (40 ms) launches at 0.15 s and ends before v0 is ready at 0.3 s
    sim = _sim([1000, 10 * MB], [0.2, 0.05])
    one = sim.simulate([_strategy([AllReduce(group=0), AllReduce(group=0)])])[0]
    two = sim.simulate([_strategy([AllReduce(group=0), AllReduce(group=1)])])[0]
    assert one["sync_end_s"] == pytest.approx(0.3 + (4000 + 40 * MB) / 1e9)
    assert two["sync_end_s"] == pytest.approx(0.3 + 4000 / 1e9)
    assert two["step_s"] < one["step_s"]


def test_the_ar_thread_runs_buckets_one_after_another() -> None:
    # both ready at 0.1 + 0.01: two 40 ms buckets end at 0.11 + 0.08
    sim = _sim([10 * MB, 10 * MB], [0.01, 0.01])
    out = sim.simulate([_strategy([AllReduce(group=0), AllReduce(group=1)])])[0]
    assert out["sync_end_s"] == pytest.approx(0.11 + 0.08)
    assert out["ar_s"] == pytest.approx(0.08)


def test_ps_and_all_reduce_share_a_nic() -> None:
    # PS on n0 of v1 (40 MB) and AR of v0 (40 MB), both ready at 0.11 s. The ring takes 40 ms;
    # the PS piece's push and its answer cross each NIC one after the other (the answer's
    # ready notices queue behind data on gloo's pair connections): 80 ms; on one NIC 120 ms
    sim = _sim([10 * MB, 10 * MB], [0.01, 0.01])
    out = sim.simulate([_strategy([AllReduce(group=0), PS(destination="n0")])])[0]
    assert out["ar_s"] == pytest.approx(0.04)
    assert out["ps_s"] == pytest.approx(0.08)
    assert out["sync_end_s"] == pytest.approx(0.11 + 0.12)
    assert out["nic_contention_s"] == pytest.approx(0.04)
    # full duplex (push and answer at once): 40 ms each, 80 ms on one NIC
    duplex = StepSimulator(sim.domain, sim.profile, sim.calibration,
                           StepSimConfig(), variant=StepSimVariant(ps_results_block_gathers=False))
    out = duplex.simulate([_strategy([AllReduce(group=0), PS(destination="n0")])])[0]
    assert out["ps_s"] == pytest.approx(0.04)
    assert out["sync_end_s"] == pytest.approx(0.11 + 0.08)


def test_compression_occupies_the_worker_and_shrinks_the_wire() -> None:
    fp16 = ActionCost(action="fp16_cast", elements=(1, 10 * MB), seconds=(0.0, 0.01))
    sim = _sim([10 * MB, 1000], [0.2, 0.05], actions={"fp16_cast": fp16})
    none, half = sim.simulate([_strategy([AllReduce(), AllReduce(group=1)]),
                               _strategy([AllReduce(compressor="fp16"), AllReduce(group=1)])])
    assert half["compression_s"] == pytest.approx(0.01)
    assert none["compression_s"] == pytest.approx(0.0)
    assert half["sync_end_s"] == pytest.approx(0.3 + 0.01 + 20 * MB / 1e9)
    assert none["sync_end_s"] == pytest.approx(0.3 + 40 * MB / 1e9)


def test_calibrated_slowdown_scales_compute() -> None:
    g = _graph([1000, 1000])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(2, 2))
    cal = _calibration(dom, slowdown={1: 1.0, 2: 1.5})
    sim = StepSimulator(dom, _profile(g, [0.2, 0.05]), cal)
    out = sim.simulate([_strategy([AllReduce(), AllReduce()])])[0]
    assert out["compute_s"] == pytest.approx(1.5 * 0.35)
    assert out["cpu_contention_s"] == pytest.approx(0.5 * 0.35)


@pytest.mark.parametrize("rows_per_batch", [None, 16])
def test_batch_equals_one_at_a_time_and_objects_equal_the_sampled_batch(
        monkeypatch: pytest.MonkeyPatch, rows_per_batch: int | None) -> None:
    """One batch, or many (a sampled batch's decoded and simulated on the worker threads,
    objects decoded here, the allocator's slack raised): what one strategy at a time gives."""
    dom = tiny_domain(3, [2, 1, 2], [1.0, 1.0, 0.25])
    batch = StrategySampler(dom, SamplerConfig(), seed=3).sample_batch(40)
    strategies = list(batch)
    sim = StepSimulator(dom)
    if rows_per_batch is not None:
        monkeypatch.setattr(stepsim, "_ROWS_PER_BATCH", rows_per_batch)
        monkeypatch.setattr(stepsim, "_THREADS", 2)
        assert len(list(sim.decoder.batches(batch, rows_per_batch))) > 4
    together = sim.simulate(batch)
    objects = StepSimulator(dom).simulate(strategies)
    alone = np.concatenate([StepSimulator(dom).simulate([s]) for s in strategies])
    for name, _ in TERMS:
        np.testing.assert_allclose(together[name], alone[name], rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(objects[name], alone[name], rtol=1e-9, atol=1e-15)
    assert (together["step_s"] > 0).all() and np.isfinite(together["step_s"]).all()
    assert len(set(np.round(together["step_s"], 12))) > 1


def test_fallback_without_profile_or_calibration() -> None:
    dom = tiny_domain(2)
    out = StepSimulator(dom).simulate(tiny_strategies(dom, 5))
    assert (out["compute_s"] > 0).all() and (out["step_s"] >= out["compute_s"]).all()
    # slower NICs make no strategy faster
    slow = StepSimulator(tiny_domain(2, bandwidths=[0.1, 0.1])).simulate(tiny_strategies(dom, 5))
    assert (slow["step_s"] >= out["step_s"]).all()
    assert (slow["step_s"] > out["step_s"]).any()


def test_shared_host_compute_slowdown_from_the_config() -> None:
    dom = tiny_domain(4)
    s = tiny_strategies(dom, 1)
    alone = StepSimulator(dom).simulate(s)[0]
    shared = StepSimulator(dom, config=StepSimConfig(host_processes=4, host_cores=2)).simulate(s)[0]
    assert shared["compute_s"] == pytest.approx(2 * alone["compute_s"])


def test_invalid_strategy_raises_the_validator_report() -> None:
    sim = _sim([1000, 1000], [0.2, 0.05])
    with pytest.raises(StrategyValidationError):
        sim.simulate([_strategy([AllReduce(), PS(destination="nowhere")])])


def test_calibration_must_cover_every_node() -> None:
    g = _graph([1000])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(2))
    other = Domain(name="e", model=g, cluster=tiny_cluster(1))
    with pytest.raises(ConfigError, match="not calibrated"):
        StepSimulator(dom, calibration=_calibration(other)).simulate(
            [_strategy([AllReduce()])])


def test_stepsim_ranker_scores_simulated_seconds() -> None:
    dom = tiny_domain(2)
    strategies = tiny_strategies(dom, 6)
    sim = Simulator(STEPSIM)
    assert sim.fitted and sim.state_dict() == {}
    np.testing.assert_allclose(sim.score(strategies, dom),
                               StepSimulator(dom).simulate(strategies)["step_s"])
    again = Simulator.from_config(sim.config())
    np.testing.assert_allclose(again.score(strategies, dom), sim.score(strategies, dom))


def test_buckets_follow_the_runtime_plan() -> None:
    from autosync_transfer.runtime.plan import make_plan

    dom = tiny_domain(3, [2, 1, 2], [1.0, 1.0, 0.25])
    strategies = tiny_strategies(dom, 30, seed=5)
    out = StepSimulator(dom).simulate(strategies)
    for s, rec in zip(strategies, out):
        plan = make_plan(s, dom.model, dom.cluster)
        assert rec["ar_buckets"] == len(plan.buckets)
        if all(b.compressor != "powersgd" for b in plan.buckets):
            assert rec["ar_wire_bytes"] == pytest.approx(sum(b.wire_bytes for b in plan.buckets))


def test_a_sparse_call_cost_charges_row_sparse_ps_pieces_only() -> None:
    """``sparse_call_s``: every row-sparse push and pull costs that much more on the nodes that
    make or serve it; dense pieces, and a config that leaves it 0, are unchanged."""
    g = ModelGraph(name="g", variables=(
        Variable(name="v0", shape=(1000, 16), sparse=True, order=0),
        Variable(name="v1", shape=(1000,), order=1)))
    dense = _graph([16000, 1000])
    for graph, sparse in ((g, True), (dense, False)):
        dom = Domain(name="d", model=graph, cluster=tiny_cluster(2, 2))
        prof, cal = _profile(graph, [0.2, 0.1]), _calibration(dom)
        strat = _strategy([PS(destination="n0"), PS(destination="n1")])
        base = StepSimulator(dom, prof, cal).simulate([strat])
        assert base == StepSimulator(dom, prof, cal, StepSimConfig(sparse_call_s=0.0)
                                     ).simulate([strat])
        charged = StepSimulator(dom, prof, cal, StepSimConfig(sparse_call_s=1e-3)
                                ).simulate([strat])
        if sparse:  # every worker pushes and pulls the sparse piece: 2 calls and more a node
            assert charged["ps_s"][0] - base["ps_s"][0] >= 2e-3
            assert charged["step_s"][0] > base["step_s"][0]
        else:
            assert charged == base


def test_a_ring_streams_at_link_rate_and_ps_pieces_wait_for_a_core() -> None:
    """On a host with more compute processes than cores, the PS threads' per-piece work runs
    ``slowdown`` times slower and their bytes do not (unless ``wire_shares_cores``); an
    all-reduce ring is not slowed (unless ``ring_shares_cores``)."""
    MB = 1 << 20
    g = _graph([4 * MB, 4 * MB])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(2, 1))
    prof = _profile(g, [0.2, 0.05])
    cal = _calibration(dom, slowdown={1: 1.0, 2: 2.0}).model_copy(update={"ps_piece_s": 1e-3})
    ar = _strategy([AllReduce(), AllReduce()])
    ps = _strategy([PS(destination="n0"), PS(destination="n0")])
    host = {"host_processes": 2, "host_cores": 1}  # both workers on one core
    alone = StepSimulator(dom, prof, cal, StepSimConfig(**host),
                          variant=StepSimVariant(network_shares_cores=False))
    shared = StepSimulator(dom, prof, cal, StepSimConfig(**host))
    older = StepSimulator(dom, prof, cal, StepSimConfig(**host),
                          variant=StepSimVariant(ring_shares_cores=True))
    wire = StepSimulator(dom, prof, cal, StepSimConfig(**host),
                         variant=StepSimVariant(wire_shares_cores=True))
    a, s, o, w = (sim.simulate([ar, ps]) for sim in (alone, shared, older, wire))
    assert a["ar_s"][0] > 0 and s["ar_s"][0] == pytest.approx(a["ar_s"][0])
    assert o["ar_s"][0] == pytest.approx(2 * a["ar_s"][0])
    # the server, per piece: the push in and the answer out at 1e9 B/s, then its piece cost
    wire_s = 2 * (2 * 4 * MB * 4 / 1e9)
    assert a["ps_s"][1] == pytest.approx(wire_s + 2 * 1e-3)
    assert s["ps_s"][1] == pytest.approx(wire_s + 2 * 2e-3)
    assert w["ps_s"][1] == pytest.approx(2 * wire_s + 2 * 2e-3)
    assert o["ps_s"][1] == pytest.approx(s["ps_s"][1])


def _queue_by_events(work: list[float], release: list[float], until: float,
                     scale: float) -> float:
    """One work-conserving queue served ``scale`` times slower until ``until``, job by job."""
    t = 0.0
    for w, r in zip(work, release):
        if w <= 0:
            continue
        t = max(t, r)
        if t < until:
            room = (until - t) / scale  # work it can do before the knee
            if w <= room:
                t += w * scale
                continue
            w, t = w - room, until
        t += w
    return t


@given(st.lists(st.tuples(st.floats(0, 0.2), st.floats(0, 1.0)), min_size=1, max_size=8),
       st.floats(0.0, 1.5), st.floats(1.0, 4.0))
@settings(max_examples=60, derandomize=True, database=None, deadline=None)
def test_a_queue_slowed_until_a_time_matches_the_queue_served_job_by_job(
        jobs: list[tuple[float, float]], until: float, scale: float) -> None:
    work = [w for w, _ in jobs]
    release = sorted(r for _, r in jobs)
    end = stepsim._queue_end_slowed(np.array([work]), np.array(release), until, scale)[0]
    expected = _queue_by_events(work, release, until, scale) if any(w > 0 for w in work) else 0.0
    assert end == pytest.approx(expected, abs=1e-12)


def test_the_ar_thread_slowed_while_the_backward_pass_runs() -> None:
    """With ``ring_slowed_while_computing``, on a host with more compute processes than cores
    an all-reduce bucket launched during the backward pass progresses processes / cores times
    slower until the backward pass ends; the last bucket (after it) is not slowed, and one
    process per core changes nothing."""
    g = _graph([10 * MB, 10 * MB])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(2, 1))
    prof = _profile(g, [0.2, 0.02])  # 2 processes / core: backward ends at 2 x 0.3 = 0.6 s
    cal = _calibration(dom, slowdown={1: 1.0, 2: 2.0})
    two = _strategy([AllReduce(group=0), AllReduce(group=1)])
    one = _strategy([AllReduce(group=0), AllReduce(group=0)])
    host = {"host_processes": 2, "host_cores": 1}
    plain = StepSimulator(dom, prof, cal, StepSimConfig(**host)).simulate([two, one])
    slowed = StepSimulator(dom, prof, cal, StepSimConfig(**host),
                           variant=StepSimVariant(ring_slowed_while_computing=True)).simulate([two, one])
    # v1's 40 ms bucket launches at 2 x (0.1 + 0.02) = 0.24 s and, at half rate, ends at
    # 0.32 s (not 0.28), still before v0's bucket launches at 0.6 s: the step is unchanged
    assert slowed["sync_end_s"] == pytest.approx(plain["sync_end_s"])
    # a bucket still running when the backward pass ends: 200 ms of work from 0.24 s, 180 ms
    # done by 0.6 s at half rate, the remaining 20 ms at full rate, then v0's 40 ms
    big = _graph([10 * MB, 50 * MB])
    bdom = Domain(name="d", model=big, cluster=tiny_cluster(2, 1))
    bprof = _profile(big, [0.2, 0.02])
    bcal = _calibration(bdom, slowdown={1: 1.0, 2: 2.0})
    b_plain = StepSimulator(bdom, bprof, bcal, StepSimConfig(**host)).simulate([two])[0]
    b_slow = StepSimulator(bdom, bprof, bcal, StepSimConfig(**host),
                           variant=StepSimVariant(ring_slowed_while_computing=True)).simulate([two])[0]
    assert b_plain["sync_end_s"] == pytest.approx(0.6 + 0.04)  # 0.24 + 0.2 ends before 0.6
    assert b_slow["sync_end_s"] == pytest.approx(0.6 + 0.02 + 0.04)
    # one process per core: nothing is slowed
    alone = {"host_processes": 1, "host_cores": 1}
    a0 = StepSimulator(bdom, bprof, bcal, StepSimConfig(**alone)).simulate([two])[0]
    a1 = StepSimulator(bdom, bprof, bcal, StepSimConfig(**alone),
                       variant=StepSimVariant(ring_slowed_while_computing=True)).simulate([two])[0]
    assert a1["step_s"] == pytest.approx(a0["step_s"])


def test_a_sender_overlaps_its_piece_cost_with_its_bytes_and_a_server_adds_them() -> None:
    """n1 only sends (one push of a 4 MB piece, answered): its per-piece cost hides behind its
    8 ms of bytes; the server n0 waits for the bytes, then spends it."""
    g = _graph([MB])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(2, 1))
    cal = _calibration(dom).model_copy(update={"ps_piece_s": 5e-3})
    prof = _profile(g, [0.05])
    strategy = _strategy([PS(destination="n0")])
    overlap = StepSimulator(dom, prof, cal).simulate([strategy])[0]
    summed = StepSimulator(dom, prof, cal, StepSimConfig(),
                           variant=StepSimVariant(ps_sender_overlaps=False)).simulate([strategy])[0]
    bytes_s = 2 * 4 * MB / 1e9  # push in, then the answer out
    assert overlap["ps_s"] == pytest.approx(bytes_s + 5e-3)  # the server's
    assert overlap["sync_end_s"] == pytest.approx(0.15 + bytes_s + 5e-3)
    assert summed["sync_end_s"] == pytest.approx(overlap["sync_end_s"])
    # with a piece cost above the bytes, the sender's share is the piece cost alone
    slow = _calibration(dom).model_copy(update={"ps_piece_s": 20e-3})
    out = StepSimulator(dom, prof, slow).simulate([strategy])[0]
    assert out["sync_end_s"] == pytest.approx(0.15 + bytes_s + 20e-3)


def test_pieces_of_different_servers_wait_for_the_previous_server() -> None:
    """Four nodes of one worker; v1 (ready at 0.11 s) on n0, v0 (ready at 0.12 s) on n1, 40 MB
    each (40 ms at a NIC). Every node's NIC alone would be done at 0.43 s (a server: three
    pushes in, three answers out; a sender: its push and its answer); but n0 pushes v0 only
    once v1 is complete with its answers (0.35 s), so v0 ends one push and its own answers
    later."""
    g = _graph([10 * MB, 10 * MB])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(4, 1))
    sim = StepSimulator(dom, _profile(g, [0.02, 0.01]), _calibration(dom))
    spread = _strategy([PS(destination="n1"), PS(destination="n0")])
    out = sim.simulate([spread])[0]
    piece = 40 * MB / 1e9
    v1_done = 0.11 + 6 * piece
    assert out["sync_end_s"] == pytest.approx(v1_done + piece + 3 * piece)
    assert out["ps_s"] == pytest.approx(8 * piece)  # the busiest NIC alone
    queues = StepSimulator(dom, sim.profile, sim.calibration, StepSimConfig(),
                           variant=StepSimVariant(ps_chain=False))
    assert queues.simulate([spread])["sync_end_s"][0] == pytest.approx(0.11 + 8 * piece)


def test_a_row_sparse_exchange_is_a_chain_of_dependent_steps() -> None:
    """One row-sparse piece on n0, two nodes of one worker: the worker searches its gradient and
    pushes; the server copies its own, waits for the push (header hop + payload round trip +
    bytes), averages, searches the average and copies it back; the worker then waits for the
    answer's round trip, zero-fills the result and copies it into its gradient."""
    G, C, S, L = 0.01, 0.004, 0.002, 0.001  # search, copy, scatter, one-way latency
    g = ModelGraph(name="g", batch_size=8, seq_len=4, variables=(
        Variable(name="v0", shape=(1000, 16), sparse=True, order=0),))
    dom = Domain(name="d", model=g, cluster=tiny_cluster(2, 1))
    const = {a: ActionCost(action=a, elements=(1,), seconds=(x,))  # type: ignore[arg-type]
             for a, x in (("sparse_gather", G), ("copy", C), ("sparse_scatter", S))}
    prof = _profile(g, [0.2], actions=const)
    cal = _calibration(dom, gbps=8.0, latency_s=L)
    wire = 8 * 4 * (16 * 4 + StepSimConfig().sparse_index_bytes) / 1e9  # touched rows, 1 GB/s
    release = 0.1 + 0.2
    done = release + max(C, G + wire + 3 * L) + 2 * C + G
    expected = done + (2 * L + S + C) + 0.05
    one = StepSimulator(dom, prof, cal).simulate([_strategy([PS(destination="n0")])])
    assert one["step_s"][0] == pytest.approx(expected, rel=1e-9)
    # two shards on the same server: the worker pushes the second while the server works on
    # the first, but the server posts the second's receives only when its thread reaches it:
    # its own copy, then the second's hops and bytes, average, search and copy back (the first
    # answer's completion hides under it)
    two = Strategy(id="p", nodes=(VarConfig(var_name="v0", partition=Partition(
        axis=0, shards=2, synchronizers=(PS(destination="n0"), PS(destination="n0")))),))
    both = StepSimulator(dom, prof, cal).simulate([two])
    half = wire / 2  # each shard carries half the touched rows
    done = release + max(C, G) + half + 3 * L + 2 * C + G
    done2 = done + C + half + 3 * L + 2 * C + G
    assert both["step_s"][0] == pytest.approx(done2 + (2 * L + S + C) + 0.05, rel=1e-9)


def test_replaying_the_calibration_gives_back_its_row_sparse_piece() -> None:
    """The calibration times the executor on many row-sparse tables of one touched row, all on
    the first node's server, every rank of the cluster running it on the shared host; the
    simulator replaying that exchange charges each further piece what was measured, whatever
    the host's time slicing (3 or 6 processes on 2 cores) and the cluster's shape."""
    piece = 2e-3
    for nodes, workers in ((3, 1), (2, 2), (3, 2)):
        cluster = tiny_cluster(nodes, workers)

        def step(tables: int) -> float:
            g = ModelGraph(name="pieces", variables=tuple(
                Variable(name=f"t{i}", shape=(64, 16), sparse=True, order=i)
                for i in range(tables)))
            dom = Domain(name="d", model=g, cluster=cluster)
            cal = _calibration(dom, latency_s=5e-5).model_copy(
                update={"ps_sparse_piece_s": piece})
            host = StepSimConfig(host_processes=cluster.world_size, host_cores=2)
            strategy = Strategy(id="s", nodes=tuple(
                VarConfig(var_name=v.name, synchronizer=PS(destination="n0"))
                for v in g.variables))
            return float(StepSimulator(dom, None, cal, host).simulate([strategy])["step_s"][0])

        assert (step(32) - step(16)) / 16 == pytest.approx(piece, rel=0.02), (nodes, workers)


def test_one_rank_pays_no_row_sparse_hops() -> None:
    """A cluster of one worker sends no message: a row-sparse piece costs its copies and
    searches only, with or without a calibrated piece."""
    g = ModelGraph(name="g", variables=tuple(
        Variable(name=f"t{i}", shape=(64, 16), sparse=True, order=i) for i in range(8)))
    dom = Domain(name="d", model=g, cluster=tiny_cluster(1, 1))
    strategy = Strategy(id="s", nodes=tuple(
        VarConfig(var_name=v.name, synchronizer=PS(destination="n0")) for v in g.variables))
    prof = _profile(g, [0.2] * 8)
    plain = _calibration(dom, latency_s=1e-3)
    pieces = plain.model_copy(update={"ps_sparse_piece_s": 5e-3})
    for cal in (None, plain, pieces):
        out = StepSimulator(dom, prof, cal).simulate([strategy])[0]
        assert out["sync_end_s"] - 0.3 < 1e-4, cal


def test_the_launch_order_is_the_executors_reverse_forward_order() -> None:
    """The profile measured v0's gradient ready before v1's, but the executor launches in
    reverse forward order and its AR thread waits for each task in turn: v1's 40 MB bucket
    first (ready at 0.15 s), then v0's small one, which cannot go first."""
    g = _graph([10_000, 10 * MB])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(2, 1))
    sim = StepSimulator(dom, _profile(g, [0.01, 0.05]), _calibration(dom))
    out = sim.simulate([_strategy([AllReduce(group=0), AllReduce(group=1)])])[0]
    ring = 40 * MB / 1e9  # 2 (W - 1) / W = 1 of the bytes at 1e9 B/s
    assert out["sync_end_s"] == pytest.approx(0.15 + ring + 40_000 / 1e9)


def test_a_pieces_pushes_cross_into_its_server_after_the_piece_before() -> None:
    """Four nodes of one worker, in launch order: v2 (40 MB) on n0, v1 (tiny) on n1, v0 (40 MB)
    on n2, all ready at 0.11 s. v1 waits for n0's answers of v2 (n0 pushes it after them); v0's
    pushes cross into n2 only after v1 is gathered (``ps_push_after_gather=1``: three pushes),
    or, arriving early (0), only n1's push after its tiny answers is left."""
    g = _graph([10 * MB, 1, 10 * MB])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(4, 1))
    prof = _profile(g, [0.01, 0.01, 0.01])
    cal = _calibration(dom)
    spread = _strategy([PS(destination="n2"), PS(destination="n1"), PS(destination="n0")])
    piece = 40 * MB / 1e9
    tiny = 4 * 3 / 1e9  # v1: 4 bytes in from three nodes (and out)
    v2_gathered = 0.11 + 3 * piece
    v1_gathered = v2_gathered + 3 * piece + 4 / 1e9  # n0's answers of v2, then its push
    late = StepSimulator(dom, prof, cal).simulate([spread])[0]
    assert late["sync_end_s"] == pytest.approx(v1_gathered + 3 * piece + 3 * piece)
    early = StepSimulator(dom, prof, cal, StepSimConfig(),
                          variant=StepSimVariant(ps_push_after_gather=0.0)).simulate([spread])[0]
    assert early["sync_end_s"] == pytest.approx(v1_gathered + tiny + piece + 3 * piece)


def test_ps_work_waits_for_time_slices_and_compute_for_the_measured_slowdown() -> None:
    """Four processes on two cores with a measured compute slowdown of 2.3 (shared caches on
    top of the time slicing): compute runs 2.3x, the PS threads' per-piece work 2x (processes /
    cores), or 2.3x with ``comm_time_slicing=False``."""
    g = _graph([1, 1])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(4, 1))
    prof = _profile(g, [0.2, 0.1])
    cal = _calibration(dom, slowdown={1: 1.0, 4: 2.3}).model_copy(update={"ps_piece_s": 1e-2})
    strategy = _strategy([PS(destination="n0"), PS(destination="n0")])
    host = {"host_processes": 4, "host_cores": 2}
    sliced = StepSimulator(dom, prof, cal, StepSimConfig(**host)).simulate([strategy])[0]
    measured = StepSimulator(dom, prof, cal, StepSimConfig(**host),
                             variant=StepSimVariant(comm_time_slicing=False)).simulate([strategy])[0]
    assert sliced["compute_s"] == pytest.approx(2.3 * 0.35)
    assert measured["compute_s"] == pytest.approx(2.3 * 0.35)
    tiny = 2 * 3 * 4 / 1e9  # a 4-byte piece's pushes in and answers out on the server's NIC
    assert sliced["ps_s"] == pytest.approx(2 * (2.0 * 1e-2 + tiny))
    assert measured["ps_s"] == pytest.approx(2 * (2.3 * 1e-2 + tiny))


def test_all_reduces_launched_between_ps_pieces_slow_the_chain_by_a_flows_share() -> None:
    """Four nodes of one worker, in launch order: v2 (40 MB) on n0's server, v1 (40 MB)
    all-reduced, v0 (40 MB) on n1's server, all ready at 0.11 s. v0 follows v2 (n0's answers,
    then its push: 4 pieces' time); v1's ring (60 ms on every NIC) shares the NICs with v0's
    three pushes: v0 takes a third longer at most, here 4/3 pieces' time."""
    g = _graph([10 * MB, 10 * MB, 10 * MB])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(4, 1))
    prof = _profile(g, [0.01, 0.01, 0.01])
    cal = _calibration(dom)
    mixed = _strategy([PS(destination="n1"), AllReduce(), PS(destination="n0")])
    piece = 40 * MB / 1e9
    v2_gathered = 0.11 + 3 * piece
    alone = StepSimulator(dom, prof, cal, StepSimConfig(),
                          variant=StepSimVariant(ps_chain_shares_nic=False)).simulate([mixed])[0]
    assert alone["sync_end_s"] == pytest.approx(v2_gathered + 4 * piece + 3 * piece)
    shared = StepSimulator(dom, prof, cal).simulate([mixed])[0]
    assert shared["sync_end_s"] == pytest.approx(v2_gathered + 4 * piece * 4 / 3 + 3 * piece)
    # a ring shorter than the share delays the chain by the ring's own time
    small = _strategy([PS(destination="n1"), AllReduce(), PS(destination="n0")])
    g2 = _graph([10 * MB, MB, 10 * MB])
    dom2 = Domain(name="d", model=g2, cluster=tiny_cluster(4, 1))
    out = StepSimulator(dom2, _profile(g2, [0.01, 0.01, 0.01]), _calibration(dom2)
                        ).simulate([small])[0]
    ring = 1.5 * 4 * MB / 1e9
    assert out["sync_end_s"] == pytest.approx(v2_gathered + 4 * piece + ring + 3 * piece)


def test_action_cost_interpolates_extrapolates_and_is_zero_for_empty_tensors() -> None:
    cost = ActionCost(action="copy", elements=(10, 20), seconds=(1.0, 3.0))
    n = np.array([0, 5, 10, 15, 20, 30], dtype=np.float64)
    # below the first point: its time; beyond the last: the last segment's slope
    np.testing.assert_allclose(cost.at(n), [0.0, 1.0, 1.0, 2.0, 3.0, 5.0])
    assert float(cost.at(30.0)) == pytest.approx(5.0) and float(cost.at(0)) == 0.0
    falling = ActionCost(action="copy", elements=(10, 20), seconds=(3.0, 1.0))
    np.testing.assert_allclose(falling.at(np.array([40.0])), [1.0])  # never a negative slope
    assert cost.at(np.zeros(0)).shape == (0,)


# ---- any cluster shape, any graph: the physics' invariants ---------------------------------------


@st.composite
def _simulated_cases(draw: st.DrawFn) -> dict[str, object]:
    """A cluster (1-5 nodes of 1-4 workers), a graph of dense and row-sparse variables, and the
    inputs of a calibrated simulation: per-node rates, gradient-ready times, measured piece costs
    (or none: the calibrations written before they were measured)."""
    cluster = draw(hs.clusters(max_nodes=5, max_workers=4))
    variables = []
    for i in range(draw(st.integers(1, 8))):
        shape = tuple(draw(st.integers(1, 300)) for _ in range(draw(st.integers(1, 3))))
        variables.append(Variable(name=f"v{i}", shape=shape, order=i,
                                  sparse=len(shape) == 2 and draw(st.booleans())))
    graph = ModelGraph(name="drawn", variables=tuple(variables))
    return {
        "domain": Domain(name="drawn-x", model=graph, cluster=cluster),
        "gbps": [draw(st.sampled_from([0.25, 1.0, 10.0])) for _ in cluster.nodes],
        "ready": sorted((draw(st.floats(0.0, 0.1)) for _ in variables), reverse=True),
        "pieces": (draw(st.sampled_from([None, 1e-3])), draw(st.sampled_from([None, 3e-3]))),
        "shared_host": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**20)),
    }


def _drawn_inputs(case: dict[str, object], *, gbps_scale: float = 1.0, latency_s: float = 1e-4,
                  action_scale: float = 1.0) -> tuple[WorkloadProfile, ClusterCalibration]:
    dom: Domain = case["domain"]  # type: ignore[assignment]
    acts = {a: ActionCost(action=a, elements=(1, 1000, 10**6),  # type: ignore[arg-type]
                          seconds=(0.0, 1e-6 * action_scale, 1e-3 * action_scale))
            for a in ACTIONS}
    profile = WorkloadProfile(
        workload="drawn", fingerprint=dom.model.fingerprint, worker_type="cpu", batch_size=4,
        forward_s=0.05, backward_s=0.1, optimizer_s=0.01,
        ready_s={v.name: r for v, r in zip(dom.model.variables, case["ready"])},  # type: ignore
        actions=acts)
    piece, sparse_piece = case["pieces"]  # type: ignore[misc]
    calibration = ClusterCalibration(
        cluster=dom.cluster.name, fingerprint=dom.cluster.fingerprint, launcher="test",
        nodes=tuple(NodeCalibration(name=n.name, bandwidth_gbps=g * gbps_scale,
                                    latency_s=latency_s)
                    for n, g in zip(dom.cluster.nodes, case["gbps"])),  # type: ignore[arg-type]
        intra_bandwidth_gbps=40.0 * gbps_scale, collective_latency_s=latency_s,
        compute_slowdown={1: 1.0, 2: 1.3, 4: 2.2}, host_cores=2, ps_piece_s=piece,
        ps_sparse_piece_s=sparse_piece)
    return profile, calibration


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_simulated_cases())
def test_any_cluster_and_graph_gives_finite_steps_that_slower_physics_never_shortens(
        case: dict[str, object]) -> None:
    """On any cluster shape and graph, with nominal or calibrated physics, every term is finite
    and non-negative, the step covers the compute, and a batch gives what one strategy at a time
    gives; with calibrated physics, slower NICs, longer latencies, costlier synchronization
    actions or an AR thread slowed during the backward pass make no strategy faster."""
    dom: Domain = case["domain"]  # type: ignore[assignment]
    batch = StrategySampler(dom, SamplerConfig(), seed=case["seed"]).sample_batch(8)  # type: ignore
    world = sum(n.workers for n in dom.cluster.nodes)
    config = (StepSimConfig(host_processes=world, host_cores=2) if case["shared_host"]
              else StepSimConfig())
    profile, calibration = _drawn_inputs(case)
    for inputs in ((None, None), (profile, calibration)):
        out = StepSimulator(dom, *inputs, config).simulate(batch)  # the calibrated one last
        alone = np.concatenate([StepSimulator(dom, *inputs, config).simulate([s])
                                for s in batch])
        for name, _ in TERMS:
            assert np.isfinite(out[name]).all() and (out[name] >= 0).all(), name
            np.testing.assert_allclose(out[name], alone[name], rtol=1e-9, atol=1e-12)
        assert (out["step_s"] > 0).all() and (out["step_s"] >= out["compute_s"] * (1 - 1e-12)).all()
    base = out["step_s"]
    for slower in (_drawn_inputs(case, gbps_scale=0.25), _drawn_inputs(case, latency_s=1e-2),
                   _drawn_inputs(case, action_scale=10.0)):
        step = StepSimulator(dom, *slower, config).simulate(batch)["step_s"]
        assert (step >= base * (1 - 1e-9)).all(), (step, base)
    # an AR thread slowed while the backward pass runs never ends a step sooner
    slowed = StepSimVariant(ring_slowed_while_computing=True)
    step = StepSimulator(dom, profile, calibration, config,
                         variant=slowed).simulate(batch)["step_s"]
    assert (step >= base * (1 - 1e-9)).all(), (step, base)


def test_every_collective_takes_the_calibrated_time_from_the_ps_threads_after_its_launch() -> None:
    """Two tiny PS pieces on n0 (0.2 s each to every PS thread) and two tiny all-reduced
    variables, all ready at 0.15 s. Launched in reverse forward order, the all-reduces (v2, v3)
    go first: each collective delays the PS threads by ``ar_collective_s`` (10 ms), so the
    step grows by 10 ms per bucket; a collective launched after the PS pieces delays nothing,
    and without the calibration's figure (or with the variant off) buckets cost the PS
    threads nothing."""
    g = _graph([1, 1, 1, 1])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(2, 1))
    prof = _profile(g, [0.05] * 4)
    cal = _calibration(dom).model_copy(update={"ps_piece_s": 0.2, "ar_collective_s": 0.01})
    ps = PS(destination="n0")
    one = _strategy([ps, ps, AllReduce(group=0), AllReduce(group=0)])
    two = _strategy([ps, ps, AllReduce(group=0), AllReduce(group=1)])
    late = _strategy([AllReduce(group=0), ps, ps, AllReduce(group=1)])
    out = StepSimulator(dom, prof, cal).simulate([one, two, late])
    ps_end = 0.15 + 2 * 0.2
    assert out["step_s"][0] == pytest.approx(ps_end + 0.01 + 0.05)
    assert out["step_s"][1] == pytest.approx(ps_end + 0.02 + 0.05)
    assert out["step_s"][2] == pytest.approx(ps_end + 0.01 + 0.05)  # v0's bucket comes last
    for unmeasured, variant in ((cal.model_copy(update={"ar_collective_s": None}), None),
                                (cal, StepSimVariant(collectives_take_ps_cpu=False))):
        flat = StepSimulator(dom, prof, unmeasured, variant=variant).simulate([one, two, late])
        assert flat["step_s"] == pytest.approx([ps_end + 0.05] * 3)
    # no PS piece: nothing to delay
    ar = _strategy([AllReduce(group=i) for i in range(4)])
    assert StepSimulator(dom, prof, cal).simulate([ar])[0]["step_s"] == pytest.approx(0.35)


def test_a_rings_cpu_delays_the_ps_threads_only_where_processes_outnumber_cores() -> None:
    """Two tiny PS pieces on n0 bind the step; one all-reduce bucket of 2,000 elements,
    launched before them, costs every rank ``ar_cpu_s_per_element`` (float32) or
    ``ar_fp16_cpu_s_per_element`` (an fp16 bucket's elements) of CPU. Four processes on two
    cores: the PS threads are delayed by processes / cores times one rank's CPU; on four cores,
    or without the calibration's figures, or with the variant off, not at all."""
    g = _graph([1, 1, 1000, 1000])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(2, 2))
    prof = _profile(g, [0.05] * 4)
    cal = _calibration(dom, slowdown={1: 1.0, 4: 2.0}).model_copy(update={
        "ps_piece_s": 0.2, "ar_cpu_s_per_element": 5e-6, "ar_fp16_cpu_s_per_element": 8e-6,
        "host_cores": 2})
    ps = PS(destination="n0")
    plain = _strategy([ps, ps, AllReduce(group=0), AllReduce(group=0)])
    fp16 = _strategy([ps, ps, AllReduce(group=0, compressor="fp16"),
                      AllReduce(group=0, compressor="fp16")])
    shared = StepSimConfig(host_processes=4, host_cores=2)
    base = StepSimulator(dom, prof, cal.model_copy(update={
        "ar_cpu_s_per_element": None, "ar_fp16_cpu_s_per_element": None}),
        shared).simulate([plain, fp16])["step_s"]
    out = StepSimulator(dom, prof, cal, shared).simulate([plain, fp16])["step_s"]
    # (to within the bucket's 8 kB on the wire, which ends the baseline's sync 12 us later)
    assert out[0] - base[0] == pytest.approx(2000 * 5e-6 * 4 / 2, abs=1e-4)
    assert out[1] - base[1] == pytest.approx(2000 * 8e-6 * 4 / 2, abs=1e-4)
    off = StepSimulator(dom, prof, cal, shared, variant=StepSimVariant(
        ring_cpu_takes_ps_cpu=False)).simulate([plain, fp16])["step_s"]
    np.testing.assert_allclose(off, base, rtol=1e-12)
    roomy = StepSimConfig(host_processes=4, host_cores=4)
    np.testing.assert_allclose(
        StepSimulator(dom, prof, cal, roomy).simulate([plain, fp16])["step_s"],
        StepSimulator(dom, prof, cal.model_copy(update={"ar_cpu_s_per_element": None,
                                                        "ar_fp16_cpu_s_per_element": None}),
                      roomy).simulate([plain, fp16])["step_s"], rtol=1e-12)
    # no PS piece to delay: the rings' CPU (every bucket's, 2,002 elements) only adds to the
    # host's total CPU: four processes' 0.35 s of compute on two cores, plus 4 / 2 x the ring's
    ar = _strategy([AllReduce(group=i) for i in range(4)])
    assert StepSimulator(dom, prof, cal, shared).simulate([ar])[0]["step_s"] == pytest.approx(
        4 * 0.35 / 2 + 2002 * 5e-6 * 4 / 2, abs=1e-4)


def test_ps_piece_cost_sliced_only_while_the_backward_pass_runs_with_the_variant() -> None:
    """Four processes on two cores; two tiny PS pieces on n0 (10 ms each per the calibration,
    measured with every rank's PS thread on this host). Backward ends at 0.6 s. Pieces ready
    only at its end pay the calibrated cost with ``ps_sliced_while_computing`` (2x without);
    pieces ready early, which start while it runs, pay 2x either way."""
    g = _graph([1, 1])
    dom = Domain(name="d", model=g, cluster=tiny_cluster(4, 1))
    cal = _calibration(dom, slowdown={1: 1.0, 4: 2.0}).model_copy(update={"ps_piece_s": 1e-2})
    strategy = _strategy([PS(destination="n0"), PS(destination="n0")])
    host = StepSimConfig(host_processes=4, host_cores=2)
    on = StepSimVariant(ps_sliced_while_computing=True)
    tiny = 2 * 3 * 4 / 1e9
    late, early = _profile(g, [0.2, 0.2]), _profile(g, [0.0, 0.0])
    off_late = StepSimulator(dom, late, cal, host).simulate([strategy])[0]
    on_late = StepSimulator(dom, late, cal, host, variant=on).simulate([strategy])[0]
    assert off_late["ps_s"] == pytest.approx(2 * (2.0 * 1e-2 + tiny))
    assert on_late["ps_s"] == pytest.approx(2 * (1e-2 + tiny))
    assert off_late["sync_end_s"] - on_late["sync_end_s"] == pytest.approx(2 * 1e-2, abs=1e-6)
    off_early = StepSimulator(dom, early, cal, host).simulate([strategy])[0]
    on_early = StepSimulator(dom, early, cal, host, variant=on).simulate([strategy])[0]
    assert on_early["ps_s"] == pytest.approx(off_early["ps_s"])
    assert on_early["sync_end_s"] == pytest.approx(off_early["sync_end_s"])
    # one process per core: nothing is sliced, the variant changes nothing
    roomy = StepSimConfig(host_processes=4, host_cores=4)
    assert (StepSimulator(dom, late, cal, roomy, variant=on).simulate([strategy])[0]["step_s"]
            == pytest.approx(StepSimulator(dom, late, cal, roomy).simulate([strategy])[0]["step_s"]))
