"""Execute a sync plan for real on torch.distributed.

Every parameter's gradient is hooked (post-accumulate hooks); as soon as the gradients of a plan
task are ready, communication starts, so synchronization overlaps the rest of backward as DDP
does. Two communication threads per rank walk the plan's order: one launches the all-reduce
buckets, the other runs the parameter-server exchanges. Walking one common order keeps the
collectives in the same order everywhere and rules out deadlocks among the point-to-point
exchanges; keeping them on separate threads means a rank blocked while aggregating as a server
never delays its all-reduce launches, which every other rank is waiting for:

- all-reduce buckets: one flat buffer per bucket, ``all_reduce`` on the collective group;
  compressors ``fp16``, ``fp16_ef`` (error feedback) and ``powersgd`` (rank r, with error feedback
  and warm-started Q);
- parameter servers: point-to-point push of the gradient piece (dense, or only the touched rows
  of a sparse embedding) to the server rank, aggregation there, the average sent back; with local
  replication a node's first worker aggregates its node first and fans the result out.

After :meth:`StrategyExecutor.finish` every rank holds the same averaged gradient.

When to synchronize, and what to do with a parameter that got no gradient, follow torch DDP
(:class:`~autosync_transfer.runtime.ddp.DistributedModel` sets them):

- ``sync_enabled = False`` (DDP's ``no_sync``): the hooks only record which parameters got a
  gradient; the gradients accumulate locally and the next synchronizing backward (or
  :meth:`~StrategyExecutor.finish`) averages the accumulated sum;
- ``deferred = True``: every backward accumulates, and one explicit :meth:`finish` (e.g. before
  the optimizer step) synchronizes once, however many backward passes there were;
- ``unused``: :data:`UNUSED_SYNC` (synchronize zeros: every planned message is sent, what a
  trial measures), :data:`UNUSED_ERROR` (DDP's default: a planned parameter without a gradient
  since the last synchronization is an error) or :data:`UNUSED_FIND` (DDP's
  ``find_unused_parameters=True``: the ranks agree which parameters got a gradient anywhere;
  those that did on some ranks are averaged with zeros from the others, those that did on no
  rank keep their ``grad`` untouched — ``None`` stays ``None`` — and send nothing when a whole
  task is unused).

Lifetime: the communication threads live for one synchronization and hold the executor only
weakly; hooks do too. Dropping the executor (``del model``), :meth:`close`, the interpreter's exit
(``atexit``) or the next forward after a step that raised stop them and join them (with a
timeout), remove the hooks and drop every reference to process groups and in-flight work, so
nothing of torch.distributed is left to be torn down during interpreter finalization. Before
communicating, the executor checks that its process groups still exist (a clear error after
``destroy_process_group()``, not a crash).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from autosync_transfer.errors import ConfigError, NotFittedError
from autosync_transfer.runtime.plan import ArBucket, Piece, PsItem, SyncPlan

__all__ = ["CommGroups", "StrategyExecutor", "UNUSED_SYNC", "UNUSED_ERROR", "UNUSED_FIND",
           "group_alive"]

log = logging.getLogger(__name__)

# message kinds, part of p2p tags (tag = item * _TAGS + kind)
_PUSH, _PULL, _HDR_PUSH, _HDR_PULL, _IDX_PUSH, _IDX_PULL = range(6)
_TAGS = 8

#: a parameter without a gradient synchronizes zeros (every planned message is sent)
UNUSED_SYNC = "sync"
#: a parameter without a gradient since the last synchronization is an error (DDP's default)
UNUSED_ERROR = "error"
#: DDP's ``find_unused_parameters=True``
UNUSED_FIND = "find"
_UNUSED = (UNUSED_SYNC, UNUSED_ERROR, UNUSED_FIND)

#: seconds to wait for a communication thread when abandoning or shutting down
_JOIN_TIMEOUT_S = 10.0


def group_alive(group: Any) -> bool:
    """Whether ``group`` (a process group, or ``None`` for the default one) can still be used:
    torch.distributed is initialized and the group was not destroyed."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    if group is None:
        return True
    try:
        from torch.distributed import distributed_c10d as c10d

        return group in c10d._world.pg_map
    except Exception:  # a torch without the private map: trust is_initialized
        return True


