"""The API side of a node (internal): what agents ask of it, and handing
messages to their handlers. Dead letters, observer receipts and the futures
of pending requests live here; the protocol lives in the engine.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable

from ._context import trace_var
from ._engine import Engine
from .agent import HANDOFF_TOPIC, Agent, Handoff
from .clock import Clock
from .deadletters import DeadLetter, DeadLetters
from .errors import (
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
from .message import Message
from .observer import Observer, Receipt

if TYPE_CHECKING:
    from ._driver import Driver
    from .node import Node

__all__ = ["Dispatch", "AgentPort"]

log = logging.getLogger("zmesh")

Key = tuple[str, str]


class AgentPort:
    """The node as its agents see it: an :class:`zmesh.agent.AgentHost`."""

    def __init__(self, node: Node, dispatch: Dispatch) -> None:
        self.clock: Clock = node.clock
        self._node = node
        self.stamp = dispatch.stamp
        self.send = dispatch.send
        self.request = dispatch.request
        self.reply = dispatch.reply
        self.broadcast = dispatch.broadcast
        self.changed = node._agent_changed
        self.remove = node._remove_agent

    @property
    def closed(self) -> bool:
        return self._node.closed

    async def settled(self) -> bool:
        return await self._node.settled()


class Dispatch:
    def __init__(self, node: Node, engine: Engine, driver: Driver, dead_letter_capacity: int) -> None:
        self._node = node
        self._engine = engine
        self._driver = driver
        self._clock = node.clock
        self._futures: dict[Key, asyncio.Future[Message]] = {}
        self._observers: list[Observer] = []
        self.tasks = HandlerTasks()
        self.stats: Counter[str] = Counter()
        self.dead_letters = DeadLetters(dead_letter_capacity, self._redeliver)
        self.port = AgentPort(node, self)

    # -- what agents send ------------------------------------------------

    def stamp(self, msg: Message, trace_id: str | None) -> None:
        msg.timestamp = self._clock.time()
        msg.trace_id = trace_id or trace_var.get() or msg.id

    def send(self, msg: Message, kind: str = "send", dead_letter: bool = True) -> None:
        """Fire-and-forget; raises before anything is sent."""
        if self._node.closed:
            raise NodeClosed(f"node {self._node.id!r} is closed")
        if not self._engine.send(msg):
            raise self._not_found(msg, kind, self._clock.monotonic(), dead_letter)
        self._driver.pump()
        if self._observers:
            self.receipt(kind, "success", self._clock.monotonic(), msg)

    def _not_found(self, msg: Message, kind: str, started: float, dead_letter: bool = True) -> AgentNotRegistered:
        """Record an unroutable send/request (dead letter, receipt); return the error to raise."""
        if dead_letter:
            self.dead(msg, "not_found")
        self.receipt(kind, "not_found", started, msg, "AgentNotRegistered")
        return AgentNotRegistered(f"no node in mesh {self._node.mesh!r} hosts agent {msg.target!r}")

    async def _redeliver(self, msg: Message) -> None:
        if msg.sender not in self._node._agents and msg.target not in self._node._agents:
            # Sending as another node's agent would be (rightly) dropped as spoofed.
            raise InvalidMessage(
                f"cannot redeliver from node {self._node.id!r}: sender {msg.sender!r} is not hosted here "
                f"and target {msg.target!r} is not either; redeliver from the sender's node"
            )
        self.send(msg, dead_letter=False)

    async def request(self, msg: Message, timeout: float, kind: str) -> Message:
        if self._node.closed:
            raise NodeClosed(f"node {self._node.id!r} is closed")
        if (timeout.__class__ is not float and timeout.__class__ is not int) or not timeout > 0:
            raise InvalidMessage(f"timeout must be a positive number of seconds, got {timeout!r}")
        started = self._driver.now()
        key = self._engine.request(msg, started + timeout, started)
        if key is None:
            raise self._not_found(msg, kind, started)
        future: asyncio.Future[Message] = self._driver.loop.create_future()  # type: ignore[union-attr]
        self._futures[key] = future
        self._driver.pump()
        try:
            reply = await future
        except asyncio.CancelledError:
            self._engine.forget_request(key)  # the caller's own cancellation: no receipt, no dead letter
            raise
        except Timeout as exc:
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
        error = _reply_error(reply)
        outcome = {"not_found": "not_found", "expired": "timeout"}.get(reply.status, "failure")
        self.receipt(kind, outcome, started, msg, type(error).__name__)
        raise error

    def resolved(self, key: Key, reply: Message | None, error: Exception | None) -> None:
        future = self._futures.get(key)
        if future is None or future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(reply)  # type: ignore[arg-type]

    def reply(self, request: Message, status: str, payload: Any) -> None:
        self._engine.reply_status(request, status, payload)
        if not self._driver.in_drain:  # a drain sends when it ends
            self._driver.pump()

    def broadcast(self, msg: Message) -> int:
        started = self._clock.monotonic()
        reached = self._engine.broadcast(msg)
        self._driver.pump()
        self.receipt("broadcast", "success", started, msg, reached=reached)
        return reached

    # -- what arrives for our agents -------------------------------------

    def deliver(self, agent_id: str, msg: Message, broadcast: bool) -> None:
        agent = self._node._agents.get(agent_id)
        request = bool(msg.correlation_id) and not broadcast
        if agent is None:
            self._undeliverable(msg, request, "not_found", f"agent {agent_id!r} left node {self._node.id!r}", agent_id)
        elif msg.ttl is not None and msg.expired(self._clock.time()):
            self._undeliverable(msg, request, "expired", "the ttl ran out before delivery", agent_id)
        elif request and msg.topic == HANDOFF_TOPIC and msg.type == "task":
            self._offer_handoff(agent, msg)
        else:
            handler = agent.handler_for(msg.topic)
            if handler is None:
                why = f"agent {agent.id!r} has no handler for {msg.topic!r}"
                self._undeliverable(msg, request, "no_handler", why, agent_id)
            else:
                self.stats["handled"] += 1
                self._run(handler, msg, self._handler_done, (agent, msg, request))

    def _undeliverable(self, msg: Message, request: bool, reason: str, why: str, target: str) -> None:
        """Dead-letter ``msg`` here, and tell its requester (if any) why."""
        self.dead(msg, reason, why, target)
        if request:
            self._engine.reply_status(msg, reason, why)

    def _run(self, handler: Callable[..., Any], arg: Any, done: Callable[[Any, Any], None], extra: Any) -> None:
        token = trace_var.set(extra[1].trace_id)
        try:
            run_handler(handler, arg, done, self._handler_failed, self.tasks, extra)
        finally:
            trace_var.reset(token)

    def _handler_done(self, result: Any, extra: tuple[Agent, Message, bool]) -> None:
        _, msg, request = extra
        if request and result is not DEFERRED:
            if isinstance(result, Message):
                result = result.payload
            self.reply(msg, "ok", result)

    def _handler_failed(self, exc: BaseException, extra: tuple[Agent, Message, bool]) -> None:
        agent, msg, request = extra
        log.error(
            "zmesh: handler of agent %r for topic %r raised %s: %s",
            agent.id, msg.topic, type(exc).__name__, exc, exc_info=exc,
        )
        self.stats["handler_errors"] += 1
        self.dead(msg, "handler_error", f"{type(exc).__name__}: {exc}", agent.id)
        if request:
            self.reply(msg, "error", {"type": type(exc).__name__, "message": str(exc)})

    def _offer_handoff(self, agent: Agent, msg: Message) -> None:
        payload = msg.payload
        if (
            not isinstance(payload, dict)
            or not isinstance(payload.get("task_id"), str)
            or not isinstance(payload.get("artifacts", []), list)
        ):
            self.reply(msg, "error", {"type": "InvalidMessage", "message": "malformed handoff"})
            return
        task_id = payload["task_id"]
        handler = agent.handoff_handler
        if handler is None:
            self.reply(msg, "ok", {"accepted": False, "reason": f"agent {agent.id!r} takes no handoffs"})
            return
        offer = Handoff(
            task_id, msg.sender, payload.get("context"), tuple(str(a) for a in payload.get("artifacts", [])), msg
        )

        def done(accepted: Any, _: Any) -> None:
            if accepted is True:
                agent.claim(task_id)
                self.reply(msg, "ok", {"accepted": True})
            else:
                reason = accepted if isinstance(accepted, str) else "refused"
                self.reply(msg, "ok", {"accepted": False, "reason": reason})

        self._run(handler, offer, done, (agent, msg, True))

    # -- dead letters and receipts ---------------------------------------

    def dead(self, msg: Message, reason: str, detail: str = "", target: str = "") -> None:
        self.dead_letters.add(DeadLetter(reason, msg, target or msg.target, msg.trace_id, self._clock.time(), detail))

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
