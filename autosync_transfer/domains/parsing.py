"""Bounded readers for the files users hand in: YAML and JSON whose nesting, aliases and size
are bounded, files that must be regular and not too large, and names that become paths.

Every parser of user input (resource specs, strategy files, trial stores, AutoSync folders) reads
through these, so that a hostile or broken file is one :class:`~autosync_transfer.errors.SpecError`
naming it, never a ``RecursionError``, a hang on a FIFO or ``/dev/zero``, nor a billion-laughs
expansion.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

from autosync_transfer.errors import SpecError

__all__ = [
    "MAX_DEPTH", "MAX_INT_BITS", "MAX_YAML_ALIASES", "MAX_YAML_BYTES", "MAX_JSON_BYTES", "SAFE_NAME",
    "read_bounded", "load_yaml", "load_json", "check_depth", "is_safe_name",
]

#: the deepest nesting of lists and mappings a YAML or JSON input may have
MAX_DEPTH = 64
#: the widest integer a YAML or JSON input may hold (int64 and then some)
MAX_INT_BITS = 128
#: the most YAML aliases (``*name``) one document may use (no billion laughs)
MAX_YAML_ALIASES = 100
#: the largest resource spec / YAML file read, bytes
MAX_YAML_BYTES = 4 << 20
#: the largest strategy file (JSON or AutoDist protobuf) read, bytes
MAX_JSON_BYTES = 64 << 20
#: the alphabet of names that become parts of file names (cluster and workload names)
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]{0,63}")


def is_safe_name(name: str) -> bool:
    """Whether ``name`` is 1-64 characters of ``[A-Za-z0-9_.]``, not starting with a dot."""
    return isinstance(name, str) and SAFE_NAME.fullmatch(name) is not None


def read_bounded(path: str | Path, max_bytes: int, what: str) -> bytes:
    """The bytes of the regular file ``path``; a FIFO, a device or a file over ``max_bytes``
    raises :class:`SpecError` naming ``what``; a file that cannot be read raises ``OSError``."""
    p = Path(path)
    mode = p.stat().st_mode  # OSError: the caller names it
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "Is a directory", str(p))
    if not stat.S_ISREG(mode):
        raise SpecError(f"{what} {str(p)!r} is not a regular file")
    with p.open("rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SpecError(f"{what} {str(p)!r} is larger than {max_bytes >> 20} MiB")
    return data


def _first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text.split("; use sys.set_int_max_str_digits")[0][:300]


def load_yaml(text: str, what: str) -> Any:
    """``yaml.safe_load(text)`` with nesting up to :data:`MAX_DEPTH`, at most
    :data:`MAX_YAML_ALIASES` aliases and :data:`MAX_YAML_BYTES` characters; any failure is a
    :class:`SpecError` ``"<what> is not valid YAML: ..."``."""
    import yaml

    if len(text) > MAX_YAML_BYTES:
        raise SpecError(f"{what} is larger than {MAX_YAML_BYTES >> 20} MiB")

    class Bounded(yaml.SafeLoader):
        depth = 0
        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    raise SpecError(f"{what} is not valid YAML: more than {MAX_YAML_ALIASES} "
                                    f"aliases")
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise SpecError(f"{what} is not valid YAML: nested deeper than {MAX_DEPTH} "
                                    f"levels")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = None
    try:
        loader = Bounded(text)  # the reader refuses control characters here
        data = loader.get_single_data()
    except SpecError:
        raise
    except yaml.YAMLError as e:
        raise SpecError(f"{what} is not valid YAML: {_first_line(e)}") from e
    except (ValueError, OverflowError, TypeError, RecursionError) as e:  # a value it cannot build
        raise SpecError(f"{what} is not valid YAML: {_first_line(e)}") from e
    finally:
        if loader is not None:
            loader.dispose()
    check_depth(data, what, kind="YAML")  # aliases may share one container: bounded anyway
    return data


def load_json(text: str | bytes, what: str) -> Any:
    """``json.loads(text)`` with nesting up to :data:`MAX_DEPTH`; any failure is a
    :class:`SpecError` ``"<what> is not valid JSON: ..."``."""
    try:
        data = json.loads(text)
    except RecursionError as e:
        raise SpecError(f"{what} is not valid JSON: nested deeper than {MAX_DEPTH} levels") from e
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, a number over 4300 digits
        raise SpecError(f"{what} is not valid JSON: {_first_line(e)}") from e
    check_depth(data, what)
    return data


def check_depth(data: Any, what: str, limit: int = MAX_DEPTH, kind: str = "JSON") -> None:
    """Raise :class:`SpecError` when lists/mappings in ``data`` nest deeper than ``limit`` or
    hold an integer of more than :data:`MAX_INT_BITS` bits (no field needs one; printing it
    would fail)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    seen: set[int] = set()  # YAML aliases share containers: each is walked once
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, set)):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if isinstance(item, dict):
            children: Any = [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = item
        else:
            if isinstance(item, int) and item.bit_length() > MAX_INT_BITS:
                raise SpecError(f"{what} is not valid {kind}: an integer of "
                                f"{item.bit_length()} bits (at most {MAX_INT_BITS})")
            continue
        if depth > limit:
            raise SpecError(f"{what} is not valid {kind}: nested deeper than {limit} levels")
        stack.extend((c, depth + 1) for c in children)
