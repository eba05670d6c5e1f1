"""Lines per module and functions longer than a limit, for the package (a size report, no pass/fail).

    python scripts/code_size.py [--limit 80] [--top 15] [PACKAGE_DIR]
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def long_functions(path: Path, limit: int) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n > limit:
                found.append((n, f"{path}:{node.lineno} {node.name}"))
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default="autosync_transfer")
    ap.add_argument("--limit", type=int, default=80, help="function length in lines (default 80)")
    ap.add_argument("--top", type=int, default=15, help="largest modules to list (default 15)")
    a = ap.parse_args()
    files = sorted(Path(a.root).rglob("*.py"))
    sizes = sorted(((len(f.read_text().splitlines()), str(f)) for f in files), reverse=True)
    total = sum(n for n, _ in sizes)
    print(f"{len(files)} modules, {total} lines, median {sizes[len(sizes) // 2][0]} lines per module")
    print(f"largest {a.top}:")
    for n, f in sizes[: a.top]:
        print(f"  {n:5d}  {f}")
    longs = sorted((x for f in files for x in long_functions(f, a.limit)), reverse=True)
    print(f"functions over {a.limit} lines: {len(longs)}")
    for n, where in longs:
        print(f"  {n:5d}  {where}")


if __name__ == "__main__":
    main()
