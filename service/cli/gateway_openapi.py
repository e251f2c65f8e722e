"""``draftgate gateway import-openapi``: the gateway file for chosen operations of an API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from service.cli.common import echo, fail
from service.gateway.errors import GatewayError
from service.gateway.openapi import Kind, declaration_text

# Published descriptions are tens of MB (GitHub's 13 MB, Stripe's 7 MB); past this, refused.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024


def import_openapi(
    spec: Annotated[str, typer.Argument(help="The OpenAPI document: a file or an http(s) URL.")],
    operation: Annotated[
        list[str],
        typer.Option("--operation", help="An operationId to declare (repeat for more)."),
    ],
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            help="OPERATION_ID=read|write, overriding GET → read, anything else → write.",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(help="The namespace of the actions (default: from the API's title)."),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(help="The API's base URL (default: the document's server, or its URL)."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", help="Write the file here (default: stdout).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing output file.")] = False,
) -> None:
    """Write the gateway file's http entry for the chosen operations: GET → read, other
    methods → write; input schemas from parameters and the JSON body; a placeholder summary
    template; money only where obvious. Read it, edit it, then `draftgate gateway check`."""
    if output is not None and output.exists() and not force:
        fail(f"{output} exists; pass --force to overwrite it")
    document, source_url = _document(spec)
    try:
        text = declaration_text(
            document,
            operation,
            kinds=_kinds(kind or []),
            namespace=namespace,
            base_url=base_url,
            source=spec,
            source_url=source_url,
        )
    except GatewayError as exc:
        fail(str(exc))
    if output is None:
        typer.echo(text, nl=False)  # YAML for a file: nothing in it is rendered for a person
        return
    output.write_text(text, encoding="utf-8")
    echo(f"wrote {output} ({len(operation)} operation(s)); read it, then: draftgate gateway check")


def _kinds(values: list[str]) -> dict[str, Kind]:
    kinds: dict[str, Kind] = {}
    for value in values:
        operation_id, _, kind = value.partition("=")
        if kind == "read":
            kinds[operation_id] = "read"
        elif kind == "write":
            kinds[operation_id] = "write"
        else:
            fail(f"--kind {value!r}: write OPERATION_ID=read or OPERATION_ID=write")
    return kinds


def _document(spec: str) -> tuple[Any, str | None]:
    """The parsed document (JSON or YAML) and, for a URL, the URL it came from."""
    import yaml

    if spec.startswith(("http://", "https://")):
        raw, source_url = _download(spec), spec
    else:
        path = Path(spec)
        try:
            if path.stat().st_size > MAX_DOCUMENT_BYTES:
                fail(f"{spec}: larger than {MAX_DOCUMENT_BYTES} bytes")
            raw, source_url = path.read_bytes(), None
        except OSError as exc:
            fail(f"{spec}: cannot be read ({exc.strerror})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        fail(f"{spec}: not JSON or YAML (not UTF-8)")
    if text.lstrip().startswith("{"):  # JSON: parsed in C, seconds faster than as YAML
        try:
            return json.loads(text), source_url
        except ValueError:
            pass
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader), source_url  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        fail(f"{spec}: not JSON or YAML ({type(exc).__name__})")


def _download(url: str) -> bytes:
    import httpx

    try:
        with (
            httpx.Client(timeout=30, follow_redirects=True) as http,
            http.stream("GET", url, headers={"Accept": "application/json"}) as response,
        ):
            if response.status_code != 200:
                fail(f"{url}: HTTP {response.status_code}")
            received = bytearray()
            for chunk in response.iter_bytes():
                received += chunk
                if len(received) > MAX_DOCUMENT_BYTES:
                    fail(f"{url}: larger than {MAX_DOCUMENT_BYTES} bytes")
            return bytes(received)
    except httpx.HTTPError as exc:
        fail(f"{url}: cannot be fetched ({type(exc).__name__})")
