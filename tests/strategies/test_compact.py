from __future__ import annotations

import pytest

from autosync_transfer.domains.catalog import get_domain
from autosync_transfer.errors import SpecError
from autosync_transfer.strategies.builders import BUILDERS, build
from autosync_transfer.strategies.compact import decode, encode
from autosync_transfer.strategies.sampler import StrategySampler, preset


@pytest.mark.parametrize("domain_name", ["bert-B", "ncf-C", "vgg16-s-A"])
def test_round_trip_is_exact_and_small(domain_name):
    d = get_domain(domain_name)
    strategies = [build(b, d) for b in BUILDERS]
    strategies += StrategySampler(d, seed=3).sample_n(30)
    strategies += StrategySampler(d, preset("compressed"), seed=4).sample_n(10)
    for s in strategies:
        c = encode(s, d.model)
        assert decode(c, d.model) == s
        assert len(str(c)) < len(s.to_json()) / 3


def test_wrong_graph_is_an_error():
    a, b = get_domain("bert-A"), get_domain("bert-3l-A")
    s = build("ps", a)
    with pytest.raises(SpecError):
        encode(s, b.model)
    with pytest.raises(SpecError, match="entries for"):
        decode(encode(s, a.model), b.model)
