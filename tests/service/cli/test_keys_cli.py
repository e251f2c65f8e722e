"""``draftgate keys generate|register|list|revoke`` as an operator runs them, in-process, against
the test database (SQLite; PostgreSQL too where what the command stores is the point)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select
from sqlmodel import Session, col
from typer.testing import Result

from service.audit.models import AuditEvent
from service.cli import passphrase
from service.db import session_scope
from service.keys import actions as keys
from service.signing import (
    b64url,
    generate_private_key,
    is_encrypted,
    key_id_for,
    load_private_key,
    public_key_b64,
    sign,
    verify,
)
from tests.support import cli
from tests.support.backends import both_backends

TENANT = "demo"


PASSPHRASE = "an approver's passphrase"


def run_cli(
    *args: str,
    runtime: Any = None,
    umask: int | None = None,
    input: str | None = None,
    **extra_env: str,
) -> Result:
    env = cli.operator_env(runtime) if runtime is not None else {}
    env["DRAFTGATE_DEFAULT_TENANT"] = TENANT
    env.update(extra_env)
    if umask is None:
        return cli.run(*args, env=env, input=input)
    previous = os.umask(umask)  # a permissive umask: the file mode must not depend on it
    try:
        return cli.run(*args, env=env, input=input)
    finally:
        os.umask(previous)


def generated(out: Path) -> tuple[str, str]:
    """Run ``keys generate`` (passphrase from the environment); returns (public key, key id)."""
    result = run_cli("keys", "generate", "--out", str(out), DRAFTGATE_KEY_PASSPHRASE=PASSPHRASE)
    assert result.exit_code == 0, result.stderr
    public = re.search(r"^public key:\s+(\S+)$", result.stdout, flags=re.MULTILINE)
    key_id = re.search(r"^key id:\s+(\S+)$", result.stdout, flags=re.MULTILINE)
    assert public, result.stdout
    assert key_id, result.stdout
    return public.group(1), key_id.group(1)


@pytest.fixture
def at_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if a person sat at a terminal: CliRunner's stdin is a pipe, which the command rightly
    never asks; its input then stands for what that person types (hidden)."""
    monkeypatch.setattr(passphrase, "at_a_terminal", lambda: True)


def listed(runtime, *args: str) -> list[dict[str, Any]]:
    result = run_cli("keys", "list", "--json", *args, runtime=runtime)
    assert result.exit_code == 0, result.stderr
    infos: list[dict[str, Any]] = json.loads(result.stdout)
    return infos


def key_events(runtime, type: str) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = (
            select(AuditEvent)
            .where(col(AuditEvent.type) == type, col(AuditEvent.tenant) == TENANT)
            .order_by(col(AuditEvent.seq))
        )
        return list(session.scalars(statement).all())


# --- generate (local, no database) -----------------------------------------------------------


def test_generate_writes_an_encrypted_pkcs8_ed25519_key_readable_by_its_owner_only(tmp_path):
    out = tmp_path / "nested" / "dir" / "carol.pem"

    result = run_cli(
        "keys", "generate", "--out", str(out), umask=0, DRAFTGATE_KEY_PASSPHRASE=PASSPHRASE
    )

    assert result.exit_code == 0, result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    pem = out.read_bytes()
    assert pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n")  # PKCS#8, encrypted
    assert pem.rstrip().endswith(b"-----END ENCRYPTED PRIVATE KEY-----")
    with pytest.raises(TypeError, match="encrypted"):
        serialization.load_pem_private_key(pem, password=None)
    # A wrong passphrase never opens it: "Incorrect password", or, when the garbage it
    # decrypts to happens to end in valid padding (about 1 in 256), a parse error.
    with pytest.raises(ValueError, match=r"password|deserialize"):
        serialization.load_pem_private_key(pem, password=b"not the passphrase")
    key = serialization.load_pem_private_key(pem, password=PASSPHRASE.encode())
    assert isinstance(key, Ed25519PrivateKey)
    raw_public = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    assert f"public key:  {b64url(raw_public)}" in result.stdout
    assert f"key id:      {key_id_for(b64url(raw_public))}" in result.stdout
    assert "encrypted with your passphrase" in result.stdout
    assert "BEGIN" not in result.stdout, "the private key is never printed"
    assert PASSPHRASE not in result.stdout + result.stderr, "nor is the passphrase"
    assert result.stderr == ""


def test_generate_prints_a_public_key_and_key_id_that_belong_together(tmp_path):
    public, key_id = generated(tmp_path / "k.pem")
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", public)
    assert key_id == key_id_for(public)
    assert re.fullmatch(r"ed25519-[0-9a-f]{16}", key_id)
    # the printed public key verifies what the private key in the file signs
    key = load_private_key(tmp_path / "k.pem", passphrase=PASSPHRASE.encode())
    assert verify(public, b"statement", sign(key, b"statement"))


