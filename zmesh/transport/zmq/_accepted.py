"""The TCP connections our listening sockets accepted (internal): a short
handshake timeout, a cap per source address on connections that may still
be in their handshake, and shutting down a connection libzmq owns.

A TCP connection costs a file descriptor before it says anything, and a
keyed node cannot tell a stranger from a peer until the CURVE handshake.
Without limits, idle connections from anyone exhaust the process's
descriptors (no trusted node can join, and libzmq's I/O thread spins on a
listener it cannot accept from). Three things bound that:

* the soft ``RLIMIT_NOFILE`` is raised toward the hard limit when the
  process's first node starts (:func:`._sockets.raise_fd_limit`);
* the ROUTER and XPUB drop a connection that has not finished its handshake
  within :data:`HANDSHAKE_IVL` (``ZMQ_HANDSHAKE_IVL``; libzmq's default is
  30 s);
* :class:`HandshakeGuard`, a monitor on each of them, counts per source
  address the connections accepted less than ``HANDSHAKE_IVL`` ago that have
  neither closed nor sent a message (the transport says when one has, by the
  message's ``ZMQ_SRCFD``): those may still be in their handshake. (libzmq
  reports a server's finished handshake without saying which connection's,
  so one that finished and says nothing counts until its window ends.) Past
  :data:`MAX_HANDSHAKING` such connections from one address, each new one
  is shut down at once and counted (``dropped["too_many_handshakes"]``,
  logged once per address).
  A counted connection is never cut, only one past the cap: a flood from an
  address holds back new connections from that address only, until
  ``HANDSHAKE_IVL`` after the flood stops. (The node reads the monitor on
  its loop, so a connection past the cap may have finished its handshake
  before it is cut; its client dials again.)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import OrderedDict
from typing import Any, Callable

import zmq

from . import _sockets as zs

__all__ = ["HANDSHAKE_IVL", "MAX_HANDSHAKING", "HandshakeGuard", "connection_ends", "shutdown_connection"]

#: Seconds a connection to our ROUTER or XPUB has to finish its ZMTP (and CURVE) handshake.
#: A CURVE handshake is two round trips, four Curve25519 operations and a ZAP
#: answer from a Python thread: milliseconds, and about a second for the last of
#: 200 at once on a loaded 2-core machine (docs/security.md). 5 s leaves room for
#: that, and a client whose handshake is cut reconnects by itself.
HANDSHAKE_IVL = 5.0
#: Connections from one address, per listening socket, that may still be in their
#: handshake. 100 nodes of one host joining at once open 100 to each socket;
#: one address then holds at most 512 descriptors, half the common default limit
#: of 1,024 where that cannot be raised.
MAX_HANDSHAKING = 256

_ACCEPTED = int(zmq.EVENT_ACCEPTED)
_DISCONNECTED = int(zmq.EVENT_DISCONNECTED)
_EVENT_BUDGET = 1024  # monitor events read per call, at most ...
_EVENT_SECONDS = 0.01  # ... and for this long: then the loop runs other callbacks
_DROP_REASON = "too_many_handshakes"


class HandshakeGuard:
    """A monitor on one listening socket (set up before it binds): at most
    ``limit`` connections per source address accepted within ``window``
    seconds, still open and silent (:meth:`handshaken` was not called for
    them); a newer one is shut down, and ``drop("too_many_handshakes",
    address)`` called."""

    __slots__ = ("_sock", "_pair", "_drop", "_limit", "_window", "_clock", "_port", "_open", "_per_address",
                 "_loop", "_remove_reader", "_again")

    def __init__(
        self,
        ctx: zmq.Context[Any],
        sock: zmq.Socket[Any],
        drop: Callable[[str, str], None],
        limit: int = MAX_HANDSHAKING,
        window: float = HANDSHAKE_IVL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sock = sock
        self._drop = drop
        self._limit, self._window, self._clock = limit, window, clock
        self._port: int | None = None
        # descriptor -> (accepted at, its address, our end, its end), oldest first
        self._open: OrderedDict[int, tuple[float, str, Any, Any]] = OrderedDict()
        self._per_address: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._remove_reader: Callable[[int], object] | None = None
        self._again = False
        address = f"inproc://zmesh-accepts-{zs.next_id()}"
        sock.monitor(address, _ACCEPTED | _DISCONNECTED)
        pair = zs.open_socket(ctx, zmq.PAIR)
        pair.setsockopt(zmq.LINGER, 0)
        pair.connect(address)
        self._pair: zmq.Socket[Any] | None = pair

    def listening(
        self,
        port: int,
        loop: asyncio.AbstractEventLoop,
        add_reader: Callable[[int, Callable[[], None]], None],
        remove_reader: Callable[[int], object],
    ) -> None:
        """The socket is bound at ``port``: read its events on ``loop`` from now on."""
        self._port, self._loop, self._remove_reader = port, loop, remove_reader
        if self._pair is not None:
            add_reader(zs.fd_of(self._pair), self.read)
            loop.call_soon(self.read)

    def handshaken(self, fd: int) -> None:
        """A message came over the connection on ``fd``: it finished its handshake,
        and counts no more."""
        self.read()  # its ACCEPTED came first: it is counted now, if it ever was
        self._forget(fd)

    def handshaking(self, address: str) -> int:
        """How many connections from ``address`` count as in their handshake now."""
        self._expire(self._clock())
        return self._per_address.get(address, 0)

    def read(self) -> None:
        pair = self._pair
        if pair is None or pair.closed:
            return
        until = time.monotonic() + _EVENT_SECONDS
        try:
            for _ in range(_EVENT_BUDGET):
                if not pair.getsockopt(zs.EVENTS) & zs.POLLIN:  # type: ignore[operator]
                    return
                head = pair.recv_multipart(zs.NOBLOCK)[0]
                event, fd = int.from_bytes(head[:2], "little"), int.from_bytes(head[2:6], "little")
                if event == _ACCEPTED:
                    self._accepted(fd)
                elif event == _DISCONNECTED:
                    self._forget(fd)
                if time.monotonic() > until:
                    break
        except zmq.ZMQError:
            return
        if self._loop is not None and not self._again:  # one pending call at most
            self._again = True
            self._loop.call_soon(self._read_again)

    def _read_again(self) -> None:
        self._again = False
        self.read()

    def _accepted(self, fd: int) -> None:
        now = self._clock()
        self._expire(now)
        self._forget(fd)  # a descriptor reused before its DISCONNECTED was read
        ends = connection_ends(fd)
        if ends is None:
            return  # closed already
        ours, theirs = ends
        if not isinstance(ours, tuple) or ours[1] != self._port or not isinstance(theirs, tuple):
            return  # closed, and the number reused by a connection of another socket
        address = str(theirs[0])
        count = self._per_address.get(address, 0)
        if count >= self._limit:
            if shutdown_connection(fd, ours, theirs):
                self._drop(_DROP_REASON, address)
            return
        self._per_address[address] = count + 1
        self._open[fd] = (now, address, ours, theirs)

    def _forget(self, fd: int) -> None:
        known = self._open.pop(fd, None)
        if known is not None:
            self._uncount(known[1])

    def _uncount(self, address: str) -> None:
        left = self._per_address[address] - 1
        if left:
            self._per_address[address] = left
        else:
            del self._per_address[address]

    def _expire(self, now: float) -> None:
        """Forget connections older than the window: libzmq has closed them
        unless their handshake finished."""
        until = now - self._window
        while self._open:
            fd, (accepted, address, _, _) = next(iter(self._open.items()))
            if accepted > until:
                return
            del self._open[fd]
            self._uncount(address)

    def close(self) -> None:
        """Stop watching (call before the socket closes)."""
        pair, self._pair = self._pair, None
        if pair is None:
            return
        with contextlib.suppress(zmq.ZMQError):
            self._sock.disable_monitor()
        if self._remove_reader is not None and not pair.closed:
            with contextlib.suppress(Exception):
                self._remove_reader(zs.fd_of(pair))
        zs.close_socket(pair)
        self._open.clear()
        self._per_address.clear()


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
