"""What a member does as time passes (internal): heartbeats, pings, expiry,
knocking again on a half-joined peer, and retrying or giving up on knocks."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._wire.codec import Ping, encode_control
from .._wire.names import printable
from ..registry import MeshEvent
from . import admission
from .config import REDISCOVER_MAX, REDISCOVER_MIN, SEED_RETRY_MAX, SEED_SILENT_HELLOS, SILENT_DETAIL
from .effects import EVENT, REDISCOVER

if TYPE_CHECKING:
    from .members import Members

__all__ = ["tick"]

log = logging.getLogger("zmesh")


def tick(members: Members, now: float) -> None:
    """Liveness of every peer (heartbeat, ping, expiry) and every knock's retry."""
    e = members.e
    config = e.liveness
    if config is not None:
        last = members.last_tick
        woke = last is not None and now - last > config.evasive_after
        if last is not None and woke:
            # Our own loop was stalled (ticks come every heartbeat/2): what the
            # peers sent meanwhile is still unread in our socket. Time we could
            # not watch does not count as their silence.
            blind = now - last - config.heartbeat / 2
            for peer in members.peers.values():
                peer.last_heard = min(now, peer.last_heard + blind)
                peer.challenged = min(now, peer.challenged + blind)  # its answer may be unread too
            for node_id, (key, hello, public_key, heard) in list(members.claims.items()):
                members.claims[node_id] = (key, hello, public_key, min(now, heard + blind))
        members.last_tick = now
        if members.claims and not woke:
            admission.tick_claims(members, now)
        beat = False
        for peer in list(members.peers.values()):
            silence = now - peer.last_heard
            if woke:
                # Judge nobody on the tick that finds us just woken: what they
                # sent is still unread, and the next tick comes after it is read.
                silence = 0.0
            if silence >= config.expire_after:
                members.remove(peer, "silent", SILENT_DETAIL, now)
                continue
            if silence >= config.evasive_after and peer.state == "joined":
                members.move(peer, "quiet")
                e.out((EVENT, MeshEvent("peer_evasive", peer.node_id)))
                e.enqueue(peer.node_id, encode_control(Ping(True)))
            elif peer.state == "connecting":
                if now - peer.last_knock >= 2 * config.heartbeat:
                    # Still not attached: knock again, so a peer that counts
                    # us as joined already re-announces its attachment.
                    peer.last_knock = now
                    members.send_hello(peer.link, reply=True)
                elif now - peer.last_sent >= config.heartbeat:
                    e.enqueue(peer.node_id, encode_control(Ping(silence >= config.evasive_after)))
            else:
                if peer.acked_seq < e.seq and now - peer.update_sent >= 2 * config.heartbeat:
                    members.send_update(peer)  # the UPDATE or its ACK was lost: again
                if now - peer.last_sent >= config.heartbeat:
                    beat = True  # its SUB is attached: our one published beat reaches it
        if beat:
            # One empty publish frame is a heartbeat to every joined peer at
            # once: idle cost per node stays O(1) sends, not O(N).
            e.out_publish_beat()
            for peer in members.peers.values():
                if peer.state != "connecting":
                    peer.last_sent = now
    for knock in list(members.knocks.values()):
        if knock.give_up_at and now >= knock.give_up_at:
            if knock.state == "knocking":
                log.warning("zmesh %s: no answer from %s; giving up on it", e.node_id, printable(knock.endpoint))
            members.move(knock, "give_up")
            members.drop_knock(knock)
        elif knock.state == "knocking" and now >= knock.next_try:
            members.move(knock, "retry")
            knock.next_try = now + knock.interval
            knock.interval = min(knock.interval * 1.5, SEED_RETRY_MAX)
            members.send_hello(knock.link, reply=True)
            knock.hellos += 1
            if knock.hellos == SEED_SILENT_HELLOS and knock.endpoint in e.seeds:
                log.warning(
                    "zmesh %s: seed %s has not answered (%d HELLOs so far); still knocking (is a node of "
                    "mesh %r running there? check the endpoint; node.joining stays True meanwhile)",
                    e.node_id, printable(knock.endpoint), knock.hellos, e.mesh,
                )
            if knock.node_id and now >= members.next_rediscover:
                # It may be back at a new address (restarted while cut off):
                # announce ourselves and browse again, as on its expiry.
                members.next_rediscover = now + members.rediscover_every
                members.rediscover_every = min(2 * members.rediscover_every, REDISCOVER_MAX)
                e.out((REDISCOVER,))
    if members.waiting:
        admission.fill(members, now)
    if members.ready_keys:
        members.expire_ready(now)
    if members.rediscover_every > REDISCOVER_MIN and not any(k.node_id for k in members.knocks.values()):
        members.rediscover_every = REDISCOVER_MIN  # nobody missing any more: start over
