"""The step simulator's behaviour is versioned with the feature schema: its output on reference
strategies (every builder on five catalog domains, with the fallback physics and with the
shipped profiles and calibrations, on an emulated host and on separate hosts), and the analytical
baseline's on the same strategies, are stored per ``FEATURE_SCHEMA_VERSION``. A change to the simulator that moves any of it must bump the schema
(learned rankers read the simulator's terms as ``sim_*`` features, so registered simulators
would otherwise silently change), then regenerate the reference:

    python -m tests.rankers.test_stepsim_behaviour --update

``--update`` refuses (exit 2) when the values changed but the schema version did not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

REFERENCE = Path(__file__).with_name("stepsim_behaviour.json")
DOMAINS = ("bert-3l-A", "bert-B", "ncf-C", "vgg16-s-B", "bert-12l-C")
TERMS = ("step_s", "sync_end_s", "ps_s", "nic_contention_s")


def outputs() -> dict[str, Any]:
    """``{"schema": N, "values": {"<domain>/<physics>/<host>/<builder>": [terms...]}}``."""
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.rankers.costmodel import AnalyticalRanker
    from autosync_transfer.rankers.features import FEATURE_SCHEMA_VERSION
    from autosync_transfer.rankers.physics import physics_for
    from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimulator
    from autosync_transfer.strategies.builders import build, builder_names

    values: dict[str, list[float]] = {}
    for name in DOMAINS:
        domain = get_domain(name)
        strategies, names = [], []
        for b in builder_names():
            try:
                strategies.append(build(b, domain))
                names.append(b)
            except Exception:  # noqa: BLE001 - a builder that does not apply to this model
                continue
        world = domain.cluster.world_size
        for b, total in zip(names, AnalyticalRanker().score(strategies, domain)):
            values[f"{name}/analytical/{b}"] = [float(total)]
        for physics in ("fallback", "measured"):
            for host, config in (("own", StepSimConfig()),
                                 ("shared", StepSimConfig(host_processes=world, host_cores=2))):
                p = physics_for(domain, physics, "emulated", config=config)
                out = StepSimulator(domain, p.profile, p.calibration, config).simulate(strategies)
                for b, row in zip(names, out):
                    values[f"{name}/{physics}/{host}/{b}"] = [float(row[t]) for t in TERMS]
    return {"schema": FEATURE_SCHEMA_VERSION, "values": values}


def _differences(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(got["values"]) | set(want["values"])):
        a, b = got["values"].get(key), want["values"].get(key)
        if a is None or b is None or not np.allclose(a, b, rtol=1e-9, atol=1e-12):
            out.append(f"{key}: {b} -> {a}")
    return out


def test_the_simulators_output_is_fixed_per_schema_version() -> None:
    want = json.loads(REFERENCE.read_text())
    got = outputs()
    assert len(got["values"]) >= 80
    assert got["schema"] == want["schema"], (
        f"the feature schema is v{got['schema']}, the stored reference v{want['schema']}: "
        f"regenerate it with `python -m tests.rankers.test_stepsim_behaviour --update`")
    diff = _differences(got, want)
    assert not diff, (
        f"the step simulator's output changed at schema v{got['schema']} ({len(diff)} values, "
        f"e.g. {diff[0]}); bump FEATURE_SCHEMA_VERSION in rankers/features.py, then run "
        f"`python -m tests.rankers.test_stepsim_behaviour --update`")


def main(argv: list[str]) -> int:
    if argv != ["--update"]:
        print("usage: python -m tests.rankers.test_stepsim_behaviour --update", file=sys.stderr)
        return 2
    got = outputs()
    if REFERENCE.exists():
        want = json.loads(REFERENCE.read_text())
        if want["schema"] == got["schema"] and _differences(got, want):
            print(f"error: the simulator's output changed but the feature schema is still "
                  f"v{got['schema']}: bump FEATURE_SCHEMA_VERSION first", file=sys.stderr)
            return 2
    REFERENCE.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    print(f"wrote {REFERENCE} ({len(got['values'])} values, schema v{got['schema']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
