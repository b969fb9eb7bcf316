"""A hand-driven fake network for zmesh's protocol engine, in the spirit of
h11's ``ConnectionPair``: no sockets, no asyncio, no real time.

:class:`Net` holds a few :class:`~zmesh._engine.Engine` objects and carries
out their effects the way ``zmesh.node.Node`` and a ZeroMQ transport would:

* ``SEND`` on a link queues the frame for the engine that owns the link's
  endpoint (``receive_direct(sender_key, frame, now)``);
* ``SUBSCRIBE`` connects the subscriber's SUB and queues a *ready* signal;
  delivering it makes the publisher see the subscription (it is attached
  from then on, as an XPUB only forwards once it has read it) and calls
  ``subscriber_ready(subscriber_key, now)``; ``ANNOUNCE`` queues the signal
  again for every publisher the engine is connected to;
* ``PUBLISH`` queues the frame for every attached subscriber;
* ``DELIVER`` of a request is answered at once with
  ``reply_status(msg, "ok", ...)`` unless ``answer`` is False (then it is kept
  in ``unanswered``).

Every input is followed by ``engine.flush()`` and its effects are carried
out until there are none (the driver's ``_pump``). Latency is zero: queued
traffic arrives when :meth:`Net.deliver_all` runs, in FIFO order.
``stalled`` engines get no input and no tick (their traffic waits, as in a
blocked event loop); traffic from ``drop_from`` or to ``drop_to`` engines is
lost (a cut link).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from zmesh._wire import codec
from zmesh._engine import Engine, EngineConfig
from zmesh._engine import effects as fx
from zmesh.liveness import LivenessConfig
from zmesh.message import Message
from zmesh.registry import MeshEvent

__all__ = ["Net", "Packet", "Seen", "make_engine", "router", "pub", "kinds", "recording", "LIVENESS", "WALL"]

LIVENESS = LivenessConfig(heartbeat=0.5, evasive_after=1.5, expire_after=3.0, link_heartbeat=None)
WALL = 1_700_000_000.0
Effect = tuple[Any, ...]


def router(name: str) -> str:
    return f"tcp://{name}:1"


def pub(name: str) -> str:
    return f"tcp://{name}:2"


def kinds(frame: bytes) -> list[int]:
    """The item kinds in a direct frame."""
    return [item[0] for item in codec.decode_frame(frame, 1 << 30)]


def make_engine(name: str, *, mesh: str = "lab", inc: str = "0001", agents: tuple[str, ...] = ()) -> Engine:
    engine = Engine(EngineConfig(mesh=mesh, node_id=name, incarnation=inc, liveness=LIVENESS,
                                 wall_clock=lambda: WALL))
    for agent in agents:
        engine.set_agent(agent, ("work",), frozenset({"news.>"}))
    return engine


@dataclass(frozen=True, slots=True)
class Packet:
    kind: str  # "direct", "pub" or "ready"
    src: str
    dst: str
    key: str  # the key of the sender (direct) or of the subscriber (ready)
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class Seen:
    """One effect, when and by whom; ``to`` is the endpoint of a SEND's link."""

    time: float
    node: str
    effect: Effect
    to: str = ""


_recording: list[list[Net]] = []


@contextmanager
def recording() -> Iterator[list[Net]]:
    """Collect every Net created inside the block."""
    nets: list[Net] = []
    _recording.append(nets)
    try:
        yield nets
    finally:
        _recording.remove(nets)


