"""The command surface, and that it works end to end on catalog domains."""

from __future__ import annotations

import json
import subprocess
import sys

COMMANDS = {
    "domains": ["list", "show"],
    "clusters": ["list", "show"],
    "strategies": ["baseline", "sample", "show", "validate"],
}


def test_command_surface_is_pinned():
    from typer.main import get_command

    from autosync_transfer.cli import app

    root = get_command(app)
    groups = {name: sorted(cmd.commands) for name, cmd in root.commands.items()  # type: ignore[attr-defined]
              if hasattr(cmd, "commands")}
    for noun, verbs in COMMANDS.items():
        assert set(verbs) <= set(groups[noun]), (noun, groups[noun])


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys\n"
        "from autosync_transfer.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'tensorflow', 'lightning', 'mlflow') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "domains" in proc.stdout and "strategies" in proc.stdout


def test_domains_show_states_the_model(cli):
    res = cli("domains", "show", "bert-A", "--json")
    assert res.code == 0, res.err
    data = json.loads(res.out)
    assert data["model"]["config"]["layers"] == 6
    assert data["model"]["config"]["hidden"] == 256
    assert "scaled" in data["model"]["description"]
    assert data["cluster"]["world_size"] == 4
    res = cli("domains", "show", "bert-large-B")
    assert res.code == 0 and "bert-large" in res.out


def test_lists(cli):
    for argv in (("domains", "list"), ("clusters", "list"), ("domains", "list", "--json")):
        res = cli(*argv)
        assert res.code == 0, res.err
    data = json.loads(cli("domains", "list", "--json").out)
    assert {"bert-A", "bert-B", "bert-3l-A", "ncf-A", "bert-large-B"} <= {d["domain"] for d in data}


def test_clusters_show_yaml_round_trips(cli, tmp_path):
    res = cli("clusters", "show", "B", "--yaml")
    assert res.code == 0
    path = tmp_path / "b.yml"
    path.write_text(res.out)
    again = cli("domains", "show", "ncf", "--cluster-file", str(path), "--json")
    assert again.code == 0, again.err
    assert json.loads(again.out)["cluster"]["world_size"] == 4


def test_sample_is_reproducible(cli, tmp_path):
    a = cli("strategies", "sample", "bert-3l-B", "-n", "5", "--seed", "3", "--json").out
    b = cli("strategies", "sample", "bert-3l-B", "-n", "5", "--seed", "3", "--json").out
    c = cli("strategies", "sample", "bert-3l-B", "-n", "5", "--seed", "4", "--json").out
    assert a == b and a != c
    assert len(a.strip().splitlines()) == 5


def test_baseline_and_show(cli, tmp_path):
    res = cli("strategies", "baseline", "bert-3l-A")
    assert res.code == 0, res.err and "analytical" in res.out
    rows = json.loads(cli("strategies", "baseline", "bert-3l-A", "--json").out)
    assert {"ps", "ps_lb", "partitioned_ps", "all_reduce", "partitioned_ar", "parallax", "ddp"} == {
        r["kind"] for r in rows}
    estimates = [r["estimated_sync_s"] for r in rows]
    assert estimates == sorted(estimates)
    out = tmp_path / "ddp.json"
    pb = tmp_path / "ddp.pb"
    res = cli("strategies", "baseline", "bert-3l-A", "ddp", "--export-json", str(out),
              "--export-autodist", str(pb))
    assert res.code == 0, res.err
    assert cli("strategies", "show", str(out), "bert-3l-A").code == 0
    assert cli("strategies", "validate", "bert-3l-A", str(pb)).code == 0


def test_a_stores_compact_strategy_is_a_strategy_file(cli, tmp_path):
    """The ``strategy`` field of a trial-store record (the compact form) can be validated, shown
    and run as it is; without a domain, or on another model, it is refused in one line."""
    from pathlib import Path

    store = Path(__file__).resolve().parents[2] / "datasets" / "trials" / "ncf-C.jsonl"
    record = json.loads(store.read_text().splitlines()[0])
    path = tmp_path / "s.json"
    path.write_text(record["strategy"] if isinstance(record["strategy"], str)
                    else json.dumps(record["strategy"]))
    res = cli("strategies", "validate", "ncf-C", str(path), "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["strategy"] == record["strategy_id"]
    assert cli("strategies", "show", str(path), "ncf-C").code == 0
    other = cli("strategies", "validate", "bert-3l-A", str(path))
    assert other.code == 2 and "compact strategy" in other.err and "variables" in other.err
    alone = cli("strategies", "show", str(path))
    assert alone.code == 2 and "compact form" in alone.err and "--domain" in alone.err


def test_a_strategy_file_with_a_byte_order_mark_is_json_with_a_domain_too(cli, tmp_path):
    out = tmp_path / "ddp.json"
    assert cli("strategies", "baseline", "bert-3l-A", "ddp", "--export-json", str(out)).code == 0
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + out.read_bytes())
    res = cli("strategies", "validate", "bert-3l-A", str(bom))
    assert res.code == 0, res.err
    assert cli("strategies", "show", str(bom), "bert-3l-A").code == 0


def test_a_signal_that_python_wraps_exits_as_interrupted(monkeypatch, capsys):
    """SIGTERM arriving while a module imports (torchrun stopping the other ranks of a failed
    job) raises inside a class's ``__set_name__``, which Python re-raises as a RuntimeError: the
    command says "interrupted" and exits 143, never an "error:" line of its own."""
    import signal

    import pytest

    import autosync_transfer.cli as cli
    from autosync_transfer.errors import Interrupted

    def wrapped(**_):
        try:
            raise Interrupted(signal.SIGTERM)
        except Interrupted as e:
            raise RuntimeError("__set_name__ of 'x' in 'Y'") from e

    monkeypatch.setattr(cli, "app", wrapped)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["domains", "list"])
    err = capsys.readouterr().err
    assert exit_.value.code == 143 and err == "interrupted\n"

    def bug(**_):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "app", bug)  # an unrelated error is still one error line, exit 2
    with pytest.raises(SystemExit) as exit_:
        cli.main(["domains", "list"])
    assert exit_.value.code == 2 and "unexpected RuntimeError: a bug" in capsys.readouterr().err
