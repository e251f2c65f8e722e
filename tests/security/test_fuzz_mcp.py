"""Security issues §1 and §3 by fuzzing the MCP door: the model is the attacker, and whatever it
sends through a real MCP client over streamable HTTP gets a result (never a crash), every
refusal is a structured error, and nothing it sends that breaks the published contract ever
becomes a draft.

Hypothesis generates the calls from the tools' own published input schemas (tools/list):
fully valid arguments (with the demo's real order ids, currencies and the drafts created so
far mixed in), the same with one to three mutations (wrong types, type confusion such as
"12" for 12, nulls, dropped and extra fields, hostile and huge strings, deep nesting),
random objects, and unknown tool names. Text mixes any Unicode character with the ones an
attacker reaches for: controls, ANSI escapes, bidi overrides, zero-width and other invisible
characters (a client cannot send lone surrogates; tests/security/test_hostile_text.py covers
them through the core). Bodies stay within the HTTP limits, whose refusal happens before the
SDK and is tested in test_http_bad_input.py.

"Invalid" is defined here, not by the product: the arguments (nulls in objects dropped,
DESIGN.md §3) fail the tool's published input schema (with JSON Schema's own regex anchors),
or a string holds a character of the refused categories (controls other than the line feed
and tab free text may hold, format characters, surrogates, private use, line/paragraph
separators). Per call: an invalid call to a known
tool is an INVALID_ARGUMENT refusal; a call that created or revised a draft was a valid
``propose_*`` call that succeeded and added exactly one revision; a result matches the
tool's output schema. After the run: no stored draft holds refused or non-NFC text, the shop
itself was never changed, and the server still answers on the same and on a new session.

CI makes ``CALLS`` calls on one session; the full run (10,000 calls):
``DRAFTGATE_FUZZ_SCALE=5 .venv/bin/pytest -p no:cacheprovider -q -s
tests/security/test_fuzz_mcp.py``. The behaviour does not depend on the database: SQLite.
"""

from __future__ import annotations

import copy
import json
import time
import unicodedata
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import given
from hypothesis import strategies as st
from mcp.types import CallToolResult, Tool
from sqlmodel import Session, func, select

from service.drafts.models import DraftRevision
from service.shop.models import AddressChange, Cancellation, Order, Refund
from tests.security.fuzz_support import (
    SCALE,
    fuzz_settings,
    hostile_text,
    huge_text,
    is_unsafe_text,
    schema_problems,
    strings_in,
    without_nulls,
)
from tests.support.mcp_client import connect

pytestmark = pytest.mark.full

CALLS = 2_000 * SCALE
CALLS_PER_EXAMPLE = 10
ERROR_FIELDS = {
    "code": str,
    "category": str,
    "message": str,
    "retryable": bool,
    "suggested_action": str,
}
MAX_BODY_BYTES = 45_000  # under the 64 KiB HTTP limit with the JSON-RPC envelope
# Up to three 'deep' mutations nest into one another: 3 x (30 - 4) levels, plus JSON values
# and the envelope, stay under the HTTP door's guard (128), so the core answers as a tool.
MAX_NESTING = 30


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"rate_limit_per_address": "", "rate_limit_per_token": ""}


@contextmanager
def mcp_session(url: str, token: str) -> Iterator[tuple[BlockingPortal, Any]]:
    """One real MCP client session, driven from synchronous code through an event loop of its
    own thread (Hypothesis runs synchronous tests)."""
    with (
        start_blocking_portal("asyncio") as portal,
        portal.wrap_async_context_manager(connect(url, token)) as client,
    ):
        yield portal, client


def revisions(runtime) -> int:
    with Session(runtime.engine) as session:
        return session.exec(select(func.count()).select_from(DraftRevision)).one()


def shop_rows(runtime) -> dict[str, int]:
    with Session(runtime.engine) as session:
        return {
            model.__name__: session.exec(select(func.count()).select_from(model)).one()
            for model in (Refund, Cancellation, AddressChange)
        } | {"orders": len(session.exec(select(Order)).all())}


# --- generating calls from the published schemas --------------------------------------------


@dataclass(frozen=True)
class KnownDraft:
    """Stands for "one of the drafts created so far", resolved when the call is made."""

    index: int


JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([0, -1, 2**31, 2**53, 2**53 + 1, 2**63, -(2**64), 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    hostile_text(),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(hostile_text(max_size=12), children, max_size=4),
    ),
    max_leaves=12,
)
PLAIN_WORDS = st.sampled_from(
    [
        "Ada Lovelace",
        "12 St James's Square",
        "London",
        "Westminster",
        "Colis abîmé",
        "包裹损坏",
        "📦",
    ]
)


