"""A simulated node: one :class:`~zmesh._engine.Engine` and the driver around it.

It does what ``zmesh.node`` does for real: feeds the engine what the
(simulated) transport delivered, carries out every effect after every call,
flushes at the end of each loop iteration, and keeps one timer armed at
``engine.next_deadline()``. A stalled node queues its inputs, as its sockets
would, and runs them in arrival order when the stall ends.

Anything an engine call raises is recorded as a violation (with the node and
the sim time) and the run goes on.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from .._engine import Engine, EngineConfig
from .._engine import effects as fx
from .._engine.requests import Key
from ..liveness import LivenessConfig
from ..message import Message
from .network import SubConn

if TYPE_CHECKING:
    from .world import World

__all__ = ["SimNode", "MESH", "AGENT_CAPS", "LIVENESS"]

#: The simulated network has no ZMTP link heartbeats: the application
#: heartbeats are the whole liveness layer here, at these (fast) settings.
LIVENESS = LivenessConfig(heartbeat=0.5, evasive_after=1.5, expire_after=3.0, link_heartbeat=None)

MESH = "sim"
AGENT_CAPS = ("work",)
_DIRECT, _PUB, _READY, _DISCOVERED = 0, 1, 2, 3
_MAX_TICKS_AT_ONCE = 1000  # more timer firings at one instant is a timer loop in the engine

Input = tuple[int, str, bytes]


def first_endpoint(endpoints: tuple[str, ...]) -> str | None:
    """The transport's scope rule in the sim: every endpoint is reachable; take the first."""
    return endpoints[0] if endpoints else None


