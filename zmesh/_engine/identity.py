"""Keyed mode: which public key may use a node name, an agent id, a topic
(internal; docs/security.md, *Identities*).

* **A node name belongs to a key**: the one its ``NAME.key`` file in the
  trusted directory holds, or else the first key that joined with it. A
  HELLO for that name from another key is dropped (``wrong_key``), even
  after the first node left; at most :data:`MAX_BOUND_NAMES` names are
  remembered (beyond that, names no peer holds now are forgotten first,
  oldest first). A key that is distrusted (``Engine.revoke``) frees its names.
* **An agent id belongs to a key**: the first key whose node's record lists
  it (or this node's own key, for the agents it hosts). A record from
  another key listing it is dropped (``agent_taken``); the same key,
  restarted or on another node, hosts it again freely. At most
  :data:`MAX_CLAIMED_AGENTS` ids are remembered (beyond that, ids no node
  hosts now are forgotten first).
* **A policy** (``Node(policy=...)``) maps a public key, a node name bound
  by the trusted directory (the rule is that name's key's, under whatever
  name the key joins), or ``"*"`` (every other key) to the agent ids
  (glob patterns, as ``worker-*``) and the topics (topic patterns, as
  ``jobs.>``) that key may use: see :func:`parse_policy`.

None of this runs in keyless mode: each check is guarded by the frame's
public key being known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Callable

from ..errors import FrameError
from ..registry import NodeRecord
from ..topics import check_pattern, matches

__all__ = ["Rule", "Identities", "parse_policy", "MAX_BOUND_NAMES", "MAX_CLAIMED_AGENTS"]

MAX_BOUND_NAMES = 4096
MAX_CLAIMED_AGENTS = 65536
_MAX_CACHED = 1024  # topics remembered per rule as allowed or not


@dataclass(slots=True, eq=False)
class Rule:
    """What one key may use; ``None``: anything."""

    agents: tuple[str, ...] | None
    topics: tuple[str, ...] | None
    _topic_ok: dict[str, bool]

    def agent_ok(self, agent_id: str) -> bool:
        return self.agents is None or any(fnmatchcase(agent_id, p) for p in self.agents)

    def topic_ok(self, topic: str) -> bool:
        if self.topics is None:
            return True
        known = self._topic_ok.get(topic)
        if known is None:
            known = any(matches(p, topic) for p in self.topics)
            if len(self._topic_ok) >= _MAX_CACHED:
                self._topic_ok.clear()
            self._topic_ok[topic] = known
        return known


def _patterns(entry: str, field: str, value: Any, check: Callable[[str], object]) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValueError(f"policy[{entry!r}][{field!r}] must be a list of patterns, got {value!r}")
    found = tuple(value)
    for pattern in found:
        if not isinstance(pattern, str) or not pattern:
            raise ValueError(f"policy[{entry!r}][{field!r}]: patterns are non-empty strings, got {pattern!r}")
        check(pattern)
    return found


def parse_policy(policy: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Rule]:
    """Check ``Node(policy=...)``: ``{key or name or "*": {"agents": [...], "topics": [...]}}``.

    ``agents`` are glob patterns of agent ids (``fnmatch``, case-sensitive),
    ``topics`` topic patterns (``jobs.>``); a field left out allows anything.
    ValueError for anything else.
    """
    if policy is None:
        return {}
    if not isinstance(policy, Mapping):
        raise ValueError(f"policy must be a mapping of key or node name to rules, got {policy!r}")
    rules: dict[str, Rule] = {}
    for entry, spec in policy.items():
        if not isinstance(entry, str) or not entry:
            raise ValueError(f"policy entries are public keys, node names or '*', got {entry!r}")
        if not isinstance(spec, Mapping) or set(spec) - {"agents", "topics"}:
            raise ValueError(f"policy[{entry!r}] must be a mapping with 'agents' and/or 'topics', got {spec!r}")
        try:
            topics = _patterns(entry, "topics", spec.get("topics"), check_pattern)
        except Exception as exc:  # InvalidMessage from check_pattern
            raise ValueError(f"policy[{entry!r}]['topics']: {exc}") from None
        agents = _patterns(entry, "agents", spec.get("agents"), str)
        rules[entry] = Rule(agents, topics, {})
    return rules


class Identities:
    """Names and agent ids bound to public keys, and the policy, of one keyed engine."""

    def __init__(
        self,
        own_key: str | None,
        key_of_name: Callable[[str], str | None],
        rules: Mapping[str, Rule],
    ) -> None:
        self.own_key = own_key
        self.key_of_name = key_of_name
        self.rules = dict(rules)
        self.names: dict[str, str] = {}  # node name -> the key that first joined with it
        self.agents: dict[str, str] = {}  # agent id -> the key that first listed it

    def rule_for(self, public_key: str, node_id: str) -> Rule | None:
        """The rule of ``public_key``, whatever name it joins under: its own
        entry, else the entries of the names the trusted directory binds to it
        (the one it joins as, if it is one of them, else what any of them
        allows), else ``"*"``. A name only the first joiner binds gets no rule
        of its own: any key could join with it first."""
        rule = self.rules.get(public_key)
        if rule is not None:
            return rule
        key_of_name = self.key_of_name
        named = [name for name in self.rules if name != "*" and key_of_name(name) == public_key]
        if not named:
            return self.rules.get("*")
        if node_id in named:
            return self.rules[node_id]
        return _union([self.rules[name] for name in named])

    def check_name(self, public_key: str, node_id: str) -> None:
        """FrameError ``wrong_key`` unless ``public_key`` may use ``node_id``."""
        owner = self.key_of_name(node_id) or self.names.get(node_id)
        if owner is not None and owner != public_key:
            raise FrameError("wrong_key", f"node name {node_id!r} belongs to another key")

    def check_agents(
        self, public_key: str, record: NodeRecord, rule: Rule | None, local: Mapping[str, object]
    ) -> None:
        """FrameError ``agent_taken`` or ``policy`` unless every agent id in
        ``record`` may be hosted by ``public_key``'s node."""
        claimed = self.agents
        for agent_id in record.agents:
            owner = claimed.get(agent_id)
            if owner is None and agent_id in local:
                owner = self.own_key
            if owner is not None and owner != public_key:
                raise FrameError("agent_taken", f"agent id {agent_id!r} belongs to another key")
            if rule is not None and not rule.agent_ok(agent_id):
                raise FrameError("policy", f"key may not host agent id {agent_id!r}")
        if rule is not None:
            for agent_id, (topic, _) in record.wills.items():  # another node publishes it, in its own name
                if not rule.topic_ok(topic):
                    raise FrameError("policy", f"key may not leave a will on topic {topic!r} (agent {agent_id!r})")

    def bind(self, public_key: str, record: NodeRecord, held: Callable[[str], bool],
             peer_names: Mapping[str, object]) -> None:
        """``record`` was accepted from ``public_key``: its name and agent ids are that key's now.
        ``held(agent_id)``: does some node host it now; ``peer_names``: the nodes that are peers now."""
        names = self.names
        node_id = record.node_id
        if node_id not in names and self.key_of_name(node_id) is None:
            if len(names) >= MAX_BOUND_NAMES:
                _forget_one(names, lambda n: n in peer_names)
            if len(names) < MAX_BOUND_NAMES:
                names[node_id] = public_key
        claimed = self.agents
        new = [agent_id for agent_id in record.agents if agent_id not in claimed]
        short = len(claimed) + len(new) - MAX_CLAIMED_AGENTS
        if short > 0:
            # One pass over the oldest, not one per id: a record of 10,000 new ids
            # against a full table of hosted ones scanned it 10,000 times.
            _forget(claimed, held, short)
        room = MAX_CLAIMED_AGENTS - len(claimed)
        for agent_id in new[:room]:  # if every id is hosted, the rest stay unclaimed (first come, later)
            claimed[agent_id] = public_key

    def forget_key(self, public_key: str) -> None:
        """``public_key`` is distrusted: its names and agent ids are free again."""
        self.names = {n: k for n, k in self.names.items() if k != public_key}
        self.agents = {a: k for a, k in self.agents.items() if k != public_key}


def _union(rules: list[Rule]) -> Rule:
    """What any of ``rules`` allows (a key bound to several names may join as any of them)."""
    if len(rules) == 1:
        return rules[0]
    agents = None if any(r.agents is None for r in rules) else tuple(p for r in rules for p in r.agents or ())
    topics = None if any(r.topics is None for r in rules) else tuple(p for r in rules for p in r.topics or ())
    return Rule(agents, topics, {})


def _forget_one(bound: dict[str, str], in_use: Callable[[str], bool]) -> None:
    """Forget the oldest entry not in use (if any)."""
    _forget(bound, in_use, 1)


def _forget(bound: dict[str, str], in_use: Callable[[str], bool], count: int) -> None:
    """Forget the ``count`` oldest entries not in use (fewer if there are not so many)."""
    victims = []
    for name in bound:
        if not in_use(name):
            victims.append(name)
            if len(victims) >= count:
                break
    for name in victims:
        del bound[name]
