"""The README, run as written on a fresh machine against a real ``draftgate dev``.

Which blocks run is marked in the README by an HTML comment on the line before a ```sh
fence (indented like the fence; invisible on GitHub):

    <!-- readme: start -->   the block starts the stack (the Quickstart's ``./run dev``): it
                             runs in the background, as in a terminal of its own, and the
                             test waits until dev announces it is running
    <!-- readme: run -->     the block runs in the reader's shell, after every earlier one,
                             with stdin not a terminal (bash -e -u -o pipefail: any command
                             that fails, fails the test)

Every ``run`` block is pasted into one shell, in the order of the README, as a reader pastes
them into one terminal (so ``M=…`` and ``export …`` carry over). That shell is a fresh
machine's (tests/docs/reader.py): no uv, no virtual environment, no ``draftgate`` on PATH,
in a directory of its own whose ``./run`` is the checkout's. Unmarked blocks (servers that
run until stopped, commands that need a passphrase or a value printed earlier, the test
suite itself) are not run; test_doc_commands.py checks every command in them exists.

The test changes only what a second reader on the same machine would: the ports (8000 and
8001 become free ones, given to ``./run dev`` as --api-port/--mcp-port), and the
placeholders ``<draft id>`` and ``<trace id>``, filled in with the ``draft_id`` and
``trace_id`` the agent's block printed, as the README tells the reader to.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import textwrap
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.servers import free_port
from tests.docs.reader import ROOT, fresh_machine_env, reader_directory

pytestmark = pytest.mark.full

README = ROOT / "README.md"
BLOCK = re.compile(
    r"^(?P<indent>[ ]*)<!-- readme: (?P<kind>start|run) -->\n"
    r"(?P=indent)```sh\n(?P<body>.*?)\n(?P=indent)```$",
    re.S | re.M,
)
START_TIMEOUT_SECONDS = 300  # liveness on a shared machine, not a speed claim
BLOCK_TIMEOUT_SECONDS = 300


@dataclass(frozen=True)
class Block:
    kind: str
    body: str
    section: str


def marked_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    headings = [(m.start(), m[0]) for m in re.finditer(r"^## .*$", text, re.M)]
    blocks = []
    for match in BLOCK.finditer(text):
        section = [title for at, title in headings if at < match.start()][-1]
        body = textwrap.dedent(textwrap.indent(match["body"], match["indent"]))
        blocks.append(Block(match["kind"], body, section))
    return blocks


class ReaderShell:
    """One bash that blocks are pasted into, in order, as one terminal. A block runs with
    ``source`` so its variables stay; under ``set -e`` a failing command ends the shell,
    which is how a failure is seen (with the block's output and the exit code)."""

    def __init__(self, cwd: Path, env: dict[str, str], scratch: Path) -> None:
        self.scratch = scratch
        scratch.mkdir()
        self.count = 0
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-euo", "pipefail"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
            text=True,
        )

    def run(self, body: str) -> str:
        self.count += 1
        script, output, done = (
            self.scratch / f"block-{self.count}.{x}" for x in ["sh", "out", "done"]
        )
        script.write_text(body + "\n")
        assert self.process.stdin is not None
        self.process.stdin.write(
            f"source {shlex.quote(str(script))} </dev/null >{shlex.quote(str(output))} 2>&1\n"
            f": > {shlex.quote(str(done))}\n"
        )
        self.process.stdin.flush()
        deadline = time.monotonic() + BLOCK_TIMEOUT_SECONDS
        while not done.exists():
            shown = output.read_text(errors="replace") if output.exists() else ""
            code = self.process.poll()
            assert code is None, f"exit code {code} in:\n{body}\n--- its output:\n{shown}"
            assert time.monotonic() < deadline, f"still running:\n{body}\n---\n{shown}"
            time.sleep(0.05)
        return output.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=30)


@contextmanager
def stack(block: Block, cwd: Path, env: dict[str, str], ports: dict[str, int]) -> Iterator[Path]:
    """The start block in the background, until dev says it is running; Ctrl-C at the end."""
    assert "./run dev" in block.body
    body = block.body.replace(
        "./run dev", f"./run dev --api-port {ports['8000']} --mcp-port {ports['8001']}"
    )
    log = cwd / "dev-terminal.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", body],
            cwd=cwd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the terminal's Ctrl-C reaches all of it
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while "Press Ctrl-C to stop." not in log.read_text(errors="replace"):
            assert process.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        yield log
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=60) == 0, log.read_text(errors="replace")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def localised(body: str, ports: dict[str, int], filled: dict[str, str]) -> str:
    for documented, port in ports.items():
        body = re.sub(rf"\b{documented}\b", str(port), body)
    for placeholder, value in filled.items():
        body = body.replace(placeholder, value)
    left = re.findall(r"<[a-z][a-z ]*>", body)
    assert not left, f"no value for {left} in a runnable block:\n{body}"
    return body


def printed_draft(output: str) -> dict[str, object]:
    """The draft the agent's block prints as indented JSON after the order's refundable."""
    lines = output.splitlines()
    start = lines.index("{")
    draft: dict[str, object] = json.loads("\n".join(lines[start:]))
    return draft


def test_the_readme_runs_as_written_on_a_fresh_machine(tmp_path):
    start, *blocks = marked_blocks()
    reader = reader_directory(tmp_path / "reader")
    env = fresh_machine_env()
    ports = {"8000": free_port(), "8001": free_port()}
    filled: dict[str, str] = {}
    outputs: dict[str, list[str]] = {}
    shell = ReaderShell(reader, env, tmp_path / "blocks")
    try:
        with stack(start, reader, env, ports) as dev_log:
            manifest = json.loads((reader / ".draftgate" / "demo.json").read_text())
            for block in blocks:
                output = shell.run(localised(block.body, ports, filled))
                outputs.setdefault(block.section, []).append(output)
                if "propose_refund" in block.body:
                    draft = printed_draft(output)
                    filled["<draft id>"] = str(draft["draft_id"])
                    filled["<trace id>"] = str(draft["trace_id"])
    finally:
        shell.close()

    # What each part of the README says happens, happened.
    agent, approver, auditor = outputs["## Try it"]
    draft = printed_draft(agent)
    assert draft["status"] == "proposed"
    assert re.fullmatch(r"[0-9a-f]{32}", str(draft["trace_id"]))
    assert "execution exe_" in approver
    assert "succeeded" in approver
    assert f"trace {draft['trace_id']}" in auditor
    assert "anchored at seq" in auditor  # the offline verify of the export
    [console] = outputs["## For approvers"]
    alice = manifest["approvers"]["alice"]["key_id"]
    assert console.split() == [manifest["tokens"]["approver_alice"], alice]
    [operator] = outputs["## Operating it"]
    assert "database schema is up to date" in operator
    assert re.search(r"^token id: tok_", operator, re.M)
    assert "Traceback" not in dev_log.read_text(errors="replace")
    with closing(sqlite3.connect(reader / ".draftgate" / "draftgate.db")) as db:
        refunds = db.execute(
            "SELECT count(*) FROM shop_refunds WHERE idempotency_key LIKE ?",
            (f"{draft['draft_id']}:%",),
        ).fetchone()[0]
    assert refunds == 1
