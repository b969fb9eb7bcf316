"""Where a ZeroMQ node listens and which peer endpoint it dials (internal)."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Sequence

import zmq

from ...errors import AddressInUse, SecurityError, TransportError
from ...security import Security, check_public_key, lan_refusal
from ..base import endpoint_host

if TYPE_CHECKING:
    from ...interfaces import InterfaceScope

__all__ = ["bind_all", "check_endpoint", "choose", "resolve_scope"]

log = logging.getLogger("zmesh")

_ENDPOINT = re.compile(r"^tcp://[A-Za-z0-9.\-]+:[0-9]{1,5}$")


def choose(endpoints: tuple[str, ...], scope: InterfaceScope | None) -> str | None:
    """The peer endpoint to dial from ``scope``, or None.

    An address on a network we share comes first. A local-only node never
    leaves the host; a LAN node never dials 127.x unless its own scope
    includes loopback. Failing a shared network, a LAN node may still try
    a non-loopback address (a routed network).
    """
    if not endpoints:
        return None
    if scope is None:
        return endpoints[0]
    from ...interfaces import rank_reachable

    hosts: dict[str, str] = {}
    for endpoint in endpoints:
        hosts.setdefault(endpoint_host(endpoint), endpoint)
    ranked = rank_reachable(list(hosts), scope)
    if ranked:
        return hosts[ranked[0]]
    if scope.is_local:
        return None
    return next((e for h, e in hosts.items() if not h.startswith("127.")), None)


def resolve_scope(interfaces: str | Sequence[str] | None, security: Security) -> InterfaceScope:
    """``Node(interfaces=...)`` resolved, and refused where security forbids it."""
    from ...interfaces import resolve_interfaces

    try:
        scope = resolve_interfaces(interfaces)
    except ValueError as exc:
        raise TransportError(f"bad interfaces setting: {exc}") from None
    if scope.mode == "lan" and not scope.addresses:
        raise TransportError("interfaces='lan' but this host has no up, non-loopback IPv4 interface")
    refusal = lan_refusal(scope.is_local, security.keyed, security.insecure, scope.addresses)
    if refusal is not None:
        raise SecurityError(refusal)
    if not scope.is_local and not security.keyed:
        log.warning(
            "zmesh: LAN mode on %s without authentication (insecure=True): any host on these networks "
            "can join the mesh and reach this node's agents",
            ", ".join(scope.addresses),
        )
    return scope


def bind_all(sock: zmq.Socket[Any], addresses: Sequence[str], port: int = 0) -> int:
    """Bind ``sock`` on every address, on ``port`` (0: one free on the first); the port."""
    address = addresses[0]
    try:
        if port:
            sock.bind(f"tcp://{address}:{port}")
        else:
            port = sock.bind_to_random_port(f"tcp://{address}")
        for address in addresses[1:]:
            sock.bind(f"tcp://{address}:{port}")
    except zmq.ZMQError as exc:
        if exc.errno == zmq.EADDRINUSE:
            raise AddressInUse(
                f"port {port} on {address} is already in use (another node or program holds it): "
                "stop it, or choose another port"
            ) from None
        raise
    return port


def check_endpoint(endpoint: str, keyed: bool) -> None:
    """TransportError unless ``endpoint`` is one a node (``keyed`` or not) may dial."""
    if not isinstance(endpoint, str):
        raise TransportError(f"bad endpoint {endpoint!r}: expected tcp://HOST:PORT")
    address, has_key, key = endpoint.partition("#")
    if not _ENDPOINT.match(address):
        raise TransportError(
            f"bad endpoint {endpoint!r}: expected tcp://HOST:PORT, e.g. tcp://127.0.0.1:5555"
        )
    port = int(address.rsplit(":", 1)[1])
    if not 0 < port < 65536:
        raise TransportError(f"bad endpoint {endpoint!r}: port {port} is out of range")
    if has_key:
        try:
            check_public_key(key, "public key in the endpoint")
        except SecurityError as exc:
            raise TransportError(f"bad endpoint {endpoint!r}: {exc}") from None
        if not keyed:
            raise TransportError(
                f"endpoint {endpoint!r} carries a public key, so its node runs with keys, "
                "but this node has none: give it one (Node(key=...), ZMESH_KEY or --key)"
            )
    elif keyed:
        raise TransportError(
            f"endpoint {endpoint!r} has no public key: a node with keys dials only "
            "tcp://HOST:PORT#PUBLIC_KEY (a keyed node's `node.endpoint` is written so)"
        )
