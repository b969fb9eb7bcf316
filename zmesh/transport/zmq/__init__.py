"""ZeroMQ transport: ROUTER + XPUB bound per node, a DEALER per peer, SUB.

Sockets are plain (non-asyncio) pyzmq sockets owned by the node's event loop:
sends are non-blocking with no Future per message, and receives are drained
in batches from ``loop.add_reader`` on ZMQ_FD. ZMQ_FD is edge-triggered, so
every drain reads until EAGAIN and every send on a socket we also read from
(the XPUB) re-checks ZMQ_EVENTS. A loop without ``add_reader`` (Windows'
Proactor loop) gets the same callbacks from a thread that polls the
descriptors (:mod:`._reader_thread`); ``poller="thread"`` or
``ZMESH_ZMQ_POLLER=thread`` chooses that thread on any loop.

The publisher side is an XPUB so the node learns when a peer's SUB is really
attached: each SUB subscribes to ``b"J" + its node key`` besides ``b"M"``, and
that subscription reaching our XPUB is the "subscriber ready" signal. Without
it a broadcast right after a join would be lost to ZeroMQ's slow-joiner gap.

Who sent a direct frame is decided here (:mod:`._senders`): routing ids
carry a per-link tag no other node can guess, and a connection claiming a
key another live connection holds is dropped.

Keyed mode (``security`` with a key; see docs/security.md): ROUTER and XPUB
are CurveZMQ servers that admit only trusted public keys (:mod:`._curve`);
every DEALER is a CURVE client of the peer's key, which its endpoint carries
(``tcp://host:port#KEY``). There is one SUB per publisher, so each broadcast
frame is known to come from the key that SUB authenticated; direct frames
carry their connection's key as ZMQ User-Id. The host gets that key with
every frame.

Connections that have not finished their handshake are bounded
(:mod:`._accepted`): a stranger cannot hold this process's descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any, Callable, Sequence

import zmq

from ...errors import TransportError, ZmeshError
from ...security import Security
from ..base import Transport, TransportCapabilities, TransportHost, endpoint_address
from . import _sockets as zs
from ._accepted import HANDSHAKE_IVL, HandshakeGuard
from ._allocator import LARGE_FRAME, large_frame
from ._addresses import bind_all, check_endpoint, choose, resolve_scope
from ._curve import Subscribers, ZapDomain, curve_server, zap_register, zap_unregister
from ._link import KeyedSubscription, LinkPlumbing, ZmqLink, link_tag
from ._reader_thread import ThreadReaders
from ._receive import Receiving
from ._senders import Senders
from ._sockets import map_zmq_errors, open_sockets

__all__ = ["POLLER_ENV_VAR", "ZmqTransport", "open_sockets", "map_zmq_errors"]

POLLER_ENV_VAR = "ZMESH_ZMQ_POLLER"
"""Environment variable read when ``ZmqTransport(poller=None)``: auto, loop or thread."""
_POLLERS = ("auto", "loop", "thread")

log = logging.getLogger("zmesh")

_NOBLOCK, _SNDMORE, _POLLIN, _EVENTS = zs.NOBLOCK, zs.SNDMORE, zs.POLLIN, zs.EVENTS



class ZmqTransport(Receiving, Transport):
    """ZeroMQ over TCP. ``interfaces`` as for Node; default local-only.

    ``poller`` is how the node's loop learns that a socket has input:
    ``"loop"``, the loop's ``add_reader``; ``"thread"``, a thread that polls
    the sockets' descriptors and wakes the loop (for loops without
    ``add_reader``, such as Windows' default); ``"auto"`` (the default), the
    loop's where it has one. None reads ``ZMESH_ZMQ_POLLER``.
    ``security``: keys and trust (:func:`zmesh.security.resolve_security`);
    None: keyless.
    """

    name = "zmq"
    capabilities = TransportCapabilities(level="frame", peers_can_vanish=True, discovery="mdns", keys=True)

    def __init__(
        self,
        *,
        interfaces: str | Sequence[str] | None = None,
        hwm: int = 100_000,
        port: int = 0,
        pub_port: int = 0,
        poller: str | None = None,
        security: Security | None = None,
    ) -> None:
        self.interfaces = interfaces
        self.hwm = hwm
        #: Fixed ports for the ROUTER (the endpoint seeds name) and the XPUB; 0: any free one.
        self.port = port
        self.pub_port = pub_port
        if poller is None:
            poller = os.environ.get(POLLER_ENV_VAR, "").strip().lower() or "auto"
            where = f"{POLLER_ENV_VAR}={poller!r}"
        else:
            where = f"poller={poller!r}"
        if poller not in _POLLERS:
            raise TransportError(f"bad {where}: expected one of {', '.join(map(repr, _POLLERS))}")
        self.poller = poller
        self.security = security or Security()
        #: This node's public key (Z85) in keyed mode, else None.
        self.public_key = self.security.key.public if self.security.key is not None else None
        #: "loop" or "thread" once started: how input is waited for.
        self.poller_in_use: str | None = None
        self._threaded: ThreadReaders | None = None
        self._add_reader: Callable[[int, Callable[[], None]], None] | None = None
        self._remove_reader: Callable[[int], object] | None = None
        #: (interval, timeout) in seconds of ZMTP heartbeats on links; None: off.
        self.link_heartbeat: tuple[float, float] | None = None
        self.addresses: tuple[str, ...] = ()
        self.scope: Any = None
        self.max_frame = -1
        self._ctx: zmq.Context[Any] = None  # type: ignore[assignment]
        self._host: TransportHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._key = ""
        self._secret = os.urandom(16)  # keys the routing-id tags of our links
        self._router: zmq.Socket[Any] | None = None
        self._xpub: zmq.Socket[Any] | None = None
        self._sub: zmq.Socket[Any] | None = None  # keyless: one SUB attached to every publisher
        self._keyed_subs: dict[str, KeyedSubscription] = {}  # keyed: a SUB per publisher
        self._links: set[ZmqLink] = set()
        self._plumbing: LinkPlumbing  # made by start(), for the links it opens
        self._subscribed: set[str] = set()
        self._counters: dict[str, int] = {}
        self._senders = Senders(self._routable)
        self._subscribers = Subscribers()
        self._domain: ZapDomain | None = None
        self._router_guard: HandshakeGuard | None = None
        self._xpub_guard: HandshakeGuard | None = None
        self._rescheduled: set[Callable[[], None]] = set()  # drains asked for again, pending
        self._closed = False

    # -- set-up ----------------------------------------------------------

    async def start(
        self, host: TransportHost, key: str, mesh: str, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._host, self._key, self._loop = host, key, loop
        self.link_heartbeat = getattr(host, "link_heartbeat", None)
        self.addresses = self._resolve_addresses()
        self._ctx = zs.acquire_context()
        self.max_frame = int(getattr(host, "max_frame", 0)) or -1
        pair = self.security.key
        try:
            if pair is not None:
                assert self.security.trusted is not None
                self._domain = zap_register(self._ctx, self.security.trusted)  # before anything binds
            with map_zmq_errors("cannot set up the ZeroMQ sockets"):
                self._router = zs.open_socket(self._ctx, zmq.ROUTER)
                self._router.setsockopt(zmq.LINGER, 0)
                self._router.setsockopt(zmq.RCVHWM, self.hwm)
                self._router.setsockopt(zmq.MAXMSGSIZE, self.max_frame)
                self._router.setsockopt(zmq.ROUTER_HANDOVER, 1)  # see _senders.py
                self._router.setsockopt(zmq.ROUTER_MANDATORY, 1)  # _routable's probe
                self._router.setsockopt(zmq.HANDSHAKE_IVL, int(HANDSHAKE_IVL * 1000))  # libzmq's default: 30 s
                self._xpub = zs.open_socket(self._ctx, zmq.XPUB)
                self._xpub.setsockopt(zmq.LINGER, 0)
                self._xpub.setsockopt(zmq.SNDHWM, self.hwm)
                self._xpub.setsockopt(zmq.XPUB_VERBOSE, 1)
                self._xpub.setsockopt(zmq.HANDSHAKE_IVL, int(HANDSHAKE_IVL * 1000))
                self._router_guard = HandshakeGuard(self._ctx, self._router, self._drop)
                self._xpub_guard = HandshakeGuard(self._ctx, self._xpub, self._drop)
                if pair is not None and self._domain is not None:
                    curve_server(self._router, pair, self._domain)
                    curve_server(self._xpub, pair, self._domain)
                suffix = f"#{pair.public}" if pair is not None else ""
                ports = [self._bind_all(self._router, self.port), self._bind_all(self._xpub, self.pub_port)]
                self.router_endpoint = f"tcp://{self.addresses[0]}:{ports[0]}{suffix}"
                self.pub_endpoint = f"tcp://{self.addresses[0]}:{ports[1]}{suffix}"
                if pair is None:
                    self._sub = zs.open_socket(self._ctx, zmq.SUB)
                    self._sub.setsockopt(zmq.LINGER, 0)
                    self._sub.setsockopt(zmq.RCVHWM, self.hwm)
                    self._sub.setsockopt(zmq.MAXMSGSIZE, self.max_frame)
                    self._sub.setsockopt(zmq.SUBSCRIBE, b"M")
                    self._sub.setsockopt(zmq.SUBSCRIBE, b"J" + key.encode())
            add_reader = self._choose_poller(loop, zs.fd_of(self._router))
        except ZmeshError:
            self._close_sockets()
            if self._domain is not None:
                zap_unregister(self._domain)
            zs.release_context()
            raise
        drains: list[tuple[zmq.Socket[Any], Callable[[], None]]] = [
            (self._router, self._drain_router),
            (self._xpub, self._drain_xpub),
        ]
        if self._sub is not None:
            drains.append((self._sub, self._drain_sub))
        for sock, drain in drains:
            add_reader(zs.fd_of(sock), drain)
            loop.call_soon(drain)
        assert self._remove_reader is not None
        for guard, port in zip((self._router_guard, self._xpub_guard), ports):
            assert guard is not None
            guard.listening(port, loop, add_reader, self._remove_reader)
        self._plumbing = LinkPlumbing(
            self._ctx, loop, host, key, self._counters, self._links, add_reader, self._remove_reader,
            self._drop, self._drain, lambda: self._closed,
        )

    def _choose_poller(
        self, loop: asyncio.AbstractEventLoop, router_fd: int
    ) -> Callable[[int, Callable[[], None]], None]:
        """The loop's add_reader where it has one (unless told otherwise), else a reader thread's."""
        if self.poller != "thread":
            try:
                loop.remove_reader(router_fd)  # a no-op probe: Proactor raises NotImplementedError
            except NotImplementedError:
                if self.poller == "loop":
                    raise TransportError(
                        f"{type(loop).__name__} has no add_reader: use poller='thread' "
                        f"(or {POLLER_ENV_VAR}=thread), or leave it on 'auto'"
                    ) from None
            else:
                self.poller_in_use = "loop"
                self._add_reader, self._remove_reader = loop.add_reader, loop.remove_reader
                return loop.add_reader
        self.poller_in_use = "thread"
        self._threaded = ThreadReaders(loop)
        self._add_reader, self._remove_reader = self._threaded.add_reader, self._threaded.remove_reader
        return self._threaded.add_reader

    def _with_port(self, endpoint: str) -> tuple[str, ...]:
        port = endpoint_address(endpoint).rsplit(":", 1)[1]
        suffix = f"#{self.public_key}" if self.public_key is not None else ""
        return tuple(f"tcp://{address}:{port}{suffix}" for address in self.addresses)

    @property
    def router_endpoints(self) -> tuple[str, ...]:
        return self._with_port(self.router_endpoint)

    @property
    def pub_endpoints(self) -> tuple[str, ...]:
        return self._with_port(self.pub_endpoint)

    def choose(self, endpoints: tuple[str, ...]) -> str | None:
        """The peer endpoint to dial from our interface scope, or None (see :func:`._addresses.choose`)."""
        return choose(endpoints, self.scope)

    def _resolve_addresses(self) -> tuple[str, ...]:
        self.scope = resolve_scope(self.interfaces, self.security)
        return tuple(self.scope.addresses)

    def _bind_all(self, sock: zmq.Socket[Any], port: int = 0) -> int:
        return bind_all(sock, self.addresses, port)

    # -- links, subscriptions and trust -------------------------------------

    def check_endpoint(self, endpoint: str) -> None:
        check_endpoint(endpoint, self.public_key is not None)

    def may_dial(self, server_key: str | None) -> bool:
        """May we connect to a server with this public key? (keyless: only keyless servers)"""
        trusted = self.security.trusted
        if trusted is None:
            return server_key is None
        return server_key is not None and server_key in trusted.keys

    def routing_id(self, endpoint: str) -> bytes:
        """Our routing id on the ROUTER at ``endpoint``: our key and a tag for that endpoint."""
        return f"{self._key}|{link_tag(self._secret, endpoint)}".encode()

    def open_link(self, router_endpoint: str) -> ZmqLink:
        link = ZmqLink(self, self._plumbing, router_endpoint)
        self._links.add(link)
        return link

    def subscribe(self, pub_endpoint: str) -> None:
        if self.public_key is not None:
            if pub_endpoint not in self._keyed_subs and not self._closed:
                self._keyed_subs[pub_endpoint] = KeyedSubscription(self, self._plumbing, pub_endpoint)
            return
        if self._sub is None or pub_endpoint in self._subscribed:
            return
        try:
            self._sub.connect(endpoint_address(pub_endpoint))
        except zmq.ZMQError as exc:
            self._drop("bad_endpoint", f"{pub_endpoint}: {exc.strerror}")
            return
        self._subscribed.add(pub_endpoint)

    def unsubscribe(self, pub_endpoint: str) -> None:
        keyed = self._keyed_subs.pop(pub_endpoint, None)
        if keyed is not None:
            keyed.cut()
        if self._sub is None or pub_endpoint not in self._subscribed:
            return
        self._subscribed.discard(pub_endpoint)
        with contextlib.suppress(zmq.ZMQError):
            self._sub.disconnect(endpoint_address(pub_endpoint))

    def announce(self) -> None:
        # libzmq's SUB forwards every SUBSCRIBE, repeats included, and the XPUB
        # is verbose: each publisher's XPUB sees b"\x01J" + our key again.
        if self._sub is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._sub.setsockopt(zmq.SUBSCRIBE, b"J" + self._key.encode())
        for keyed in self._keyed_subs.values():
            keyed.announce()

    def trust_changed(self, admitted: frozenset[str], revoked: frozenset[str]) -> None:
        """Keys now trusted get their links and subscriptions opened; keys no
        longer trusted lose every connection we can cut (see :mod:`._curve`)."""
        conns: list[ZmqLink | KeyedSubscription] = [*self._links, *self._keyed_subs.values()]
        for conn in conns:
            if conn.server_key in revoked:
                conn.cut()
            elif conn.server_key in admitted:
                conn.open()
        for key in revoked:
            self._subscribers.cut(key)

    def publish(self, frame: bytes) -> None:
        xpub = self._xpub
        if xpub is None:
            return
        try:
            xpub.send(b"M", _NOBLOCK | _SNDMORE)
            if len(frame) >= LARGE_FRAME:  # copied, large ones too (see _link.ZmqLink.send)
                large_frame(len(frame))
            xpub.send(frame, _NOBLOCK)
        except zmq.ZMQError as exc:
            self._drop("publish_failed", exc.strerror)
        # Sending may have consumed the edge that announces new subscriptions.
        if xpub.getsockopt(_EVENTS) & _POLLIN and self._loop is not None:  # type: ignore[operator]
            self._loop.call_soon(self._drain_xpub)

    # -- teardown --------------------------------------------------------

    def _close_sockets(self) -> None:
        for guard in (self._router_guard, self._xpub_guard):
            if guard is not None:
                guard.close()
        self._router_guard = self._xpub_guard = None
        for link in list(self._links):
            link.close()
        for keyed in list(self._keyed_subs.values()):
            keyed.cut()
        self._keyed_subs.clear()
        for sock in (self._router, self._xpub, self._sub):
            if sock is not None:
                zs.close_socket(sock)
        self._router = self._xpub = self._sub = None

    async def close(self) -> None:
        if self._closed or self._loop is None:
            return
        self._closed = True
        for sock in (self._router, self._xpub, self._sub):
            if sock is not None and not sock.closed and self._remove_reader is not None:
                with contextlib.suppress(Exception):
                    self._remove_reader(zs.fd_of(sock))
        for keyed in self._keyed_subs.values():
            keyed.cut()  # removes its reader
        if self._threaded is not None:  # before the sockets close: it must not poll their descriptors
            self._threaded.close()
        self._close_sockets()
        if self._domain is not None:
            zap_unregister(self._domain)
        zs.release_context()

    def stats(self) -> dict[str, int]:
        out = dict(self._counters)
        if self._domain is not None:
            out["handshakes_refused"] = self._domain.refused
        return out
