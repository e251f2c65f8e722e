"""`draftgate dev` tells approvers where the console is."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cli import dev


def test_the_dev_banner_prints_the_console_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    manifest = {"api_url": "http://127.0.0.1:8000", "mcp_url": "http://127.0.0.1:8001/mcp"}
    dev._announce(tmp_path, manifest, tmp_path / "demo.json", "PUBLIC")

    [line] = [line for line in capsys.readouterr().out.splitlines() if "console" in line]
    # A name, not an IP: passkeys refuse IP addresses as relying party ids.
    assert line.split()[:2] == ["console", "http://localhost:8000/console/"]
