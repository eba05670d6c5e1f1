"""The command surface, frozen: every command and every option (names,
hidden, type and choices, default, required) against the checked-in ``surface.json``.

A change to the command line must be deliberate: after changing it, regenerate the snapshot
from the repository root with

    python -m tests.cli.test_surface --update

and commit ``tests/cli/surface.json`` with the change (the diff is the review of the change).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("surface.json")


def _type(param: Any) -> tuple[str, list[str] | None]:
    """(type name, choices) of a parameter."""
    desc = getattr(param, "type_descriptor", None)
    ann = getattr(desc, "annotation", None)
    if isinstance(ann, type) and issubclass(ann, Enum):
        return ann.__name__, [str(c.value) for c in ann]
    if isinstance(ann, type):
        return ann.__name__, None
    return str(ann if ann is not None else param.type), None


def _default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [_default(v) for v in value]
    return value


def _param(param: Any) -> dict[str, Any]:
    type_name, choices = _type(param)
    row = {
        "name": param.name,
        "kind": param.param_type_name,
        "opts": list(param.opts),
        "secondary_opts": list(param.secondary_opts),
        "hidden": bool(getattr(param, "hidden", False)),
        "type": type_name,
        "default": _default(param.default),
        "required": bool(param.required),
    }
    if choices is not None:
        row["choices"] = choices
    for key in ("min", "max"):
        if getattr(param, key, None) is not None:
            row[key] = getattr(param, key)
    if getattr(param, "is_flag", False):
        row["is_flag"] = True
    if getattr(param, "multiple", False):
        row["multiple"] = True
    return row


def surface() -> dict[str, Any]:
    """``{"search": {...}, "strategies sample": {...}, ...}``: every command of the app."""
    from typer.main import get_command

    from autosync_transfer.cli import app

    found: dict[str, Any] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs is not None:
            if not path:  # the options before the command word (--debug)
                found["(global)"] = {"hidden": False,
                                     "params": [_param(p) for p in cmd.params]}
            for name in sorted(subs):
                walk(subs[name], [*path, name])
            return
        found[" ".join(path)] = {
            "hidden": bool(cmd.hidden),
            "params": [_param(p) for p in cmd.params],
        }

    walk(get_command(app), [])
    return found


def _dump(data: dict[str, Any]) -> str:
    """JSON with one line per option, so that a change to one option is a one-line diff."""
    lines = ["{"]
    for i, (name, cmd) in enumerate(sorted(data.items())):
        lines.append(f"  {json.dumps(name)}: {{")
        lines.append(f'    "hidden": {json.dumps(cmd["hidden"])},')
        lines.append('    "params": [')
        rows = [f"      {json.dumps(p, sort_keys=True)}" for p in cmd["params"]]
        lines.append(",\n".join(rows))
        lines.append("    ]")
        lines.append("  }" + ("," if i < len(data) - 1 else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def test_the_command_surface_matches_the_snapshot() -> None:
    want = json.loads(SNAPSHOT.read_text())
    got = json.loads(_dump(surface()))  # through JSON, as stored (tuples become lists)
    added, removed = sorted(set(got) - set(want)), sorted(set(want) - set(got))
    changed = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    assert not (added or removed or changed), (
        f"the command surface changed (added {added}, removed {removed}, changed {changed}); "
        f"if that is deliberate, run `python -m tests.cli.test_surface --update` and commit "
        f"{SNAPSHOT.name}")


def main(argv: list[str]) -> int:
    if argv != ["--update"]:
        print(f"usage: python -m tests.cli.test_surface --update   (rewrites {SNAPSHOT})",
              file=sys.stderr)
        return 2
    SNAPSHOT.write_text(_dump(surface()))
    print(f"wrote {SNAPSHOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
