"""The API side of a node (internal): what agents ask of it. Flow-control
waits, dead letters, observer receipts and the futures of pending requests
live here; what arrives for agents is :mod:`._delivery`'s; the protocol is
the engine's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any, Callable, Mapping

from ..clock import SystemClock
from ..deadletters import DeadLetter, DeadLetters
from ..errors import (
    AgentNotRegistered,
    Backpressure,
    InvalidMessage,
    NodeClosed,
    PeerLost,
    Timeout,
    ZmeshError,
)
from ..message import Message, new_trace_id
from ..observer import Observer, Receipt
from .node_messages import NodeMessages
from .retained import RetainedStore
from .routing import Providers
from .streams import MORE_TOPIC, Streams
from .context import trace_var
from .delivery import Delivery
from .config import RuntimeConfig
from .handlers import HandlerTasks
from .port import HostedAgent, MeshPort, RequestKey
from .remote import reply_error
from .watch import Watch
from .wills import Wills

__all__ = ["Dispatch"]

log = logging.getLogger("zmesh")

#: ``await send()`` lets the loop run once per this many sends, so a send
#: loop never starves the node (draining, replies, timers) it runs on.
YIELD_EVERY = 256
#: How often such a wait looks again, at least (real seconds; every mesh event wakes it too).
KNOWN_RECHECK = 0.25


class Dispatch(NodeMessages):
    """The runtime's side of the mesh (a :class:`~zmesh._runtime.port.MeshSink`):
    what agents send goes to ``mesh``; what the mesh reports comes back here."""

    def __init__(
        self,
        config: RuntimeConfig,
        mesh: MeshPort,
        agents: Mapping[str, HostedAgent],
        watch: Watch,
        node_stats: Callable[[], dict[str, Any]],
    ) -> None:
        self.config = config
        self._mesh = mesh
        self._agents = agents
        self._watch = watch
        self._node_stats = node_stats
        self._clock = clock = config.clock
        # The wall clock for timestamps: time.time itself, not a method around it, on the real clock.
        self._wall: Callable[[], float] = time.time if type(clock) is SystemClock else clock.time
        self._futures: dict[RequestKey, asyncio.Future[Message]] = {}
        self._credit_waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._sends = 0
        self._observers: list[Observer] = []
        #: The node is closing or closed: nothing more is sent.
        self.closed = False
        self.tasks = HandlerTasks(config.workers, config.node_id)
        self.stats: Counter[str] = Counter()
        self.dead_letters = DeadLetters(config.dead_letter_capacity, self._redeliver)
        #: request_any's side: what is outstanding at each provider, which requests started.
        self.providers = Providers()
        #: The last value of each topic this node's agents broadcast with retain=True.
        self.retained = RetainedStore()
        #: The last wills this node publishes for nodes gone without a goodbye.
        self.wills = Wills(config.node_id, mesh.registry, self._publish_will, self.tell, self._clock, self.stats)
        watch.on_event(self.wills.on_event)
        #: The streams this node's agents read and its handlers write.
        self.streams = Streams(mesh.registry.node_of, mesh.taken, mesh.drop,
                               lambda node, items: self.tell(node, MORE_TOPIC, items), self.stats)
        self.delivery = self._make_delivery()
        #: MeshSink.deliver: the delivery's own method, one call per message, not two.
        self.deliver = self.delivery.deliver

    def _make_delivery(self) -> Delivery:
        return Delivery(self.config, self._mesh, self._agents, self._watch, self)

    def close(self) -> None:
        """The node is closing: sends and requests raise NodeClosed from now on."""
        self.closed = True
        self.wills.close()
        self.delivery.cancels.close()
        self.streams.close()

    def _closed_error(self) -> NodeClosed:
        return NodeClosed(f"node {self.config.node_id!r} is closed")

    # -- what agents send ------------------------------------------------

    def stamp(self, msg: Message, trace_id: str | None) -> None:
        msg.timestamp = self._wall()
        msg.trace_id = trace_id or trace_var.get() or new_trace_id()

    def send_now(self, msg: Message, timeout: float | None) -> bool:
        """The send loop's path: send ``msg`` if nothing makes it wait, yield,
        report or fail; False (nothing sent) when it must go by :meth:`send`."""
        sends = self._sends + 1
        if sends % YIELD_EVERY == 0 or timeout is not None or msg.qos or self._observers or self.closed:
            return False
        if not self._mesh.try_send(msg, 0.0):
            return False  # :meth:`send` waits for credit, or raises
        self._sends = sends
        return True

    async def send(self, msg: Message, timeout: float | None, kind: str = "send", dead_letter: bool = True) -> None:
        """Fire-and-forget, once flow control allows; raises before anything is sent."""
        if self.closed:
            raise self._closed_error()
        if timeout is not None and (
            (timeout.__class__ is not float and timeout.__class__ is not int) or not timeout >= 0
        ):
            raise InvalidMessage(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
        mesh = self._mesh
        observers = self._observers
        started = mesh.now() if (observers or msg.qos) else 0.0  # only a receipt, a wait or qos needs it
        route = mesh.try_send(msg, started)
        if not route:
            started = started or mesh.now()
            deadline = None if timeout is None else started + timeout
            if route is None:
                # Without a timeout of its own, a send waits for its target no longer than a settle.
                known_by = started + (self.config.settle_timeout if timeout is None else timeout)
                route = await self._wait_known(msg, known_by)
                if route is None:
                    raise self._not_found(msg, kind, started, dead_letter)
            if not route:
                route = await self._wait_credit(msg, kind, started, deadline)
            mesh.send(msg, route, started)
        if observers:
            self.receipt(kind, "success", started, msg)
        sends = self._sends = self._sends + 1
        if not sends % YIELD_EVERY:
            # A send loop: what it queued leaves now as one frame, and the
            # next message waits to be batched with those after it (the
            # first message after a flush otherwise leaves alone).
            mesh.end_batch()
            await asyncio.sleep(0)
            mesh.hold()

    async def send_chunk(self, msg: Message) -> None:
        """Send a stream's chunk once flow control allows (no receipt, no dead letter:
        the stream's request has those). AgentNotRegistered when the reader is gone."""
        if self.closed:
            raise self._closed_error()
        mesh = self._mesh
        route = mesh.try_send(msg, 0.0)
        if not route:
            started = mesh.now()
            if route is None:
                raise AgentNotRegistered(f"agent {msg.target!r}, reading the stream, is gone")
            mesh.send(msg, await self._wait_credit(msg, "stream", started, None), started)
        self.stats["chunks_sent"] += 1

    async def _wait_credit(self, msg: Message, kind: str, started: float, deadline: float | None) -> str:
        """Wait until ``msg.target`` may take one more message from us; return its route.

        Raises Backpressure at ``deadline``, AgentNotRegistered if the
        target leaves meanwhile, NodeClosed if the node closes.
        """
        self.stats["backpressure_waits"] += 1
        mesh = self._mesh
        mesh.pump()  # the mesh may have told the receiver we wait
        loop = mesh.loop
        assert loop is not None
        while True:
            route = mesh.admit(msg.target)
            if route:
                return route
            if route is None:
                raise self._not_found(msg, kind, started)
            if self.closed:
                raise self._closed_error()
            if deadline is not None and self._clock.monotonic() >= deadline:
                self.stats["backpressure_timeouts"] += 1
                self.receipt(kind, "failure", started, msg, "Backpressure")
                raise Backpressure(
                    f"agent {msg.target!r} took nothing more from node {self.config.node_id!r} within "
                    f"{deadline - started:.3g} s (its inbox holds what flow control allows, or this node's "
                    "transport holds all it may for its broker); nothing was sent"
                )
            future: asyncio.Future[None] = loop.create_future()
            waiters = self._credit_waiters.setdefault(msg.target, [])
            waiters.append(future)
            timer = None
            if deadline is not None:
                timer = self._clock.call_later(max(0.0, deadline - self._clock.monotonic()),
                                               lambda f=future: f.done() or f.set_result(None))
            try:
                await future
            finally:
                if timer is not None:
                    timer.cancel()
                if future in waiters:
                    waiters.remove(future)
                if not waiters and self._credit_waiters.get(msg.target) is waiters:
                    # Only our own list: credit() may have taken it, and a sender it
                    # woke may already wait again in a new one under the same target.
                    del self._credit_waiters[msg.target]

    async def _wait_known(self, msg: Message, deadline: float) -> str | None:
        """No node hosts ``msg.target`` yet, but this node may be about to learn
        of one (see :meth:`learning_until`): wait for it until then, or until
        ``deadline``. Its route as :meth:`Engine.admit` gives it, or None."""
        clock = self._clock
        watch = self._watch
        first = True
        while True:
            left = deadline - clock.monotonic()
            learning = self._mesh.learning_until() - time.monotonic()
            if left <= 0 or learning <= 0:
                return None
            if first:
                first = False
                self.stats["unknown_target_waits"] += 1
            # Woken by every mesh event (an agent or peer joined); re-checked at
            # least every KNOWN_RECHECK s, as a knock given up on says nothing.
            await watch.changed(clock, left, min(learning, KNOWN_RECHECK))
            if self.closed:
                raise self._closed_error()
            route = self._mesh.admit(msg.target)
            if route is not None:
                return route

    def credit(self, agent: str) -> None:
        """The engine says ``agent`` may take more from us (or its node left): wake its senders."""
        for future in self._credit_waiters.pop(agent, ()):
            if not future.done():
                future.set_result(None)

    def wake_all(self) -> None:
        """The node is closing: every sender waiting for credit gives up."""
        for agent in list(self._credit_waiters):
            self.credit(agent)

    def _not_found(self, msg: Message, kind: str, started: float, dead_letter: bool = True) -> AgentNotRegistered:
        """Record an unroutable send/request (dead letter, receipt); return the error to raise."""
        if dead_letter:
            self.dead(msg, "not_found")
        self.receipt(kind, "not_found", started, msg, "AgentNotRegistered")
        waited = self._clock.monotonic() - started
        why = (f" (waited {waited:.3g} s for it to appear, as this node had just started or joined; if it is "
               f"still starting elsewhere, await node.wait_for_agents({msg.target!r}) first)")
        if waited < 0.001:
            why = ""
        return AgentNotRegistered(f"no node in mesh {self.config.mesh!r} hosts agent {msg.target!r}{why}")

    async def _redeliver(self, msg: Message) -> None:
        if msg.sender not in self._agents and msg.target not in self._agents:
            # Sending as another node's agent would be (rightly) dropped as spoofed.
            raise InvalidMessage(
                f"cannot redeliver from node {self.config.node_id!r}: sender {msg.sender!r} is not hosted here "
                f"and target {msg.target!r} is not either; redeliver from the sender's node"
            )
        await self.send(msg, None, dead_letter=False)

    async def request(self, msg: Message, timeout: float, kind: str) -> Message:
        if self.closed:
            raise self._closed_error()
        if (timeout.__class__ is not float and timeout.__class__ is not int) or not timeout > 0:
            raise InvalidMessage(f"timeout must be a positive number of seconds, got {timeout!r}")
        mesh = self._mesh
        started = mesh.now()
        route = mesh.admit(msg.target)
        if not route:
            if route is None:
                route = await self._wait_known(msg, started + timeout)
                if route is None:
                    raise self._not_found(msg, kind, started)
            if not route:
                route = await self._wait_credit(msg, kind, started, started + timeout)
        key = mesh.request(msg, started + timeout, mesh.now(), route)
        if key is None:
            raise self._not_found(msg, kind, started)
        future: asyncio.Future[Message] = mesh.loop.create_future()  # type: ignore[union-attr]
        self._futures[key] = future
        mesh.pump()  # after the future is there: a local handler may answer within it
        try:
            reply = await future
        except asyncio.CancelledError:
            mesh.forget_request(key)  # the caller's own cancellation: no dead letter
            self.cancel_remote(msg)
            self.receipt(kind, "cancelled", started, msg, "CancelledError")
            raise
        except Timeout as exc:
            self.cancel_remote(msg)
            self.dead(msg, "timeout", str(exc))
            self.receipt(kind, "timeout", started, msg, "Timeout")
            raise
        except PeerLost as exc:
            self.dead(msg, "peer_lost", str(exc))
            self.receipt(kind, "failure", started, msg, "PeerLost")
            raise PeerLost(str(exc)) from None
        except ZmeshError as exc:
            self.receipt(kind, "failure", started, msg, type(exc).__name__)
            raise
        finally:
            self._futures.pop(key, None)
        if reply.status == "ok":
            if self._observers:
                self.receipt(kind, "success", started, msg)
            return reply
        error = reply_error(reply)
        outcome = {"not_found": "not_found", "expired": "timeout"}.get(reply.status, "failure")
        if isinstance(error, Timeout):
            outcome = "timeout"
        self.receipt(kind, outcome, started, msg, type(error).__name__)
        raise error

    async def node_request(self, msg: Message, timeout: float) -> Message:
        """Send request ``msg`` from this node itself (``msg.sender`` is its node
        address, see ``Node.peer_stats``) and return the reply Message. No
        flow-control wait, receipt or dead letter: it is not an agent's.
        Raises PeerLost when the target node is not a peer, Timeout."""
        mesh = self._mesh
        now = mesh.now()
        route = mesh.route(msg.target)
        key = None if route is None else mesh.request(msg, now + timeout, now, route)
        if key is None:
            raise PeerLost(f"{msg.target!r} is not a peer of node {self.config.node_id!r}")
        future: asyncio.Future[Message] = mesh.loop.create_future()  # type: ignore[union-attr]
        self._futures[key] = future
        mesh.pump()
        try:
            return await future
        except asyncio.CancelledError:
            mesh.forget_request(key)
            raise
        finally:
            self._futures.pop(key, None)

    def cancel_request(self, agent_id: str, correlation_id: str) -> bool:
        """Cancel agent ``agent_id``'s pending request ``correlation_id``: its caller
        gets CancelledError, its handler is told. False if none is pending."""
        future = self._futures.get((agent_id, correlation_id))
        if future is None or future.done():
            return False
        future.cancel()
        return True

    def resolved(self, key: RequestKey, reply: Message | None, error: Exception | None) -> None:
        future = self._futures.get(key)
        if future is None or future.done():
            return
        if reply is not None and reply.status != "ok" and self.streams.readers:
            self.streams.error_reply(key, reply)  # a stream's: how many chunks went before it
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(reply)  # type: ignore[arg-type]

    def reply(self, request: Message, status: str, payload: Any) -> None:
        self._mesh.reply(request, status, payload)

    def handled(self, origin: str, msg: Message) -> None:
        """A one-way qos >= 1 message's handler finished: acknowledge it."""
        self._mesh.handled(origin, msg)

    def _publish_will(self, msg: Message) -> int:
        self.stamp(msg, new_trace_id())  # its own trace: not that of whatever ran when the node went
        return self.broadcast(msg)

    def broadcast(self, msg: Message) -> int:
        started = self._clock.monotonic()
        reached = self._mesh.broadcast(msg)
        self.receipt("broadcast", "success", started, msg, reached=reached)
        return reached

    # -- dead letters and receipts ---------------------------------------

    def dead(self, msg: Message, reason: str, detail: str = "", target: str = "") -> None:
        target = target or msg.target
        self.dead_letters.add(DeadLetter(reason, msg, target, msg.trace_id, self._clock.time(), detail))
        inbox = self.delivery.inboxes.get(target)
        if inbox is not None:  # a local agent's: counted in its stats
            inbox.dead_letters += 1

    def observe(self, callback: Observer) -> Callable[[], None]:
        self._observers.append(callback)

        def stop() -> None:
            if callback in self._observers:
                self._observers.remove(callback)

        return stop

    def receipt(
        self, kind: str, outcome: str, started: float, msg: Message, error: str = "", reached: int = 0
    ) -> None:
        if not self._observers:
            return
        receipt = Receipt(
            kind, outcome, self._clock.monotonic() - started, msg.sender, msg.target, msg.topic,
            msg.trace_id, msg.correlation_id, error, reached,
        )
        for callback in list(self._observers):
            try:
                callback(receipt)
            except Exception:
                log.exception("zmesh observer %r raised; receipt %r", callback, receipt)
