"""The mesh protocol engine of one node: frames, commands and time in; effects out.

No asyncio, no sockets, no clock reads: a driver (``zmesh.node.Node``, or the
simulator in ``zmesh.sim``) feeds it what the transport received and what the
API layer asked for, with the current time, then carries out
``engine.effects`` (see :mod:`.effects`) and calls :meth:`Engine.tick` at
:meth:`Engine.next_deadline`.

What the API layer asks for (send, request, reply, broadcast) is
:mod:`.commands`'; batching (what leaves, and when) is :mod:`.outbound`'s.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any, Mapping

from .._wire import codec
from .._wire.names import printable
from ..errors import NodeClosed
from ..registry import NodeRecord, Registry, Will
from . import inbound
from .commands import Commands
from .config import (
    BATCH_BYTES,
    DISCOVERED_PATIENCE,
    HEADER_ALLOWANCE,
    MAX_LOGGED_DROPS,
    MAX_READY_KEYS,
    EngineConfig,
    first_endpoint,
)
from .credit import Flow
from .effects import CLOSE, OPEN, SEND, Effect
from .identity import Identities
from .members import Members
from .quotas import Ledger
from .reliable import Reliable
from .requests import Requests

__all__ = ["Engine", "EngineConfig", "first_endpoint"]

log = logging.getLogger("zmesh")

class Engine(Commands):
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
        self.agent_meta: dict[str, Mapping[str, Any]] = {}  # the agents that have one
        self.agent_wills: dict[str, Will] = {}  # the agents that have one
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
        self._queued_update: dict[str, tuple[list[Any], int, bytes, frozenset[str]]] = {}
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
        self.ledger = Ledger(config.quotas)

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
            # A frame in flight from a peer when it left (all nodes closing at
            # once, a connection cut): counted, but no news worth a warning.
            level = logging.DEBUG if where in self.members.departed else logging.WARNING
            log.log(
                level,
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
            meta=dict(self.agent_meta),
            wills=dict(self.agent_wills),
        )

    def set_agent(self, agent_id: str, capabilities: tuple[str, ...], subscriptions: frozenset[str],
                  meta: Mapping[str, Any] | None = None, will: Will | None = None) -> None:
        """Host (or update) an agent; its capabilities, subscriptions, meta and will go to every peer."""
        self.agents[agent_id] = (capabilities, subscriptions)
        if meta:
            self.agent_meta[agent_id] = meta
        else:
            self.agent_meta.pop(agent_id, None)
        if will is not None:
            self.agent_wills[agent_id] = will
        else:
            self.agent_wills.pop(agent_id, None)
        self._record_changed()

    def remove_agent(self, agent_id: str) -> None:
        self.agent_meta.pop(agent_id, None)
        self.agent_wills.pop(agent_id, None)
        if self.agents.pop(agent_id, None) is not None:
            self._record_changed()

    def _record_changed(self) -> None:
        self.seq += 1
        record = self.local_record()
        self.registry.merge(record)
        if not self.started or self.closed:
            return
        item = codec.encode_control(codec.Update(record))
        agents = frozenset(record.agents)
        for peer in self.members.peers.values():
            peer.update_sent = self._now
            self.enqueue_update(peer.node_id, item, agents)

    def is_settled(self) -> bool:
        """Has every joined peer acknowledged our latest record?"""
        return all(p.acked_seq >= self.seq for p in self.members.peers.values() if p.joined)

    @property
    def peers(self) -> list[str]:
        """Ids of the peers that have fully joined."""
        return sorted(p.node_id for p in self.members.peers.values() if p.joined)

    # -- joining ---------------------------------------------------------

    @property
    def joining(self) -> bool:
        """Knocking on a seed or an endpoint heard of, or shaking hands with a
        peer. (A lost peer knocked on again in case it comes back is not
        joining: its agents left the registry with it.)"""
        members = self.members
        return any(k.state == "knocking" and not k.node_id for k in members.knocks.values()) or any(
            not p.joined for p in members.peers.values())

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

    def subscriber_ready(self, key: str, now: float, public_key: str | None = None) -> None:
        """The subscriber with node key ``key`` receives our publications now
        (keyed mode: ``public_key``, the key of its connection)."""
        if self.closed:
            return
        self._now = now
        self.members.subscriber_ready(key, public_key, now)

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

    # -- inbound ---------------------------------------------------------

    def receive_direct(self, key: str, frame: codec.Received, now: float, public_key: str | None = None) -> None:
        """A frame arrived on our direct inbox from the sender with this key;
        ``public_key``: the key its connection authenticated with (keyed mode)."""
        if self.closed:
            return  # until the driver closes its transport: nothing joins a closed node
        self._now = now
        self.stats["bytes_received"] += len(frame)
        self.sender_public_key = public_key
        inbound.direct(self, key, frame)

    def receive_published(self, frame: codec.Received, now: float, public_key: str | None = None) -> None:
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
