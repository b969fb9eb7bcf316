"""Membership: knocking on endpoints, the HELLO handshake, registry updates and
their acknowledgements, liveness, restarts and departures. No I/O: links are
ids, and everything to do goes out as effects (see :mod:`.effects`).

Every state change goes through :func:`.states.step`, so the table in
:mod:`.states` is the whole story.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._wire.codec import (
    Ack, Blocked, Bye, Control, Credit, Declined, Handled, Hello, Ping, Pong, Update, encode_control, join_frame,
)
from .._wire.endpoints import endpoint_host, is_loopback_endpoint
from .._wire.names import printable
from ..errors import FrameError
from ..registry import MIN_MAX_PAYLOAD, NodeRecord
from . import admission
from . import timers
from .config import (
    DISCOVERED_PATIENCE,
    LOST_PATIENCE,
    MAX_DEPARTED,
    MAX_READY_KEYS,
    MAX_READY_PER_KEY,
    READY_PATIENCE,
    REDISCOVER_MIN,
    SEED_RETRY,
    SEED_RETRY_MAX,
)
from .effects import ACKED, ANNOUNCE, CLOSE, EVENT, REDISCOVER, SEND, SUBSCRIBE, UNSUBSCRIBE
from .parked import Parked
from .peer import Knock, Peer
from .states import step

if TYPE_CHECKING:
    from .core import Engine

__all__ = ["Members", "Peer", "Knock", "SEED_RETRY", "SEED_RETRY_MAX", "DISCOVERED_PATIENCE",
           "LOST_PATIENCE", "MAX_READY_KEYS"]

log = logging.getLogger("zmesh")


class Members:
    """The peers and knocks of one engine."""

    def __init__(self, engine: Engine) -> None:
        self.e = engine
        self.peers: dict[str, Peer] = {}
        self.by_key: dict[str, Peer] = {}
        self.knocks: dict[str, Knock] = {}
        #: Node keys of subscribers seen before their HELLO -> (the public key
        #: of the subscribing connection, or None keyless; when), oldest first.
        self.ready_keys: dict[str, tuple[str | None, float]] = {}
        self.waiting: dict[str, None] = {}  # second-hand endpoints to knock on when there is room
        # node id -> the latest HELLO claiming it elsewhere (with the public key it came with, and when)
        self.claims: dict[str, tuple[str, Hello, str | None, float]] = {}
        self.endpoints: dict[str, str] = {}  # every router endpoint of every peer -> its node id
        self.parked = Parked(engine)
        self._hello: tuple[tuple[int, int, bool], bytes] | None = None
        self._peers_changed = 0  # bumped whenever a peer comes or goes
        self.next_rediscover = 0.0
        self.last_tick: float | None = None  # when liveness was last checked
        self.rediscover_every = REDISCOVER_MIN
        self.refusals = (0.0, 0)  # (since, how many) refusals answered in this second
        #: Connection keys of peers detached lately (oldest first): what was in
        #: flight from them when they went is expected, not news.
        self.departed: dict[str, None] = {}

    # -- transitions -----------------------------------------------------

    def move(self, obj: Peer | Knock, event: str) -> None:
        new = step(obj.state, event)
        self.e.transitions[(obj.state, event)] += 1
        obj.state = new

    # -- knocking --------------------------------------------------------

    def knock(
        self, endpoint: str, patience: float | None, now: float, node_id: str = "", link: int | None = None
    ) -> Knock | None:
        """Say HELLO to ``endpoint`` until answered; ``patience`` None: forever.

        ``link``: knock on a link already open to it (None: open one).
        """
        e = self.e
        old = self.knocks.get(endpoint)
        if old is not None and old.state == "refused" and patience is None:
            self.move(old, "give_up")  # the user asks again: maybe the other side changed
            self.drop_knock(old)
        if endpoint in self.knocks or endpoint in e.routers:
            return None
        if endpoint in self.endpoints:
            return None  # a peer's already
        if patience is not None and not node_id and admission.second_hand_full(self):
            admission.wait(self, endpoint)
            return None
        if link is None:
            link = e.open_link(endpoint)
        knock = Knock(endpoint, link, next_try=now + SEED_RETRY, node_id=node_id)
        if patience is not None:
            knock.give_up_at = now + patience
        self.knocks[endpoint] = knock
        e.note_deadline(knock.next_try)
        self.send_hello(knock.link, reply=True)
        return knock

    def drop_knock(self, knock: Knock) -> None:
        self.e.out((CLOSE, knock.link))
        del self.knocks[knock.endpoint]
        if knock.node_id:
            self.parked.release(knock.node_id, None)
        if self.waiting:
            admission.fill(self, self.e.now)

    def send_hello(self, link: int, reply: bool) -> None:
        e = self.e
        key = (e.seq, self._peers_changed, reply)
        if self._hello is None or self._hello[0] != key:
            # Cached: in a join every peer gets a HELLO, and each lists every peer.
            peers = tuple((p.node_id, p.record.routers or (p.router,)) for p in self.peers.values())
            self._hello = (key, join_frame([encode_control(Hello(e.local_record(), peers, reply))]))
        e.out((SEND, link, self._hello[1]))

    def heard(self, peer: Peer, now: float) -> None:
        peer.last_heard = now
        if peer.state == "evasive":
            self.move(peer, "heard")

    # -- the handshake ---------------------------------------------------

    def on_hello(self, key: str, hello: Hello, now: float) -> None:
        e = self.e
        record = hello.record
        node_key = f"{record.node_id}|{record.incarnation}"
        if key != node_key and not key.startswith(node_key + "|"):  # a ZeroMQ link adds a random part
            raise FrameError("spoofed_hello", "identity does not match record")
        if record.node_id == e.node_id:
            raise FrameError("self", "hello from a node with our own id")
        if record.mesh != e.mesh:
            admission.refuse(self, record, f"mesh {record.mesh!r} is not {e.mesh!r}", "another mesh")
            return
        if record.version != e.version:
            admission.refuse(self, record, f"protocol version {record.version} is not {e.version}",
                             "another protocol version")
            return
        if record.max_payload < MIN_MAX_PAYLOAD:  # it would hold back every broadcast over its limit
            admission.refuse(self, record, f"max_payload {record.max_payload} is under {MIN_MAX_PAYLOAD}",
                             f"max_payload under {MIN_MAX_PAYLOAD}")
            return
        public_key = e.sender_public_key
        rule = None
        if public_key is not None:  # keyed mode: the name and agent ids must be this key's
            identity = e.identity
            identity.check_name(public_key, record.node_id)
            rule = identity.rule_for(public_key, record.node_id)
            identity.check_agents(public_key, record, rule, e.agents)
        size = admission.within_quotas(self, record, public_key, now)
        if size is None:
            return
        peer = self.peers.get(record.node_id)
        if peer is not None and peer.key != key:
            if record.incarnation < peer.incarnation:
                raise FrameError("stale_incarnation", record.node_id)
            admission.claim(self, peer, key, hello, now)  # raises while the peer we have may live
            if peer.incarnation == record.incarnation:  # the same run, over a new connection
                del self.by_key[peer.key]
                peer.key = key
                self.by_key[key] = peer
                self.departed.pop(key, None)
            else:
                log.info("zmesh %s: node %s restarted", e.node_id, printable(peer.node_id))
                # The old record stays in the registry until the new incarnation
                # joins and replaces it in one step (peer_restarted, no leave/join storm).
                self.move(peer, "restarted")
                self.detach(peer, "restarted")
                peer = None
        if peer is None:
            admission.make_room(self, now)
            peer = self.add_peer(record, key, now)
        else:
            peer.last_heard = now
            peer.answered = True
            if hello.reply:
                # It knocks although we count it as a peer: it lost us (it
                # expired us while our loop stalled, say). Tell every publisher
                # we are attached to that we are, so it can count us again.
                self.move(peer, "reset")
                e.out((ANNOUNCE,))
            else:
                self.move(peer, "hello")
            self.accept_record(peer, record)
        if public_key is not None:
            peer.rule = rule
            self.bind(public_key, record)
        e.ledger.accepted(peer.node_id, size)
        if hello.reply:
            self.send_hello(peer.link, reply=False)
        self.parked.release(peer.node_id, peer)  # after our HELLO: it must know us first
        # 127.x in the sender's list means the sender's host: only usable when
        # that is our host too (we reach the sender itself over loopback).
        same_host = is_loopback_endpoint(peer.router)
        knocks = self.knocks
        for node_id, routers in hello.peers:
            if node_id == e.node_id or node_id in self.peers or (routers and routers[0] in knocks):
                continue
            usable = tuple(r for r in routers if same_host or not is_loopback_endpoint(r))
            endpoint = e.choose(usable)
            if endpoint is not None:
                self.knock(endpoint, DISCOVERED_PATIENCE, now)
        if self.waiting:
            admission.fill(self, now)  # its knock (if it answered one) made room

    def bind(self, public_key: str, record: NodeRecord) -> None:
        """Keyed mode: ``record``'s node name and agent ids are ``public_key``'s from now on."""
        e = self.e
        e.identity.bind(public_key, record, lambda a: a in e.agents or e.registry.node_of(a) is not None,
                        self.peers)

    def add_peer(self, record: NodeRecord, key: str, now: float) -> Peer:
        e = self.e
        knock = next((k for k in self.knocks.values() if k.endpoint in record.routers and k.state == "knocking"),
                     None)
        if knock is not None:
            router: str | None = knock.endpoint
            same = [p for p in record.pubs if endpoint_host(p) == endpoint_host(knock.endpoint)]
            pub = same[0] if same else e.choose(record.pubs)
        else:
            router = e.choose(record.routers)
            pub = e.choose(record.pubs)
        if router is None or pub is None:
            raise FrameError("unreachable", f"no endpoint of {record.node_id!r} is reachable from here")
        for old in [k for k in self.knocks.values() if k is not knock and (
                k.node_id == record.node_id or (k.state == "refused" and k.endpoint in record.routers))]:
            if old.state == "refused":  # who refused us there is gone: a node of ours answers now
                self.move(old, "give_up")
            self.drop_knock(old)  # knocking on an old incarnation's address
        if knock is not None:
            self.move(knock, "answered")
            del self.knocks[knock.endpoint]
            link = knock.link
        else:
            link = e.open_link(router)
        peer = Peer(record.node_id, record.incarnation, key, link, router, pub, record,
                    "connecting", now, now, now, since=now, public_key=e.sender_public_key)
        self.peers[record.node_id] = peer
        self._peers_changed += 1
        for endpoint in (router, *record.routers):
            self.endpoints[endpoint] = record.node_id
        self.by_key[key] = peer
        self.departed.pop(key, None)  # back: what it sends is news again
        e.out((SUBSCRIBE, pub))
        marker = self.ready_keys.pop(peer.node_key, None)
        if marker is not None and marker[0] == peer.public_key:  # keyless: None == None
            self.ready(peer)
        return peer

    def subscriber_ready(self, key: str, public_key: str | None, now: float) -> None:
        """The subscriber with node key ``key`` (``node|incarnation``) now
        receives our publications. In keyed mode the marker counts only for a
        node of the key whose connection sent it: another key's forgery would
        count a node that receives nothing as joined."""
        e = self.e
        node_id = key.partition("|")[0]
        peer = self.peers.get(node_id)
        if peer is not None and peer.node_key == key:
            if peer.public_key != public_key:
                e.drop("wrong_key", node_id, "a subscriber-ready marker from another key")
                return
            self.ready(peer)
            return
        if public_key is not None:
            try:
                e.identity.check_name(public_key, node_id)
            except FrameError as exc:
                e.drop(exc.reason, node_id, "a subscriber-ready marker from another key")
                return
        ready = self.ready_keys
        if key in ready:
            del ready[key]  # again: remembered from now
        elif len(ready) >= MAX_READY_KEYS or (
                public_key is not None and sum(1 for k, _ in ready.values() if k == public_key) >= MAX_READY_PER_KEY):
            e.drop("too_many_ready", public_key or "keyless subscribers", "subscribers seen before their HELLO")
            return
        ready[key] = (public_key, now)

    def expire_ready(self, now: float) -> None:
        """Forget subscriber-ready markers no HELLO followed within :data:`READY_PATIENCE`."""
        ready = self.ready_keys
        while ready:
            key, (_, when) = next(iter(ready.items()))
            if now - when < READY_PATIENCE:
                return
            del ready[key]

    def ready(self, peer: Peer) -> None:
        was_joined = peer.joined
        self.move(peer, "ready")
        if was_joined:
            return
        peer.was_joined = True
        e = self.e
        self.merge_and_ack(peer)
        if peer.acked_seq < e.seq:
            # Our record may have changed since our HELLO went out.
            self.send_update(peer)

    def send_update(self, peer: Peer) -> None:
        peer.update_sent = self.e.now
        self.e.enqueue(peer.node_id, encode_control(Update(self.e.local_record())))

    def merge_and_ack(self, peer: Peer) -> None:
        e = self.e
        for event in e.registry.merge(peer.record):
            e.out((EVENT, event))
        if e.reliable.out:
            e.reliable.routes_changed()
        e.enqueue(peer.node_id, encode_control(Ack(peer.record.seq)))

    def accept_record(self, peer: Peer, record: NodeRecord) -> None:
        if record.seq < peer.record.seq:
            return
        peer.record = record
        if peer.joined:
            self.merge_and_ack(peer)

    # -- departures ------------------------------------------------------

    def detach(self, peer: Peer, why: str, keep_link: bool = False) -> None:
        """Forget a peer's connection: link, subscription, queued items, pending requests."""
        e = self.e
        del self.peers[peer.node_id]
        self._peers_changed += 1
        for endpoint in (peer.router, *peer.record.routers):
            if self.endpoints.get(endpoint) == peer.node_id:
                del self.endpoints[endpoint]
        self.by_key.pop(peer.key, None)
        if self.ready_keys and peer.public_key is not None and all(
                p.public_key != peer.public_key for p in self.peers.values()):
            # The last node of its key went: its markers go with it.
            self.ready_keys = {k: v for k, v in self.ready_keys.items() if v[0] != peer.public_key}
        self.departed[peer.key] = None
        if len(self.departed) > MAX_DEPARTED:
            del self.departed[next(iter(self.departed))]
        e.discard_outbox(peer.node_id)
        e.ledger.forget(peer.node_id)
        if not keep_link:
            e.out((CLOSE, peer.link))
        e.out((UNSUBSCRIBE, peer.pub))
        e.requests.fail_to(peer.node_id, f"node {peer.node_id!r} {why}")
        e.flow.forget(peer.node_id)
        if e.reliable.out:
            e.reliable.node_left(peer.node_id)

    def remove(self, peer: Peer, event: str, why: str, now: float) -> None:
        e = self.e
        self.move(peer, event)
        silent = (event == "silent" or event == "cut") and not e.closed
        self.detach(peer, why, keep_link=silent)
        for mesh_event in e.registry.remove(peer.node_id, why, goodbye=event == "bye"):
            e.out((EVENT, mesh_event))
        e.out((ACKED,))
        log.info("zmesh %s: peer %s left (%s)", e.node_id, printable(peer.node_id), why)
        if silent:
            # Silence may be a cut link or a stalled loop, not a death: keep
            # knocking (with backoff) so the peer rejoins when it comes back.
            # The knock reuses the peer's link: a new connection under the same
            # routing id would make its ROUTER hand over, and what is still
            # queued on the old one would arrive there under a made-up id.
            patience: float | None = LOST_PATIENCE if peer.was_joined else DISCOVERED_PATIENCE
            if peer.router in e.seeds:
                patience = None  # a seed the user gave: as at start, knock until it answers
            knock = self.knock(peer.router, patience, now, node_id=peer.node_id, link=peer.link)
            if knock is None:
                e.out((CLOSE, peer.link))
            else:
                self.parked.expect(peer)
            e.out((REDISCOVER,))
        elif not e.closed:
            # It said goodbye; but a seed the user gave is knocked on until
            # it answers, as at start: a seed node restarted on its port is rejoined.
            for endpoint in e.seeds.intersection((peer.router, *peer.record.routers)):
                self.knock(endpoint, None, now)

    # -- control items ---------------------------------------------------

    def on_control(self, peer: Peer, item: Control, now: float) -> None:
        e = self.e
        cls = item.__class__
        if cls is Ping:
            assert isinstance(item, Ping)
            if item.want_pong and peer.ponged != now:  # one answer a frame, however many asks
                peer.ponged = now
                e.enqueue(peer.node_id, encode_control(Pong()))
        elif cls is Ack:
            assert isinstance(item, Ack)
            if item.seq > peer.acked_seq:
                peer.acked_seq = item.seq
                e.out((ACKED,))
        elif cls is Update:
            assert isinstance(item, Update)
            record = item.record
            if record.node_id != peer.node_id or record.incarnation != peer.incarnation:
                raise FrameError("spoofed_update", record.node_id)
            if record.max_payload < MIN_MAX_PAYLOAD:
                raise FrameError("malformed", f"max_payload {record.max_payload} is under {MIN_MAX_PAYLOAD}")
            if peer.public_key is not None:
                e.identity.check_agents(peer.public_key, record, peer.rule, e.agents)
            size = admission.within_quotas(self, record, peer.public_key, now)
            if size is None:
                return
            if peer.public_key is not None:
                self.bind(peer.public_key, record)
            self.accept_record(peer, record)
            e.ledger.accepted(peer.node_id, size)
        elif cls is Bye:
            assert isinstance(item, Bye)
            if item.reason.startswith(admission.OVER_QUOTA):
                admission.on_cut_off(self, peer, item.reason)
            self.remove(peer, "bye", "left", now)
        elif cls is Credit:
            assert isinstance(item, Credit)
            e.flow.granted(peer.node_id, item.agent, item.taken)
        elif cls is Blocked:
            assert isinstance(item, Blocked)
            e.flow.on_blocked(peer.node_id, item.agent, item.sent)
        elif cls is Handled:
            assert isinstance(item, Handled)
            e.reliable.handled(peer.node_id, list(item.ids))
        elif cls is Declined:
            assert isinstance(item, Declined)
            e.reliable.declined(peer.node_id, list(item.ids))
        elif cls is Pong:
            pass
        else:
            raise FrameError("unknown_item", cls.__name__)

    # -- time ------------------------------------------------------------

    def tick(self, now: float) -> None:
        timers.tick(self, now)

    def next_tick(self) -> float:
        """When ``tick`` next has something to do, at the latest."""
        return min((k.next_try for k in self.knocks.values() if k.state == "knocking"), default=float("inf"))
