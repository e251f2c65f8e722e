"""``draftgate dev`` end to end: a real process tree on the embedded default, stopped by Ctrl-C."""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.dev import draftgate_dev
from harness.servers import healthy
from service.signing import key_id_for, public_key_b64
from tests.support.mcp_client import connect, error_of

pytestmark = pytest.mark.full

STOPPED_WITHIN_SECONDS = 15

MANIFEST_KEYS = {"api_url", "mcp_url", "tenant", "tokens", "approvers", "orders"}
TOKEN_KEYS = {"agent", "agent_other_customer", "approver_alice", "approver_bob", "auditor", "admin"}
APPROVER_KEYS = {"alice", "bob"}
ORDER_KEYS = {
    "pending_payment",
    "paid",
    "shipped",
    "delivered",
    "delivered_long_ago",
    "other_customer",
}


# --- the process tree, seen through /proc ---------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of a process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[19])


def descendants(pid: int) -> dict[int, int]:
    """Every live descendant of ``pid``: {pid: start time} (the start time guards pid reuse)."""
    parents: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            info = _stat(int(entry.name))
            if info is not None and info[0] != "Z":
                parents.setdefault(info[1], []).append(int(entry.name))
                starts[int(entry.name)] = info[2]
    found: dict[int, int] = {}
    pending = [pid]
    while pending:
        for child in parents.get(pending.pop(), []):
            found[child] = starts[child]
            pending.append(child)
    return found


def still_running(processes: dict[int, int]) -> list[int]:
    alive = []
    for pid, started in processes.items():
        info = _stat(pid)
        if info is not None and info[0] != "Z" and info[2] == started:
            alive.append(pid)
    return alive


