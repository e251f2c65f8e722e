"""The action registry: explicit kinds, refusals that name every problem, user packages."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field
from sqlmodel import Session, select

from harness.servers import free_port
from mcp_adapter.tools import ToolDoor, mcp_tools
from service.audit.models import AuditEvent
from service.config import Settings
from service.db import session_scope
from service.drafts.models import Draft
from service.errors import DomainError
from service.policies.actions import PolicyError
from service.principal import Role
from service.registry.base import ActionContext, Outcome, Preview, ReadAction, WriteAction
from service.registry.loader import RegistryError, build_registry, load_registry
from service.runtime import Runtime, build_runtime
from service.tokens import actions as tokens
from service.toolcalls.actions import catalog
from service.tracing import new_trace_id
from service.validation import StrictInput

BUNDLED = "service.shop.definitions"
DRAFTGATE = Path(sys.executable).parent / "draftgate"


# --- action classes defined in-process, for build_registry ----------------------------


class EchoInput(StrictInput):
    text: str = Field(min_length=1, max_length=50)


class EchoOutput(BaseModel):
    text: str


class Echo(ReadAction):
    name = "echo"
    kind = "read"
    contract_version = 1
    title = "Echo"
    description = "Returns its input."
    Input = EchoInput
    Output = EchoOutput

    def handle(self, ctx: ActionContext, params: Any) -> BaseModel:
        return EchoOutput(text=params.text)


class Shout(WriteAction):
    name = "shout"
    kind = "write"
    contract_version = 1
    title = "Shout"
    description = "Proposes to shout."
    Input = EchoInput

    def validate(self, ctx: ActionContext, params: Any) -> Preview:
        return Preview(summary=f"Shout {params.text!r}")

    def applied(self, ctx: ActionContext, idempotency_key: str) -> Outcome | None:
        return None

    def execute(self, ctx: ActionContext, params: Any, idempotency_key: str) -> Outcome:
        return Outcome(summary="shouted")


def variant(base: type, **attributes: Any) -> Any:
    """An instance of a subclass of ``base`` with some class attributes replaced."""
    return type(f"{base.__name__}Variant", (base,), attributes)()


class ReadWithoutKind(ReadAction):  # deliberately no ``kind``
    name = "read_without_kind"
    contract_version = 1
    title = "Undeclared"
    description = "Has no kind."
    Input = EchoInput
    Output = EchoOutput

    def handle(self, ctx: ActionContext, params: Any) -> BaseModel:
        raise AssertionError("never registered")


# --- user modules written into tmp_path ---------------------------------------------------

USER_MODULE = '''
"""A user's own actions, registered exactly like the bundled shop."""

from typing import Any

from pydantic import BaseModel, Field

from service.registry.base import ActionContext, Outcome, Preview, ReadAction, Risk, WriteAction
from service.validation import StrictInput


class TicketInput(StrictInput):
    ticket_id: str = Field(pattern=r"^T-[0-9]{{3}}$", description="A ticket id, e.g. T-123.")


class CloseInput(StrictInput):
    ticket_id: str = Field(pattern=r"^T-[0-9]{{3}}$")
    resolution: str = Field(min_length=1, max_length=200)


class Ticket(BaseModel):
    ticket_id: str
    status: str
    customer: str | None


class GetTicket(ReadAction):
    name = "{prefix}get_ticket"
    kind = "read"
    contract_version = 3
    title = "Get a support ticket"
    description = "Returns one support ticket of the customer you are helping."
    Input = TicketInput
    Output = Ticket

    def handle(self, ctx: ActionContext, params: TicketInput) -> Ticket:
        return Ticket(
            ticket_id=params.ticket_id, status="open", customer=ctx.principal.on_behalf_of
        )


class CloseTicket(WriteAction):
    name = "{prefix}close_ticket"
    kind = "write"
    contract_version = 2
    title = "Close a support ticket"
    description = "Closes a support ticket with a resolution. Needs human approval."
    Input = CloseInput

    def validate(self, ctx: ActionContext, params: CloseInput) -> Preview:
        return Preview(summary=f"Close ticket {{params.ticket_id}}", risk=Risk.LOW)

    def applied(self, ctx: ActionContext, idempotency_key: str) -> Outcome | None:
        return None

    def execute(self, ctx: ActionContext, params: CloseInput, idempotency_key: str) -> Outcome:
        return Outcome(summary=f"closed {{params.ticket_id}}")