def test_generate_at_a_terminal_asks_for_the_passphrase_twice_without_echoing_it(
    tmp_path, at_a_terminal
):
    out = tmp_path / "carol.pem"

    result = run_cli("keys", "generate", "--out", str(out), input=f"{PASSPHRASE}\n" * 2)

    assert result.exit_code == 0, result.stderr
    assert "Passphrase for" in result.stderr
    assert "Repeat for confirmation" in result.stderr
    assert PASSPHRASE not in result.stdout + result.stderr
    assert is_encrypted(out)
    public = re.search(r"^public key:\s+(\S+)$", result.stdout, flags=re.MULTILINE)
    assert public, result.stdout
    key = load_private_key(out, passphrase=PASSPHRASE.encode())
    assert public_key_b64(key) == public.group(1)


def test_generate_at_a_terminal_writes_nothing_when_the_two_passphrases_differ(
    tmp_path, at_a_terminal
):
    out = tmp_path / "carol.pem"

    result = run_cli("keys", "generate", "--out", str(out), input="one\ntwo\n")

    assert result.exit_code != 0
    assert "do not match" in result.stderr
    assert not out.exists()
    assert "public key" not in result.stdout


def test_generate_with_no_terminal_and_no_passphrase_refuses_to_write_a_plain_key(tmp_path):
    out = tmp_path / "carol.pem"

    result = run_cli("keys", "generate", "--out", str(out), input=f"{PASSPHRASE}\n" * 2)

    assert result.exit_code == 1
    assert "DRAFTGATE_KEY_PASSPHRASE" in result.stderr
    assert "--no-encrypt" in result.stderr
    assert not out.exists()
    assert "public key" not in result.stdout


def test_generate_with_an_empty_passphrase_variable_treats_it_as_unset(tmp_path):
    out = tmp_path / "carol.pem"
    result = run_cli("keys", "generate", "--out", str(out), DRAFTGATE_KEY_PASSPHRASE="")
    assert result.exit_code == 1
    assert not out.exists()


def test_generate_no_encrypt_writes_a_plain_key_and_says_so(tmp_path):
    out = tmp_path / "carol.pem"

    result = run_cli("keys", "generate", "--out", str(out), "--no-encrypt", umask=0)

    assert result.exit_code == 0, result.stderr
    pem = out.read_bytes()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert isinstance(serialization.load_pem_private_key(pem, password=None), Ed25519PrivateKey)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "not encrypted" in result.stderr
    assert "NOT encrypted" in result.stdout


def test_generate_makes_a_new_key_every_time(tmp_path):
    first, _ = generated(tmp_path / "one.pem")
    second, _ = generated(tmp_path / "two.pem")
    assert first != second


@pytest.mark.parametrize("existing", [b"precious, do not touch\n", None])
def test_generate_refuses_to_overwrite_an_existing_file(tmp_path, existing):
    out = tmp_path / "alice.pem"
    if existing is None:
        generated(out)
        existing = out.read_bytes()
    else:
        out.write_bytes(existing)
    mode = stat.S_IMODE(out.stat().st_mode)

    result = run_cli("keys", "generate", "--out", str(out))

    assert result.exit_code == 1
    assert "exists" in result.stderr
    assert "refusing to overwrite" in result.stderr
    assert out.read_bytes() == existing
    assert stat.S_IMODE(out.stat().st_mode) == mode
    assert "public key" not in result.stdout


