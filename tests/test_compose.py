"""compose.yaml is correct by construction: validated, not run (no Docker engine here).

It must satisfy the Compose specification, name only services that exist, run only real
``draftgate`` commands, and set only environment variables that ``Settings`` reads.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from compose_spec.compose_spec import PyCompose as _PyCompose
from starlette.testclient import TestClient

from service.cli import app as cli_app
from service.config import Settings
from service.keys.assertions import relying_party

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DRAFTGATE = Path(sys.executable).parent / "draftgate"
REQUIRED_SERVICES = {"postgres", "redis", "migrate", "api", "mcp"}
VARIABLE = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?::?-(?P<default>[^}]*))?\}")


def load_compose() -> dict[str, Any]:
    # safe_load resolves the YAML anchors and merge keys (<<) the validator does not know.
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def validate(data: dict[str, Any]) -> None:
    """The Compose specification's own validator (raises ValueError on a violation)."""
    _PyCompose.from_json(json.dumps(data)).validate()


def dependency_problems(data: dict[str, Any]) -> list[str]:
    services = data["services"]
    problems = []
    for name, service in services.items():
        depends_on = service.get("depends_on", {})
        targets = depends_on if isinstance(depends_on, list) else list(depends_on)
        problems += [f"{name} depends on unknown {t}" for t in targets if t not in services]
    return problems