def text_within(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    """Free text the schema accepts: plain, any character, hostile, or exactly at a bound."""
    low, high = schema.get("minLength", 0), schema.get("maxLength", 200)
    at_a_bound = st.builds(
        lambda chunk, size: (chunk * size)[:size],
        st.sampled_from(["x", "é", "包", "📦", "\u202e", "e\u0301"]),
        st.sampled_from([low, high]),
    )
    return st.one_of(
        PLAIN_WORDS,
        st.text(max_size=min(high, 24)),
        hostile_text(max_size=min(high, 24)),
        at_a_bound,
    ).filter(lambda value: low <= len(value) <= high)


def hints(demo: dict[str, Any]) -> dict[str, st.SearchStrategy]:
    """Valid-looking values by property name, so that valid calls reach the business rules."""
    return {
        "order_id": st.sampled_from([*demo["orders"].values(), "ORD-9999", "ORD-00001"]),
        "currency": st.sampled_from(["USD", "EUR", "JPY", "KWD", "GBP", "XXX", "ZZZ"]),
        "amount_minor": st.integers(1, 80_000),
        "draft_id": st.builds(KnownDraft, st.integers(0, 10**6)),
        "idempotency_key": st.sampled_from(["retry-1", "retry-2", "k"]),
        "country": st.sampled_from(["GB", "US", "FR", "JP", "ZZ"]),
        "postal_code": st.sampled_from(["SW1Y 4JH", "10001", "75001"]),
        "phone": st.sampled_from(["+442079460000", "0123456"]),
    }


def valid_value(schema: dict[str, Any], name: str | None, hint: dict[str, Any]):
    """Values the published schema accepts (before any business rule)."""
    if "anyOf" in schema:
        return st.one_of(*(valid_value(branch, name, hint) for branch in schema["anyOf"]))
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "null":
        return st.none()
    if kind == "object":
        return valid_object(schema, hint)
    if kind == "array":
        return st.lists(
            valid_value(schema["items"], None, hint),
            min_size=schema.get("minItems", 0),
            max_size=schema.get("maxItems", 4),
        )
    if kind == "integer":
        base = st.integers(schema.get("minimum"), schema.get("maximum"))
    elif kind == "boolean":
        base = st.booleans()
    elif "pattern" in schema:
        base = st.from_regex(schema["pattern"], fullmatch=True)
    else:
        base = text_within(schema)
    return st.one_of(hint[name], base) if name in hint else base


@st.composite
def valid_object(draw, schema: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
    required = set(schema.get("required", []))
    return {
        key: draw(valid_value(sub, key, hint))
        for key, sub in schema.get("properties", {}).items()
        if key in required or draw(st.booleans())
    }


def paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """The path of every member and item below ``value``."""
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        yield (*prefix, key)
        yield from paths(item, (*prefix, key))


def confused(value: Any) -> st.SearchStrategy:
    """The same value in a type that looks right to a lenient parser."""
    if isinstance(value, bool):
        return st.sampled_from([int(value), str(value).lower(), None])
    if isinstance(value, int):
        return st.sampled_from(
            [str(value), float(value), value + 0.5, True, [value], {"value": value}]
        )
    if isinstance(value, str):
        return st.sampled_from(
            [
                value + "\n",
                " " + value,
                value.upper(),
                value.lower(),
                [value],
                {"v": value},
                value * 2,
                "",
            ]
            + ([int(value)] if value.isdigit() else [])
        )
    if isinstance(value, list):
        return st.sampled_from(
            [value[0] if value else None, dict(enumerate(value)), json.dumps(value, default=repr)]
        )
    if isinstance(value, dict):
        return st.sampled_from([list(value.values()), json.dumps(value, default=repr), [value]])
    return JSON_VALUES


def nested(levels: int, inner: Any, as_list: bool) -> Any:
    for _ in range(levels):
        inner = [inner] if as_list else {"a": inner}
    return inner


MUTATIONS = ("replace", "confuse", "null", "delete", "hostile", "huge", "deep", "extra")


@st.composite
def mutated(draw, valid: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    arguments = copy.deepcopy(draw(valid))
    for _ in range(draw(st.integers(1, 3))):
        targets = list(paths(arguments))
        kind = draw(st.sampled_from(MUTATIONS)) if targets else "extra"
        if kind == "extra":
            where = draw(
                st.sampled_from([(), *[p for p in targets if isinstance(_at(arguments, p), dict)]])
            )
            key = draw(
                st.one_of(
                    hostile_text(max_size=16),
                    st.sampled_from(["draft_id", "tenant", "__proto__", "status"]),
                )
            )
            _at(arguments, where)[key] = draw(JSON_VALUES)
            continue
        path = draw(st.sampled_from(targets))
        parent, key, current = _at(arguments, path[:-1]), path[-1], _at(arguments, path)
        if kind == "delete":
            del parent[key]
            continue
        parent[key] = draw(
            {
                "replace": JSON_VALUES,
                "confuse": confused(current),
                "null": st.none(),
                "hostile": hostile_text(),
                "huge": huge_text(min_size=600, max_size=10_000),
                "deep": st.builds(
                    nested, st.integers(2, MAX_NESTING - 4), st.just(current), st.booleans()
                ),
            }[kind]
        )
    return arguments


def _at(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


UNKNOWN_NAMES = st.one_of(
    st.sampled_from(
        [
            "",
            "refund",
            "execute",
            "approve",
            "PROPOSE_REFUND",
            "propose_refund ",
            "get_order\x00",
            "../get_order",
            "list_orders\u200b",
            "get_draft\u202e",
            "tools/list",
        ]
    ),
    hostile_text(max_size=20),
)


def calls(tools: list[Tool], demo: dict[str, Any]) -> st.SearchStrategy[tuple[str, Any]]:
    """One call: a tool (or an unknown name) and its arguments, in the proportions above."""
    hint = hints(demo)
    per_tool = []
    for tool in tools:
        valid = valid_object(tool.input_schema, hint)
        per_tool.append(
            st.tuples(
                st.just(tool.name),
                st.one_of(
                    valid,
                    mutated(valid),
                    mutated(valid),
                    st.dictionaries(hostile_text(max_size=16), JSON_VALUES, max_size=5),
                ),
            )
        )
    unknown = st.tuples(
        UNKNOWN_NAMES,
        st.one_of(st.none(), st.dictionaries(hostile_text(max_size=16), JSON_VALUES, max_size=3)),
    )
    return st.one_of(*per_tool, unknown).filter(_within_http_limits)


def _within_http_limits(call: tuple[str, Any]) -> bool:
    body = json.dumps(call, ensure_ascii=False, default=repr).encode()
    return len(body) <= MAX_BODY_BYTES


# --- running and judging the calls ----------------------------------------------------------


@dataclass
class Fuzz:
    """The run's state: the session, what is known valid, what was found wrong."""

    portal: BlockingPortal
    client: Any
    runtime: Any
    tools: dict[str, Tool]
    drafts: list[str] = field(default_factory=list)
    made: Counter = field(default_factory=Counter)
    violations: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, KnownDraft):
            return self.drafts[value.index % len(self.drafts)] if self.drafts else "dft_" + "0" * 32
        if isinstance(value, dict):
            return {key: self.resolve(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        return value

    def violation(self, kind: str, name: str, arguments: Any, detail: str) -> None:
        """Keep the three smallest reproductions of each kind of violation."""
        call = json.dumps({"tool": name, "arguments": arguments}, ensure_ascii=True)
        found = self.violations.setdefault(kind, [])
        found.append((len(call), f"{call[:1_500]}\n    -> {detail[:1_500]}"))
        found.sort()
        del found[3:]

    def invalid_because(self, name: str, arguments: Any) -> list[str]:
        tool = self.tools.get(name)
        if tool is None:
            return ["unknown tool"]
        problems = schema_problems(arguments if arguments is not None else {}, tool.input_schema)
        return problems + [
            f"refused text {text[:40]!r}"
            for text in strings_in(without_nulls(arguments))
            if is_unsafe_text(text)
        ]

    def call(self, name: str, arguments: Any) -> None:
        # Exactly what goes over the wire (keys become strings, tuples lists).
        arguments = json.loads(json.dumps(self.resolve(arguments)))
        invalid = self.invalid_because(name, arguments)
        before = revisions(self.runtime)
        self.made[(name, "invalid" if invalid else "valid")] += 1
        try:
            result = self.portal.call(self.client.call_tool, name, arguments)
        except Exception as crash:
            self.violation(
                "the call raised instead of returning a result", name, arguments, repr(crash)
            )
            return
        added = revisions(self.runtime) - before
        outcome = self.judge(name, arguments, invalid, result)
        if added:
            self.judge_draft(name, arguments, invalid, result, added, outcome)

    def judge(self, name: str, arguments: Any, invalid: list[str], result: CallToolResult) -> Any:
        """The structured refusal or result; records what is wrong with it."""
        text = (
            result.content[0].text if result.content and result.content[0].type == "text" else None
        )
        if result.is_error:
            try:
                error = json.loads(text or "")
            except ValueError:
                error = None
            wrong = [
                k
                for k, t in ERROR_FIELDS.items()
                if not isinstance(error, dict) or not isinstance(error.get(k), t)
            ]
            if wrong:
                self.violation(
                    "a refusal that is not a structured error",
                    name,
                    arguments,
                    f"{wrong}: {text!r}",
                )
                return None
            if invalid and name in self.tools and error["code"] != "INVALID_ARGUMENT":
                self.violation(
                    "invalid arguments refused as something else",
                    name,
                    arguments,
                    f"{invalid}: {error}",
                )
            self.made[("refused", error["code"])] += 1
            return error
        self.made[("answered", name)] += 1
        if invalid:
            self.violation("invalid arguments accepted", name, arguments, f"{invalid}: {text!r}")
        tool = self.tools.get(name)
        output_problems = (
            schema_problems(result.structured_content, tool.output_schema)
            if tool and tool.output_schema
            else []
        )
        if output_problems or json.loads(text or "null") != result.structured_content:
            self.violation(
                "a result that breaks the output schema",
                name,
                arguments,
                f"{output_problems}: {text!r}",
            )
        draft_id = (result.structured_content or {}).get("draft_id")
        if (
            name.startswith("propose_")
            and isinstance(draft_id, str)
            and draft_id not in self.drafts
        ):
            self.drafts.append(draft_id)
        return result.structured_content

    def judge_draft(
        self, name: str, arguments: Any, invalid: list[str], result, added: int, outcome
    ) -> None:
        if not name.startswith("propose_") or result.is_error:
            self.violation(
                "a draft written by a call that did not propose one",
                name,
                arguments,
                f"{added} revision(s); {outcome}",
            )
        elif invalid:
            self.violation(
                "a draft created from invalid input", name, arguments, f"{invalid}; {outcome}"
            )
        elif added != 1:
            self.violation(
                "one proposal wrote several revisions", name, arguments, f"{added}; {outcome}"
            )

    def report(self) -> str:
        return "\n\n".join(
            f"--- {kind} ---\n" + "\n".join(example for _, example in examples)
            for kind, examples in self.violations.items()
        )


def stored_text_problems(runtime) -> list[str]:
    """Refused or non-NFC text in any stored revision (however it got there)."""
    with Session(runtime.engine) as session:
        stored = session.exec(select(DraftRevision)).all()
    return [
        f"{revision.draft_id} r{revision.revision}: {text!r}"
        for revision in stored
        for text in strings_in(revision.params)
        if is_unsafe_text(text) or not unicodedata.is_normalized("NFC", text)
    ]


def test_fuzzed_tool_calls_get_structured_answers_and_never_an_invalid_draft(
    mcp_url, runtime, demo
):
    shop_before = shop_rows(runtime)
    started = time.monotonic()
    with mcp_session(mcp_url, demo["tokens"]["agent"]) as (portal, client):
        listed = portal.call(client.list_tools).tools
        fuzz = Fuzz(portal, client, runtime, {tool.name: tool for tool in listed})
        assert set(fuzz.tools) == {
            "list_orders",
            "get_order",
            "get_logistics",
            "get_draft",
            "propose_refund",
            "propose_cancel_order",
            "propose_change_shipping_address",
        }

        @fuzz_settings(CALLS // CALLS_PER_EXAMPLE + CALLS // 100, shrink=False)
        @given(
            st.lists(calls(listed, demo), min_size=CALLS_PER_EXAMPLE, max_size=CALLS_PER_EXAMPLE)
        )
        def fuzz_the_door(batch: list[tuple[str, Any]]) -> None:
            for name, arguments in batch:
                if sum(fuzz.made[k] for k in fuzz.made if k[1] in ("valid", "invalid")) < CALLS:
                    fuzz.call(name, arguments)

        fuzz_the_door()
        # The same session still answers, and so does a new one.
        assert {tool.name for tool in portal.call(client.list_tools).tools} == set(fuzz.tools)
    with mcp_session(mcp_url, demo["tokens"]["agent"]) as (portal, client):
        answer = portal.call(
            client.call_tool, "get_order", {"order_id": demo["orders"]["delivered"]}
        )
        assert answer.is_error is False, answer
    elapsed = time.monotonic() - started
    total = sum(count for (_, kind), count in fuzz.made.items() if kind in ("valid", "invalid"))
    invalid = sum(count for (_, kind), count in fuzz.made.items() if kind == "invalid")
    refused = Counter({code: n for (what, code), n in fuzz.made.items() if what == "refused"})
    print(
        f"\nMCP fuzzing: {total} calls ({invalid} invalid by the published contract) in "
        f"{elapsed:.1f}s (scale {SCALE}); {len(fuzz.drafts)} drafts created or revised; "
        f"answered: {sum(n for (what, _), n in fuzz.made.items() if what == 'answered')}; "
        f"refused: {dict(refused.most_common())}"
    )
    assert not fuzz.violations, f"{len(fuzz.violations)} kinds of violation:\n\n{fuzz.report()}"
    assert not stored_text_problems(runtime)
    assert shop_rows(runtime) == shop_before, "a tool call changed the shop itself"
    assert total >= CALLS, f"only {total} calls were made (at least {CALLS})"
    assert invalid >= total // 3, "too few invalid inputs in the mix"
    assert total - invalid >= total // 10, "too few valid inputs in the mix"
