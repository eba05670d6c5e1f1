"""Ranking losses on hand-computed cases (scores are slowness scores: higher = slower)."""

from __future__ import annotations

import math

import pytest
import torch

from autosync_transfer.rankers.losses import combined_loss, listwise_loss, pairwise_logistic_loss


def sp(x: float) -> float:
    """log(1 + exp(x))"""
    return math.log1p(math.exp(x))


def t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# -- pairwise -----------------------------------------------------------------------------------


def test_pairwise_three_strategies_exact_value() -> None:
    # runtimes 1.0 < 1.25 < 2.0; scores 0.2, 0.1, 0.3: the first pair is ranked the wrong way
    o, y = t([0.2, 0.1, 0.3]), t([1.0, 1.25, 2.0])
    # pair (0,1): s = -1, o0 - o1 = +0.1 -> log(1 + e^0.1); (0,2): -0.1 -> log(1 + e^-0.1);
    # (1,2): -0.2 -> log(1 + e^-0.2)
    expected = (sp(0.1) + sp(-0.1) + sp(-0.2)) / 3
    assert pairwise_logistic_loss(o, y).item() == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.66231, abs=1e-5)


def test_pairwise_is_symmetric_in_item_order() -> None:
    o, y = t([0.2, 0.1, 0.3]), t([1.0, 1.25, 2.0])
    perm = torch.tensor([2, 0, 1])
    assert pairwise_logistic_loss(o[perm], y[perm]).item() == pytest.approx(
        pairwise_logistic_loss(o, y).item(), rel=1e-12)


def test_pairs_across_domains_are_excluded() -> None:
    o, y = t([0.0, 1.0, 5.0, -1.0]), t([1.0, 2.0, 10.0, 20.0])
    domains = torch.tensor([0, 0, 1, 1])
    # only (0,1): s = -1, d = -1 -> log(1 + e^-1); and (2,3): s = -1, d = 6 -> log(1 + e^6)
    expected = (sp(-1.0) + sp(6.0)) / 2
    got = pairwise_logistic_loss(o, y, domain_ids=domains)
    assert got.item() == pytest.approx(expected, rel=1e-12)
    # without domain ids all 6 pairs count, which gives another value
    assert pairwise_logistic_loss(o, y).item() != pytest.approx(expected)


def test_margin_drops_near_ties_relative_to_the_faster() -> None:
    o, y = t([0.5, 0.0, 1.0]), t([1.0, 1.004, 2.0])
    all_pairs = (sp(0.5) + sp(-0.5) + sp(-1.0)) / 3  # (0,1), (0,2), (1,2)
    assert pairwise_logistic_loss(o, y).item() == pytest.approx(all_pairs, rel=1e-12)
    # |1.004 - 1.0| = 0.004 < 0.005 * 1.0: the pair (0,1) is dropped
    kept = (sp(-0.5) + sp(-1.0)) / 2
    assert pairwise_logistic_loss(o, y, margin=0.005).item() == pytest.approx(kept, rel=1e-12)
    # 0.004 >= 0.003 * 1.0: kept
    assert pairwise_logistic_loss(o, y, margin=0.003).item() == pytest.approx(all_pairs,
                                                                               rel=1e-12)
    with pytest.raises(ValueError):
        pairwise_logistic_loss(o, y, margin=-0.1)


def test_ties_are_ignored() -> None:
    o, y = t([3.0, -3.0, 0.0]), t([1.0, 1.0, 2.0])
    expected = (sp(3.0) + sp(-3.0)) / 2  # (0,2): s=-1, d=3; (1,2): s=-1, d=-3
    assert pairwise_logistic_loss(o, y).item() == pytest.approx(expected, rel=1e-12)


def test_mask_drops_items() -> None:
    o, y = t([0.2, 0.1, 0.3, 99.0]), t([1.0, 1.25, 2.0, 0.1])
    mask = torch.tensor([True, True, True, False])
    expected = (sp(0.1) + sp(-0.1) + sp(-0.2)) / 3
    assert pairwise_logistic_loss(o, y, mask=mask).item() == pytest.approx(expected, rel=1e-12)


def test_no_valid_pair_gives_zero_with_gradient() -> None:
    for o, y, dom in [
        (t([0.3, 0.7]), t([1.0, 1.0]), None),  # a tie
        (t([0.3, 0.7]), t([1.0, 2.0]), torch.tensor([0, 1])),  # different domains
        (t([0.3]), t([1.0]), None),  # one item
    ]:
        o.requires_grad_(True)
        loss = pairwise_logistic_loss(o, y, domain_ids=dom)
        assert loss.item() == 0.0
        loss.backward()
        assert o.grad is not None and (o.grad == 0).all()


