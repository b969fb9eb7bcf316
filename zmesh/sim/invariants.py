"""What must hold once every fault has healed, and the request ledger.

:func:`check_mesh` is cheap (O(N) per node, no copies of registries) so it can
run every half sim-second; with ``limit=1`` it stops at the first failure.
:func:`check_requests` runs once, at the end. Each violation is one short
string that names the nodes involved.

1. Every pair of live nodes lists each other as joined (and each one's SUB is
   attached to the other's publisher): no one-sided membership.
2. Every live node's registry holds exactly the live nodes, with their latest
   incarnation and record, and exactly the live agents.
3. No agent id resolves to the wrong node.
4. Requests: one lost while pending (its node crashed, was stalled past the
   expiry, or was cut off) has completed, by a reply or PeerLost; nothing is
   pending except requests of the last 60 s to live nodes; no PeerLost while
   the target was live and reachable the whole time (the request's life, and
   the silence of expire_after before the PeerLost, which may have begun
   in a cut that healed before the request was sent); every reply is "ok".
   Every live node is settled: each joined peer acknowledged its latest record.
   QoS 1: every message whose sender lived to the end, to an agent whose
   node is live at the end, was handled (by some incarnation of that node),
   and no incarnation handled one twice; its sender holds nothing unacknowledged.
5. Nothing grows without bound: peers are live nodes, knocks are on seeds and
   departed endpoints only, pending requests are recent, ``by_key`` mirrors
   ``peers``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._engine.requests import Key
from .node import LIVENESS

if TYPE_CHECKING:
    from ..message import Message
    from .node import SimNode

__all__ = ["QosLog", "Req", "RequestLog", "Episode", "check_mesh", "check_requests", "pending_mismatch", "REQUEST_TIMEOUT", "RECORD_LAG"]

REQUEST_TIMEOUT = 60.0
RECORD_LAG = 1.0
EXPIRE = LIVENESS.expire_after
MUST_EXPIRE = EXPIRE + LIVENESS.heartbeat / 2 + 0.15  # expiry + tick period + slack  # a record change this recent may still be on its way to the peers


@dataclass(slots=True, eq=False)
class Req:
    corr: str
    sender: SimNode
    target_node: str
    target: SimNode | None  # the live incarnation of the target node when it was sent
    sent: float
    done: float = math.inf
    outcome: str = ""  # "" while pending; "reply:ok", "PeerLost", "Timeout", ...


class QosLog:
    """Every qos 1 message the workload sent, and who handled it how often."""

    def __init__(self) -> None:
        self.sent: dict[str, tuple[SimNode, str, float]] = {}  # id -> (sender, target node, when)
        self.handlings: dict[tuple[str, int], int] = {}  # (id, incarnation uid) -> times handled
        self.handled_ids: set[str] = set()

    def add(self, msg_id: str, sender: SimNode, target_node: str, now: float) -> None:
        self.sent[msg_id] = (sender, target_node, now)

    def handled(self, node: SimNode, msg: Message) -> None:
        key = (msg.id, node.uid)
        self.handlings[key] = self.handlings.get(key, 0) + 1
        self.handled_ids.add(msg.id)

    def owed(self, live: dict[str, SimNode]) -> int:
        """Messages still to be handled or acknowledged that must be (an
        acknowledgement lost without a broken link waits for the slow resend)."""
        unhandled = sum(1 for i, (s, t, _) in self.sent.items() if i not in self.handled_ids and s.alive and t in live)
        unacked = sum(1 for n in live.values() for i in n.engine.reliable.out if i in self.sent and self.sent[i][1] in live)
        return unhandled + unacked

    def check(self, live: dict[str, SimNode]) -> list[str]:
        out = [f"qos 1 message {i} handled {n} times by {node_uid}" for (i, node_uid), n in self.handlings.items() if n > 1]
        for msg_id, (sender, target, when) in self.sent.items():
            if sender.alive and target in live and msg_id not in self.handled_ids:
                out.append(f"qos 1 message {msg_id} {sender.node_id}->{target} sent @{when:.3f} never handled")
        for node in live.values():
            left = [i for i in node.engine.reliable.out if i in self.sent and self.sent[i][1] in live]
            if left:
                out.append(f"{node.node_id} still holds {len(left)} unacknowledged qos 1 messages, e.g. {left[0]}")
        return out


@dataclass(frozen=True, slots=True)
class Episode:
    """A stall of ``node``, a partition (``group`` against the rest) or heavy
    loss (everyone) over [start, end]: what may cut a target off its requester."""

    kind: str
    start: float
    end: float
    node: str = ""
    group: tuple[str, ...] = ()

    def separates(self, a: str, b: str) -> bool:
        if self.kind == "loss":
            return True
        if self.kind == "stall":
            return self.node == b
        return (a in self.group) != (b in self.group)


class RequestLog:
    """Every request the sim's agents sent, and how it ended."""

    def __init__(self) -> None:
        self.by_key: dict[Key, Req] = {}
        self.problems: list[str] = []
        self.sent_by: dict[int, list[float]] = {}  # sender uid -> send times
        self.outcomes: dict[str, int] = {}
        self.unroutable = 0

    def add(self, key: Key, req: Req) -> None:
        self.by_key[key] = req
        self.sent_by.setdefault(req.sender.uid, []).append(req.sent)

    def done(self, node: SimNode, key: Key, outcome: str, now: float) -> None:
        req = self.by_key.get(key)
        if req is None or req.sender is not node:
            self.problems.append(f"t={now:.3f} {node.node_id}: {outcome} for a request it never sent: {key}")
            return
        if req.outcome:
            self.problems.append(f"t={now:.3f} {node.node_id}: request {req.corr} completed twice "
                                 f"({req.outcome}, then {outcome})")
            return
        req.outcome = outcome
        req.done = now
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def recent(self, uid: int, now: float) -> int:
        times = self.sent_by.get(uid, ())
        return sum(1 for t in times if t > now - REQUEST_TIMEOUT - 1e-9)


