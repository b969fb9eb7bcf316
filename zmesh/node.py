"""A mesh node: hosts agents, keeps the shared registry, moves their messages.

The node speaks the mesh protocol (HELLO, registry updates, liveness,
requests and replies) over whatever transport it was given; the transport
only moves frames. See docs/protocol.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import logging
import math
import os
import socket
import time
from collections import Counter
from types import TracebackType
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterable, Sequence

import msgpack

from . import codec
from .clock import Clock, SystemClock, TimerHandle
from .codec import FrameError
from .deadletters import DeadLetter, DeadLetters
from .errors import (
    AgentExists,
    AgentNotRegistered,
    HandlerError,
    InvalidMessage,
    NoHandler,
    NodeClosed,
    PeerLost,
    Timeout,
    ZmeshError,
)
from .handlers import DEFERRED, HandlerTasks, run_handler
from .liveness import LivenessConfig
from .message import Message, new_id
from .observer import Observer, Receipt
from .registry import MeshEvent, NodeRecord, Registry
from .topics import matches
from .membership import MembershipMixin
from .nodestate import Peer, Pending, Seed
from .transport.base import Transport
from .wire import LOCAL

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["Node", "current_trace_id", "trace_context"]

log = logging.getLogger("zmesh")

_trace_var: contextvars.ContextVar[str] = contextvars.ContextVar("zmesh_trace_id", default="")

HANDOFF_TOPIC = "zmesh.handoff"
_HEADER_ALLOWANCE = 64 * 1024


def current_trace_id() -> str:
    """The trace id of the message being handled, or of the enclosing trace_context."""
    return _trace_var.get()


class trace_context:
    """``with zmesh.trace_context("abc"):`` makes outgoing messages carry that trace id."""

    def __init__(self, trace_id: str | None = None) -> None:
        self.trace_id = trace_id or new_id()
        self._token: contextvars.Token[str] | None = None

    def __enter__(self) -> str:
        self._token = _trace_var.set(self.trace_id)
        return self.trace_id

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _trace_var.reset(self._token)


def _make_transport(spec: str | Transport, interfaces: str | Sequence[str] | None) -> Transport:
    if isinstance(spec, Transport):
        return spec
    if spec == "inproc":
        from .transport.inproc import InprocTransport

        return InprocTransport()
    if spec == "zmq":
        from .transport.zmq import ZmqTransport

        return ZmqTransport(interfaces=interfaces)
    raise ValueError(f"unknown transport {spec!r}: use 'zmq', 'inproc' or a Transport instance")


class Node(MembershipMixin):
    """One member of a mesh. Use as ``async with zmesh.Node("lab") as node``.

    ``mesh`` names the mesh: only nodes with the same mesh name talk. ``name``
    is this node's id, unique in the mesh (default: host-pid-random); a node
    restarted with the same name replaces its old incarnation. ``transport``
    is ``"zmq"`` (default), ``"inproc"`` or a Transport. ``seeds`` are router
    endpoints of any members to join through. ``clock`` drives timeouts, TTLs
    and timestamps (see :class:`zmesh.FakeClock`). ``max_payload`` caps the
    encoded payload of one message (bytes).
    """

    def __init__(
        self,
        mesh: str,
        *,
        name: str | None = None,
        transport: str | Transport = "zmq",
        seeds: Iterable[str] = (),
        interfaces: str | Sequence[str] | None = None,
        discovery: bool | None = None,
        clock: Clock | None = None,
        max_payload: int = 1 << 20,
        dead_letter_capacity: int = 1024,
        liveness: LivenessConfig | None = None,
        settle_timeout: float = 5.0,
    ) -> None:
        if not isinstance(mesh, str) or not mesh or len(mesh) > 64 or "|" in mesh:
            raise ValueError(f"mesh name must be 1-64 characters without '|', got {mesh!r}")
        if name is not None and (not isinstance(name, str) or not name or len(name) > 64 or "|" in name):
            raise ValueError(f"node name must be 1-64 characters without '|', got {name!r}")
        if not isinstance(max_payload, int) or max_payload < 1:
            raise ValueError("max_payload must be a positive number of bytes")
        self.mesh = mesh
        self.id = name or f"{socket.gethostname()[:24]}-{os.getpid()}-{os.urandom(6).hex()}"
        self.incarnation = "%016x%s" % (time.time_ns(), os.urandom(3).hex())
        self.key = f"{self.id}|{self.incarnation}"
        self.clock: Clock = clock or SystemClock()
        self.max_payload = max_payload
        self.max_frame = max_payload + _HEADER_ALLOWANCE
        self.liveness_config = liveness or LivenessConfig()
        self.settle_timeout = settle_timeout
        self.interfaces = interfaces
        self.discovery_enabled = discovery
        self.transport = _make_transport(transport, interfaces)
        self.registry = Registry(self.id)
        self.dead_letters = DeadLetters(dead_letter_capacity, self._redeliver)
        self._seed_endpoints = [seeds] if isinstance(seeds, str) else list(seeds)
        for endpoint in self._seed_endpoints:
            self.transport.check_endpoint(endpoint)  # a typo fails here, not silently later
        self._agents: dict[str, Agent] = {}
        self._peers: dict[str, Peer] = {}
        self._peers_by_key: dict[str, Peer] = {}
        self._ready_keys: set[str] = set()
        self._seeds: dict[str, Seed] = {}
        self._pending: dict[tuple[str, str], Pending] = {}
        self._outbox: dict[str, list[Any]] = {}
        self._pub_items: list[bytes] = []
        self._pub_size = 0
        self._flush_scheduled = False
        self._in_drain = False
        self._hot = False
        self._observers: list[Observer] = []
        self._event_queues: list[asyncio.Queue[MeshEvent]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._handler_tasks = HandlerTasks()
        self._settle_waiters: list[asyncio.Future[None]] = []
        self._logged_drops: set[tuple[str, str]] = set()
        self._stats: Counter[str] = Counter()
        self._dropped: Counter[str] = Counter()
        self._seq = 0
        self._call_later: Callable[..., TimerHandle] = self.clock.call_later
        self._deadlines: list[tuple[float, int, Pending]] = []
        self._deadline_timer: TimerHandle | None = None
        self._deadline_at = math.inf
        self._pack = msgpack.Packer().pack  # a node is used from one thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tick_handle: asyncio.TimerHandle | None = None
        self._discovery: Any = None
        self._started = False
        self._closed = False

    # -- lifecycle -------------------------------------------------------

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Bind the transport, join through seeds and discovery."""
        if self._started:
            return
        if self._closed:
            raise NodeClosed("a closed node cannot be restarted; create a new Node")
        self._loop = asyncio.get_running_loop()
        # The system clock's timers are the loop's own; skip the indirection.
        self._call_later = (
            self._loop.call_later if isinstance(self.clock, SystemClock) else self.clock.call_later
        )
        self._started = True
        try:
            await self.transport.start(self, self.key, self.mesh, self._loop)
        except ZmeshError:
            self._closed = True
            raise
        self.registry.merge(self._local_record())
        # Join one iteration later: agents registered right after start() then
        # travel in the first HELLO, so a restarted node is seen as one change.
        self._loop.call_soon(self._connect_seeds)
        await self._start_discovery()
        self._schedule_tick()

    async def _start_discovery(self) -> None:
        if self.transport.name != "zmq" or self.discovery_enabled is False:
            return
        starter = getattr(self.transport, "start_discovery", None)
        if starter is not None:
            self._discovery = await starter(self)

    async def close(self) -> None:
        """Say goodbye to every peer, fail what is pending, release sockets."""
        if self._closed:
            return
        self._closed = True
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        if self._discovery is not None:
            await self._discovery.close()
        self._flush()
        if self._started:
            bye = codec.join_frame([codec.encode_item([codec.BYE, "closed"])])
            for peer in self._peers.values():
                peer.link.send(bye)
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadlines.clear()
        for key, pending in list(self._pending.items()):
            self._pending.pop(key, None)
            if not pending.future.done():
                pending.future.set_exception(NodeClosed("the node was closed"))
        await self._handler_tasks.cancel_all()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for waiter in self._settle_waiters:
            if not waiter.done():
                waiter.set_result(None)
        for peer in self._peers.values():
            peer.link.close()
        for seed in self._seeds.values():
            seed.link.close()
        self._peers.clear()
        self._peers_by_key.clear()
        if self._started:
            await self.transport.close()
        for queue in self._event_queues:  # ends every events() iterator
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(MeshEvent("peer_left", self.id, detail="closed"))

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def endpoint(self) -> str:
        """This node's direct (ROUTER) endpoint; give it to others as a seed."""
        return self.transport.router_endpoint

    @property
    def pub_endpoint(self) -> str:
        return self.transport.pub_endpoint

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("started" if self._started else "new")
        return f"<zmesh.Node {self.id!r} mesh={self.mesh!r} {self.transport.name} {state}>"

    # -- agents ----------------------------------------------------------

    def agent(self, agent_id: str, *, capabilities: Iterable[str] = ()) -> Agent:
        """Register an agent on this node; AgentExists if the id is taken mesh-wide."""
        from .agent import Agent

        self._check_open()
        if not isinstance(agent_id, str) or not agent_id or len(agent_id) > 256:
            raise ValueError(f"agent id must be a non-empty string of at most 256 characters, got {agent_id!r}")
        caps = tuple(capabilities)
        if any(not isinstance(c, str) or not c for c in caps):
            raise ValueError(f"capabilities must be non-empty strings, got {caps!r}")
        if agent_id in self._agents:
            raise AgentExists(f"agent {agent_id!r} is already registered on this node")
        other = self.registry.node_of(agent_id)
        if other is not None:
            raise AgentExists(f"agent {agent_id!r} is already registered on node {other!r}")
        agent = Agent(self, agent_id, caps)
        self._agents[agent_id] = agent
        self._record_changed()
        return agent

    @property
    def agents(self) -> dict[str, Agent]:
        """The agents hosted by this node, by id."""
        return dict(self._agents)

    def _remove_agent(self, agent_id: str) -> None:
        if self._agents.pop(agent_id, None) is not None:
            self._record_changed()

    def _local_record(self) -> NodeRecord:
        return NodeRecord(
            node_id=self.id,
            incarnation=self.incarnation,
            mesh=self.mesh,
            version=codec.PROTOCOL_VERSION,
            router=self.transport.router_endpoint,
            pub=self.transport.pub_endpoint,
            routers=self.transport.router_endpoints,
            pubs=self.transport.pub_endpoints,
            seq=self._seq,
            agents={a.id: a.capabilities for a in self._agents.values()},
            subs={a.id: frozenset(a._subscriptions) for a in self._agents.values() if a._subscriptions},
        )

    def _record_changed(self) -> None:
        self._seq += 1
        record = self._local_record()
        self.registry.merge(record)
        if not self._started or self._closed:
            return
        item = codec.encode_item([codec.UPDATE, record.to_wire()])
        for peer in self._peers.values():
            self._enqueue(peer.node_id, item)

    # -- observation -----------------------------------------------------

    def observe(self, callback: Observer) -> Callable[[], None]:
        """Call ``callback(receipt)`` for every interaction; returns a function that stops it."""
        self._observers.append(callback)

        def stop() -> None:
            if callback in self._observers:
                self._observers.remove(callback)

        return stop

    def _receipt(
        self,
        kind: str,
        outcome: str,
        started: float,
        msg: Message,
        error: str = "",
        reached: int = 0,
    ) -> None:
        if not self._observers:
            return
        receipt = Receipt(
            kind,
            outcome,
            self.clock.monotonic() - started,
            msg.sender,
            msg.target,
            msg.topic,
            msg.trace_id,
            msg.correlation_id,
            error,
            reached,
        )
        for callback in list(self._observers):
            try:
                callback(receipt)
            except Exception:
                log.exception("zmesh observer %r raised; receipt %r", callback, receipt)

    def events(self, maxsize: int = 1000) -> AsyncIterator[MeshEvent]:
        """Async iterator of MeshEvents (peer/agent joined/left, evasive, restarted)."""
        queue: asyncio.Queue[MeshEvent] = asyncio.Queue(maxsize)
        self._event_queues.append(queue)

        async def iterate() -> AsyncIterator[MeshEvent]:
            try:
                while True:
                    event = await queue.get()
                    if event.kind == "peer_left" and event.node_id == self.id:
                        return
                    yield event
            finally:
                if queue in self._event_queues:
                    self._event_queues.remove(queue)

        return iterate()

    def _emit(self, events: Iterable[MeshEvent]) -> None:
        for event in events:
            log.debug("zmesh %s: %s", self.id, event)
            for queue in self._event_queues:
                if queue.full():
                    queue.get_nowait()
                    self._stats["events_overflowed"] += 1
                queue.put_nowait(event)

    def stats(self) -> dict[str, Any]:
        """Counters: traffic, drops by reason, pending requests, peers, dead letters."""
        out: dict[str, Any] = dict(self._stats)
        out["dropped"] = dict(self._dropped)
        out["dropped_total"] = sum(self._dropped.values())
        out["pending_requests"] = len(self._pending)
        out["peers"] = sum(1 for p in self._peers.values() if p.joined)
        out["agents"] = len(self._agents)
        out["dead_letters"] = self.dead_letters.total
        out["transport"] = self.transport.stats()
        return out

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait until every joined peer has acknowledged this node's latest record.

        Returns False if ``timeout`` (default ``settle_timeout``) ran out first.
        """
        deadline = time.monotonic() + (self.settle_timeout if timeout is None else timeout)
        while not self._closed and not self._is_settled():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            waiter = asyncio.get_running_loop().create_future()
            self._settle_waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except asyncio.TimeoutError:
                return False
            finally:
                if waiter in self._settle_waiters:
                    self._settle_waiters.remove(waiter)
        return not self._closed

    def _is_settled(self) -> bool:
        return all(p.acked_seq >= self._seq for p in self._peers.values() if p.joined)

    def _wake_settle_waiters(self) -> None:
        waiters, self._settle_waiters = self._settle_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for_agents(self, *agent_ids: str, timeout: float = 10.0) -> None:
        """Wait until every given agent id is in the registry; Timeout otherwise."""
        await self.wait_until(lambda: all(self.registry.node_of(a) for a in agent_ids), timeout,
                              f"agents {agent_ids} did not appear")

    async def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str = "condition") -> None:
        """Poll ``predicate`` on registry changes until true; Timeout after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"{what} within {timeout} s")
            await asyncio.sleep(min(0.01, remaining))


    def _on_message(self, msg: Message, peer: Peer | None) -> None:
        if peer is not None and msg.sender not in peer.record.agents:
            raise FrameError("spoofed_sender", msg.sender)
        self._stats["messages_received"] += 1
        if msg.type == "result" and msg.correlation_id:
            self._on_reply(msg)
        elif not msg.target:
            self._fan_out(msg)
        else:
            self._deliver(msg)

    def _on_reply(self, msg: Message) -> None:
        pending = self._pending.get((msg.target, msg.correlation_id))
        if pending is None or pending.future.done():
            self._stats["late_replies"] += 1
            return
        pending.future.set_result(msg)

    def _deliver(self, msg: Message) -> None:
        agent = self._agents.get(msg.target)
        if agent is None:
            self._undeliverable(msg, "not_found", f"agent {msg.target!r} is not registered on node {self.id!r}")
        elif msg.ttl is not None and msg.expired(self.clock.time()):
            self._undeliverable(msg, "expired", "the ttl ran out before delivery")
        elif msg.topic == HANDOFF_TOPIC and msg.type == "task":
            agent._receive_handoff(msg)
        else:
            handler = agent._handler_for(msg.topic)
            if handler is None:
                self._undeliverable(msg, "no_handler", f"agent {agent.id!r} has no handler for {msg.topic!r}")
            else:
                self._run(agent, handler, msg)

    def _undeliverable(self, msg: Message, reason: str, why: str) -> None:
        """Dead-letter ``msg`` here, and tell its requester (if any) why."""
        self._dead(msg, reason, why)
        if msg.correlation_id:
            self._reply_status(msg, reason, why)

    def _fan_out(self, msg: Message) -> None:
        expired = msg.ttl is not None and msg.expired(self.clock.time())
        for agent in list(self._agents.values()):
            if agent.id == msg.sender or not agent._subscriptions:
                continue
            if not any(matches(p, msg.topic) for p in agent._subscriptions):
                continue
            if expired:
                self._dead(msg, "expired", target=agent.id)
                continue
            handler = agent._handler_for(msg.topic)
            if handler is None:
                self._dead(msg, "no_handler", target=agent.id)
                continue
            self._run(agent, handler, msg, broadcast=True)

    def _run(self, agent: Agent, handler: Callable[..., Any], msg: Message, broadcast: bool = False) -> None:
        self._stats["handled"] += 1
        token = _trace_var.set(msg.trace_id)
        try:
            run_handler(
                handler, msg, self._handler_done, self._handler_failed, self._handler_tasks, (agent, msg, broadcast)
            )
        finally:
            _trace_var.reset(token)

    def _handler_done(self, result: Any, extra: tuple[Agent, Message, bool]) -> None:
        agent, msg, broadcast = extra
        if msg.correlation_id and result is not DEFERRED and not broadcast:
            if isinstance(result, Message):
                result = result.payload
            agent._reply_now(msg, result)

    def _handler_failed(self, exc: BaseException, extra: tuple[Agent, Message, bool]) -> None:
        agent, msg, broadcast = extra
        log.error(
            "zmesh: handler of agent %r for topic %r raised %s: %s",
            agent.id,
            msg.topic,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        self._stats["handler_errors"] += 1
        self._dead(msg, "handler_error", f"{type(exc).__name__}: {exc}", target=agent.id)
        if msg.correlation_id and not broadcast:
            self._reply_status(msg, "error", {"type": type(exc).__name__, "message": str(exc)})

    def _reply_status(self, msg: Message, status: str, payload: Any) -> None:
        reply = Message(
            "result",
            msg.target,
            msg.reply_to or msg.sender,
            msg.topic,
            payload,
            msg.correlation_id,
            "",
            msg.priority,
            msg.qos,
            None,
            self.clock.time(),
            msg.trace_id,
            status,
        )
        self._send_reply(reply)

    def _send_reply(self, reply: Message) -> None:
        route = self._route(reply.target)
        if route is None:
            self._dead(reply, "not_found", "the requester is gone")
            return
        try:
            item = codec.encode_message(reply, self.max_payload, self._pack)
        except InvalidMessage as exc:
            # The handler's result cannot travel: tell the requester instead.
            reply.status = "error"
            reply.payload = {"type": "InvalidMessage", "message": str(exc)}
            item = codec.encode_message(reply, self.max_payload, self._pack)
        self._enqueue(route, item)

    def _dead(self, msg: Message, reason: str, detail: str = "", target: str = "") -> None:
        self.dead_letters.add(
            DeadLetter(reason, msg, target or msg.target, msg.trace_id, self.clock.time(), detail)
        )

    # -- primitives used by Agent ----------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise NodeClosed(f"node {self.id!r} is closed")

    def _stamp(self, msg: Message, trace_id: str | None) -> None:
        msg.timestamp = self.clock.time()
        msg.trace_id = trace_id or _trace_var.get() or msg.id

    def _send(self, msg: Message, kind: str = "send", dead_letter: bool = True) -> None:
        """Fire-and-forget; raises before anything is sent."""
        if self._closed:
            raise NodeClosed(f"node {self.id!r} is closed")
        route = self._route(msg.target)
        if route is None:
            raise self._not_found(msg, kind, self.clock.monotonic(), dead_letter)
        self._enqueue(route, codec.encode_message(msg, self.max_payload, self._pack))
        self._stats["messages_sent"] += 1
        if self._observers:
            self._receipt(kind, "success", self.clock.monotonic(), msg)

    def _not_found(self, msg: Message, kind: str, started: float, dead_letter: bool = True) -> AgentNotRegistered:
        """Record an unroutable send/request (dead letter, receipt); return the error to raise."""
        if dead_letter:
            self._dead(msg, "not_found")
        self._receipt(kind, "not_found", started, msg, "AgentNotRegistered")
        return AgentNotRegistered(f"no node in mesh {self.mesh!r} hosts agent {msg.target!r}")

    async def _redeliver(self, msg: Message) -> None:
        route = self._route(msg.target)
        if msg.sender not in self._agents and route != LOCAL:
            # Sending as another node's agent would be (rightly) dropped as spoofed.
            raise InvalidMessage(
                f"cannot redeliver from node {self.id!r}: sender {msg.sender!r} is not hosted here "
                f"and target {msg.target!r} is not either; redeliver from the sender's node"
            )
        self._send(msg, dead_letter=False)

    async def _request(self, msg: Message, timeout: float, kind: str) -> Message:
        if self._closed:
            raise NodeClosed(f"node {self.id!r} is closed")
        if (timeout.__class__ is not float and timeout.__class__ is not int) or not timeout > 0:
            raise InvalidMessage(f"timeout must be a positive number of seconds, got {timeout!r}")
        started = self.clock.monotonic()
        route = self._route(msg.target)
        if route is None:
            raise self._not_found(msg, kind, started)
        key = (msg.reply_to, msg.correlation_id)
        if key in self._pending:
            raise InvalidMessage(f"a request with correlation id {msg.correlation_id!r} is already pending")
        item = codec.encode_message(msg, self.max_payload, self._pack)
        assert self._loop is not None
        future: asyncio.Future[Message] = self._loop.create_future()
        node_id = self.id if route == LOCAL else route
        pending = Pending(future, node_id, started + timeout, msg, started, kind)
        self._pending[key] = pending
        self._arm_deadline(pending)
        self._enqueue(route, item)
        self._stats["requests_sent"] += 1
        try:
            reply = await future
        except asyncio.CancelledError:
            raise  # the caller's own cancellation: no receipt, no dead letter
        except Timeout as exc:
            self._dead(msg, "timeout", str(exc))
            self._receipt(kind, "timeout", started, msg, "Timeout")
            raise
        except PeerLost as exc:
            self._dead(msg, "peer_lost", str(exc))
            self._receipt(kind, "failure", started, msg, "PeerLost")
            raise PeerLost(str(exc)) from None
        except ZmeshError as exc:
            self._receipt(kind, "failure", started, msg, type(exc).__name__)
            raise
        finally:
            if self._pending.get(key) is pending:
                del self._pending[key]
        status = reply.status
        if status == "ok":
            if self._observers:
                self._receipt(kind, "success", started, msg)
            return reply
        error = _reply_error(reply)
        outcome = {"not_found": "not_found", "expired": "timeout"}.get(status, "failure")
        self._receipt(kind, outcome, started, msg, type(error).__name__)
        raise error

    def _arm_deadline(self, pending: Pending) -> None:
        """Track a request's deadline in one heap served by a single timer.

        Cheaper than a timer per request; entries of answered requests stay
        in the heap until their deadline (or a compaction) drops them.
        """
        heap = self._deadlines
        if len(heap) > 1024 and len(heap) > 4 * len(self._pending):
            heap[:] = [(p.deadline, id(p), p) for p in self._pending.values() if p is not pending]
            heapq.heapify(heap)
        heapq.heappush(heap, (pending.deadline, id(pending), pending))
        if pending.deadline < self._deadline_at:
            if self._deadline_timer is not None:
                self._deadline_timer.cancel()
            self._deadline_at = pending.deadline
            self._deadline_timer = self._call_later(
                max(0.0, pending.deadline - self.clock.monotonic()), self._expire_requests
            )

    def _expire_requests(self) -> None:
        self._deadline_timer = None
        self._deadline_at = math.inf
        now = self.clock.monotonic()
        heap = self._deadlines
        while heap and heap[0][0] <= now + 1e-9:
            _, _, pending = heapq.heappop(heap)
            if not pending.future.done():
                pending.future.set_exception(
                    Timeout(
                        f"no reply from {pending.message.target!r} to {pending.message.topic!r} "
                        f"within the timeout"
                    )
                )
        while heap and heap[0][2].future.done():
            heapq.heappop(heap)  # answered already: no reason to wake up for it
        if heap and not self._closed:
            self._deadline_at = heap[0][0]
            self._deadline_timer = self._call_later(max(0.0, heap[0][0] - now), self._expire_requests)

    def _broadcast(self, msg: Message) -> int:
        self._check_open()
        started = self.clock.monotonic()
        item = codec.encode_message(msg, self.max_payload, self._pack)
        subscribers = self.registry.subscribers(msg.topic)
        reached = 0
        remote = False
        local = False
        for agent_id, node_id in subscribers:
            if agent_id == msg.sender:
                continue
            reached += 1
            if node_id == self.id:
                local = True
            else:
                remote = True
        if local:
            self._enqueue(LOCAL, item)
        if remote:
            self._publish(item)
        self._stats["broadcasts"] += 1
        self._receipt("broadcast", "success", started, msg, reached=reached)
        return reached


def _reply_error(reply: Message) -> ZmeshError:
    payload = reply.payload
    if reply.status == "error":
        if isinstance(payload, dict):
            return HandlerError(str(payload.get("type", "Exception")), str(payload.get("message", "")), agent=reply.sender)
        return HandlerError("Exception", str(payload), agent=reply.sender)
    if reply.status == "no_handler":
        return NoHandler(str(payload))
    if reply.status == "not_found":
        return AgentNotRegistered(str(payload))
    if reply.status == "expired":
        return Timeout(f"request expired before delivery: {payload}")
    return ZmeshError(f"unexpected reply status {reply.status!r}")


