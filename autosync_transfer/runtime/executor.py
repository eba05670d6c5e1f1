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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from autosync_transfer.errors import ConfigError, NotFittedError
from autosync_transfer.runtime.plan import ArBucket, Piece, PsItem, SyncPlan

__all__ = ["CommGroups", "StrategyExecutor"]

log = logging.getLogger(__name__)

# message kinds, part of p2p tags (tag = item * _TAGS + kind)
_PUSH, _PULL, _HDR_PUSH, _HDR_PULL, _IDX_PUSH, _IDX_PULL = range(6)
_TAGS = 8


@dataclass
class CommGroups:
    """Process groups used by executors: collectives and point-to-point live in separate groups
    so that their message tags can never collide. Create once per process and reuse.

    Collectives use the default backend (gloo on CPU, NCCL on GPU); parameter-server exchanges
    always use gloo on CPU copies (tagged, variable-sized messages)."""

    ar: Any
    ps: Any

    @classmethod
    def create(cls) -> CommGroups:
        if not dist.is_initialized():
            raise ConfigError("torch.distributed is not initialized; start workers through a launcher")
        ranks = list(range(dist.get_world_size()))
        return cls(ar=dist.new_group(ranks), ps=dist.new_group(ranks, backend="gloo"))


class StrategyExecutor:
    """Synchronize the gradients of ``module`` following ``plan``.

    Usage per iteration: ``loss.backward()`` (communication starts from the hooks), then
    ``executor.finish()``, then ``optimizer.step()``. Call :meth:`setup` once first.
    """

    def __init__(self, module: torch.nn.Module, plan: SyncPlan, groups: CommGroups | None = None,
                 *, seed: int = 0, auto_finish: bool = False):
        self.module = module
        self.plan = plan
        self.groups = groups
        self.seed = seed
        #: call :meth:`finish` at the end of every backward pass (as DDP does), so that
        #: ``loss.backward()`` returns with averaged gradients
        self.auto_finish = auto_finish
        self._ready = False

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
        sparse = [n for n, m in self.module.named_modules()
                  if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse]
        if sparse:
            raise ConfigError(f"module {sparse[0]!r} has sparse=True: torch sparse gradients are not "
                              f"synchronized; build it with sparse=False (a PS piece of an embedding "
                              f"still sends only the rows a batch touched)")
        self._broken: BaseException | None = None
        self._remaining_init: dict[tuple[str, int], int] = {}
        for b in self.plan.buckets:
            self._remaining_init[("ar", b.index)] = len({p.var for p in b.pieces})
        for it in self.plan.ps_items:
            self._remaining_init[("ps", it.index)] = 1
        self._lock = threading.Lock()
        self._events = {t: threading.Event() for t in self.plan.order}
        self._ef: dict[int, torch.Tensor] = {}
        self._psgd_q: dict[tuple[int, int], torch.Tensor] = {}
        self._psgd_err: dict[tuple[int, int], torch.Tensor] = {}
        self._gen = torch.Generator().manual_seed(self.seed)
        self._hooks = []
        for name in self.plan.var_tasks:
            p = self.params[name]
            self._hooks.append(p.register_post_accumulate_grad_hook(self._make_hook(name)))
        self._reset_iteration()
        self._ready = True
        return self

    def close(self) -> None:
        """Remove the gradient hooks (the module goes back to plain local training)."""
        for h in getattr(self, "_hooks", []):
            h.remove()
        self._hooks = []
        self._ready = False

    def _reset_iteration(self) -> None:
        self._remaining = dict(self._remaining_init)
        self._vars_seen: set[str] = set()
        for e in self._events.values():
            e.clear()
        self._pending: list[Callable[[], None]] = []
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None

    # -- readiness ------------------------------------------------------------------------------
    def _make_hook(self, name: str) -> Callable[[torch.Tensor], None]:
        def hook(_param: torch.Tensor) -> None:
            self._mark_ready(name)

        return hook

    def _mark_ready(self, name: str) -> None:
        with self._lock:
            if name in self._vars_seen:
                return
            self._vars_seen.add(name)
            if not self._threads:
                self._start_threads()
                if self.auto_finish:
                    torch.autograd.Variable._execution_engine.queue_callback(self.finish)
            for task in self.plan.var_tasks.get(name, ()):
                self._remaining[task] -= 1
                if self._remaining[task] == 0:
                    self._events[task].set()

    def _start_threads(self) -> None:
        self._threads = [
            threading.Thread(target=self._run, args=("ar",), name="autosync-ar", daemon=True),
            threading.Thread(target=self._run, args=("ps",), name="autosync-ps", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def finish(self) -> None:
        """Wait for all communication of this iteration; gradients are then averaged."""
        if not self._ready:
            raise NotFittedError("StrategyExecutor.setup() must be called before finish()")
        if self._broken is not None:
            raise ConfigError(f"this executor failed earlier ({self._broken}); messages of that "
                              f"iteration may still be in flight: rebuild the process group")
        # variables that got no gradient this iteration synchronize zeros
        for name in self.plan.var_tasks:
            p = self.params[name]
            if name not in self._vars_seen:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                self._mark_ready(name)
        with self._lock:
            if not self._threads:
                self._start_threads()
        for t in self._threads:
            t.join()
        try:
            if self._error is not None:
                raise self._error
            for fn in self._pending:
                fn()
        except BaseException as e:
            self._broken = e
            raise
        finally:
            self._reset_iteration()

    # -- the communication thread -------------------------------------------------------------
    def _run(self, which: str) -> None:
        try:
            for kind, idx in self.plan.order:
                if kind != which:
                    continue
                self._events[(kind, idx)].wait()
                if kind == "ar":
                    self._all_reduce(self.plan.buckets[idx])
                else:
                    self._parameter_server(self.plan.ps_items[idx])
        except BaseException as e:  # surfaced by finish()
            self._error = e

    # pieces ---------------------------------------------------------------------------------------
    def _view(self, piece: Piece) -> torch.Tensor:
        g = self.params[piece.var].grad
        assert g is not None
        if piece.shard is None:
            return g
        return g.narrow(piece.axis, piece.start, piece.length)

    # all-reduce -------------------------------------------------------------------------------------
    def _all_reduce(self, b: ArBucket) -> None:
        views = [self._view(p) for p in b.pieces]
        if b.compressor == "powersgd":
            self._powersgd(b, views)
            return
        flat = torch.cat([v.reshape(-1) for v in views]).div_(self.world)
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
            out = wire.to(views[0].dtype) if wire.dtype != views[0].dtype else wire
            _scatter(out, views)

        self._pending.append(done)

    def _powersgd(self, b: ArBucket, views: list[torch.Tensor]) -> None:
        r_max = b.powersgd_rank
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
                     [v for i, v in enumerate(views) if i not in compressed])
        for (i, m), p, q in zip(mats, ps, new_q):
            key = (b.index, i)
            self._psgd_err[key] = m - p @ (p.t() @ m)
            self._psgd_q[key] = q.clone()
            approx = (p @ q.t()) / self.world
            views[i].copy_(approx.view_as(views[i]).to(views[i].dtype))

    # parameter server ----------------------------------------------------------------------------
    def _parameter_server(self, it: PsItem) -> None:
        rank, plan = self.rank, self.plan
        server = it.server_rank
        lr = it.local_replication
        my_node = plan.rank_nodes[rank]
        server_node = plan.rank_nodes[server]
        leader = plan.leader(rank)
        view = self._view(it.piece)
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
            self._pending.append(lambda: [w.wait() for w in works])
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
                view.copy_(avg)
                for w in works:
                    w.wait()

            self._pending.append(fan_out)
        else:
            dst = leader if (lr and my_node != server_node) else server
            push_works = self._push(it, view, dst)
            recv = self._post_result_recv(it, view, dst)

            def pull() -> None:
                for w in push_works:
                    w.wait()
                view.copy_(recv())

            self._pending.append(pull)

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


def _rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-sparse form of a dense 2-D+ tensor: indices of non-zero rows and their values."""
    nz = t.reshape(t.shape[0], -1).ne(0).any(dim=1).nonzero().flatten()
    return nz.to(torch.int64).contiguous(), t.index_select(0, nz).contiguous()


def _scatter(flat: torch.Tensor, views: list[torch.Tensor]) -> None:
    off = 0
    for v in views:
        n = v.numel()
        v.copy_(flat[off:off + n].view_as(v))
        off += n


def _orthogonalize(p: torch.Tensor) -> torch.Tensor:
    q, _ = torch.linalg.qr(p, mode="reduced")
    return q.contiguous()