def wait_gone(processes: dict[int, int], seconds: float = 5) -> list[int]:
    deadline = time.monotonic() + seconds
    while still_running(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    return still_running(processes)


# --- the agent's view over MCP --------------------------------------------------------------------


async def agent_session(url: str, manifest: dict[str, Any]) -> dict[str, Any]:
    async with connect(url, manifest["tokens"]["agent"]) as client:
        tools = await client.list_tools()
        paid = await client.call_tool("get_order", {"order_id": manifest["orders"]["paid"]})
        stranger = await client.call_tool(
            "get_order", {"order_id": manifest["orders"]["other_customer"]}
        )
    return {"tools": tools, "paid": paid, "stranger": stranger}


async def other_customer_reads(url: str, manifest: dict[str, Any]) -> Any:
    async with connect(url, manifest["tokens"]["agent_other_customer"]) as client:
        return await client.call_tool(
            "get_order", {"order_id": manifest["orders"]["other_customer"]}
        )


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- tests ----------------------------------------------------------------------------------------


def test_dev_runs_the_stack_stops_on_ctrl_c_and_a_second_run_reuses_the_manifest(tmp_path):
    """One first run checked in full (starting dev costs seconds), then a second run on its
    state dir."""
    state_dir = tmp_path / "state"
    with draftgate_dev(state_dir, tmp_path / "dev.log") as dev:
        manifest = dev.manifest()
        key_files = {
            name: Path(a["private_key_file"]).read_bytes()
            for name, a in manifest["approvers"].items()
        }

        # The manifest: exactly the documented keys.
        assert set(manifest) == MANIFEST_KEYS
        assert set(manifest["tokens"]) == TOKEN_KEYS
        assert set(manifest["approvers"]) == APPROVER_KEYS
        assert set(manifest["orders"]) == ORDER_KEYS
        for approver in manifest["approvers"].values():
            assert set(approver) == {"key_id", "private_key_file"}
        assert manifest["api_url"] == dev.api_url
        assert manifest["mcp_url"] == dev.mcp_url
        assert manifest["tenant"] == "demo"
        assert all(re.fullmatch(r"dg_[A-Za-z0-9_-]{43}", t) for t in manifest["tokens"].values())
        assert len(set(manifest["tokens"].values())) == len(TOKEN_KEYS)
        assert all(re.fullmatch(r"ORD-[0-9]{4,20}", o) for o in manifest["orders"].values())
        assert mode_of(state_dir / "demo.json") == 0o600

        # The approvers' keys: PKCS#8 PEM Ed25519, owner-only, matching the registered key id.
        for approver in manifest["approvers"].values():
            key_file = Path(approver["private_key_file"])
            assert key_file.is_file()
            assert mode_of(key_file) == 0o600
            pem = key_file.read_bytes()
            assert pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")  # PKCS#8, unencrypted
            key = serialization.load_pem_private_key(pem, password=None)
            assert isinstance(key, Ed25519PrivateKey)
            assert key_id_for(public_key_b64(key)) == approver["key_id"]
        alice, bob = (manifest["approvers"][n]["key_id"] for n in ("alice", "bob"))
        assert alice != bob

        # Liveness and readiness.
        assert httpx.get(dev.api_url + "/healthz", timeout=10).status_code == 200
        ready = httpx.get(dev.api_url + "/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        mcp_health = httpx.get(dev.mcp_url.removesuffix("/mcp") + "/healthz", timeout=10)
        assert mcp_health.status_code == 200

        # An agent over MCP, with the real client.
        seen = anyio.run(agent_session, dev.mcp_url, manifest)
        names = {tool.name for tool in seen["tools"].tools}
        assert {"get_order", "list_orders", "propose_refund", "get_draft"} <= names
        assert "refund" not in names
        assert not seen["paid"].is_error
        assert seen["paid"].structured_content["order_id"] == manifest["orders"]["paid"]
        assert error_of(seen["stranger"])["code"] == "ORDER_UNAVAILABLE"
        other = anyio.run(other_customer_reads, dev.mcp_url, manifest)
        assert not other.is_error, "agent_other_customer acts for the other customer"

        # Ctrl-C: the whole tree stops, cleanly and promptly.
        children = descendants(dev.pid)
        assert len(children) >= 2, "api and mcp run as child processes"
        code, took = dev.interrupt(whole_group=True)

    assert code == 0, dev.output()
    assert took < STOPPED_WITHIN_SECONDS, f"stopping took {took:.1f}s"
    assert wait_gone(children) == [], f"left running: {still_running(children)}"
    assert "Traceback" not in dev.output()
    # One clean banner: the components' own output (Celery's banners, uvicorn's lines) is
    # in one log file each under the state dir, not on the terminal.
    assert dev.output().count("draftgate is running") == 1
    for noise in ("celery@", "[tasks]", "Uvicorn running", "SecurityWarning"):
        assert noise not in dev.output(), noise
    logs = {path.name: path.read_text(errors="replace") for path in (state_dir / "logs").iterdir()}
    assert set(logs) == {"api.log", "mcp.log", "worker.log", "beat.log"}
    assert "celery@" in logs["worker.log"], "the worker's banner went to its log"

    with draftgate_dev(state_dir, tmp_path / "second.log") as second:
        reused = second.manifest()

        assert reused["tokens"] == manifest["tokens"]
        assert reused["approvers"] == manifest["approvers"]
        assert reused["orders"] == manifest["orders"]
        assert reused["tenant"] == manifest["tenant"]
        assert (reused["api_url"], reused["mcp_url"]) == (second.api_url, second.mcp_url)
        for name, approver in reused["approvers"].items():
            assert Path(approver["private_key_file"]).read_bytes() == key_files[name]
        assert mode_of(state_dir / "demo.json") == 0o600

        seen = anyio.run(agent_session, second.mcp_url, reused)
        assert not seen["paid"].is_error, "the first run's agent token still works"

        # kill -INT on dev alone (not the group): dev stops its children itself.
        children = descendants(second.pid)
        code, took = second.interrupt(whole_group=False)

    assert code == 0, second.output()
    assert took < STOPPED_WITHIN_SECONDS, f"stopping took {took:.1f}s"
    assert wait_gone(children) == [], f"left running: {still_running(children)}"


# Keeps the API child of ``draftgate dev`` from starting (it waits for a signal before
# importing anything), so that a Ctrl-C arrives while dev is still waiting for it to get ready.
SLOW_API_START = """
import os, signal, sys
if "serve" in sys.argv and "api" in sys.argv:
    open(os.environ["DRAFTGATE_TEST_SLOW_START_MARK"], "w").close()
    signal.pause()
"""


def test_ctrl_c_while_starting_stops_cleanly(tmp_path):
    slow = tmp_path / "slow-start"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_API_START)
    mark = tmp_path / "api-is-starting"
    pythonpath = os.pathsep.join(filter(None, [str(slow), os.environ.get("PYTHONPATH")]))

    with draftgate_dev(
        tmp_path / "state",
        tmp_path / "dev.log",
        ready=False,
        PYTHONPATH=pythonpath,
        DRAFTGATE_TEST_SLOW_START_MARK=str(mark),
    ) as dev:
        dev.wait_for(mark.exists, "API child")
        dev.wait_for(lambda: healthy(dev.mcp_url.removesuffix("/mcp") + "/healthz"), "MCP")
        assert "Press Ctrl-C to stop." not in dev.output()  # dev still waits for the API
        children = descendants(dev.pid)
        code, took = dev.interrupt(whole_group=True)

    assert code == 0, f"Ctrl-C while starting is a normal stop, not a failure:\n{dev.output()}"
    assert took < STOPPED_WITHIN_SECONDS, f"stopping took {took:.1f}s"
    assert wait_gone(children) == [], f"left running: {still_running(children)}"
