"""Learned rankers: LightningModules that map collated strategy features to slowness scores.

Every ranker takes the batch of :func:`~autosync_transfer.rankers.features.collate` (plus, when
training, ``runtime [B]`` in seconds and ``domain_id [B]``) and returns one **slowness** score per
strategy (``[B]``): lower = predicted faster; only the order within one domain means anything.
The modules do no I/O: data comes from
:class:`~autosync_transfer.rankers.datamodule.TrialDataModule`, saving and loading is
:class:`~autosync_transfer.rankers.simulator.Simulator`'s job.

Kinds (:data:`RANKERS`):

``linear``
    On the aggregated features ``agg`` only (AutoSync's linear ranker on z_pre): one linear layer,
    or one hidden ELU layer when ``hidden > 0``.
``residual``
    The step-time simulator's prediction (the ``log10_sim_step_s`` column of ``agg``) plus a
    correction learned on ``agg``, which starts at zero: untrained, it ranks as the simulator.
``rnn``
    AutoSync's RankRNN: a row MLP, the rows of each variable summed into one slot per variable
    (``row_var``), a bidirectional LSTM over the variables in forward order (packed by
    ``num_vars``), the final hidden states of every layer and direction concatenated, an MLP head.
``gat``
    Graph attention (torch_geometric ``GATConv``) over one graph per strategy: a node per
    partition row, per parameter server and per all-reduce group; edges row <-> its server, row
    <-> its group and between consecutive rows in forward order (shards of one variable, then the
    next variable), with the edge type as edge feature; mean and max pooling over all nodes
    (optionally with ``agg``) into an MLP head.
``transformer``
    A permutation-invariant set encoder: ``nn.TransformerEncoder`` without positional encoding
    over tokens, masked mean and max pooling, concatenated with ``agg``, an MLP head. Tokens are
    the variables by default (``tokens="variables"``: the row MLP's outputs summed per variable,
    as in ``rnn``), which keeps attention quadratic in the number of variables (63 for bert-3l)
    instead of rows (about 700 for bert-3l, 2,250 for bert-12l); ``tokens="rows"`` attends over
    the rows themselves (fine for small models). The forward position stays visible as the
    ``var_position`` feature column only.

Inputs are standardized with per-column statistics of the training set held in buffers
(``set_feature_stats``; part of the ``state_dict``) and clipped to ``±input_clip``, so columns of
very different scales (shares, log10 seconds) train together and a transferred ranker keeps the
scaling it was trained with.

Training: :func:`~autosync_transfer.rankers.losses.combined_loss` (pairwise logistic over pairs
of the same domain, optional relative ``margin``, optional ListNet term weighted by
``listwise_weight``); Adam (``lr``, ``weight_decay``) with the learning rate multiplied by
``lr_gamma`` (0.3) at 40 % and 80 % of the trainer's ``max_epochs``, as in the AutoSync rebuttal
(decay at epochs 80 and 160 of 200); gradient clipping (norm 0.25) is set on the Trainer. The
validation pairwise accuracy ``val_pairwise_acc`` is computed on the whole validation set at the
end of each validation epoch (mean over domains).
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch
from torch import Tensor, nn

from autosync_transfer.errors import ConfigError, UnknownNameError
from autosync_transfer.rankers import losses, metrics
from autosync_transfer.rankers.features import FEATURE_SCHEMA

__all__ = [
    "RankerModule",
    "LinearRanker",
    "ResidualRanker",
    "RNNRanker",
    "GATRanker",
    "TransformerRanker",
    "RANKERS",
    "build_ranker",
    "ranker_hparams",
]

_TABLES = ("row", "agg", "server", "group")


def _mlp(in_dim: int, hidden: int, out_dim: int = 1, act: type[nn.Module] = nn.ReLU
         ) -> nn.Module:
    """``Linear(in, out)`` when ``hidden == 0``, else ``Linear(in, hidden) -> act -> Linear``."""
    if hidden <= 0:
        return nn.Linear(in_dim, out_dim)
    return nn.Sequential(nn.Linear(in_dim, hidden), act(), nn.Linear(hidden, out_dim))


def _scatter_vars(emb: Tensor, row_var: Tensor, row_mask: Tensor, num_vars: Tensor) -> Tensor:
    """Sum row embeddings ``[B, R, D]`` into per-variable slots ``[B, Vmax, D]`` (padding rows,
    ``row_var == -1``, are left out)."""
    B, _, D = emb.shape
    vmax = int(num_vars.max()) if B else 0
    slots = emb.new_zeros(B, max(vmax, 1), D)
    idx = row_var.clamp_min(0).unsqueeze(-1).expand(-1, -1, D)
    return slots.scatter_add(1, idx, emb * row_mask.unsqueeze(-1).to(emb.dtype))


def _masked_mean_max(x: Tensor, mask: Tensor) -> Tensor:
    """``[B, T, D]`` with a bool mask ``[B, T]`` -> mean ⊕ max of the valid tokens ``[B, 2D]``."""
    m = mask.unsqueeze(-1).to(x.dtype)
    mean = (x * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)
    mx = x.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    return torch.cat([mean, mx], dim=-1)


class RankerModule(L.LightningModule, abc.ABC):
    """Base of every learned ranker (see the module docstring).

    Subclasses build their layers in ``__init__`` (after ``super().__init__(**common)``) and
    implement :meth:`score_batch`; their final layer is the attribute ``head`` (what
    ``freeze="body"`` leaves trainable). Every constructor argument is a hyper-parameter
    (``self.hparams``); the widths default to the current feature schema.
    """

    kind: ClassVar[str]
    #: the feature tables :meth:`score_batch` reads (``rows`` with its index columns, ``agg``,
    #: ``server``, ``group``); a ranker on ``agg`` alone is scored without the per-row features
    inputs: ClassVar[frozenset[str]] = frozenset({"rows", "agg", "server", "group"})
    #: whether the freshly built ranker already ranks (the ``residual`` ranker's simulator
    #: prior): its starting weights are then a candidate of the best-validation-epoch choice
    starts_ranked: ClassVar[bool] = False

    def __init__(
        self,
        *,
        num_row: int = FEATURE_SCHEMA.num_row,
        num_agg: int = FEATURE_SCHEMA.num_agg,
        num_server: int = FEATURE_SCHEMA.num_server,
        num_group: int = FEATURE_SCHEMA.num_group,
        lr: float = 1e-3,
        weight_decay: float = 3e-4,
        margin: float = 0.0,
        listwise_weight: float = 0.0,
        temperature: float = 1.0,
        lr_milestones: Sequence[float] = (0.4, 0.8),
        lr_gamma: float = 0.3,
        normalize: bool = True,
        input_clip: float = 10.0,
    ) -> None:
        super().__init__()
        if lr <= 0 or weight_decay < 0:
            raise ConfigError(f"lr must be > 0 and weight_decay >= 0, got lr={lr}, "
                              f"weight_decay={weight_decay}")
        if margin < 0 or listwise_weight < 0 or temperature <= 0:
            raise ConfigError(
                f"margin and listwise_weight must be >= 0 and temperature > 0, got "
                f"margin={margin}, listwise_weight={listwise_weight}, temperature={temperature}")
        if any(not 0 < m < 1 for m in lr_milestones) or not 0 < lr_gamma <= 1:
            raise ConfigError(
                f"lr_milestones must be fractions of max_epochs in (0, 1) and lr_gamma in "
                f"(0, 1], got lr_milestones={list(lr_milestones)}, lr_gamma={lr_gamma}")
        if input_clip <= 0:
            raise ConfigError(f"input_clip must be > 0, got {input_clip}")
        self.save_hyperparameters()
        self.hparams["lr_milestones"] = [float(m) for m in lr_milestones]  # JSON-friendly
        widths = {"row": num_row, "agg": num_agg, "server": num_server, "group": num_group}
        for table, width in widths.items():
            self.register_buffer(f"{table}_mean", torch.zeros(width))
            self.register_buffer(f"{table}_std", torch.ones(width))
        self._val_outputs: list[tuple[Tensor, Tensor, Tensor]] = []

    # -- inputs ---------------------------------------------------------------------------------

    def set_feature_stats(self, stats: Mapping[str, Any]) -> None:
        """Set the input standardization: ``stats[f"{table}_mean"]`` / ``[f"{table}_std"]`` for
        ``table`` in row, agg, server, group (missing keys keep their values). A standard
        deviation below 1e-6 (a constant column) becomes 1."""
        for key, value in stats.items():
            if not any(key == f"{t}_{s}" for t in _TABLES for s in ("mean", "std")):
                raise ConfigError(f"unknown feature statistic {key!r}")
            buf: Tensor = getattr(self, key)
            v = torch.as_tensor(np.asarray(value), dtype=buf.dtype).reshape(-1)
            if v.shape != buf.shape:
                raise ConfigError(f"feature statistic {key!r} needs {buf.numel()} values, "
                                  f"got {v.numel()}")
            if key.endswith("_std"):
                v = torch.where(v > 1e-6, v, torch.ones_like(v))
            buf.copy_(v)

    def _norm(self, x: Tensor, table: str, mask: Tensor | None = None) -> Tensor:
        """Standardize features of ``table``; padding (``mask`` False) becomes 0."""
        x = x.float()
        if self.hparams["normalize"]:
            mean: Tensor = getattr(self, f"{table}_mean")
            std: Tensor = getattr(self, f"{table}_std")
            clip = float(self.hparams["input_clip"])
            x = ((x - mean) / std).clamp(-clip, clip)
        if mask is not None:
            x = x * mask.unsqueeze(-1).to(x.dtype)
        return x

    # -- scoring --------------------------------------------------------------------------------

    @abc.abstractmethod
    def score_batch(self, batch: Mapping[str, Tensor]) -> Tensor:
        """Slowness scores ``[B]`` of a collated batch."""

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:  # type: ignore[override]
        """Slowness scores ``[B]``: lower = predicted faster (compare within one domain)."""
        return self.score_batch(batch).reshape(-1)

    # -- training -------------------------------------------------------------------------------

    def _loss(self, scores: Tensor, batch: Mapping[str, Tensor]) -> Tensor:
        hp = self.hparams
        return losses.combined_loss(
            scores, batch["runtime"], domain_ids=batch["domain_id"], margin=float(hp["margin"]),
            listwise_weight=float(hp["listwise_weight"]), temperature=float(hp["temperature"]))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        scores = self(batch)
        loss = self._loss(scores, batch)
        self.log("train_loss", loss, on_step=False, on_epoch=True, batch_size=scores.numel())
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_outputs = []

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        scores = self(batch)
        loss = self._loss(scores, batch)
        self.log("val_loss", loss, on_step=False, on_epoch=True, batch_size=scores.numel())
        self._val_outputs.append(
            (scores.detach().cpu(), batch["runtime"].detach().cpu(),
             batch["domain_id"].detach().cpu()))
        return loss

    def on_validation_epoch_end(self) -> None:
        if not self._val_outputs:
            return
        o, y, d = (torch.cat(t).double().numpy() for t in zip(*self._val_outputs))
        self._val_outputs = []
        acc = metrics.per_domain(metrics.pairwise_accuracy, o, y, d,
                                 margin=float(self.hparams["margin"]))
        self.log("val_pairwise_acc", float(acc))

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self(batch)

    def configure_optimizers(self) -> Any:
        params = [p for p in self.parameters() if p.requires_grad]
        if not params:
            raise ConfigError("every parameter is frozen: nothing to train")
        opt = torch.optim.Adam(params, lr=float(self.hparams["lr"]),
                               weight_decay=float(self.hparams["weight_decay"]))
        max_epochs = self.trainer.max_epochs if self._trainer is not None else None
        if not max_epochs or max_epochs < 0:
            return opt
        milestones = sorted({max(1, int(round(f * max_epochs)))
                             for f in self.hparams["lr_milestones"]})
        sched = torch.optim.lr_scheduler.MultiStepLR(
            opt, milestones=milestones, gamma=float(self.hparams["lr_gamma"]))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    def freeze_body(self, trainable: str | Sequence[str] = "head") -> None:
        """Freeze every parameter except those whose name starts with one of ``trainable``
        (default: the ``head``)."""
        prefixes = (trainable,) if isinstance(trainable, str) else tuple(trainable)
        names = [n for n, _ in self.named_parameters()]
        if not any(n.startswith(p) for n in names for p in prefixes):
            raise ConfigError(f"no parameter of the {self.kind} ranker starts with "
                              f"{', '.join(map(repr, prefixes))}")
        for name, p in self.named_parameters():
            p.requires_grad_(any(name.startswith(pre) for pre in prefixes))


class LinearRanker(RankerModule):
    """On ``agg`` only: ``Linear(F_agg, 1)``, or ``Linear -> ELU -> Linear`` when
    ``hidden > 0`` (AutoSync's ranker used 12 hidden units)."""

    kind = "linear"
    inputs = frozenset({"agg"})

    def __init__(self, hidden: int = 16, **common: Any) -> None:
        super().__init__(**common)
        self.head = _mlp(int(self.hparams["num_agg"]), hidden, 1, nn.ELU)

    def score_batch(self, batch: Mapping[str, Tensor]) -> Tensor:
        return self.head(self._norm(batch["agg"], "agg")).squeeze(-1)


class ResidualRanker(LinearRanker):
    """The step-time simulator plus a learned correction, on ``agg`` only:
    ``prior_scale * ln(simulated step seconds) + head(agg)`` with the linear ranker's head. The
    simulated step is the ``log10_sim_step_s`` column as featurized (unstandardized); the head's
    output layer starts at zero, so an untrained ranker orders strategies exactly as the
    simulator does, and training (with ``weight_decay`` keeping the correction small) learns
    what the simulation misses. ``prior_scale`` sets how strongly the simulation speaks in the
    pairwise logistic loss: at 10 a strategy simulated 10 % slower scores about 1 higher."""

    kind = "residual"
    starts_ranked = True  # untrained, it ranks as the step simulator

    def __init__(self, hidden: int = 16, prior_scale: float = 10.0, **common: Any) -> None:
        if not prior_scale > 0:
            raise ConfigError(f"prior_scale must be > 0, got {prior_scale}")
        super().__init__(hidden=hidden, **common)
        last = self.head if isinstance(self.head, nn.Linear) else self.head[-1]
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self._prior = float(np.log(10.0)) * float(prior_scale)
        self._sim_col = FEATURE_SCHEMA.agg_index("log10_sim_step_s")

    def score_batch(self, batch: Mapping[str, Tensor]) -> Tensor:
        prior = batch["agg"][:, self._sim_col].float() * self._prior
        return prior + super().score_batch(batch)


class RNNRanker(RankerModule):
    """AutoSync's RankRNN (row MLP -> per-variable sum -> BiLSTM in forward order -> head).

    Defaults are smaller than AutoSync's (row MLP 631 -> 128 -> 32, LSTM 128 x 3 layers) so that
    a few thousand strategies train on a CPU in minutes: row MLP ``row_layers`` layers of
    ``row_hidden`` units ending in ``row_out``, LSTM ``lstm_hidden`` x ``lstm_layers`` per
    direction, head ``Linear(2 L H, head_hidden) -> ReLU -> Linear(1)`` (``head_hidden = 0``:
    one linear layer). ``use_agg`` concatenates the standardized ``agg`` before the head.
    """

    kind = "rnn"

    def __init__(
        self,
        row_hidden: int = 64,
        row_layers: int = 2,
        row_out: int = 32,
        lstm_hidden: int = 64,
        lstm_layers: int = 2,
        head_hidden: int = 64,
        dropout: float = 0.0,
        use_agg: bool = False,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        if row_layers < 1 or lstm_layers < 1:
            raise ConfigError(f"row_layers and lstm_layers must be >= 1, got "
                              f"row_layers={row_layers}, lstm_layers={lstm_layers}")
        layers: list[nn.Module] = []
        width = int(self.hparams["num_row"])
        for _ in range(row_layers - 1):
            layers += [nn.Linear(width, row_hidden), nn.ReLU()]
            width = row_hidden
        layers.append(nn.Linear(width, row_out))
        self.row_mlp = nn.Sequential(*layers)
        self.lstm = nn.LSTM(row_out, lstm_hidden, num_layers=lstm_layers, batch_first=True,
                            bidirectional=True, dropout=dropout if lstm_layers > 1 else 0.0)
        head_in = 2 * lstm_layers * lstm_hidden + (int(self.hparams["num_agg"]) if use_agg else 0)
        self.head = _mlp(head_in, head_hidden)

    def score_batch(self, batch: Mapping[str, Tensor]) -> Tensor:
        mask = batch["row_mask"]
        emb = self.row_mlp(self._norm(batch["rows"], "row", mask))
        slots = _scatter_vars(emb, batch["row_var"], mask, batch["num_vars"])
        lengths = batch["num_vars"].clamp(min=1, max=slots.shape[1]).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(slots, lengths, batch_first=True,
                                                   enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)  # [L * 2, B, H], in batch order
        state = h_n.transpose(0, 1).reshape(slots.shape[0], -1)
        if self.hparams["use_agg"]:
            state = torch.cat([state, self._norm(batch["agg"], "agg")], dim=-1)
        return self.head(state).squeeze(-1)


class GATRanker(RankerModule):
    """Graph attention over rows, servers and groups (see the module docstring).

    Node inputs are projected to ``hidden`` by one linear layer per node type; ``layers``
    ``GATConv`` layers (``heads`` heads of ``hidden // heads`` units, concatenated, residual,
    ELU, edge-type features); mean ⊕ max pooling over the nodes of each strategy (⊕ ``agg`` when
    ``use_agg``) into ``Linear -> ReLU -> Linear``.
    """

    kind = "gat"
    #: distributions a logged GAT simulator needs beyond the package's own
    requirements = ("torch-geometric",)

    #: edge types (one-hot edge features): row-server, row-group, consecutive rows
    NUM_EDGE_TYPES: ClassVar[int] = 3

    def __init__(
        self,
        hidden: int = 32,
        heads: int = 2,
        layers: int = 2,
        head_hidden: int = 64,
        dropout: float = 0.0,
        use_agg: bool = True,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        from torch_geometric.nn import GATConv

        if hidden % heads or layers < 1:
            raise ConfigError(f"gat needs hidden divisible by heads and layers >= 1, got "
                              f"hidden={hidden}, heads={heads}, layers={layers}")
        hp = self.hparams
        self.row_in = nn.Linear(int(hp["num_row"]), hidden)
        self.server_in = nn.Linear(int(hp["num_server"]), hidden)
        self.group_in = nn.Linear(int(hp["num_group"]), hidden)
        self.convs = nn.ModuleList(
            GATConv(hidden, hidden // heads, heads=heads, concat=True, dropout=dropout,
                    edge_dim=self.NUM_EDGE_TYPES, residual=True)
            for _ in range(layers)
        )
        self.act = nn.ELU()
        head_in = 2 * hidden + (int(hp["num_agg"]) if use_agg else 0)
        self.head = _mlp(head_in, head_hidden)

    def graph(self, batch: Mapping[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The strategies of a collated batch as one disjoint graph: node features
        ``[N, hidden]``, ``edge_index [2, E]`` (both directions), edge features ``[E, 3]``
        (one-hot type) and the strategy of every node ``[N]``."""
        rmask, smask, gmask = batch["row_mask"], batch["server_mask"], batch["group_mask"]
        B, R = rmask.shape
        dev = rmask.device
        n_r, n_s = int(rmask.sum()), int(smask.sum())
        rows = self._norm(batch["rows"], "row")[rmask]
        srv = self._norm(batch["server_feats"], "server")[smask]
        grp = self._norm(batch["group_feats"], "group")[gmask]
        x = torch.cat([self.row_in(rows), self.server_in(srv), self.group_in(grp)], dim=0)
        strat = torch.arange(B, device=dev)
        node_batch = torch.cat([
            strat[:, None].expand_as(rmask)[rmask],
            strat[:, None].expand_as(smask)[smask],
            strat[:, None].expand_as(gmask)[gmask],
        ])

        def ids(mask: Tensor, start: int) -> Tensor:
            out = torch.full(mask.shape, -1, dtype=torch.long, device=dev)
            out[mask] = torch.arange(start, start + int(mask.sum()), device=dev)
            return out

        row_id, srv_id, grp_id = ids(rmask, 0), ids(smask, n_r), ids(gmask, n_r + n_s)
        b_of = strat[:, None].expand(B, R)
        parts: list[tuple[Tensor, Tensor, int]] = []
        for key, table, etype in (("row_server", srv_id, 0), ("row_group", grp_id, 1)):
            local = batch[key]
            sel = rmask & (local >= 0)
            parts.append((row_id[sel], table[b_of[sel], local[sel]], etype))
        nxt = rmask[:, 1:] & rmask[:, :-1]
        parts.append((row_id[:, :-1][nxt], row_id[:, 1:][nxt], 2))
        src = torch.cat([torch.cat([a, b]) for a, b, _ in parts])
        dst = torch.cat([torch.cat([b, a]) for a, b, _ in parts])
        etype = torch.cat([torch.full((2 * a.numel(),), t, dtype=torch.long, device=dev)
                           for a, _, t in parts])
        edge_attr = nn.functional.one_hot(etype, self.NUM_EDGE_TYPES).to(x.dtype)
        return x, torch.stack([src, dst]), edge_attr, node_batch

    def score_batch(self, batch: Mapping[str, Tensor]) -> Tensor:
        from torch_geometric.nn import global_max_pool, global_mean_pool

        x, edge_index, edge_attr, node_batch = self.graph(batch)
        for conv in self.convs:
            x = self.act(conv(x, edge_index, edge_attr))
        B = batch["row_mask"].shape[0]
        pooled = torch.cat([global_mean_pool(x, node_batch, size=B),
                            global_max_pool(x, node_batch, size=B)], dim=-1)
        if self.hparams["use_agg"]:
            pooled = torch.cat([pooled, self._norm(batch["agg"], "agg")], dim=-1)
        return self.head(pooled).squeeze(-1)


class TransformerRanker(RankerModule):
    """A set encoder (no positional encoding) over variables or rows (see the module
    docstring): row MLP to ``d_model``, ``layers`` pre-norm encoder layers (``nhead`` heads,
    ``dim_feedforward``), masked mean ⊕ max pooling ⊕ ``agg`` into ``Linear -> ReLU -> Linear``.
    """

    kind = "transformer"

    def __init__(
        self,
        d_model: int = 32,
        nhead: int = 4,
        layers: int = 2,
        dim_feedforward: int = 64,
        head_hidden: int = 64,
        dropout: float = 0.0,
        tokens: str = "variables",
        use_agg: bool = True,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        if tokens not in ("variables", "rows"):
            raise ConfigError(f"tokens must be 'variables' or 'rows', got {tokens!r}")
        if d_model % nhead or layers < 1:
            raise ConfigError(f"transformer needs d_model divisible by nhead and layers >= 1, "
                              f"got d_model={d_model}, nhead={nhead}, layers={layers}")
        hp = self.hparams
        self.row_mlp = nn.Sequential(nn.Linear(int(hp["num_row"]), d_model), nn.ReLU(),
                                     nn.Linear(d_model, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=dropout,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        head_in = 2 * d_model + (int(hp["num_agg"]) if use_agg else 0)
        self.head = _mlp(head_in, head_hidden)

    def score_batch(self, batch: Mapping[str, Tensor]) -> Tensor:
        mask = batch["row_mask"]
        emb = self.row_mlp(self._norm(batch["rows"], "row", mask))
        if self.hparams["tokens"] == "variables":
            tok = _scatter_vars(emb, batch["row_var"], mask, batch["num_vars"])
            tmask = torch.arange(tok.shape[1], device=tok.device)[None, :] < batch[
                "num_vars"][:, None]
        else:
            tok, tmask = emb, mask
        h = self.norm(self.encoder(tok, src_key_padding_mask=~tmask))
        pooled = _masked_mean_max(h, tmask)
        if self.hparams["use_agg"]:
            pooled = torch.cat([pooled, self._norm(batch["agg"], "agg")], dim=-1)
        return self.head(pooled).squeeze(-1)


#: kind -> ranker class
RANKERS: dict[str, type[RankerModule]] = {
    cls.kind: cls for cls in (LinearRanker, ResidualRanker, RNNRanker, GATRanker,
                              TransformerRanker)
}


def ranker_hparams(kind: str) -> dict[str, Any]:
    """The hyper-parameters of ranker ``kind`` with their defaults (kind-specific and common)."""
    cls = _ranker_class(kind)
    out: dict[str, Any] = {}
    for c in (cls, RankerModule):
        for name, p in inspect.signature(c.__init__).parameters.items():
            if name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                default = p.default
                out[name] = list(default) if isinstance(default, tuple) else default
    return out


def _ranker_class(kind: str) -> type[RankerModule]:
    try:
        return RANKERS[kind]
    except KeyError:
        raise UnknownNameError(
            f"unknown ranker kind {kind!r} (known: {', '.join(RANKERS)})") from None


def build_ranker(kind: str, hparams: Mapping[str, Any] | None = None, *,
                 seed: int | None = None) -> RankerModule:
    """A new ranker of ``kind`` with ``hparams`` (others default). With ``seed``, its initial
    weights come from ``torch.manual_seed(seed)`` inside ``torch.random.fork_rng`` (the global
    generator is left as it was); without, from the global generator."""
    cls = _ranker_class(kind)
    hp = dict(hparams or {})
    known = ranker_hparams(kind)
    unknown = sorted(set(hp) - set(known))
    if unknown:
        raise ConfigError(f"unknown hyper-parameter {unknown[0]!r} for the {kind} ranker "
                          f"(known: {', '.join(sorted(known))})")
    if seed is None:
        return cls(**hp)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(**hp)
