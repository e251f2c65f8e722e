"""The configuration reference (docs/configuration.md), generated from ``Settings``.

Every setting's meaning is the comment written above it in ``service/config.py`` (a comment
covers the settings that follow it up to the next blank line), so the reference cannot
drift from the code: ``python -m service.config_reference > docs/configuration.md``, and a
test compares the two.
"""

from __future__ import annotations

import ast
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_core import PydanticUndefined

from service import config
from service.config import Settings

MAX_DEFAULT_WIDTH = 60


@dataclass(frozen=True)
class Entry:
    variable: str
    type: str
    default: str
    meaning: str


def entries() -> list[Entry]:
    source = inspect.getsource(config)
    lines = source.splitlines()
    [settings] = [
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == "Settings"
    ]
    found, meaning, previous_end = [], "", 0
    for node in settings.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = _comment_above(lines, node.lineno)
        if above or _blank_between(lines, previous_end, node.lineno):
            meaning = above  # a new group starts (or a setting without a comment)
        previous_end = node.end_lineno or node.lineno
        name = node.target.id
        found.append(
            Entry(
                variable=f"DRAFTGATE_{name.upper()}",
                type=ast.get_source_segment(source, node.annotation) or "",
                default=_default(name),
                meaning=meaning,
            )
        )
    return found


def _comment_above(lines: list[str], lineno: int) -> str:
    comment: list[str] = []
    index = lineno - 2  # the line above the setting (lineno counts from 1)
    while index >= 0 and lines[index].strip().startswith("#"):
        comment.insert(0, lines[index].strip().removeprefix("#").strip())
        index -= 1
    return " ".join(comment)


def _blank_between(lines: list[str], after: int, before: int) -> bool:
    return any(not line.strip() for line in lines[after : before - 1])


def _default(name: str) -> str:
    field = Settings.model_fields[name]
    value: Any = field.default
    if value is PydanticUndefined and field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    if value is None or value == "":
        return NONE
    text = str(value) if isinstance(value, str | Path | int | float) else json.dumps(value)
    return text if len(text) <= MAX_DEFAULT_WIDTH else SEE_SOURCE


def _text(meaning: str) -> str:
    """Markdown table text: ``<state_dir>`` would be read as an HTML tag, ``|`` as a column."""
    return meaning.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _code(default: str) -> str:
    return default if default in (NONE, SEE_SOURCE) else f"`{default}`"


NONE, SEE_SOURCE = "—", "see `service/config.py`"


def render() -> str:
    rows = [
        f"| `{e.variable}` | `{e.type}` | {_code(e.default)} | {_text(e.meaning)} |"
        for e in entries()
    ]
    return "\n".join(
        [
            "# Configuration reference",
            "",
            "Every setting is an environment variable; the defaults give the embedded",
            "single-machine setup. Generated from `service/config.py` by",
            "`python -m service.config_reference`; a test keeps it current.",
            "",
            "| variable | type | default | meaning |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    print(render(), end="")
