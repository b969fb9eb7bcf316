"""CurveZMQ for the zmq transport (internal): the ZAP handler, socket set-up,
and cutting the connections of a key that is no longer trusted.

**ZAP.** libzmq asks the ZAP handler of a socket's context (a REP socket
bound at ``inproc://zeromq.zap.01``) about every CURVE handshake on a
server socket. Every node of a process shares one context, so there is one
handler per process: a thread, started with the first keyed node and
stopped with the last. Each keyed transport registers a ZAP domain with its
:class:`~zmesh.security.TrustedKeys`; the handler admits a client only if
its public key is in the set of the domain the socket names, and sets the
connection's User-Id to that key (Z85), which every frame received on it
then carries (``frame.get("User-Id")``). A thread rather than the node's
event loop: it serves nodes on any loop, and a handshake does not wait for
a busy loop. Without a handler libzmq would accept every client, so a keyed
transport binds nothing before the handler is up.

**Cutting.** CURVE authenticates once, at the handshake: a connection
admitted before its key was distrusted stays up. Frames from it are dropped
on arrival (every frame's User-Id is checked), and what this node sends it
on its own sockets stops (the engine drops the peer). What it receives by
subscription to this node's XPUB would go on, so the transport remembers
each subscriber connection's descriptor (``ZMQ_SRCFD`` of its subscription)
and, on distrust, shuts that TCP connection down; libzmq then closes it, and
the subscriber's reconnection is refused by ZAP.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import zmq
import zmq.utils.z85

from ...errors import TransportError
from ...security import KeyPair, TrustedKeys, require_curve
from . import _sockets as zs
from ._accepted import connection_ends, shutdown_connection

__all__ = ["ZapDomain", "zap_register", "zap_unregister", "curve_server", "curve_client", "Subscribers"]

log = logging.getLogger("zmesh")

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_MAX_LOGGED_REFUSALS = 64  # per domain: a scan of many keys is not a log flood
_MAX_SUBSCRIBERS = 4096


class ZapDomain:
    """One keyed transport as the ZAP handler sees it."""

    __slots__ = ("name", "trusted", "refused", "_logged")

    def __init__(self, trusted: TrustedKeys) -> None:
        self.name = b"zmesh-%d" % zs.next_id()
        self.trusted = trusted
        self.refused = 0  # handshakes refused (written by the handler thread only)
        self._logged: set[str] = set()

    def admit(self, mechanism: bytes, credentials: list[bytes], address: bytes) -> str | None:
        """The client's public key (Z85) if admitted, else None."""
        if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
            self.refused += 1
            return None
        key = zmq.utils.z85.encode(credentials[0]).decode("ascii")
        if key in self.trusted.keys:
            return key
        self.refused += 1
        if key not in self._logged and len(self._logged) < _MAX_LOGGED_REFUSALS:
            self._logged.add(key)
            log.warning("zmesh: refused a connection from %s: public key %s is not trusted",
                        address.decode("ascii", "replace") or "?", key)
        return None