@dataclass
class CommGroups:
    """Process groups used by executors: collectives and point-to-point live in separate groups
    so that their message tags can never collide. Create once per process and reuse.

    Collectives use the default backend (gloo on CPU, NCCL on GPU); parameter-server exchanges
    always use gloo on CPU copies (tagged, variable-sized messages). ``ctl`` (gloo, CPU) carries
    the small control messages issued from the training thread while the communication threads
    may be busy on ``ar`` (which parameters got a gradient, autotuning decisions)."""

    ar: Any
    ps: Any
    ctl: Any = None

    @classmethod
    def create(cls) -> CommGroups:
        if not dist.is_initialized():
            raise ConfigError("torch.distributed is not initialized; start workers through a launcher")
        ranks = list(range(dist.get_world_size()))
        return cls(ar=dist.new_group(ranks), ps=dist.new_group(ranks, backend="gloo"),
                   ctl=dist.new_group(ranks, backend="gloo"))

    def alive(self) -> bool:
        return all(group_alive(g) for g in (self.ar, self.ps, self.ctl) if g is not None)


@dataclass
class _Iteration:
    """The communication of one synchronization: its threads, readiness events and pending
    completions. Shared with the threads, which hold the executor only weakly.

    A thread runs every task whose event is set (its gradients are ready: the same tasks on
    every rank) and stops at the first task that is not ready once ``stop`` is set, so an
    abandoned synchronization leaves the ranks' collectives matched."""

    events: dict[tuple[str, int], threading.Event]
    threads: list[threading.Thread] = field(default_factory=list)
    pending: list[Callable[[], None]] = field(default_factory=list)
    #: each ready variable's gradient tensor, taken on the thread that made it ready (the
    #: communication threads never read ``param.grad``, which the training thread may reset)
    grads: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    stop: bool = False
    #: pending completions finish the communication but write no gradient
    discard: bool = False

    def stop_threads(self, timeout_s: float | None = _JOIN_TIMEOUT_S) -> bool:
        """Let the threads finish the ready tasks and end; ``True`` when all ended."""
        self.stop = True
        ok = True
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(timeout_s)
                ok = ok and not t.is_alive()
        return ok

    def abandon(self, timeout_s: float = _JOIN_TIMEOUT_S) -> bool:
        """Stop the threads and drop the pending completions (at exit, or when the executor is
        dropped); ``True`` when all threads ended."""
        ok = self.stop_threads(timeout_s)
        self.pending.clear()
        return ok


class _Lifetime:
    """What must be released when the executor goes away (no reference to the executor)."""

    def __init__(self) -> None:
        self.hooks: list[Any] = []
        self.iteration: _Iteration | None = None
        self.groups: CommGroups | None = None

    def shutdown(self) -> None:
        it, self.iteration = self.iteration, None
        if it is not None and it.threads:
            if not it.abandon():
                log.warning("a communication thread did not end within %.0f s (blocked in a "
                            "collective whose peers are gone?)", _JOIN_TIMEOUT_S)
        for h in self.hooks:
            h.remove()
        self.hooks = []
        self.groups = None


def _comm_loop(ref: weakref.ReferenceType, it: _Iteration, order: list[tuple[str, int]]) -> None:
    """Body of a communication thread: run ``order``'s tasks as they become ready."""
    try:
        for task in order:
            ev = it.events[task]
            while not ev.wait(0.05):
                if it.stop or ref() is None:
                    return
            ex = ref()
            if ex is None:
                return
            ex._run_task(task, it)
            del ex
    except BaseException as e:  # surfaced by finish()
        it.error = e


