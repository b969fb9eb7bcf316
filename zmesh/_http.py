"""What zmesh's HTTP servers share (internal; zmesh.a2a and zmesh.mcp): the
listening socket, bound before the server runs, and the bearer-token guard."""

from __future__ import annotations

import hmac
import json
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["BearerToken", "bind_tcp"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def bind_tcp(host: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``host:port`` (port 0: a free one); OSError if it cannot be."""
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio turns Nagle off only on sockets that say they are TCP, and with it
    # on, a response written as headers then body waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class BearerToken:
    """ASGI middleware: every HTTP request carries ``Authorization: Bearer <token>``, or gets 401
    (``challenge`` its WWW-Authenticate header); ``refused`` counts those."""

    def __init__(self, app: ASGIApp, token: str, challenge: str = "Bearer") -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()
        self._challenge = challenge.encode()
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                self.refused += 1
                body = json.dumps({"error": "missing or wrong bearer token"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", self._challenge),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)
