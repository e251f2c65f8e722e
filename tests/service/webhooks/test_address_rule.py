"""Where a webhook may point: global unicast addresses only (docs/webhooks.md, the table).

One case per range of the rule, each with its answer with and without
``webhook_allow_private_addresses``; and the route itself, for the site-local address that
used to be accepted (``https://[fec0::1]/`` answered 201).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

import pytest
from sqlmodel import select

from service.api.app import create_app
from service.db import session_scope
from service.webhooks.models import WebhookEndpoint
from service.webhooks.urls import refused_because
from tests.support.api_client import bearer, in_process

ALWAYS = "refused, also when private addresses are allowed"
PRIVATE = "refused unless private addresses are allowed"
GLOBAL = "accepted"

CASES = [
    # Global unicast, IPv4 and IPv6.
    ("8.8.8.8", GLOBAL),
    ("1.1.1.1", GLOBAL),
    ("2606:4700:4700::1111", GLOBAL),
    ("2a00:1450:4001:81c::200e", GLOBAL),
    # Forms that carry the IPv4 address the connection reaches: judged as that address.
    ("::ffff:8.8.8.8", GLOBAL),
    ("::ffff:10.0.0.1", PRIVATE),
    ("::ffff:169.254.169.254", ALWAYS),
    ("64:ff9b::808:808", GLOBAL),  # NAT64, well-known prefix
    ("64:ff9b::a00:1", PRIVATE),  # NAT64 of 10.0.0.1
    ("64:ff9b::a9fe:a9fe", ALWAYS),  # NAT64 of 169.254.169.254
    # Never: unspecified, multicast, link-local.
    ("0.0.0.0", ALWAYS),
    ("::", ALWAYS),
    ("224.0.0.1", ALWAYS),
    ("239.255.255.250", ALWAYS),
    ("ff02::1", ALWAYS),
    ("ff0e::1", ALWAYS),  # global-scope multicast: still multicast
    ("169.254.169.254", ALWAYS),
    ("fe80::1", ALWAYS),
    # Loopback and private-use: only with the setting.
    ("127.0.0.1", PRIVATE),
    ("127.8.9.10", PRIVATE),
    ("::1", PRIVATE),
    ("10.0.0.1", PRIVATE),
    ("172.16.5.4", PRIVATE),
    ("192.168.1.1", PRIVATE),
    ("100.64.0.1", PRIVATE),  # CGNAT
    ("fd00::1", PRIVATE),  # unique local
    ("fc00::1", PRIVATE),
    ("fec0::1", PRIVATE),  # site-local (deprecated): was accepted as global
    ("feff::1", PRIVATE),
    # Tunnels to an IPv4 host through a relay: refused whatever they embed.
    ("2002:808:808::1", ALWAYS),  # 6to4 of 8.8.8.8
    ("2002:a9fe:a9fe::", ALWAYS),  # 6to4 of 169.254.169.254
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", ALWAYS),  # Teredo
    # IPv4 special-purpose ranges.
    ("0.1.2.3", ALWAYS),  # "this network"
    ("192.0.0.9", ALWAYS),  # IETF protocol assignments, as a whole
    ("192.0.0.170", ALWAYS),
    ("192.0.2.1", ALWAYS),  # documentation
    ("198.51.100.7", ALWAYS),
    ("203.0.113.9", ALWAYS),
    ("198.18.0.1", ALWAYS),  # benchmarking
    ("192.88.99.1", ALWAYS),  # 6to4 relay anycast (deprecated)
    ("240.0.0.1", ALWAYS),  # reserved
    ("255.255.255.255", ALWAYS),  # limited broadcast
    # IPv6 outside global unicast 2000::/3, or special-purpose inside it.
    ("::8.8.8.8", ALWAYS),  # IPv4-compatible (deprecated)
    ("::2", ALWAYS),
    ("100::1", ALWAYS),  # discard
    ("64:ff9b:1::1", ALWAYS),  # local-use NAT64
    ("4000::1", ALWAYS),  # unassigned
    ("e000::1", ALWAYS),
    ("2001:db8::1", ALWAYS),  # documentation
    ("3fff::1", ALWAYS),  # documentation (RFC 9637), unknown to Python 3.11's is_global
    ("2001:2::1", ALWAYS),  # benchmarking
    ("2001:20::1", ALWAYS),  # ORCHIDv2 (IETF protocol assignments, as a whole)
    ("2001:3::1", ALWAYS),  # AMT
]


@pytest.mark.parametrize(("address", "answer"), CASES, ids=[address for address, _ in CASES])
def test_each_range_gets_the_documented_answer(address, answer):
    parsed = ipaddress.ip_address(address)
    strict = refused_because(parsed, allow_private=False)
    lenient = refused_because(parsed, allow_private=True)
    if answer == GLOBAL:
        assert (strict, lenient) == (None, None)
    elif answer == PRIVATE:
        assert strict == "a loopback or private address"
        assert lenient is None
    else:
        assert strict is not None
        assert lenient is not None, "allowing private addresses must not let this through"


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url  # an address rule: the database does not matter


@pytest.mark.parametrize(
    "url", ["https://[fec0::1]/hooks", "https://[feff::1]/hooks", "https://[3fff::1]/hooks"]
)
def test_a_site_local_or_documentation_address_is_refused_at_registration(
    runtime, demo, url: str
) -> None:
    strict = dataclasses.replace(
        runtime,
        settings=runtime.settings.model_copy(update={"webhook_allow_private_addresses": False}),
    )
    body: dict[str, Any] = {"url": url, "events": ["draft.proposed"]}
    with in_process(create_app(strict)) as client:
        response = client.post("/v1/webhooks", json=body, headers=bearer(demo["tokens"]["admin"]))

    assert response.status_code == 400, response.text
    assert response.json()["code"] == "WEBHOOK_URL_REFUSED"
    with session_scope(runtime.engine) as session:
        assert session.exec(select(WebhookEndpoint)).all() == []