def check_mesh(live: list[SimNode], departed: dict[str, None], log: RequestLog,
               now: float, limit: int = 1_000_000) -> list[str]:
    """Invariants 1, 2, 3 and 5 over the live nodes; at most ``limit`` violations."""
    out: list[str] = []
    live_ids = {n.node_id: n for n in live}
    n_live = len(live)
    for x in live:
        e = x.engine
        xid = x.node_id
        peers = e.members.peers
        records = e.registry._records
        index = e.registry._agent_node
        for y in live:
            yid = y.node_id
            if y is not x:
                p = peers.get(yid)
                if p is None:
                    out.append(f"{xid} does not list {yid} as a peer")
                elif p.incarnation != y.incarnation:
                    out.append(f"{xid} lists an old incarnation of {yid}")
                elif not p.joined:
                    out.append(f"{xid} lists {yid} as {p.state}, not joined")
                conn = x.subs.get(y.pub)
                if conn is None or not conn.connected:
                    out.append(f"{xid}'s SUB is not attached to {yid}'s publisher")
            rec = records.get(yid)
            if rec is None:
                out.append(f"{xid}'s registry lacks {yid}")
            elif rec.incarnation != y.incarnation:
                out.append(f"{xid}'s registry has an old incarnation of {yid}")
            elif rec.seq != y.engine.seq and now - y.changed_at > RECORD_LAG:
                out.append(f"{xid}'s registry has {yid} at seq {rec.seq}, not {y.engine.seq}")
            elif y.agent not in rec.agents or len(rec.agents) != 1:
                out.append(f"{xid}'s registry has agents {sorted(rec.agents)} on {yid}")
            owner = index.get(y.agent)
            if owner != yid:
                out.append(f"{xid} routes {y.agent} to {owner}, not {yid}")
            if len(out) >= limit:
                return out
        if len(peers) != n_live - 1:
            extra = sorted(p for p in peers if p not in live_ids)
            out.append(f"{xid} lists {len(peers)} peers for {n_live - 1} live nodes (extra: {extra})")
        if len(records) != n_live:
            extra = sorted(r for r in records if r not in live_ids)
            out.append(f"{xid}'s registry holds {len(records)} nodes for {n_live} live (extra: {extra})")
        if len(index) != n_live:
            extra = sorted(a for a, node in index.items() if node not in live_ids)
            out.append(f"{xid}'s registry routes {len(index)} agents for {n_live} live (extra: {extra})")
        if now - x.changed_at > RECORD_LAG and not e.is_settled():
            behind = sorted(p.node_id for p in peers.values() if p.joined and p.acked_seq < e.seq)
            out.append(f"{xid} is not settled: {behind} have not acknowledged its record (seq {e.seq})")
        if len(e.members.by_key) != len(peers):
            out.append(f"{xid} keeps {len(e.members.by_key)} peer keys for {len(peers)} peers")
        knocks = e.members.knocks
        for endpoint, knock in knocks.items():
            if endpoint not in departed and endpoint not in x.seeds:
                owner_id = endpoint.split("/")[2] if endpoint.startswith("sim://") else "?"
                out.append(f"{xid} still knocks ({knock.state}) on live {owner_id}'s {endpoint}")
                break
        if len(knocks) > len(departed) + len(x.seeds):
            out.append(f"{xid} keeps {len(knocks)} knocks (bound {len(departed)} departed + {len(x.seeds)} seeds)")
        if len(e.requests) > log.recent(x.uid, now):
            out.append(f"{xid} keeps {len(e.requests)} pending requests, more than it sent in {REQUEST_TIMEOUT:g} s")
        if len(out) >= limit:
            return out[:limit]
    return out


