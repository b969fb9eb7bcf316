"""Messages arriving for this node's agents (internal): each agent's inbox,
its concurrency limit, and running its handlers.

A message starts its handler at once while the agent runs fewer than its
``concurrency`` handlers and nothing waits before it; otherwise it waits in
the agent's inbox (priority 0 first, then arrival). TTL is checked when a
message is taken to be handled: an expired one is never handled. Taking a
message (to handle, expire or drop it) returns its flow-control credit to
the sender's node. A message that finds the inbox full is dropped and
counted: a direct one is dead-lettered (a request is answered ``busy``, so
its requester gets Backpressure); a broadcast counts as ``slow_subscriber``
and the first of a run raises a ``slow_subscriber`` event.

Lines marked ``inline`` copy a neighbouring function on the per-message
path; docs/architecture.md (*Hand-copied hot paths*) gives what each saves.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from ..clock import SystemClock
from ..errors import InvalidMessage
from ..message import Message
from ..registry import MeshEvent
from ..topics import matches
from .cancel import Cancellations
from .context import trace_var
from .eager import current_task_of
from .handlers import DEFERRED, INLINE, finish, run_handler
from .handoff import HANDOFF_TOPIC, Handoff
from .inbox import Entry, Inbox
from .port import HostedAgent, MeshPort
from .remote import error_payload
from .routes import Routes
from .stream_writer import StreamSender
from .streams import CHUNK_TOPIC, PLAIN_RESULTS, STREAM_MARK, is_streamable
from .watch import Watch

if TYPE_CHECKING:
    from .config import RuntimeConfig
    from .dispatch import Dispatch

__all__ = ["Delivery"]

log = logging.getLogger("zmesh")

#: What a retained value counts for in an inbox's byte limit (its size on the wire is not known here).
_RETAINED_SIZE = 256


class Delivery:
    #: May _start end a one-way message's inline handler without _handler_done? (Not when a subclass adds to it.)
    _one_way_inline = True

    def __init__(
        self, config: RuntimeConfig, mesh: MeshPort, agents: Mapping[str, HostedAgent], watch: Watch,
        dispatch: Dispatch,
    ) -> None:
        self._node_id = config.node_id
        self._clock = config.clock
        self._mesh = mesh
        self._agents = agents
        self._watch = watch
        self._dispatch = dispatch
        self.tasks = dispatch.tasks
        self.stats = dispatch.stats
        self.inboxes: dict[str, Inbox] = {}
        self._routes: dict[str, Routes] = {}  # each agent's on() handlers and subscriptions
        #: Broadcasts waiting for a new subscription's retained values: (agent, pattern) -> (route, entries).
        self.holding: dict[tuple[str, str], tuple[str, list[Entry]]] = {}
        #: The request handlers a cancel can reach (see zmesh._runtime.cancel).
        self.cancels = Cancellations(mesh.registry.node_of, self._clock.monotonic, dispatch.receipt, self.stats,
                                     dispatch.tell_started)
        watch.on_departure(self.cancels.departed)
        self.streams = dispatch.streams
        #: Streamed requests answered by agent.reply() from inside their handler (see _handler_done).
        self._replied: set[tuple[str, str]] = set()
        #: The clock's monotonic time: time.monotonic itself on the real clock (one call less a request).
        self._monotonic: Callable[[], float] = (
            time.monotonic if type(self._clock) is SystemClock else self._clock.monotonic)
        #: The context handlers start from (copied): the node's, not a sender's or another handler's.
        self._context = contextvars.copy_context()
        self._senders = StreamSender(dispatch.streams, self.tasks, dispatch.send_chunk, dispatch.stamp, self._clock)

    # -- agents ------------------------------------------------------------

    def add_agent(self, agent_id: str, routes: Routes, concurrency: int, max_count: int, max_bytes: int) -> None:
        self.inboxes[agent_id] = Inbox(concurrency, max_count, max_bytes)
        self._routes[agent_id] = routes
        self.tasks.add_pool(agent_id, concurrency)

    def remove_agent(self, agent_id: str) -> None:
        """The agent left: what waits in its inbox is dead-lettered (and answered)."""
        inbox = self.inboxes.pop(agent_id, None)
        if inbox is None:
            return
        self.tasks.remove_pool(agent_id)
        self._routes.pop(agent_id, None)
        self.stats["handled"] += inbox.handled  # the node's total keeps what the agent handled
        for entry in inbox.drain():
            self._taken(agent_id, entry)
            self._undeliverable(entry, "not_found", f"agent {agent_id!r} left", agent_id)

    # -- arrival -----------------------------------------------------------

    def deliver(self, agent_id: str, msg: Message, broadcast: bool, origin: str, size: int,
                clean: bool = False) -> None:
        if not clean and (not self._mesh.in_drain or current_task_of(self._mesh.loop) is not None):
            # Sent by an agent of this node (from the API, or from a handler): in a copy of the
            # node's context, or the sender's context variables would reach the handler. (A
            # frame from the transport comes in the reader's context: no copy, no cost.)
            self._context.copy().run(self.deliver, agent_id, msg, broadcast, origin, size, True)
            return
        inbox = self.inboxes.get(agent_id)
        agent = self._agents.get(agent_id)
        if broadcast and agent is not None and inbox is not None:
            # One handler run per matching subscription, each its own inbox entry.
            for route in self._routes[agent_id].broadcast_routes(msg.topic):
                entry = Entry(msg, True, origin, size, False, route)
                held = self._held(agent_id, route, msg.topic) if self.holding else None
                if held is not None:  # a new subscription's retained values go first
                    if len(held) < inbox.max_count:
                        held.append(entry)
                    else:
                        self._overflow(agent_id, inbox, entry)
                    continue
                self._accept(agent, inbox, entry)
            return
        if msg.correlation_id and msg.topic == CHUNK_TOPIC:
            self.streams.chunk(agent_id, msg, origin)  # a chunk of a stream the agent reads
            return
        entry = Entry(msg, broadcast, origin, size, not broadcast and msg.correlation_id != "")
        if agent is None or inbox is None:
            self._taken(agent_id, entry)
            why = f"agent {agent_id!r} left node {self._node_id!r}"
            self._undeliverable(entry, "not_found", why, agent_id)
        elif inbox.running < inbox.concurrency and not inbox.heap:  # inbox.may_start(), inline
            self._start(agent, inbox, entry)
        elif inbox.fits(size, False):
            inbox.put(entry)
        else:
            self._overflow(agent_id, inbox, entry)

    # -- retained values first -----------------------------------------------

    def hold(self, agent_id: str, pattern: str, route: str) -> None:
        """Keep broadcasts on ``pattern`` for ``agent_id``'s new subscription (by ``route``)
        back until :meth:`release`."""
        self.holding.setdefault((agent_id, pattern), (route, []))

    def _held(self, agent_id: str, route: str, topic: str) -> list[Entry] | None:
        """Where a broadcast for ``agent_id`` by ``route`` waits, if a new subscription holds it."""
        for (agent, pattern), (held_route, held) in self.holding.items():
            if agent == agent_id and held_route == route and matches(pattern, topic):
                return held
        return None

    def release(self, agent_id: str, pattern: str, retained: list[Message]) -> None:
        """Hand the new subscription its ``retained`` values, then what was held back meanwhile:
        a retained value that is also held (broadcast while it was asked for), or older
        than one held on its topic, is left out."""
        route, held = self.holding.pop((agent_id, pattern), ("", []))
        agent = self._agents.get(agent_id)
        inbox = self.inboxes.get(agent_id)
        if agent is None or inbox is None:
            return
        held_ids = {entry.msg.id for entry in held}
        newest_held: dict[str, float] = {}
        for entry in held:
            newest_held[entry.msg.topic] = max(entry.msg.timestamp, newest_held.get(entry.msg.topic, 0.0))
        for msg in retained:
            if msg.id not in held_ids and newest_held.get(msg.topic, -1.0) < msg.timestamp:
                self._accept(agent, inbox, Entry(msg, True, "", _RETAINED_SIZE, False, route))
        for entry in held:
            self._accept(agent, inbox, entry)

    def _accept(self, agent: HostedAgent, inbox: Inbox, entry: Entry) -> None:
        """Start ``entry``'s handler now, or let it wait in the inbox, or drop it
        (what ``deliver`` does inline for a direct message)."""
        if inbox.running < inbox.concurrency and not inbox.heap:  # inbox.may_start(), inline
            self._start(agent, inbox, entry)
        elif inbox.fits(entry.size, entry.broadcast):
            inbox.put(entry)
        else:
            self._overflow(agent.id, inbox, entry)

    def _overflow(self, agent_id: str, inbox: Inbox, entry: Entry) -> None:
        msg = entry.msg
        inbox.dropped += 1
        if entry.broadcast:
            self._mesh.drop("slow_subscriber", agent_id, f"inbox full, dropped {msg.topic!r}")
            if not inbox.slow:
                inbox.slow = True
                self._watch.emit(MeshEvent("slow_subscriber", self._node_id, agent_id, msg.topic))
            return
        self._taken(agent_id, entry)
        self._mesh.drop("inbox_full", agent_id)
        why = f"agent {agent_id!r} has a full inbox on node {self._node_id!r}"
        self._undeliverable(entry, "busy", why, agent_id)

    def still_wanted(self, agent_id: str, entry: Entry) -> bool:
        """Is broadcast ``entry`` still routed to a subscription of the agent
        (not unsubscribed while it waited)?"""
        routes = self._routes.get(agent_id)
        return routes is not None and routes.still_routed(entry.route, entry.msg.topic)

    def _taken(self, agent_id: str, entry: Entry) -> None:
        if not entry.broadcast:
            self._mesh.taken(entry.origin, agent_id)

    # -- handling ----------------------------------------------------------

    def _start(self, agent: HostedAgent, inbox: Inbox, entry: Entry) -> None:
        """Hand one message to its handler (or say why it cannot be)."""
        if not entry.broadcast:  # self._taken, inline: once per message
            self._mesh.taken(entry.origin, agent.id)
        msg = entry.msg
        if msg.ttl is not None and msg.expired(self._clock.time()):
            self._settled(entry)  # retrying cannot help now
            self._undeliverable(entry, "expired", "the ttl ran out before it was handled", agent.id)
            return
        if entry.request and self.cancels.early and self.cancels.cancelled_before_start(
                msg, self._mesh.registry.node_of(msg.sender)):
            self._settled(entry)
            return
        if entry.request and self.cancels.watched:
            self.cancels.starting(msg)
        if entry.request and msg.topic == HANDOFF_TOPIC and msg.type == "task":
            self._offer_handoff(agent, inbox, entry)
            return
        if entry.broadcast:
            if not self.still_wanted(agent.id, entry):
                return  # unsubscribed while it waited: not wanted any more
            found = self._routes[agent.id].broadcast_entry(entry.route, msg.topic)
        else:
            found = agent.handler_entry(msg.topic)
        if found is None:
            self._settled(entry)
            why = f"agent {agent.id!r} has no handler for {msg.topic!r}"
            self._undeliverable(entry, "no_handler", why, agent.id)
            return
        inbox.handled += 1  # the node's total is the sum (see zmesh._runtime.stats)
        inbox.running += 1
        handler, mode = found
        token = trace_var.set(msg.trace_id)  # self._run, inline: once per message
        try:
            if mode == INLINE and self._one_way_inline and not entry.request and not msg.qos:
                # run_handler and _handler_done, inline for an inline handler of a
                # one-way qos 0 message (a stream's common case): nothing is owed
                # once it returns, and the batch's pump carries out what it asked.
                try:
                    result = handler(msg)
                except BaseException as exc:  # contained, as run_handler does
                    self._handler_failed(exc, (agent, entry))
                    return
                if result is None and self._mesh.in_drain and not (inbox.heap or inbox.pumping or inbox.slow):
                    inbox.running -= 1
                    return
                finish(result, self._handler_done, self._handler_failed, (agent, entry), self.tasks)
                return
            if entry.request:
                entry.started = self._monotonic()
            running = run_handler(handler, msg, self._handler_done, self._handler_failed, self.tasks,
                                  (agent, entry), mode, agent.id)
            if running is not None and entry.request:
                self.cancels.started(msg, running, entry.origin)
        finally:
            trace_var.reset(token)

    def _run(self, handler: Callable[..., Any], arg: Any, mode: str, done: Callable[[Any, Any], None],
             extra: tuple[HostedAgent, Entry]) -> None:
        token = trace_var.set(extra[1].msg.trace_id)
        try:
            run_handler(handler, arg, done, self._handler_failed, self.tasks, extra, mode, extra[0].id)
        finally:
            trace_var.reset(token)

    def _release(self, agent_id: str, ended: Entry | None = None, failed: bool = False) -> None:
        """One of the agent's handlers ended (``ended``'s; ``failed``: it raised): start
        what waits, as far as the limit allows. A request's counts for ``node.services()``."""
        inbox = self.inboxes.get(agent_id)
        if inbox is None:
            return
        inbox.running -= 1
        if ended is not None and ended.started >= 0.0:
            inbox.requests += 1
            inbox.errors += failed
            inbox.request_time += self._monotonic() - ended.started
        if inbox.pumping:
            return  # an outer call is already taking from this inbox (inline handlers)
        if inbox.heap:  # something waits (nothing: the common case, costs nothing more)
            inbox.pumping = True
            try:
                # In a copy of the node's context: this runs in the context of the handler
                # that ended, which the next one's Task would copy (its contextvars with it).
                self._context.copy().run(self._start_queued, agent_id, inbox)
            finally:
                inbox.pumping = False
        if inbox.slow and len(inbox) <= inbox.max_count // 2:
            inbox.slow = False  # caught up: the next drop is news again
        mesh = self._mesh
        if not mesh.in_drain:
            mesh.handler_ended()

    def _start_queued(self, agent_id: str, inbox: Inbox) -> None:
        while True:
            entry = inbox.take()
            agent = self._agents.get(agent_id)
            if entry is None or agent is None:
                return
            self._start(agent, inbox, entry)

    def _handler_done(self, result: Any, extra: tuple[HostedAgent, Entry]) -> None:
        agent, entry = extra
        msg = entry.msg
        if entry.request:
            if self._replied and result is DEFERRED and (agent.id, msg.correlation_id) in self._replied:
                # It answered with agent.reply() before it returned: that stream's Task is the
                # request's now (it holds the cancel's entry), not this handler's.
                self._replied.discard((agent.id, msg.correlation_id))
                self._release(agent.id, entry)
                return
            if self.cancels.running and self.cancels.ended(msg):
                self._release(agent.id, entry)  # cancelled: its requester waits for no result
                return
            if result is not DEFERRED:
                if isinstance(result, Message):
                    result = result.payload
                if (result.__class__ not in PLAIN_RESULTS and is_streamable(result)) or \
                        msg.correlation_id[0] == STREAM_MARK:
                    self._stream(agent, entry, result)  # its end releases the agent's slot
                    return
                self._dispatch.reply(msg, "ok", result)
        elif result is not None and result.__class__ not in PLAIN_RESULTS and is_streamable(result):
            self._handler_failed(InvalidMessage(
                "the handler streams, but only a request's answer can be a stream (nothing reads "
                "the stream of a one-way message or a broadcast)"), extra)
            return
        elif msg.qos and not entry.broadcast:
            self._dispatch.handled(entry.origin, msg)
        self._release(agent.id, entry)

    def _stream(self, agent: HostedAgent, entry: Entry, result: Any) -> None:
        """Answer request ``entry`` with ``result``: a stream, sent chunk by chunk (or,
        to a plain request, collected into one reply); any answer to a streamed request."""
        msg = entry.msg

        def ended(status: str, value: Any, sent: int) -> None:
            if status != "ok":
                self._handler_failed(value, (agent, entry), sent)
                return
            if not (self.cancels.running and self.cancels.ended(msg)):
                self._dispatch.reply(msg, "ok", value)
            self._release(agent.id, entry)

        task = self._senders.start(agent.id, msg, result, ended)
        self.cancels.started(msg, task, entry.origin)

    def stream_reply(self, request: Message, payload: Any) -> None:
        """``agent.reply`` to a streamed request (its handler returned DEFERRED): send it as the stream."""
        origin = self._mesh.registry.node_of(request.sender) or ""
        key = (request.target, request.correlation_id)
        if self.cancels.early and self.cancels.cancelled_before_start(request, origin or None):
            return  # cancelled while the handler had deferred its answer: nobody reads it
        self._replied.add(key)  # (maybe from inside the handler, which has not returned yet: see _handler_done)

        def ended(status: str, value: Any, sent: int) -> None:
            self._replied.discard(key)
            if self.cancels.running and self.cancels.ended(request):
                return
            if status == "ok":
                self._dispatch.reply(request, "ok", value)
            else:
                self._dispatch.reply(request, "error", dict(error_payload(value), chunks=sent))

        self.cancels.started(request, self._senders.start(request.target, request, payload, ended), origin)

    def _handler_failed(self, exc: BaseException, extra: tuple[HostedAgent, Entry], sent: int = 0) -> None:
        """``sent``: the chunks of its stream that went before it failed."""
        agent, entry = extra
        msg = entry.msg
        if entry.request and self.cancels.running and self.cancels.ended(msg):
            log.debug("zmesh: handler of agent %r for topic %r stopped: its requester cancelled %s",
                      agent.id, msg.topic, msg.correlation_id)
            self._release(agent.id, entry)
            return
        if isinstance(exc, (asyncio.CancelledError, TimeoutError, asyncio.TimeoutError)):
            # A cancellation or a deadline somebody asked for (asyncio.timeout, a
            # request's timeout): what happened, not a bug, so no traceback.
            log.info("zmesh: handler of agent %r for topic %r ended by %s%s", agent.id, msg.topic,
                     type(exc).__name__, f": {exc}" if str(exc) else "")
        else:
            log.error(
                "zmesh: handler of agent %r for topic %r raised %s: %s",
                agent.id, msg.topic, type(exc).__name__, exc, exc_info=exc,
            )
        self.stats["handler_errors"] += 1
        self._dispatch.dead(msg, "handler_error", f"{type(exc).__name__}: {exc}", agent.id)
        if entry.request:
            self._dispatch.reply(msg, "error", dict(error_payload(exc), chunks=sent) if sent else error_payload(exc))
        else:
            self._settled(entry)  # handled, if not well: running it again would not help
        self._release(agent.id, entry, True)

    def _settled(self, entry: Entry) -> None:
        """A one-way qos >= 1 message is done with here: acknowledge it."""
        if entry.msg.qos and not entry.request and not entry.broadcast:
            self._dispatch.handled(entry.origin, entry.msg)

    def _undeliverable(self, entry: Entry, reason: str, why: str, target: str) -> None:
        """Dead-letter ``entry``'s message here, and tell its requester (if any) why.

        A one-way qos >= 1 message dropped before its handler ran (full
        inbox, agent gone) stays its sender's: it is sent again, so no dead
        letter here, only the drop counted by the caller.
        """
        msg = entry.msg
        if msg.qos and not entry.request and not entry.broadcast and reason in ("busy", "not_found"):
            self._mesh.unhandled(entry.origin, msg)
            return
        self._dispatch.dead(msg, reason, why, target)
        if entry.request:
            self._dispatch.reply(msg, reason, why)

    def _offer_handoff(self, agent: HostedAgent, inbox: Inbox, entry: Entry) -> None:
        msg = entry.msg
        payload = msg.payload
        if (
            not isinstance(payload, dict)
            or not isinstance(payload.get("task_id"), str)
            or not isinstance(payload.get("artifacts", []), list)
        ):
            self._dispatch.reply(msg, "error", {"type": "InvalidMessage", "message": "malformed handoff"})
            return
        task_id = payload["task_id"]
        handler = agent.handoff_handler
        if handler is None:
            self._dispatch.reply(msg, "ok", {"accepted": False, "reason": f"agent {agent.id!r} takes no handoffs"})
            return
        offer = Handoff(
            task_id, msg.sender, payload.get("context"), tuple(str(a) for a in payload.get("artifacts", [])), msg
        )

        def done(accepted: Any, _: Any) -> None:
            if accepted is True and msg.expired(self._clock.time()):
                # The offerer stops waiting at the offer's ttl and keeps the task: too late to take it.
                accepted = "the offer expired before it was accepted"
            if accepted is True:
                agent.claim(task_id)
                self._dispatch.reply(msg, "ok", {"accepted": True})
            else:
                reason = accepted if isinstance(accepted, str) else "refused"
                self._dispatch.reply(msg, "ok", {"accepted": False, "reason": reason})
            self._release(agent.id)

        inbox.running += 1
        self._run(handler, offer, agent.handoff_mode, done, (agent, entry))