class Net:
    def __init__(self, *engines: Engine, now: float = 0.0) -> None:
        self.now = now
        self.engines: dict[str, Engine] = {}
        self.every_engine: list[Engine] = []  # replaced ones included
        self.endpoints: dict[str, dict[int, str]] = {}  # every link ever opened
        self.live: set[tuple[str, int]] = set()
        self.subscribed: dict[str, set[str]] = {}  # pub endpoints each SUB is connected to
        self.attached: dict[str, set[str]] = {}  # subscribers each publisher has seen
        self.queue: list[Packet] = []
        self.log: list[Seen] = []
        self.stalled: set[str] = set()
        self.drop_from: set[str] = set()
        self.drop_to: set[str] = set()
        self.answer = True
        self.unanswered: list[tuple[str, Message]] = []
        for rec in _recording:
            rec.append(self)
        for engine in engines:
            self.add(engine)

    # -- set-up ------------------------------------------------------------

    def add(self, engine: Engine) -> Engine:
        name = engine.node_id
        self.engines[name] = engine
        self.every_engine.append(engine)
        self.endpoints[name] = {}
        self.subscribed[name] = set()
        self.attached[name] = set()
        engine.start((router(name),), (pub(name),), self.now)
        self.pump(name)
        return engine

    def restart(self, engine: Engine) -> Engine:
        """Replace the engine with the same node id (its process died, a new one bound the same ports)."""
        name = engine.node_id
        self.queue = [p for p in self.queue if name not in (p.src, p.dst)]
        self.live = {(n, link) for n, link in self.live if n != name}
        for subs in self.attached.values():
            subs.discard(name)
        self.add(engine)
        for other, eps in self.subscribed.items():  # a SUB resends its subscriptions on reconnect
            if other != name and pub(name) in eps:
                self._queue("ready", other, name)
        return engine

    def connect(self, name: str, seed: str) -> None:
        self.engines[name].connect(router(seed), self.now)
        self.pump(name)

    def close(self, name: str) -> None:
        self.engines[name].close(self.now)
        self.pump(name)
        self.subscribed[name].clear()  # the transport is closed too
        for subs in self.attached.values():
            subs.discard(name)

    def isolate(self, name: str) -> None:
        self.drop_from.add(name)
        self.drop_to.add(name)

    def heal(self, name: str) -> None:
        self.drop_from.discard(name)
        self.drop_to.discard(name)

    def request(self, name: str, msg: Message, deadline: float) -> tuple[str, str]:
        key = self.engines[name].request(msg, deadline, self.now)
        assert key is not None
        self.pump(name)
        return key

    # -- the driver --------------------------------------------------------

    def pump(self, name: str) -> None:
        engine = self.engines[name]
        while True:
            engine.flush()
            effects = engine.take_effects()
            if not effects:
                return
            for effect in effects:
                self._carry_out(name, engine, effect)

    def _carry_out(self, name: str, engine: Engine, effect: Effect) -> None:
        op = effect[0]
        to = ""
        if op == fx.SEND:
            to = self.endpoints[name].get(effect[1], "")
            if (name, effect[1]) in self.live:
                self._queue("direct", name, self._owner(to), effect[2])
        elif op == fx.PUBLISH:
            for sub in sorted(self.attached[name]):
                self._queue("pub", name, sub, effect[1])
        elif op == fx.OPEN:
            self.endpoints[name][effect[1]] = effect[2]
            self.live.add((name, effect[1]))
        elif op == fx.CLOSE:
            self.live.discard((name, effect[1]))
        elif op == fx.SUBSCRIBE:
            if effect[1] not in self.subscribed[name]:
                self.subscribed[name].add(effect[1])
                self._queue("ready", name, self._owner(effect[1]))
        elif op == fx.UNSUBSCRIBE:
            self.subscribed[name].discard(effect[1])
            self.attached.get(self._owner(effect[1]) or "", set()).discard(name)
        elif op == fx.ANNOUNCE:
            for endpoint in sorted(self.subscribed[name]):
                self._queue("ready", name, self._owner(endpoint))
        elif op == fx.DELIVER:
            msg = effect[2]
            if msg.expects_reply:
                if self.answer:
                    engine.reply_status(msg, "ok", {"echo": msg.payload})
                else:
                    self.unanswered.append((name, msg))
        self.log.append(Seen(self.now, name, effect, to))

    def _owner(self, endpoint: str) -> str | None:
        name = endpoint.split("://", 1)[-1].rsplit(":", 1)[0]
        return name if name in self.engines else None

    def _queue(self, kind: str, src: str, dst: str | None, data: bytes = b"") -> None:
        if dst is not None and src not in self.drop_from and dst not in self.drop_to:
            self.queue.append(Packet(kind, src, dst, self.engines[src].key, data))

    def deliver(self, packet: Packet) -> None:
        engine = self.engines[packet.dst]
        if packet.kind == "direct":
            engine.receive_direct(packet.key, packet.data, self.now)
        elif packet.kind == "pub":
            engine.receive_published(packet.data, self.now)
        elif pub(packet.dst) in self.subscribed[packet.src]:  # a ready signal, still connected
            self.attached[packet.dst].add(packet.src)
            engine.subscriber_ready(packet.key, self.now, self.public_key(packet.src))
        self.pump(packet.dst)

    def public_key(self, name: str) -> str | None:
        """The public key ``name``'s connections carry (None: keyless)."""
        return None

    def deliver_all(self, only: Callable[[Packet], bool] | None = None) -> int:
        """Deliver queued traffic (that ``only`` accepts) until none is left; how many."""
        count = 0
        while True:
            packet = next((p for p in self.queue if p.dst not in self.stalled and (only is None or only(p))), None)
            if packet is None:
                return count
            self.queue.remove(packet)
            if packet.src not in self.drop_from and packet.dst not in self.drop_to:
                self.deliver(packet)
                count += 1
            assert count < 100_000, "traffic never settles"

    def tick(self, name: str) -> None:
        self.engines[name].tick(self.now)
        self.pump(name)

    def advance(self, to: float, until: Callable[[], bool] | None = None) -> float | None:
        """Run every timer due up to ``to``, delivering traffic after each; with
        ``until``, stop at the first instant it holds and return that time."""
        for _ in range(1_000_000):
            self.deliver_all()
            if until is not None and until():
                return self.now
            running = [n for n in self.engines if n not in self.stalled]
            due = min((self.engines[n].next_deadline() for n in running), default=math.inf)
            if due > to:
                break
            self.now = max(self.now, due)
            for name in running:
                if self.engines[name].next_deadline() <= self.now:
                    self.tick(name)
        else:  # pragma: no cover
            raise AssertionError("timers never settle")
        self.now = max(self.now, to)
        return None

    # -- what happened -------------------------------------------------------

    def effects(self, name: str, op: int, since: float = -math.inf) -> list[Seen]:
        return [s for s in self.log if s.node == name and s.effect[0] == op and s.time >= since]

    def events(self, name: str, kind: str | None = None, since: float = -math.inf) -> list[tuple[float, MeshEvent]]:
        return [(s.time, s.effect[1]) for s in self.effects(name, fx.EVENT, since)
                if kind is None or s.effect[1].kind == kind]

    def hellos(self, name: str, to: str, since: float = -math.inf) -> list[float]:
        """When ``name`` sent a HELLO to endpoint ``to``."""
        return [s.time for s in self.effects(name, fx.SEND, since)
                if s.to == to and codec.HELLO in kinds(s.effect[2])]

    def joined(self, a: str, b: str) -> bool:
        return self.engines[a].peers.count(b) == 1 and self.engines[b].peers.count(a) == 1
