"""Ranking losses for learned simulators (plain functions on torch tensors).

Conventions shared by every function here:

* ``scores`` are **slowness** scores, as in AutoSync: a higher score predicts a slower strategy,
  and the search picks the strategy with the lowest score.
* ``runtimes`` are measured step times (seconds; > 0). They are targets only (no gradient flows
  into them).
* ``domain_ids`` (optional, one integer per item) say which domain (model + cluster) an item was
  measured on. Runtimes of different domains are not comparable, so items are only ever compared
  with items of the same domain; ``None`` means all items share one domain.
* ``mask`` (optional, bool per item) drops items (padding) entirely.
* When nothing is left to compare, a loss returns ``0`` connected to ``scores`` (so that
  ``backward()`` works and gives zero gradients).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["pairwise_logistic_loss", "listwise_loss", "combined_loss"]


def _flat(
    scores: torch.Tensor,
    runtimes: torch.Tensor,
    domain_ids: torch.Tensor | None,
    mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    scores = scores.reshape(-1)
    runtimes = runtimes.reshape(-1).detach().to(scores.dtype)
    if runtimes.numel() != scores.numel():
        raise ValueError(
            f"scores and runtimes need one value per item, got {scores.numel()} scores and "
            f"{runtimes.numel()} runtimes"
        )
    n = scores.numel()
    if domain_ids is None:
        domains = torch.zeros(n, dtype=torch.long, device=scores.device)
    else:
        domains = domain_ids.reshape(-1).to(device=scores.device)
        if domains.numel() != n:
            raise ValueError(f"domain_ids needs one id per item ({n}), got {domains.numel()}")
    if mask is None:
        valid = torch.ones(n, dtype=torch.bool, device=scores.device)
    else:
        valid = mask.reshape(-1).to(device=scores.device, dtype=torch.bool)
        if valid.numel() != n:
            raise ValueError(f"mask needs one flag per item ({n}), got {valid.numel()}")
    return scores, runtimes, domains, valid


def _zero(scores: torch.Tensor) -> torch.Tensor:
    return (scores * 0.0).sum()


def pairwise_logistic_loss(
    scores: torch.Tensor,
    runtimes: torch.Tensor,
    *,
    domain_ids: torch.Tensor | None = None,
    margin: float = 0.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """RankNet / pairwise logistic loss over all pairs of items of the same domain.

    For every unordered pair ``{i, j}`` of valid items with the same domain id:
    ``s_ij = sign(y_i - y_j)`` and ``loss_ij = log(1 + exp(-s_ij * (o_i - o_j)))`` (computed as
    ``softplus``), which is small when the slower item has the higher score. The result is the
    mean over the pairs that count.

    Pairs that do not count: pairs across domains; ties (``y_i == y_j``); and, with ``margin`` > 0,
    near-ties whose runtimes differ by less than ``margin`` relative to the faster of the two:
    ``|y_i - y_j| < margin * min(y_i, y_j)`` (``margin=0.005``: pairs within 0.5 % are dropped).
    This is AutoSync's threshold tau applied relatively, so that it means the same for a 50 ms and
    a 5 s step; measurement noise of that size would otherwise teach the ranker random orders.
    Unlike AutoSync's penalty variant, near-ties are dropped, not resolved in favour of the less
    partitioned strategy.
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0 (a relative runtime difference), got {margin}")
    o, y, dom, valid = _flat(scores, runtimes, domain_ids, mask)
    n = o.numel()
    if n < 2:
        return _zero(scores)
    diff_y = y[:, None] - y[None, :]
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device=o.device), diagonal=1)
    keep = (
        upper
        & (dom[:, None] == dom[None, :])
        & valid[:, None]
        & valid[None, :]
        & (diff_y != 0)
    )
    if margin > 0:
        faster = torch.minimum(y[:, None], y[None, :])
        keep &= diff_y.abs() >= margin * faster
    if not bool(keep.any()):
        return _zero(scores)
    sign = torch.sign(diff_y[keep])
    diff_o = (o[:, None] - o[None, :])[keep]
    return F.softplus(-sign * diff_o).mean()


def listwise_loss(
    scores: torch.Tensor,
    runtimes: torch.Tensor,
    domain_ids: torch.Tensor | None = None,
    temperature: float = 1.0,
    *,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """ListNet loss: per domain, the cross-entropy between a target and a predicted distribution
    over its items, averaged over the domains with at least two valid items.

    Target ``p = softmax(-y / (T * median(y)))`` (the domain's median runtime, ``torch.nanmedian``:
    the lower median for an even count): faster items get more mass, and dividing by the median
    makes the target independent of the domain's time scale; a smaller ``temperature`` T sharpens
    it (T = 0.05 turns a 5 % runtime difference into a logit difference of about 1). Prediction
    ``q = softmax(-o)`` (low slowness score = likely fast). Loss ``-sum_i p_i log q_i``; its
    minimum over scores is the entropy of ``p``, not 0.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    o, y, dom, valid = _flat(scores, runtimes, domain_ids, mask)
    if o.numel() == 0:
        return _zero(scores)
    uniq = torch.unique(dom[valid])
    if uniq.numel() == 0:
        return _zero(scores)
    member = (dom[None, :] == uniq[:, None]) & valid[None, :]  # [D, N]
    counts = member.sum(dim=1)
    member = member[counts >= 2]
    if member.shape[0] == 0:
        return _zero(scores)
    nan = torch.full_like(y, float("nan"))
    med = torch.nanmedian(torch.where(member, y[None, :], nan[None, :]), dim=1).values
    med = med.clamp_min(torch.finfo(y.dtype).tiny)
    neg_inf = torch.tensor(float("-inf"), dtype=o.dtype, device=o.device)
    target = torch.softmax(
        torch.where(member, -y[None, :] / (temperature * med[:, None]), neg_inf), dim=1
    )
    log_q = torch.log_softmax(torch.where(member, -o[None, :], neg_inf), dim=1)
    per_domain = -(target * torch.where(member, log_q, torch.zeros_like(log_q))).sum(dim=1)
    return per_domain.mean()


def combined_loss(
    scores: torch.Tensor,
    runtimes: torch.Tensor,
    *,
    domain_ids: torch.Tensor | None = None,
    margin: float = 0.0,
    mask: torch.Tensor | None = None,
    listwise_weight: float = 0.0,
    temperature: float = 1.0,
) -> torch.Tensor:
    """``pairwise_logistic_loss + listwise_weight * listwise_loss`` (same items, domains, mask)."""
    if listwise_weight < 0:
        raise ValueError(f"listwise_weight must be >= 0, got {listwise_weight}")
    loss = pairwise_logistic_loss(scores, runtimes, domain_ids=domain_ids, margin=margin,
                                  mask=mask)
    if listwise_weight > 0:
        loss = loss + listwise_weight * listwise_loss(
            scores, runtimes, domain_ids, temperature, mask=mask)
    return loss
