"""The message mesh (internal): :class:`~zmesh._runtime.port.MeshPort` over a
:class:`~zmesh.transport.message.MessageTransport`, a transport that routes
whole messages itself (a broker).

No handshake, no links, no liveness of our own: the broker delivers, and
keeps membership as records (one per node, gone when the node is). What the
mesh protocol does over frames is done here over addresses:

* every hosted agent, and the node itself, is an address it listens on; a
  message goes to its target's address, a reply to its requester's;
* an agent's subscriptions are patterns the node subscribes to; a
  publication is fanned out to the local agents whose patterns match;
* this node's record (its agents, capabilities and subscriptions) is put on
  every change; the others' records fill the registry (:mod:`.message_records`),
  and a record that is gone takes its node's agents with it and fails the
  requests sent there (PeerLost);
* a request's deadline is a timer on the node's clock.

Flow control is the broker's: :meth:`MessageMesh.admit` always has credit.
QoS is too: a broker delivers what it accepted as its own guarantees say,
so retransmits are not duplicated here. A broker that holds a QoS >= 1
message until it is acknowledged (JetStream) has it acknowledged once its
handler ran, or given back when it could not run here (:mod:`.held`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

from .._engine import EngineConfig
from .._engine.config import HEADER_ALLOWANCE, MAX_LOGGED_DROPS
from .._wire.names import node_address, printable
from ..clock import Clock, SystemClock, TimerHandle
from ..errors import FrameError, InvalidMessage, NodeClosed, PeerLost, Timeout, TransportError, ZmeshError
from ..message import Message
from ..registry import Will
from ..topics import matches
from ..transport.message import MessageTransport
from .frame_mesh import LEARN_WINDOW
from .held import HeldDeliveries
from .message_records import Records
from .port import MeshSink, RequestKey
from .watch import Watch

__all__ = ["MessageMesh"]

log = logging.getLogger("zmesh")

S = TypeVar("S", bound=MeshSink)

#: The origin of a message whose sender's node is not in the registry (yet).
UNKNOWN_ORIGIN = "?"


class _Pending:
    __slots__ = ("node_id", "timer", "message", "timeout")

    def __init__(self, node_id: str, timer: TimerHandle | None, message: Message, timeout: float) -> None:
        self.node_id = node_id
        self.timer = timer
        self.message = message
        self.timeout = timeout


#: Seconds a closing node waits for every peer to have its goodbye record: with
#: wills in its last record (a peer that misses it would publish them), and without.
WILLS_DROPPED_WAIT = 2.0
GOODBYE_WAIT = 0.5


class MessageMesh(Generic[S]):
    """A mesh over ``transport``; ``make_sink`` makes the runtime side, as for
    :class:`~zmesh._runtime.frame_mesh.FrameMesh`."""

    def __init__(
        self,
        config: EngineConfig,
        transport: MessageTransport,
        clock: Clock,
        watch: Watch,
        seeds: Iterable[str],
        make_sink: Callable[[MessageMesh[S]], S],
    ) -> None:
        if list(seeds):
            raise TransportError(
                f"transport {transport.name!r} routes whole messages: its nodes meet at its broker, not at seeds"
            )
        self.config = config
        self.transport = transport
        self.clock = clock
        self.watch = watch
        self.node_id = config.node_id
        self.max_frame = config.max_payload + HEADER_ALLOWANCE
        self.loop: asyncio.AbstractEventLoop | None = None
        self.in_drain = False  # every arrival is its own callback: nothing waits for a drain's end
        self.now: Callable[[], float] = time.monotonic if type(clock) is SystemClock else clock.monotonic
        self.discovery = None
        self.running = False
        self.started_at = -math.inf
        self._pending: dict[RequestKey, _Pending] = {}
        self.wire = transport.make_wire(config.max_payload, config.encoder, config.decoder)
        self._closed = False
        self.messages_sent = 0
        self.messages_received = 0
        self.counters: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self._logged: set[tuple[str, str]] = set()
        self._waiting_for_room: set[str] = set()  # targets whose senders wait for the transport's room
        self.held = HeldDeliveries(transport, self._count)
        # Does the broker hold deliveries at all? (Most do not: one test per message saved.)
        self._holds = type(transport).is_held is not MessageTransport.is_held
        self.records = Records(config, transport, self.wire, self.drop)
        self.registry = self.records.registry
        self._agents = self.records.agents  # what is hosted here (the records keep it)
        self.sink: S = make_sink(self)

    # -- lifecycle -------------------------------------------------------

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        await self.transport.start(self, self.config.mesh, self.node_id, loop)
        self.running = True
        self.started_at = time.monotonic()
        self.records.go_live()

    async def discover(self, enabled: bool | None) -> None:
        """Nothing to discover: the broker is where nodes meet."""

    async def leave(self) -> None:
        if self.running:
            # A peer must see our goodbye record before it sees our record gone,
            # or it takes the going for a death (and publishes our wills).
            had_wills = self.records.say_goodbye()
            wait = WILLS_DROPPED_WAIT if had_wills else GOODBYE_WAIT
            if not await self.watch.settled(lambda: not self.running or self.records.is_settled(), wait):
                if had_wills:
                    log.warning("zmesh %s: closing, not every peer said it had our record without wills within "
                                "%s s; those that had not may take the close for a death and publish them",
                                self.node_id, wait)
        was_running = self.running
        self.running = False
        self.records.live = False
        self._closed = True
        for key, pending in list(self._pending.items()):
            self._finish(key, pending)
            self.sink.resolved(key, None, NodeClosed("the node was closed"))
        if was_running:
            await self.transport.withdraw()  # the peers hear it now, as a BYE tells them over frames

    async def close(self, started: bool) -> None:
        self.watch.wake()
        if started:
            await self.transport.close()

    # -- membership ------------------------------------------------------

    @property
    def peers(self) -> list[str]:
        return self.records.peers

    @property
    def joining(self) -> bool:
        return self.running and not self.records.loaded

    def learning_until(self) -> float:
        return math.inf if self.joining else self.watch.last_joined + LEARN_WINDOW

    def connect(self, endpoint: str) -> None:
        raise TransportError(f"transport {self.transport.name!r} routes whole messages: nodes meet at its broker")

    def peer_endpoint(self, node_id: str) -> str | None:
        return None

    def trust_changed(self, admitted: frozenset[str], revoked: frozenset[str], started: bool) -> None:
        """Keys are the broker's business here (its own authentication)."""

    def set_agent(self, agent_id: str, capabilities: tuple[str, ...], subscriptions: frozenset[str],
                  meta: Mapping[str, Any] | None = None, will: Will | None = None) -> None:
        self.records.set_agent(agent_id, capabilities, subscriptions, meta, will)

    def remove_agent(self, agent_id: str) -> None:
        self.records.remove_agent(agent_id)

    def is_settled(self) -> bool:
        """Every peer has our latest record, and the broker has every address
        and pattern we asked for (a broadcast sent now reaches our agents)."""
        return self.records.is_settled() and self.transport.is_flushed()

    def all_acked(self) -> bool:
        """Has the broker accepted every QoS 1/2 message sent?"""
        return self.transport.is_confirmed()

    # -- traffic ---------------------------------------------------------

    def route(self, target: str) -> str | None:
        if target in self._agents:
            return self.node_id
        node_id = self.registry.node_of(target)
        if node_id is None and target.startswith("zmesh.node."):
            named = target[len("zmesh.node."):]
            return named if named == self.node_id or named in self.registry else None
        if node_id is None and self.transport.reaches(target):
            return target  # an address the broker delivers to by itself (a plain client's, a seed agent's)
        return node_id

    def admit(self, target: str) -> str | None:
        """The route to ``target``; "" (wait) while the transport has no room for one more."""
        route = self.route(target)
        if route and not self.transport.has_room():
            self._waiting_for_room.add(target)
            return ""
        return route

    def taken(self, origin: str, agent: str) -> None:
        """Credit is the broker's: nothing to give back."""

    def unhandled(self, origin: str, msg: Message) -> None:
        """A qos >= 1 message dropped before its handler ran: given back to a
        broker that holds it (delivered again), else dead-lettered (the
        broker delivered it once, and nobody here sends it again)."""
        if self.held.give_back(msg):
            return
        self.drop("unhandled", msg.target, "dropped before its handler ran")
        self.sink.dead(msg, "busy", "dropped before its handler ran (a message-level mesh does not send it again)",
                       msg.target)

    def forget_request(self, key: RequestKey) -> None:
        pending = self._pending.pop(key, None)
        if pending is not None and pending.timer is not None:
            pending.timer.cancel()

    def drop(self, reason: str, where: str, detail: str = "") -> None:
        self.dropped[reason] += 1
        key = (where, reason)
        if key not in self._logged and len(self._logged) < MAX_LOGGED_DROPS:
            self._logged.add(key)
            log.warning("zmesh %s: dropped input from %s: %s%s (logged once per peer and reason)",
                        self.node_id, printable(where) or "unknown", reason, f" ({detail})" if detail else "")

    def _encode(self, msg: Message, node_id: str | None) -> Any:
        limit = self.config.max_payload
        if node_id is not None and node_id != self.node_id:
            limit = min(limit, self.registry.max_payload(node_id) or limit)
        return self.wire.encode(msg, limit)

    def _check_open(self) -> None:
        if self._closed:
            raise NodeClosed(f"node {self.node_id!r} is closed")

    def try_send(self, msg: Message, now: float) -> str | None:
        self._check_open()
        route = self.admit(msg.target)
        if route:
            self.send(msg, route, now)
        return route

    def send(self, msg: Message, route: str, now: float) -> None:
        self._check_open()
        self.transport.send(msg.target, self._encode(msg, route))
        self.messages_sent += 1

    def end_batch(self) -> None:
        """The transport sends as it goes: nothing is batched here."""

    def hold(self) -> None:
        """The transport sends as it goes: nothing is batched here."""

    def request(self, msg: Message, deadline: float, now: float, route: str) -> RequestKey | None:
        self._check_open()
        key = (msg.reply_to, msg.correlation_id)
        if key in self._pending:
            raise InvalidMessage(f"a request with correlation id {msg.correlation_id!r} is already pending")
        data = self._encode(msg, route)
        timeout = deadline - now
        timer = self.clock.call_later(max(0.0, timeout), lambda: self._expired(key))
        self._pending[key] = _Pending(route, timer, msg, timeout)
        self.transport.send(msg.target, data)
        self.messages_sent += 1
        self.counters["requests_sent"] += 1
        return key

    def _finish(self, key: RequestKey, pending: _Pending) -> None:
        self._pending.pop(key, None)
        if pending.timer is not None:
            pending.timer.cancel()

    def _expired(self, key: RequestKey) -> None:
        pending = self._pending.pop(key, None)
        if pending is None:
            return
        msg = pending.message
        self.sink.resolved(key, None, Timeout(
            f"no reply from {msg.target!r} to {msg.topic!r} within {pending.timeout:.3g} s"))

    def reply(self, request: Message, status: str, payload: Any) -> None:
        target = request.reply_to or request.sender
        reply = Message("result", request.target, target, request.topic, payload, request.correlation_id, "",
                        request.priority, request.qos, None, self.config.wall_clock(), request.trace_id, status,
                        self.config.new_id())
        route = self.route(target)
        try:
            data = self._encode(reply, route)
        except InvalidMessage as exc:
            self.drop("unencodable_reply", reply.sender, str(exc)[:200])
            self.sink.dead(Message(reply.type, reply.sender, reply.target, reply.topic, None, reply.correlation_id,
                                   "", reply.priority, reply.qos, None, reply.timestamp, reply.trace_id, "error",
                                   reply.id), "handler_error", f"its result cannot be sent: {exc}", reply.target)
            reply.status = "error"
            reply.payload = {"type": "InvalidMessage", "message": str(exc)[:512]}
            data = self._encode(reply, route)
        # Sent even to a requester this node has no record of: the broker routes by address,
        # and a requester that has just come (its record still on its way) is waiting for it.
        self.transport.send(target, data)

    def handled(self, origin: str, msg: Message) -> None:
        """A one-way qos >= 1 message is done with: acknowledged, if the broker holds it."""
        self.held.handled(msg)

    def broadcast(self, msg: Message) -> int:
        self._check_open()
        data = self._encode(msg, None)
        reached = sum(1 for agent_id, _ in self.registry.subscribers(msg.topic) if agent_id != msg.sender)
        self.transport.publish(msg.topic, data)
        self.counters["broadcasts"] += 1
        return reached

    def handler_ended(self) -> None:
        """Nothing waits to be carried out: every call here goes out at once."""

    def pump(self) -> None:
        """Nothing waits to be carried out: every call here goes out at once."""

    # -- what the transport tells (MessageHost) ----------------------------

    def _decoded(self, data: Any) -> Message | None:
        try:
            return self.wire.decode(data)
        except FrameError as exc:
            self.drop(exc.reason, "broker", exc.detail)
        except ZmeshError as exc:
            self.drop("rejected", "broker", str(exc))
        except Exception as exc:  # the node's decoder raised
            self.drop("decoder_error", "broker", f"{type(exc).__name__}: {exc}"[:200])
        return None

    def on_message(self, data: Any) -> None:
        msg = self._decoded(data)
        if msg is None:
            if self._holds and self.transport.is_held(data):
                self.transport.settle(data, True)  # dropped and counted: not delivered again and again
            return
        if not self.running:
            return
        if self._holds and self.transport.is_held(data):
            msg.qos = msg.qos or 1  # the broker keeps it until it is acknowledged (a plain client may not say so)
            if msg.correlation_id or not self.held.arrived(msg, data):
                if msg.correlation_id:  # a broker holds one-way messages only: not a request or a reply
                    self.transport.settle(data, True)
                    self.drop("malformed", "broker", "a held request or reply")
                return
            if msg.target not in self._agents and self.held.give_back(msg):
                return  # delivered again, where its agent is then
        self.messages_received += 1
        if msg.type == "result" and msg.correlation_id:
            key = (msg.target, msg.correlation_id)
            pending = self._pending.get(key)
            if pending is None:
                self.counters["late_replies"] += 1
                return
            self._finish(key, pending)
            self.sink.resolved(key, msg, None)
            return
        origin = self.registry.node_of(msg.sender) or UNKNOWN_ORIGIN
        if msg.target in self._agents:
            self.sink.deliver(msg.target, msg, False, origin, self.wire.size(data))
        elif msg.target == node_address(self.node_id):
            if self.records.seen(msg):
                self.watch.wake()  # settled() may be true now
                return
            self.sink.node_message(msg, origin)
        elif self.registry.node_of(msg.target) not in (None, self.node_id):
            # The agent moved on within the transport's linger: every node listening on its address
            # got this, its new node too, which answers; a not_found from here would race that answer.
            return
        else:
            why = f"agent {msg.target!r} is not registered on node {self.node_id!r}"
            self.sink.dead(msg, "not_found", why, msg.target)
            if msg.correlation_id:
                self.reply(msg, "not_found", why)

    def on_publication(self, data: Any) -> None:
        msg = self._decoded(data)
        if msg is None or not self.running:
            return
        self.messages_received += 1
        for agent_id, (_, subs) in list(self._agents.items()):
            if agent_id != msg.sender and subs and any(matches(p, msg.topic) for p in subs):
                self.sink.deliver(agent_id, msg, True, "", self.wire.size(data))

    def on_record(self, node_id: str, data: bytes | None) -> None:
        if node_id == self.node_id or not self.running:
            return
        events = self.records.heard(node_id, data)
        if data is None:
            why = next((e.detail for e in events if e.kind == "peer_left"), "left")
            for key, pending in list(self._pending.items()):
                if pending.node_id == node_id:
                    self._finish(key, pending)
                    self.sink.resolved(key, None, PeerLost(f"node {node_id!r} {why} before replying"))
        for event in events:
            self.watch.emit(event)
        if data is None:
            self.watch.wake()  # one peer fewer for settled() to wait for

    def on_records_loaded(self) -> None:
        self.records.loaded = True
        self.watch.wake()

    def on_flushed(self) -> None:
        self.watch.wake()  # settled() may be true now

    def on_room(self) -> None:
        waiting, self._waiting_for_room = self._waiting_for_room, set()
        for target in waiting:
            self.sink.credit(target)

    def on_transport_drop(self, reason: str, where: str) -> None:
        self.drop(reason, where)

    def _count(self, what: str) -> None:
        self.counters[what] += 1

    # -- what it tells -----------------------------------------------------

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.counters)
        out["messages_sent"] = self.messages_sent
        out["messages_received"] = self.messages_received
        out["dropped"] = dict(self.dropped)
        out["dropped_total"] = sum(self.dropped.values())
        out["pending_requests"] = len(self._pending)
        out["unacked"] = 0
        out["peers"] = len(self.peers)
        out["transport"] = self.transport.stats()
        return out