def _noticed_by(ep: Episode, sender: str, episodes: list[Episode]) -> float:
    """When the sender, running, must have expired a target ``ep`` cut it off from
    (inf when the cut is too short). A stall of the sender hides the cut: it reads
    what had queued up when it wakes, which counts as heard then."""
    start = ep.start
    for other in episodes:
        if other.kind == "stall" and other.node == sender and other.start < ep.end and other.end > start:
            start = max(start, other.end)
    return start + MUST_EXPIRE if ep.end - start >= MUST_EXPIRE else math.inf


def _silent_since(done: float, sender: str, episodes: list[Episode]) -> float:
    """The earliest time the silence that made the sender expire a peer at
    ``done`` can have begun: MUST_EXPIRE of the sender's running time back
    from ``done`` (its stalls do not count: its engine shifts a peer's last
    sign of life over them), so a cut that ended just before a request was
    sent can still be what expires its target."""
    start, left = done, MUST_EXPIRE
    for stall in sorted((ep for ep in episodes if ep.kind == "stall" and ep.node == sender and ep.start < done),
                        key=lambda ep: ep.end, reverse=True):
        if stall.end <= start - left:
            break
        if stall.end < start:
            left -= start - stall.end
        start = min(start, stall.start)
    return start - left


def check_requests(log: RequestLog, episodes: list[Episode], now: float) -> list[str]:
    """Invariant 4, at the end of the run."""
    out = list(log.problems)
    for req in log.by_key.values():
        sender = req.sender
        if not sender.alive:
            continue  # its requests died with it
        end = min(req.done, now)
        target = req.target
        sid, tid = sender.node_id, req.target_node
        what = f"request {req.corr} {sid}->{tid} sent @{req.sent:.3f}"
        overlapping = [ep for ep in episodes if ep.start < end and ep.end > req.sent and ep.separates(sid, tid)]
        sender_stalled = any(ep.kind == "stall" and ep.node == sid and ep.start < end and ep.end > req.sent
                             for ep in episodes)
        # By when the sender must have seen the target go (and failed the request with PeerLost):
        why, noticed = "", math.inf
        if target is None or target.died_at < end:
            died = target.died_at if target is not None else req.sent
            why = f"died @{died:.3f}"
            noticed = _noticed_by(Episode("death", died, math.inf, node=tid), sid, episodes)
        for ep in overlapping:
            if ep.kind != "loss" and _noticed_by(ep, sid, episodes) < noticed:
                why, noticed = f"was cut off ({ep.kind} @{ep.start:.3f}-{ep.end:.3f})", _noticed_by(ep, sid, episodes)
        if not req.outcome:
            if noticed < now:
                out.append(f"{what}: still pending @{now:.3f} although {tid} {why}")
            elif req.sent < now - REQUEST_TIMEOUT:
                out.append(f"{what}: still pending after its {REQUEST_TIMEOUT:g} s timeout")
        elif req.outcome == "PeerLost":
            # PeerLost means the target was seen gone (a death, or silence for
            # expire_after): something must have cut it off within that silence.
            since = min(req.sent, _silent_since(req.done, sid, episodes))
            if not why and not sender_stalled and not any(
                    ep.start < req.done and ep.end > since and ep.separates(sid, tid) for ep in episodes):
                out.append(f"{what}: PeerLost @{req.done:.3f} although {tid} was live and reachable")
        elif req.outcome == "Timeout":
            if noticed < req.done:
                out.append(f"{what}: Timeout @{req.done:.3f}, not PeerLost, although {tid} {why}")
        elif req.outcome != "reply:ok":
            out.append(f"{what}: ended with {req.outcome} @{req.done:.3f}")
    return out


def pending_mismatch(log: RequestLog, live: list[SimNode]) -> list[str]:
    """The engine's pending requests must be exactly those the ledger has open."""
    out: list[str] = []
    open_by: dict[int, set[Key]] = {}
    for key, req in log.by_key.items():
        if not req.outcome:
            open_by.setdefault(req.sender.uid, set()).add(key)
    for x in live:
        keys = set(x.engine.requests.keys())
        mine = open_by.get(x.uid, set())
        if keys != mine:
            lost, extra = sorted(mine - keys)[:3], sorted(keys - mine)[:3]
            out.append(f"{x.node_id}: engine pending requests differ from the ledger "
                       f"(never completed: {lost}; unknown: {extra})")
    return out
