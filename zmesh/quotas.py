"""Quotas: how much of a node one peer, and one key, may take
(``Node(quotas=zmesh.Quotas(...))``; docs/security.md, *A trusted member
turns hostile*).

A peer's record (its agents, capabilities, subscriptions, meta and wills)
lives in every node's registry, and each change of it is sent to every
node: a member that lists made-up agents or changes its record without end
costs every other node memory and CPU. The defaults are far above what a
swarm needs and far below what such a flood takes:

* per key (keyed mode; in keyless mode each node is its own): how many
  nodes it may have joined at once (``nodes_per_key``), and how many bytes
  their records may add up to (``record_bytes_per_key``);
* per node: how many agents and subscriptions its record may list;
* per peer: how fast it may send records (HELLO and UPDATE), in bytes, a
  token bucket (a burst, then a sustained rate) in which each record counts
  at least :data:`RECORD_MIN_COST` bytes. A node that subscribes and
  unsubscribes a topic per job sends a small record each time: thousands a
  second stay within it; a flood of big records does not.

A peer over one is *cut off*: it is told BYE, leaves the registry at once
with every agent (its key's other nodes too, for a per-key quota), and its
key (or, keyless, its name) is refused for ``cooldown`` seconds. The cut
and each HELLO refused during the cooldown are counted
(``stats()["dropped"]["over_quota"]``); the cut is reported as a
``peer_refused`` event whose detail says which quota, and logged once per
key. The node cut off hears why in its BYE: it logs it and reports a
``peer_refused`` event too.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Quotas", "RECORD_MIN_COST"]

#: What a record counts against ``record_bytes_per_second`` at least, however small.
RECORD_MIN_COST = 1024


@dataclass(frozen=True, slots=True)
class Quotas:
    nodes_per_key: int = 256
    record_bytes_per_key: int = 8 << 20
    agents_per_node: int = 10_000
    subscriptions_per_node: int = 10_000
    record_bytes_per_second: float = 4 << 20
    record_bytes_burst: int = 32 << 20
    cooldown: float = 60.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value.__class__ not in (int, float) or not value > 0 or value == float("inf"):
                raise ValueError(f"Quotas.{f.name} must be a positive number, got {value!r}")
