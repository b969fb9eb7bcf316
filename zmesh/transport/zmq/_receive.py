"""The receiving side of the zmq transport (internal): draining its sockets
and deciding who sent each frame. :class:`Receiving` is a base class of
:class:`~zmesh.transport.zmq.ZmqTransport`, split out to keep that file short.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Callable

import zmq

from ..._wire.frames import Received
from ...security import Security
from ..base import TransportHost
from . import _sockets as zs
from ._accepted import HandshakeGuard
from ._allocator import LARGE_FRAME, large_frame
from ._curve import Subscribers
from ._senders import Sender, Senders, hex_id

__all__ = ["Receiving"]

_NOBLOCK, _POLLIN, _EVENTS = zs.NOBLOCK, zs.POLLIN, zs.EVENTS
_SRCFD = int(zmq.SRCFD)
_EHOSTUNREACH = zmq.EHOSTUNREACH
_DRAIN_BUDGET = 1024  # frames read per drain, at most ...
_DRAIN_SECONDS = 0.01  # ... and for this long: then the loop runs timers and other callbacks
_monotonic = time.monotonic


def _large_body(frame: zmq.Frame) -> memoryview:
    """A large body is handed on as a view of ZeroMQ's buffer, not copied:
    decoding copies what it keeps anyway, so a 1 MiB message is copied once.
    (A short one is copied, which costs less than making the view.)"""
    large_frame(len(frame))
    return frame.buffer


class Receiving:
    """Drains of the ROUTER, XPUB and SUB, on the node's loop."""

    # Set by ZmqTransport.
    security: Security
    public_key: str | None
    _host: TransportHost | None
    _loop: asyncio.AbstractEventLoop | None
    _router: zmq.Socket[Any] | None
    _xpub: zmq.Socket[Any] | None
    _sub: zmq.Socket[Any] | None
    _senders: Senders
    _subscribers: Subscribers
    _router_guard: HandshakeGuard | None
    _xpub_guard: HandshakeGuard | None
    _counters: dict[str, int]
    _closed: bool
    _rescheduled: set[Callable[[], None]]  # drains asked for again, pending

    def _drop(self, reason: str, where: str) -> None:
        self._counters[reason] = self._counters.get(reason, 0) + 1
        if self._host is not None:
            self._host.on_transport_drop(reason, where)

    def _routable(self, routing_id: bytes) -> bool:
        """Is ``routing_id`` connected to our ROUTER now? (an empty frame it never reads)"""
        if self._router is None:
            return False
        try:
            self._router.send_multipart([routing_id, b""], _NOBLOCK)
        except zmq.Again:
            return True  # connected; its queue is full
        except zmq.ZMQError as exc:
            return exc.errno != _EHOSTUNREACH
        return True

    def _bind(self, routing_id: bytes, public_key: str | None = None) -> Sender | None:
        sender = self._senders.bind(routing_id, public_key)
        if sender is None:
            text = routing_id.decode("utf-8", "replace")
            self._drop("identity_taken", text if text.isprintable() else hex_id(routing_id))
        return sender

    def read_direct_now(self) -> None:
        """Hand the host what the ROUTER holds now, before news of a broken
        connection: a peer that closes says BYE on its DEALER and then closes
        its ROUTER, and under load our link's DISCONNECTED can come first,
        making a goodbye look like a lost connection."""
        self._drain_router()

    def _drain_router(self) -> None:
        """As :meth:`_drain`, for the ROUTER. A routing id's first body gives the
        descriptor of its connection (which has finished its handshake:
        :mod:`._accepted` stops counting it) and, keyed, its User-Id (the public
        key the connection authenticated with), which the binding then keeps
        (see _senders.py)."""
        sock, host, trusted = self._router, self._host, self.security.trusted
        if sock is None or host is None or sock.closed:
            return
        recv, opt, by_id = sock.recv, sock.getsockopt, self._senders.by_id
        until = _monotonic() + _DRAIN_SECONDS
        try:
            for _ in range(_DRAIN_BUDGET):
                if not opt(_EVENTS) & _POLLIN:  # type: ignore[operator]
                    break
                # A ROUTER's message is the routing id ZeroMQ puts first, then what the
                # peer sent. The body is read as a zmq.Frame: its .more costs less than a
                # getsockopt(RCVMORE), which makes an enum of its option on every call.
                routing_id: bytes = recv(_NOBLOCK)
                frame: zmq.Frame = recv(_NOBLOCK, copy=False)
                if frame.more:
                    while recv(_NOBLOCK, copy=False).more:
                        pass
                    self._drop("malformed", "router: wrong number of frames")
                    continue
                sender = by_id.get(routing_id)
                if sender is None:
                    sender = self._first_frame(routing_id, frame, trusted is not None)
                if sender is not None:
                    body = frame.bytes if len(frame) < LARGE_FRAME else _large_body(frame)
                    if trusted is None:
                        host.on_direct_frame(sender[0], body)
                    elif sender[1] in trusted.keys:
                        host.on_direct_frame(sender[0], body, sender[1])
                    else:
                        self._drop("untrusted_key", str(sender[1]))  # admitted, then distrusted
                if _monotonic() > until:
                    self._reschedule(self._drain_router)
                    break
            else:
                self._reschedule(self._drain_router)
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            self._drop("recv_failed", exc.strerror)
        finally:
            host.on_drained()

    def _first_frame(self, routing_id: bytes, frame: zmq.Frame, keyed: bool) -> Sender | None:
        """The sender of a routing id's first frame (None: dropped)."""
        if self._router_guard is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._router_guard.handshaken(int(frame.get(_SRCFD)))
        if not keyed:
            return self._bind(routing_id)
        try:
            return self._bind(routing_id, str(frame.get("User-Id")))
        except zmq.ZMQError:  # not through our ZAP handler: cannot happen on a CURVE server
            return None

    def _drain_sub(self) -> None:
        self._drain(self._sub, self._publication, self._drain_sub)

    def _publication(self, frame: Received) -> None:
        self._host.on_pub_frame(frame)  # type: ignore[union-attr]

    def _drain(self, sock: zmq.Socket[Any] | None, handle: Callable[[Received], None], again: Callable[[], None]) -> None:
        """Read a SUB's publications until it is empty (ZMQ_FD is edge-triggered), in
        bounded batches; ``handle`` gets each one's frame.

        Asking ZMQ_EVENTS before each read is cheaper than the EAGAIN
        exception a last read would raise, and it re-arms the edge. A
        publication is two frames, b"M" and the frame, read as zmq.Frames for
        their .more (see _drain_router).
        """
        host = self._host
        if sock is None or host is None or sock.closed:
            return
        recv, opt = sock.recv, sock.getsockopt
        # Bounded in frames and in time: a peer whose frames are costly (big,
        # or thousands of items) cannot keep the loop from timers, replies
        # and other peers' input for long. (ZeroMQ reads connections in turn.)
        until = _monotonic() + _DRAIN_SECONDS
        try:
            for _ in range(_DRAIN_BUDGET):
                if not opt(_EVENTS) & _POLLIN:  # type: ignore[operator]
                    break
                head: zmq.Frame = recv(_NOBLOCK, copy=False)
                frame: zmq.Frame | None = recv(_NOBLOCK, copy=False) if head.more else None
                if frame is None or frame.more or head.bytes != b"M":
                    while frame is not None and frame.more:
                        frame = recv(_NOBLOCK, copy=False)
                    self._drop("malformed", "sub: unexpected frames")
                else:
                    handle(frame.bytes if len(frame) < LARGE_FRAME else _large_body(frame))
                if _monotonic() > until:
                    self._reschedule(again)
                    break
            else:
                self._reschedule(again)
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            self._drop("recv_failed", exc.strerror)
        finally:
            host.on_drained()

    def _drain_xpub(self) -> None:
        sock, host = self._xpub, self._host
        if sock is None or host is None or sock.closed:
            return
        keyed = self.public_key is not None
        for _ in range(_DRAIN_BUDGET):
            try:
                frame = sock.recv(_NOBLOCK, copy=False)
            except zmq.Again:
                return
            except zmq.ZMQError as exc:
                self._drop("recv_failed", exc.strerror)
                return
            if self._xpub_guard is not None:  # a subscription: the handshake is over (see _accepted.py)
                with contextlib.suppress(zmq.ZMQError):
                    self._xpub_guard.handshaken(int(frame.get(_SRCFD)))
            data: bytes = frame.bytes
            public_key = None
            if keyed and data[:1] == b"\x01":
                public_key = self._subscriber_trusted(frame)
                if public_key is None:
                    continue
            if data[:2] == b"\x01J":
                host.on_subscriber_ready(data[2:].decode("utf-8", "replace"), public_key)
        self._reschedule(self._drain_xpub)

    def _subscriber_trusted(self, frame: zmq.Frame) -> str | None:
        """The public key of a subscriber's connection (noted, by descriptor),
        or None: one whose key was distrusted since ZAP admitted it is cut now
        (a race with :meth:`trust_changed`)."""
        try:
            public_key = str(frame.get("User-Id"))
            self._subscribers.seen(int(frame.get(_SRCFD)), public_key)
        except zmq.ZMQError:
            return None
        trusted = self.security.trusted
        if trusted is not None and public_key not in trusted.keys:
            self._subscribers.cut(public_key)
            self._drop("untrusted_key", public_key)
            return None
        return public_key

    def _reschedule(self, drain: Callable[[], None]) -> None:
        """Drain again soon. One pending call per socket: the socket's own
        wake-up may run a drain meanwhile, and each drain that stops at its
        budget asks again, so without this the calls would pile up."""
        if self._loop is not None and not self._closed and drain not in self._rescheduled:
            self._rescheduled.add(drain)
            self._loop.call_soon(self._drain_again, drain)

    def _drain_again(self, drain: Callable[[], None]) -> None:
        self._rescheduled.discard(drain)
        drain()

