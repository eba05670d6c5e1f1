"""A stored collection or search run continues only as it was measured: the same launcher,
warm-up, timed iterations and timeout; otherwise one line naming the setting, the stored and
the given value, exit 2, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from autosync_transfer.dataset.collect import record_for
from autosync_transfer.dataset.store import TrialStore
from autosync_transfer.domains.catalog import get_domain
from autosync_transfer.runtime.trial import Protocol, TrialResult
from autosync_transfer.strategies.builders import build

STORED = Protocol(warmup=1, iters=3, timeout_s=60)


def _stored(path: Path, record_id: str | None = None, launcher: str = "local") -> bytes:
    d = get_domain("ncf-A")
    s = build("ps", d)
    rec = record_for(d, s, TrialResult("ok", [0.1, 0.1, 0.1]), STORED, launcher, seed=0,
                     record_id=record_id or f"{d.name}/{s.id}")
    TrialStore(path).append(rec)
    return path.read_bytes()


@pytest.mark.parametrize("flags, message", [
    (["--warmup", "2", "--iters", "3", "--timeout", "60"], "--warmup 1, not 2"),
    (["--warmup", "1", "--iters", "5", "--timeout", "60"], "--iters 3, not 5"),
    (["--warmup", "1", "--iters", "3", "--timeout", "90"], "--timeout 60.0, not 90.0"),
    (["--warmup", "1", "--iters", "3"], "--timeout 60.0, not 300.0"),
])
def test_collect_refuses_another_protocol(tmp_path: Path, cli, flags: list[str],
                                          message: str) -> None:
    store = tmp_path / "trials.jsonl"
    before = _stored(store)
    res = cli("collect", "ncf-A", "--launcher", "local", "-n", "3", "--store", str(store),
              "--reference-every", "0", *flags)
    assert res.code == 2, res.err
    line = " ".join(res.err.split())
    assert message in line and "use another store" in line
    assert len([ln for ln in res.err.splitlines() if "error" in ln]) == 1
    assert store.read_bytes() == before
    assert not Path(f"{store}.meta.json").exists()  # nothing written


def test_collect_refuses_another_launcher(tmp_path: Path) -> None:
    from autosync_transfer.dataset.collect import collect
    from autosync_transfer.errors import ConfigError

    store = tmp_path / "trials.jsonl"
    _stored(store, launcher="emulated")
    with pytest.raises(ConfigError, match=r"launcher='emulated', not 'local'"):
        collect(get_domain("ncf-A"), store, trials=3, launcher="local", protocol=STORED)


def test_search_refuses_another_protocol_or_launcher(tmp_path: Path) -> None:
    from autosync_transfer.errors import ConfigError
    from autosync_transfer.search.config import SearchConfig
    from autosync_transfer.search.loop import Searcher

    store = tmp_path / "run.jsonl"
    cfg = SearchConfig(method="random", budget=4, seed=1)
    d = get_domain("ncf-A")
    first = Searcher(d, store, cfg, launcher="local", protocol=STORED)
    _stored(store, record_id=f"{first._prefix()}reference/ps")
    first._check_resumable()  # the same settings continue it
    Searcher(d, store, cfg.model_copy(update={"budget": 9}), launcher="local",
             protocol=STORED)._check_resumable()
    for kw, match in [({"protocol": Protocol(warmup=1, iters=4, timeout_s=60)}, r"iters=3, not 4"),
                      ({"protocol": Protocol(warmup=0, iters=3, timeout_s=60)}, r"warmup=1, not 0"),
                      ({"protocol": Protocol(warmup=1, iters=3)}, r"timeout_s=60.0, not 300.0"),
                      ({"launcher": "emulated", "protocol": STORED},
                       r"launcher='local', not 'emulated'")]:
        kw = {"launcher": "local", **kw}
        with pytest.raises(ConfigError, match=match):
            Searcher(d, store, cfg, **kw)._check_resumable()
    # another run in the same store (another seed) is not bound by this one's settings
    Searcher(d, store, cfg.model_copy(update={"seed": 2}), launcher="emulated")._check_resumable()


def test_search_cli_names_the_flag(tmp_path: Path, cli) -> None:
    store = tmp_path / "run.jsonl"
    from autosync_transfer.search.config import SearchConfig, run_name
    from autosync_transfer.search.resume import record_prefix

    name = run_name(SearchConfig(method="random", seed=0), False)
    before = _stored(store, record_id=f"{record_prefix('ncf-A', name)}reference/ps")
    res = cli("search", "ncf-A", "--launcher", "local", "--method", "random", "--budget", "4",
              "--no-log", "--warmup", "1", "--iters", "7", "--timeout", "60", "--store", str(store))
    assert res.code == 2, res.err
    assert "--iters 3, not 7" in " ".join(res.err.split())
    assert store.read_bytes() == before