class _ZapHandler:
    """The process's ZAP handler thread, for one context."""

    def __init__(self, ctx: zmq.Context[Any]) -> None:
        self.ctx = ctx
        self.domains: dict[bytes, ZapDomain] = {}
        self._stop_address = f"inproc://zmesh-zap-stop-{zs.next_id()}"
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="zmesh-zap", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self) -> None:
        try:
            rep = zs.open_socket(self.ctx, zmq.REP)
            stop = zs.open_socket(self.ctx, zmq.PAIR)
            rep.setsockopt(zmq.LINGER, 0)
            stop.setsockopt(zmq.LINGER, 0)
            rep.bind(ZAP_ENDPOINT)
            stop.bind(self._stop_address)
        except zmq.ZMQError as exc:
            self._error = TransportError(f"cannot start the ZAP handler: {exc.strerror}")
            self._ready.set()
            return
        self._ready.set()
        poller = zmq.Poller()
        poller.register(rep, zmq.POLLIN)
        poller.register(stop, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if stop in ready:
                    return
                if rep in ready:
                    rep.send_multipart(self._answer(rep.recv_multipart()))
        except zmq.ZMQError:  # the context is going: nothing left to admit
            return
        finally:
            zs.close_socket(rep)
            zs.close_socket(stop)

    def _answer(self, request: list[bytes]) -> list[bytes]:
        """RFC 27: version, request id, domain, address, identity, mechanism, credentials..."""
        if len(request) < 6:
            return [b"1.0", request[1] if len(request) > 1 else b"", b"500", b"malformed request", b"", b""]
        version, request_id, domain, address, _identity, mechanism = request[:6]
        if version != b"1.0":
            return [b"1.0", request_id, b"500", b"unknown ZAP version", b"", b""]
        zone = self.domains.get(domain)
        key = zone.admit(mechanism, request[6:], address) if zone is not None else None
        if key is None:
            return [version, request_id, b"400", b"not trusted", b"", b""]
        return [version, request_id, b"200", b"OK", key.encode("ascii"), b""]

    def stop(self) -> None:
        poke = zs.open_socket(self.ctx, zmq.PAIR)
        try:
            poke.setsockopt(zmq.LINGER, 0)
            poke.connect(self._stop_address)
            poke.send(b"")
            self._thread.join()
        finally:
            zs.close_socket(poke)


_handler: _ZapHandler | None = None
_handler_lock = threading.Lock()  # not zs.lock: the handler thread opens sockets under that one


def zap_register(ctx: zmq.Context[Any], trusted: TrustedKeys) -> ZapDomain:
    """A ZAP domain admitting ``trusted`` keys; starts the handler if it is not running."""
    global _handler
    require_curve()
    domain = ZapDomain(trusted)
    with _handler_lock:
        if _handler is None or _handler.ctx is not ctx:
            _handler = _ZapHandler(ctx)
        _handler.domains[domain.name] = domain
    return domain


def zap_unregister(domain: ZapDomain) -> None:
    """Forget ``domain``; the last one stops the handler (before the context goes)."""
    global _handler
    with _handler_lock:
        handler = _handler
        if handler is None or handler.domains.pop(domain.name, None) is None or handler.domains:
            return
        _handler = None
        handler.stop()


def curve_server(sock: zmq.Socket[Any], key: KeyPair, domain: ZapDomain) -> None:
    sock.setsockopt(zmq.ZAP_DOMAIN, domain.name)
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, key.secret.encode("ascii"))


def curve_client(sock: zmq.Socket[Any], key: KeyPair, server_key: str) -> None:
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_key.encode("ascii"))
    sock.setsockopt(zmq.CURVE_PUBLICKEY, key.public.encode("ascii"))
    sock.setsockopt(zmq.CURVE_SECRETKEY, key.secret.encode("ascii"))


class Subscribers:
    """The TCP connections subscribed to our XPUB, by public key, so a
    distrusted key's can be shut down."""

    def __init__(self) -> None:
        # descriptor -> (public key, our address, its address): the addresses
        # tell the same connection from a later one that reuses the descriptor.
        self._by_fd: dict[int, tuple[str, Any, Any]] = {}

    def seen(self, fd: int, public_key: str) -> None:
        """A subscription arrived on connection ``fd`` from ``public_key``."""
        known = self._by_fd.get(fd)
        if known is not None and known[0] == public_key:
            return
        ends = connection_ends(fd)
        if ends is None:
            return
        if len(self._by_fd) >= _MAX_SUBSCRIBERS:
            self._by_fd.pop(next(iter(self._by_fd)))
        self._by_fd[fd] = (public_key, *ends)

    def cut(self, public_key: str) -> int:
        """Shut down every connection of ``public_key``; how many were."""
        cut = 0
        for fd, (key, ours, theirs) in list(self._by_fd.items()):
            if key != public_key:
                continue
            del self._by_fd[fd]
            if shutdown_connection(fd, ours, theirs):
                cut += 1
        return cut

