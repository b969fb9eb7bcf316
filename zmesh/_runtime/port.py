"""The seam between the runtime and whatever moves messages (internal).

The runtime (dispatch, delivery, handlers, inboxes, request futures, flow
control waits, dead letters, receipts) talks to "the mesh" through
:class:`MeshPort` only, and the mesh answers through :class:`MeshSink`:

* :class:`MeshPort` is what the runtime asks: send, request, reply,
  broadcast, the registry of agents, credit taken and handled, membership.
  The frame mesh (:class:`~zmesh._runtime.frame_mesh.FrameMesh`: the
  protocol engine and its asyncio driver, over a frame-level transport such
  as ZeroMQ) is one implementation; a mesh over a message-level transport
  (a broker) is another.
* :class:`MeshSink` is what the mesh tells the runtime: the API effects
  (deliver a message to a local agent, a request resolved or failed, credit
  back for a target, a dead letter, a message for the node itself). Mesh
  events and acknowledgements go to the runtime's
  :class:`~zmesh._runtime.watch.Watch`, which the mesh is given when made.

Both run on the node's event loop; no method blocks. The wire effects
(frames to send, links to open, subscriptions) never cross this seam: they
are the frame mesh's own business (``zmesh._engine.effects``).

A *route* is what :meth:`MeshPort.admit` returns for a target: an opaque
non-empty string to pass on to :meth:`MeshPort.send` or
:meth:`MeshPort.request`; ``""`` when flow control has no credit for the
target now (a :meth:`MeshSink.credit` call for it says when to ask again);
None when no node hosts it. An *origin* is the node a delivered message
came from (or the mesh's name for "this node"); the runtime hands it back
unchanged in :meth:`MeshPort.taken`, :meth:`MeshPort.handled` and
:meth:`MeshPort.unhandled`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping, Protocol

from ..message import Message
from ..registry import Registry, Will
from .routes import Entry

__all__ = ["MeshPort", "MeshSink", "HostedAgent", "RequestKey"]

#: Identifies a pending request between :meth:`MeshPort.request` and :meth:`MeshSink.resolved`.
RequestKey = tuple[str, str]


class MeshSink(Protocol):
    """What the mesh tells the runtime (the API effects)."""

    def deliver(self, agent_id: str, msg: Message, broadcast: bool, origin: str, size: int) -> None:
        """``msg`` arrived for local agent ``agent_id`` (``size``: its encoded
        bytes, for inbox limits). The runtime owes :meth:`MeshPort.taken`
        once it leaves the agent's inbox (direct messages only), and for a
        one-way qos >= 1 message :meth:`MeshPort.handled` or
        :meth:`MeshPort.unhandled`."""
        ...

    def resolved(self, key: RequestKey, reply: Message | None, error: Exception | None) -> None:
        """The request ``key`` was answered (``reply``) or failed (``error``:
        Timeout, PeerLost)."""
        ...

    def credit(self, agent: str) -> None:
        """``agent`` may take more from this node (or its node left): senders
        waiting for credit to it look again."""
        ...

    def dead(self, msg: Message, reason: str, detail: str, target: str) -> None:
        """The mesh gave up on ``msg`` (``reason`` as in
        :class:`~zmesh.deadletters.DeadLetter`)."""
        ...

    def node_message(self, msg: Message, origin: str) -> None:
        """A message for the node itself (its node address): the runtime answers it."""
        ...


class MeshPort(Protocol):
    """What the runtime asks of the mesh. Calls that change what goes out
    carry it out before they return (or at the end of the current drain)."""

    registry: Registry
    #: The node's event loop once started (None before).
    loop: asyncio.AbstractEventLoop | None
    #: Inside a batch of arrivals: what handlers send leaves when it ends.
    in_drain: bool
    #: The node's monotonic clock, as the mesh reads it.
    now: Callable[[], float]
    def admit(self, target: str) -> str | None:
        """The route to ``target`` (see the module docstring)."""
        ...

    def route(self, target: str) -> str | None:
        """As :meth:`admit` without flow control: where a target lives (None: nowhere)."""
        ...

    def taken(self, origin: str, agent: str) -> None:
        """A message from ``origin`` left ``agent``'s inbox: its credit goes back."""
        ...

    def unhandled(self, origin: str, msg: Message) -> None:
        """One-way qos >= 1 ``msg`` was dropped here before its handler ran:
        its sender sends it again (where the mesh does that)."""
        ...

    def forget_request(self, key: RequestKey) -> None:
        """The caller no longer waits for request ``key`` (cancelled)."""
        ...

    def drop(self, reason: str, where: str, detail: str = "") -> None:
        """Count (and log once per ``where`` and ``reason``) something dropped."""
        ...

    @property
    def peers(self) -> list[str]: ...

    @property
    def joining(self) -> bool: ...

    def learning_until(self) -> float:
        """Until when (``time.monotonic()``) a target no node hosts may be one
        the mesh is about to learn of (a send or request to it waits)."""
        ...

    def try_send(self, msg: Message, now: float) -> str | None:
        """Send ``msg`` if its target is known and has credit: the route it
        took; "" (no credit) or None (no node hosts the target): nothing sent."""
        ...

    def send(self, msg: Message, route: str, now: float) -> None:
        """Send ``msg`` by ``route`` (from :meth:`admit`, with credit)."""
        ...

    def end_batch(self) -> None:
        """What was sent so far leaves now; the next send starts a new batch."""
        ...

    def hold(self) -> None:
        """Batch what is sent next until the loop runs again."""
        ...

    def request(self, msg: Message, deadline: float, now: float, route: str) -> RequestKey | None:
        """Queue request ``msg``; its answer comes to :meth:`MeshSink.resolved`
        by ``deadline`` (else a Timeout). None: its target is gone. The
        caller keeps the key, then calls :meth:`pump`: a local handler may
        answer within it."""
        ...

    def reply(self, request: Message, status: str, payload: Any) -> None: ...

    def handled(self, origin: str, msg: Message) -> None:
        """The handler of one-way qos >= 1 ``msg`` finished: acknowledge it."""
        ...

    def broadcast(self, msg: Message) -> int:
        """Publish ``msg``; how many nodes it reaches (this one included)."""
        ...

    def handler_ended(self) -> None:
        """A handler ended outside a drain: carry out what it asked for now."""
        ...

    def pump(self) -> None:
        """Carry out whatever is pending."""
        ...

    def set_agent(self, agent_id: str, capabilities: tuple[str, ...], subscriptions: frozenset[str],
                  meta: Mapping[str, Any] | None = None, will: Will | None = None) -> None: ...

    def remove_agent(self, agent_id: str) -> None: ...

    def is_settled(self) -> bool:
        """Has every peer acknowledged this node's latest record?"""
        ...

    def all_acked(self) -> bool:
        """Is every qos >= 1 message this node sent acknowledged (or dead)?"""
        ...

    def stats(self) -> dict[str, Any]:
        """The mesh's counters, for ``Node.stats()``."""
        ...


class HostedAgent(Protocol):
    """What delivery asks of a local agent (:class:`zmesh.Agent` is one)."""

    id: str
    #: The ``on()`` handler that takes a topic, and where it runs.
    handler_entry: Callable[[str], Entry | None]

    @property
    def handoff_handler(self) -> Callable[..., Any] | None: ...

    @property
    def handoff_mode(self) -> str: ...

    def claim(self, task_id: str) -> None: ...
