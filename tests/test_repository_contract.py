"""What the repository promises a newcomer: two commands, a lock file, CI that runs the
README's test command, and a schema that only Alembic creates, identical to the models."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from harness.services import POSTGRES_URL, private_database
from service.db import make_engine
from service.migrate import alembic_config, upgrade
from service.tables import metadata
from tests.support import services

ROOT = Path(__file__).resolve().parent.parent


def quickstart_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Quickstart\n(?P<body>.*?)(?=^## )", readme, re.M | re.S)
    assert section is not None, "the README has no Quickstart section"
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", section.group("body"), re.M | re.S)
    # Two blocks: the README test starts the first in the background (tests/docs/test_readme.py).
    assert blocks, "the Quickstart has code blocks"
    commands = []
    for line in "".join(blocks).splitlines():
        code = line.split("#", 1)[0].strip()
        if code:
            commands.append(code)
    return commands


def ci_lines() -> list[str]:
    """The lines of .ci/run that do something (comments and blanks dropped)."""
    lines = []
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        code = line.split(" #", 1)[0].strip()
        if code and not code.startswith("#"):
            lines.append(" ".join(code.split()))
    return lines


# --- README, CI, lock file -------------------------------------------------------------------


def test_the_quickstart_is_exactly_two_commands():
    assert quickstart_commands() == ["./run dev", "./run test"]


def test_the_run_script_exists_and_is_executable():
    script = ROOT / "run"

    assert script.is_file()
    assert script.stat().st_mode & 0o111
    text = script.read_text()
    assert re.search(r"^\s*dev\)", text, re.M)
    assert re.search(r"^\s*test\)", text, re.M)


def test_ci_requires_services_and_runs_the_full_test_lane():
    lines = ci_lines()

    assert "./run test --all" in lines  # every test (docs/decisions/test-lanes.md)
    assert "export DRAFTGATE_REQUIRE_SERVICES=1" in lines
    required_at = lines.index("export DRAFTGATE_REQUIRE_SERVICES=1")
    assert required_at < lines.index("./run test --all"), "services first, then the tests"
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111


def test_the_lock_file_is_committed_and_used():
    lock = ROOT / "uv.lock"

    assert lock.is_file()
    assert 'name = "draftgate"' in lock.read_text()
    assert "--locked" in (ROOT / "run").read_text()


# --- migrations ----------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database nothing has touched yet (no template, no tables)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    services.require("PostgreSQL", POSTGRES_URL, 5432)
    with private_database() as url:
        yield url


def schema_differences(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "compare_server_default": True}
            )
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_head_gives_exactly_the_models_schema(empty_database):
    upgrade(empty_database)

    assert schema_differences(empty_database) == []
    assert tables(empty_database) == set(metadata.tables) | {"alembic_version"}


def test_the_comparison_sees_a_schema_that_differs(empty_database):
    upgrade(empty_database, "base")  # only alembic's own table

    differences = schema_differences(empty_database)

    added = {diff[1].name for diff in differences if diff[0] == "add_table"}
    assert added == set(metadata.tables)


def test_downgrade_to_base_and_upgrade_again(empty_database):
    config = alembic_config(empty_database)
    upgrade(empty_database)

    command.downgrade(config, "base")
    assert tables(empty_database) <= {"alembic_version"}

    upgrade(empty_database)
    assert schema_differences(empty_database) == []


def test_every_migration_steps_down_and_up_again(empty_database):
    config = alembic_config(empty_database)
    steps = len(list(ScriptDirectory.from_config(config).walk_revisions()))
    assert steps >= 1
    upgrade(empty_database)

    for _ in range(steps):  # from head down to base, re-applying each step on the way
        command.downgrade(config, "-1")
        command.upgrade(config, "+1")
        command.downgrade(config, "-1")

    assert tables(empty_database) <= {"alembic_version"}
    upgrade(empty_database)
    assert schema_differences(empty_database) == []


def test_there_is_one_head():
    heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()

    assert len(heads) == 1
