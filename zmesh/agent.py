"""Agents: the peers that talk. Every agent can do everything; none is special."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, TypeVar, Union

from ._runtime.handlers import handler_mode
from ._runtime.agent_port import AgentHost
from ._runtime.envelopes import envelope_message
from ._runtime.handoff import HANDOFF_TOPIC, Handoff, HandoffResult
from ._runtime.routes import Routes
from ._agent_capability import OWN_ID as _OWN_ID
from ._agent_capability import CapabilityCalls
from ._agent_handoff import HANDOFF_GRACE, HandoffCalls  # noqa: F401 - HANDOFF_GRACE: as before, from here too
from ._agent_presence import PresenceProperties
from ._agent_stream import StreamCalls
from ._runtime.streams import is_stream_id
from .registry import Will
from .errors import InvalidMessage, NodeClosed
from .message import MESSAGE_TYPES, Message, check_options, new_request_id
from .topics import _valid_topics as _checked_topics
from .topics import check_pattern, check_topic

if TYPE_CHECKING:
    from .node import Node

__all__ = ["Agent", "AgentHost", "Handoff", "HandoffResult", "Handler", "HandoffHandler", "HANDOFF_TOPIC"]


Handler = Callable[[Message], Any]
HandoffHandler = Callable[["Handoff"], Union[bool, Awaitable[bool]]]
H = TypeVar("H", bound=Callable[..., Any])

_SENDABLE_TYPES = frozenset(t for t in MESSAGE_TYPES if t != "result")


class Agent(PresenceProperties, HandoffCalls, CapabilityCalls, StreamCalls):
    """An agent hosted by a node. Create with ``node.agent("id")``."""

    def __init__(
        self, node: Node, host: AgentHost, agent_id: str, capabilities: tuple[str, ...], routes: Routes,
        meta: Mapping[str, Any] | None = None, will: Will | None = None,
    ) -> None:
        self.node = node
        self._host = host
        self.id = agent_id
        self._capabilities = capabilities
        self._meta: Mapping[str, Any] = MappingProxyType(dict(meta or {}))
        self._will = will
        self._routes = routes  # its on() handlers and its subscriptions (the node's delivery reads them too)
        #: The ``on()`` handler that takes a topic and where it runs ("async", "thread" or "inline").
        self.handler_entry: Callable[[str], tuple[Handler, str] | None] = routes.handler_entry
        self._handoff_handler: HandoffHandler | None = None
        self._handoff_mode = ""
        self._tasks: set[str] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"<zmesh.Agent {self.id!r} on {self.node.id!r}>"

    # -- handlers --------------------------------------------------------

    def on(self, topic: str, *, inline: bool = False) -> Callable[[H], H]:
        """Decorator: handle messages on ``topic`` (a topic or a wildcard pattern).

        Direct messages and requests go to these handlers; broadcasts reach
        the agent through its subscriptions (see :meth:`subscribe`).

        The handler gets the Message; for a request its return value is the
        reply payload (return ``zmesh.DEFERRED`` to answer later with ``reply``).
        An ``async def`` handler runs on the node's event loop; a plain
        ``def`` handler in the node's worker pool, so it may block; with
        ``inline=True`` a plain handler known to be quick runs on the loop.
        """
        check_pattern(topic)

        def register(fn: H) -> H:
            self.add_handler(topic, fn, inline=inline)
            return fn

        return register

    def add_handler(self, topic: str, handler: Handler, *, inline: bool = False) -> None:
        """Like :meth:`on`, without the decorator."""
        check_pattern(topic)
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        self._routes.add(topic, (handler, handler_mode(handler, inline)))

    def remove_handler(self, topic: str) -> None:
        """Remove the handler :meth:`on` or :meth:`add_handler` set for ``topic``."""
        self._routes.remove(topic)

    def on_handoff(self, fn: H) -> H:
        """Decorator: decide on offered tasks; return True to accept ownership."""
        if not callable(fn):
            raise TypeError(f"handoff handler must be callable, got {fn!r}")
        self._handoff_handler = fn
        self._handoff_mode = handler_mode(fn)
        return fn

    @property
    def handoff_handler(self) -> HandoffHandler | None:
        return self._handoff_handler

    def handler_for(self, topic: str) -> Handler | None:
        """The ``on()`` handler that takes ``topic``: an exact one first, else the first matching pattern."""
        entry = self.handler_entry(topic)
        return entry[0] if entry is not None else None

    @property
    def handoff_mode(self) -> str:
        return self._handoff_mode

    # -- messages --------------------------------------------------------

    def _message(
        self,
        target: str,
        topic: str,
        payload: Any,
        mtype: str,
        priority: int,
        qos: int,
        ttl: float | None,
        trace_id: str | None,
        correlation_id: str = "",
    ) -> Message:
        if self._closed:
            raise NodeClosed(f"agent {self.id!r} is closed")
        if target.__class__ is not str:
            raise InvalidMessage(f"target must be an agent id string, got {target!r}")
        if topic.__class__ is not str or topic not in _checked_topics:  # the common case skips the call
            check_topic(topic)
        if not (priority == 3 and qos == 0 and ttl is None):  # the defaults need no check
            check_options(priority, qos, ttl)
        if mtype not in _SENDABLE_TYPES:
            raise InvalidMessage(f"type must be one of {sorted(_SENDABLE_TYPES)}, got {mtype!r}")
        msg = Message(
            mtype,
            self.id,
            target,
            topic,
            payload,
            correlation_id,
            self.id if correlation_id else "",
            priority,
            qos,
            ttl,
        )
        if correlation_id is _OWN_ID:  # a new request: its own id, unguessable, pairs the reply
            msg.id = msg.correlation_id = new_request_id()
        self._host.stamp(msg, trace_id)
        return msg

    async def send(
        self,
        target: str,
        topic: str,
        payload: Any = None,
        *,
        qos: int = 0,
        priority: int = 3,
        ttl: float | None = None,
        type: str = "notify",
        trace_id: str | None = None,
        timeout: float | None = None,
    ) -> Message:
        """Fire-and-forget. Returns the message sent.

        Waits while ``target``'s inbox holds as much from this node as flow
        control allows (backpressure); with ``timeout`` raises Backpressure
        after that many seconds of waiting, sending nothing. Raises
        AgentNotRegistered at once (and dead-letters) when no node hosts
        ``target``; InvalidMessage, sending nothing, when the message is bad.
        """
        msg = self._message(target, topic, payload, type, priority, qos, ttl, trace_id)
        host = self._host
        if not host.send_now(msg, timeout):  # the common case costs no coroutine
            await host.send(msg, timeout)
        return msg

    async def request(
        self,
        target: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        qos: int = 0,
        priority: int = 3,
        ttl: float | None = None,
        type: str = "query",
        trace_id: str | None = None,
    ) -> Message:
        """Send a request and wait for the reply Message.

        Raises Timeout (and dead-letters) when no reply comes in ``timeout``
        seconds, NoHandler, HandlerError (at once, with the remote error),
        AgentNotRegistered, or PeerLost if the target's node goes away.
        Without a ``ttl`` the request's ttl is ``timeout``: a request still
        waiting in the target's inbox when its requester stops waiting is
        never handled, and a handler already running is stopped (see
        :meth:`cancel`). A handler that streams answers with the list of its chunks.
        """
        msg = self._message(target, topic, payload, type, priority, qos, ttl, trace_id, _OWN_ID)
        if ttl is None and (timeout.__class__ is float or timeout.__class__ is int) and timeout > 0:
            msg.ttl = timeout  # nobody waits for the answer after that: do not start the work
        return await self._host.request(msg, timeout, "request")

    async def cancel(self, request_id: str) -> bool:
        """Cancel this agent's pending ``request`` (or ``delegate``) whose
        correlation id is ``request_id``, from anywhere on the node: the call
        waiting for it raises ``asyncio.CancelledError`` and its handler is
        stopped, as when the caller's own Task is cancelled. A delegate keeps
        its request's id, so a planner can stop the work it delegated for a
        request it got (``agent.cancel(msg.correlation_id)``). False when no
        such request is pending (it ended already)."""
        if not isinstance(request_id, str):
            raise InvalidMessage(f"request_id must be a correlation id string, got {request_id!r}")
        return self._host.cancel_request(self.id, request_id)

    async def delegate(
        self, target: str, request: Message, *, timeout: float = 30.0, topic: str | None = None
    ) -> Message:
        """Forward ``request`` to ``target`` on its requester's behalf.

        The target sees this agent as the sender; the correlation id and trace
        id of ``request`` are kept end to end. Returns the target's reply,
        which a handler can return as its own reply. For a streamed request
        it returns at once, the reply's payload the target's
        :class:`~zmesh.Stream`: returned, it is relayed chunk by chunk.
        """
        if not isinstance(request, Message):
            raise InvalidMessage(f"delegate needs the Message being handled, got {request!r}")
        if is_stream_id(request.correlation_id):
            stream = self._host.stream(self._message(
                target, topic or request.topic, request.payload,
                request.type if request.type != "result" else "query", request.priority, 0, request.ttl,
                request.trace_id or None, request.correlation_id), timeout)
            return Message("result", target, self.id, topic or request.topic, stream, request.correlation_id,
                           trace_id=request.trace_id)
        msg = self._message(
            target,
            topic or request.topic,
            request.payload,
            request.type if request.type != "result" else "query",
            request.priority,
            request.qos,
            request.ttl,
            request.trace_id or None,
            request.correlation_id or new_request_id(),
        )
        return await self._host.request(msg, timeout, "delegate")

    async def send_envelope(self, envelope: dict[str, Any], *, timeout: float | None = None) -> Message:
        """Send the message a seed-design envelope describes, from this agent
        (see *The envelope* in the guide), for a system that speaks envelopes.

        Its ``msg_id``, ``correlation_id``, ``trace_id``, ``timestamp`` (the
        ttl counts from it), roles and options are kept; ``sender`` may only
        be this agent. With a ``correlation_id`` it is a request: this waits
        for the reply (``timeout``, default the ttl, else 30 s) and returns it.
        Otherwise returns the message sent: to ``target``, or without one a
        broadcast on ``topic``. InvalidMessage, sending nothing, when the
        envelope is not one this agent can send.
        """
        if self._closed:
            raise NodeClosed(f"agent {self.id!r} is closed")
        msg = envelope_message(self.id, envelope)
        stamp = msg.timestamp
        self._host.stamp(msg, msg.trace_id or None)
        if stamp:
            msg.timestamp = stamp
        if msg.correlation_id:
            wait = timeout if timeout is not None else (msg.ttl or 30.0)
            if msg.ttl is None:
                msg.ttl = wait  # as request(): nobody waits for the answer after that
            return await self._host.request(msg, wait, "request")
        if not msg.target:
            self._host.broadcast(msg)
        elif not self._host.send_now(msg, timeout):
            await self._host.send(msg, timeout)
        return msg

    async def reply(self, request: Message, payload: Any = None) -> None:
        """Answer ``request`` later (its handler returned ``zmesh.DEFERRED``)."""
        if not isinstance(request, Message) or not request.correlation_id:
            raise InvalidMessage("reply needs a request Message (one with a correlation id)")
        if request.target != self.id:
            raise InvalidMessage(f"agent {self.id!r} cannot reply to a request for {request.target!r}")
        self._host.reply(request, "ok", payload)

    # -- pub/sub ---------------------------------------------------------

    async def subscribe(self, pattern: str, handler: Handler | None = None, *, inline: bool = False) -> None:
        """Receive broadcasts on topics matching ``pattern`` (``*`` one word, ``>`` the rest).

        With ``handler``, that handler takes them (it runs like an ``on()``
        handler, see ``inline``), and only broadcasts: it never answers
        requests or direct messages, which stay with the ``on()`` handlers.
        Without, the ``on()`` handler for each broadcast's topic takes it.
        Every matching subscription runs once per broadcast. Subscribing
        again to the same pattern is still one subscription, taken by the
        handler given last. Returns once every peer has acknowledged the
        subscription (or after the node's settle timeout), so a broadcast
        from any current member counts this agent. A new subscription gets
        the mesh's retained values on matching topics first (the newest of
        each; see ``broadcast(retain=True)``), before any live broadcast.
        """
        check_pattern(pattern)
        entry = None
        if handler is not None:
            if not callable(handler):
                raise TypeError(f"handler must be callable, got {handler!r}")
            entry = (handler, handler_mode(handler, inline))
        subscriptions = self._routes.subscriptions
        new = pattern not in subscriptions
        subscriptions[pattern] = entry
        if not new:
            await self._host.settled()
            return
        route = pattern if entry is not None else ""
        self._host.hold_broadcasts(self.id, pattern, route)  # from now on, until its retained values came
        try:
            self._host.changed(self)
            await self._host.settled()
        finally:
            await self._host.retained_first(self.id, pattern, route)

    async def unsubscribe(self, pattern: str) -> None:
        """Stop receiving broadcasts on ``pattern``; its handler (if any) goes with it."""
        if pattern in self._routes.subscriptions:
            del self._routes.subscriptions[pattern]
            self._host.changed(self)
        await self._host.settled()

    @property
    def subscriptions(self) -> frozenset[str]:
        return frozenset(self._routes.subscriptions)

    async def broadcast(
        self,
        topic: str,
        payload: Any = None,
        *,
        priority: int = 3,
        ttl: float | None = None,
        trace_id: str | None = None,
        retain: bool = False,
    ) -> int:
        """Publish to every agent subscribed to ``topic``; returns how many it reached.

        The count is the number of subscribed agents (other than this one)
        known to this node at publish time. With ``retain``, this node also
        keeps it as the topic's last value, which every later subscription
        on a matching pattern gets first (until its ``ttl`` runs out, this
        node leaves, or a retained broadcast with a None payload clears it).
        """
        msg = self._message("", topic, payload, "notify", priority, 0, ttl, trace_id)
        if retain:
            self._host.retain(msg)
        return self._host.broadcast(msg)

    async def close(self) -> None:
        """Unregister this agent from the mesh."""
        if not self._closed:
            self._closed = True
            self._host.remove(self.id)
            if not self._host.closed:
                await self._host.settled()
