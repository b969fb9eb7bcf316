"""Membership over a message-level transport (internal): this node's record,
and the registry the others' records fill (see :mod:`.message_mesh`).

A record is :class:`~zmesh.registry.NodeRecord` as msgpack. Ours is put on
every change of our agents; a node that reads one answers its node with the
record's ``seq`` (a message on :data:`RECORD_SEEN` to its node address), so
"settled" means what it means over frames: every peer has our latest.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping

import msgpack

from .._engine import EngineConfig
from .._wire.names import NODE_ADDRESS_PREFIX, node_address
from ..errors import FrameError
from ..message import Message
from ..registry import MeshEvent, NodeRecord, Registry, Will, parse_record
from ..transport.message import MessageTransport, MessageWire

__all__ = ["Records", "RECORD_SEEN", "GONE_DETAIL"]

#: The topic of "I have your record up to this seq", from node address to node address.
RECORD_SEEN = "zmesh.record_seen"
#: The ``peer_left`` detail of a node whose record went without its goodbye record first.
GONE_DETAIL = "went without a goodbye (its record expired or was taken away)"


class Records:
    """This node's agents and record, and the registry of everyone's."""

    def __init__(
        self, config: EngineConfig, transport: MessageTransport, wire: MessageWire,
        drop: Callable[[str, str, str], None],
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.transport = transport
        self.registry = Registry(config.node_id)
        #: Hosted agents: id -> (capabilities, subscriptions).
        self.agents: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {}
        self.agent_meta: dict[str, Mapping[str, Any]] = {}  # the agents that have one
        self.agent_wills: dict[str, Will] = {}  # the agents that have one
        #: Whether the transport is started (addresses, patterns and records reach it).
        self.live = False
        #: The node is closing in good order: its record carries no wills any more.
        self.closing = False
        #: Every record there was at start has been read.
        self.loaded = False
        self._patterns: Counter[str] = Counter()  # pattern -> how many local agents subscribe to it
        self._seq = 0
        self._seen_by: dict[str, int] = {}  # peer -> the latest seq of our record it has
        self._wire = wire
        self._drop = drop
        self.registry.merge(self.record())

    def go_live(self) -> None:
        """The transport is started: listen, subscribe and put our record."""
        self.live = True
        transport = self.transport
        transport.listen(node_address(self.node_id))
        for agent_id in self.agents:
            transport.listen(agent_id)
        for pattern in self._patterns:
            transport.subscribe(pattern)
        self._put()

    @property
    def peers(self) -> list[str]:
        return sorted(r.node_id for r in self.registry.nodes() if r.node_id != self.node_id)

    # -- ours ------------------------------------------------------------

    def set_agent(self, agent_id: str, capabilities: tuple[str, ...], subscriptions: frozenset[str],
                  meta: Mapping[str, Any] | None = None, will: Will | None = None) -> None:
        old = self.agents.get(agent_id)
        self.agents[agent_id] = (capabilities, subscriptions)
        if meta:
            self.agent_meta[agent_id] = meta
        else:
            self.agent_meta.pop(agent_id, None)
        if will is not None and not self.closing:  # a closing node has withdrawn its wills
            self.agent_wills[agent_id] = will
        else:
            self.agent_wills.pop(agent_id, None)
        if self.live and old is None:
            self.transport.listen(agent_id)
        self._repattern(old[1] if old is not None else frozenset(), subscriptions)
        self._changed()

    def remove_agent(self, agent_id: str) -> None:
        self.agent_meta.pop(agent_id, None)
        self.agent_wills.pop(agent_id, None)
        old = self.agents.pop(agent_id, None)
        if old is None:
            return
        if self.live:
            self.transport.unlisten(agent_id)
        self._repattern(old[1], frozenset())
        self._changed()

    def _repattern(self, old: frozenset[str], new: frozenset[str]) -> None:
        for pattern in new - old:
            self._patterns[pattern] += 1
            if self._patterns[pattern] == 1 and self.live:
                self.transport.subscribe(pattern)
        for pattern in old - new:
            self._patterns[pattern] -= 1
            if self._patterns[pattern] == 0:
                del self._patterns[pattern]
                if self.live:
                    self.transport.unsubscribe(pattern)

    def record(self) -> NodeRecord:
        config, agents = self.config, self.agents
        return NodeRecord(
            node_id=self.node_id, incarnation=config.incarnation, mesh=config.mesh, version=config.version,
            router="", pub="", routers=(), pubs=(), seq=self._seq,
            agents={a: caps for a, (caps, _) in agents.items()},
            subs={a: subs for a, (_, subs) in agents.items() if subs},
            max_payload=config.max_payload,
            meta=dict(self.agent_meta),
            wills=dict(self.agent_wills),
            bye=self.closing,
        )

    def say_goodbye(self) -> bool:
        """The node is closing in good order: put our last record, marked
        ``bye`` and without wills, so a peer that sees it go next knows it
        left (and publishes no will). True if it had wills: a peer must have
        that record before it sees ours go, or it takes the going for a death."""
        had_wills = bool(self.agent_wills)
        self.closing = True
        self.agent_wills.clear()
        self._changed()
        return had_wills

    def _changed(self) -> None:
        self._seq += 1
        self.registry.merge(self.record())
        if self.live:
            self._put()

    def _put(self) -> None:
        self.transport.put_record(msgpack.packb(self.record().to_wire()))

    def is_settled(self) -> bool:
        """Has every peer told us it has our latest record?"""
        seen, seq = self._seen_by, self._seq
        return all(seen.get(peer, -1) >= seq for peer in self.peers)

    # -- theirs ----------------------------------------------------------

    def heard(self, node_id: str, data: bytes | None) -> list[MeshEvent]:
        """Node ``node_id``'s record (None: gone); the events it causes."""
        if data is None:
            self._seen_by.pop(node_id, None)
            last = self.registry.record(node_id)
            if last is not None and last.bye:
                return self.registry.remove(node_id, "left", goodbye=True)
            return self.registry.remove(node_id, GONE_DETAIL)
        try:
            record = parse_record(msgpack.unpackb(data, raw=False, strict_map_key=False))
        except FrameError as exc:
            self._drop(exc.reason, node_id, exc.detail)
            return []
        except Exception as exc:  # msgpack raises many types on garbage
            self._drop("malformed", node_id, type(exc).__name__)
            return []
        if record.mesh != self.config.mesh or record.node_id != node_id:
            self._drop("malformed", node_id, "a record of another mesh or node")
            return []
        events = self.registry.merge(record)
        self._tell_seen(node_id, record.seq)
        return events

    def _tell_seen(self, node_id: str, seq: int) -> None:
        me = node_address(self.node_id)
        note = Message("notify", me, node_address(node_id), RECORD_SEEN, seq, timestamp=self.config.wall_clock(),
                       id=self.config.new_id())
        self.transport.send(note.target, self._wire.encode(note, self.config.max_payload))

    def seen(self, msg: Message) -> bool:
        """Is ``msg`` (for our node address) a peer's RECORD_SEEN? Then it is taken in."""
        if msg.topic != RECORD_SEEN or not msg.sender.startswith(NODE_ADDRESS_PREFIX):
            return False
        node_id, seq = msg.sender[len(NODE_ADDRESS_PREFIX):], msg.payload
        if seq.__class__ is int and seq > self._seen_by.get(node_id, -1):
            self._seen_by[node_id] = seq
        return True

    def stats(self) -> dict[str, Any]:
        return {"peers": len(self.peers)}
