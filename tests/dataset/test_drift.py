"""Drift-normalized labels: trials divided by the reference interpolated at their time."""

from __future__ import annotations

import pandas as pd
import pytest

from autosync_transfer.dataset.loader import drift_normalized, normalized_reference_noise


def _table() -> pd.DataFrame:
    rows = [  # (domain, strategy, timestamp, median_s, reference)
        ("d", "ref", "2026-01-01T00:00:00+00:00", 1.0, True),
        ("d", "a", "2026-01-01T00:00:00+00:00", 2.0, False),
        ("d", "b", "2026-01-01T00:30:00+00:00", 3.0, False),  # reference 1.5 here
        ("d", "ref", "2026-01-01T01:00:00+00:00", 2.0, True),
        ("d", "c", "2026-01-01T02:00:00+00:00", 4.0, False),  # after the last: 2.0
        ("e", "x", "2026-01-01T00:00:00+00:00", 5.0, False),  # no reference: unchanged
    ]
    return pd.DataFrame([{"domain": d, "strategy_id": s, "timestamp": t, "median_s": m,
                          "reference": r, "status": "ok"} for d, s, t, m, r in rows])


def test_trials_are_divided_by_the_interpolated_reference() -> None:
    out = drift_normalized(_table())
    scale = 1.5  # median of the references 1.0 and 2.0
    assert list(out["median_s"]) == pytest.approx(
        [scale, 2.0 * scale, 3.0 / 1.5 * scale, scale, 4.0 / 2.0 * scale, 5.0])
    assert list(_table()["median_s"]) == [1.0, 2.0, 3.0, 2.0, 4.0, 5.0]  # input untouched


def test_normalized_reference_noise_leaves_one_out() -> None:
    df = _table()
    assert normalized_reference_noise(df) is None  # two references: nothing to leave out
    third = pd.DataFrame([{"domain": "d", "strategy_id": "ref", "median_s": 3.0,
                           "timestamp": "2026-01-01T02:00:00+00:00", "reference": True,
                           "status": "ok"}])
    noise = normalized_reference_noise(pd.concat([df, third], ignore_index=True))
    # ratios: 1/2 (nearest is 2.0), 2/2 (interpolated between 1 and 3), 3/2
    assert noise["measurements"] == 3
    assert noise["median_robust_cv"] == pytest.approx(1.4826 * 0.5)


def test_label_margin_is_the_95_percent_band_of_two_labels() -> None:
    import math
    import statistics

    from autosync_transfer.dataset.loader import label_margin
    from autosync_transfer.errors import ConfigError

    df = _table()
    cv = statistics.stdev([1.0, 2.0]) / 1.5  # the one reference strategy's plain CV
    assert label_margin(df[df["domain"] == "d"]) == pytest.approx(
        math.expm1(1.959964 * math.sqrt(2.0) * cv), rel=1e-5)
    assert label_margin(df[df["domain"] == "d"], confidence=0.5) < label_margin(
        df[df["domain"] == "d"])
    assert label_margin(df[df["domain"] == "e"]) == 0.0  # no re-measurement: every pair counts
    with pytest.raises(ConfigError, match="confidence must be in"):
        label_margin(df, confidence=1.0)


def test_parse_margin_takes_noise_or_a_number_and_names_a_bad_value() -> None:
    from autosync_transfer.dataset.loader import parse_margin
    from autosync_transfer.errors import ConfigError

    assert parse_margin("noise") is None
    assert parse_margin("0") == 0.0 and parse_margin("0.15") == pytest.approx(0.15)
    for bad in ("-0.1", "nan", "wide", ""):
        with pytest.raises(ConfigError) as e:
            parse_margin(bad)
        assert str(e.value) == f"margin must be noise or a number >= 0, got {bad!r}"


def test_a_tables_two_margins_name_their_option() -> None:
    from autosync_transfer.dataset.loader import parse_margins
    from autosync_transfer.errors import ConfigError

    assert parse_margins("0.1", None) == (0.1, 0.1)  # the gate takes the loss's margin
    assert parse_margins("0", "noise") == (0.0, None)
    with pytest.raises(ConfigError, match=r"^--margin must be noise or a number >= 0, got '-1'$"):
        parse_margins("-1", "noise")
    with pytest.raises(ConfigError, match=r"^--start-margin must be .*, got 'x'$"):
        parse_margins("0", "x")
