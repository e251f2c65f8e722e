"""The gateway's naming rule and its errors (issue 17, item 4): any MCP tool name maps by one
documented rule to the names agents see, collisions are refused at start with file and line,
every error is ``<file>:<line>: <path>: <problem>``, YAML cannot make the loader recurse, a
write's timeout must fit the execution task's time limit, and the commands that serve
refuse a bad file with one line on stderr and exit status 2.

Each test here failed before the fix it is named for (a ``RegistryError`` traceback for
``get-sum``, errors without a line, ``RecursionError``, a timeout of 300 s accepted, exit 1
with a traceback).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcp_adapter.server import instructions
from service.config import Settings, child_environment
from service.gateway import naming
from service.gateway.build import build_gateway, wait_budget
from service.gateway.config import parse_gateway_text
from service.gateway.errors import GatewayError
from service.registry.loader import build_registry, load_registry
from service.runtime import build_runtime

DOC = Path(__file__).parents[2] / "docs" / "gateway.md"
SHOP = [action.name for action in load_registry(Settings().action_modules)]


def desk_file(tmp_path: Path, url: str, tools: dict[str, Any], **entry: Any) -> Path:
    path = tmp_path / "gateway.yaml"
    server = {"namespace": "desk", "transport": "http", "url": url, **entry, "tools": tools}
    path.write_text(yaml.safe_dump({"version": 1, "mcp": [server]}, sort_keys=False))
    return path


def problems_of(text: str, **options: Any) -> list[str]:
    with pytest.raises(GatewayError) as refused:
        parse_gateway_text(text, name="gw.yaml", **options)
    return refused.value.problems


# --- the rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "name"),
    [
        ("get-sum", "everything_get_sum"),
        ("gzip-file-as-resource", "everything_gzip_file_as_resource"),
        ("admin.tools.list", "everything_admin_tools_list"),
        ("getSum", "everything_get_sum"),
        ("DATA_EXPORT_v2", "everything_data_export_v2"),
        ("v2Beta", "everything_v2_beta"),
        ("_private", "everything__private"),
        ("9lives", "everything_9lives"),
        ("a--b..c", "everything_a__b__c"),
    ],
)
def test_any_mcp_tool_name_maps_to_an_action_name(tool: str, name: str) -> None:
    assert naming.action_name("everything", tool) == name
    assert re.fullmatch(r"[a-z][a-z0-9_]{1,48}", name)  # the registry's action names


@pytest.mark.parametrize(
    ("tool", "refusal"),
    [
        ("", "is not an MCP tool name"),
        ("a b", "is not an MCP tool name"),
        ("tools/list", "is not an MCP tool name"),
        ("é", "is not an MCP tool name"),
        ("x" * 129, "is not an MCP tool name"),
        ("x" * 39, "(50 characters); an action name has at most 49"),
    ],
)
def test_a_name_the_rule_cannot_give_is_refused(tool: str, refusal: str) -> None:
    with pytest.raises(naming.NameRefused, match=re.escape(refusal)):
        naming.action_name("everything", tool)


def test_the_longest_name_fits_and_every_exposed_name_is_an_mcp_tool_name() -> None:
    name = naming.action_name("everything", "x" * 38)
    assert len(name) == 49
    assert naming.TOOL_NAME.fullmatch("propose_" + name)


def test_the_documented_examples_follow_the_rule() -> None:
    section = DOC.read_text(encoding="utf-8").split("## Names agents see", 1)[1].split("\n## ")[0]
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \|$", section, flags=re.M)
    assert len(rows) >= 5
    for tool, read, write in rows:
        namespace = read.split("_", 1)[0]
        assert naming.action_name(namespace, tool) == read
        assert write == f"propose_{read}"


# --- collisions, named with file and line -----------------------------------------------------

COLLIDING = """\
version: 1
mcp:
  - namespace: everything
    transport: stdio
    command: node
    tools:
      get-sum: {kind: read}
      get_sum: {kind: read}
      getSum: {kind: read}
      get.sum: {kind: read}
  - namespace: list
    transport: stdio
    command: node
    tools:
      orders: {kind: read}
  - namespace: get
    transport: stdio
    command: node
    tools:
      draft: {kind: read}
"""


def test_tools_that_map_to_one_name_or_to_a_taken_one_are_refused_naming_their_lines() -> None:
    assert problems_of(COLLIDING, reserved=SHOP) == [
        "gw.yaml:8: mcp[0].tools.get_sum: it maps to everything_get_sum, as 'get-sum' (line 7) "
        "does; an agent could not tell the two apart (declare one of them)",
        "gw.yaml:9: mcp[0].tools.getSum: it maps to everything_get_sum, as 'get-sum' (line 7) "
        "does; an agent could not tell the two apart (declare one of them)",
        "gw.yaml:10: mcp[0].tools[\"get.sum\"]: it maps to everything_get_sum, as 'get-sum' "
        "(line 7) does; an agent could not tell the two apart (declare one of them)",
        "gw.yaml:15: mcp[1].tools.orders: it maps to list_orders, the name of an existing "
        "action; use another namespace",
        "gw.yaml:20: mcp[2].tools.draft: it maps to get_draft, a tool draftgate itself offers; "
        "use another namespace",
    ]


def test_propose_is_no_namespace_and_a_namespace_is_used_once() -> None:
    text = """\