def test_generate_does_not_follow_a_symlink_onto_another_file(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    link = tmp_path / "link.pem"
    link.symlink_to(target)

    result = run_cli("keys", "generate", "--out", str(link))

    assert result.exit_code == 1
    assert target.read_text() == "keep me"


# --- register, list, revoke (operator: database access) ---------------------------------------


@both_backends
def test_register_a_generated_key_for_an_approver(runtime, demo, tmp_path):
    public, key_id = generated(tmp_path / "carol.pem")

    result = run_cli(
        "keys",
        "register",
        "--approver",
        "carol",
        "--public-key",
        public,
        "--label",
        "laptop",
        runtime=runtime,
    )

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"registered {key_id} for carol"
    with session_scope(runtime.engine) as session:
        [info] = keys.list_keys(session, tenant=TENANT, approver="carol")
    assert (info.key_id, info.public_key, info.label, info.active) == (
        key_id,
        public,
        "laptop",
        True,
    )
    [event] = [e for e in key_events(runtime, "key.registered") if e.data["approver"] == "carol"]
    assert event.actor == "operator:cli"
    assert event.data["key_id"] == key_id


# The raw public key of docs/approvals.md's test vector; its base64url spelling contains "_".
VECTOR_PUBLIC_KEY = "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"


@pytest.mark.parametrize(
    "public_key",
    [
        pytest.param("not-a-key", id="not-a-key"),
        pytest.param(b64url(bytes(31)), id="31-bytes"),
        pytest.param(b64url(bytes(33)), id="33-bytes"),
        pytest.param(VECTOR_PUBLIC_KEY + "=", id="padded"),
        pytest.param(VECTOR_PUBLIC_KEY.replace("_", "/"), id="standard-base64-alphabet"),
        pytest.param(public_key_b64(generate_private_key())[:-2], id="truncated"),
    ],
)
def test_register_refuses_what_is_not_a_raw_ed25519_public_key(runtime, demo, public_key):
    before = listed(runtime)

    result = run_cli(
        "keys", "register", "--approver", "carol", "--public-key", public_key, runtime=runtime
    )

    assert result.exit_code == 1, result.stdout
    assert "INVALID_ARGUMENT" in result.stderr
    assert listed(runtime) == before


@both_backends
def test_register_refuses_a_key_registered_before(runtime, demo, tmp_path):
    public, _ = generated(tmp_path / "carol.pem")
    first = run_cli(
        "keys", "register", "--approver", "carol", "--public-key", public, runtime=runtime
    )
    assert first.exit_code == 0, first.stderr

    again = run_cli(
        "keys", "register", "--approver", "dave", "--public-key", public, runtime=runtime
    )

    assert again.exit_code == 1
    assert "KEY_ALREADY_REGISTERED" in again.stderr
    assert [k["approver"] for k in listed(runtime) if k["public_key"] == public] == ["carol"]


@both_backends
def test_list_shows_the_tenants_keys_and_filters_by_approver(runtime, demo, tmp_path):
    public, key_id = generated(tmp_path / "carol.pem")
    assert (
        run_cli(
            "keys", "register", "--approver", "carol", "--public-key", public, runtime=runtime
        ).exit_code
        == 0
    )

    everything = listed(runtime)
    assert {k["approver"] for k in everything} == {"alice", "bob", "carol"}
    assert {k["key_id"] for k in everything} >= {
        demo["approvers"]["alice"]["key_id"],
        demo["approvers"]["bob"]["key_id"],
        key_id,
    }
    assert all(k["tenant"] == TENANT and k["active"] for k in everything)
    [carol] = listed(runtime, "--approver", "carol")
    assert (carol["key_id"], carol["public_key"], carol["revoked_at"]) == (key_id, public, None)

    table = run_cli("keys", "list", runtime=runtime)
    assert table.exit_code == 0, table.stderr
    [header, *lines] = table.stdout.splitlines()
    assert header.split()[:3] == ["KEY", "ID", "APPROVER"]
    assert len(lines) == 3
    [line] = [line for line in lines if key_id in line]
    assert line.split()[1:3] == ["carol", "yes"]


@both_backends
def test_keys_are_registered_and_listed_per_tenant(runtime, demo, tmp_path):
    public, key_id = generated(tmp_path / "acme.pem")
    result = run_cli(
        "keys",
        "register",
        "--approver",
        "alice",
        "--public-key",
        public,
        "--tenant",
        "acme",
        runtime=runtime,
    )
    assert result.exit_code == 0, result.stderr

    assert key_id not in {k["key_id"] for k in listed(runtime)}
    assert [k["key_id"] for k in listed(runtime, "--tenant", "acme")] == [key_id]
    # a key of another tenant cannot be revoked from this one
    wrong = run_cli("keys", "revoke", key_id, runtime=runtime)
    assert wrong.exit_code == 1
    assert "KEY_UNAVAILABLE" in wrong.stderr
    assert listed(runtime, "--tenant", "acme")[0]["active"] is True


@both_backends
def test_revoke_a_key(runtime, demo):
    alice_key = demo["approvers"]["alice"]["key_id"]

    result = run_cli("keys", "revoke", alice_key, runtime=runtime)

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"revoked {alice_key} of alice"
    [alice] = listed(runtime, "--approver", "alice")
    assert alice["active"] is False
    assert alice["revoked_at"] is not None
    [bob] = listed(runtime, "--approver", "bob")
    assert bob["active"] is True
    [event] = key_events(runtime, "key.revoked")
    assert (event.actor, event.data["key_id"]) == ("operator:cli", alice_key)

    again = run_cli("keys", "revoke", alice_key, runtime=runtime)  # harmless, not re-audited
    assert again.exit_code == 0, again.stderr
    assert len(key_events(runtime, "key.revoked")) == 1
    table = run_cli("keys", "list", "--approver", "alice", runtime=runtime).stdout
    assert "revoked" in table


def test_revoke_an_unknown_key_fails(runtime, demo):
    result = run_cli("keys", "revoke", "ed25519-0000000000000000", runtime=runtime)
    assert result.exit_code == 1
    assert "KEY_UNAVAILABLE" in result.stderr
    assert all(k["active"] for k in listed(runtime))
