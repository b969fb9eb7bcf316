"""The shared registry: which nodes are in the mesh, which agents they host,
their capabilities and subscriptions. Pure state, no I/O.

Each node is the only authority on its own record. It sends the whole record
(small) on every change with a higher ``seq``; peers keep the newest record
per node and replace a node's record outright when its ``incarnation``
changes (a restart), so a restarted node is seen once, not as a leave and a
join of every agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ._agent_profile import MAX_META_KEYS, MAX_WILL_BYTES, Will, check_meta, check_will, parse_meta, parse_wills
from .errors import FrameError
from .topics import matches

__all__ = ["NodeRecord", "AgentInfo", "MeshEvent", "Registry", "parse_record", "EVENT_KINDS", "DEFAULT_MAX_PAYLOAD",
           "MIN_MAX_PAYLOAD",
           "check_meta", "MAX_META_KEYS", "check_will", "MAX_WILL_BYTES", "Will"]

EVENT_KINDS = (
    "peer_joined",
    "peer_left",
    "peer_restarted",
    "peer_evasive",
    "peer_refused",
    "agent_joined",
    "agent_left",
    "subscribed",
    "unsubscribed",
    "will",
)



_MAX_AGENTS = 10_000
#: A node's limit on one encoded message, when its record does not say (older nodes).
DEFAULT_MAX_PAYLOAD = 1 << 20
#: The smallest ``max_payload`` a node may have, and a peer may say it has:
#: every broadcast up to this size reaches every node, and batches stay this big.
MIN_MAX_PAYLOAD = 64 * 1024
_NO_LIMIT = 1 << 62
_MAX_ID = 256
_MAX_CACHED_ENTRIES = 1 << 18  # (agent, node) pairs the subscriber cache keeps in all (~16 MiB)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    node_id: str
    incarnation: str
    mesh: str
    version: int
    router: str
    pub: str
    seq: int = 0
    agents: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    subs: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: Every endpoint, one per bound address (``router``/``pub`` are the first).
    routers: tuple[str, ...] = ()
    pubs: tuple[str, ...] = ()
    #: The largest encoded message the node accepts (``Node(max_payload=...)``).
    max_payload: int = DEFAULT_MAX_PAYLOAD
    #: Each agent's free-form ``meta`` (``node.agent(..., meta=...)``), for those that have one.
    meta: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Each agent's last will (``node.agent(..., will=...)``), for those that have one.
    wills: Mapping[str, Will] = field(default_factory=dict)
    #: The node's last record before it closes in good order (broker transports: their goodbye).
    bye: bool = False

    def __post_init__(self) -> None:
        if not self.routers:
            object.__setattr__(self, "routers", (self.router,))
        if not self.pubs:
            object.__setattr__(self, "pubs", (self.pub,))

    def to_wire(self) -> dict[str, Any]:
        return {
            "routers": list(self.routers),
            "pubs": list(self.pubs),
            "mesh": self.mesh,
            "node": self.node_id,
            "inc": self.incarnation,
            "v": self.version,
            "router": self.router,
            "pub": self.pub,
            "seq": self.seq,
            "agents": {a: list(c) for a, c in self.agents.items()},
            "subs": {a: sorted(p) for a, p in self.subs.items()},
            "max_payload": self.max_payload,
            **({"meta": {a: dict(m) for a, m in self.meta.items()}} if self.meta else {}),
            **({"wills": {a: list(w) for a, w in self.wills.items()}} if self.wills else {}),
            **({"bye": True} if self.bye else {}),
        }


def _str(value: Any, what: str, limit: int = _MAX_ID) -> str:
    if value.__class__ is not str or len(value) > limit:
        raise FrameError("malformed", f"record field {what}")
    return value


def parse_record(data: Any) -> NodeRecord:
    """Validate a record received from a peer; raise FrameError if malformed."""
    if data.__class__ is not dict:
        raise FrameError("malformed", "record is not a map")
    try:
        agents_in = data["agents"]
        subs_in = data["subs"]
        seq = data["seq"]
        version = data["v"]
        if (
            agents_in.__class__ is not dict
            or subs_in.__class__ is not dict
            or seq.__class__ is not int
            or version.__class__ is not int
            or len(agents_in) > _MAX_AGENTS
            or len(subs_in) > _MAX_AGENTS
        ):
            raise FrameError("malformed", "record fields")
        agents: dict[str, tuple[str, ...]] = {}
        for agent_id, caps in agents_in.items():
            if caps.__class__ is not list:
                raise FrameError("malformed", "capabilities")
            agents[_str(agent_id, "agent")] = tuple(_str(c, "capability") for c in caps)
        subs: dict[str, frozenset[str]] = {}
        for agent_id, patterns in subs_in.items():
            if patterns.__class__ is not list or agent_id not in agents:
                raise FrameError("malformed", "subscriptions")
            subs[agent_id] = frozenset(_str(p, "pattern") for p in patterns)
        routers = data.get("routers", [data["router"]])
        pubs = data.get("pubs", [data["pub"]])
        if routers.__class__ is not list or pubs.__class__ is not list or len(routers) > 64 or len(pubs) > 64:
            raise FrameError("malformed", "record endpoints")
        max_payload = data.get("max_payload", DEFAULT_MAX_PAYLOAD)
        if max_payload.__class__ is not int or max_payload < 1:
            raise FrameError("malformed", "record field max_payload")
        meta = parse_meta(data.get("meta", {}), agents)
        wills = parse_wills(data.get("wills", {}), agents)
        bye = data.get("bye", False)
        if bye.__class__ is not bool:
            raise FrameError("malformed", "record field bye")
        return NodeRecord(
            routers=tuple(_str(e, "routers", 1024) for e in routers),
            pubs=tuple(_str(e, "pubs", 1024) for e in pubs),
            node_id=_str(data["node"], "node"),
            incarnation=_str(data["inc"], "inc"),
            mesh=_str(data["mesh"], "mesh"),
            version=version,
            router=_str(data["router"], "router", 1024),
            pub=_str(data["pub"], "pub", 1024),
            seq=seq,
            agents=agents,
            subs=subs,
            max_payload=max_payload,
            meta=meta,
            wills=wills,
            bye=bye,
        )
    except KeyError as exc:
        raise FrameError("malformed", f"record lacks {exc}") from None


@dataclass(frozen=True, slots=True)
class AgentInfo:
    agent_id: str
    node_id: str
    capabilities: tuple[str, ...]
    subscriptions: frozenset[str]
    #: What the agent says of itself (``node.agent(..., meta=...)``): a small map, empty by default.
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MeshEvent:
    """A change in the mesh seen by this node (``node.events()``)."""

    kind: str
    node_id: str
    agent_id: str = ""
    detail: str = ""
    #: A ``will`` event's payload (``detail`` is its topic).
    payload: Any = field(default=None, compare=False, repr=False)


def _subscription_events(node_id: str, old: Mapping[str, frozenset[str]], new: Mapping[str, frozenset[str]],
                         agents: Mapping[str, Any]) -> list[MeshEvent]:
    """``subscribed``/``unsubscribed`` for each (agent, pattern) that came or went (``detail``: the
    pattern); an agent that left says ``agent_left`` alone, one that came says ``subscribed`` too."""
    events = []
    for agent_id in sorted(set(new) | (set(old) & set(agents))):
        before, after = old.get(agent_id, frozenset()), new.get(agent_id, frozenset())
        events += [MeshEvent("unsubscribed", node_id, agent_id, p) for p in sorted(before - after)]
        events += [MeshEvent("subscribed", node_id, agent_id, p) for p in sorted(after - before)]
    return events


def _will_events(rec: NodeRecord) -> list[MeshEvent]:
    return [MeshEvent("will", rec.node_id, a, topic, payload) for a, (topic, payload) in rec.wills.items()]


class Registry:
    """This node's view of the mesh (its own record included)."""

    def __init__(self, local_node_id: str, frame_cap: int = _NO_LIMIT) -> None:
        self.local_node_id = local_node_id
        self._frame_cap = frame_cap
        self._records: dict[str, NodeRecord] = {}
        self._agent_node: dict[str, str] = {}
        self._claims: dict[str, int] = {}  # agent id -> how many records claim it
        self._subscriber_cache: dict[str, tuple[tuple[str, str], ...]] = {}
        self._cached_entries = 0
        #: The smallest ``max_payload`` of any node in the registry (this one
        #: included): a publish frame reaches every one of them. Unbounded while empty.
        self.floor = _NO_LIMIT
        #: ``floor``, but at most ``frame_cap``: what a batch of items may add up to.
        self.frame_limit = frame_cap

    # -- queries ---------------------------------------------------------

    def agents(self) -> dict[str, AgentInfo]:
        """Every agent in the mesh, by id."""
        out: dict[str, AgentInfo] = {}
        for rec in self._records.values():
            for agent_id, caps in rec.agents.items():
                out[agent_id] = AgentInfo(
                    agent_id, rec.node_id, caps, rec.subs.get(agent_id, frozenset()), rec.meta.get(agent_id, {})
                )
        return out

    def nodes(self) -> list[NodeRecord]:
        """Every node in the mesh, this one included, sorted by id."""
        return sorted(self._records.values(), key=lambda r: r.node_id)

    def record(self, node_id: str) -> NodeRecord | None:
        return self._records.get(node_id)

    def node_of(self, agent_id: str) -> str | None:
        """The id of the node hosting ``agent_id``, or None."""
        return self._agent_node.get(agent_id)

    def find(self, capability: str) -> list[str]:
        """Ids of the agents that declare ``capability``, sorted."""
        return sorted(
            agent_id
            for rec in self._records.values()
            for agent_id, caps in rec.agents.items()
            if capability in caps
        )

    def subscriptions(self, node_id: str | None = None) -> dict[str, frozenset[str]]:
        """Patterns per agent, for one node or the whole mesh."""
        recs = [self._records[node_id]] if node_id else list(self._records.values())
        out: dict[str, frozenset[str]] = {}
        for rec in recs:
            out.update(rec.subs)
        return out

    def subscribers(self, topic: str) -> tuple[tuple[str, str], ...]:
        """(agent_id, node_id) of every agent with a pattern matching ``topic``."""
        hit = self._subscriber_cache.get(topic)
        if hit is None:
            hit = tuple(
                (agent_id, rec.node_id)
                for rec in self._records.values()
                for agent_id, patterns in rec.subs.items()
                if any(matches(p, topic) for p in patterns)
            )
            if len(self._subscriber_cache) > 4096 or self._cached_entries > _MAX_CACHED_ENTRIES:
                self._subscriber_cache.clear()  # bounded in topics and in what their answers hold
                self._cached_entries = 0
            self._subscriber_cache[topic] = hit
            self._cached_entries += len(hit) + 1
        return hit

    def max_payload(self, node_id: str) -> int | None:
        """The limit node ``node_id`` announced, or None for a node not in the registry."""
        rec = self._records.get(node_id)
        return None if rec is None else rec.max_payload

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._records

    # -- changes ---------------------------------------------------------

    def merge(self, rec: NodeRecord) -> list[MeshEvent]:
        """Apply a record; return the events it causes (none if it is stale)."""
        old = self._records.get(rec.node_id)
        events: list[MeshEvent] = []
        if old is None:
            events.append(MeshEvent("peer_joined", rec.node_id))
            old_agents: Iterable[str] = ()
        elif old.incarnation == rec.incarnation:
            if rec.seq <= old.seq:
                return []
            old_agents = old.agents
        else:
            if rec.incarnation < old.incarnation:
                return []  # a late record of an older incarnation
            events += _will_events(old)  # the old incarnation went without a goodbye
            events.append(MeshEvent("peer_restarted", rec.node_id))
            old_agents = old.agents
        self._records[rec.node_id] = rec
        events += [MeshEvent("agent_left", rec.node_id, a) for a in old_agents if a not in rec.agents]
        events += [
            MeshEvent("agent_joined", rec.node_id, a) for a in rec.agents if a not in old_agents
        ]
        if old is None or rec.subs != old.subs:
            events += _subscription_events(rec.node_id, {} if old is None else old.subs, rec.subs, rec.agents)
        self._reindex(old, rec)
        return events

    def remove(self, node_id: str, detail: str = "", goodbye: bool = False) -> list[MeshEvent]:
        """Forget a node and its agents; return the events (a ``will`` for
        each will its record holds, unless the node said ``goodbye``)."""
        rec = self._records.pop(node_id, None)
        if rec is None:
            return []
        self._reindex(rec, None)
        return [*(() if goodbye else _will_events(rec)), *(MeshEvent("agent_left", node_id, a) for a in rec.agents),
                MeshEvent("peer_left", node_id, detail=detail)]

    def _reindex(self, old: NodeRecord | None, new: NodeRecord | None) -> None:
        """Update the agent index for one node's record changing from ``old`` to ``new``.

        Local agents win a (transient) duplicate claim; otherwise the first
        claim in record order does. Only an agent id claimed twice costs a scan.
        """
        self._subscriber_cache.clear()
        self._cached_entries = 0
        if old is None or new is None or old.max_payload != new.max_payload:
            self.floor = min((r.max_payload for r in self._records.values()), default=_NO_LIMIT)
            self.frame_limit = min(self.floor, self._frame_cap)
        index, claims = self._agent_node, self._claims
        if old is not None:
            for agent_id in old.agents:
                claims[agent_id] -= 1
                if not claims[agent_id]:
                    del claims[agent_id]
                    del index[agent_id]
                elif index.get(agent_id) == old.node_id:
                    del index[agent_id]
                    self._reclaim(agent_id)
        if new is not None:
            for agent_id in new.agents:
                claims[agent_id] = claims.get(agent_id, 0) + 1
                if agent_id not in index or new.node_id == self.local_node_id:
                    index[agent_id] = new.node_id
                elif claims[agent_id] > 1 and index[agent_id] != self.local_node_id:
                    self._reclaim(agent_id)

    def _reclaim(self, agent_id: str) -> None:
        local = self._records.get(self.local_node_id)
        if local is not None and agent_id in local.agents:
            self._agent_node[agent_id] = local.node_id
            return
        for rec in self._records.values():
            if agent_id in rec.agents:
                self._agent_node[agent_id] = rec.node_id
                return
