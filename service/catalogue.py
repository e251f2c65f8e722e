"""The error catalogue: every ``ErrorCode`` of every domain, rendered as ``docs/errors.md``.

``python -m service.catalogue > docs/errors.md`` regenerates the page; a test keeps the
committed page equal to what this prints, so the docs never drift from the code.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import cache
from types import ModuleType

import service
from service.errors import ErrorCode

HEADER = """\
# Error codes

Every refusal draftgate gives, to an agent over MCP (an `isError` result whose text is the
JSON object below) or to a person over HTTP (RFC 9457 `application/problem+json` with the same
members), carries a stable `code`, a `category`, `retryable`, a `message` written for the
reader, and a `suggested_action`:

```json
{"code": "ORDER_UNAVAILABLE", "category": "unavailable", "message": "…",
 "retryable": false, "suggested_action": "…"}
```

HTTP statuses by category: `invalid_argument` 400, `unauthenticated` 401, `permission_denied`
403, `unavailable` 404, `conflict` and `precondition_failed` 409, `transient` 503.
The advice below is each code's default; a refusal may give more specific advice.

This page is generated from the code (`python -m service.catalogue > docs/errors.md`).
"""


@dataclass(frozen=True)
class Domain:
    module: str
    title: str
    codes: list[ErrorCode]


def error_modules() -> list[ModuleType]:
    """``service.errors`` and every ``<domain>.errors`` module under ``service``."""
    domain_modules = sorted(
        info.name
        for info in pkgutil.walk_packages(service.__path__, "service.")
        if info.name.endswith(".errors") and info.name != "service.api.errors"
    )
    names = ["service.errors", *domain_modules]
    return [importlib.import_module(name) for name in names]


def domains() -> list[Domain]:
    result = []
    seen: set[int] = set()  # a code imported into another errors module belongs to the first
    for module in error_modules():
        codes = [
            value
            for value in vars(module).values()
            if isinstance(value, ErrorCode) and id(value) not in seen
        ]
        seen.update(id(code) for code in codes)
        title = (module.__doc__ or module.__name__).strip().splitlines()[0]
        result.append(Domain(module.__name__, title, codes))
    return result


@cache
def declared() -> dict[str, ErrorCode]:
    """Every declared code by its name (the first declaration, where one is re-exported)."""
    return {code.code: code for domain in domains() for code in domain.codes}


def error_code(code: str) -> ErrorCode:
    """The declaration of ``code``; KeyError for a code no domain declares (a bug)."""
    return declared()[code]


def render() -> str:
    lines = [HEADER]
    for domain in domains():
        lines += [f"## `{domain.module}`", "", domain.title, ""]
        lines += ["| code | category | retryable | when | what to do |", "|---|---|---|---|---|"]
        lines += [
            f"| `{c.code}` | {c.category.value} | {'yes' if c.is_retryable else 'no'} "
            f"| {c.meaning} | {c.suggested_action} |"
            for c in domain.codes
        ]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - exercised through the docs test
    print(render(), end="")
