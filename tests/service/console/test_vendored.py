"""The vendored front-end files are exactly what the lockfile pins, and the page says so."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from service.api.console.templating import STATIC_DIR
from tests.service.console.console import page, signed_in
from tests.support import services

FRONTEND = STATIC_DIR.parent / "frontend"
VENDOR = STATIC_DIR / "vendor"


def sri(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def manifest() -> dict[str, dict[str, str]]:
    loaded: dict[str, dict[str, str]] = json.loads((VENDOR / "vendored.json").read_text())
    return loaded


def test_the_manifest_names_the_locked_package_and_the_files_hash():
    lock = json.loads((FRONTEND / "package-lock.json").read_text())
    declared = json.loads((FRONTEND / "package.json").read_text())["dependencies"]
    for name, entry in manifest().items():
        pinned = lock["packages"][f"node_modules/{entry['package']}"]
        assert declared[entry["package"]] == pinned["version"] == entry["version"]  # exact pin
        assert entry["tarball_integrity"] == pinned["integrity"]
        assert pinned["integrity"].startswith("sha512-")
        assert sri((VENDOR / name).read_bytes()) == entry["integrity"], name


def test_the_script_tag_carries_the_vendored_files_integrity(browser, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    [htmx] = [
        s for s in page(browser, "/console/").find_all("script") if "htmx" in s.attrs.get("src", "")
    ]
    served = browser.get(htmx.attrs["src"])

    assert served.status_code == 200
    assert htmx.attrs["integrity"] == sri(served.content) == manifest()["htmx.min.js"]["integrity"]


@pytest.mark.full  # the npm registry
def test_npm_ci_of_the_lockfile_reproduces_the_vendored_bytes(tmp_path: Path):
    """npm ci checks the tarball against the lock's sha512; the file inside must be ours."""
    npm = shutil.which("npm")
    if npm is None:
        services.unavailable("npm", "npm is not installed")
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(FRONTEND / name, tmp_path / name)
    done = subprocess.run(
        [str(npm), "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        services.unavailable("the npm registry", done.stderr[-300:])
    for name, entry in manifest().items():
        installed = tmp_path / "node_modules" / entry["package"] / entry["source"]
        assert installed.read_bytes() == (VENDOR / name).read_bytes(), name
