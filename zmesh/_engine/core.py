"""The mesh protocol engine of one node: frames, commands and time in; effects out.

No asyncio, no sockets, no clock reads: a driver (``zmesh.node.Node``, or the
simulator in ``zmesh.sim``) feeds it what the transport received and what the
API layer asked for, with the current time, then carries out
``engine.effects`` (see :mod:`.effects`) and calls :meth:`Engine.tick` at
:meth:`Engine.next_deadline`.

Batching (what leaves, and when) is :mod:`.outbound`'s.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

from .. import codec
from .._names import NODE_ADDRESS_PREFIX, printable
from ..errors import InvalidMessage, NodeClosed
from ..message import Message
from ..registry import NodeRecord, Registry
from . import inbound
from .config import (
    BATCH_BYTES,
    DISCOVERED_PATIENCE,
    HEADER_ALLOWANCE,
    LOCAL,
    MAX_LOGGED_DROPS,
    MAX_READY_KEYS,
    EngineConfig,
    first_endpoint,
)
from .effects import CLOSE, DEAD, OPEN, SEND, Effect
from .credit import Flow
from .identity import Identities
from .members import Members
from .outbound import Outbound
from .reliable import Reliable
from .requests import Key, Requests

__all__ = ["Engine", "EngineConfig", "first_endpoint"]

log = logging.getLogger("zmesh")

class Engine(Outbound):
    """One node's side of the mesh protocol."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.mesh = config.mesh
        self.node_id = config.node_id
        self.incarnation = config.incarnation
        self.key = f"{config.node_id}|{config.incarnation}"
        self.version = config.version
        self.max_payload = config.max_payload
        self.max_frame = config.max_payload + HEADER_ALLOWANCE
        self.liveness = config.liveness
        self.choose = config.choose
        self.registry = Registry(config.node_id, BATCH_BYTES)
        self.reliable = Reliable(self, config.store)
        self.requests = Requests(self.out, self.reliable.settle)
        self.members = Members(self)
        self.flow = Flow(self, config.window, config.window_bytes)
        self.effects: list[Effect] = []
        self.routers: tuple[str, ...] = ()
        self.pubs: tuple[str, ...] = ()
        self.seq = 0
        self.agents: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {}
        self.hold = False
        self.started = False
        self.closed = False
        self.stats: Counter[str] = Counter()
        # Counted once per message, so plain ints (a Counter costs three times as much).
        self.messages_sent = 0
        self.messages_received = 0
        self.dropped: Counter[str] = Counter()
        self.transitions: Counter[tuple[str, str]] = Counter()
        self.logged_drops: set[tuple[str, str]] = set()
        self.seeds: set[str] = set()  # endpoints given to connect(): knocked on until they answer, always
        self._outbox: dict[str, list[Any]] = {}
        self._pub_items: list[bytes] = []
        self._pub_size = 0
        self._links = 0
        self._now = 0.0
        self._next_tick = math.inf
        self.earliest = math.inf  # never later than the true next deadline; may be earlier
        self._pack = codec.ItemPacker(config.encoder)  # an engine is used from one thread
        self.decoder = config.decoder
        #: The public key (Z85) the frame being handled was authenticated with
        #: (keyed mode; None: keyless, or no frame). A peer keeps the one its HELLO came with.
        self.sender_public_key: str | None = None
        #: Router endpoints of the peers whose keys were revoked, by key (see revoke).
        self.revoked: dict[str, str] = {}
        self.identity = Identities(config.public_key, config.key_of_name, config.policy or {})

    # -- plumbing --------------------------------------------------------

    def out(self, effect: Effect) -> None:
        self.effects.append(effect)

    def take_effects(self) -> list[Effect]:
        effects, self.effects = self.effects, []
        return effects

    def open_link(self, endpoint: str) -> int:
        self._links += 1
        self.effects.append((OPEN, self._links, endpoint))
        return self._links

    def drop(self, reason: str, where: str, detail: str = "") -> None:
        self.dropped[reason] += 1
        key = (where, reason)
        if key not in self.logged_drops and len(self.logged_drops) < MAX_LOGGED_DROPS:
            self.logged_drops.add(key)
            peer = self.members.by_key.get(where)
            shown = peer.node_id if peer is not None else where  # a peer's key: its name
            shown = printable(shown)
            log.warning(
                "zmesh %s: dropped input from %s: %s%s (logged once per peer and reason)",
                self.node_id, shown or "unknown", reason, f" ({detail})" if detail else "",
            )

    # -- lifecycle -------------------------------------------------------

    def start(self, routers: tuple[str, ...], pubs: tuple[str, ...], now: float) -> None:
        """The transport is bound at these endpoints (first = preferred)."""
        self.routers, self.pubs = tuple(routers), tuple(pubs)
        self.started = True
        self._now = now
        self.registry.merge(self.local_record())
        self.reliable.restore(now)
        if self.liveness is not None:
            self._next_tick = now + self.liveness.heartbeat / 2
            self.earliest = self._next_tick

    def close(self, now: float) -> None:
        """Say goodbye to every peer, fail what is pending, close every link."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        self._now = now
        if self.started:
            bye = _bye_frame("closed")
            for peer in self.members.peers.values():
                self.effects.append((SEND, peer.link, bye))
        self.requests.fail_all(NodeClosed("the node was closed"))
        self.reliable.close()
        for peer in self.members.peers.values():
            self.effects.append((CLOSE, peer.link))
        for knock in self.members.knocks.values():
            self.effects.append((CLOSE, knock.link))
        self.members.peers.clear()
        self.members.by_key.clear()
        self.members.knocks.clear()
        self.members.waiting.clear()
        self.members.claims.clear()
        self.members.endpoints.clear()
        self.members.parked.clear()

    # -- the local record ------------------------------------------------

    def local_record(self) -> NodeRecord:
        return NodeRecord(
            node_id=self.node_id,
            incarnation=self.incarnation,
            mesh=self.mesh,
            version=self.version,
            router=self.routers[0] if self.routers else "",
            pub=self.pubs[0] if self.pubs else "",
            routers=self.routers,
            pubs=self.pubs,
            seq=self.seq,
            agents={a: caps for a, (caps, _) in self.agents.items()},
            subs={a: subs for a, (_, subs) in self.agents.items() if subs},
            max_payload=self.max_payload,
        )

    def set_agent(self, agent_id: str, capabilities: tuple[str, ...], subscriptions: frozenset[str]) -> None:
        """Host (or update) an agent; its capabilities and subscriptions go to every peer."""
        self.agents[agent_id] = (capabilities, subscriptions)
        self._record_changed()

    def remove_agent(self, agent_id: str) -> None:
        if self.agents.pop(agent_id, None) is not None:
            self._record_changed()

    def _record_changed(self) -> None:
        self.seq += 1
        record = self.local_record()
        self.registry.merge(record)
        if not self.started or self.closed:
            return
        item = codec.encode_control(codec.Update(record))
        for peer in self.members.peers.values():
            peer.update_sent = self._now
            self.enqueue(peer.node_id, item)

    def is_settled(self) -> bool:
        """Has every joined peer acknowledged our latest record?"""
        return all(p.acked_seq >= self.seq for p in self.members.peers.values() if p.joined)

    @property
    def peers(self) -> list[str]:
        """Ids of the peers that have fully joined."""
        return sorted(p.node_id for p in self.members.peers.values() if p.joined)

    # -- joining ---------------------------------------------------------

    def connect(self, endpoint: str, now: float) -> None:
        """Join through a member's router endpoint (a seed): knock until it answers."""
        self._now = now
        self.seeds.add(endpoint)
        self.members.knock(endpoint, None, now)

    def discovered(self, endpoint: str, now: float) -> None:
        """A member may live at this endpoint (mDNS, the in-process hub)."""
        self._now = now
        if not self.closed and endpoint not in self.routers:
            self.members.knock(endpoint, DISCOVERED_PATIENCE, now)

    def link_down(self, link: int, now: float) -> None:
        """The transport saw the connection under ``link`` break: its peer is
        gone for now (removed, and knocked on again in case it comes back)."""
        if self.closed:
            return
        self._now = now
        for peer in self.members.peers.values():
            if peer.link == link:
                self.members.remove(peer, "cut", "lost its connection", now)
                return

    def subscriber_ready(self, key: str, now: float) -> None:
        if self.closed:
            return
        self._now = now
        self.members.subscriber_ready(key)

    # -- time ------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Run every timer due at ``now``: liveness, knocks, request deadlines."""
        self._now = now
        self.requests.expire(now)
        if self.reliable.out:
            self.reliable.tick(now)
        if not self.closed:
            members = self.members
            if now >= self._next_tick or now >= members.next_tick():
                members.tick(now)
                if self.liveness is not None and now >= self._next_tick:
                    self._next_tick = now + self.liveness.heartbeat / 2
        self.earliest = self._compute_deadline()

    def _compute_deadline(self) -> float:
        if self.closed:
            return self.requests.next_deadline()
        return min(self._next_tick, self.requests.next_deadline(), self.members.next_tick(),
                   self.reliable.next_deadline())

    def note_deadline(self, when: float) -> None:
        """Something new is due at ``when`` (a request, a knock)."""
        if when < self.earliest:
            self.earliest = when

    def next_deadline(self) -> float:
        """When :meth:`tick` is next due (at worst a little early, never late);
        also the attribute ``earliest``."""
        return self.earliest

    def route(self, target: str) -> str | None:
        """Outbox key for an agent id (LOCAL or a node id), or None when no node hosts it."""
        if target in self.agents:
            return LOCAL
        node_id = self.registry.node_of(target)
        if node_id is None:
            if target.startswith(NODE_ADDRESS_PREFIX):  # a node itself (zmesh._names.node_address)
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
        """Encode for ``route`` (None: a broadcast, for every node); InvalidMessage
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
        if out is None:
            if not flow.is_open(route, target):
                return ""
            self._send_routed(msg, route, now)
            return route
        # The common case of a send loop, once per message: flow.has_room,
        # _send_routed, Flow.sent and encode, inline.
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
        """A message from ``origin`` (a node id, or LOCAL) left ``agent``'s inbox."""
        if not self.closed:
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

    def _send_routed(self, msg: Message, route: str, now: float, out: Any = None) -> None:
        """``out``: the flow's record for (route, target) if the caller has it."""
        item = self.encode(msg, route)
        if msg.qos:
            self.reliable.track(msg, item, route, now)
        size = len(item)
        if out is None:
            self.flow.sent(route, msg.target, size)
        else:  # Flow.sent, inline: once per message of a send loop
            out.sent += 1
            if size > self.flow.big:
                out.sizes.append((out.sent, size))
                out.bytes += size
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
        """Publish to every subscribed agent; returns how many (other than the sender) it reaches."""
        if self.closed:
            raise NodeClosed(f"node {self.node_id!r} is closed")
        item = self.encode(msg)
        reached = 0
        remote = local = False
        for agent_id, node_id in self.registry.subscribers(msg.topic):
            if agent_id == msg.sender:
                continue
            reached += 1
            if node_id == self.node_id:
                local = True
            else:
                remote = True
        if local:
            self.enqueue(LOCAL, item)
        if remote:
            self.publish(item)
        self.stats["broadcasts"] += 1
        return reached

    # -- inbound ---------------------------------------------------------

    def receive_direct(self, key: str, frame: bytes, now: float, public_key: str | None = None) -> None:
        """A frame arrived on our direct inbox from the sender with this key;
        ``public_key``: the key its connection authenticated with (keyed mode)."""
        if self.closed:
            return  # until the driver closes its transport: nothing joins a closed node
        self._now = now
        self.stats["bytes_received"] += len(frame)
        self.sender_public_key = public_key
        inbound.direct(self, key, frame)

    def receive_published(self, frame: bytes, now: float, public_key: str | None = None) -> None:
        """A frame arrived from a publisher we are attached to (whose key,
        in keyed mode, is ``public_key``)."""
        if self.closed:
            return
        self._now = now
        self.sender_public_key = public_key
        inbound.published(self, frame)

    def revoke(self, public_key: str, now: float) -> None:
        """``public_key`` is no longer trusted: every peer that joined with it
        is told BYE (so it stops sending, and fails what it waits for from us,
        at once) and leaves. Where it lived is kept, for :meth:`readmit`."""
        if self.closed:
            return
        self._now = now
        self.identity.forget_key(public_key)
        bye = _bye_frame("distrusted")
        for peer in [p for p in self.members.peers.values() if p.public_key == public_key]:
            self.effects.append((SEND, peer.link, bye))
            self.revoked[public_key] = peer.router
            while len(self.revoked) > MAX_READY_KEYS:  # bounded: the oldest is forgotten
                del self.revoked[next(iter(self.revoked))]
            self.members.remove(peer, "bye", "its key is no longer trusted", now)

    def readmit(self, public_key: str, now: float) -> None:
        """``public_key`` is trusted again: knock on where its node lived when it
        was revoked (it was told BYE, so it will not come back by itself)."""
        if self.closed:
            return
        self._now = now
        router = self.revoked.pop(public_key, None)
        if router is not None and router not in self.members.knocks:
            self.members.knock(router, DISCOVERED_PATIENCE, now)

    @property
    def now(self) -> float:
        """The latest time the driver told us."""
        return self._now


def _bye_frame(reason: str) -> bytes:
    """A frame that says goodbye, sent straight to a link (no outbox: the link closes next)."""
    return codec.join_frame([codec.encode_control(codec.Bye(reason))])
