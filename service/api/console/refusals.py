"""How the console audits and answers a request refused before any of its routes ran: one
from another origin (service.api.console.guard), or a body over the limit (service.guards).

Audited as ``console.request.refused`` (service.audit.refusals), throttled per client
address. The actor is the person whose live session the request's cookie names, provided the
request comes from the console's own origin (a cross-origin request proves nothing about who
sent it: it is anonymous, as is a request without a live session). Answered as the console's
error page when it comes from a page (a form post, a navigation), as problem+json otherwise
(the console's scripts), with the console's headers either way.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Scope, Send

from service.api.console.deps import COOKIE, session_verdict
from service.api.console.guard import console_send, is_console, origin_problem
from service.api.console.pages import problem_page
from service.api.errors import problem_response
from service.audit.refusals import Refusal, Throttle, record_refusal_apart, request_context
from service.errors import RATE_LIMITED, DomainError
from service.guards import Refuse, client_address
from service.runtime import Runtime
from service.sql import utcnow
from service.tracing import trace_id_from

OPERATION = "console.request"
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


async def refuse_console_request(scope: Scope, send: Send, error: DomainError) -> None:
    """Audit and answer a /console request refused before routing."""
    request = Request(scope)
    await run_in_threadpool(_audit, request, error)
    response = _answer(request, error)
    await response(scope, _nothing_to_receive, console_send(send, scope.get("path", "")))


def console_first(refuse: Refuse) -> Refuse:
    """A guard's ``refuse`` for the whole application: /console requests are refused the
    console's way (its identity, its error page), every other the way ``refuse`` does."""

    async def refuse_either(scope: Scope, send: Send, error: DomainError) -> None:
        if is_console(scope.get("path", "")):
            await refuse_console_request(scope, send, error)
        else:
            await refuse(scope, send, error)

    return refuse_either


def _audit(request: Request, error: DomainError) -> None:
    runtime: Runtime = request.app.state.runtime
    context = request_context(request.method, request.url.path)
    trace_id = trace_id_from(request.headers.get("traceparent"))
    verdict = None
    # A flood is only counted: no session lookup per request. Another origin proves nothing.
    if error.code != RATE_LIMITED.code and origin_problem(request.scope) is None:
        verdict = session_verdict(runtime, request.cookies.get(COOKIE), now=utcnow())
    if verdict is not None and verdict.principal is not None:
        context["session_id"] = str(verdict.session_id)
        refusal = Refusal.by(
            verdict.principal, OPERATION, error, trace_id=trace_id, context=context
        )
    else:
        tenant = runtime.settings.default_tenant
        refusal = Refusal(OPERATION, error, tenant, trace_id=trace_id, context=context)
    throttle = Throttle(runtime.limiter, f"console:{client_address(request.scope)}")
    record_refusal_apart(runtime.engine, refusal, throttle=throttle)


def _answer(request: Request, error: DomainError) -> Response:
    if _from_a_page(request):
        return problem_page(request, error)
    return problem_response(error, instance=request.url.path)


def _from_a_page(request: Request) -> bool:
    """A form the person submitted, or a page they navigated to (what PageRoute serves), as
    opposed to a request of the console's scripts, which send and read JSON. Told from the
    request alone: no route has matched it yet."""
    content_type = request.headers.get("content-type", "").lower()
    return content_type.startswith(FORM_TYPES) or request.headers.get("sec-fetch-mode") == (
        "navigate"
    )


async def _nothing_to_receive() -> Message:
    return {"type": "http.disconnect"}
