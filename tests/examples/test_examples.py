"""The client examples (examples/, docs/clients.md) run as a reader runs them, against a real
``draftgate dev``: each framework's own agent loop with its own scripted model proposes a
refund over MCP, an approver signs and requests execution through the API meanwhile, and the
example learns the outcome through its draft's subscription (no sleep loop) and prints it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.approvals import approve, bearer
from harness.dev import DevRun, draftgate_dev

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted(path.name for path in (ROOT / "examples").glob("*_example.py"))
RUN_TIMEOUT_SECONDS = 180  # liveness on a shared machine, not a speed claim


def test_every_example_is_in_the_client_guide_and_says_how_to_run_it():
    guide = (ROOT / "docs" / "clients.md").read_text()
    assert EXAMPLES, "no examples found"
    for name in EXAMPLES:
        assert f"examples/{name}" in guide, name
        source = (ROOT / "examples" / name).read_text()
        assert f"./run python examples/{name}" in source, name


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevRun]:
    root = tmp_path_factory.mktemp("examples")
    with draftgate_dev(root / ".draftgate", root / "dev.log") as running:
        yield running


def approve_what_comes(manifest: dict[str, Any], stop: threading.Event) -> list[str]:
    """Alice signs and starts every draft that is proposed while the example runs."""
    done: list[str] = []
    headers = bearer(manifest["tokens"]["approver_alice"])
    api = manifest["api_url"]
    while not stop.is_set():
        listed = httpx.get(f"{api}/v1/drafts?status=proposed", headers=headers, timeout=30)
        for draft in listed.json()["drafts"]:
            assert approve(api, manifest, draft["draft_id"], "alice").status_code == 201
            executed = httpx.post(
                f"{api}/v1/drafts/{draft['draft_id']}/execute", headers=headers, timeout=30
            )
            assert executed.status_code == 202, executed.text
            done.append(draft["draft_id"])
        time.sleep(0.2)
    return done


@pytest.mark.full
@pytest.mark.parametrize("example", EXAMPLES)
def test_the_example_proposes_and_learns_the_outcome_without_polling(dev: DevRun, example: str):
    manifest = dev.manifest()
    stop = threading.Event()
    approved: list[str] = []
    approver = threading.Thread(
        target=lambda: approved.extend(approve_what_comes(manifest, stop)), daemon=True
    )
    approver.start()
    try:
        run = subprocess.run(
            [sys.executable, str(ROOT / "examples" / example), str(dev.state_dir / "demo.json")],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_SECONDS,
            check=False,
        )
    finally:
        stop.set()
        approver.join(timeout=30)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "outcome: succeeded: Done: refunded" in run.stdout, run.stdout
    assert '"refund_id": "re_' in run.stdout
    assert len(approved) == 1
