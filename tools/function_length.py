"""Lint: no function in the shipped code is longer than the house limit (STYLE.md).

Over ~60 lines is a smell in the core: such a function reads better as named steps.
Usage: python tools/function_length.py [--max N] [paths...]; exits 1 naming each offender.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

DEFAULT_PATHS = ("service", "mcp_adapter", "workers")
EXCLUDED = ("migrations",)  # generated-style schema scripts, one statement list each


def long_functions(root: Path, limit: int) -> Iterator[str]:
    for path in sorted(root.rglob("*.py")):
        if any(part in EXCLUDED for part in path.parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    yield f"{path}:{node.lineno}: {node.name} is {length} lines (max {limit})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=60)
    parser.add_argument("paths", nargs="*", default=DEFAULT_PATHS)
    args = parser.parse_args()
    offenders = [line for p in args.paths for line in long_functions(Path(p), args.max)]
    for line in offenders:
        print(line)
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main())