version: 1
mcp:
  - {namespace: propose, transport: stdio, command: node, tools: {refund: {kind: read}}}
  - {namespace: desk, transport: stdio, command: node, tools: {}}
http:
  - namespace: desk
    base_url: http://127.0.0.1:9
    actions:
      x: {kind: read, description: d, request: {method: GET, path: /}, response_fields: [a]}
"""
    assert problems_of(text) == [
        "gw.yaml:3: mcp[0].namespace: 'propose' is not a namespace: every write is offered as "
        "propose_*",
    ]
    assert problems_of(text.replace("namespace: propose", "namespace: shop")) == [
        "gw.yaml:6: http[0].namespace: 'desk' is already the namespace of mcp[1] (line 4); "
        "each upstream needs its own"
    ]


def test_the_shops_own_names_collide_when_the_runtime_starts(desk, sqlite_url, tmp_path):
    path = desk_file(tmp_path, desk.mcp_url, {"orders": {"kind": "read"}}, namespace="list")
    settings = Settings(state_dir=tmp_path / "state", database_url=sqlite_url, gateway_file=path)
    with pytest.raises(GatewayError) as refused:
        build_runtime(settings)
    assert refused.value.problems == [
        f"{path}:7: mcp[0].tools.orders: it maps to list_orders, the name of an existing "
        "action; use another namespace"
    ]


# --- hyphenated and dotted upstream tools are served ------------------------------------------


def test_a_dotted_and_hyphenated_upstream_tool_is_served_under_its_mapped_name(desk, tmp_path):
    path = desk_file(tmp_path, desk.mcp_url, {"tickets.count-open": {"kind": "read"}})
    report = build_gateway(path, reserved=SHOP)
    assert report.problems == []
    registry = build_registry(report.actions)  # once: RegistryError 'desk_tickets.count-open'
    action = registry.reads["desk_tickets_count_open"]
    answer = action.handle(None, action.Input.model_validate({}))  # type: ignore[arg-type]
    assert answer.model_dump()["data"] == {"open": 1}
    assert answer.model_dump()["tool"] == "tickets.count-open"  # called by its own name
    assert action.declared_at == f'{path}:7: mcp[0].tools["tickets.count-open"]'


def test_a_declared_tool_the_upstream_lacks_is_named_with_its_line(desk, tmp_path):
    tools = {"get_ticket": {"kind": "read"}, "ghost": {"kind": "read"}}
    path = desk_file(tmp_path, desk.mcp_url, tools)
    report = build_gateway(path)
    assert report.problems == [
        f"{path}:9: mcp[0].tools.ghost: declared, but the upstream has no tool of this name"
    ]


# --- YAML that would make the loader recurse --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("version: 1\nmcp: &a [*a]\n", "gw.yaml:2: mcp[0]: an alias to a value that contains it"),
        (
            "version: 1\nmcp: &a {x: *a}\n",
            "gw.yaml:2: mcp.x: an alias to a value that contains it",
        ),
        ("version: 1\nmcp: " + "[" * 3000 + "]" * 3000 + "\n", "gw.yaml:2: (file): nested deeper"),
        (
            "version: 1\na: &a " + "[" * 40 + "]" * 40 + "\nmcp: " + "[" * 40 + "*a" + "]" * 40,
            "nested deeper than 64",
        ),
    ],
)
def test_alias_cycles_and_deep_nesting_are_one_line_errors(text: str, problem: str) -> None:
    [line] = problems_of(text)
    assert problem in line


# --- timeouts that fit the execution task's soft time limit -----------------------------------

WRITING = """\
version: 1
mcp:
  - namespace: desk
    transport: http
    url: http://127.0.0.1:9/mcp
    timeout_seconds: {timeout}
    tools:
      get_ticket: {{kind: read}}
      create_ticket: {create}
