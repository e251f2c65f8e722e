"""Places in the gateway file, as every gateway error names them: ``<file>:<line>: <path>``.

A ``Where`` is a path into the file (``mcp[0].tools.get-sum.summary``) and the lines the
loader noted for the values it read; its line is that of the deepest part of the path the
file has (a path into an upstream's schema, which the file does not hold, keeps the line of
the tool that names it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from service.gateway.errors import GatewayError

Path = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Where:
    """A place in a gateway file; ``where / "tools" / "get-sum"`` is a place inside it."""

    file: str
    path: Path = ()
    lines: Mapping[Path, int] = field(default_factory=dict, compare=False, repr=False)

    def __truediv__(self, part: str | int) -> Where:
        return replace(self, path=(*self.path, part))

    @property
    def line(self) -> int:
        known = self.path
        while known and known not in self.lines:
            known = known[:-1]
        return self.lines.get(known, 1)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {dotted(self.path) or '(file)'}"

    def error(self, problem: str) -> GatewayError:
        """``<file>:<line>: <path>: <problem>`` as the error to raise."""
        return GatewayError(f"{self}: {problem}")


def dotted(path: Path) -> str:
    """``("mcp", 0, "tools", "get.sum")`` → ``mcp[0].tools["get.sum"]``: a key that is not
    plain (a dot in a tool name) is quoted, so the path reads one way only."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            text += f"[{json.dumps(part, ensure_ascii=False)}]"
        else:
            text += f".{part}" if text else part
    return text
