"""Workloads: a runnable training step (a model factory, an example batch, a loss).

A :class:`Workload` is what the runtime measures and what a domain's model graph comes from. The
zoo's runnable models are workloads (:func:`zoo_workload`), and so is any user's model, loaded
from a spec string by :func:`load_workload`:

- ``path/to/file.py`` or ``package.module``: the *plain convention*, a module exposing
  ``build_model() -> nn.Module``, ``example_batch(batch_size, generator) -> (inputs, targets)``
  (``inputs`` a tensor, a tuple of tensors or a dict of tensors passed as keyword arguments) and
  ``loss_fn(output, targets) -> Tensor`` (a scalar); optionally ``BATCH_SIZE`` (per worker,
  default :data:`DEFAULT_BATCH_SIZE`);
- ``path/to/file.py:NAME`` or ``package.module:NAME``: ``NAME`` is a :class:`Workload`, or a
  factory called without arguments that returns one;
- ``zoo:NAME`` or a bare zoo model name (``bert-3l``): the zoo's model.

A path spec imports the file with its own folder on ``sys.path`` (for its sibling imports); a
module spec must be importable as it stands (installed, or on ``PYTHONPATH``): workers do not add
the caller's working folder. :meth:`Workload.graph` builds the :class:`ModelGraph` from the module
and one real forward/backward of the example batch: the per-worker batch size, the sequence
length (second dimension of an integer token input) and the variables whose gradients are
row-sparse (embedding weights, and any parameter that gets a ``torch.sparse`` gradient). Every
bad spec raises a one-line :class:`~autosync_transfer.errors.WorkloadError` naming the spec.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import ConfigError, SpecError, WorkloadError

if TYPE_CHECKING:
    import torch

__all__ = ["Workload", "ZooWorkload", "DEFAULT_BATCH_SIZE", "load_workload", "zoo_workload",
           "call_model", "workload_name", "absolute_spec", "workload_domain", "workload_of"]

#: per-worker batch size of a plain-convention module without ``BATCH_SIZE``
DEFAULT_BATCH_SIZE = 8

#: the pieces of the plain convention
_PIECES = ("build_model", "example_batch", "loss_fn")


def _line(e: BaseException) -> str:
    """``Type: message`` on one line (at most 300 characters)."""
    text = " ".join(str(e).split())
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def workload_name(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9_.]`` replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", text) or "workload"


def call_model(model: Any, inputs: Any) -> Any:
    """``model(**inputs)`` for a dict, ``model(*inputs)`` for a tuple or list, else
    ``model(inputs)``."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _tensors(obj: Any) -> list[torch.Tensor]:
    """The tensors in ``obj`` (a tensor, or tuples, lists and dicts of them), in order."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (tuple, list)):
        return [t for v in obj for t in _tensors(v)]
    return []


class Workload(BaseModel):
    """A training step: ``build_model() -> nn.Module``, ``example_batch(batch_size, generator)
    -> (inputs, targets)``, ``loss_fn(output, targets) -> scalar Tensor``, and the per-worker
    ``batch_size``.

    ``name`` names its domains (``<name>-<cluster>``); ``spec`` is how worker processes import
    it (set by :func:`load_workload`; empty for an object made in this process only, which can
    be measured in-process but not sent to workers).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$")
    build_model: Callable[[], Any]
    example_batch: Callable[[int, Any], Any]
    loss_fn: Callable[[Any, Any], Any]
    batch_size: int = Field(default=DEFAULT_BATCH_SIZE, ge=1)
    spec: str = ""
    description: str = ""

    _graph: ModelGraph | None = PrivateAttr(default=None)

    @property
    def label(self) -> str:
        """How errors name this workload: its spec, else its name."""
        return self.spec or self.name

    def _fail(self, problem: str) -> WorkloadError:
        return WorkloadError(f"workload {self.label!r}: {problem}")

    # -- the step -----------------------------------------------------------------------------
    def build(self, device: str = "cpu", *, seed: int = 0) -> torch.nn.Module:
        """The model, initialized from ``seed`` (a private copy of the CPU random state: the
        global one is left as it was), on ``device``."""
        import torch

        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                module = self.build_model()
        except Exception as e:
            raise self._fail(f"build_model() raised {_line(e)}") from e
        if not isinstance(module, torch.nn.Module):
            raise self._fail(f"build_model() must return a torch.nn.Module, got "
                             f"{type(module).__name__}")
        return module.to(device)

    def batch(self, generator: torch.Generator | None = None, batch_size: int | None = None
              ) -> tuple[Any, Any]:
        """``(inputs, targets)`` from ``example_batch`` (``batch_size`` defaults to the
        workload's; ``generator`` to one seeded 0)."""
        import torch

        g = generator if generator is not None else torch.Generator().manual_seed(0)
        b = self.batch_size if batch_size is None else int(batch_size)
        try:
            batch = self.example_batch(b, g)
        except Exception as e:
            raise self._fail(f"example_batch({b}, generator) raised {_line(e)}") from e
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise self._fail(f"example_batch must return (inputs, targets), got "
                             f"{type(batch).__name__}")
        inputs, targets = batch
        if not _tensors(inputs):
            raise self._fail(f"example_batch's inputs must be a tensor, a tuple or a dict of "
                             f"tensors, got {type(inputs).__name__}")
        return inputs, targets

    def loss(self, module: torch.nn.Module, inputs: Any, targets: Any) -> torch.Tensor:
        """The forward pass and the loss (checked to be a scalar tensor)."""
        import torch

        try:
            output = call_model(module, inputs)
        except Exception as e:
            raise self._fail(f"the forward pass raised {_line(e)}") from e
        try:
            loss = self.loss_fn(output, targets)
        except Exception as e:
            raise self._fail(f"loss_fn raised {_line(e)}") from e
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            got = (f"shape {list(loss.shape)}" if isinstance(loss, torch.Tensor)
                   else type(loss).__name__)
            raise self._fail(f"loss_fn must return a scalar tensor, got {got}")
        return loss.reshape(())

    # -- the graph ----------------------------------------------------------------------------
    def graph(self) -> ModelGraph:
        """The model graph from one real training step on one process (cached): batch size,
        sequence length and sparse variables as observed (see the module docstring)."""
        if self._graph is None:
            self._graph = self._trace()
        return self._graph

    def _trace(self) -> ModelGraph:
        import torch

        from autosync_transfer.domains.importers import graph_from_torch

        module = self.build("cpu", seed=0)
        inputs, targets = self.batch(torch.Generator().manual_seed(0))
        loss = self.loss(module, inputs, targets)
        value = float(loss.detach().float())
        if not math.isfinite(value):
            raise self._fail(f"the example step's loss is {value}: a workload must train on "
                             f"finite values")
        try:
            loss.backward()
        except Exception as e:
            raise self._fail(f"backward raised {_line(e)}") from e
        for pname, p in module.named_parameters():
            g = p.grad
            if g is None:
                continue
            vals = g.coalesce().values() if g.layout != torch.strided else g
            if not bool(torch.isfinite(vals).all()):
                raise self._fail(f"the example step's gradient of {pname!r} is not finite (nan "
                                 f"or inf): a workload must train on finite values")
        tensors = _tensors(inputs)
        batch = int(tensors[0].shape[0]) if tensors[0].dim() >= 1 else 1
        tokens = [t for t in tensors if t.dim() >= 2 and not t.is_floating_point()
                  and not t.is_complex() and t.dtype != torch.bool]
        seq_len = int(tokens[0].shape[1]) if tokens else 1
        sparse: set[str] = set()
        for mod_path, mod in module.named_modules():
            if isinstance(mod, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
                sparse.add(f"{mod_path}.weight" if mod_path else "weight")
        for pname, p in module.named_parameters():
            if p.grad is not None and p.grad.layout != torch.strided:
                sparse.add(pname)
        try:
            return graph_from_torch(module, self.name, batch_size=max(batch, 1),
                                    seq_len=max(seq_len, 1), config={"workload": self.label},
                                    description=self.description,
                                    sparse=lambda n: n in sparse)
        except (ConfigError, ValueError) as e:
            raise self._fail(f"its model graph is invalid: {_line(e)}") from e

    def check(self) -> Workload:
        """Run the training step once on this process (raises :class:`WorkloadError`)."""
        self.graph()
        return self

    @property
    def fingerprint(self) -> str:
        """Content hash of the graph and the spec."""
        blob = f"{self.graph().fingerprint}:{self.label}".encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def domain(self, cluster: Cluster) -> Domain:
        """The domain ``<name>-<cluster>`` of this workload on ``cluster``."""
        from autosync_transfer.domains.parsing import is_safe_name

        if not is_safe_name(cluster.name):
            raise ConfigError(f"cluster name must not contain '-' (it ends a domain name) and "
                              f"must be 1-64 letters, digits, '_' or '.', got {cluster.name!r}")
        return Domain(name=f"{self.name}-{cluster.name}", model=self.graph(), cluster=cluster)


class ZooWorkload(Workload):
    """A runnable zoo model as a workload: built by ``zoo.build_module``, its graph the zoo's
    (the catalog's, so domain fingerprints do not change)."""

    zoo_name: str

    def build(self, device: str = "cpu", *, seed: int = 0) -> torch.nn.Module:
        from autosync_transfer.domains.zoo import build_module

        return build_module(self.zoo_name, device, seed=seed)

    def graph(self) -> ModelGraph:
        from autosync_transfer.domains.catalog import get_model

        return get_model(self.zoo_name)


def zoo_workload(name: str) -> ZooWorkload:
    """Zoo model ``name`` as a workload (spec ``zoo:<name>``)."""
    from autosync_transfer.domains import zoo

    spec = zoo.get_spec(name)
    return ZooWorkload(
        name=name, zoo_name=name, spec=f"zoo:{name}", batch_size=spec.batch_size,
        build_model=functools.partial(zoo.build_module, name, "cpu"),
        example_batch=functools.partial(zoo.example_batch, name),
        loss_fn=zoo.loss_fn(name), description=spec.description,
    )


# -- loading specs ------------------------------------------------------------------------------
def _is_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _import_path(spec: str, target: str) -> Any:
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise WorkloadError(f"workload {spec!r}: no such file {target!r}")
    key = "_autosync_workload_" + workload_name(path.stem) + "_" + \
        hashlib.sha256(str(path).encode()).hexdigest()[:8]
    if key in sys.modules:
        return sys.modules[key]
    folder = str(path.parent)
    if folder not in sys.path:  # the file's own folder, last, for its sibling imports
        sys.path.append(folder)
    loader_spec = importlib.util.spec_from_file_location(key, path)
    if loader_spec is None or loader_spec.loader is None:
        raise WorkloadError(f"workload {spec!r}: cannot import {target!r} as Python")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[key] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException as e:
        del sys.modules[key]
        if isinstance(e, KeyboardInterrupt):
            raise
        raise WorkloadError(f"workload {spec!r}: importing {target!r} raised {_line(e)}") from e
    return module


def _import_module(spec: str, target: str) -> Any:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", target):
        raise WorkloadError(f"workload {spec!r}: expected path/to/file.py, package.module, "
                            f"either with :NAME, or zoo:NAME")
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        raise WorkloadError(f"workload {spec!r}: cannot import module {target!r} ({_line(e)}); "
                            f"a module must be importable as it stands (installed or on "
                            f"PYTHONPATH), or give a path to the .py file") from e
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        raise WorkloadError(f"workload {spec!r}: importing {target!r} raised {_line(e)}") from e


def _plain(spec: str, target: str, module: Any, name: str) -> Workload:
    pieces = {}
    for piece in _PIECES:
        fn = getattr(module, piece, None)
        if fn is None:
            raise WorkloadError(
                f"workload {spec!r}: {target} has no {piece} (the plain convention needs "
                f"{', '.join(_PIECES)}; or name a Workload with {target}:NAME)")
        if not callable(fn):
            raise WorkloadError(f"workload {spec!r}: {piece} must be callable, got "
                                f"{type(fn).__name__}")
        pieces[piece] = fn
    batch_size = getattr(module, "BATCH_SIZE", DEFAULT_BATCH_SIZE)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise WorkloadError(f"workload {spec!r}: BATCH_SIZE must be an int >= 1, got "
                            f"{batch_size!r}")
    doc = (getattr(module, "__doc__", None) or "").strip().splitlines()
    return Workload(name=name, spec=spec, batch_size=batch_size,
                    description=doc[0] if doc else "", **pieces)


def _named(spec: str, target: str, module: Any, attr: str) -> Workload:
    if not hasattr(module, attr):
        raise WorkloadError(f"workload {spec!r}: {target} has no attribute {attr!r}")
    obj = getattr(module, attr)
    if not isinstance(obj, Workload):
        if not callable(obj) or isinstance(obj, type):
            raise WorkloadError(f"workload {spec!r}: {attr} must be a Workload or a factory "
                                f"returning one, got {type(obj).__name__}")
        try:
            made = obj()
        except Exception as e:
            raise WorkloadError(f"workload {spec!r}: {attr}() raised {_line(e)}") from e
        if not isinstance(made, Workload):
            raise WorkloadError(f"workload {spec!r}: {attr}() must return a Workload, got "
                                f"{type(made).__name__}")
        obj = made
    return obj.model_copy(update={"spec": spec}) if obj.spec != spec else obj


def load_workload(spec: str | Workload) -> Workload:
    """The workload a spec names (see the module docstring); a :class:`Workload` is returned
    as is. Importing runs no training step: :meth:`Workload.check` (or :meth:`~Workload.graph`)
    does. Raises :class:`WorkloadError` with one line naming the spec and the problem."""
    if isinstance(spec, Workload):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise WorkloadError(f"workload spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec.startswith("zoo:") or (":" not in spec and not _is_path(spec) and _in_zoo(spec)):
        name = spec.removeprefix("zoo:")
        if not _in_zoo(name):
            from autosync_transfer.domains.catalog import model_names

            raise WorkloadError(f"workload {spec!r}: no zoo model {name!r} (known: "
                                f"{', '.join(model_names())})")
        return zoo_workload(name)
    target, attr = spec, ""
    if ":" in spec:
        target, _, attr = spec.rpartition(":")
        if not attr.isidentifier() or not target:
            raise WorkloadError(f"workload {spec!r}: expected path/to/file.py:NAME or "
                                f"package.module:NAME with NAME a Python name")
    if _is_path(target):
        module = _import_path(spec, target)
        default_name = workload_name(Path(target).stem)
    else:
        module = _import_module(spec, target)
        default_name = workload_name(target)
    if attr:
        return _named(spec, target, module, attr)
    return _plain(spec, target, module, default_name)


def absolute_spec(spec: str) -> str:
    """``spec`` with a relative file path made absolute (workers may start in another folder);
    other specs unchanged."""
    if spec.startswith("zoo:"):
        return spec
    target, attr = spec, ""
    if ":" in spec:
        head, _, tail = spec.rpartition(":")
        if tail.isidentifier() and head:
            target, attr = head, tail
    if not _is_path(target):
        return spec
    path = str(Path(target).expanduser().resolve())
    return f"{path}:{attr}" if attr else path


def _in_zoo(name: str) -> bool:
    from autosync_transfer.domains.catalog import model_names

    return name in model_names()


# -- workload domains ---------------------------------------------------------------------------
def workload_domain(model: str | Workload, cluster: Cluster | str | Path) -> tuple[Domain, str]:
    """``(domain, spec)``: the domain ``<workload>-<cluster>`` of workload ``model`` (a spec, see
    :func:`load_workload`, or a :class:`Workload`) on ``cluster`` (a :class:`Cluster` or the path
    of a resource-spec YAML, the cluster named after the file), and the spec the workers import
    (a relative file path made absolute).

    The cluster is read first, then the workload is imported and its training step run once on
    this process (:meth:`Workload.check`), so a bad cluster file, a bad spec or a step that fails
    raises here (:class:`~autosync_transfer.errors.SpecError`, :class:`ConfigError` or
    :class:`WorkloadError`, one line) before any worker starts. A cluster file named like a
    catalog cluster (``A.yml``) or with '-' in its name is a :class:`ConfigError` (the domain
    name would be ambiguous)."""
    if isinstance(cluster, Cluster):
        clu = cluster
    else:
        from autosync_transfer.domains.catalog import CLUSTERS

        try:
            clu = Cluster.from_file(cluster)
        except SpecError as e:
            if str(cluster) in str(e):
                raise
            raise SpecError(f"cluster_file={str(cluster)!r}: {e}") from e
        if "-" in clu.name or clu.name in CLUSTERS:
            raise ConfigError(
                f"cluster_file={str(cluster)!r}: the cluster is named after the file "
                f"({clu.name!r}), which must not contain '-' nor be a catalog cluster "
                f"({', '.join(CLUSTERS)}); rename the file or set a top-level 'name:'")
    if isinstance(model, Workload):
        wl = model
    else:
        if not isinstance(model, str) or not model.strip():
            raise WorkloadError(f"workload spec must be a non-empty string, got {model!r}")
        wl = load_workload(absolute_spec(model.strip()))
    wl.check()
    return wl.domain(clu), wl.spec


def workload_of(domain: Domain) -> tuple[str | None, str | None]:
    """``(spec, fingerprint)`` of the workload a domain's graph was traced from (the graph's
    ``config["workload"]``, set by :meth:`Workload.graph`); ``(None, None)`` for a graph that
    was not (the zoo's, an import)."""
    spec = domain.model.config.get("workload")
    if not isinstance(spec, str) or not spec:
        return None, None
    blob = f"{domain.model.fingerprint}:{spec}".encode()
    return spec, hashlib.sha256(blob).hexdigest()[:16]