ACTIONS = [GetTicket(), CloseTicket()]
'''

UNDECLARED_MODULE = """
from typing import Any

from pydantic import BaseModel

from service.registry.base import ActionContext, Outcome, Preview, ReadAction, WriteAction
from service.validation import StrictInput


class In(StrictInput):
    value: int


class Out(BaseModel):
    value: int


class Lookup(ReadAction):
    name = "lookup_without_kind"
    contract_version = 1
    title = "t"
    description = "d"
    Input = In
    Output = Out

    def handle(self, ctx: ActionContext, params: Any) -> Out:
        return Out(value=params.value)


class Wipe(WriteAction):
    name = "wipe_without_kind"
    contract_version = 1
    title = "t"
    description = "d"
    Input = In

    def validate(self, ctx: ActionContext, params: Any) -> Preview:
        return Preview(summary="wipe")

    def applied(self, ctx: ActionContext, idempotency_key: str) -> Outcome | None:
        return None

    def execute(self, ctx: ActionContext, params: Any, idempotency_key: str) -> Outcome:
        return Outcome(summary="wiped")


class Fine(ReadAction):
    name = "fine_lookup"
    kind = "read"
    contract_version = 1
    title = "t"
    description = "d"
    Input = In
    Output = Out

    def handle(self, ctx: ActionContext, params: Any) -> Out:
        return Out(value=params.value)


ACTIONS = [Lookup(), Fine(), Wipe()]
"""


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """Write a uniquely named module into tmp_path (on sys.path); returns its import name."""
    modules = tmp_path / "modules"
    modules.mkdir()
    monkeypatch.syspath_prepend(str(modules))
    written: list[str] = []

    def write(source: str, stem: str = "user_actions") -> str:
        name = f"{stem}_{secrets.token_hex(6)}"
        (modules / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def refusal(modules: list[str]) -> str:
    with pytest.raises(RegistryError) as caught:
        load_registry(modules)
    return str(caught.value)


def build_refusal(actions: list[object]) -> str:
    with pytest.raises(RegistryError) as caught:
        build_registry(actions)
    return str(caught.value)


# --- the bundled registry ------------------------------------------------------------------


def test_the_bundled_registry_loads_with_explicit_kinds():
    registry = load_registry([BUNDLED])

    assert set(registry.reads) == {"list_orders", "get_order", "get_logistics"}
    assert set(registry.writes) == {"refund", "cancel_order", "change_shipping_address"}
    for action in registry:
        assert "kind" in type(action).__dict__, f"{action.name} inherits its kind"
    assert all(type(a).kind == "read" for a in registry.reads.values())
    assert all(type(a).kind == "write" for a in registry.writes.values())


def test_the_default_settings_load_the_bundled_shop():
    assert Settings().action_modules == [BUNDLED]
    tools = {spec.name for spec in catalog(load_registry(Settings().action_modules))}
    assert tools == {
        "list_orders",
        "get_order",
        "get_logistics",
        "propose_refund",
        "propose_cancel_order",
        "propose_change_shipping_address",
        "get_draft",
    }


def test_the_base_classes_declare_no_kind():
    assert getattr(ReadAction, "kind", None) is None
    assert getattr(WriteAction, "kind", None) is None


# --- refusals ----------------------------------------------------------------------------------


def test_startup_names_every_action_without_a_kind(write_module):
    module = write_module(UNDECLARED_MODULE)

    message = refusal([BUNDLED, module])

    assert "lookup_without_kind" in message
    assert "wipe_without_kind" in message
    assert "fine_lookup" not in message
    assert "kind" in message


def test_build_runtime_refuses_actions_without_a_kind(write_module, tmp_path):
    module = write_module(UNDECLARED_MODULE)

    with pytest.raises(RegistryError, match="lookup_without_kind") as caught:
        build_runtime(Settings(state_dir=tmp_path / "state", action_modules=[BUNDLED, module]))

    assert "wipe_without_kind" in str(caught.value)


@pytest.mark.full  # a draftgate serve process
def test_the_mcp_server_refuses_to_start_with_undeclared_actions(write_module, tmp_path):
    module = write_module(UNDECLARED_MODULE)
    env = {key: value for key, value in os.environ.items() if not key.startswith("DRAFTGATE_")}
    env.update(
        PYTHONPATH=str(tmp_path / "modules"),
        DRAFTGATE_STATE_DIR=str(tmp_path / "state"),
        DRAFTGATE_ACTION_MODULES=f'["{BUNDLED}", "{module}"]',
    )

    result = subprocess.run(
        [str(DRAFTGATE), "serve", "mcp", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode != 0
    assert "lookup_without_kind" in result.stderr
    assert "wipe_without_kind" in result.stderr


def test_undeclared_kinds_are_reported_with_every_other_problem():
    message = build_refusal(
        [
            ReadWithoutKind(),
            variant(Echo, kind="delete"),
            variant(Shout, name="get_draft"),
        ]
    )

    assert "read_without_kind" in message
    assert "'delete'" in message
    assert "get_draft" in message


@pytest.mark.parametrize("kind", ["delete", "READ", "", "readonly", 1, True])
def test_a_kind_other_than_read_or_write_is_refused(kind):
    message = build_refusal([variant(Echo, kind=kind)])

    assert "'echo'" in message
    assert repr(kind) in message


def test_a_write_action_declaring_kind_read_is_refused():
    message = build_refusal([variant(Shout, kind="read")])

    assert "'shout'" in message
    assert "ReadAction" in message


def test_a_read_action_declaring_kind_write_is_refused():
    message = build_refusal([variant(Echo, kind="write")])

    assert "'echo'" in message
    assert "WriteAction" in message


def test_an_object_that_is_no_action_is_refused():
    class Impostor:
        name = "impostor"
        kind = "read"

    assert "impostor" in build_refusal([Impostor()])


def test_a_duplicate_name_is_refused_within_a_module():
    assert "declared twice" in build_refusal([Echo(), variant(Echo)])


def test_a_duplicate_name_across_read_and_write_is_refused():
    message = build_refusal([Echo(), variant(Shout, name="echo")])

    assert "'echo'" in message
    assert "declared twice" in message


def test_a_user_module_cannot_redefine_a_bundled_action(write_module):
    module = write_module(
        USER_MODULE.format(prefix="").replace('"get_ticket"', '"get_order"'), stem="clash"
    )

    message = refusal([BUNDLED, module])

    assert "'get_order'" in message
    assert "declared twice" in message


@pytest.mark.parametrize(
    "name",
    [
        "get_draft",
        "propose_refund",
        "propose_x",
        "Refund",
        "x",
        "has-dash",
        "has space",
        "1st",
        "a" * 50,
        "",
        "trailing_newline\n",
    ],
)
def test_reserved_and_malformed_names_are_refused(name):
    message = build_refusal([variant(Echo, name=name)])

    assert "not allowed" in message or "kind" in message


@pytest.mark.parametrize("missing", ["contract_version", "title", "description", "Input"])
def test_an_action_missing_a_declaration_is_refused(missing):
    class Incomplete(ReadAction):
        name = "incomplete"
        kind = "read"
        contract_version = 1
        title = "t"
        description = "d"
        Input = EchoInput
        Output = EchoOutput

        def handle(self, ctx: ActionContext, params: Any) -> BaseModel:
            raise AssertionError

    delattr(Incomplete, missing)

    message = build_refusal([Incomplete()])

    assert "'incomplete'" in message
    assert missing in message


def test_a_read_action_without_output_is_refused():
    class NoOutput(ReadAction):
        name = "no_output"
        kind = "read"
        contract_version = 1
        title = "t"
        description = "d"
        Input = EchoInput

        def handle(self, ctx: ActionContext, params: Any) -> BaseModel:
            raise AssertionError

    assert "Output" in build_refusal([NoOutput()])


def test_a_module_without_actions_is_refused(write_module):
    module = write_module("VALUE = 1\n", stem="empty")

    message = refusal([module])

    assert module in message
    assert "ACTIONS" in message


def test_an_unimportable_module_is_refused():
    missing = f"no_such_actions_{secrets.token_hex(4)}"

    message = refusal([BUNDLED, missing])

    assert missing in message
    assert "cannot be imported" in message


def test_a_module_whose_own_imports_fail_is_refused(write_module):
    module = write_module("import no_such_dependency_xyz\nACTIONS = []\n", stem="broken_import")

    message = refusal([module])

    assert module in message
    assert "no_such_dependency_xyz" in message


def test_a_module_that_fails_to_import_is_refused_with_every_other_problem(write_module):
    broken = write_module("def oops(:\n    pass\n", stem="syntax_error")
    empty = write_module("VALUE = 1\n", stem="empty")

    with pytest.raises(RegistryError) as caught:  # not a bare SyntaxError: name every problem
        load_registry([broken, empty])

    assert broken in str(caught.value)
    assert empty in str(caught.value)


def test_actions_that_are_not_a_list_are_refused_naming_the_module(write_module):
    module = write_module(
        USER_MODULE.format(prefix="").replace(
            "ACTIONS = [GetTicket(), CloseTicket()]", "ACTIONS = GetTicket()"
        ),
        stem="not_a_list",
    )

    with pytest.raises(RegistryError) as caught:  # not a bare TypeError
        load_registry([module])

    assert module in str(caught.value)


def test_an_action_class_listed_instead_of_an_instance_is_not_blamed_on_its_kind(write_module):
    module = write_module(
        USER_MODULE.format(prefix="").replace(
            "ACTIONS = [GetTicket(), CloseTicket()]", "ACTIONS = [GetTicket, CloseTicket()]"
        ),
        stem="class_listed",
    )

    message = refusal([module])

    assert "get_ticket" in message
    assert "without an explicit kind" not in message, "GetTicket does declare kind = 'read'"


def test_every_problem_is_named_in_one_message(write_module):
    undeclared = write_module(UNDECLARED_MODULE)
    empty = write_module("VALUE = 1\n", stem="empty")
    missing = f"no_such_actions_{secrets.token_hex(4)}"

    message = refusal([missing, empty, undeclared])

    for expected in (missing, empty, "lookup_without_kind", "wipe_without_kind"):
        assert expected in message


# --- a user package registers its actions like the bundled one ----------------------------


@pytest.fixture
def user_module(write_module) -> tuple[str, str]:
    """A user module; returns (module name, action name prefix)."""
    prefix = f"u{secrets.token_hex(3)}_"
    return write_module(USER_MODULE.format(prefix=prefix)), prefix


@pytest.fixture
def user_runtime(db_url: str, tmp_path: Path, user_module) -> Iterator[Runtime]:
    module, _ = user_module
    runtime = build_runtime(
        Settings(
            state_dir=tmp_path / "state", database_url=db_url, action_modules=[BUNDLED, module]
        )
    )
    yield runtime
    runtime.engine.dispose()


def agent_door(runtime: Runtime) -> ToolDoor:
    with session_scope(runtime.engine) as session:
        issued = tokens.issue(
            session,
            tenant="acme",
            subject="helpdesk-bot",
            role=Role.AGENT,
            on_behalf_of="cust-ada",
            actor="operator:test",
        )
    return ToolDoor(runtime, stdio_token=issued.token)


def test_user_actions_appear_in_the_catalog_like_the_bundled_ones(user_runtime, user_module):
    _, prefix = user_module
    read, write = f"{prefix}get_ticket", f"{prefix}close_ticket"

    specs = {spec.name: spec for spec in catalog(user_runtime.registry)}

    assert read in specs
    assert f"propose_{write}" in specs
    assert write not in specs, "a write action is exposed only as propose_<name>"
    assert {"get_order", "propose_refund", "get_draft"} <= set(specs)
    assert specs[read].read_only is True
    assert specs[f"propose_{write}"].read_only is False
    assert specs[f"propose_{write}"].action == write
    propose_fields = set(specs[f"propose_{write}"].input_model.model_fields)
    assert propose_fields == {"ticket_id", "resolution", "idempotency_key", "draft_id"}
    tools = {tool.name: tool for tool in mcp_tools(user_runtime)}
    assert tools[read].annotations.read_only_hint is True
    assert tools[f"propose_{write}"].annotations.read_only_hint is False
    assert tools[f"propose_{write}"].input_schema["additionalProperties"] is False


def test_a_user_read_action_answers_through_the_tool_door(user_runtime, user_module):
    _, prefix = user_module
    door = agent_door(user_runtime)

    result = door.call(f"{prefix}get_ticket", {"ticket_id": "T-123"}, new_trace_id(), None)

    assert result == {"ticket_id": "T-123", "status": "open", "customer": "cust-ada"}
    with pytest.raises(DomainError) as caught:
        door.call(f"{prefix}get_ticket", {"ticket_id": "T-1", "x": 1}, new_trace_id(), None)
    assert caught.value.code == "INVALID_ARGUMENT"


def test_a_user_write_action_is_proposed_as_a_draft(user_runtime, user_module):
    _, prefix = user_module
    door = agent_door(user_runtime)
    trace_id = new_trace_id()

    view = door.call(
        f"propose_{prefix}close_ticket",
        {"ticket_id": "T-123", "resolution": "answered by phone", "idempotency_key": "k-1"},
        trace_id,
        None,
    )

    assert view["status"] == "proposed"
    assert view["action"] == f"{prefix}close_ticket"
    assert view["summary"] == "Close ticket T-123"
    assert view["params"] == {"ticket_id": "T-123", "resolution": "answered by phone"}
    with Session(user_runtime.engine) as session:
        draft = session.get(Draft, view["draft_id"])
        assert draft is not None
        assert (draft.action, draft.contract_version, draft.status) == (
            f"{prefix}close_ticket",
            2,
            "proposed",
        )
        types = session.exec(
            select(AuditEvent.type).where(AuditEvent.draft_id == view["draft_id"])
        ).all()
    assert list(types) == ["draft.proposed", "tool.called"]
    replay = door.call(
        f"propose_{prefix}close_ticket",
        {"ticket_id": "T-123", "resolution": "answered by phone", "idempotency_key": "k-1"},
        new_trace_id(),
        None,
    )
    assert (replay["draft_id"], replay["replayed"]) == (view["draft_id"], True)
    status = door.call("get_draft", {"draft_id": view["draft_id"]}, new_trace_id(), None)
    assert status["status"] == "proposed"
    with pytest.raises(DomainError) as caught:  # the write itself is never a tool
        door.call(f"{prefix}close_ticket", {"ticket_id": "T-123"}, new_trace_id(), None)
    assert caught.value.code == "UNKNOWN_TOOL"


# --- policies ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        pytest.param({"tiers": []}, id="no-tiers"),
        pytest.param({"tiers": [{"up_to": "500.00", "approvals": 1}]}, id="bounded-last-tier"),
        pytest.param({"tiers": [{"approvals": 0}]}, id="zero-approvals"),
        pytest.param({"tiers": [{"up_to": "abc", "approvals": 1}, {"approvals": 2}]}, id="nan"),
        pytest.param({"tiers": [{"approvals": 1}], "ttl_seconds": 1}, id="ttl-too-short"),
        pytest.param({"tiers": [{"approvals": 1}], "approvers": 2}, id="unknown-key"),
    ],
)
def test_build_runtime_refuses_an_invalid_policy_naming_it(tmp_path, config):
    settings = Settings(
        state_dir=tmp_path,
        policies={"cancel_order": {"tiers": [{"approvals": 1}]}, "refund": config},
    )

    with pytest.raises(PolicyError) as caught:
        build_runtime(settings)

    assert "'refund'" in str(caught.value)
    assert "cancel_order" not in str(caught.value)


def test_build_runtime_names_every_invalid_policy(tmp_path):
    settings = Settings(
        state_dir=tmp_path,
        policies={"refund": {"tiers": []}, "cancel_order": {"tiers": [{"approvals": 99}]}},
    )

    with pytest.raises(PolicyError) as caught:
        build_runtime(settings)

    assert "'refund'" in str(caught.value)
    assert "'cancel_order'" in str(caught.value)


def test_build_runtime_refuses_a_policy_for_an_action_that_does_not_exist(tmp_path):
    # A misspelt policy name would otherwise leave "refund" on the one-approver default.
    settings = Settings(
        state_dir=tmp_path,
        policies={"refunds": {"tiers": [{"up_to": "500.00", "approvals": 1}, {"approvals": 2}]}},
    )

    with pytest.raises((PolicyError, RegistryError), match="refunds"):
        build_runtime(settings)