class SimNode:
    """One incarnation of a node id; a restart makes a new SimNode."""

    def __init__(self, world: World, node_id: str, uid: int, incarnation: str,
                 router: str, pub: str, seeds: tuple[str, ...]) -> None:
        self.world = world
        self.node_id = node_id
        self.uid = uid
        self.incarnation = incarnation
        self.router = router
        self.pub = pub
        self.seeds = seeds
        self.agent = f"{node_id}.a"
        self.key = f"{node_id}|{incarnation}"
        self.alive = True
        self.stalled = False
        self.started_at = world.sched.now
        self.died_at = math.inf
        self.changed_at = 0.0  # last change of its own record (set_agent)
        self.subscriptions: frozenset[str] = frozenset()
        self.refresh_until = 0.0  # a discovery refresh is in flight until then
        self.browser = 0  # generation of its mDNS browser (a refresh starts a new one)
        self.links: dict[int, str] = {}
        self.subs: dict[str, SubConn] = {}
        self.subscribers: dict[int, SubConn] = {}
        self.backlog: list[Input] = []
        self.wake_at = math.inf
        self.wake_token = 0
        self._ticks_now = (-1.0, 0)
        self.engine = engine = Engine(EngineConfig(
            mesh=MESH, node_id=node_id, incarnation=incarnation, max_payload=1 << 20,
            liveness=LIVENESS, choose=first_endpoint, wall_clock=world.wall,
        ))
        # The engine caches its next deadline ("never later than the true one"):
        # where it can also compute it afresh, every step checks that promise.
        self._true_deadline: Callable[[], float] | None = getattr(engine, "_compute_deadline", None)

    def __repr__(self) -> str:
        return f"<SimNode {self.node_id}#{self.uid}>"

    # -- calling the engine ----------------------------------------------

    def call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call into the engine; carry out its effects; record what it raises."""
        result = None
        try:
            result = fn(*args)
        except Exception as exc:  # noqa: BLE001 - every escape is a finding
            self.world.engine_raised(self, what, exc)
        self.run_effects()
        return result

    def flush(self) -> None:
        """The end of a loop iteration: send what is queued, one frame per peer."""
        e = self.engine
        if e.has_queued:
            self.call("flush", e.flush)
        else:
            e.hold = False  # what flush() does when nothing is queued

    def run_effects(self) -> None:
        engine = self.engine
        world = self.world
        net = world.net
        while engine.effects:
            for eff in engine.take_effects():
                op = eff[0]
                if op == fx.SEND:
                    endpoint = self.links.get(eff[1])
                    if endpoint is None:
                        world.engine_bug(self, f"SEND on link {eff[1]} that is not open")
                    else:
                        net.send(self, eff[1], endpoint, eff[2])
                elif op == fx.PUBLISH:
                    net.publish(self, eff[1])
                elif op == fx.DELIVER:
                    self.deliver(eff[1], eff[2], eff[3], eff[4])
                elif op == fx.OPEN:
                    if eff[1] in self.links:
                        world.engine_bug(self, f"OPEN of link {eff[1]} that is open already")
                    self.links[eff[1]] = eff[2]
                elif op == fx.CLOSE:
                    if self.links.pop(eff[1], None) is None:
                        world.engine_bug(self, f"CLOSE of link {eff[1]} that is not open")
                elif op == fx.SUBSCRIBE:
                    net.subscribe(self, eff[1])
                elif op == fx.UNSUBSCRIBE:
                    net.unsubscribe(self, eff[1])
                elif op == fx.ANNOUNCE:
                    net.announce(self)
                elif op == fx.REPLIED:
                    world.requests.done(self, eff[1], "reply:" + eff[2].status, world.sched.now)
                elif op == fx.FAILED:
                    world.requests.done(self, eff[1], type(eff[2]).__name__, world.sched.now)
                elif op == fx.REDISCOVER:
                    world.rediscover(self)
                world.count_effect(op, eff)

    def deliver(self, agent_id: str, msg: Message, broadcast: bool, origin: str) -> None:
        """The sim's application: every agent answers every request "ok" and
        acknowledges every qos 1 message at once."""
        self.world.delivered(self, msg, broadcast)
        if broadcast:
            return
        if msg.correlation_id and msg.type != "result":
            self.call("reply_status", self.engine.reply_status, msg, "ok", {"echo": msg.payload})
        elif msg.qos:
            self.world.qos.handled(self, msg)
            self.call("handled", self.engine.handled, origin, msg)

    # -- lifecycle -------------------------------------------------------

    def start(self, subscriptions: frozenset[str]) -> None:
        e = self.engine
        now = self.world.sched.now
        self.call("start", e.start, (self.router,), (self.pub,), now)
        self.set_subscriptions(subscriptions)
        for seed in self.seeds:
            self.call("connect", e.connect, seed, now)
        self.end_step()

    def set_subscriptions(self, subscriptions: frozenset[str]) -> None:
        self.changed_at = self.world.sched.now
        self.subscriptions = subscriptions
        self.call("set_agent", self.engine.set_agent, self.agent, AGENT_CAPS, subscriptions)

    def crash(self) -> None:
        self.alive = False
        self.stalled = False
        self.died_at = self.world.sched.now
        self.backlog.clear()
        self.wake_token += 1
        self.wake_at = math.inf

    # -- timers ----------------------------------------------------------

    def end_step(self) -> None:
        """After each input or command: flush if needed, re-arm the one timer."""
        self.flush()
        deadline = self.engine.next_deadline()
        true_deadline = self._true_deadline
        if true_deadline is not None and true_deadline() < deadline - 1e-9:
            self.world.engine_bug(self, f"next_deadline() {deadline:.3f} is later than a timer due at "
                                        f"{true_deadline():.3f}")
            deadline = true_deadline()
        if deadline >= self.wake_at:
            return  # as zmesh.node: a timer that fires early just ticks for nothing
        self.wake_token += 1
        self.wake_at = deadline
        if deadline < math.inf:
            sched = self.world.sched
            sched.at(max(deadline, sched.now), self._wake, self.wake_token)

    def _wake(self, token: int) -> None:
        if token != self.wake_token or not self.alive:
            return
        if self.stalled:
            self.wake_at = math.inf  # fired, but the loop is frozen: unstall() ticks
            return
        now = self.world.sched.now
        self.wake_at = math.inf
        last, count = self._ticks_now
        count = count + 1 if last == now else 1
        self._ticks_now = (now, count)
        if count > _MAX_TICKS_AT_ONCE:
            self.world.engine_bug(self, "next_deadline() stays in the past after tick(): timer loop")
            self.wake_at = now + 0.001
            self.wake_token += 1
            self.world.sched.at(now + 0.001, self._wake, self.wake_token)
            return
        self.call("tick", self.engine.tick, now)
        self.end_step()

    # -- inputs from the network (a stalled node queues them) -------------

    def on_direct(self, key: str, frame: bytes) -> None:
        if self.stalled:
            self.backlog.append((_DIRECT, key, frame))
            return
        self.engine.hold = True  # a drain: replies batch until the flush
        self.call("receive_direct", self.engine.receive_direct, key, frame, self.world.sched.now)
        self.end_step()

    def on_pub(self, frame: bytes) -> None:
        if self.stalled:
            self.backlog.append((_PUB, "", frame))
            return
        self.engine.hold = True
        self.call("receive_published", self.engine.receive_published, frame, self.world.sched.now)
        self.end_step()

    def on_ready(self, key: str) -> None:
        if self.stalled:
            self.backlog.append((_READY, key, b""))
            return
        self.call("subscriber_ready", self.engine.subscriber_ready, key, self.world.sched.now)
        self.end_step()

    def on_discovered(self, endpoint: str) -> None:
        if not self.alive:
            return
        if self.stalled:
            self.backlog.append((_DISCOVERED, endpoint, b""))
            return
        self.call("discovered", self.engine.discovered, endpoint, self.world.sched.now)
        self.end_step()

    # -- stalls ------------------------------------------------------------

    def stall(self) -> None:
        self.stalled = True

    def unstall(self) -> None:
        """The loop runs again: everything queued in one drain, then the due timers."""
        if not self.alive:
            return
        self.stalled = False
        e = self.engine
        now = self.world.sched.now
        backlog, self.backlog = self.backlog, []
        e.hold = True
        for kind, text, frame in backlog:
            if kind == _DIRECT:
                self.call("receive_direct", e.receive_direct, text, frame, now)
            elif kind == _PUB:
                self.call("receive_published", e.receive_published, frame, now)
            elif kind == _READY:
                self.call("subscriber_ready", e.subscriber_ready, text, now)
            else:
                self.call("discovered", e.discovered, text, now)
            e.hold = True
        self.flush()
        self.call("tick", e.tick, now)
        self.end_step()
        self.world.net.woke(self)

    # -- local commands (the sim's application) --------------------------

    def request(self, msg: Message, deadline: float) -> Key | None:
        key: Key | None = self.call("request", self.engine.request, msg, deadline, self.world.sched.now)
        self.end_step()
        return key

    def broadcast(self, msg: Message) -> int:
        reached: int | None = self.call("broadcast", self.engine.broadcast, msg)
        self.end_step()
        return reached or 0
