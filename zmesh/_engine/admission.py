"""Who may join, and as whom (internal): the handshake's defences, which hold
without keys (docs/protocol.md, *Validation*).

* **A node's name stays with its connection.** Items are taken from the
  connection (routing key) a peer said HELLO on. A HELLO that claims a
  node we count as a peer over *another* connection (its new incarnation,
  the same run over a new link, or an impostor) is a *claim*: it is
  accepted only once the peer we have is found gone. The first claim sends
  that peer a PING(true) over our own link to its router; if nothing
  arrives over its connection within :func:`claim_window`, the claim
  (the latest one, kept) takes over. A live node answers in milliseconds,
  so nobody takes its name while it runs; and with link heartbeats (the
  default) a restart waits for nothing: the old run's connection breaking
  removes it first.
* **Joining costs a bounded number of sockets.** Second-hand endpoints (a
  HELLO's peer list, discovery) are knocked on at most
  :data:`MAX_KNOCKING` at a time; more wait in a queue of at most
  :data:`MAX_WAITING` (beyond that they are dropped and counted). At most
  :data:`MAX_CONNECTING` peers may be connecting (said HELLO, not attached
  yet); a HELLO from another new node makes the oldest one that has been
  connecting for two heartbeats give way, or is dropped (it knocks again).
* **Refusals say little and cost little**: see :func:`refuse`.
* **A peer stays within its quotas** (:class:`zmesh.Quotas`): a HELLO or
  UPDATE over one cuts it off (:func:`within_quotas`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._wire.codec import Bye, Hello, Ping, Refuse, encode_control, join_frame
from .._wire.names import printable
from ..errors import FrameError
from ..liveness import LivenessConfig
from ..registry import MeshEvent, NodeRecord
from .config import (
    DISCOVERED_PATIENCE, MAX_CONNECTING, MAX_KNOCKING, MAX_LOGGED_DROPS, MAX_REFUSALS_PER_SECOND, MAX_WAITING,
)
from .effects import CLOSE, EVENT, SEND
from .quotas import record_size

if TYPE_CHECKING:
    from .members import Members, Peer

__all__ = ["claim", "claim_window", "tick_claims", "make_room", "second_hand_full", "wait", "fill", "refuse",
           "mesh_refusal", "on_refuse", "within_quotas", "on_cut_off", "OVER_QUOTA"]

log = logging.getLogger("zmesh")

#: How a BYE that cuts a peer off begins (the rest says which quota).
OVER_QUOTA = "over quota"


def claim_window(liveness: LivenessConfig) -> float:
    """How long a peer has to answer the ping a claim on its name sends.

    With link heartbeats a dead or frozen node's connection is seen to break
    within ``link_timeout``, which removes it before any window ends: the
    window is then only for a node whose loop is blocked, and is long.
    """
    return liveness.evasive_after if liveness.link_heartbeat is not None else 2 * liveness.heartbeat


def claim(members: Members, peer: Peer, key: str, hello: Hello, now: float) -> None:
    """``hello`` claims ``peer``'s node over connection ``key``, not the
    peer's own. Return if the peer is gone and the claim may take over;
    raise FrameError ``claimed_node`` (dropped, counted) while it may live.
    The latest claim is kept and taken up by :func:`tick_claims` when the
    peer stays silent, so a restarted node need not knock again."""
    e = members.e
    liveness = e.liveness
    if liveness is None:  # in-process: a node always says BYE, so one still here is alive
        raise FrameError("claimed_node", f"node {peer.node_id!r} is connected")
    if not peer.answered:  # our ping is unanswered
        if now - peer.challenged >= claim_window(liveness):
            members.claims.pop(peer.node_id, None)
            log.info("zmesh %s: node %s did not answer; a new connection takes its name",
                     e.node_id, printable(peer.node_id))
            return
        members.claims[peer.node_id] = (key, hello, e.sender_public_key, now)
        raise FrameError("claimed_node", f"node {peer.node_id!r} is being asked whether it lives")
    if now - peer.challenged >= liveness.heartbeat:  # one ping per heartbeat, however many claims
        peer.challenged, peer.answered = now, False
        e.enqueue(peer.node_id, encode_control(Ping(True)))
        members.claims[peer.node_id] = (key, hello, e.sender_public_key, now)
    raise FrameError("claimed_node", f"node {peer.node_id!r} answers on its own connection")


def tick_claims(members: Members, now: float) -> None:
    """Take up kept claims whose peer is gone or stayed silent; forget those it answered."""
    e = members.e
    assert e.liveness is not None  # claims are kept only with liveness
    window = claim_window(e.liveness)
    for node_id, (key, hello, public_key, heard) in list(members.claims.items()):
        peer = members.peers.get(node_id)
        if peer is not None and peer.answered:
            del members.claims[node_id]  # it lives: the claim was not its own
        elif peer is None or now - peer.challenged >= window:
            del members.claims[node_id]
            e.sender_public_key = public_key  # the key the claim's HELLO came with, not the last frame's
            floor = peer.last_heard if peer is not None else heard
            try:
                members.on_hello(key, hello, now)
            except FrameError as exc:
                e.drop(exc.reason, key, exc.detail)
                continue
            taken = members.by_key.get(key)
            if taken is not None:
                # The claimant was last heard when its HELLO came, not now: the
                # claim window is no sign of life, or a claimant cut off since
                # would outlive expire_after by it (and a request sent to it
                # would wait for its timeout, not fail with PeerLost).
                taken.last_heard = max(floor, heard) if taken is peer else heard


def make_room(members: Members, now: float) -> None:
    """A new node said HELLO: room for one more connecting peer, or FrameError."""
    connecting = [p for p in members.peers.values() if p.state == "connecting"]
    if len(connecting) < MAX_CONNECTING:
        return
    oldest = min(connecting, key=lambda p: p.since)
    liveness = members.e.liveness
    patience = 2 * liveness.heartbeat if liveness is not None else 0.0
    if now - oldest.since < patience:
        raise FrameError("too_many_joining", f"{len(connecting)} nodes are joining")
    members.e.drop("too_many_joining", oldest.key, "gave way to a newer joiner")
    members.move(oldest, "evicted")
    members.detach(oldest, "did not finish joining")


def second_hand_full(members: Members) -> bool:
    """Are :data:`MAX_KNOCKING` second-hand endpoints being knocked on?"""
    return sum(1 for k in members.knocks.values() if k.give_up_at and not k.node_id) >= MAX_KNOCKING


def wait(members: Members, endpoint: str) -> None:
    """Knock on ``endpoint`` when a second-hand knock ends (bounded queue)."""
    waiting = members.waiting
    if endpoint in waiting:
        return
    if len(waiting) >= MAX_WAITING:
        members.e.drop("too_many_joining", endpoint, "too many endpoints heard of")
        return
    waiting[endpoint] = None


def fill(members: Members, now: float) -> None:
    """Knock on waiting endpoints while there is room."""
    waiting = members.waiting
    while waiting and not second_hand_full(members):
        endpoint = next(iter(waiting))
        del waiting[endpoint]
        members.knock(endpoint, DISCOVERED_PATIENCE, now)


def refuse(members: Members, record: NodeRecord, reason: str, said: str) -> None:
    """Refuse a node of another mesh or version. ``reason`` is for our own
    log and event; the node itself hears only ``said``, which tells a
    stranger nothing about this mesh (not its node names or ids). One
    exception: a keyless node of another mesh hears our mesh's name (see
    :func:`mesh_refusal`), which mDNS adverts carry anyway."""
    e = members.e
    if record.mesh != e.mesh and e.identity.own_key is None:
        said = mesh_refusal(e.mesh)
    e.drop("refused", record.node_id, f"refused node {record.node_id!r}: {reason}")
    e.out((EVENT, MeshEvent("peer_refused", record.node_id, detail=reason)))
    _answer(members, record, said)


def _answer(members: Members, record: NodeRecord, said: str) -> None:
    """Tell a refused node ``said``, over a link of its own (a few a second at most)."""
    e = members.e
    now = e.now
    if now - members.refusals[0] >= 1.0:
        members.refusals = (now, 0)
    if members.refusals[1] >= MAX_REFUSALS_PER_SECOND:
        return  # each answer opens a connection to where the stranger says: not on demand
    members.refusals = (members.refusals[0], members.refusals[1] + 1)
    endpoint = e.choose(record.routers)
    if endpoint is None:
        return
    link = e.open_link(endpoint)
    refusal = Refuse(said, "", e.routers)
    e.out((SEND, link, join_frame([encode_control(refusal)])))
    e.out((CLOSE, link))


def mesh_refusal(mesh: str) -> str:
    """What a keyless node says to a node of another mesh: ``another mesh: 'lab'``.

    Only our own mesh's name, so the refused side (``zmesh peers --mesh Lab``)
    can say which ``--mesh`` joins; nothing of the stranger's record is sent
    back. Older versions say ``another mesh`` alone; so does a keyed node,
    whose refusals are as they were."""
    return f"another mesh: {mesh!r}"


def on_refuse(members: Members, refuse: Refuse) -> None:
    """A node we knocked on will not have us: stop knocking."""
    e = members.e
    waiting = [k for k in members.knocks.values() if k.state == "knocking"]
    matched = [k for k in waiting if k.endpoint in refuse.endpoints]
    for knock in matched or waiting:  # a seed spelled differently: stop all that wait
        members.move(knock, "refused")
    # A refusal names no node (older versions did): say where it came from.
    who = refuse.node_id
    if not who:
        who = matched[0].endpoint if matched else refuse.endpoints[0] if refuse.endpoints else "?"
    if (who, "refused_us") not in e.logged_drops and len(e.logged_drops) < MAX_LOGGED_DROPS:
        e.logged_drops.add((who, "refused_us"))
        log.error("zmesh %s: refused by %s: %s", e.node_id, printable(who), printable(refuse.reason))
    e.out((EVENT, MeshEvent("peer_refused", who, detail=refuse.reason)))


def within_quotas(members: Members, record: NodeRecord, public_key: str | None, now: float) -> int | None:
    """The size of ``record`` (from a HELLO or an UPDATE) if it is within
    its node's and its key's quotas; else None, and it is cut off: every
    node of its key (keyless: that node) is told BYE and leaves the registry
    with its agents, and the key (keyless: the name) is refused for the
    quotas' cooldown. One that was cut off and comes back early: FrameError."""
    e = members.e
    ledger = e.ledger
    who = public_key if public_key is not None else record.node_id
    if ledger.banned(who, now):
        raise FrameError("over_quota", "cut off for going over a quota, and its cooldown has not ended")
    size = record_size(record)
    peers = members.peers
    others = [p.node_id for p in peers.values() if p.public_key == public_key and p.node_id != record.node_id
              ] if public_key is not None else []
    mine = peers.get(record.node_id)
    why = ledger.over(record, size, now, mine is not None and mine.public_key == public_key, others)
    if why is None:
        return size
    ledger.ban(who, now)
    e.drop("over_quota", who, f"node {record.node_id!r}: {why}")
    detail = f"over quota: {why}"
    e.out((EVENT, MeshEvent("peer_refused", record.node_id, detail=detail)))
    cut = [p for p in peers.values() if p.public_key == public_key] if public_key is not None else (
        [mine] if mine is not None else [])
    if not cut:
        _answer(members, record, "over quota")
        return None
    bye = join_frame([encode_control(Bye(f"{OVER_QUOTA}: {why}"))])
    for peer in cut:
        e.out((SEND, peer.link, bye))
        members.remove(peer, "bye", detail, now)
    return None


def on_cut_off(members: Members, peer: Peer, reason: str) -> None:
    """``peer`` told us BYE because we went over one of its quotas: say so
    (an error, once per peer) and report it, or it would look like a node
    that left and a seed that stopped answering."""
    e = members.e
    e.dropped["cut_off"] += 1
    if (peer.node_id, "cut_off") not in e.logged_drops and len(e.logged_drops) < MAX_LOGGED_DROPS:
        e.logged_drops.add((peer.node_id, "cut_off"))
        log.error("zmesh %s: node %s cut us off: %s (its quotas: see docs/security.md, Quotas)",
                  e.node_id, printable(peer.node_id), printable(reason))
    e.out((EVENT, MeshEvent("peer_refused", peer.node_id, detail=reason)))
