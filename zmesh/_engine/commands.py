"""What the API layer asks the engine for (the engine's command half):
routing, encoding against every receiver's limit, flow control's admission,
and sending messages, requests, replies and broadcasts.

A mixin of :class:`.core.Engine`, like :class:`.outbound.Outbound` below it:
the state it uses is the engine's, declared here for the type checker.
"""

from __future__ import annotations

from typing import Any, Callable

from .._wire import codec
from .._wire.names import NODE_ADDRESS_PREFIX
from ..errors import InvalidMessage, NodeClosed
from ..message import Message
from .config import LOCAL, EngineConfig
from .credit import Flow
from .effects import DEAD
from .outbound import Outbound
from .requests import Key, Requests

__all__ = ["Commands"]


class Commands(Outbound):
    # Set by the engine (see core.Engine.__init__).
    config: EngineConfig
    drop: Callable[[str, str, str], None]  # Engine.drop: count, and log once per peer and reason
    agents: dict[str, tuple[tuple[str, ...], frozenset[str]]]
    flow: Flow
    requests: Requests
    max_payload: int
    closed: bool
    earliest: float
    messages_sent: int
    _pack: codec.ItemPacker

    def route(self, target: str) -> str | None:
        """Outbox key for an agent id (LOCAL or a node id), or None when no node hosts it."""
        if target in self.agents:
            return LOCAL
        node_id = self.registry.node_of(target)
        if node_id is None:
            if target.startswith(NODE_ADDRESS_PREFIX):  # a node itself (zmesh._wire.names.node_address)
                node_id = target[len(NODE_ADDRESS_PREFIX):]
                if node_id == self.node_id:
                    return LOCAL
                return node_id if node_id in self.members.peers else None
            # A peer whose HELLO arrived but whose SUB is not attached yet can
            # already send us requests; its replies must still find it.
            for peer in self.members.peers.values():
                if not peer.joined and target in peer.record.agents:
                    return peer.node_id
        return node_id

    # -- local commands --------------------------------------------------

    def encode(self, msg: Message, route: str | None = None) -> bytes:
        """Encode for ``route`` (None: whichever node hosts the target); InvalidMessage
        when it is over our limit or the receiving node's."""
        item = codec.encode_message(msg, self.max_payload, self._pack)
        if len(item) > self.registry.floor and route != LOCAL:
            return self._check_limit(msg, item, route)
        return item

    def _check_limit(self, msg: Message, item: bytes, route: str | None) -> bytes:
        """``item`` (``msg`` encoded) is over some node's limit: is it over ``route``'s?"""
        limit = self.registry.floor if route is None else self.registry.max_payload(route)
        if limit is None:  # joining: not in the registry yet
            peer = self.members.peers.get(route or "")
            limit = peer.record.max_payload if peer is not None else self.max_payload
        if len(item) > limit:
            whose = " of some node in the mesh" if route is None else f" of node {route!r}"
            raise codec.too_big(msg, len(item), limit, whose, self._pack)
        return item

    def admit(self, target: str) -> str | None:
        """The route (outbox key) to agent ``target`` if flow control admits one
        more message now; "" when its window is closed (a CREDIT effect for
        (node, target) says when to ask again); None when no node hosts it.
        Pass the route on to :meth:`send` or :meth:`request`.
        """
        route = self.route(target)
        if route is None:
            return None
        return route if self.flow.is_open(route, target) else ""

    def send_if_open(self, msg: Message, now: float) -> str | None:
        """:meth:`admit` and :meth:`send` in one call (the send loop's path):
        the route ``msg`` went by; "" when its window is closed (nothing
        sent); None when no node hosts its target."""
        if self.closed:
            raise NodeClosed(f"node {self.node_id!r} is closed")
        target = msg.target
        route = LOCAL if target in self.agents else self.route(target)
        if route is None:
            return None
        flow = self.flow
        out = flow.out.get((route, target))
        if out is None:  # nothing sent there yet: its window is open
            self._send_routed(msg, route, now)
            return route
        # The common case of a send loop, once per message: Flow.is_open's
        # test, then _send_routed (encode and Flow.sent included), inline
        # (3-4 % of a send, see docs/architecture.md, Hand-copied hot paths).
        outstanding = out.sent - out.taken
        if not (outstanding < flow.window and (out.bytes < flow.window_bytes or outstanding == 0)):
            if not flow.is_open(route, target):
                return ""
        item = codec.encode_message(msg, self.max_payload, self._pack)
        size = len(item)
        if size > self.registry.floor and route != LOCAL:
            item = self._check_limit(msg, item, route)
        if msg.qos:
            self.reliable.track(msg, item, route, now)
        out.sent += 1
        if size > flow.big:
            out.sizes.append((out.sent, size))
            out.bytes += size
        self.enqueue(route, item, size)
        self.messages_sent += 1
        return route

    def taken(self, origin: str, agent: str) -> None:
        """A message from ``origin`` (a node id, or LOCAL) left ``agent``'s inbox
        (:meth:`Flow.taken`, which does nothing once the engine is closed)."""
        self.flow.taken(origin, agent)

    def send(self, msg: Message, route: str | None = None, now: float | None = None) -> bool:
        """Queue a message to its target; False (nothing sent) when no node hosts it.

        Raises InvalidMessage when it cannot be encoded, NodeClosed when closed.
        Flow control is the caller's: ``route`` comes from :meth:`admit`
        (None: route here, unchecked).
        """
        if self.closed:
            raise NodeClosed(f"node {self.node_id!r} is closed")
        if route is None:
            route = self.route(msg.target)
            if route is None:
                return False
        self._send_routed(msg, route, self._now if now is None else now)
        return True

    def _send_routed(self, msg: Message, route: str, now: float) -> None:
        item = self.encode(msg, route)
        if msg.qos:
            self.reliable.track(msg, item, route, now)
        size = len(item)
        self.flow.sent(route, msg.target, size)
        self.enqueue(route, item, size)
        self.messages_sent += 1

    def request(self, msg: Message, deadline: float, now: float, route: str | None = None) -> Key | None:
        """Send a request and track its reply until ``deadline``; None when
        unroutable. ``route`` as for :meth:`send`."""
        if self.closed:
            raise NodeClosed(f"node {self.node_id!r} is closed")
        self._now = now
        if route is None:
            route = self.route(msg.target)
            if route is None:
                return None
        key = (msg.reply_to, msg.correlation_id)
        if key in self.requests.pending:
            raise InvalidMessage(f"a request with correlation id {msg.correlation_id!r} is already pending")
        item = self.encode(msg, route)
        self.requests.add(msg, self.node_id if route == LOCAL else route, deadline, deadline - now)
        if deadline < self.earliest:
            self.earliest = deadline
        if msg.qos:
            self.reliable.track(msg, item, route, now, deadline)
        self.flow.sent(route, msg.target, len(item))
        self.enqueue(route, item)
        self.stats["requests_sent"] += 1
        return key

    def forget_request(self, key: Key) -> None:
        self.requests.forget(key)

    def reply(self, reply: Message) -> bytes:
        """Send a reply (returned encoded); dead-lettered here when its requester is gone."""
        route = self.route(reply.target)
        try:
            item = self.encode(reply, route)
        except InvalidMessage as exc:
            # The handler's result cannot travel: say so here (counted, logged
            # once, dead-lettered) and tell the requester instead.
            self.drop("unencodable_reply", reply.sender, str(exc)[:200])
            self.effects.append((DEAD, Message(reply.type, reply.sender, reply.target, reply.topic, None,
                                               reply.correlation_id, "", reply.priority, reply.qos, None,
                                               reply.timestamp, reply.trace_id, "error", reply.id),
                                 "handler_error", f"its result cannot be sent: {exc}", reply.target))
            reply.status = "error"
            reply.payload = {"type": "InvalidMessage", "message": str(exc)[:512]}
            try:
                item = self.encode(reply, route)
            except InvalidMessage:
                reply.trace_id = ""  # only a trace id near the limit leaves no room for the error
                item = self.encode(reply, route)
        if route is not None:
            self.enqueue(route, item)
        elif not self.members.parked.park(reply.target, item, reply):
            self.effects.append((DEAD, reply, "not_found", "the requester is gone", reply.target))
        return item

    def reply_status(self, msg: Message, status: str, payload: Any) -> None:
        """Answer request ``msg`` with ``status`` ("ok", or why it failed here)."""
        if msg.qos >= 2:
            self.reliable.record(msg)  # before the reply is queued: it may leave at once
        item = self.reply(
            Message("result", msg.target, msg.reply_to or msg.sender, msg.topic, payload,
                    msg.correlation_id, "", msg.priority, msg.qos, None, self.config.wall_clock(),
                    msg.trace_id, status, self.config.new_id())
        )
        if msg.qos:
            self.reliable.done("", msg, item)  # a repeat of the request gets this reply again

    def handled(self, origin: str, msg: Message) -> None:
        """The handler of one-way message ``msg`` (qos >= 1) from ``origin`` finished:
        acknowledge it."""
        if not self.closed:
            self.reliable.done(origin, msg)

    def unhandled(self, origin: str, msg: Message) -> None:
        """``msg`` (qos >= 1) from ``origin`` was dropped before its handler ran:
        its sender is told to send it again."""
        if not self.closed:
            self.reliable.forget(origin, msg)

    def broadcast(self, msg: Message) -> int:
        """Publish to every subscribed agent; returns how many (other than the
        sender) it reaches. A node whose limit it is over is left out and
        counted (``too_big_for_peer``): it fails for that node alone."""
        if self.closed:
            raise NodeClosed(f"node {self.node_id!r} is closed")
        item = codec.encode_message(msg, self.max_payload, self._pack)
        registry = self.registry
        over = len(item) > registry.floor
        reached = 0
        remote = local = False
        left_out: set[str] = set()
        for agent_id, node_id in registry.subscribers(msg.topic):
            if agent_id == msg.sender:
                continue
            if node_id == self.node_id:
                local = True
            elif over and len(item) > (registry.max_payload(node_id) or self.max_payload):
                left_out.add(node_id)
                continue
            else:
                remote = True
            reached += 1
        for node_id in left_out:
            self.drop("too_big_for_peer", node_id,
                      f"a broadcast of {len(item)} bytes is over its limit of {registry.max_payload(node_id)}")
        if local:
            self.enqueue(LOCAL, item)
        if remote:
            self.publish(item)
        self.stats["broadcasts"] += 1
        return reached
