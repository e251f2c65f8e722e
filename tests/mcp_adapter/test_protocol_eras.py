"""Both protocol eras the SDK speaks (issue 19): a 2025-11-25 client (initialize handshake)
and a 2026-07-28 client (stateless, per-request capabilities) reach the same tools and
resources; the full lane runs every MCP test module once more as a 2025-11-25 client."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.mcp_helpers import module_host_fixtures

mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()
ROOT = Path(__file__).parents[2]


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "version"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_each_era_negotiates_its_version_and_reads_a_draft(mcp_url, demo, mode, version):
    headers = {"Authorization": f"Bearer {demo['tokens']['agent']}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(mcp_url, http_client=http), mode=mode) as agent,
    ):
        assert agent.protocol_version == version
        proposed = await agent.call_tool(
            "propose_refund",
            {
                "order_id": demo["orders"]["delivered"],
                "amount": {"amount_minor": 700, "currency": "USD"},
                "reason": "damaged",
            },
        )
        uri = proposed.structured_content["resource_uri"]
        read = await agent.read_resource(uri)
    assert uri in read.contents[0].text


@pytest.mark.full
def test_every_mcp_test_passes_as_a_2025_11_25_client():
    env = {**os.environ, "DRAFTGATE_TEST_MCP_MODE": "legacy"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--lane",
            "full",
            "tests/mcp_adapter",
            "--deselect",
            "tests/mcp_adapter/test_protocol_eras.py::test_every_mcp_test_passes_as_a_2025_11_25_client",
        ],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1]