def draftgate_services(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services running the draftgate image (the ones whose command goes to the CLI)."""
    return {
        name: service
        for name, service in data["services"].items()
        if service.get("image") == "draftgate:local" or service.get("build") == "."
    }


def environment_of(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    if isinstance(environment, list):
        return dict(item.split("=", 1) for item in environment)
    return {key: str(value) for key, value in environment.items()}


def interpolate(value: str) -> str:
    """Compose variable interpolation with nothing set: every ``${VAR:-default}`` -> default."""
    return VARIABLE.sub(lambda match: match.group("default") or "", value)


def resolve_cli_command(argv: list[str]) -> Any:
    """The leaf CLI command ``argv`` runs; its options are parsed and converted (not run).

    Typer vendors its own click, so groups are recognised by what they can do.
    """
    command: Any = typer.main.get_command(cli_app)
    context = typer.Context(command, info_name="draftgate")
    args = list(argv)
    while hasattr(command, "get_command"):
        assert args, f"{argv} names a command group, not a command"
        assert not args[0].startswith("-"), f"{argv}: expected a subcommand, found {args[0]}"
        name = args.pop(0)
        subcommand = command.get_command(context, name)
        assert subcommand is not None, f"{argv}: draftgate has no command {name!r}"
        command = subcommand
        context = typer.Context(subcommand, info_name=name, parent=context)
    command.make_context(context.info_name, args, parent=context.parent)  # raises on bad options
    return command


# --- the file as a whole ---------------------------------------------------------------------


def test_compose_is_valid_by_the_compose_specification():
    data = load_compose()

    validate(data)

    api = data["services"]["api"]
    assert api["image"] == "draftgate:local", "the x-draftgate merge key was not resolved"


def test_the_validator_catches_a_misspelled_key():
    data = load_compose()
    broken = copy.deepcopy(data)
    broken["services"]["api"]["comand"] = broken["services"]["api"].pop("command")

    with pytest.raises(ValueError, match="comand"):
        validate(broken)


def test_the_validator_catches_a_wrongly_typed_value():
    broken = copy.deepcopy(load_compose())
    broken["services"]["api"]["ports"] = "8000:8000"  # must be a list

    with pytest.raises(ValueError):  # noqa: PT011 - the message is the validator's own
        validate(broken)


def test_the_production_services_are_defined():
    assert set(load_compose()["services"]) >= REQUIRED_SERVICES


def test_the_worker_and_beat_the_design_names_are_defined():
    # DESIGN.md §10: compose.yaml has postgres, redis, migrate, api, mcp, worker, beat.
    services = load_compose()["services"]

    assert {"worker", "beat"} <= set(services), f"compose.yaml defines only {sorted(services)}"
    for name in ("worker", "beat"):
        assert services[name]["command"][:2] == ["serve", name]


def test_every_dependency_exists():
    data = load_compose()

    assert dependency_problems(data) == []
    assert data["services"]["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "mcp"):
        depends_on = data["services"][name]["depends_on"]
        assert depends_on["migrate"]["condition"] == "service_completed_successfully"


def test_the_dependency_check_catches_an_unknown_service():
    broken = copy.deepcopy(load_compose())
    broken["services"]["api"]["depends_on"]["postgress"] = {"condition": "service_healthy"}

    assert dependency_problems(broken) == ["api depends on unknown postgress"]


# --- commands ---------------------------------------------------------------------------------


def test_every_draftgate_service_runs_a_real_cli_command():
    services = draftgate_services(load_compose())
    assert {"migrate", "api", "mcp"} <= set(services)

    for name, service in services.items():
        command = service["command"]
        assert isinstance(command, list), f"{name}: use the exec form, a list"
        leaf = resolve_cli_command(command)
        assert leaf.callback is not None, name


@pytest.mark.full  # a process per service
def test_every_draftgate_service_command_answers_help_as_a_subprocess():
    for name, service in draftgate_services(load_compose()).items():
        result = subprocess.run(
            [str(DRAFTGATE), *service["command"], "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, f"{name}: {result.stderr}"
        assert "Usage: draftgate" in result.stdout


def test_the_command_check_catches_a_command_that_does_not_exist():
    with pytest.raises(AssertionError, match="no command 'apii'"):
        resolve_cli_command(["serve", "apii", "--port", "8000"])
    with pytest.raises(Exception, match="No such option"):
        resolve_cli_command(["serve", "api", "--prot", "8000"])
    with pytest.raises(typer.BadParameter):
        resolve_cli_command(["serve", "api", "--port", "eighty"])
    with pytest.raises(AssertionError, match="command group"):
        resolve_cli_command(["serve"])


def test_published_ports_and_healthchecks_match_the_commands(tmp_path):
    from mcp_adapter.server import create_http_app
    from service.api.app import create_app
    from service.runtime import build_runtime

    services = load_compose()["services"]
    runtime = build_runtime(
        Settings(state_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'x.db'}")
    )
    apps = {"api": create_app(runtime), "mcp": create_http_app(runtime)}
    try:
        for name, app in apps.items():
            command = services[name]["command"]
            port = command[command.index("--port") + 1]
            assert command[command.index("--host") + 1] == "0.0.0.0"
            assert services[name]["ports"] == [f"{port}:{port}"]
            probe = " ".join(services[name]["healthcheck"]["test"])
            url = re.search(r"http://127\.0\.0\.1:(\d+)(/\w+)", probe)
            assert url is not None, probe
            assert url.group(1) == port
            response = TestClient(app).get(url.group(2))
            assert response.status_code != 404, f"{name} has no {url.group(2)}"
    finally:
        runtime.engine.dispose()


# --- environment ---------------------------------------------------------------------------------


def test_every_draftgate_variable_is_a_setting(monkeypatch):
    fields = set(Settings.model_fields)
    seen: dict[str, str] = {}
    for name, service in load_compose()["services"].items():
        for key, value in environment_of(service).items():
            if key.startswith("DRAFTGATE_"):
                assert key.removeprefix("DRAFTGATE_").lower() in fields, f"{name}: {key}"
                seen[key] = interpolate(value)
    assert "DRAFTGATE_DATABASE_URL" in seen
    assert "DRAFTGATE_BROKER_URL" in seen

    for key in [k for k in os.environ if k.startswith("DRAFTGATE_")]:
        monkeypatch.delenv(key)
    for key, value in seen.items():
        monkeypatch.setenv(key, value)
    settings = Settings()  # every value also parses

    assert settings.database_url.startswith("postgresql+psycopg://draftgate:draftgate@postgres")
    assert settings.broker_url == "redis://redis:6379/0"
    assert "mcp:*" in settings.mcp_allowed_hosts


def test_the_database_services_agree_on_credentials():
    services = load_compose()["services"]
    postgres = {k: interpolate(v) for k, v in environment_of(services["postgres"]).items()}
    url = interpolate(environment_of(services["api"])["DRAFTGATE_DATABASE_URL"])

    expected = (
        f"postgresql+psycopg://{postgres['POSTGRES_USER']}:{postgres['POSTGRES_PASSWORD']}"
        f"@postgres:5432/{postgres['POSTGRES_DB']}"
    )
    assert url == expected


# --- the image -----------------------------------------------------------------------------------


def dockerfile_instruction(name: str) -> str:
    lines = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith(name + " ")]
    assert len(lines) == 1, f"expected one {name} in the Dockerfile"
    return lines[0].removeprefix(name + " ")


def test_the_image_entrypoint_is_draftgate():
    assert json.loads(dockerfile_instruction("ENTRYPOINT")) == ["draftgate"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["draftgate"] == "service.cli:main"


def test_the_image_contains_every_package_of_the_project():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    copied = {
        line.split()[1]
        for line in DOCKERFILE.read_text().splitlines()
        if line.startswith("COPY ") and len(line.split()) == 3
    }

    assert set(packages) <= copied


# --- health and secrets --------------------------------------------------------------------------

CHECKPOINT_KEY_IN_CONTAINER = "/run/secrets/checkpoint-key"


def long_running(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services that stay up (migrate runs once and exits)."""
    return {
        name: service
        for name, service in data["services"].items()
        if service.get("restart", "always") != "no"
    }


def component_of(service: dict[str, Any]) -> str | None:
    """The component a ``draftgate serve <component>`` service runs, or None."""
    command = service.get("command", [])
    return command[1] if command[:1] == ["serve"] else None


def secrets_of(service: dict[str, Any]) -> set[str]:
    return {s if isinstance(s, str) else s["source"] for s in service.get("secrets", [])}


def health_problems(data: dict[str, Any]) -> list[str]:
    problems = []
    for name, service in long_running(data).items():
        test = service.get("healthcheck", {}).get("test")
        if not test or service["healthcheck"].get("disable"):
            problems.append(f"{name} has no healthcheck")
    return problems


def test_every_long_running_service_has_a_healthcheck():
    data = load_compose()

    assert {"api", "mcp", "worker", "beat", "postgres", "redis"} <= set(long_running(data))
    assert "migrate" not in long_running(data)
    assert health_problems(data) == []


def test_the_healthcheck_check_catches_a_service_without_one():
    broken = copy.deepcopy(load_compose())
    del broken["services"]["beat"]["healthcheck"]

    assert health_problems(broken) == ["beat has no healthcheck"]


def test_worker_and_beat_are_checked_by_draftgate_doctor_for_their_component():
    services = load_compose()["services"]

    for name in ("worker", "beat"):
        test = services[name]["healthcheck"]["test"]
        assert test == ["CMD", "draftgate", "doctor", "--component", name], name
        leaf = resolve_cli_command(test[2:])  # a real command, its options valid
        assert leaf.name == "doctor"
        assert component_of(services[name]) == name


def test_draftgate_is_on_the_images_path_for_the_healthchecks():
    # A healthcheck runs its command directly, not through the image's ENTRYPOINT.
    dockerfile = DOCKERFILE.read_text()
    venv = re.search(r"UV_PROJECT_ENVIRONMENT=(\S+)", dockerfile)
    assert venv is not None
    assert re.search(rf"PATH={re.escape(venv.group(1))}/bin:\$PATH", dockerfile)


def test_the_checkpoint_key_is_mounted_exactly_where_checkpoints_are_signed():
    from service.health import SIGNING_COMPONENTS

    services = draftgate_services(load_compose())
    signing = {name for name, s in services.items() if component_of(s) in SIGNING_COMPONENTS}
    assert signing == {"worker"}

    for name, service in services.items():
        mounted = "checkpoint-key" in secrets_of(service)
        key_file = environment_of(service).get("DRAFTGATE_CHECKPOINT_KEY_FILE")
        if name in signing:
            assert mounted, f"{name} signs checkpoints but the key is not mounted"
            assert key_file == CHECKPOINT_KEY_IN_CONTAINER, name
        else:  # the private key goes nowhere it is not needed
            assert not mounted, f"{name} does not sign, yet gets the checkpoint key"
            assert key_file is None, name
        # Every service pins the public key: verification and doctor compare against it.
        assert "DRAFTGATE_CHECKPOINT_PUBLIC_KEY" in environment_of(service), name


def image_user() -> tuple[str, str, str]:
    """The Dockerfile's user: name, uid, gid (created by useradd, switched to by USER)."""
    dockerfile = DOCKERFILE.read_text()
    useradd = re.search(r"useradd [^\n]*--uid (\d+) --gid (\d+) (\w+)", dockerfile)
    assert useradd is not None, "the Dockerfile creates its user with an explicit uid and gid"
    uid, gid, name = useradd.groups()
    assert re.search(rf"groupadd --gid {gid} ", dockerfile), "the group's gid is explicit too"
    assert dockerfile_instruction("USER") == name
    return name, uid, gid


def test_the_secret_comment_names_the_user_the_image_runs_as():
    _, uid, gid = image_user()
    compose = COMPOSE.read_text()
    secrets_section = compose[compose.index("\nsecrets:\n") :]

    # File secrets are bind-mounted with the host's owner and mode: the operator makes them
    # readable by the image's user, and the comment must name that user's real ids.
    assert f"uid {uid}" in secrets_section
    assert f"sudo chown {uid}:{gid} secrets/checkpoint-key.pem" in secrets_section
    assert f"sudo chgrp {gid} secrets/checkpoint-key.pem && chmod 0440" in secrets_section
    assert f"sudo chown {uid}:{gid} secrets/server-secret" in secrets_section
    assert "draftgate doctor" in secrets_section


# --- the image's two stages ----------------------------------------------------------------------


def stages() -> list[str]:
    """The Dockerfile's stages, each from its FROM line to the next."""
    text = DOCKERFILE.read_text()
    starts = [m.start() for m in re.finditer(r"^FROM ", text, flags=re.MULTILINE)]
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def test_the_final_image_has_no_build_tools_and_runs_as_its_user():
    builder, final = stages()
    assert builder.startswith("FROM python:3.11-slim AS builder")
    assert final.startswith("FROM python:3.11-slim\n"), "same base: the venv's interpreter is there"
    run_lines = [line for line in final.splitlines() if line.startswith("RUN ")]
    for tool in ("pip install", "uv ", "apt-get", "gcc"):
        assert not any(tool in line for line in run_lines), f"the final image runs {tool}"
    assert "COPY --from=builder /opt/venv /opt/venv" in final
    name, uid, _ = image_user()
    assert name != "root"
    assert uid != "0"


@pytest.mark.full  # uv installs a venv
def test_the_builder_stage_run_natively_installs_a_venv_that_needs_no_source(tmp_path):
    """What compose cannot show here (no Docker engine): the builder's own uv commands, run
    as written, give a virtual environment where draftgate runs with the source tree gone
    and without the dev packages."""
    builder, _ = stages()
    uv = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    app_dir, venv = tmp_path / "app", tmp_path / "venv"
    app_dir.mkdir()
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    env = {k: v for k, v in env.items() if not k.startswith(("DRAFTGATE_", "VIRTUAL_ENV"))}
    for line in builder.splitlines():
        words = line.split()
        if words[:1] == ["COPY"]:
            for name in words[1:-1]:  # the sources; the last word is the destination
                copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
                copy(ROOT / name, app_dir / name)
        if words[:2] == ["RUN", "uv"]:
            completed = subprocess.run(
                [uv, *words[2:]],
                check=False,
                cwd=app_dir,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert completed.returncode == 0, completed.stderr
    for package in ("service", "workers", "mcp_adapter"):
        shutil.rmtree(app_dir / package)

    migrated = subprocess.run(
        [str(venv / "bin" / "draftgate"), "migrate"],
        check=False,
        cwd=tmp_path,
        env={**env, "DRAFTGATE_STATE_DIR": str(tmp_path / "state")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert "schema is up to date" in migrated.stdout
    no_dev = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import pytest"], check=False, timeout=60
    )
    assert no_dev.returncode != 0, "dev packages are not in the image"


def test_every_long_running_service_has_a_memory_limit():
    for name, service in long_running(load_compose()).items():
        limits = service.get("deploy", {}).get("resources", {}).get("limits", {})
        assert limits.get("memory"), f"{name} has no memory limit"


def test_the_servers_believe_forwarded_headers_only_from_the_configured_proxies(monkeypatch):
    import uvicorn

    from service.cli import serve

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: seen.append(options))
    monkeypatch.setattr(serve, "get_settings", lambda: Settings(forwarded_allow_ips="10.0.0.5"))
    monkeypatch.setattr("service.api.app.create_app", lambda: None)
    monkeypatch.setattr(serve, "_observe", lambda component: None)  # not this process's logs

    serve.serve_api(host="127.0.0.1", port=8000)

    assert seen == [
        {
            "host": "127.0.0.1",
            "port": 8000,
            "log_config": None,
            "access_log": True,
            "proxy_headers": True,
            "forwarded_allow_ips": "10.0.0.5",
        }
    ]
    assert "DRAFTGATE_FORWARDED_ALLOW_IPS" in environment_of(load_compose()["services"]["api"])


@pytest.mark.parametrize("component", ["worker", "beat", "mcp"])
def test_every_component_sees_the_apis_public_url_and_relying_party(monkeypatch, component):
    # The worker re-verifies each passkey approval before executing it and links webhook
    # cards to the console: with the API's URL missing it would use 127.0.0.1 and refuse them.
    services = load_compose()["services"]

    def settings_of(name: str) -> Settings:
        for key in [k for k in os.environ if k.startswith("DRAFTGATE_")]:
            monkeypatch.delenv(key)
        for key, value in environment_of(services[name]).items():
            monkeypatch.setenv(key, interpolate(value))
        return Settings()

    api, other = settings_of("api"), settings_of(component)

    assert other.api_public_url == api.api_public_url == "http://localhost:8000"
    assert relying_party(other) == relying_party(api)
    assert relying_party(other).rp_id == "localhost"
    for name in ("api", component):
        environment = environment_of(services[name])
        assert {"DRAFTGATE_WEBAUTHN_RP_ID", "DRAFTGATE_WEBAUTHN_ORIGINS"} <= set(environment)
