"""What a requester's node says about a request after sending it (internal):
*stop it* (a cancel) and *tell me when it starts* (a watch, for
``request_any``'s failover).

Stopping a request's handler once its requester no longer waits:

A requester whose ``request`` (or ``delegate``) is cancelled or times out
tells the node hosting the target: a one-way ``zmesh.cancel`` message from
its node address to that node's, its payload the requests as ``[target
agent, correlation id]`` pairs (a delegate keeps its request's correlation
id, so the id alone does not name one request on a node). A node
whose peer left (said goodbye, lost its connection: a process that died)
or restarted does the same by itself for every request that peer sent; not
for a peer that only went silent, which may be a stalled loop that comes
back for its replies. On the handler's node (:class:`Cancellations`):

* a request still waiting in its agent's inbox, or not arrived yet (a broker
  may deliver the cancel first), is dropped when it is taken: never handled;
* a running ``async def`` handler's Task is cancelled: it sees
  ``asyncio.CancelledError``;
* a running plain handler cannot be: :attr:`zmesh.Message.cancelled` turns
  True for it to poll.

No reply is sent (nobody waits for one); the node records a ``cancel``
receipt. A delegate chain stops hop by hop: a cancelled handler's own
pending requests are cancelled with its Task, so its node sends cancels on.

Only the requester's node may cancel: a cancel is honoured when it comes
from the node that hosts the request's sender.

A watch (``zmesh.watch``, the same shape) asks the handler's node to say
when the request's handler starts: it answers ``zmesh.started`` with the
ids, once the handler starts or at once if it runs already (A2A's
*working*). What it is sent for a request not seen yet is kept as a cancel
is.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Callable

from .._engine.config import SILENT_DETAIL
from .._wire.names import node_address
from ..message import CANCELLED_REQUESTS, Message
from .eager import EagerTask

__all__ = ["CANCEL_TOPIC", "WATCH_TOPIC", "STARTED_TOPIC", "Cancellations", "RequestId", "node_message",
           "request_ids", "request_id", "MAX_IDS", "EARLY_TTL", "MAX_EARLY", "linger"]

#: The topic of a cancel, between node addresses.
CANCEL_TOPIC = "zmesh.cancel"
#: "Tell me when these start", and the answer.
WATCH_TOPIC = "zmesh.watch"
STARTED_TOPIC = "zmesh.started"
#: Correlation ids one cancel message carries at most (more: more messages).
MAX_IDS = 256
#: A cancel for a request not seen yet is kept this long (s) ...
EARLY_TTL = 60.0
#: ... and at most this many of them (the oldest go first).
MAX_EARLY = 10_000


#: One request on a node: (its target agent, its correlation id).
RequestId = tuple[str, str]

#: Requests whose handler ended while a step of theirs still runs in the pool (see :func:`linger`).
_LINGERING: set[RequestId] = set()


def linger(key: RequestId, until: asyncio.Future[Any]) -> None:
    """Keep request ``key`` cancelled (``msg.cancelled`` True) until ``until``
    is done: a plain generator's step, still running in its thread after its
    stream stopped waiting for it, goes on seeing that it should stop."""
    _LINGERING.add(key)
    CANCELLED_REQUESTS.add(key)

    def done(_: object) -> None:
        _LINGERING.discard(key)
        CANCELLED_REQUESTS.discard(key)

    until.add_done_callback(done)


def request_id(msg: Message) -> RequestId:
    return (msg.target, msg.correlation_id)


def node_message(node_id: str, target_node: str, topic: str, ids: list[tuple[Any, ...]]) -> Message:
    """A one-way message about requests ``ids``, from node ``node_id`` to node ``target_node``."""
    me = node_address(node_id)
    return Message("notify", me, node_address(target_node), topic, [list(i) for i in ids], "", "", 0)


def request_ids(msg: Message) -> list[RequestId] | None:
    """The requests a cancel, watch or started notice names; None when it is malformed."""
    ids = msg.payload
    if msg.correlation_id or not isinstance(ids, list) or len(ids) > MAX_IDS:
        return None
    out = []
    for pair in ids:
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(part, str) and 0 < len(part) <= 256 for part in pair)):
            return None
        out.append((pair[0], pair[1]))
    return out


#: A running request handler: its Task (or the pool's Future of a plain one), the request, the node it came from.
_Running = tuple[Any, Message, str]


class Cancellations:
    """The request handlers of one node that a cancel can reach."""

    def __init__(self, node_of: Callable[[str], str | None], now: Callable[[], float],
                 receipt: Callable[[str, str, float, Message], None], stats: Counter[str],
                 tell_started: Callable[[str, list[RequestId]], None]) -> None:
        self._node_of = node_of  # the registry's: which node hosts an agent now
        self._tell_started = tell_started  # (node, ids): send it zmesh.started
        #: Watches for requests not started yet: request -> (the node to tell, until when).
        self.watched: dict[RequestId, tuple[str, float]] = {}
        self._now = now
        self._receipt = receipt
        self.running: dict[RequestId, _Running] = {}
        #: Those of them a cancel stopped: request -> when.
        self.stopped: dict[RequestId, float] = {}
        #: Cancels for requests not seen yet: request -> (the cancelling node, until when).
        self.early: dict[RequestId, tuple[str, float]] = {}
        #: The node's counters: cancels_received, cancelled_running, cancelled_waiting, cancel_refused, cancel_forgotten.
        self.stats = stats

    def started(self, msg: Message, running: Any, origin: str) -> None:
        """Request ``msg`` (from node ``origin``)'s handler runs on (``running``) after its start."""
        self.running[(msg.target, msg.correlation_id)] = (running, msg, origin)

    def ended(self, msg: Message) -> bool:
        """Its handler ended: True when it had been cancelled (so its result goes nowhere)."""
        corr = (msg.target, msg.correlation_id)
        entry = self.running.pop(corr, None)
        if entry is None or entry[1] is not msg:
            if entry is not None:
                self.running[corr] = entry  # another request's, with the same id (spoofed)
            return False
        if not self.stopped:
            return False
        stopped_at = self.stopped.pop(corr, None)
        if stopped_at is None:
            return False
        if corr not in _LINGERING:
            CANCELLED_REQUESTS.discard(corr)
        self._receipt("cancel", "success", stopped_at, msg)
        return True

    def cancelled_before_start(self, msg: Message, requester: str | None) -> bool:
        """Was request ``msg`` cancelled (by its requester's node) before it got here? Forgotten then."""
        early = self.early.pop((msg.target, msg.correlation_id), None)
        if early is None:
            return False
        by, until = early
        if by != requester or self._now() > until:
            return False
        self.stats["cancelled_waiting"] += 1
        self._receipt("cancel", "success", self._now(), msg)
        return True

    def cancel(self, by: str, ids: list[RequestId]) -> None:
        """Node ``by`` cancelled the requests ``ids`` it sent."""
        now = self._now()
        self.stats["cancels_received"] += len(ids)
        for corr in ids:
            entry = self.running.get(corr)
            if entry is None:
                self._keep(self.early, corr, by, now)
            elif self._node_of(entry[1].sender) == by:
                self._stop(entry, now)
            else:
                self.stats["cancel_refused"] += 1  # not the requester's node: spoofed, or a stale record

    def watch(self, by: str, ids: list[RequestId]) -> None:
        """Node ``by`` asks to be told when the requests ``ids`` it sent start."""
        now = self._now()
        for corr in ids:
            entry = self.running.get(corr)
            if entry is None:
                self._keep(self.watched, corr, by, now)
            elif self._node_of(entry[1].sender) == by:
                self._tell_started(by, [corr])

    def starting(self, msg: Message) -> None:
        """Request ``msg``'s handler is about to run: tell whoever watches it."""
        key = (msg.target, msg.correlation_id)
        watch = self.watched.pop(key, None)
        if watch is not None and self._now() <= watch[1] and self._node_of(msg.sender) == watch[0]:
            self._tell_started(watch[0], [key])

    def departed(self, node_id: str, detail: str) -> None:
        """Node ``node_id`` left (``detail``: why) or restarted: nobody waits for what
        it asked any more. But for one that only went silent: its loop may be
        stalled, and it gets its replies once it is back (the engine keeps them)."""
        if detail == SILENT_DETAIL:
            return
        now = self._now()
        for entry in list(self.running.values()):
            if entry[2] == node_id:
                self._stop(entry, now)

    def close(self) -> None:
        """The node closes (its handlers are cancelled with it): forget everything."""
        for corr in self.running:
            CANCELLED_REQUESTS.discard(corr)
        self.running.clear()
        self.stopped.clear()
        self.early.clear()
        self.watched.clear()

    def _stop(self, entry: _Running, now: float) -> None:
        running, msg, _ = entry
        key = (msg.target, msg.correlation_id)
        if key in self.stopped:
            return
        self.stopped[key] = now
        self.stats["cancelled_running"] += 1
        CANCELLED_REQUESTS.add(key)
        if isinstance(running, (asyncio.Task, EagerTask)):  # (a pool thread cannot be stopped: msg.cancelled tells it)
            running.cancel()

    def _keep(self, kept: dict[RequestId, tuple[str, float]], corr: RequestId, by: str, now: float) -> None:
        if corr in kept:
            return
        while len(kept) >= MAX_EARLY:
            kept.pop(next(iter(kept)))
            if kept is self.early:
                self.stats["cancel_forgotten"] += 1
        kept[corr] = (by, now + EARLY_TTL)
