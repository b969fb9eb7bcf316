"""Keep python-zeroconf's mDNS sockets to a node's interface scope (Linux).

zeroconf listens on 0.0.0.0:5353. With Linux's default IP_MULTICAST_ALL=1
that socket also receives mDNS arriving on interfaces *other* processes
joined (a LAN-scoped node, avahi), and it answers QU/unicast questions
through that same socket, so a "local" node would leak its records onto the
LAN. :func:`confine_to_scope` clears IP_MULTICAST_ALL and, when the scope
lives on one interface (always so for "local"), binds the socket to that
device. Both are best effort.

zeroconf exposes these sockets only as private attributes of its engine
(``engine._listen_socket``, ``engine._respond_sockets``).
tests/test_discovery.py fails on a zeroconf release without them, and at run
time a missing one is logged as a warning, once, instead of being skipped
in silence.
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any

from ..interfaces import InterfaceScope, list_host_interfaces

__all__ = ["IP_MULTICAST_ALL", "confine_to_scope", "zeroconf_sockets"]

IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)  # Linux
_warned = False  # the missing-attribute warning, once per process


def zeroconf_sockets(zc: Any) -> tuple[socket.socket, list[socket.socket]] | None:
    """zeroconf's shared listen socket and its respond sockets, or None if this
    zeroconf no longer has the attributes."""
    engine = getattr(zc, "engine", None)
    listen = getattr(engine, "_listen_socket", None)
    respond = getattr(engine, "_respond_sockets", None)
    if not isinstance(listen, socket.socket) or not isinstance(respond, list):
        return None
    return listen, [sock for sock in respond if isinstance(sock, socket.socket)]


def confine_to_scope(zc: Any, scope: InterfaceScope, log: logging.Logger) -> None:
    """Keep ``zc``'s sockets to ``scope`` where the OS allows it (see the module doc)."""
    found = zeroconf_sockets(zc)
    if found is None:
        _warn_missing(log)
        return
    listen, respond = found
    for sock in (listen, *respond):
        if sock.family == socket.AF_INET:
            try:
                sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
            except OSError as exc:
                log.debug("zmesh discovery: cannot clear IP_MULTICAST_ALL: %s", exc)
    devices = {h.name for h in list_host_interfaces() if str(h.interface.ip) in scope.addresses}
    if len(devices) == 1 and hasattr(socket, "SO_BINDTODEVICE"):
        (device,) = devices
        try:
            listen.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
        except OSError as exc:
            log.debug("zmesh discovery: cannot bind mDNS socket to %s: %s", device, exc)


def _warn_missing(log: logging.Logger) -> None:
    global _warned
    if _warned or not sys.platform.startswith("linux"):
        return  # elsewhere there is nothing to confine: IP_MULTICAST_ALL is Linux's
    _warned = True
    import zeroconf

    log.warning(
        "zmesh discovery: zeroconf %s has no engine._listen_socket/_respond_sockets, which zmesh "
        "uses to keep mDNS to the node's interfaces. Discovery still works, but this host's mDNS "
        "socket may also answer queries that arrive on other interfaces. Please report it; pin "
        "an earlier zeroconf where that matters.",
        getattr(zeroconf, "__version__", "?"),
    )