def test_gradient_pushes_the_slower_strategy_up() -> None:
    o = t([0.0, 0.0]).requires_grad_(True)
    y = t([1.0, 2.0])  # item 1 is slower
    pairwise_logistic_loss(o, y).backward()
    assert o.grad is not None
    # d/d o1 of log(1 + exp(-(o1 - o0))) at 0 = -1/2: descending raises o1 and lowers o0
    assert o.grad.tolist() == pytest.approx([0.5, -0.5])


# -- listwise -----------------------------------------------------------------------------------


def listnet(o: list[float], y: list[float], temperature: float) -> float:
    med = sorted(y)[(len(y) - 1) // 2]  # lower median
    p = [math.exp(-v / (temperature * med)) for v in y]
    p = [v / sum(p) for v in p]
    z = sum(math.exp(-v) for v in o)
    return -sum(pi * (-oi - math.log(z)) for pi, oi in zip(p, o))


def test_listwise_exact_value() -> None:
    o, y = [0.5, 0.0, 1.0], [1.0, 2.0, 4.0]
    # median 2, T = 0.5: target softmax(-[1, 2, 4] / 1) = softmax([-1, -2, -4])
    p = [math.exp(-1), math.exp(-2), math.exp(-4)]
    p = [v / sum(p) for v in p]
    z = math.exp(-0.5) + math.exp(0.0) + math.exp(-1.0)
    q = [math.exp(-0.5) / z, 1.0 / z, math.exp(-1.0) / z]
    expected = -sum(pi * math.log(qi) for pi, qi in zip(p, q))
    assert listnet(o, y, 0.5) == pytest.approx(expected)
    assert listwise_loss(t(o), t(y), temperature=0.5).item() == pytest.approx(expected, rel=1e-12)


def test_listwise_uniform_scores_give_log_n() -> None:
    assert listwise_loss(t([0.0, 0.0]), t([1.0, 3.0])).item() == pytest.approx(math.log(2))


def test_listwise_averages_over_domains() -> None:
    o = [0.5, 0.0, 1.0, 2.0, -1.0, 0.3]
    y = [1.0, 2.0, 4.0, 0.1, 0.2, 0.15]
    dom = torch.tensor([0, 0, 0, 1, 1, 1])
    expected = (listnet(o[:3], y[:3], 1.0) + listnet(o[3:], y[3:], 1.0)) / 2
    assert listwise_loss(t(o), t(y), dom).item() == pytest.approx(expected, rel=1e-12)
    # a domain with a single item is left out; a mask removes items
    dom2 = torch.tensor([0, 0, 0, 1, 1, 2])
    mask = torch.tensor([True, True, True, True, True, False])
    expected2 = (listnet(o[:3], y[:3], 1.0) + listnet(o[3:5], y[3:5], 1.0)) / 2
    assert listwise_loss(t(o), t(y), dom2, mask=mask).item() == pytest.approx(expected2,
                                                                               rel=1e-12)
    assert listwise_loss(t(o), t(y), torch.tensor([0, 0, 0, 1, 1, 2])).item() == (
        pytest.approx(expected2, rel=1e-12))


def test_listwise_prefers_the_right_order_and_has_gradients() -> None:
    y = t([1.0, 2.0, 4.0])
    good = listwise_loss(t([0.0, 1.0, 2.0]), y, temperature=0.2)
    bad = listwise_loss(t([2.0, 1.0, 0.0]), y, temperature=0.2)
    assert good.item() < bad.item()
    o = t([0.0, 0.0]).requires_grad_(True)
    loss = listwise_loss(o, t([1.0, 1.0]))
    loss.backward()
    assert o.grad is not None and torch.isfinite(o.grad).all()
    with pytest.raises(ValueError):
        listwise_loss(o, t([1.0, 1.0]), temperature=0.0)


# -- combined -----------------------------------------------------------------------------------


def test_combined_is_pairwise_plus_weighted_listwise() -> None:
    o, y = t([0.2, 0.1, 0.3]), t([1.0, 1.25, 2.0])
    pw = pairwise_logistic_loss(o, y, margin=0.01)
    lw = listwise_loss(o, y, temperature=0.5)
    got = combined_loss(o, y, margin=0.01, listwise_weight=0.3, temperature=0.5)
    assert got.item() == pytest.approx(pw.item() + 0.3 * lw.item(), rel=1e-12)
    assert combined_loss(o, y).item() == pytest.approx(pairwise_logistic_loss(o, y).item())
