"""Importers: turn a PyTorch module or a Keras model into a :class:`ModelGraph`.

Both importers list the trainable variables in forward order and approximate the dataflow by a
chain over *variable groups*: a group is the set of variables owned by one leaf layer (a torch
module that owns parameters directly, a Keras layer path); every variable of a group gets an
edge to every variable of the next group. Branches (residual shortcuts, Inception towers) are
therefore linearized in registration order, which is the order the zoo's modules run them in.

``torch`` and ``tensorflow`` are imported only inside the functions that need them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from autosync_transfer.domains.graph import DTYPE_BYTES, ModelGraph, Variable
from autosync_transfer.errors import ConfigError

__all__ = ["graph_from_torch", "graph_from_keras", "SparseOverride"]

logger = logging.getLogger(__name__)

#: which variables are sparse, overriding detection: a collection of names, or a predicate on a name
SparseOverride = Collection[str] | Callable[[str], bool]

_TENSORFLOW_MISSING = (
    "TensorFlow is not installed; install the 'tensorflow' extra: "
    "pip install autosync-transfer[tensorflow]"
)


# -- shared helpers ----------------------------------------------------------------------------
def _dtype_name(dtype: Any) -> str:
    """``torch.float32`` / ``tf.float32`` / ``'float32'`` -> ``'float32'``."""
    name = getattr(dtype, "name", None)
    text = name if isinstance(name, str) else str(dtype)
    text = text.removeprefix("torch.").removesuffix("_ref")
    if text not in DTYPE_BYTES:
        raise ConfigError(
            f"unsupported variable dtype {text!r} (supported: {', '.join(sorted(DTYPE_BYTES))})"
        )
    return text


def _sparse_predicate(
    sparse: SparseOverride | None, names: Sequence[str]
) -> Callable[[str], bool] | None:
    """Turn the ``sparse`` override into a predicate; unknown names are a configuration error."""
    if sparse is None:
        return None
    if callable(sparse):
        return sparse
    chosen = set(sparse)
    unknown = sorted(chosen - set(names))
    if unknown:
        raise ConfigError(
            f"sparse override names unknown variables {unknown[:5]}"
            f"{' ...' if len(unknown) > 5 else ''} (the model has {len(names)} variables)"
        )
    return chosen.__contains__


def _chain_edges(groups: Iterable[Sequence[str]]) -> tuple[tuple[str, str], ...]:
    """Edges from every variable of one group to every variable of the next group."""
    edges: list[tuple[str, str]] = []
    previous: Sequence[str] = ()
    for group in groups:
        edges.extend((a, b) for a in previous for b in group)
        previous = group
    return tuple(edges)


def _group_by_module(variables: Sequence[Variable]) -> list[list[str]]:
    """Consecutive variables with the same owning module form one group."""
    groups: list[list[str]] = []
    last: str | None = None
    for v in variables:
        if groups and v.module == last:
            groups[-1].append(v.name)
        else:
            groups.append([v.name])
            last = v.module
    return groups


def _variable(**fields: Any) -> Variable:
    try:
        return Variable(**fields)
    except ValueError as e:  # pydantic ValidationError is a ValueError
        from autosync_transfer.errors import format_pydantic_error

        raise ConfigError(format_pydantic_error(e, f"variable {fields.get('name')!r}")) from e


def _build_graph(
    name: str,
    variables: list[Variable],
    *,
    batch_size: int,
    seq_len: int,
    config: dict[str, Any] | None,
    description: str,
    source: str,
) -> ModelGraph:
    if not variables:
        raise ConfigError(
            f"model {name!r} has no trainable variables (is it built, and are any parameters "
            f"trainable?)"
        )
    full_config: dict[str, Any] = {"source": source, **(config or {})}
    full_config["parameters"] = sum(v.num_elements for v in variables)
    full_config["bytes"] = sum(v.nbytes for v in variables)
    try:
        return ModelGraph(
            name=name,
            variables=tuple(variables),
            edges=_chain_edges(_group_by_module(variables)),
            batch_size=batch_size,
            seq_len=seq_len,
            config=full_config,
            description=description,
        )
    except ValueError as e:  # pydantic ValidationError is a ValueError
        from autosync_transfer.errors import format_pydantic_error

        raise ConfigError(format_pydantic_error(e, f"model {name!r}")) from e


# -- PyTorch ---------------------------------------------------------------------------------
def graph_from_torch(
    module: Any,
    name: str,
    *,
    batch_size: int = 1,
    seq_len: int = 1,
    config: dict[str, Any] | None = None,
    description: str = "",
    sparse: SparseOverride | None = None,
) -> ModelGraph:
    """The graph of a ``torch.nn.Module``'s trainable parameters.

    Variables are the ``requires_grad`` parameters in ``named_parameters()`` order (registration
    order, which is forward order for the zoo's modules); ``module`` is the owning submodule's
    path. A parameter is sparse iff it is the ``weight`` of an ``nn.Embedding`` or
    ``nn.EmbeddingBag`` (whatever its ``sparse=`` flag: synchronization can always send only
    the touched rows), unless ``sparse`` (names, or a predicate on a name) says otherwise.
    Only shapes and dtypes are read, so meta-device modules work. ``config`` gains
    ``parameters`` (count) and ``bytes``.
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ConfigError(f"graph_from_torch needs a torch.nn.Module, got {type(module).__name__}")

    owners: dict[str, str] = {}
    embedding_weights: set[str] = set()
    for mod_path, mod in module.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            full = f"{mod_path}.{pname}" if mod_path else pname
            owners.setdefault(full, mod_path)
            if pname == "weight" and isinstance(mod, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
                embedding_weights.add(full)

    params = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    override = _sparse_predicate(sparse, [n for n, _ in params])
    variables = []
    for order, (pname, p) in enumerate(params):
        is_sparse = override(pname) if override is not None else pname in embedding_weights
        variables.append(
            _variable(
                name=pname,
                shape=tuple(int(d) for d in p.shape),
                dtype=_dtype_name(p.dtype),
                sparse=bool(is_sparse),
                order=order,
                module=owners.get(pname, pname.rpartition(".")[0]),
            )
        )
    return _build_graph(
        name,
        variables,
        batch_size=batch_size,
        seq_len=seq_len,
        config=config,
        description=description,
        source="torch",
    )


# -- TensorFlow / Keras ----------------------------------------------------------------------
def _import_tensorflow() -> tuple[Any, Any]:
    """``(tensorflow, keras)`` with TensorFlow's start-up noise turned down."""
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ConfigError(_TENSORFLOW_MISSING) from e
    try:
        import keras
    except ImportError:  # Keras 2 ships inside TensorFlow
        keras = tf.keras
    return tf, keras


def _keras_name(variable: Any) -> str:
    path = getattr(variable, "path", None)  # Keras 3: unique 'layer/.../name'
    if isinstance(path, str) and path:
        return path
    return str(variable.name).removesuffix(":0")


def _keras_layers(model: Any) -> list[Any]:
    """Every layer of ``model``, nested ones included."""
    flatten = getattr(model, "_flatten_layers", None)
    if callable(flatten):
        return list(flatten(include_self=False, recursive=True))
    out: list[Any] = []
    stack = list(getattr(model, "layers", []))
    while stack:
        layer = stack.pop(0)
        out.append(layer)
        stack[:0] = list(getattr(layer, "layers", []))
    return out


def _dummy_inputs(tf: Any, model: Any, batch_size: int, seq_len: int) -> Any | None:
    """Zeros shaped like ``model.inputs`` (batch axis = ``batch_size``, other unknown axes =
    ``seq_len``), with each input's dtype; ``None`` when the model has no symbolic inputs."""
    try:
        symbolic = model.inputs
    except (AttributeError, ValueError):
        return None
    if not symbolic:
        return None
    tensors = []
    for x in symbolic:
        dims = list(x.shape)
        shape = [
            (batch_size if i == 0 else seq_len) if d is None else int(d) for i, d in enumerate(dims)
        ]
        tensors.append(tf.zeros(shape, dtype=_tf_dtype(tf, x.dtype)))
    return tensors[0] if len(tensors) == 1 else tensors


def _tf_dtype(tf: Any, dtype: Any) -> Any:
    name = getattr(dtype, "name", None)
    return tf.as_dtype(name if isinstance(name, str) else str(dtype))


def _sparse_by_gradient(tf: Any, model: Any, variables: Sequence[Any], inputs: Any) -> list[bool]:
    """Run one ``GradientTape`` step; a variable is sparse iff its gradient is ``IndexedSlices``."""
    with tf.GradientTape() as tape:
        outputs = model(inputs, training=True)
        loss = tf.add_n(
            [tf.reduce_sum(tf.cast(o, tf.float32)) for o in tf.nest.flatten(outputs)]
        )
    grads = tape.gradient(loss, list(variables))
    return [isinstance(g, tf.IndexedSlices) for g in grads]


def _sparse_by_layer(keras: Any, model: Any, variables: Sequence[Any]) -> list[bool]:
    """Fallback: a variable is sparse iff it is the ``embeddings`` of a Keras ``Embedding``."""
    embedding_paths = {
        _keras_name(layer.embeddings)
        for layer in _keras_layers(model)
        if isinstance(layer, keras.layers.Embedding)
        and getattr(layer, "embeddings", None) is not None
    }
    return [_keras_name(v) in embedding_paths for v in variables]


def graph_from_keras(
    model: Any,
    name: str | None = None,
    *,
    batch_size: int = 1,
    seq_len: int = 1,
    config: dict[str, Any] | None = None,
    description: str = "",
    sparse: SparseOverride | None = None,
) -> ModelGraph:
    """The graph of a built Keras model's trainable variables.

    Names are Keras 3 ``variable.path`` values (unique; ``variable.name`` without ``:0`` on
    Keras 2), in ``trainable_variables`` order. Sparseness is measured: one ``GradientTape``
    step on a batch of zeros shaped like ``model.inputs`` (``batch_size`` rows, unknown axes of
    length ``seq_len``), and a variable is sparse iff its gradient is a ``tf.IndexedSlices``.
    Without symbolic inputs, or if that step fails, a variable is sparse iff it is the
    ``embeddings`` of a ``keras.layers.Embedding``. ``sparse`` (names, or a predicate on a name)
    overrides both. Raises :class:`ConfigError` when TensorFlow is not installed.
    """
    tf, keras = _import_tensorflow()
    graph_name = name or str(getattr(model, "name", "") or "keras_model")
    variables = list(model.trainable_variables)
    if not variables:
        raise ConfigError(
            f"Keras model {graph_name!r} has no trainable variables; build it first "
            f"(call it on a batch or give it an Input) or unfreeze its layers"
        )

    names: list[str] = []
    seen: dict[str, int] = {}
    for v in variables:
        base = _keras_name(v)
        count = seen.get(base, 0)
        seen[base] = count + 1
        names.append(base if count == 0 else f"{base}_{count}")

    override = _sparse_predicate(sparse, names)
    if override is not None:
        flags = [bool(override(n)) for n in names]
    else:
        inputs = _dummy_inputs(tf, model, batch_size, seq_len)
        flags = None
        if inputs is not None:
            try:
                flags = _sparse_by_gradient(tf, model, variables, inputs)
            except Exception as e:  # a model that rejects zeros: fall back to layer types
                logger.warning(
                    "gradient probe of Keras model %r failed (%s); marking Embedding tables sparse",
                    graph_name,
                    e,
                )
        if flags is None:
            flags = _sparse_by_layer(keras, model, variables)

    graph_vars = [
        _variable(
            name=vname,
            shape=tuple(int(d) for d in v.shape),
            dtype=_dtype_name(v.dtype),
            sparse=flag,
            order=i,
            module=vname.rpartition("/")[0],
        )
        for i, (vname, v, flag) in enumerate(zip(names, variables, flags))
    ]
    return _build_graph(
        graph_name,
        graph_vars,
        batch_size=batch_size,
        seq_len=seq_len,
        config=config,
        description=description,
        source="keras",
    )
