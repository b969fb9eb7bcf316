"""In-process transport: nodes of the same mesh name in one process find each
other through a process-wide hub and exchange the same frames a ZeroMQ mesh
would, delivered on the receiving node's event loop (thread-safe across loops).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import threading
from typing import Callable

from ..errors import TransportError
from .base import Transport, TransportCapabilities, TransportHost

__all__ = ["InprocTransport"]

_lock = threading.Lock()
_routers: dict[str, InprocTransport] = {}
_pubs: dict[str, InprocTransport] = {}
_meshes: dict[str, set[InprocTransport]] = {}
_ids = itertools.count(1)


class _InprocLink:
    __slots__ = ("_owner", "_endpoint", "_closed")

    def __init__(self, owner: InprocTransport, endpoint: str) -> None:
        self._owner = owner
        self._endpoint = endpoint
        self._closed = False

    def send(self, frame: bytes) -> None:
        if self._closed:
            return
        target = _routers.get(self._endpoint)
        if target is None:
            return  # like TCP to a closed port: the peer's liveness notices
        target._schedule(self._owner._loop, target._host_direct, self._owner._key, frame)

    def close(self) -> None:
        self._closed = True


class InprocTransport(Transport):
    capabilities = TransportCapabilities(level="frame", peers_can_vanish=False, discovery="hub")
    name = "inproc"

    def __init__(self) -> None:
        self._host: TransportHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._key = ""
        self._mesh = ""
        self._subscribers: set[InprocTransport] = set()
        self._subscribed: set[str] = set()
        self._closed = False

    async def start(
        self, host: TransportHost, key: str, mesh: str, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._host, self._key, self._mesh, self._loop = host, key, mesh, loop
        n = next(_ids)
        self.router_endpoint = f"inproc://{mesh}/{n}"
        self.pub_endpoint = f"inproc://{mesh}/{n}/pub"
        with _lock:
            if self.router_endpoint in _routers:
                raise TransportError(f"in-process endpoint {self.router_endpoint} in use")
            others = list(_meshes.get(mesh, ()))
            _routers[self.router_endpoint] = self
            _pubs[self.pub_endpoint] = self
            _meshes.setdefault(mesh, set()).add(self)
        for other in others:  # the hub is this transport's discovery
            self._schedule(loop, host.on_discovered, other.router_endpoint)

    def _schedule(
        self, origin: asyncio.AbstractEventLoop | None, fn: Callable[..., object], *args: object
    ) -> None:
        """Run ``fn(*args)`` on this transport's loop, soon; ``origin`` is the caller's loop."""
        loop = self._loop
        if loop is None or self._closed:
            return
        # A fresh context, as a frame arriving on a socket would get: nothing
        # of the sender's context variables may travel but the message.
        if origin is loop:
            loop.call_soon(fn, *args, context=contextvars.Context())
        elif not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args, context=contextvars.Context())

    def _host_direct(self, key: str, frame: bytes) -> None:
        if not self._closed and self._host is not None:
            try:
                self._host.on_direct_frame(key, frame)
            finally:
                self._host.on_drained()

    def _host_pub(self, frame: bytes) -> None:
        if not self._closed and self._host is not None:
            try:
                self._host.on_pub_frame(frame)
            finally:
                self._host.on_drained()

    def _host_ready(self, key: str) -> None:
        if not self._closed and self._host is not None:
            self._host.on_subscriber_ready(key)

    def open_link(self, router_endpoint: str) -> _InprocLink:
        return _InprocLink(self, router_endpoint)

    def subscribe(self, pub_endpoint: str) -> None:
        publisher = _pubs.get(pub_endpoint)
        if publisher is None or pub_endpoint in self._subscribed:
            return
        self._subscribed.add(pub_endpoint)
        publisher._subscribers.add(self)
        publisher._schedule(self._loop, publisher._host_ready, self._key)

    def unsubscribe(self, pub_endpoint: str) -> None:
        self._subscribed.discard(pub_endpoint)
        publisher = _pubs.get(pub_endpoint)
        if publisher is not None:
            publisher._subscribers.discard(self)

    def announce(self) -> None:
        for endpoint in list(self._subscribed):
            publisher = _pubs.get(endpoint)
            if publisher is not None:
                publisher._schedule(self._loop, publisher._host_ready, self._key)

    def publish(self, frame: bytes) -> None:
        for sub in list(self._subscribers):
            sub._schedule(self._loop, sub._host_pub, frame)

    async def close(self) -> None:
        if self._closed:
            return
        with _lock:
            _routers.pop(self.router_endpoint, None)
            _pubs.pop(self.pub_endpoint, None)
            members = _meshes.get(self._mesh)
            if members is not None:
                members.discard(self)
                if not members:
                    del _meshes[self._mesh]
        for endpoint in list(self._subscribed):
            self.unsubscribe(endpoint)
        self._subscribers.clear()
        self._closed = True
