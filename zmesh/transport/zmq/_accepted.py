"""The TCP connections our listening sockets accepted (internal): a short
handshake timeout, and shutting down a connection libzmq owns, by its descriptor.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["HANDSHAKE_IVL", "connection_ends", "shutdown_connection"]

#: Seconds a connection to our ROUTER or XPUB has to finish its ZMTP (and CURVE) handshake.
#: A CURVE handshake is two round trips, four Curve25519 operations and a ZAP
#: answer from a Python thread: milliseconds, and about a second for the last of
#: 200 at once on a loaded 2-core machine (docs/security.md). 5 s leaves room for
#: that, and a client whose handshake is cut reconnects by itself.
HANDSHAKE_IVL = 5.0


def connection_ends(fd: int) -> tuple[Any, Any] | None:
    """(our address, its address) of the TCP connection on descriptor ``fd``
    (which libzmq owns), or None if it is no connection now."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        return sock.getsockname(), sock.getpeername()
    except OSError:
        return None
    finally:
        sock.detach()  # libzmq owns the descriptor


def shutdown_connection(fd: int, ours: Any, theirs: Any) -> bool:
    """Shut down the TCP connection on ``fd`` if it still joins ``ours`` and
    ``theirs``; libzmq then closes it. Whether it did."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return False
    try:
        if (sock.getsockname(), sock.getpeername()) != (ours, theirs):
            return False  # closed, and the number reused by another connection
        sock.shutdown(socket.SHUT_RDWR)
        return True
    except OSError:
        return False
    finally:
        sock.detach()
