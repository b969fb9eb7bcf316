"""Simulated time and a simulated ZeroMQ transport. Pure Python: no sockets.

:class:`Scheduler` is one event queue ordered by (time, sequence number), so
two events at the same instant run in the order they were scheduled.

:class:`Network` moves frames between :class:`Host` objects (the sim's nodes)
with ZeroMQ's semantics:

* Direct links (DEALER -> ROUTER): a frame sent on a link reaches the owner
  of the link's endpoint after 0.2-2 ms, in order per link (one TCP
  connection), or vanishes if that owner is dead or cut off from the sender.
* Pub/sub (XPUB -> SUB): a subscription is a connection from the subscriber to
  the publisher's endpoint; once it is up, the publisher is told
  (``on_ready``, the ``b"\\x01J" + key`` an XPUB reads) and its publications
  reach the subscriber. A partition breaks such connections; when it heals
  they reconnect and the publisher is told again, as a SUB resends its
  subscriptions on reconnect. A connection to a dead publisher dangles. A
  stall breaks nothing (ZeroMQ's I/O thread keeps the connections up).
* Faults: ``loss`` (probability a frame is dropped), ``dup`` (probability it
  arrives twice), ``reorder`` (extra random delay, no per-link order), a
  two-sided partition (``side``), and ``blocked`` node pairs (a hidden,
  permanent one-way cut used to test the checker itself).

The ready signal is not subject to random loss (it rides on a connection's
handshake); only partitions and deaths stop it.
"""

from __future__ import annotations

import heapq
import random
from typing import Any, Callable, Protocol

__all__ = ["Scheduler", "Network", "SubConn", "Host"]

Event = tuple[float, int, Callable[..., None], tuple[Any, ...]]


class Scheduler:
    """Simulated time: a heap of (time, seq, function, args)."""

    __slots__ = ("now", "heap", "seq", "events")

    def __init__(self) -> None:
        self.now = 0.0
        self.heap: list[Event] = []
        self.seq = 0
        self.events = 0

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, fn, args))

    def run_until(self, stop: Callable[[], bool], limit: float) -> None:
        """Run events in order until ``stop()`` or the next one is past ``limit``."""
        heap = self.heap
        pop = heapq.heappop
        while heap and heap[0][0] <= limit:
            when, _, fn, args = pop(heap)
            self.now = when
            self.events += 1
            fn(*args)
            if stop():
                return


class SubConn:
    """One SUB connection from ``sub`` to the publisher bound at ``endpoint``."""

    __slots__ = ("sub", "endpoint", "pub", "connected", "gen")

    def __init__(self, sub: Host, endpoint: str) -> None:
        self.sub = sub
        self.endpoint = endpoint
        self.pub: Host | None = None
        self.connected = False
        self.gen = 0  # bumped whenever the connection breaks: frames in flight on it are lost


class Host(Protocol):
    """What the network needs of a simulated node (one incarnation)."""

    uid: int
    node_id: str
    key: str
    alive: bool
    subs: dict[str, SubConn]
    subscribers: dict[int, SubConn]

    def on_direct(self, key: str, frame: bytes) -> None: ...

    def on_pub(self, frame: bytes) -> None: ...

    def on_ready(self, key: str) -> None: ...


