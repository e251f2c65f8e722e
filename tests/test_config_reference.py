"""docs/configuration.md is what the settings say: every setting, its default and meaning."""

from __future__ import annotations

from pathlib import Path

from service import config_reference
from service.config import Settings

DOCS = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def test_docs_configuration_md_is_what_the_settings_render():
    assert DOCS.read_text() == config_reference.render(), (
        "regenerate it: python -m service.config_reference > docs/configuration.md"
    )


def test_every_setting_is_listed_with_a_meaning():
    entries = {entry.variable: entry for entry in config_reference.entries()}

    assert set(entries) == {f"DRAFTGATE_{name.upper()}" for name in Settings.model_fields}
    unexplained = [variable for variable, entry in entries.items() if not entry.meaning]
    assert unexplained == [], "write a comment above these settings in service/config.py"


def test_a_comment_covers_the_settings_after_it_up_to_a_blank_line():
    entries = {entry.variable: entry for entry in config_reference.entries()}

    # One comment above three rate-limit settings; the next group has its own.
    shared = entries["DRAFTGATE_RATE_LIMIT_PER_ADDRESS"].meaning
    assert shared.startswith("Rate limits")
    assert entries["DRAFTGATE_RATE_LIMIT_PER_TOKEN"].meaning == shared
    assert entries["DRAFTGATE_MAX_REQUEST_BYTES"].meaning != shared
    assert entries["DRAFTGATE_RATE_LIMIT_PER_ADDRESS"].default == "6000/minute"
