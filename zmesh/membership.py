"""Membership: joining peers (HELLO), the shared registry's updates and
acknowledgements, liveness (heartbeats, evasive, expiry), restarts and seeds.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from . import codec
from .codec import FrameError
from .errors import PeerLost
from .liveness import PeerLiveness
from .nodestate import DISCOVERED_PATIENCE, LOST_PATIENCE, SEED_RETRY_MAX, Peer, Seed
from .registry import MeshEvent, NodeRecord, parse_record
from .transport.base import Link, endpoint_host, is_loopback_endpoint
from .wire import MAX_LOGGED_DROPS, WireMixin

__all__ = ["MembershipMixin"]

log = logging.getLogger("zmesh")


class MembershipMixin(WireMixin):
    """Joining, registry exchange, liveness and seeds of a node."""

    # -- joining ---------------------------------------------------------

    def _connect_seeds(self) -> None:
        if not self._closed:
            for endpoint in self._seed_endpoints:
                self.connect(endpoint)

    def connect(self, endpoint: str) -> None:
        """Join the mesh through a member's router endpoint (a seed).

        Raises TransportError at once for an endpoint that cannot be one.
        """
        self._check_open()
        self.transport.check_endpoint(endpoint)
        # Peers advertise addresses; spelled that way, the seed is recognised
        # as answered when its node's HELLO lists the same endpoint.
        self._connect(endpoint.replace("://localhost:", "://127.0.0.1:"), discovered=False)

    def _connect(self, endpoint: str, discovered: bool, patience: float = DISCOVERED_PATIENCE) -> Seed | None:
        if endpoint in self._seeds or endpoint in self.transport.router_endpoints:
            return None
        if any(endpoint in p.record.routers or p.router == endpoint for p in self._peers.values()):
            return None
        seed = Seed(endpoint, self.transport.open_link(endpoint))
        if discovered:
            seed.give_up_at = time.monotonic() + patience
        self._seeds[endpoint] = seed
        self._send_hello(seed.link, reply=True)
        return seed

    def on_discovered(self, router_endpoint: str) -> None:
        """Transport or discovery callback: a member may live at this endpoint."""
        if self._closed or router_endpoint == self.endpoint:
            return
        self._connect(router_endpoint, discovered=True)

    def _hello_item(self, reply: bool) -> bytes:
        peers = [[p.node_id, list(p.record.routers or (p.router,))] for p in self._peers.values()]
        return codec.encode_item([codec.HELLO, self._local_record().to_wire(), peers, reply])

    def _send_hello(self, link: Link, reply: bool) -> None:
        link.send(codec.join_frame([self._hello_item(reply)]))

    def _on_hello(self, key: str, item: list[Any]) -> None:
        if len(item) != 4 or item[2].__class__ is not list:
            raise FrameError("malformed", "hello")
        record = parse_record(item[1])
        if key != f"{record.node_id}|{record.incarnation}":
            raise FrameError("spoofed_hello", "identity does not match record")
        if record.node_id == self.id:
            raise FrameError("self", "hello from a node with our own id")
        if record.mesh != self.mesh:
            self._refuse(record, f"mesh {record.mesh!r} is not {self.mesh!r}")
            return
        if record.version != codec.PROTOCOL_VERSION:
            self._refuse(record, f"protocol version {record.version} is not {codec.PROTOCOL_VERSION}")
            return
        for seed in self._seeds.values():
            if seed.endpoint in record.routers:
                seed.answered = True
        peer = self._peers.get(record.node_id)
        if peer is not None and peer.incarnation != record.incarnation:
            if record.incarnation < peer.incarnation:
                raise FrameError("stale_incarnation", record.node_id)
            self._replace_incarnation(peer, record)
            peer = None
        if peer is None:
            peer = self._add_peer(record, key)
        else:
            self._accept_record(peer, record)
        if item[3]:
            self._send_hello(peer.link, reply=False)
        # 127.x in the sender's list means the sender's host: only usable when
        # that is our host too (we reach the sender itself over loopback).
        same_host = is_loopback_endpoint(peer.router)
        for entry in item[2]:
            if entry.__class__ is not list or len(entry) != 2 or entry[0].__class__ is not str:
                raise FrameError("malformed", "hello peer list")
            node_id, routers = entry
            if routers.__class__ is str:
                routers = [routers]
            if routers.__class__ is not list or not routers or any(r.__class__ is not str for r in routers):
                raise FrameError("malformed", "hello peer list")
            if node_id == self.id or node_id in self._peers:
                continue
            usable = tuple(r for r in routers[:64] if same_host or not is_loopback_endpoint(r))
            endpoint = self.transport.choose(usable)
            if endpoint is not None:
                self._connect(endpoint, discovered=True)

    def _add_peer(self, record: NodeRecord, key: str) -> Peer:
        existing_seed = next((sd for sd in self._seeds.values() if sd.endpoint in record.routers), None)
        if existing_seed is not None:
            router: str | None = existing_seed.endpoint
            same = [p for p in record.pubs if endpoint_host(p) == endpoint_host(existing_seed.endpoint)]
            pub = same[0] if same else self.transport.choose(record.pubs)
        else:
            router = self.transport.choose(record.routers)
            pub = self.transport.choose(record.pubs)
        if router is None or pub is None:
            raise FrameError("unreachable", f"no endpoint of {record.node_id!r} is reachable from here")
        for seed in [sd for sd in self._seeds.values() if sd.node_id == record.node_id]:
            if seed is not existing_seed:  # knocking on an old incarnation's address
                seed.link.close()
                del self._seeds[seed.endpoint]
        if existing_seed is not None:
            del self._seeds[existing_seed.endpoint]
            link = existing_seed.link
        else:
            link = self.transport.open_link(router)
        liveness = (
            PeerLiveness(self.liveness_config, time.monotonic())
            if self.transport.needs_liveness
            else None
        )
        if liveness is not None:
            liveness.event("hello")
        peer = Peer(
            record.node_id, record.incarnation, key, link, router, pub, liveness, record
        )
        self._peers[record.node_id] = peer
        self._peers_by_key[key] = peer
        self.transport.subscribe(pub)
        if key in self._ready_keys:
            self._ready_keys.discard(key)
            peer.sub_ready = True
        self._maybe_join(peer)
        return peer

    def _replace_incarnation(self, peer: Peer, record: NodeRecord) -> None:
        """A node came back under the same name: drop the old one quietly."""
        log.info("zmesh %s: node %s restarted", self.id, peer.node_id)
        self._detach(peer, "restarted")
        # The old record stays in the registry until the new incarnation joins,
        # which then replaces it in one step (peer_restarted, no leave/join storm).

    def _detach(self, peer: Peer, why: str) -> None:
        """Forget a peer's connection: links, queued items, pending requests."""
        self._peers.pop(peer.node_id, None)
        self._peers_by_key.pop(peer.key, None)
        self._outbox.pop(peer.node_id, None)
        peer.link.close()
        self.transport.unsubscribe(peer.pub)
        self._fail_pending_to(peer.node_id, f"node {peer.node_id!r} {why}")

    def _merge_and_ack(self, peer: Peer) -> None:
        self._emit(self.registry.merge(peer.record))
        self._enqueue(peer.node_id, codec.encode_item([codec.ACK, peer.record.seq]))

    def _accept_record(self, peer: Peer, record: NodeRecord) -> None:
        if record.seq < peer.record.seq:
            return
        peer.record = record
        if peer.joined:
            self._merge_and_ack(peer)

    def on_subscriber_ready(self, key: str) -> None:
        """Transport callback: the peer with this key now receives our publications."""
        peer = self._peers_by_key.get(key)
        if peer is None:
            if len(self._ready_keys) < MAX_LOGGED_DROPS:
                self._ready_keys.add(key)
            return
        peer.sub_ready = True
        self._maybe_join(peer)

    def _maybe_join(self, peer: Peer) -> None:
        if peer.joined or not peer.sub_ready:
            return
        peer.joined = True
        self._merge_and_ack(peer)
        if peer.acked_seq < self._seq:
            # Our record may have changed since our HELLO went out.
            self._enqueue(peer.node_id, codec.encode_item([codec.UPDATE, self._local_record().to_wire()]))

    def _refuse(self, record: NodeRecord, reason: str) -> None:
        self._drop("refused", record.node_id, f"refused node {record.node_id!r}: {reason}")
        self._emit([MeshEvent("peer_refused", record.node_id, detail=reason)])
        endpoint = self.transport.choose(record.routers)
        if endpoint is None:
            return
        link = self.transport.open_link(endpoint)
        refusal = [codec.REFUSE, reason, self.id, list(self.transport.router_endpoints)]
        link.send(codec.join_frame([codec.encode_item(refusal)]))
        link.close()

    def _remove_peer(self, node_id: str, why: str) -> None:
        peer = self._peers.get(node_id)
        if peer is None:
            return
        self._detach(peer, why)
        self._emit(self.registry.remove(node_id, why))
        self._wake_settle_waiters()
        log.info("zmesh %s: peer %s left (%s)", self.id, node_id, why)
        if why == "expired" and peer.joined and not self._closed:
            # Silence may be a cut link, not a death: keep knocking (with
            # backoff) so the peer rejoins when the link comes back.
            seed = self._connect(peer.router, discovered=True, patience=LOST_PATIENCE)
            if seed is not None:
                seed.node_id = node_id
            refresh = getattr(self._discovery, "refresh", None)
            if refresh is not None and self._loop is not None:
                task = self._loop.create_task(refresh())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def _fail_pending_to(self, node_id: str, why: str) -> None:
        for pending in list(self._pending.values()):
            if pending.node_id == node_id and not pending.future.done():
                pending.future.set_exception(PeerLost(f"{why} before replying"))

    @property
    def peers(self) -> list[str]:
        """Ids of the peers that have fully joined."""
        return sorted(p.node_id for p in self._peers.values() if p.joined)

    # -- liveness --------------------------------------------------------

    def _schedule_tick(self) -> None:
        if self._closed or self._loop is None:
            return
        interval = self.liveness_config.heartbeat / 2
        self._tick_handle = self._loop.call_later(interval, self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        beat = False
        for peer in list(self._peers.values()):
            if peer.liveness is None:
                continue
            actions = peer.liveness.tick(now)
            if "expire" in actions:
                self._remove_peer(peer.node_id, "expired")
                continue
            if "ping" in actions:
                if peer.joined:
                    self._emit([MeshEvent("peer_evasive", peer.node_id)])
                self._enqueue(peer.node_id, codec.encode_item([codec.PING, True]))
            elif "heartbeat" in actions:
                if peer.joined:
                    beat = True  # its SUB is attached: our one published beat reaches it
                else:
                    self._enqueue(peer.node_id, codec.encode_item([codec.PING, False]))
        if beat:
            # One empty publish frame is a heartbeat to every joined peer at
            # once: idle cost per node stays O(1) sends, not O(N).
            self.transport.publish(codec.join_pub_frame(self.id, self._seq, []))
            self._stats["heartbeats_published"] += 1
            for peer in self._peers.values():
                if peer.joined and peer.liveness is not None:
                    peer.liveness.sent(now)
        for seed in list(self._seeds.values()):
            if seed.answered or seed.refused:
                continue
            if seed.give_up_at and now >= seed.give_up_at:
                log.warning("zmesh %s: no answer from %s; giving up on it", self.id, seed.endpoint)
                seed.link.close()
                del self._seeds[seed.endpoint]
            elif now >= seed.next_try:
                seed.next_try = now + seed.interval
                seed.interval = min(seed.interval * 1.5, SEED_RETRY_MAX)
                self._send_hello(seed.link, reply=True)
        self._schedule_tick()

    # -- control items ---------------------------------------------------

    def _on_control(self, peer: Peer, kind: int, item: list[Any]) -> None:
        if kind == codec.UPDATE:
            if len(item) != 2:
                raise FrameError("malformed", "update")
            record = parse_record(item[1])
            if record.node_id != peer.node_id or record.incarnation != peer.incarnation:
                raise FrameError("spoofed_update", record.node_id)
            self._accept_record(peer, record)
        elif kind == codec.ACK:
            if len(item) != 2 or item[1].__class__ is not int:
                raise FrameError("malformed", "ack")
            if item[1] > peer.acked_seq:
                peer.acked_seq = item[1]
                if self._settle_waiters:
                    self._wake_settle_waiters()
        elif kind == codec.PING:
            if len(item) == 2 and item[1] is True:
                self._enqueue(peer.node_id, codec.encode_item([codec.PONG]))
        elif kind == codec.PONG:
            pass
        elif kind == codec.BYE:
            self._remove_peer(peer.node_id, "left")
        else:
            raise FrameError("unknown_item", str(kind))

    def _on_refuse(self, key: str, item: list[Any]) -> None:
        if (
            len(item) not in (3, 4)
            or item[1].__class__ is not str
            or item[2].__class__ is not str
            or (len(item) == 4 and item[3].__class__ is not list)
        ):
            raise FrameError("malformed", "refuse")
        endpoints = item[3] if len(item) == 4 else []
        waiting = [seed for seed in self._seeds.values() if not seed.answered and not seed.refused]
        matched = [seed for seed in waiting if seed.endpoint in endpoints]
        for seed in matched or waiting:  # a seed spelled differently: stop all that wait
            seed.refused = item[1]
        if (item[2], "refused_us") not in self._logged_drops:
            self._logged_drops.add((item[2], "refused_us"))
            log.error("zmesh %s: refused by node %r: %s", self.id, item[2], item[1])
        self._emit([MeshEvent("peer_refused", item[2], detail=item[1])])
