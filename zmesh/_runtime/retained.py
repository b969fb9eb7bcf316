"""Retained topics (internal): the last value broadcast on a topic with
``retain=True``, kept by the publisher's node, and given to every new
subscription that matches before any live broadcast.

The publisher's node keeps, per topic, the last retained broadcast its
agents made (a ``None`` payload clears it; a ttl ends it). A new
subscription's node asks every node of the mesh (a ``zmesh.retained``
request between node addresses, the pattern as payload) for what matches;
of two values for one topic (two publishers), the newer wins. While the
answers come, live broadcasts for that subscription wait, so the retained
values come first. Values go with their node: a node that leaves takes
its retained topics with it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import msgpack

from .._wire.names import node_address
from ..errors import ZmeshError
from ..message import Message, new_request_id
from ..topics import matches

if TYPE_CHECKING:
    from .dispatch import Dispatch

__all__ = ["RETAINED_TOPIC", "RETAINED_HEADROOM", "RetainedStore", "MAX_RETAINED", "retained_answer",
           "retained_messages", "newest_per_topic", "fetch"]

#: The topic of the request a node answers with its retained values.
RETAINED_TOPIC = "zmesh.retained"
#: Topics one node retains at most (beyond: the oldest is forgotten).
MAX_RETAINED = 10_000
#: Values one answer carries at most ...
MAX_ANSWER = 1_000
#: ... in the smaller of the two nodes' message limits, less this many bytes (the reply's other fields).
RETAINED_HEADROOM = 4096


class RetainedStore:
    """This node's retained values, by topic."""

    def __init__(self) -> None:
        self.values: dict[str, Message] = {}
        self.dropped = 0

    def put(self, msg: Message) -> None:
        """``msg`` was broadcast with ``retain=True``: keep it (a None payload: forget the topic)."""
        values = self.values
        values.pop(msg.topic, None)
        if msg.payload is None:
            return
        while len(values) >= MAX_RETAINED:
            values.pop(next(iter(values)))
            self.dropped += 1
        values[msg.topic] = msg

    def matching(self, pattern: str, now: float) -> list[Message]:
        """The live values on topics that ``pattern`` matches (those whose ttl ran out are forgotten)."""
        out = []
        for topic, msg in list(self.values.items()):
            if msg.expired(now):
                del self.values[topic]
            elif matches(pattern, topic):
                out.append(msg)
        return out[-MAX_ANSWER:]


def retained_answer(messages: list[Message], budget: int) -> tuple[list[list[Any]], int]:
    """What a node answers a ``zmesh.retained`` request with, in at most about
    ``budget`` bytes (the newest values first), and how many were left out."""
    items: list[list[Any]] = []
    used = 0
    for m in sorted(messages, key=lambda m: m.timestamp, reverse=True):
        item = [m.topic, m.payload, m.sender, m.timestamp, m.ttl, m.trace_id, m.priority, m.id]
        try:
            size = len(msgpack.packb(item))
        except Exception:  # a payload only the node's own encoder takes: counted at a guess
            size = 1024
        if used + size > budget:
            continue
        used += size
        items.append(item)
    return items, len(messages) - len(items)


def retained_messages(answer: Any, pattern: str) -> list[Message]:
    """The messages an answer carries (what does not match ``pattern``, or is malformed, is left out)."""
    if not isinstance(answer, list):
        return []
    out = []
    for item in answer[:MAX_ANSWER]:
        if not (isinstance(item, list) and len(item) == 8):
            continue
        topic, payload, sender, stamp, ttl, trace_id, priority, msg_id = item
        if not (isinstance(topic, str) and isinstance(sender, str) and isinstance(stamp, (int, float))
                and isinstance(msg_id, str)
                and (ttl is None or isinstance(ttl, (int, float))) and isinstance(trace_id, str)
                and isinstance(priority, int) and 0 <= priority <= 5):
            continue
        try:
            if not matches(pattern, topic):
                continue
        except Exception:
            continue
        out.append(Message("notify", sender, "", topic, payload, "", "", priority, 0, ttl, float(stamp), trace_id,
                           id=msg_id))
    return out


def newest_per_topic(messages: list[Message]) -> list[Message]:
    """One value per topic, the newest; in the order they were broadcast."""
    newest: dict[str, Message] = {}
    for msg in messages:
        held = newest.get(msg.topic)
        if held is None or msg.timestamp > held.timestamp:
            newest[msg.topic] = msg
    return sorted(newest.values(), key=lambda m: m.timestamp)


async def fetch(dispatch: Dispatch, pattern: str, timeout: float) -> list[Message]:
    """Every node's retained values matching ``pattern`` (this one's too), newest per topic.
    A node that does not answer in ``timeout`` s is left out."""
    node_id = dispatch.config.node_id
    me = node_address(node_id)
    found = dispatch.retained.matching(pattern, dispatch.config.clock.time())

    async def ask(peer: str) -> list[Message]:
        msg = Message("query", me, node_address(peer), RETAINED_TOPIC, pattern, "", me, id=new_request_id())
        msg.correlation_id = msg.id
        dispatch.stamp(msg, None)
        try:
            reply = await dispatch.node_request(msg, timeout)
        except ZmeshError:
            return []  # gone, or an older node: nothing retained there that we can have
        return retained_messages(reply.payload, pattern) if reply.status == "ok" else []

    peers = [n for n in dispatch.node_ids() if n != node_id]
    for answer in await asyncio.gather(*(ask(peer) for peer in peers)):
        found.extend(answer)
    return newest_per_topic(found)
