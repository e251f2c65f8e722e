"""Paths into a tool's arguments or an upstream's answer, as the gateway file writes them.

``entities[*].observations``: dotted names, ``[n]`` for a list item and, where allowed,
``[*]`` for every item. Used for masks, allow-lists of response fields and money paths.
"""

from __future__ import annotations

import re
from typing import Any

from service.masking import mask_text

_PATH_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_-]{0,63})((?:\[(?:\*|\d{1,4})\])*)")


def parse_path(text: str, *, wildcards: bool = True) -> tuple[str | int, ...]:
    """``entities[*].observations`` → ``("entities", "*", "observations")``; ValueError if
    it is no path (names, dots, ``[n]`` and, where allowed, ``[*]``)."""
    segments: list[str | int] = []
    for part in text.split("."):
        match = _PATH_SEGMENT.fullmatch(part)
        if match is None:
            raise ValueError(f"{text!r} is not a path (names, dots, [n] and [*])")
        segments.append(match.group(1))
        for index in re.findall(r"\[(\*|\d+)\]", match.group(2)):
            if index == "*" and not wildcards:
                raise ValueError(f"{text!r}: [*] is not allowed here")
            segments.append(index if index == "*" else int(index))
    return tuple(segments)


def lookup(data: Any, path: tuple[str | int, ...]) -> Any:
    """The value at a wildcard-free path, or None."""
    node = data
    for segment in path:
        if isinstance(segment, int):
            node = node[segment] if isinstance(node, list) and segment < len(node) else None
        else:
            node = node.get(segment) if isinstance(node, dict) else None
        if node is None:
            return None
    return node


def masked(data: Any, paths: list[str]) -> Any:
    """``data`` with the value at every path masked like PII (``***``); absent paths are fine."""
    for path in paths:
        data = _mask(data, parse_path(path))
    return data


def _mask(node: Any, path: tuple[str | int, ...]) -> Any:
    if not path:
        if isinstance(node, list):
            return [_mask(item, ()) for item in node]
        if isinstance(node, dict):
            return {key: _mask(value, ()) for key, value in node.items()}
        return mask_text(node) if isinstance(node, str) else ("***" if node is not None else None)
    head, rest = path[0], path[1:]
    if head == "*" and isinstance(node, list):
        return [_mask(item, rest) for item in node]
    if isinstance(head, int) and isinstance(node, list) and head < len(node):
        return [_mask(item, rest) if i == head else item for i, item in enumerate(node)]
    if isinstance(head, str) and head != "*" and isinstance(node, dict) and head in node:
        return {key: _mask(value, rest) if key == head else value for key, value in node.items()}
    return node
