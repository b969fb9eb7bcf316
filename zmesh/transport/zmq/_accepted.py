"""The TCP connections our listening sockets accepted (internal): shutting
down a connection libzmq owns, by its descriptor.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["connection_ends", "shutdown_connection"]


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
