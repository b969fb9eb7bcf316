"""ZeroMQ transport: ROUTER + XPUB bound per node, a DEALER per peer, one SUB.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator, Sequence

import zmq

from ..errors import AddressInUse, TransportError
from ._reader_thread import ThreadReaders
from .base import Transport, TransportCapabilities, TransportHost, endpoint_host

__all__ = ["POLLER_ENV_VAR", "ZmqTransport", "open_sockets", "map_zmq_errors"]

POLLER_ENV_VAR = "ZMESH_ZMQ_POLLER"
"""Environment variable read when ``ZmqTransport(poller=None)``: auto, loop or thread."""
_POLLERS = ("auto", "loop", "thread")

log = logging.getLogger("zmesh")

_lock = threading.Lock()
_context: zmq.Context[Any] | None = None
_context_users = 0
_open_sockets = 0

# Plain ints: pyzmq's flag enums cost microseconds per operation on the hot path.
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)
_POLLIN = int(zmq.POLLIN)
_EVENTS = int(zmq.EVENTS)
_RCVMORE = int(zmq.RCVMORE)
_monotonic = time.monotonic

_ENDPOINT = re.compile(r"^tcp://[A-Za-z0-9.\-]+:[0-9]{1,5}$")

_DRAIN_BUDGET = 1024  # frames read per drain, at most ...
_DRAIN_SECONDS = 0.01  # ... and for this long: then the loop runs timers and other callbacks
_BACKLOG_LIMIT = 100_000
_RETRY_DELAY = 0.002
_BYE_LINGER_MS = 200
_MAX_KEYS = 4096  # routing ids remembered as keys

_DISCONNECTED = int(zmq.EVENT_DISCONNECTED)
_HANDSHAKE_SUCCEEDED = int(zmq.EVENT_HANDSHAKE_SUCCEEDED)
_LINK_EVENTS = _DISCONNECTED | _HANDSHAKE_SUCCEEDED
_monitors = 0  # names each link monitor's inproc address uniquely


def open_sockets() -> int:
    """How many sockets zmesh has open in this process (tests assert 0 after each)."""
    return _open_sockets


@contextlib.contextmanager
def map_zmq_errors(what: str) -> Iterator[None]:
    """Translate ZeroMQ errors into TransportError at the boundary."""
    try:
        yield
    except zmq.ZMQError as exc:
        raise TransportError(f"{what}: {exc.strerror} (errno {exc.errno})") from None


def _acquire_context() -> zmq.Context[Any]:
    global _context, _context_users
    with _lock:
        if _context is None or _context.closed:
            _context = zmq.Context()
        _context_users += 1
        return _context


def _release_context() -> None:
    global _context, _context_users
    with _lock:
        _context_users -= 1
        if _context_users == 0 and _context is not None:
            ctx, _context = _context, None
            ctx.destroy(linger=_BYE_LINGER_MS)  # bounded: a leaked socket cannot hang close()


def _socket(ctx: zmq.Context[Any], kind: int) -> zmq.Socket[Any]:
    global _open_sockets
    sock: zmq.Socket[Any] = ctx.socket(kind)
    with _lock:
        _open_sockets += 1
    return sock


def _close(sock: zmq.Socket[Any], linger: int = 0) -> None:
    global _open_sockets
    if sock.closed:
        return
    sock.close(linger=linger)
    with _lock:
        _open_sockets -= 1


def _fd(sock: zmq.Socket[Any]) -> int:
    return int(sock.getsockopt(zmq.FD))


class _ZmqLink:
    """A DEALER connected to one peer's ROUTER; non-blocking, with a backlog.

    With link heartbeats on, the DEALER runs ZMTP heartbeats (answered by
    libzmq's I/O threads, event loop or not) and a socket monitor reports
    the connection breaking: a killed peer at once, a frozen one or a cut
    link after the heartbeat timeout. The host hears of it once per lost
    connection (``on_link_down``). A link closed after its connection broke
    does not linger: what it still holds (a BYE) cannot leave, and lingering
    would hold up the release of the ZeroMQ context.
    """

    __slots__ = ("_transport", "_sock", "_backlog", "_retry", "endpoint", "_monitor", "_up")

    def __init__(self, transport: ZmqTransport, endpoint: str) -> None:
        self._transport = transport
        self.endpoint = endpoint
        self._backlog: deque[bytes] = deque()
        self._retry: asyncio.TimerHandle | None = None
        self._monitor: zmq.Socket[Any] | None = None
        self._up: bool | None = None  # None: never connected; False: connected, then broke
        sock = _socket(transport._ctx, zmq.DEALER)
        try:
            # The node key and a random part: the peer's ROUTER hands an id
            # over to a new connection (a reconnect), so nobody else may know it.
            sock.setsockopt(zmq.ROUTING_ID, f"{transport._key}|{os.urandom(8).hex()}".encode())
            sock.setsockopt(zmq.SNDHWM, transport.hwm)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
            beats = transport.link_heartbeat
            if beats is not None:
                interval, timeout = beats
                sock.setsockopt(zmq.HEARTBEAT_IVL, int(interval * 1000))
                sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(timeout * 1000))
                sock.setsockopt(zmq.HEARTBEAT_TTL, int(timeout * 1000))
                self._watch(sock)
            sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self._close_monitor()
            _close(sock)
            transport._drop("bad_endpoint", f"{endpoint}: {exc.strerror}")
            sock = None  # type: ignore[assignment]
        self._sock = sock

    def _watch(self, sock: zmq.Socket[Any]) -> None:
        global _monitors
        with _lock:
            _monitors += 1
            address = f"inproc://zmesh-link-monitor-{_monitors}"
        sock.monitor(address, _LINK_EVENTS)
        monitor = _socket(self._transport._ctx, zmq.PAIR)
        monitor.setsockopt(zmq.LINGER, 0)
        monitor.connect(address)
        self._monitor = monitor
        transport = self._transport
        if transport._loop is not None and transport._add_reader is not None:
            transport._add_reader(_fd(monitor), self._on_monitor)
            transport._loop.call_soon(self._on_monitor)

    def _on_monitor(self) -> None:
        self._read_monitor(notify=True)

    def _read_monitor(self, notify: bool) -> None:
        monitor = self._monitor
        if monitor is None or monitor.closed:
            return
        try:
            while monitor.getsockopt(_EVENTS) & _POLLIN:  # type: ignore[operator]
                parts = monitor.recv_multipart(_NOBLOCK)
                event = int.from_bytes(parts[0][:2], "little")
                if event == _HANDSHAKE_SUCCEEDED:
                    self._up = True
                elif event == _DISCONNECTED and self._up:
                    self._up = False
                    host = self._transport._host
                    if notify and host is not None:
                        host.on_link_down(self)
                        if self._monitor is None:
                            return  # the host closed this link
        except zmq.ZMQError:
            pass

    def _close_monitor(self) -> None:
        monitor, self._monitor = self._monitor, None
        if monitor is None:
            return
        remove_reader = self._transport._remove_reader
        if remove_reader is not None and not monitor.closed:
            with contextlib.suppress(Exception):
                remove_reader(_fd(monitor))
        _close(monitor)

    def send(self, frame: bytes) -> None:
        if self._sock is None:
            return
        if self._backlog:
            self._queue(frame)
            return
        try:
            self._sock.send(frame, _NOBLOCK, copy=len(frame) < 65536)
        except zmq.Again:
            self._queue(frame)
        except zmq.ZMQError as exc:
            self._transport._drop("send_failed", f"{self.endpoint}: {exc.strerror}")

    def _queue(self, frame: bytes) -> None:
        if len(self._backlog) >= _BACKLOG_LIMIT:
            self._backlog.popleft()
            self._transport._drop("send_backlog_full", self.endpoint)
        self._backlog.append(frame)
        if self._retry is None and self._transport._loop is not None:
            self._retry = self._transport._loop.call_later(_RETRY_DELAY, self._flush_backlog)

    def _flush_backlog(self) -> None:
        self._retry = None
        if self._sock is None or self._sock.closed:
            self._backlog.clear()
            return
        while self._backlog:
            try:
                self._sock.send(self._backlog[0], _NOBLOCK)
            except zmq.Again:
                break
            except zmq.ZMQError as exc:
                self._transport._drop("send_failed", f"{self.endpoint}: {exc.strerror}")
            self._backlog.popleft()
        if self._backlog and self._transport._loop is not None:
            self._retry = self._transport._loop.call_later(_RETRY_DELAY, self._flush_backlog)

    def close(self, linger_ms: int = _BYE_LINGER_MS) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._backlog.clear()
        if self._monitor is not None and self._sock is not None:
            self._read_monitor(notify=False)  # events the loop has not read yet
            if self._up is False:
                linger_ms = 0
            with contextlib.suppress(zmq.ZMQError):
                self._sock.disable_monitor()
        self._close_monitor()
        if self._sock is not None:
            _close(self._sock, linger_ms)
            self._sock = None  # type: ignore[assignment]
        self._transport._links.discard(self)


class ZmqTransport(Transport):
    """ZeroMQ over TCP. ``interfaces`` as for Node; default local-only.

    ``poller`` is how the node's loop learns that a socket has input:
    ``"loop"``, the loop's ``add_reader``; ``"thread"``, a thread that polls
    the sockets' descriptors and wakes the loop (for loops without
    ``add_reader``, such as Windows' default); ``"auto"`` (the default), the
    loop's where it has one. None reads ``ZMESH_ZMQ_POLLER``.
    """

    name = "zmq"
    capabilities = TransportCapabilities(level="frame", peers_can_vanish=True, discovery="mdns")

    def __init__(
        self,
        *,
        interfaces: str | Sequence[str] | None = None,
        hwm: int = 100_000,
        port: int = 0,
        pub_port: int = 0,
        poller: str | None = None,
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
        #: "loop" or "thread" once started: how input is waited for.
        self.poller_in_use: str | None = None
        self._threaded: ThreadReaders | None = None
        self._add_reader: Callable[[int, Callable[[], None]], None] | None = None
        self._remove_reader: Callable[[int], object] | None = None
        #: (interval, timeout) in seconds of ZMTP heartbeats on links; None: off.
        self.link_heartbeat: tuple[float, float] | None = None
        self.addresses: tuple[str, ...] = ()
        self.scope: Any = None
        self._ctx: zmq.Context[Any] = None  # type: ignore[assignment]
        self._host: TransportHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._key = ""
        self._router: zmq.Socket[Any] | None = None
        self._xpub: zmq.Socket[Any] | None = None
        self._sub: zmq.Socket[Any] | None = None
        self._links: set[_ZmqLink] = set()
        self._subscribed: set[str] = set()
        self._counters: dict[str, int] = {}
        self._keys: dict[bytes, str] = {}  # routing id -> key, for the printable ones
        self._rescheduled: set[Callable[[], None]] = set()  # drains asked for again, pending
        self._closed = False

    # -- set-up ----------------------------------------------------------

    async def start(
        self, host: TransportHost, key: str, mesh: str, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._host, self._key, self._loop = host, key, loop
        self.link_heartbeat = getattr(host, "link_heartbeat", None)
        self.addresses = self._resolve_addresses()
        self._ctx = _acquire_context()
        max_frame = int(getattr(host, "max_frame", 0)) or -1
        try:
            with map_zmq_errors("cannot set up the ZeroMQ sockets"):
                self._router = _socket(self._ctx, zmq.ROUTER)
                self._router.setsockopt(zmq.LINGER, 0)
                self._router.setsockopt(zmq.RCVHWM, self.hwm)
                self._router.setsockopt(zmq.MAXMSGSIZE, max_frame)
                self._router.setsockopt(zmq.ROUTER_HANDOVER, 1)
                port = self._bind_all(self._router, self.port)
                self.router_endpoint = f"tcp://{self.addresses[0]}:{port}"

                self._xpub = _socket(self._ctx, zmq.XPUB)
                self._xpub.setsockopt(zmq.LINGER, 0)
                self._xpub.setsockopt(zmq.SNDHWM, self.hwm)
                self._xpub.setsockopt(zmq.XPUB_VERBOSE, 1)
                port = self._bind_all(self._xpub, self.pub_port)
                self.pub_endpoint = f"tcp://{self.addresses[0]}:{port}"

                self._sub = _socket(self._ctx, zmq.SUB)
                self._sub.setsockopt(zmq.LINGER, 0)
                self._sub.setsockopt(zmq.RCVHWM, self.hwm)
                self._sub.setsockopt(zmq.MAXMSGSIZE, max_frame)
                self._sub.setsockopt(zmq.SUBSCRIBE, b"M")
                self._sub.setsockopt(zmq.SUBSCRIBE, b"J" + key.encode())
            add_reader = self._choose_poller(loop, _fd(self._router))
        except TransportError:
            self._close_sockets()
            _release_context()
            raise
        for sock, drain in (
            (self._router, self._drain_router),
            (self._sub, self._drain_sub),
            (self._xpub, self._drain_xpub),
        ):
            add_reader(_fd(sock), drain)
            loop.call_soon(drain)

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

    @property
    def router_endpoints(self) -> tuple[str, ...]:
        port = self.router_endpoint.rsplit(":", 1)[1]
        return tuple(f"tcp://{address}:{port}" for address in self.addresses)

    @property
    def pub_endpoints(self) -> tuple[str, ...]:
        port = self.pub_endpoint.rsplit(":", 1)[1]
        return tuple(f"tcp://{address}:{port}" for address in self.addresses)

    def choose(self, endpoints: tuple[str, ...]) -> str | None:
        """The peer endpoint to dial from our interface scope, or None.

        An address on a network we share comes first. A local-only node never
        leaves the host; a LAN node never dials 127.x unless its own scope
        includes loopback. Failing a shared network, a LAN node may still try
        a non-loopback address (a routed network).
        """
        if not endpoints:
            return None
        if self.scope is None:
            return endpoints[0]
        from ..interfaces import rank_reachable

        hosts: dict[str, str] = {}
        for endpoint in endpoints:
            hosts.setdefault(endpoint_host(endpoint), endpoint)
        ranked = rank_reachable(list(hosts), self.scope)
        if ranked:
            return hosts[ranked[0]]
        if self.scope.is_local:
            return None
        return next((e for h, e in hosts.items() if not h.startswith("127.")), None)

    def _resolve_addresses(self) -> tuple[str, ...]:
        try:
            from ..interfaces import resolve_interfaces
        except ImportError:  # pragma: no cover - interfaces module missing
            return ("127.0.0.1",)
        try:
            self.scope = resolve_interfaces(self.interfaces)
        except ValueError as exc:
            raise TransportError(f"bad interfaces setting: {exc}") from None
        if self.scope.mode == "lan" and not self.scope.addresses:
            raise TransportError("interfaces='lan' but this host has no up, non-loopback IPv4 interface")
        if not self.scope.is_local:
            log.warning(
                "zmesh: LAN mode on %s without authentication: any host on these networks "
                "can reach this node's agents",
                ", ".join(self.scope.addresses),
            )
        return tuple(self.scope.addresses)

    def _bind_all(self, sock: zmq.Socket[Any], port: int = 0) -> int:
        address = self.addresses[0]
        try:
            if port:
                sock.bind(f"tcp://{address}:{port}")
            else:
                port = sock.bind_to_random_port(f"tcp://{address}")
            for address in self.addresses[1:]:
                sock.bind(f"tcp://{address}:{port}")
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EADDRINUSE:
                raise AddressInUse(
                    f"port {port} on {address} is already in use (another node or program holds it): "
                    "stop it, or choose another port"
                ) from None
            raise
        return port

    # -- links and subscriptions -------------------------------------------

    def check_endpoint(self, endpoint: str) -> None:
        if not isinstance(endpoint, str) or not _ENDPOINT.match(endpoint):
            raise TransportError(
                f"bad endpoint {endpoint!r}: expected tcp://HOST:PORT, e.g. tcp://127.0.0.1:5555"
            )
        port = int(endpoint.rsplit(":", 1)[1])
        if not 0 < port < 65536:
            raise TransportError(f"bad endpoint {endpoint!r}: port {port} is out of range")

    def open_link(self, router_endpoint: str) -> _ZmqLink:
        link = _ZmqLink(self, router_endpoint)
        self._links.add(link)
        return link

    def subscribe(self, pub_endpoint: str) -> None:
        if self._sub is None or pub_endpoint in self._subscribed:
            return
        try:
            self._sub.connect(pub_endpoint)
        except zmq.ZMQError as exc:
            self._drop("bad_endpoint", f"{pub_endpoint}: {exc.strerror}")
            return
        self._subscribed.add(pub_endpoint)

    def unsubscribe(self, pub_endpoint: str) -> None:
        if self._sub is None or pub_endpoint not in self._subscribed:
            return
        self._subscribed.discard(pub_endpoint)
        with contextlib.suppress(zmq.ZMQError):
            self._sub.disconnect(pub_endpoint)

    def announce(self) -> None:
        # libzmq's SUB forwards every SUBSCRIBE, repeats included, and the XPUB
        # is verbose: each publisher's XPUB sees b"\x01J" + our key again.
        if self._sub is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._sub.setsockopt(zmq.SUBSCRIBE, b"J" + self._key.encode())

    def publish(self, frame: bytes) -> None:
        xpub = self._xpub
        if xpub is None:
            return
        try:
            xpub.send(b"M", _NOBLOCK | _SNDMORE)
            xpub.send(frame, _NOBLOCK, copy=len(frame) < 65536)
        except zmq.ZMQError as exc:
            self._drop("publish_failed", exc.strerror)
        # Sending may have consumed the edge that announces new subscriptions.
        if xpub.getsockopt(_EVENTS) & _POLLIN and self._loop is not None:  # type: ignore[operator]
            self._loop.call_soon(self._drain_xpub)

    # -- receiving -------------------------------------------------------

    def _drop(self, reason: str, where: str) -> None:
        self._counters[reason] = self._counters.get(reason, 0) + 1
        if self._host is not None:
            self._host.on_transport_drop(reason, where)

    def _drain_router(self) -> None:
        self._drain(self._router, self._router_parts, self._drain_router)

    def _drain_sub(self) -> None:
        self._drain(self._sub, self._sub_parts, self._drain_sub)

    def _routing_key(self, routing_id: bytes) -> str:
        """A routing id on our ROUTER as the engine's key. A node's DEALER
        sets its key, printable text (remembered: one lookup per frame after
        the first); anything else (a stranger's socket, libzmq's generated
        ``\\x00`` + 4 bytes) becomes hex, so it reads in a log line."""
        try:
            key = routing_id.decode()
        except UnicodeDecodeError:
            return "0x" + routing_id.hex()
        if not key.isprintable():
            return "0x" + routing_id.hex()
        if len(self._keys) < _MAX_KEYS:
            self._keys[routing_id] = key
        return key

    def _router_parts(self, parts: list[bytes]) -> None:
        if len(parts) != 2:
            self._drop("malformed", "router: wrong number of frames")
        else:
            key = self._keys.get(parts[0]) or self._routing_key(parts[0])
            self._host.on_direct_frame(key, parts[1])  # type: ignore[union-attr]

    def _sub_parts(self, parts: list[bytes]) -> None:
        if len(parts) != 2 or parts[0] != b"M":
            self._drop("malformed", "sub: unexpected frames")
        else:
            self._host.on_pub_frame(parts[1])  # type: ignore[union-attr]

    def _drain(
        self, sock: zmq.Socket[Any] | None, handle: Callable[[list[bytes]], None], again: Callable[[], None]
    ) -> None:
        """Read until the socket is empty (ZMQ_FD is edge-triggered), in bounded batches.

        Asking ZMQ_EVENTS before each read is cheaper than the EAGAIN
        exception a last read would raise, and it re-arms the edge.
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
                parts = [recv(_NOBLOCK)]
                while opt(_RCVMORE):
                    parts.append(recv(_NOBLOCK))
                handle(parts)
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
        for _ in range(_DRAIN_BUDGET):
            try:
                data: bytes = sock.recv(_NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError as exc:
                self._drop("recv_failed", exc.strerror)
                return
            if data[:2] == b"\x01J":
                host.on_subscriber_ready(data[2:].decode("utf-8", "replace"))
        self._reschedule(self._drain_xpub)

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

    # -- teardown --------------------------------------------------------

    def _close_sockets(self) -> None:
        for link in list(self._links):
            link.close()
        for sock in (self._router, self._xpub, self._sub):
            if sock is not None:
                _close(sock)
        self._router = self._xpub = self._sub = None

    async def close(self) -> None:
        if self._closed or self._loop is None:
            return
        self._closed = True
        for sock in (self._router, self._xpub, self._sub):
            if sock is not None and not sock.closed and self._remove_reader is not None:
                with contextlib.suppress(Exception):
                    self._remove_reader(_fd(sock))
        if self._threaded is not None:  # before the sockets close: it must not poll their descriptors
            self._threaded.close()
        self._close_sockets()
        _release_context()

    def stats(self) -> dict[str, int]:
        return dict(self._counters)