"""
WRITE = '{kind: write, summary: "Open {title}"}'


def test_a_write_whose_timeout_outlasts_the_task_limit_is_refused_at_load() -> None:
    budget = wait_budget(Settings())  # 90% of 0.8 x 120 s
    assert budget == pytest.approx(86.4)
    [problem] = problems_of(WRITING.format(timeout=300, create=WRITE), wait_budget=budget)
    assert problem == (
        "gw.yaml:6: mcp[0].timeout_seconds: 300 s does not fit an execution: a write waits on "
        "this upstream up to 602 s (2 x (timeout + 1 s)), an execution attempt 86.4 s at most "
        "(90% of the task's soft time limit, 0.8 x DRAFTGATE_EXECUTION_LEASE_SECONDS); use at "
        "most 42.2 s, or raise DRAFTGATE_EXECUTION_LEASE_SECONDS"
    )
    parse_gateway_text(WRITING.format(timeout=42.2, create=WRITE), name="gw", wait_budget=budget)
    # Reads run in the door, not the worker; a longer lease makes room for longer writes.
    parse_gateway_text(
        WRITING.format(timeout=300, create="{kind: read}"), name="gw", wait_budget=budget
    )
    longer = wait_budget(Settings(execution_lease_seconds=900))
    parse_gateway_text(WRITING.format(timeout=300, create=WRITE), name="gw", wait_budget=longer)


def test_an_http_write_has_one_wait_and_the_default_timeout_is_checked_too() -> None:
    text = """\
version: 1
http:
  - namespace: billing
    base_url: http://127.0.0.1:9
    actions:
      refund:
        kind: write
        description: Refund.
        summary: Refund
        request: {method: POST, path: /refunds}
"""
    parse_gateway_text(text, name="gw", wait_budget=10.0)  # 10 s: one request of 10 s
    [problem] = problems_of(text, wait_budget=9.9)
    assert problem.startswith(
        "gw.yaml:3: http[0].timeout_seconds: 10 s (the default) does not fit an execution: a "
        "write waits on this upstream up to 10 s (timeout), an execution attempt 9.9 s at most"
    )


def test_the_runtime_refuses_a_timeout_its_lease_cannot_hold(desk, sqlite_url, tmp_path):
    tools = {"create_ticket": {"kind": "write", "summary": "Open {title}"}}
    path = desk_file(tmp_path, desk.mcp_url, tools, timeout_seconds=10)
    settings = Settings(
        state_dir=tmp_path / "state",
        database_url=sqlite_url,
        gateway_file=path,
        execution_lease_seconds=20,  # soft limit 16 s: 2 x (10 + 1) s do not fit
    )
    with pytest.raises(GatewayError, match=r"gateway\.yaml:6: mcp\[0\]\.timeout_seconds: 10 s"):
        build_runtime(settings)


# --- the commands that serve: one line, exit 2 ------------------------------------------------

SERVING = [
    pytest.param(["serve", "mcp", "--port", "{port}"], id="serve-mcp"),
    pytest.param(["serve", "api", "--port", "{port}"], id="serve-api", marks=pytest.mark.full),
    pytest.param(["serve", "worker"], id="serve-worker", marks=pytest.mark.full),
    pytest.param(["serve", "beat"], id="serve-beat", marks=pytest.mark.full),
    pytest.param(
        ["dev", "--state-dir", "{state}", "--api-port", "{port}", "--mcp-port", "{port2}"],
        id="dev",
    ),
]


@pytest.mark.parametrize("command", SERVING)
def test_a_command_that_serves_refuses_a_bad_file_with_one_line_and_exit_2(
    command: list[str], sqlite_url: str, tmp_path: Path, free_tcp_port: int
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(COLLIDING.partition("      getSum:")[0])  # get-sum and get_sum: 1 problem
    settings = Settings(state_dir=tmp_path / "state", database_url=sqlite_url, gateway_file=path)
    env = child_environment(settings)
    if command[0] == "dev":  # dev runs on its own state dir, always on the embedded default
        env = {k: v for k, v in env.items() if k != "DRAFTGATE_DATABASE_URL"}
    values = {"port": free_tcp_port, "port2": free_tcp_port + 1, "state": tmp_path / "dev"}
    started = subprocess.run(
        [sys.executable, "-m", "service.cli", *[part.format(**values) for part in command]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in started.stderr
    assert (started.returncode, started.stderr) == (
        2,
        f"{path}:8: mcp[0].tools.get_sum: it maps to everything_get_sum, as 'get-sum' (line 7) "
        "does; an agent could not tell the two apart (declare one of them)\n",
    )


# --- the MCP door's instructions name what is gated (issue 24.7) -----------------------------


def test_the_instructions_name_the_gated_upstreams_proposals_beside_the_shops(
    desk, sqlite_url, tmp_path
):
    tools = {"create_ticket": {"kind": "write", "summary": "Open {title}"}}
    path = desk_file(tmp_path, desk.mcp_url, tools)
    runtime = build_runtime(
        Settings(state_dir=tmp_path / "state", database_url=sqlite_url, gateway_file=path)
    )
    try:
        said = instructions(runtime)
    finally:
        runtime.engine.dispose()
    assert "propose_desk_create_ticket" in said
    assert "propose_refund" in said
    assert "whatever its gateway puts behind it" in said
