"""zmesh: a brokerless peer mesh for AI agents.

Every agent is a peer: any agent can send to, request from, delegate to, hand
a task to, or broadcast to any other, and no process is a broker or a leader.
Nodes host agents and talk over ZeroMQ (ROUTER/DEALER for direct traffic,
PUB/SUB for broadcast) or in-process, with the same semantics.

Quick start::

    import asyncio, zmesh

    async def main():
        async with zmesh.Node("lab", transport="inproc") as node:
            a = node.agent("a")
            b = node.agent("b", capabilities=("math.add",))

            @b.on("math.add")
            async def add(msg: zmesh.Message):
                return msg.payload["x"] + msg.payload["y"]

            reply = await a.request("b", "math.add", {"x": 1, "y": 2}, timeout=5)
            print(reply.payload)  # 3

    asyncio.run(main())

Primitives (methods of :class:`Agent`): ``send``, ``request``, ``reply``,
``delegate``, ``handoff``, ``subscribe``/``unsubscribe``, ``broadcast``; by
capability: ``request_any``, ``send_any``, ``gather``/``gather_iter``.
Around them on :class:`Node`: ``dead_letters``, ``observe``, ``registry``,
``events()``, ``stats()``. :mod:`zmesh.sync` offers the same surface without
async/await. ``zmesh.run(main())`` runs an application like ``asyncio.run``
and closes its nodes cleanly on SIGTERM and SIGINT.

Errors::

    ZmeshError
    ├── AgentNotRegistered   no node in the mesh hosts that agent id
    │   └── NoProvider       no agent in the mesh has that capability (request_any, gather)
    ├── AgentExists          the agent id is already taken somewhere in the mesh
    ├── NoHandler            the target agent has no handler for the topic
    ├── Timeout              no reply in time (also a built-in TimeoutError)
    ├── InvalidMessage       bad arguments or payload; nothing was sent (also a ValueError)
    ├── HandlerError         the remote handler raised; carries its type and message
    ├── PeerLost             the node hosting the target left or died mid-request
    ├── Backpressure         the target cannot take more yet; nothing was sent
    ├── TransportError       the transport could not be set up (bind failed, ...)
    │   └── AddressInUse     the port asked for is taken
    ├── SecurityError        keys missing, unreadable or unusable; LAN without keys
    └── NodeClosed           the node (or agent) was closed

The public surface is what ``zmesh.__all__`` names, plus :mod:`zmesh.sync`
(the blocking twin), :mod:`zmesh.transport` (the transport interface for
writing your own), :mod:`zmesh.gateway` (one mesh's agents reachable from
another's), :mod:`zmesh.mcp` (the mesh's capabilities as MCP tools),
:mod:`zmesh.a2a` (mesh agents as A2A agents, and back),
:mod:`zmesh.security` (keys and trust, see docs/security.md) and the
command lines ``zmesh`` and ``python -m zmesh.sim``. Everything else is
internal and may change between releases:
the private packages (``_wire``, the wire format; ``_engine``, the protocol
engine; ``_runtime``, the asyncio runtime; ``_tracing``; ``_tools``, the
command lines), :mod:`zmesh.discovery` but for what its ``__all__`` names, and
``registry``, ``liveness``, ``topics``, ``deadletters``, ``observer``,
``message``, ``clock``, ``errors``, ``store`` and ``sim``'s submodules, whose
public names are re-exported here. See docs/architecture.md.
"""

from ._runtime.handlers import DEFERRED
from ._runtime.run import run
from ._runtime.stream_reader import Stream
from .agent import Agent, Handoff, HandoffResult
from .clock import Clock, FakeClock, SystemClock
from .deadletters import DeadLetter, DeadLetters
from .errors import (
    AddressInUse,
    AgentExists,
    AgentNotRegistered,
    Backpressure,
    HandlerError,
    InvalidMessage,
    NoHandler,
    NoProvider,
    NodeClosed,
    PeerLost,
    SecurityError,
    Timeout,
    TransportError,
    ZmeshError,
)
from .liveness import LivenessConfig
from .quotas import Quotas
from .message import GatherReply, Message, new_id
from .node import Node, current_trace_id, trace_context
from .qos import QosLimits
from .observer import Receipt
from .registry import AgentInfo, MeshEvent, NodeRecord, Registry
from .security import keygen
from .transport.base import Transport

__version__ = "0.1.0"

__all__ = [
    "AddressInUse",
    "Agent",
    "AgentExists",
    "AgentInfo",
    "AgentNotRegistered",
    "Backpressure",
    "Clock",
    "DEFERRED",
    "DeadLetter",
    "DeadLetters",
    "FakeClock",
    "GatherReply",
    "Handoff",
    "HandoffResult",
    "HandlerError",
    "InvalidMessage",
    "LivenessConfig",
    "Quotas",
    "MeshEvent",
    "Message",
    "NoHandler",
    "NoProvider",
    "Node",
    "NodeClosed",
    "NodeRecord",
    "PeerLost",
    "QosLimits",
    "Receipt",
    "Registry",
    "SecurityError",
    "Stream",
    "SystemClock",
    "Timeout",
    "Transport",
    "TransportError",
    "ZmeshError",
    "current_trace_id",
    "keygen",
    "new_id",
    "run",
    "trace_context",
]
