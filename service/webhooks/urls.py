"""Which URLs draftgate sends webhooks to, and how one is named where a secret may hide.

https only; plain http only to a loopback address (a receiver on the same machine, tests),
so a delivery never crosses a network in clear text. A URL's path and query often carry a
secret of their own (chat webhooks put their token there), so logs and audit data name an
endpoint by its id and its origin only, never by its URL.

An admin token is enough to add an endpoint, so an endpoint must not reach what only the
server can: its host must resolve to **global unicast addresses only** (``refused_because``;
the exact rule, range by range, is in docs/webhooks.md). ``webhook_allow_private_addresses``
lets loopback and private-use ones through (receivers on the same host or network);
unspecified, multicast and link-local (cloud metadata) addresses never are. The check runs
at registration (a name that does not resolve yet is accepted) and again before each
delivery, which then connects to the very address it checked (``resolve``), so a name cannot
be re-pointed between the check and the connection.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from service.text import first_unsafe
from service.webhooks import errors

MAX_URL_LENGTH = 2048
LOOPBACK_NAMES = frozenset({"localhost"})
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_ADDRESSES_TRIED = 4  # a name with both IPv6 and IPv4 addresses: try the next if refused


@dataclass(frozen=True)
class Target:
    """Where one delivery connects: the checked addresses (tried in order, as resolved), and
    the name they were checked for (sent as the Host header and the TLS server name)."""

    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]


def checked_url(url: str, *, allow_private: bool = False) -> str:
    """``url`` if draftgate may send to it; WEBHOOK_URL_REFUSED saying why otherwise."""
    if len(url) > MAX_URL_LENGTH:
        raise errors.url_refused(f"it is longer than {MAX_URL_LENGTH} characters")
    if first_unsafe(url) is not None or any(character.isspace() for character in url):
        raise errors.url_refused("it contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise errors.url_refused(f"it does not parse ({exc})") from None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if scheme not in ("https", "http"):
        raise errors.url_refused("only https:// URLs are accepted")
    if not host:
        raise errors.url_refused("it names no host")
    if not host.isascii():  # a look-alike name must be spelt out (xn--…) to be accepted
        raise errors.url_refused("its host name is not ASCII; give it in punycode (xn--…)")
    if parts.username is not None or parts.password is not None:
        raise errors.url_refused("it carries user info (user:password@); put no credentials in it")
    if parts.fragment:
        raise errors.url_refused("it has a #fragment, which is never sent")
    if scheme == "http" and not is_loopback(host):
        raise errors.url_refused(
            "plain http:// is accepted only for a loopback address (127.0.0.1, ::1, localhost)"
        )
    if port == 0:
        raise errors.url_refused("port 0 is not a port")
    try:
        literal = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return url  # a name: resolved and checked by resolve()
    problem = refused_because(literal, allow_private=allow_private)
    if problem is not None:
        raise errors.url_refused(f"it is {problem}")
    return url


def checked_addresses(url: str, *, allow_private: bool) -> str:
    """``checked_url`` plus its host's addresses, as they resolve now (at registration)."""
    checked_url(url, allow_private=allow_private)
    # A name that does not resolve yet is kept: every delivery resolves and checks it again.
    with contextlib.suppress(OSError, UnicodeError):
        resolve(url, allow_private=allow_private)
    return url


def resolve(url: str, *, allow_private: bool) -> Target:
    """Resolve the URL's host and check every address it has: where to connect.

    WEBHOOK_URL_REFUSED for a refused address, OSError when the name does not resolve."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found]
    if not addresses:
        raise OSError("no address")
    for address in addresses:
        problem = refused_because(address, allow_private=allow_private)
        if problem is not None:
            raise errors.url_refused(f"its host resolves to {problem}")
    unique = tuple(dict.fromkeys(str(address) for address in addresses))
    return Target(scheme, host, port, unique[:MAX_ADDRESSES_TRIED])


def refused_because(address: IPAddress, *, allow_private: bool) -> str | None:
    """Why draftgate must not connect to ``address``, or None: it is global unicast (or, with
    ``allow_private``, loopback or private-use). An IPv6 form that carries an IPv4 address the
    connection really goes to (IPv4-mapped, NAT64) is judged as that IPv4 address."""
    inner = _embedded_ipv4(address)
    if inner is not None:
        return refused_because(inner, allow_private=allow_private)
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_link_local:  # 169.254.169.254 and friends: cloud metadata
        return "a link-local address"
    if address.is_loopback or any(address in network for network in PRIVATE_USE):
        return None if allow_private else "a loopback or private address"
    if any(address in network for network in TUNNELS):
        return "a 6to4 or Teredo relay address"
    if not _global_unicast(address):
        return "a reserved or special-purpose address (not global unicast)"
    return None


# Loopback aside, what ``webhook_allow_private_addresses`` lets through: RFC 1918, CGNAT
# (RFC 6598), unique local (RFC 4193) and the deprecated site-local (RFC 3879) networks.
PRIVATE_USE = tuple(
    ipaddress.ip_network(network)
    for network in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "fc00::/7",
        "fec0::/10",
    )
)
# 6to4 (RFC 3056, deprecated by RFC 7526) and Teredo (RFC 4380): refused whatever IPv4
# address they embed.
TUNNELS = (ipaddress.ip_network("2002::/16"), ipaddress.ip_network("2001::/32"))
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix (RFC 6052)
GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")  # RFC 4291 §2.4
# IANA special-purpose ranges (RFC 6890 registries) that are not globally reachable and that
# the ``is_global`` of every supported Python (3.11 up) does not already exclude: the IETF
# protocol assignments, the 6to4 relay anycast (RFC 7526) and the IPv6 documentation ranges.
NOT_GLOBAL = tuple(
    ipaddress.ip_network(network)
    for network in ("192.0.0.0/24", "192.88.99.0/24", "2001::/23", "2001:db8::/32", "3fff::/20")
)


def _global_unicast(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address not in GLOBAL_UNICAST_V6:
        return False
    return address.is_global and not any(address in network for network in NOT_GLOBAL)


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL: how logs and audit data name where it points."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        host = parts.hostname or "?"
    except ValueError:
        return "<unparseable>"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme.lower()}://{host}{port}"