class StrategyExecutor:
    """Synchronize the gradients of ``module`` following ``plan``.

    Usage per iteration: ``loss.backward()`` (communication starts from the hooks), then
    ``executor.finish()``, then ``optimizer.step()``. Call :meth:`setup` once first. With
    ``auto_finish=True``, :meth:`finish` runs at the end of every backward pass (as DDP does).
    ``unused``: see the module docstring (:data:`UNUSED_SYNC` by default).
    """

    def __init__(self, module: torch.nn.Module, plan: SyncPlan, groups: CommGroups | None = None,
                 *, seed: int = 0, auto_finish: bool = False, unused: str = UNUSED_SYNC):
        if unused not in _UNUSED:
            raise ConfigError(f"unused must be one of {', '.join(_UNUSED)}, got {unused!r}")
        self._life = _Lifetime()
        self._finalizer = weakref.finalize(self, self._life.shutdown)
        self.module = module
        self.plan = plan
        self.groups = groups
        self.seed = seed
        #: call :meth:`finish` at the end of every backward pass (as DDP does), so that
        #: ``loss.backward()`` returns with averaged gradients
        self.auto_finish = auto_finish
        self.unused = unused
        #: ``False`` inside ``no_sync``: gradients accumulate locally
        self.sync_enabled = True
        #: ``True``: backward passes only accumulate; :meth:`finish` synchronizes
        self.deferred = False
        #: synchronizations done (every rank counts the same)
        self.syncs = 0
        self._ready = False

    @property
    def groups(self) -> CommGroups | None:
        """The process groups in use (released at :meth:`close`, when the executor is dropped,
        and at the interpreter's exit)."""
        return self._life.groups

    @groups.setter
    def groups(self, value: CommGroups | None) -> None:
        self._life.groups = value

    # -- lifecycle ------------------------------------------------------------------------------
    def setup(self) -> StrategyExecutor:
        if self._ready:
            raise ConfigError("StrategyExecutor.setup() was already called")
        if not dist.is_initialized():
            raise ConfigError("torch.distributed is not initialized; start workers through a launcher")
        if dist.get_world_size() != self.plan.world_size:
            raise ConfigError(
                f"plan is for {self.plan.world_size} ranks, process group has {dist.get_world_size()}"
            )
        if self.groups is None:
            self.groups = CommGroups.create()
        self.rank = dist.get_rank()
        self.world = self.plan.world_size
        self.params = dict(self.module.named_parameters())
        missing = [v for v in self.plan.var_tasks if v not in self.params]
        if missing:
            raise ConfigError(f"plan names variable {missing[0]!r}, which the module does not have")
        unplanned = [n for n, p in self.params.items() if p.requires_grad and n not in self.plan.var_tasks]
        if unplanned:
            raise ConfigError(f"trainable parameter {unplanned[0]!r} is not in the strategy; it would "
                              f"silently train locally")
        #: parameters whose gradients torch makes sparse (``nn.Embedding(sparse=True)``): the
        #: hook densifies the gradient (a PS piece still sends only the touched rows), the
        #: synchronized average is handed back sparse, rows that were touched somewhere
        self._sparse_grads = {
            f"{path}.weight" if path else "weight"
            for path, m in self.module.named_modules()
            if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse}
        self._broken: BaseException | None = None
        self._remaining_init: dict[tuple[str, int], int] = {}
        for b in self.plan.buckets:
            self._remaining_init[("ar", b.index)] = len({p.var for p in b.pieces})
        for it in self.plan.ps_items:
            self._remaining_init[("ps", it.index)] = 1
        self._task_vars: dict[tuple[str, int], frozenset[str]] = {}
        for name, tasks in self.plan.var_tasks.items():
            for t in tasks:
                self._task_vars[t] = self._task_vars.get(t, frozenset()) | {name}
        self._lock = threading.Lock()
        self._ef: dict[int, torch.Tensor] = {}
        self._psgd_q: dict[tuple[int, int], torch.Tensor] = {}
        self._psgd_err: dict[tuple[int, int], torch.Tensor] = {}
        self._gen = torch.Generator().manual_seed(self.seed)
        #: parameters whose hook fired while not synchronizing, since the last synchronization
        self._used_since_sync: set[str] = set()
        ref = weakref.ref(self)
        for name in self.plan.var_tasks:
            p = self.params[name]
            self._life.hooks.append(p.register_post_accumulate_grad_hook(_hook(ref, name)))
        self._reset_iteration()
        self._ready = True
        return self

    def close(self) -> None:
        """Stop any communication in flight and remove the gradient hooks (the module goes back
        to plain local training). Not needed: dropping the executor does the same."""
        self._life.shutdown()
        self._ready = False

    @property
    def in_flight(self) -> bool:
        """Whether a synchronization has started (a hook fired) and not finished."""
        return self._ready and bool(self._it.threads)

    def abandon(self) -> None:
        """Give up a synchronization that a failed step left unfinished: the tasks every rank
        had launched (their gradients were ready) complete, their results are discarded (no
        gradient is written), the rest is never sent. The executor is usable again after."""
        if not self.in_flight:
            return
        it = self._it
        try:
            if not it.stop_threads():
                raise ConfigError("a communication thread of an abandoned step is still "
                                  "blocked in a collective")
            if it.error is not None:
                raise it.error
            it.discard = True
            for fn in it.pending:
                fn()
        except BaseException as e:
            self._broken = e
        finally:
            self._used_since_sync.clear()
            self._reset_iteration()

    def _reset_iteration(self) -> None:
        self._remaining = dict(self._remaining_init)
        self._vars_seen: set[str] = set()
        self._global_unused: frozenset[str] = frozenset()
        self._it = _Iteration(events={t: threading.Event() for t in self.plan.order})
        self._life.iteration = self._it

    # -- readiness ------------------------------------------------------------------------------
    def _on_grad(self, name: str) -> None:
        if not self._ready:
            return
        if name in self._sparse_grads:
            p = self.params[name]
            if p.grad is not None and p.grad.layout != torch.strided:
                p.grad = p.grad.to_dense()
        if self.deferred or not self.sync_enabled:
            self._used_since_sync.add(name)
            return
        self._mark_ready(name)

    def _mark_ready(self, name: str, *, in_backward: bool = True) -> None:
        with self._lock:
            if name in self._vars_seen:
                return
            self._vars_seen.add(name)
            self._it.grads[name] = self.params[name].grad
            if not self._it.threads:
                self._start_threads()
                if self.auto_finish and in_backward:
                    torch.autograd.Variable._execution_engine.queue_callback(self.finish)
            for task in self.plan.var_tasks.get(name, ()):
                self._remaining[task] -= 1
                if self._remaining[task] == 0:
                    self._it.events[task].set()

    def _start_threads(self) -> None:
        if self.groups is None or not self.groups.alive():
            raise ConfigError("the process group was destroyed (destroy_process_group()); this "
                              "model cannot synchronize any more")
        ref = weakref.ref(self)
        it = self._it
        it.threads = [
            threading.Thread(target=_comm_loop, name=f"autosync-{kind}", daemon=True,
                             args=(ref, it, [t for t in self.plan.order if t[0] == kind]))
            for kind in ("ar", "ps")
        ]
        for t in it.threads:
            t.start()

    def finish(self) -> None:
        """Wait for all communication of this iteration; gradients are then averaged.

        Parameters that got no gradient since the last synchronization are handled by
        ``unused`` (see the module docstring). With ``unused`` other than :data:`UNUSED_SYNC`,
        a call when no gradient at all arrived since the last synchronization does nothing."""
        if not self._ready:
            raise NotFittedError("StrategyExecutor.setup() must be called before finish()")
        if self._broken is not None:
            raise ConfigError(f"this executor failed earlier ({self._broken}); messages of that "
                              f"iteration may still be in flight: rebuild the process group")
        if self.unused != UNUSED_SYNC and not self._vars_seen and not self._used_since_sync:
            return
        unseen = [n for n in self.plan.var_tasks if n not in self._vars_seen]
        absent = [n for n in unseen if n not in self._used_since_sync]
        if absent and self.unused == UNUSED_ERROR:
            self._drain_after_refusal()
            raise ConfigError(
                f"parameter {absent[0]!r} got no gradient since the last synchronization "
                f"({len(absent)} of {len(self.plan.var_tasks)} planned parameters did not): "
                f"pass find_unused_parameters=True to synchronize only the parameters that did, "
                f"as torch DDP does")
        if self.unused == UNUSED_FIND:
            self._global_unused = self._agree_on_unused(set(absent))
        for name in unseen:
            if name not in self._global_unused:
                p = self.params[name]
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            self._mark_ready(name, in_backward=False)
        it = self._it
        for t in it.threads:
            t.join()
        try:
            if it.error is not None:
                raise it.error
            for fn in it.pending:
                fn()
            self._resparsify()
        except BaseException as e:
            self._broken = e
            raise
        finally:
            self._used_since_sync.clear()
            self.syncs += 1
            self._reset_iteration()

    def _resparsify(self) -> None:
        """Hand sparse-gradient parameters their averaged gradient back as a sparse tensor of
        the rows that carry one (what ``SparseAdam`` and torch DDP's sparse all-reduce give)."""
        for name in self._sparse_grads:
            p = self.params.get(name)
            if p is not None and p.grad is not None and p.grad.layout == torch.strided:
                g = p.grad
                rows = torch.nonzero(g.reshape(g.shape[0], -1).abs().sum(dim=1)).flatten()
                p.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), g.index_select(0, rows),
                                                 g.shape, check_invariants=False,
                                                 is_coalesced=True)

    def _agree_on_unused(self, absent: set[str]) -> frozenset[str]:
        """Parameters that got no gradient on any rank (one small all-reduce on ``ctl``)."""
        names = list(self.plan.var_tasks)
        used = torch.tensor([0 if n in absent else 1 for n in names], dtype=torch.int32)
        group = self.groups.ctl if self.groups.ctl is not None else self.groups.ps
        dist.all_reduce(used, group=group)
        return frozenset(n for n, u in zip(names, used.tolist()) if u == 0)

    def _drain_after_refusal(self) -> None:
        """Complete what was launched, stop the rest (every rank refuses alike when the same
        parameters got no gradient), so that the executor stays usable."""
        it = self._it
        it.stop_threads(None)
        try:
            if it.error is not None:
                raise it.error
            for fn in it.pending:
                fn()
        finally:
            self._used_since_sync.clear()
            self._reset_iteration()

    # -- compressor state (checkpoints) ---------------------------------------------------------
    def compressor_state(self) -> dict[str, Any]:
        """This rank's compressor state (error-feedback residuals, PowerSGD Q and error, the
        seed generator), on CPU, keyed by plan positions: valid for the same plan only."""
        cpu = lambda t: t.detach().to("cpu", copy=True)  # noqa: E731
        if not self._ready:
            return {}
        return {
            "ef": {str(k): cpu(v) for k, v in self._ef.items()},
            "psgd_q": {f"{b}.{i}": cpu(v) for (b, i), v in self._psgd_q.items()},
            "psgd_err": {f"{b}.{i}": cpu(v) for (b, i), v in self._psgd_err.items()},
            "generator": self._gen.get_state(),
        }

    def load_compressor_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`compressor_state` (of the same plan)."""
        if not self._ready:
            raise NotFittedError("StrategyExecutor.setup() must be called before "
                                 "load_compressor_state()")
        if not state:
            return
        device = next(iter(self.params.values())).device if self.params else torch.device("cpu")
        key2 = lambda k: tuple(int(x) for x in k.split("."))  # noqa: E731
        self._ef = {int(k): v.to(device) for k, v in state.get("ef", {}).items()}
        self._psgd_q = {key2(k): v.to(device) for k, v in state.get("psgd_q", {}).items()}
        self._psgd_err = {key2(k): v.to(device) for k, v in state.get("psgd_err", {}).items()}
        if "generator" in state:
            self._gen.set_state(state["generator"])

    # -- the communication threads --------------------------------------------------------------
    def _run_task(self, task: tuple[str, int], it: _Iteration) -> None:
        if self._task_vars[task] <= self._global_unused:
            return  # no rank has a gradient for any of its variables: nothing to send
        kind, idx = task
        if kind == "ar":
            self._all_reduce(self.plan.buckets[idx], it)
        else:
            self._parameter_server(self.plan.ps_items[idx], it)

    # pieces ---------------------------------------------------------------------------------------
    def _view(self, piece: Piece, it: _Iteration) -> torch.Tensor | None:
        """The gradient (or the shard of it) of ``piece``; ``None`` for a variable that got a
        gradient on no rank (it contributes zeros and receives nothing)."""
        if piece.var in self._global_unused:
            return None
        g = it.grads.get(piece.var)
        if g is None:
            return self._zeros(piece)
        if piece.shard is None:
            return g
        return g.narrow(piece.axis, piece.start, piece.length)

    def _zeros(self, piece: Piece) -> torch.Tensor:
        p = self.params[piece.var]
        return torch.zeros(piece.shape, dtype=p.dtype, device=p.device)

    # all-reduce -------------------------------------------------------------------------------------
    def _all_reduce(self, b: ArBucket, it: _Iteration) -> None:
        views = [self._view(p, it) for p in b.pieces]
        if b.compressor == "powersgd":
            self._powersgd(b, views)
            return
        flat = torch.cat([(v if v is not None else self._zeros(p)).reshape(-1)
                          for v, p in zip(views, b.pieces)]).div_(self.world)
        if b.compressor == "fp16":
            wire = flat.to(torch.float16)
        elif b.compressor == "fp16_ef":
            if b.index in self._ef:
                flat.add_(self._ef[b.index])
            wire = flat.to(torch.float16)
            self._ef[b.index] = flat - wire.to(flat.dtype)
        else:
            wire = flat
        work = dist.all_reduce(wire, group=self.groups.ar, async_op=True)

        def done() -> None:
            work.wait()
            if it.discard:
                return
            out = wire.to(flat.dtype) if wire.dtype != flat.dtype else wire
            _scatter(out, [v if v is not None else p.numel for v, p in zip(views, b.pieces)])

        it.pending.append(done)

    def _powersgd(self, b: ArBucket, given: list[torch.Tensor | None]) -> None:
        r_max = b.powersgd_rank
        views = [v if v is not None else self._zeros(p) for v, p in zip(given, b.pieces)]
        mats: list[tuple[int, torch.Tensor]] = []
        flat_1d: list[torch.Tensor] = []
        for i, v in enumerate(views):
            if v.dim() >= 2 and min(v.shape[0], v[0].numel()) > 1:
                m = v.reshape(v.shape[0], -1).to(torch.float32)
                key = (b.index, i)
                if key in self._psgd_err:
                    m = m + self._psgd_err[key]
                mats.append((i, m))
            else:
                flat_1d.append(v.reshape(-1))
        ps: list[torch.Tensor] = []
        qs: list[torch.Tensor] = []
        for i, m in mats:
            key = (b.index, i)
            r = min(r_max, m.shape[0], m.shape[1])
            if key not in self._psgd_q:  # same seed on every rank -> identical initial Q
                self._psgd_q[key] = torch.randn(m.shape[1], r, generator=self._gen).to(m.device)
            q = self._psgd_q[key]
            qs.append(q)
            ps.append(m @ q)
        n1 = sum(t.numel() for t in flat_1d)
        first = torch.cat([t.reshape(-1).to(torch.float32) for t in flat_1d]
                          + [p.reshape(-1) for p in ps])
        dist.all_reduce(first, group=self.groups.ar)
        off = n1
        for j, p in enumerate(ps):
            ps[j] = first[off:off + p.numel()].view_as(p)
            off += p.numel()
            ps[j] = _orthogonalize(ps[j])
        new_q = [m.t() @ p for (_, m), p in zip(mats, ps)]
        if new_q:
            second = torch.cat([q.reshape(-1) for q in new_q])
            dist.all_reduce(second, group=self.groups.ar)
            off = 0
            for j, q in enumerate(new_q):
                new_q[j] = second[off:off + q.numel()].view_as(q)
                off += q.numel()
        # results
        if flat_1d:
            compressed = {k for k, _ in mats}
            _scatter(first[:n1] / self.world,
                     [v if v is not None else b.pieces[i].numel
                      for i, v in enumerate(given) if i not in compressed])
        for (i, m), p, q in zip(mats, ps, new_q):
            key = (b.index, i)
            self._psgd_q[key] = q.clone()
            if given[i] is None:  # no gradient on any rank: its error feedback is kept
                continue
            self._psgd_err[key] = m - p @ (p.t() @ m)
            approx = (p @ q.t()) / self.world
            views[i].copy_(approx.view_as(views[i]).to(views[i].dtype))

    # parameter server ----------------------------------------------------------------------------
    def _parameter_server(self, it: PsItem, iteration: _Iteration) -> None:
        rank, plan = self.rank, self.plan
        server = it.server_rank
        lr = it.local_replication
        my_node = plan.rank_nodes[rank]
        server_node = plan.rank_nodes[server]
        leader = plan.leader(rank)
        view = self._view(it.piece, iteration)
        assert view is not None  # a piece no rank has a gradient for is skipped whole
        if rank == server:
            if lr:
                sources = [r for r in plan.node_members(server_node) if r != server]
                sources += [ldr for ldr in plan.leaders() if plan.rank_nodes[ldr] != server_node]
            else:
                sources = [r for r in range(self.world) if r != server]
            total = self._gather(it, view, sources)
            avg = total.div_(self.world)
            works = self._send_result(it, avg, sources)
            view.copy_(avg)
            iteration.pending.append(lambda: [w.wait() for w in works])
        elif lr and my_node != server_node and rank == leader:
            members = [r for r in plan.node_members(my_node) if r != rank]
            node_sum = self._gather(it, view, members)
            push_works = self._push(it, node_sum, server)
            recv = self._post_result_recv(it, view, server)

            def fan_out() -> None:
                for w in push_works:
                    w.wait()
                avg = recv()
                works = self._send_result(it, avg, members)
                if not iteration.discard:
                    view.copy_(avg)
                for w in works:
                    w.wait()

            iteration.pending.append(fan_out)
        else:
            dst = leader if (lr and my_node != server_node) else server
            push_works = self._push(it, view, dst)
            recv = self._post_result_recv(it, view, dst)

            def pull() -> None:
                for w in push_works:
                    w.wait()
                result = recv()
                if not iteration.discard:
                    view.copy_(result)

            iteration.pending.append(pull)

    def _tag(self, it: PsItem, kind: int) -> int:
        return it.index * _TAGS + kind

    def _push(self, it: PsItem, t: torch.Tensor, dst: int) -> list[Any]:
        g = self.groups.ps
        t = t.detach().cpu()
        if not it.sparse:
            buf = t.contiguous()
            return [dist.isend(buf, dst, group=g, tag=self._tag(it, _PUSH))]
        idx, vals = _rows(t)
        hdr = torch.tensor([idx.numel()], dtype=torch.int64)
        works = [dist.isend(hdr, dst, group=g, tag=self._tag(it, _HDR_PUSH))]
        if idx.numel():
            works.append(dist.isend(idx, dst, group=g, tag=self._tag(it, _IDX_PUSH)))
            works.append(dist.isend(vals, dst, group=g, tag=self._tag(it, _PUSH)))
        return works

    def _gather(self, it: PsItem, own: torch.Tensor, sources: list[int]) -> torch.Tensor:
        """Sum of ``own`` and the pushes of ``sources`` (blocking)."""
        g = self.groups.ps
        total = own.detach().to("cpu", copy=True).contiguous()
        if not it.sparse:
            bufs = [torch.empty_like(total) for _ in sources]
            works = [dist.irecv(b, s, group=g, tag=self._tag(it, _PUSH)) for b, s in zip(bufs, sources)]
            for w, b in zip(works, bufs):
                w.wait()
                total.add_(b)
            return total
        hdrs = [torch.empty(1, dtype=torch.int64) for _ in sources]
        works = [dist.irecv(h, s, group=g, tag=self._tag(it, _HDR_PUSH)) for h, s in zip(hdrs, sources)]
        payload = []
        for w, h, s in zip(works, hdrs, sources):
            w.wait()
            n = int(h.item())
            if n:
                idx = torch.empty(n, dtype=torch.int64)
                vals = torch.empty((n,) + tuple(total.shape[1:]), dtype=total.dtype)
                payload.append((dist.irecv(idx, s, group=g, tag=self._tag(it, _IDX_PUSH)),
                                dist.irecv(vals, s, group=g, tag=self._tag(it, _PUSH)), idx, vals))
        for w1, w2, idx, vals in payload:
            w1.wait()
            w2.wait()
            total.index_add_(0, idx, vals)
        return total

    def _send_result(self, it: PsItem, avg: torch.Tensor, dsts: list[int]) -> list[Any]:
        g = self.groups.ps
        if not it.sparse:
            buf = avg.contiguous()
            return [dist.isend(buf, d, group=g, tag=self._tag(it, _PULL)) for d in dsts]
        idx, vals = _rows(avg)
        hdr = torch.tensor([idx.numel()], dtype=torch.int64)
        works = []
        for d in dsts:
            works.append(dist.isend(hdr, d, group=g, tag=self._tag(it, _HDR_PULL)))
            if idx.numel():
                works.append(dist.isend(idx, d, group=g, tag=self._tag(it, _IDX_PULL)))
                works.append(dist.isend(vals, d, group=g, tag=self._tag(it, _PULL)))
        return works

    def _post_result_recv(self, it: PsItem, like: torch.Tensor, src: int) -> Callable[[], torch.Tensor]:
        """Post the receive of the averaged result now; the returned function completes it."""
        g = self.groups.ps
        if not it.sparse:
            buf = torch.empty(like.shape, dtype=like.dtype)
            work = dist.irecv(buf, src, group=g, tag=self._tag(it, _PULL))

            def dense() -> torch.Tensor:
                work.wait()
                return buf

            return dense
        hdr = torch.empty(1, dtype=torch.int64)
        hwork = dist.irecv(hdr, src, group=g, tag=self._tag(it, _HDR_PULL))

        def sparse() -> torch.Tensor:
            hwork.wait()
            n = int(hdr.item())
            out = torch.zeros(like.shape, dtype=like.dtype)
            if n:
                idx = torch.empty(n, dtype=torch.int64)
                vals = torch.empty((n,) + tuple(like.shape[1:]), dtype=like.dtype)
                w1 = dist.irecv(idx, src, group=g, tag=self._tag(it, _IDX_PULL))
                w2 = dist.irecv(vals, src, group=g, tag=self._tag(it, _PULL))
                w1.wait()
                w2.wait()
                out.index_copy_(0, idx, vals)
            return out

        return sparse


def _hook(ref: weakref.ReferenceType, name: str) -> Callable[[torch.Tensor], None]:
    """A post-accumulate-grad hook that holds its executor weakly."""

    def hook(_param: torch.Tensor) -> None:
        ex = ref()
        if ex is not None:
            ex._on_grad(name)

    return hook


def _rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-sparse form of a dense 2-D+ tensor: indices of non-zero rows and their values.

    A row is non-zero when the sum of its absolute values is (a sum of non-negative numbers is
    0 only when every one is; NaN and inf rows count as non-zero): 1.5-5x faster than
    ``ne(0).any(dim=1)`` on the narrow rows of embedding tables (8-64 wide, one thread)."""
    nz = t.reshape(t.shape[0], -1).abs().sum(dim=1).nonzero().flatten()
    return nz.to(torch.int64).contiguous(), t.index_select(0, nz).contiguous()


def _scatter(flat: torch.Tensor, views: list[torch.Tensor | int]) -> None:
    """Copy consecutive slices of ``flat`` into ``views``; an ``int`` skips that many elements
    (a piece no rank had a gradient for: its ``grad`` stays untouched)."""
    off = 0
    for v in views:
        if isinstance(v, int):
            off += v
            continue
        n = v.numel()
        v.copy_(flat[off:off + n].view_as(v))
        off += n


def _orthogonalize(p: torch.Tensor) -> torch.Tensor:
    q, _ = torch.linalg.qr(p, mode="reduced")
    return q.contiguous()
