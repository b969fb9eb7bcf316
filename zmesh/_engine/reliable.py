"""QoS 1 and 2: acknowledgement, retransmission and duplicate suppression (internal).

Sender side: a direct message with ``qos >= 1`` stays *outstanding* until
the receiving node says it was handled (HANDLED; a request's reply does as
much). ZeroMQ over TCP loses nothing while a connection lives, so while the
node it went to stays, the message is only sent again as a slow fallback
(:data:`RETRY_HELD`): a long handler costs no resends. It is sent again
soon when that node says it did not take it (DECLINED: a full inbox, an
agent not there; after :data:`RETRY_FIRST` doubling to :data:`RETRY_MAX`),
and at once when the node leaves and a node hosting the target appears (a
new incarnation, or a newcomer registering the same agent id).

Its ttl bounds the retrying: a message nobody holds when its ttl runs out
is dead-lettered ``expired``. One that a live node holds stays outstanding
past its ttl: that node either handles it or finds it expired when it takes
it, and acknowledges either way (dead-lettering it there), so ``expired``
here always means it was never taken.

What is kept is bounded (:class:`zmesh.QosLimits`, :mod:`.unacked`): a ttl
is at most ``max_ttl``, and what is unacknowledged per target agent and per
sending agent.

Receiver side: every ``qos >= 1`` message id is remembered in its sending
agent's bounded window (:mod:`.dedup`), so a handler sees each message once
while its node lives. A repeat of a message being handled is dropped; a
repeat of one already handled is acknowledged again, or, for a request,
answered again with the remembered reply. A message dropped before its
handler ran (full inbox, agent gone) is forgotten, so its retransmission is
taken.

Acknowledgements go out as one HANDLED item per sending node per flush.

With a store (:mod:`zmesh.store`), outstanding one-way messages and the ids
of handled ``qos = 2`` messages are written through it, so a restarted
sender still delivers them and a restarted receiver still recognises them.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from .._wire import codec
from .._wire.names import MAX_AGENT_ID as MAX_ID
from ..errors import FrameError, InvalidMessage
from ..message import Message
from .config import LOCAL
from .dedup import DONE, RUNNING, Dedup
from .effects import ACKED, DEAD
from .unacked import Unacked

if TYPE_CHECKING:
    from ..store import Store
    from .core import Engine

__all__ = ["Reliable", "RETRY_FIRST", "RETRY_MAX"]

RETRY_FIRST = 1.0  # after a DECLINED: the first retry, doubling ...
RETRY_MAX = 30.0  # ... up to this
RETRY_HELD = 30.0  # while the node it went to stays: a slow fallback only
UNROUTED_RETRY = 1.0  # no node hosts the target: look again this often (and when one joins)
ACK_CHUNK = 4096  # ids per HANDLED/DECLINED item (about 128 KiB)


class _Out:
    __slots__ = ("msg", "item", "node", "next_try", "backoff", "expires", "done", "request", "overdue")

    def __init__(self, msg: Message, item: bytes, node: str | None, next_try: float, expires: float,
                 request: bool) -> None:
        self.msg = msg
        self.item = item
        self.node = node  # the node it was last sent to (or LOCAL); None while unrouted
        self.next_try = next_try
        self.backoff = RETRY_FIRST
        self.expires = expires
        self.done = False
        self.request = request
        self.overdue = False  # past its ttl while a live node holds it

    def due(self) -> float:
        return self.next_try if self.overdue else min(self.next_try, self.expires)


class Reliable:
    def __init__(self, engine: Engine, store: Store | None) -> None:
        self.e = engine
        self.store = store
        self.out: dict[str, _Out] = {}
        self._heap: list[tuple[float, int, _Out]] = []
        self._seq = 0
        self.seen = Dedup()
        self.max_ttl = engine.config.qos_limits.max_ttl
        self.unacked_by = Unacked(engine.config.qos_limits, engine)
        self.out_bytes = 0  # of what is in ``out``
        self.acks: dict[str, list[str]] = {}  # node id -> ids handled, sent at the next flush
        self.declines: dict[str, list[str]] = {}  # node id -> ids not taken, sent at the next flush

    # -- sending -----------------------------------------------------------

    @property
    def unacked(self) -> int:
        return len(self.out)

    def track(self, msg: Message, item: bytes, node: str, now: float, deadline: float = math.inf) -> None:
        """``msg`` (qos >= 1) is about to go to ``node``: keep it until it is
        acknowledged. A one-way message past the limits raises (InvalidMessage
        for its ttl, Backpressure for what is unacknowledged), keeping nothing."""
        request = bool(msg.correlation_id)
        # Without a ttl of its own a message just sent may be retried for max_ttl from now.
        expires = now + self.max_ttl if msg.ttl is None else self._expires(msg, now, not request)
        entry = _Out(msg, item, node, now + RETRY_HELD, min(deadline, expires), request)
        size = len(item)
        if not request:
            unacked = self.unacked_by
            if unacked.active or len(self.out) >= unacked.count_floor or self.out_bytes + size > unacked.bytes_floor:
                if not unacked.active:
                    unacked.start((e.msg, len(e.item)) for e in self.out.values() if not e.request)
                unacked.add(msg, size, True)
        if msg.id in self.out:  # the same message sent again by hand: this copy replaces it
            old = self.out[msg.id]
            old.done = True
            self._forget(old)
        self.out[msg.id] = entry
        self.out_bytes += size
        self._push(entry)
        if self.store is not None and not request:
            self.store.put_outbox(msg.id, item)

    def _uncount(self, entry: _Out) -> None:
        """One-way ``entry`` is no longer outstanding, while :mod:`.unacked` counts:
        uncount it, and stop counting once what is outstanding is under half the
        smallest limit."""
        unacked = self.unacked_by
        unacked.remove(entry.msg, len(entry.item))
        if len(self.out) < unacked.count_floor // 2 and self.out_bytes < unacked.bytes_floor // 2:
            unacked.stop()

    def _expires(self, msg: Message, now: float, strict: bool = False) -> float:
        """When ``msg``'s ttl (at most ``max_ttl``; that, without one) runs out,
        on the engine's clock (it counts from the sender's wall-clock timestamp);
        ``strict``: InvalidMessage for a longer one."""
        ttl = msg.ttl
        if ttl is None or ttl > self.max_ttl:
            if strict and ttl is not None:
                raise InvalidMessage(f"ttl {ttl!r} s is longer than this node's QosLimits.max_ttl "
                                     f"({self.max_ttl:g} s) for a qos {msg.qos} message; nothing was sent")
            ttl = self.max_ttl
        return now + ttl - max(0.0, self.e.config.wall_clock() - msg.timestamp)

    def _settled(self, entry: _Out) -> None:
        """``entry`` is done with (acknowledged, answered or expired): forget it."""
        msg = entry.msg
        del self.out[msg.id]
        entry.done = True
        self.out_bytes -= len(entry.item)  # inline: _forget
        if not entry.request:
            if self.unacked_by.active:
                self._uncount(entry)
            if self.store is not None:
                self.store.delete_outbox(msg.id)
        if not self.out:
            self.e.out((ACKED,))

    def _forget(self, entry: _Out) -> None:  # ``entry`` left ``out``, or is replaced there
        self.out_bytes -= len(entry.item)
        if self.unacked_by.active and not entry.request:
            self._uncount(entry)

    def _push(self, entry: _Out) -> None:
        self._seq += 1
        when = entry.due()
        heap = self._heap
        if len(heap) > 1024 and len(heap) > 4 * len(self.out):
            # Settled entries wait in the heap until their due time (30 s on):
            # at a high rate, drop them now so their messages are not kept alive.
            heap[:] = [(e.due(), self._seq + i, e) for i, e in enumerate(self.out.values(), 1)]
            self._seq += len(heap)
            heapq.heapify(heap)
        else:
            heapq.heappush(heap, (when, self._seq, entry))
        self.e.note_deadline(when)

    def handled(self, node: str, ids: list[str]) -> None:
        """``node`` says it handled these messages."""
        for msg_id in ids:
            entry = self.out.get(msg_id)
            if entry is not None and (entry.node == node or entry.node is None or node == LOCAL):
                self._settled(entry)

    def declined(self, node: str, ids: list[str]) -> None:
        """``node`` did not take these (full inbox, agent not there): try again soon."""
        now = self.e.now
        for msg_id in ids:
            entry = self.out.get(msg_id)
            if entry is None or entry.node != node:
                continue
            if entry.overdue:
                self._expire(entry)
                continue
            entry.next_try = now + entry.backoff
            entry.backoff = min(entry.backoff * 2, RETRY_MAX)
            self._push(entry)

    def settle(self, msg_id: str) -> None:
        """A request's reply arrived (or the requester gave up): stop retrying it."""
        entry = self.out.get(msg_id)
        if entry is not None:
            self._settled(entry)

    def node_left(self, node: str) -> None:
        """What went to ``node`` is sent again once a node hosts its target."""
        for entry in self.out.values():
            if entry.node == node:
                entry.node = None
                entry.next_try = self.e.now
                self._push(entry)

    def routes_changed(self) -> None:
        """A node joined or changed its agents: retry unrouted messages now."""
        now = self.e.now
        for entry in self.out.values():
            if entry.node is None and entry.next_try > now:
                entry.next_try = now
                self._push(entry)

    def tick(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now + 1e-9:
            when, _, entry = heapq.heappop(heap)
            if entry.done or when != entry.due():
                continue  # settled, or superseded by a later push
            held = entry.node is not None and (entry.node == LOCAL or entry.node in self.e.members.peers)
            if entry.overdue or now >= entry.expires - 1e-9:
                if not held:
                    self._expire(entry)  # nobody holds it: it was never taken
                    continue
                entry.overdue = True  # its holder will handle it or find it expired
            self._retry(entry, now)
        store = self.store
        if store is not None and store.dirty:
            self.e.commit_store(store)  # what expired leaves the store now, not with the next frame out

    def next_deadline(self) -> float:
        heap = self._heap
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def _expire(self, entry: _Out) -> None:
        msg = entry.msg
        if not entry.request:  # a request times out on its own
            self.e.stats["qos_expired"] += 1
            self.e.out((DEAD, msg, "expired", "not acknowledged within its ttl", msg.target))
        self._settled(entry)

    def _retry(self, entry: _Out, now: float) -> None:
        e = self.e
        msg = entry.msg
        route = e.route(msg.target)
        if route is None or (msg.sender not in e.agents and route != LOCAL and not entry.request):
            # Nobody hosts the target now (or, replayed from a store, its sender is not back yet).
            entry.node = None
            entry.next_try = now + UNROUTED_RETRY
        else:
            entry.node = route
            e.flow.sent(route, msg.target, len(entry.item))
            e.enqueue(route, entry.item)
            if entry.request:
                e.requests.moved(msg, route if route != LOCAL else e.node_id)
            e.stats["retransmits"] += 1
            entry.next_try = now + RETRY_HELD
        self._push(entry)

    def close(self) -> None:
        """The node closes: without a store, what is unacknowledged is dead-lettered."""
        for entry in self.out.values():
            entry.done = True
            if not entry.request and self.store is None:
                msg = entry.msg
                self.e.out((DEAD, msg, "unacked", "the node closed before it was acknowledged", msg.target))
        self.out.clear()
        self._heap.clear()
        self.unacked_by.stop()
        self.out_bytes = 0
        if self.store is not None:
            self.store.close()

    def restore(self, now: float) -> None:
        """Take up what a store kept: outstanding messages and handled qos 2 ids."""
        store = self.store
        if store is None:
            return
        for key in store.load_seen():
            sender, _, msg_id = key.partition("\x00")
            self.seen.restore(sender, msg_id)
        for msg_id, item in store.load_outbox():
            try:
                msg = codec.message_from_item(codec.decode_item(item))
            except Exception:
                store.delete_outbox(msg_id)
                self.e.drop("malformed", "store", f"outbox entry {msg_id!r}")
                continue
            entry = _Out(msg, item, None, now, self._expires(msg, now), False)
            self.out[msg.id] = entry
            self.out_bytes += len(item)  # counted per target and sender, if need be, at the next send
            self._push(entry)

    # -- receiving ---------------------------------------------------------

    def accept(self, origin: str, msg: Message) -> bool:
        """A qos >= 1 message for a local agent arrived: handle it (True), or
        is it a repeat (False, answered here)? FrameError for an id no node
        makes (the window of ids is bounded in count, so ids must be short)."""
        if len(msg.id) > MAX_ID:
            raise FrameError("malformed", f"message id longer than {MAX_ID} characters")
        ttl = msg.ttl
        if ttl is not None and ttl > self.max_ttl:
            msg.ttl = self.max_ttl  # so that a handler can delegate it from here
        seen = self.seen
        window = seen.windows.get(msg.sender)
        if window is None:
            state = seen.add(msg.sender, msg.id)
        else:  # inline: Dedup.add, for a sender seen before
            state = window.get(msg.id)
            if state is None:
                window[msg.id] = RUNNING
                seen.count += 1
                if len(window) > seen.window_limit or seen.count > seen.total_limit:
                    seen.evict(msg.sender, window)
        if state is None:
            return True
        e = self.e
        e.stats["duplicates"] += 1
        if state is not RUNNING:
            if state:
                e.enqueue(origin, state)  # the remembered reply
            elif not msg.correlation_id:
                self._ack(origin, msg.id)
        return False

    def forget(self, origin: str, msg: Message) -> None:
        """The message was dropped before its handler ran: tell its sender to
        send it again (DECLINED), and take that retransmission."""
        self.seen.forget(msg.sender, msg.id)
        msg_id = msg.id
        if origin == LOCAL:
            self.declined(LOCAL, [msg_id])
        else:
            _note(self.declines, origin, msg_id)

    def done(self, origin: str, msg: Message, reply: bytes = DONE) -> None:
        """The handler of ``msg`` (qos >= 1) finished; ``reply``: the encoded reply of
        a request (which :meth:`record` wrote before it was queued)."""
        seen = self.seen
        window = seen.windows.get(msg.sender)
        if not reply and window is not None and window.get(msg.id) is RUNNING:
            window[msg.id] = DONE  # inline: Dedup.finish, for a one-way message taken here
            if len(window) > seen.window_limit or seen.count > seen.total_limit:
                seen.evict(msg.sender, window)  # it grew past them while all of it was running
        else:
            seen.finish(msg.sender, msg.id, reply)
        if not reply:
            if msg.qos >= 2 and self.store is not None:
                self.record(msg)
                if origin == LOCAL:  # settled at once, no frame to wait for
                    self.e.commit_store(self.store)
            self._ack(origin, msg.id)

    def record(self, msg: Message) -> None:
        """Write that qos 2 ``msg`` was handled, so that a repeat after a restart
        is recognised. Committed with the next frame that leaves (its HANDLED,
        or the reply), with everything else handled since: one commit per
        batch, not per message. A crash before that commit is the one window
        in which a restarted node runs the handler again."""
        if self.store is not None:
            self.store.put_seen(f"{msg.sender}\x00{msg.id}")

    def _ack(self, origin: str, msg_id: str) -> None:
        if origin == LOCAL:
            self.handled(LOCAL, [msg_id])
        else:
            _note(self.acks, origin, msg_id)

    def flush_acks(self) -> None:
        """Queue the HANDLED and DECLINED items gathered since the last flush."""
        peers = self.e.members.peers
        for kind, pending in ((codec.Handled, self.acks), (codec.Declined, self.declines)):
            for node, ids in pending.items():
                if node in peers:
                    for i in range(0, len(ids), ACK_CHUNK):
                        self.e.enqueue(node, codec.encode_control(kind(tuple(ids[i:i + ACK_CHUNK]))))
            pending.clear()


def _note(pending: dict[str, list[str]], node: str, msg_id: str) -> None:
    """Add ``msg_id`` to what goes to ``node`` at the next flush."""
    ids = pending.get(node)
    if ids is None:
        pending[node] = [msg_id]
    else:
        ids.append(msg_id)
