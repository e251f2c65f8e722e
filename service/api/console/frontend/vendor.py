"""Copy the pinned front-end files from node_modules into ../static/vendor/.

Run after ``npm ci`` (which checks every tarball against package-lock.json's sha512):

    cd service/api/console/frontend && npm ci && npm run vendor

It writes each file and ``vendored.json``: for each file, the package, its version and
tarball integrity as the lockfile pins them, and the file's own SRI hash (sha512), which the
console's ``<script integrity>`` carries. tests/service/console/test_vendored.py checks all
three agree, and (with npm) that the bytes are those of the pinned tarball.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENDOR = HERE.parent / "static" / "vendor"
# What the console serves: file name in static/vendor -> (package, path inside the package).
FILES = {"htmx.min.js": ("htmx.org", "dist/htmx.min.js")}


def sri(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def main() -> None:
    lock = json.loads((HERE / "package-lock.json").read_text())
    VENDOR.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, dict[str, str]] = {}
    for name, (package, source) in FILES.items():
        pinned = lock["packages"][f"node_modules/{package}"]
        installed = HERE / "node_modules" / package
        version = json.loads((installed / "package.json").read_text())["version"]
        if version != pinned["version"]:
            raise SystemExit(f"{package} {version} is installed, the lock pins {pinned['version']}")
        target = VENDOR / name
        shutil.copyfile(installed / source, target)
        manifest[name] = {
            "package": package,
            "version": version,
            "tarball_integrity": pinned["integrity"],
            "source": source,
            "integrity": sri(target.read_bytes()),
        }
    (VENDOR / "vendored.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main()
