"""Errors of the gateway: a gateway file that cannot be served, and upstreams that fail."""

from __future__ import annotations

from service.errors import Category, DomainError, ErrorCode
from service.text import inert


class GatewayError(RuntimeError):
    """The gateway file (or an upstream's catalogue) cannot be served. Raised at start-up
    and by ``draftgate gateway check``, never to an agent.

    ``problems`` are its lines, each ``<file>:<line>: <path>: <problem>``; the command line
    prints them as they are and exits 2 (``service.cli.main``).
    """

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


UPSTREAM_UNAVAILABLE = ErrorCode(
    "UPSTREAM_UNAVAILABLE",
    Category.TRANSIENT,
    "An upstream system behind the gateway could not be reached, timed out or failed; "
    "nothing is known to have changed.",
    "Retry in a moment; if it keeps failing, tell the user the system is unavailable.",
)
UPSTREAM_REFUSED = ErrorCode(
    "UPSTREAM_REFUSED",
    Category.PRECONDITION_FAILED,
    "An upstream system behind the gateway answered the call with an error of its own "
    "(its message is quoted).",
    "Read the upstream's message; correct the arguments or tell the user; do not retry unchanged.",
)
UPSTREAM_CONTRACT_CHANGED = ErrorCode(
    "UPSTREAM_CONTRACT_CHANGED",
    Category.CONFLICT,
    "The upstream tool's input schema changed since draftgate read it, so what was proposed "
    "or approved may no longer mean the same thing.",
    "Tell the user the tool changed; an operator must run `draftgate gateway reload` and "
    "restart draftgate; then propose again.",
)

MAX_UPSTREAM_MESSAGE = 500  # the upstream's words reach a model and an approver: bounded


def upstream_text(text: str) -> str:
    """An upstream's message as it may be quoted: inert and bounded."""
    text = inert(text.strip())
    if len(text) > MAX_UPSTREAM_MESSAGE:
        return text[: MAX_UPSTREAM_MESSAGE - 1] + "…"
    return text


def upstream_unavailable(namespace: str, problem: str) -> DomainError:
    return UPSTREAM_UNAVAILABLE(
        f"The upstream {namespace!r} is unavailable: {upstream_text(problem)}",
        details={"upstream": namespace},
    )


def upstream_refused(namespace: str, tool: str, message: str) -> DomainError:
    return UPSTREAM_REFUSED(
        f"The upstream {namespace!r} refused {tool}: {upstream_text(message) or 'no message'}",
        details={"upstream": namespace, "tool": tool},
    )


def upstream_contract_changed(action: str) -> DomainError:
    return UPSTREAM_CONTRACT_CHANGED(
        f"The upstream tool behind {action} changed its input schema; nothing was done.",
        details={"action": action},
    )