class Network:
    """Endpoints, links and subscriptions between the live hosts."""

    def __init__(self, sched: Scheduler, rng: random.Random) -> None:
        self.sched = sched
        self.rng = rng
        self.endpoints: dict[str, Host] = {}
        self.hosts: dict[int, Host] = {}  # the live ones, by uid
        self.loss = 0.0
        self.dup = 0.0
        self.reorder = False
        self.side: dict[str, int] | None = None  # node id -> side of the partition
        self.blocked: dict[tuple[str, str], None] = {}  # (from node, to node): direct frames vanish
        self.resubscribe_on_wake = False
        self.frames = 0
        self.bytes = 0
        self.lost = 0
        self._last: dict[tuple[int, int], float] = {}

    # -- topology --------------------------------------------------------

    def register(self, host: Host, router: str, pub: str) -> None:
        self.endpoints[router] = host
        self.endpoints[pub] = host
        self.hosts[host.uid] = host

    def apart(self, a: str, b: str) -> bool:
        side = self.side
        return side is not None and side.get(a, 0) != side.get(b, 0)

    def cut(self, side: dict[str, int] | None) -> None:
        """Partition: connections across the cut break; frames across it vanish."""
        self.side = side
        for host in self.hosts.values():
            for conn in host.subs.values():
                pub = conn.pub
                if conn.connected and pub is not None and self.apart(host.node_id, pub.node_id):
                    self._break(conn)

    def heal(self, side: dict[str, int] | None = None) -> None:
        """The cut is now ``side`` (None: gone): every SUB connection that is down
        redials (one to a dead publisher, or still across a cut, stays down)."""
        self.side = side
        for host in self.hosts.values():
            for conn in host.subs.values():
                if not conn.connected:
                    self._dial(conn)

    def died(self, host: Host) -> None:
        self.hosts.pop(host.uid, None)
        for conn in host.subs.values():
            if conn.connected:
                self._break(conn)
        host.subs.clear()
        for conn in list(host.subscribers.values()):
            self._break(conn)  # dangles: the endpoint never comes back
        host.subscribers.clear()

    def woke(self, host: Host) -> None:
        """A stalled host runs again. Real ZeroMQ keeps its connections through a
        stall (its I/O thread runs on), so nothing is resent; with
        ``resubscribe_on_wake`` the SUB resends its subscriptions as if it had
        reconnected (a model that hides the one-sided-membership bug of a stall)."""
        if self.resubscribe_on_wake:
            self.announce(host)

    # -- direct links ----------------------------------------------------

    def _times(self, channel: tuple[int, int]) -> tuple[float, ...]:
        rng = self.rng
        if self.loss and rng.random() < self.loss:
            self.lost += 1
            return ()
        t = self.sched.now + rng.uniform(0.0002, 0.002)
        if self.reorder:
            t += rng.expovariate(200.0)  # mean 5 ms: frames overtake each other
        else:
            last = self._last.get(channel, 0.0)
            if t < last:
                t = last  # one TCP connection keeps its order
            self._last[channel] = t
        if self.dup and rng.random() < self.dup:
            return (t, t + rng.uniform(0.0, 0.003))
        return (t,)

    def send(self, src: Host, link: int, endpoint: str, frame: bytes) -> None:
        self.frames += 1
        self.bytes += len(frame)
        dst = self.endpoints.get(endpoint)
        if dst is None:
            return
        for t in self._times((src.uid, link)):
            self.sched.at(t, self._deliver_direct, src.node_id, src.key, dst, frame)

    def _deliver_direct(self, src_node: str, src_key: str, dst: Host, frame: bytes) -> None:
        if not dst.alive or self.apart(src_node, dst.node_id):
            return
        if self.blocked and (src_node, dst.node_id) in self.blocked:
            return
        dst.on_direct(src_key, frame)

    # -- pub/sub ---------------------------------------------------------

    def publish(self, src: Host, frame: bytes) -> None:
        self.frames += 1
        self.bytes += len(frame)
        at = self.sched.at
        for conn in src.subscribers.values():
            for t in self._times((src.uid, -1 - conn.sub.uid)):
                at(t, self._deliver_pub, conn, conn.gen, frame)

    def _deliver_pub(self, conn: SubConn, gen: int, frame: bytes) -> None:
        if conn.connected and conn.gen == gen and conn.sub.alive:
            conn.sub.on_pub(frame)

    def subscribe(self, sub: Host, endpoint: str) -> None:
        if endpoint in sub.subs:
            return  # one connection per publisher endpoint, as the transport keeps it
        conn = SubConn(sub, endpoint)
        sub.subs[endpoint] = conn
        self._dial(conn)

    def unsubscribe(self, sub: Host, endpoint: str) -> None:
        conn = sub.subs.pop(endpoint, None)
        if conn is not None:
            self._break(conn)
            conn.gen += 1

    def announce(self, sub: Host) -> None:
        """The SUB repeats its subscription: every attached publisher hears it again."""
        for conn in sub.subs.values():
            if conn.connected:
                self.sched.at(self.sched.now + self.rng.uniform(0.0002, 0.002), self._ready, conn, conn.gen)

    def _ready(self, conn: SubConn, gen: int) -> None:
        pub = conn.pub
        if conn.connected and conn.gen == gen and pub is not None and pub.alive and conn.sub.alive:
            pub.on_ready(conn.sub.key)

    def _dial(self, conn: SubConn) -> None:
        conn.gen += 1
        self.sched.at(self.sched.now + self.rng.uniform(0.001, 0.005), self._attach, conn, conn.gen)

    def _attach(self, conn: SubConn, gen: int) -> None:
        sub = conn.sub
        if conn.gen != gen or conn.connected or not sub.alive or sub.subs.get(conn.endpoint) is not conn:
            return
        pub = self.endpoints.get(conn.endpoint)
        if pub is None or not pub.alive or self.apart(sub.node_id, pub.node_id):
            return  # dangling, or redialled when the partition heals
        conn.pub = pub
        conn.connected = True
        pub.subscribers[sub.uid] = conn
        pub.on_ready(sub.key)

    def _break(self, conn: SubConn) -> None:
        if conn.connected:
            conn.connected = False
            conn.gen += 1
            pub = conn.pub
            if pub is not None and pub.subscribers.get(conn.sub.uid) is conn:
                del pub.subscribers[conn.sub.uid]
