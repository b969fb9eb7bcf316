"""The per-peer sockets of the zmq transport (internal): a DEALER connected to
one peer's ROUTER (a link) and, in keyed mode, a SUB attached to one peer's XPUB.

A socket monitor (:class:`Watcher`) reports on each: the connection up,
down, or refused by the peer's ZAP handler. libzmq does not reconnect after
a refused handshake, so a refused socket dials again itself, with backoff:
the peer may trust our key later (rotation without restarts).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import zmq

from ..._wire.frames import Received
from ..base import TransportHost, endpoint_address, endpoint_key
from . import _sockets as zs
from ._allocator import LARGE_FRAME, large_frame
from ._curve import curve_client

if TYPE_CHECKING:
    from . import ZmqTransport

__all__ = ["KeyedSubscription", "LinkPlumbing", "Watcher", "ZmqLink", "link_tag"]

log = logging.getLogger("zmesh")

_BACKLOG_LIMIT = 100_000
_RETRY_DELAY = 0.002
_PROBE_ROOM = 16  # what the peer's ROUTER may queue to us (its identity probes; we never read them)
_REDIAL_FIRST, _REDIAL_MAX = 0.5, 10.0  # seconds before dialling again after a refused handshake

_DISCONNECTED = int(zmq.EVENT_DISCONNECTED)
_HANDSHAKE_SUCCEEDED = int(zmq.EVENT_HANDSHAKE_SUCCEEDED)
# The peer's ZAP handler said no. libzmq reconnects after a broken connection,
# keeping what the socket queued, but not after this: only this is re-dialled.
_REFUSED = int(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_EVENTS = _DISCONNECTED | _HANDSHAKE_SUCCEEDED | _REFUSED


@dataclass(frozen=True, slots=True, eq=False)
class LinkPlumbing:
    """What a started :class:`~zmesh.transport.zmq.ZmqTransport` shares with
    its links, subscriptions and their monitors (made by ``start()``)."""

    ctx: zmq.Context[Any]
    loop: asyncio.AbstractEventLoop
    host: TransportHost
    #: This node's key (``id|incarnation``): the prefix of our routing ids and SUB filters.
    key: str
    counters: dict[str, int]
    #: The transport's open links (a link leaves it when it closes).
    links: set[ZmqLink]
    add_reader: Callable[[int, Callable[[], None]], None]
    remove_reader: Callable[[int], object]
    #: Count a drop and tell the host: ``(reason, where)``.
    drop: Callable[[str, str], None]
    #: Read a socket on the loop: ``(socket, on_parts, again)``.
    drain: Callable[[zmq.Socket[Any] | None, Callable[[Received], None], Callable[[], None]], None]
    is_closed: Callable[[], bool]


def link_tag(secret: bytes, endpoint: str) -> str:
    """The routing-id tag of our link to ``endpoint``: unguessable without ``secret``."""
    return hashlib.blake2b(endpoint.encode(), key=secret, digest_size=8).hexdigest()


def _abandon(
    plumbing: LinkPlumbing, sock: zmq.Socket[Any], watcher: Watcher | None, endpoint: str, exc: zmq.ZMQError
) -> None:
    """A socket that could not be set up for ``endpoint``: close it and its watcher, and count why."""
    if watcher is not None:
        watcher.close()
    zs.close_socket(sock)
    plumbing.drop("bad_endpoint", f"{endpoint}: {exc.strerror}")


class Watcher:
    """A socket's monitor, read on the loop; ``on_event(event)`` for each event.

    A refused handshake is answered here: the socket dials again after a
    backoff (doubling, reset by a handshake that succeeds)."""

    __slots__ = ("_plumbing", "_pair", "_on_event", "_sock", "_address", "_redial", "_delay", "_logged")

    def __init__(
        self, plumbing: LinkPlumbing, sock: zmq.Socket[Any], endpoint: str, on_event: Callable[[int], None]
    ) -> None:
        self._plumbing = plumbing
        self._sock = sock
        self._address = endpoint
        self._on_event = on_event
        self._redial: asyncio.TimerHandle | None = None
        self._delay = _REDIAL_FIRST
        self._logged = False
        address = f"inproc://zmesh-monitor-{zs.next_id()}"
        sock.monitor(address, _EVENTS)
        pair = zs.open_socket(plumbing.ctx, zmq.PAIR)
        pair.setsockopt(zmq.LINGER, 0)
        pair.connect(address)
        self._pair: zmq.Socket[Any] | None = pair
        if plumbing.loop is not None and plumbing.add_reader is not None:
            plumbing.add_reader(zs.fd_of(pair), self.read)
            plumbing.loop.call_soon(self.read)

    def read(self) -> None:
        pair = self._pair
        if pair is None or pair.closed:
            return
        try:
            while pair.getsockopt(zs.EVENTS) & zs.POLLIN:  # type: ignore[operator]
                event = int.from_bytes(pair.recv_multipart(zs.NOBLOCK)[0][:2], "little")
                if event == _REFUSED:
                    self._refused()
                elif event == _HANDSHAKE_SUCCEEDED:
                    self._delay = _REDIAL_FIRST
                self._on_event(event)
                if self._pair is None:
                    return  # the owner closed
        except zmq.ZMQError:
            pass

    def _refused(self) -> None:
        plumbing = self._plumbing
        plumbing.counters["refused_by_peers"] = plumbing.counters.get("refused_by_peers", 0) + 1
        if not self._logged:
            self._logged = True
            log.warning("zmesh: %s refused our key (it is not in that node's trusted set): "
                        "dialling again, every %g s at most", self._address, _REDIAL_MAX)
        if self._redial is None and plumbing.loop is not None and not plumbing.is_closed():
            self._redial = plumbing.loop.call_later(self._delay, self._dial_again)
            self._delay = min(self._delay * 2, _REDIAL_MAX)

    def _dial_again(self) -> None:
        self._redial = None
        sock = self._sock
        if self._pair is None or sock.closed:
            return
        address = endpoint_address(self._address)
        with contextlib.suppress(zmq.ZMQError):
            sock.disconnect(address)
        with contextlib.suppress(zmq.ZMQError):
            sock.connect(address)

    def close(self) -> None:
        """Stop watching (call before the socket closes)."""
        if self._redial is not None:
            self._redial.cancel()
            self._redial = None
        pair, self._pair = self._pair, None
        if pair is None:
            return
        with contextlib.suppress(zmq.ZMQError):
            self._sock.disable_monitor()
        remove_reader = self._plumbing.remove_reader
        if remove_reader is not None and not pair.closed:
            with contextlib.suppress(Exception):
                remove_reader(zs.fd_of(pair))
        zs.close_socket(pair)


class ZmqLink:
    """A DEALER connected to one peer's ROUTER; non-blocking, with a backlog.

    With link heartbeats on, the DEALER runs ZMTP heartbeats (answered by
    libzmq's I/O threads, event loop or not) and a socket monitor reports
    the connection breaking: a killed peer at once, a frozen one or a cut
    link after the heartbeat timeout. The host hears of it once per lost
    connection (``on_link_down``). A link closed after its connection broke
    does not linger: what it still holds (a BYE) cannot leave, and lingering
    would hold up the release of the ZeroMQ context.

    In keyed mode the endpoint carries the peer's public key
    (``tcp://host:port#KEY``): the DEALER is a CURVE client of it, and is
    only opened while that key is trusted (sends before are dropped and
    counted as ``untrusted_peer``; :meth:`cut` closes it when the key stops
    being trusted).
    """

    __slots__ = ("_transport", "_plumbing", "_sock", "_backlog", "_retry", "endpoint", "server_key", "_watcher", "_up",
                 "_closing")

    def __init__(self, transport: ZmqTransport, plumbing: LinkPlumbing, endpoint: str) -> None:
        self._transport = transport
        self._plumbing = plumbing
        self.endpoint = endpoint
        self.server_key = endpoint_key(endpoint)
        self._backlog: deque[bytes] = deque()
        self._retry: asyncio.TimerHandle | None = None
        self._watcher: Watcher | None = None
        self._up: bool | None = None  # None: never connected; False: connected, then broke
        self._closing = False
        self._sock: zmq.Socket[Any] | None = None
        if transport.may_dial(self.server_key):
            self.open()

    def open(self) -> None:
        """Create and connect the DEALER (again, after :meth:`cut`)."""
        transport = self._transport
        if self._sock is not None or self._plumbing.is_closed():
            return
        sock = zs.open_socket(self._plumbing.ctx, zmq.DEALER)
        try:
            sock.setsockopt(zmq.ROUTING_ID, transport.routing_id(self.endpoint))
            sock.setsockopt(zmq.SNDHWM, transport.hwm)
            sock.setsockopt(zmq.RCVHWM, _PROBE_ROOM)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
            if self.server_key is not None and transport.security.key is not None:
                curve_client(sock, transport.security.key, self.server_key)
            beats = transport.link_heartbeat
            if beats is not None:
                interval, timeout = beats
                sock.setsockopt(zmq.HEARTBEAT_IVL, int(interval * 1000))
                sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(timeout * 1000))
                sock.setsockopt(zmq.HEARTBEAT_TTL, int(timeout * 1000))
            if beats is not None or self.server_key is not None:
                self._watcher = Watcher(self._plumbing, sock, self.endpoint, self._on_event)
            sock.connect(endpoint_address(self.endpoint))
        except zmq.ZMQError as exc:
            _abandon(self._plumbing, sock, self._watcher, self.endpoint, exc)
            self._watcher = None
            return
        self._sock = sock

    def cut(self) -> None:
        """Close the DEALER but keep the link (its key is no longer trusted)."""
        self._backlog.clear()
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        if self._sock is not None:
            zs.close_socket(self._sock)
            self._sock = None
        self._up = None

    def _on_event(self, event: int) -> None:
        if event == _HANDSHAKE_SUCCEEDED:
            self._up = True
        elif event == _DISCONNECTED and self._up:
            self._up = False
            host = self._plumbing.host
            if not self._closing and host is not None:
                self._transport.read_direct_now()  # its BYE may be there already
                if not self._closing:
                    host.on_link_down(self)

    def send(self, frame: bytes) -> None:
        if self._sock is None:
            if not self._transport.may_dial(self.server_key):
                self._plumbing.drop("untrusted_peer", self.endpoint)
            return
        if self._backlog:
            self._queue(frame)
            return
        try:
            # Copied, large ones too: pyzmq's zero-copy send frees through a
            # Python thread of its own, which cost more than the copy (1 MiB:
            # 0.5 ms of CPU per message copied, 0.8 ms not; docs/performance.md).
            if len(frame) >= LARGE_FRAME:
                large_frame(len(frame))
            self._sock.send(frame, zs.NOBLOCK)
        except zmq.Again:
            self._queue(frame)
        except zmq.ZMQError as exc:
            self._plumbing.drop("send_failed", f"{self.endpoint}: {exc.strerror}")

    def _queue(self, frame: bytes) -> None:
        if len(self._backlog) >= _BACKLOG_LIMIT:
            self._backlog.popleft()
            self._plumbing.drop("send_backlog_full", self.endpoint)
        self._backlog.append(frame)
        if self._retry is None and self._plumbing.loop is not None:
            self._retry = self._plumbing.loop.call_later(_RETRY_DELAY, self._flush_backlog)

    def _flush_backlog(self) -> None:
        self._retry = None
        if self._sock is None or self._sock.closed:
            self._backlog.clear()
            return
        while self._backlog:
            try:
                self._sock.send(self._backlog[0], zs.NOBLOCK)
            except zmq.Again:
                break
            except zmq.ZMQError as exc:
                self._plumbing.drop("send_failed", f"{self.endpoint}: {exc.strerror}")
            self._backlog.popleft()
        if self._backlog and self._plumbing.loop is not None:
            self._retry = self._plumbing.loop.call_later(_RETRY_DELAY, self._flush_backlog)

    def close(self, linger_ms: int = zs.BYE_LINGER_MS) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._backlog.clear()
        if self._watcher is not None:
            self._closing = True
            self._watcher.read()  # events the loop has not read yet
            if self._up is False:
                linger_ms = 0
            self._watcher.close()
            self._watcher = None
        if self._sock is not None:
            zs.close_socket(self._sock, linger_ms)
            self._sock = None
        self._plumbing.links.discard(self)


class KeyedSubscription:
    """Keyed mode: a SUB of our own attached to one publisher's XPUB, as a
    CURVE client of the key its endpoint carries. Every frame it reads comes
    from that key (the handshake proved it), so the host is told so."""

    __slots__ = ("_transport", "_plumbing", "endpoint", "server_key", "_sock", "_watcher")

    def __init__(self, transport: ZmqTransport, plumbing: LinkPlumbing, endpoint: str) -> None:
        self._transport = transport
        self._plumbing = plumbing
        self.endpoint = endpoint
        self.server_key = endpoint_key(endpoint)
        self._sock: zmq.Socket[Any] | None = None
        self._watcher: Watcher | None = None
        if transport.may_dial(self.server_key):
            self.open()
        else:
            self._plumbing.drop("untrusted_peer", endpoint)

    def open(self) -> None:
        transport, pair = self._transport, self._transport.security.key
        if self._sock is not None or self.server_key is None or pair is None or self._plumbing.is_closed():
            return
        sock = zs.open_socket(self._plumbing.ctx, zmq.SUB)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, transport.hwm)
            sock.setsockopt(zmq.MAXMSGSIZE, transport.max_frame)
            curve_client(sock, pair, self.server_key)
            sock.setsockopt(zmq.SUBSCRIBE, b"M")
            sock.setsockopt(zmq.SUBSCRIBE, b"J" + self._plumbing.key.encode())
            self._watcher = Watcher(self._plumbing, sock, self.endpoint, lambda event: None)
            sock.connect(endpoint_address(self.endpoint))
        except zmq.ZMQError as exc:
            _abandon(self._plumbing, sock, self._watcher, self.endpoint, exc)
            self._watcher = None
            return
        self._sock = sock
        if self._plumbing.add_reader is not None and self._plumbing.loop is not None:
            self._plumbing.add_reader(zs.fd_of(sock), self.drain)
            self._plumbing.loop.call_soon(self.drain)

    def drain(self) -> None:
        self._plumbing.drain(self._sock, self._parts, self.drain)

    def _parts(self, frame: Received) -> None:
        if not self._transport.may_dial(self.server_key):
            self._plumbing.drop("untrusted_key", self.endpoint)  # distrusted; not cut yet
        else:
            self._plumbing.host.on_pub_frame(frame, self.server_key)

    def announce(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._sock.setsockopt(zmq.SUBSCRIBE, b"J" + self._plumbing.key.encode())

    def cut(self) -> None:
        """Detach (the publisher's key is no longer trusted, or we unsubscribed)."""
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        sock, self._sock = self._sock, None
        if sock is None:
            return
        remove_reader = self._plumbing.remove_reader
        if remove_reader is not None and not sock.closed:
            with contextlib.suppress(Exception):
                remove_reader(zs.fd_of(sock))
        zs.close_socket(sock)
