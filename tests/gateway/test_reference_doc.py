"""Every YAML example in docs/gateway.md is valid: whole files load, snippets parse as the
declarations they show."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.gateway.config import parse_gateway_text
from service.gateway.declarations import MoneyPath
from service.gateway.schema import strict_model
from service.gateway.templates import parse_template

DOC = Path(__file__).parents[2] / "docs" / "gateway.md"
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_page_has_examples():
    assert len([b for b in BLOCKS if b.startswith("version: 1")]) >= 4
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.startswith("version: 1")])
def test_each_whole_file_example_loads(block: str):
    declared = parse_gateway_text(block, name="docs/gateway.md")
    assert declared.entries


def test_the_money_examples_are_money_declarations():
    [block] = [b for b in BLOCKS if b.startswith("money:")]
    for line in block.splitlines():
        MoneyPath.model_validate(yaml.safe_load(line)["money"])


def test_the_template_example_parses_against_a_matching_schema():
    [block] = [b for b in BLOCKS if b.startswith("summary:")]
    string: dict[str, Any] = {"type": "string"}
    schema = {
        "type": "object",
        "properties": {
            "amount_cents": {"type": "integer"},
            "currency": string,
            "invoice_id": string,
            "lines": {"type": "array", "items": string},
        },
        "required": ["amount_cents", "currency", "invoice_id"],
    }
    model = strict_model("billing_refund", schema, where="docs")
    template = parse_template(yaml.safe_load(block)["summary"], model, where="docs")
    rendered = template.render(
        {"amount_cents": 1250, "currency": "EUR", "invoice_id": "INV-1", "lines": ["a", "b"]}
    )
    assert rendered == "Refund 12.50 EUR on invoice INV-1 (2 lines)"
