"""The error catalogue: every code declared once, in its domain's errors module, and
docs/errors.md generated from those declarations (never edited by hand)."""

from __future__ import annotations

import ast
from pathlib import Path

from service import catalogue
from service.errors import ErrorCode

ROOT = Path(__file__).parents[1]


def test_docs_errors_md_is_what_the_catalogue_renders():
    committed = (ROOT / "docs" / "errors.md").read_text()
    assert committed == catalogue.render(), (
        "docs/errors.md is stale: python -m service.catalogue > docs/errors.md"
    )


def test_every_code_is_declared_once():
    codes = [code.code for domain in catalogue.domains() for code in domain.codes]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)
    assert all(code.isupper() and " " not in code for code in codes)


def test_errors_are_only_built_from_declared_codes():
    """Outside service/errors.py nobody constructs a DomainError or an ErrorCode by hand, so
    the catalogue is complete (an ErrorCode outside an errors module would be missed)."""
    offenders = []
    for path in (ROOT / "service").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                declares = node.func.id == "ErrorCode" and path.name != "errors.py"
                builds = node.func.id == "DomainError" and path != ROOT / "service" / "errors.py"
                if declares or builds:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id}")
    assert offenders == []


def test_every_errors_module_is_in_the_catalogue():
    listed = {domain.module for domain in catalogue.domains()}
    on_disk = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in (ROOT / "service").rglob("errors.py")
    } - {"service.api.errors"}
    assert listed == on_disk
    assert all(isinstance(c, ErrorCode) for d in catalogue.domains() for c in d.codes)
