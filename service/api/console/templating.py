"""The console's Jinja2 environment: autoescape on, and agent text rendered inert.

Agent-controlled strings go through ``inert``: control, format (bidi, zero-width) and
separator characters become visible escapes (service.text.inert), the rest is HTML-escaped by
autoescape, and the result sits in a ``<bdi>`` so right-to-left text cannot reorder what
surrounds it. Free text may be multi-line (DESIGN.md §3): its lines are shown in a framed
block (``bdi.agent.multiline`` in console.css). JSON for scripts goes through
``json_script``: ``<``, ``>``, ``&`` and U+2028/U+2029 are written as JSON escapes, so no
value can close the ``<script>`` element.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape

from service.text import inert, inert_lines

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
TEMPLATES_DIR = HERE / "templates"
_JSON_ESCAPES = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def inert_html(value: Any) -> Markup:
    """Agent text as inert HTML: escaped, unsafe characters visible, bidi-isolated. A
    multi-line value is a visibly framed block of its own (``agent multiline``), so none of
    its lines can pass for one of the page's own (an ``Amount`` row, a status line)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if "\n" not in text:
        return Markup('<bdi class="agent">') + escape(inert(text)) + Markup("</bdi>")
    lines = Markup("\n").join(escape(line) for line in inert_lines(text))
    return Markup('<bdi class="agent multiline">') + lines + Markup("</bdi>")


def json_script(value: Any) -> Markup:
    """JSON safe inside ``<script type="application/json">`` (JSON.parse gives it back).

    ASCII only: every other character (bidi overrides included) is a \\u escape, so the page
    source holds nothing invisible either."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return Markup(text.translate(_JSON_ESCAPES))  # noqa: S704 - escaped just above


@cache
def vendored() -> dict[str, dict[str, str]]:
    """static/vendor/vendored.json: each vendored file's SRI hash (by frontend/vendor.py)."""
    manifest: dict[str, dict[str, str]] = json.loads(
        (STATIC_DIR / "vendor" / "vendored.json").read_text()
    )
    return manifest


def build_templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
    )
    templates = Jinja2Templates(env=env)
    templates.env.filters["inert"] = inert_html
    templates.env.filters["json_script"] = json_script
    templates.env.globals["vendored"] = vendored
    return templates
