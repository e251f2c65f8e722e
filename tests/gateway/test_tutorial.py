"""docs/gateway-tutorial.md, run as written: every command and the YAML are read from the
document and run in a shell, against the real example API and a real ``draftgate dev``
(only the ports are changed to free ones, and the working directory is a fresh one). The
shell is a fresh machine's (tests/docs/reader.py): no uv and no virtual environment on PATH,
only the checkout's ``./run``."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from harness.servers import free_port
from tests.docs.reader import fresh_machine_env, reader_directory
from tests.gateway.upstreams.ledger import Ledger

pytestmark = pytest.mark.full

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "gateway-tutorial.md"
STEP = re.compile(
    r"<!-- tutorial: (?P<name>[\w.-]+) -->\n```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S
)
START_TIMEOUT_SECONDS = 120
TOKEN = "billing-demo-token"


def steps() -> dict[str, str]:
    found = {m["name"]: m["body"] for m in STEP.finditer(TUTORIAL.read_text(encoding="utf-8"))}
    assert set(found) == {
        "start-api",
        "import",
        "gateway.yaml",
        "check",
        "start-draftgate",
        "propose",
        "approve",
        "verify",
    }
    return found


class Shell:
    """Runs the tutorial's blocks as a reader's shell would, in one working directory."""

    def __init__(self, cwd: Path, ports: dict[str, int]) -> None:
        self.cwd = reader_directory(cwd)
        self.ports = ports
        self.env = fresh_machine_env(PYTHONPATH=str(ROOT))  # "from the root of a checkout"

    def local(self, text: str) -> str:
        for documented, port in self.ports.items():
            text = re.sub(rf"\b{documented}\b", str(port), text)
        return text

    def run(self, block: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", self.local(block)],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, f"{block}\n{result.stdout}\n{result.stderr}"
        return result

    @contextmanager
    def background(self, block: str, log: Path, *, stop: int) -> Iterator[subprocess.Popen[bytes]]:
        with log.open("wb") as sink:
            process = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", self.local(block)],
                cwd=self.cwd,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its whole tree is stopped at the end
            )
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, stop)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)


def wait_until_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.1)


def edited(generated: dict[str, Any]) -> dict[str, Any]:
    """The generated file with exactly the edits the tutorial's step 3 describes."""
    service = generated["http"][0]
    service["headers"] = {"Authorization": {"env": "BILLING_TOKEN", "prefix": "Bearer "}}
    service["actions"]["get_invoice"]["response_fields"].remove("internal_notes")
    refund = service["actions"]["create_refund"]
    refund["response_fields"] = ["refund_id", "amount", "currency", "status"]
    refund["summary"] = "Refund {amount|money:currency} on invoice {invoice_id} (reason: {reason})"
    return generated


def test_the_gateway_tutorial_works_as_written(tmp_path: Path) -> None:
    step = steps()
    ports = {"8123": free_port(), "8000": free_port(), "8001": free_port()}
    shell = Shell(tmp_path, ports)
    api_log, dev_log = tmp_path / "api.log", tmp_path / "dev.log"
    with shell.background(step["start-api"], api_log, stop=signal.SIGTERM) as api:
        wait_until_ready(f"http://127.0.0.1:{ports['8123']}/healthz", api, api_log)

        # 2. the import writes what the tutorial says it writes
        shell.run(step["import"])
        text = (tmp_path / "gateway.yaml").read_text()
        assert '# headers: {Authorization: {env: BILLING_TOKEN, prefix: "Bearer "}}' in text
        assert "money:\n          amount_minor: amount\n          currency: currency" in text
        # 3. the edited file is the generated one with exactly the edits described
        documented = shell.local(step["gateway.yaml"])
        assert yaml.safe_load(documented) == edited(yaml.safe_load(text))
        (tmp_path / "gateway.yaml").write_text(documented)

        # 4. check
        checked = shell.run(step["check"]).stdout
        assert "billing_get_invoice" in checked
        assert "propose_billing_create_refund" in checked

        # 5. draftgate, with the gateway
        with shell.background(step["start-draftgate"], dev_log, stop=signal.SIGINT) as dev:
            wait_until_ready(f"http://127.0.0.1:{ports['8000']}/readyz", dev, dev_log)
            wait_until_ready(f"http://127.0.0.1:{ports['8001']}/healthz", dev, dev_log)

            # 6. the agent reads and proposes
            invoice_line, *draft_lines = shell.run(step["propose"]).stdout.splitlines()
            invoice = json.loads(invoice_line)
            draft = json.loads("\n".join(draft_lines))
            assert invoice["customer_email"] == "***"
            assert invoice["customer_name"] == "***"
            assert "internal_notes" not in invoice
            assert draft["status"] == "proposed"
            ledger = Ledger(tmp_path / "billing-ledger.jsonl")
            assert ledger.effects("create_refund") == []  # nothing happened yet

            # 7. the approver signs; the worker refunds once, with the draft's key
            approved = shell.run(step["approve"].replace("<draft id>", draft["draft_id"]))
            assert "succeeded" in approved.stdout
            assert "Refund 25.00 EUR on invoice INV-1001 (reason: charged twice)" in (
                approved.stdout
            )
            [effect] = ledger.effects("create_refund")
            assert effect["key"] == f"{draft['draft_id']}:1"
            assert json.loads(shell.run(step["verify"]).stdout)["refunded_cents"] == 2500

        # The audit log has the whole chain, and no token; nor has any log of the stack.
        with sqlite3.connect(tmp_path / ".draftgate" / "draftgate.db") as database:
            events = database.execute("SELECT type, data FROM audit_events").fetchall()
        types = {event_type for event_type, _ in events}
        chain = {"tool.called", "draft.proposed", "approval.approved", "draft.approved"}
        assert chain | {"execution.requested", "execution.succeeded"} <= types, types
        assert TOKEN not in json.dumps(events)
        for log in [dev_log, *(tmp_path / ".draftgate" / "logs").glob("*")]:
            assert TOKEN not in log.read_text(errors="replace"), log
