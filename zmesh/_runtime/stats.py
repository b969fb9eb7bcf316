"""What a node tells about itself (internal): ``Node.stats()``, and the
``zmesh.stats`` request every node answers, which ``Node.peer_stats`` sends.

Every figure is read from counters the node keeps anyway (the per-agent ones
live in each agent's inbox); nothing is counted per message for a reader's
sake. Rates are the reader's to compute, from two snapshots (see "Watching a
mesh" in the guide; ``zmesh top`` does so).

The request goes to the node's own address (``zmesh._wire.names.node_address``),
not to an agent: it travels as an ordinary qos 0 request from the asking
node's address, so it has the request path's deadline, ``PeerLost`` and
flow control, and an observer that hosts no agent (``zmesh top``) can send it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from .._wire.names import node_address
from ..errors import InvalidMessage, ZmeshError
from ..message import Message, new_request_id
from .handlers import HandlerTasks
from .inbox import Inbox
from .remote import reply_error

if TYPE_CHECKING:
    from .dispatch import Dispatch
    from .port import MeshPort
    from .watch import Watch

__all__ = ["COUNTERS", "STATS_TOPIC", "node_stats", "agent_stats", "answer", "ask"]

#: The counters of ``Node.stats()``; each is there, at 0, before it first moves.
COUNTERS = (
    "messages_sent", "messages_received", "requests_sent", "broadcasts", "late_replies",
    "handled", "handler_errors", "frames_sent", "frames_received", "bytes_sent", "bytes_received",
    "frames_published", "bytes_published", "heartbeats_published", "items_to_departed_peers",
    "events_overflowed", "credit_waits", "credit_reports", "backpressure_waits", "backpressure_timeouts", "unknown_target_waits",
    "retransmits", "duplicates", "qos_expired", "unacked_refused", "store_errors",
    "cancels_received", "cancelled_running", "cancelled_waiting", "cancel_refused", "cancel_forgotten",
    "chunks_sent", "chunks_received", "chunks_dropped", "wills_published", "wills_failed",
)

#: The topic of the request a node answers with its ``stats()``.
STATS_TOPIC = "zmesh.stats"


def agent_stats(inboxes: dict[str, Inbox], tasks: HandlerTasks) -> dict[str, dict[str, Any]]:
    """``stats()["by_agent"]``: each hosted agent's counters and inbox, by id.

    ``running`` counts the handlers running now; ``waiting_for_thread`` the
    plain ones started but waiting for a thread of a full worker pool
    (``Node(workers=N)``), which a least-loaded pick must count as load too.
    """
    out: dict[str, dict[str, Any]] = {}
    for agent_id, inbox in inboxes.items():
        waiting = tasks.waiting_for_thread(agent_id)
        out[agent_id] = {
            "handled": inbox.handled,
            "inbox": len(inbox),
            "inbox_bytes": inbox.bytes,
            "running": inbox.running - waiting,
            "waiting_for_thread": waiting,
            "dropped": inbox.dropped,
            "dead_letters": inbox.dead_letters,
            "concurrency": inbox.concurrency,
            "inbox_size": inbox.max_count,
            "requests": inbox.requests,
            "errors": inbox.errors,
            "request_ms": round(inbox.request_time * 1e3, 3),
        }
    return out


def node_stats(
    mesh: MeshPort, watch: Watch, counters: Mapping[str, int], inboxes: dict[str, Inbox], tasks: HandlerTasks
) -> dict[str, Any]:
    """What the runtime and its mesh count, for ``node.stats()``: every counter, from the start."""
    out: dict[str, Any] = dict.fromkeys(COUNTERS, 0)
    out.update(mesh.stats())
    out.update(watch.stats)
    out.update(counters)
    by_agent = agent_stats(inboxes, tasks)
    # What agents that left handled, and what each present one has.
    out["handled"] = counters.get("handled", 0) + sum(a["handled"] for a in by_agent.values())
    out["agents"] = len(by_agent)
    out["by_agent"] = by_agent
    return out


def answer(
    mesh: MeshPort,
    dead: Callable[[Message, str, str], None],
    stats: Callable[[], dict[str, Any]],
    node_id: str,
    msg: Message,
    origin: str,
) -> None:
    """A message for node ``node_id`` itself arrived from ``origin``: answer
    a ``zmesh.stats`` request with ``stats()``, refuse anything else."""
    mesh.taken(origin, msg.target)  # its flow-control credit goes back at once
    if msg.correlation_id and msg.topic == STATS_TOPIC:
        mesh.reply(msg, "ok", stats())
        return
    why = f"node {node_id!r} itself answers {STATS_TOPIC!r} requests only"
    dead(msg, "no_handler", why)
    if msg.correlation_id:
        mesh.reply(msg, "no_handler", why)
    elif msg.qos:
        mesh.handled(origin, msg)  # sending it again would not help


async def ask(dispatch: Dispatch, node_id: str, target: str, timeout: float) -> dict[str, Any]:
    """``await node.peer_stats(target)`` from node ``node_id``: that node's ``stats()``."""
    if not isinstance(target, str) or not target:
        raise InvalidMessage(f"node id must be a non-empty string, got {target!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidMessage(f"timeout must be a positive number of seconds, got {timeout!r}")
    me = node_address(node_id)
    msg = Message("query", me, node_address(target), STATS_TOPIC, None, "", me, id=new_request_id())
    msg.correlation_id = msg.id  # unguessable, as every request's
    dispatch.stamp(msg, None)
    reply = await dispatch.node_request(msg, timeout)
    if reply.status != "ok":
        raise reply_error(reply)
    if not isinstance(reply.payload, dict):
        raise ZmeshError(f"node {target!r} answered {STATS_TOPIC!r} with {type(reply.payload).__name__}")
    return reply.payload
