"""The zmesh error set.

Every error zmesh raises derives from :class:`ZmeshError`; errors from the
libraries underneath (ZeroMQ, msgpack, zeroconf) are translated at the
boundary and never reach callers raw::

    ZmeshError
    ├── AgentNotRegistered   no node in the mesh hosts that agent id
    │   └── NoProvider       no agent in the mesh has that capability
    ├── AgentExists          the agent id is already taken somewhere in the mesh
    ├── NoHandler            the target agent has no handler for the topic
    ├── Timeout              no reply in time (also a built-in and asyncio TimeoutError)
    ├── InvalidMessage       bad arguments or payload; nothing was sent (also a ValueError)
    ├── HandlerError         the remote handler raised; carries its type and message
    ├── PeerLost             the node hosting the target left or died mid-request
    ├── Backpressure         the target cannot take more yet; nothing was sent
    ├── TransportError       the transport could not be set up (bind failed, ...)
    │   └── AddressInUse     the port asked for is taken
    ├── SecurityError        keys missing, unreadable or unusable; LAN without keys
    └── NodeClosed           the node (or agent) was closed
"""

from __future__ import annotations

import asyncio
import sys

__all__ = [
    "ZmeshError",
    "AgentNotRegistered",
    "NoProvider",
    "AgentExists",
    "NoHandler",
    "Timeout",
    "InvalidMessage",
    "HandlerError",
    "PeerLost",
    "Backpressure",
    "TransportError",
    "AddressInUse",
    "SecurityError",
    "NodeClosed",
]


class ZmeshError(Exception):
    """Base class of every error zmesh raises."""


class AgentNotRegistered(ZmeshError):
    """No node in the mesh hosts the target agent id."""


class NoProvider(AgentNotRegistered):
    """No agent in the mesh declares the capability asked for (``request_any``, ``gather``)."""


class AgentExists(ZmeshError):
    """The agent id is already registered on this node or another live node."""


class NoHandler(ZmeshError):
    """The target agent exists but has no handler for the topic."""


if sys.version_info >= (3, 11):

    class Timeout(ZmeshError, TimeoutError):
        """No reply arrived within the timeout (also a built-in and asyncio TimeoutError)."""

else:  # asyncio.TimeoutError is a class of its own before 3.11: ``except asyncio.TimeoutError`` must catch it too

    class Timeout(ZmeshError, TimeoutError, asyncio.TimeoutError):
        """No reply arrived within the timeout (also a built-in and asyncio TimeoutError)."""


class InvalidMessage(ZmeshError, ValueError):
    """A message could not be built or encoded; nothing was sent."""


class HandlerError(ZmeshError):
    """The remote handler raised.

    ``remote_type`` and ``remote_message`` describe the remote exception.
    """

    def __init__(self, remote_type: str, remote_message: str, *, agent: str = "") -> None:
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.agent = agent
        where = f" in agent {agent!r}" if agent else ""
        # An exception raised without a message (a bare TimeoutError from
        # asyncio.wait_for) reads "TimeoutError in agent 'b'", not "...: ".
        super().__init__(f"{remote_type}{where}: {remote_message}" if remote_message else f"{remote_type}{where}")


class PeerLost(ZmeshError):
    """The node hosting the target left or stopped answering before replying."""


class Backpressure(ZmeshError):
    """The target agent's inbox holds all it may take from this node, and no
    room opened within the timeout; nothing was sent (flow control)."""


class TransportError(ZmeshError):
    """The transport failed in a way the caller cannot fix by retrying the call."""


class AddressInUse(TransportError):
    """The port a node was asked to bind (``Node(port=...)``) is taken."""


class SecurityError(ZmeshError):
    """Keys cannot be used (missing, unreadable, malformed, or no CurveZMQ in
    this libzmq), or a node would listen beyond loopback without keys and
    without ``insecure=True``. The message says what to do."""


class NodeClosed(ZmeshError):
    """The node or agent was closed."""


class FrameError(Exception):
    """Internal: an inbound frame or item is unusable. ``reason`` is a short counter key.

    Never reaches users: the engine counts it as a drop (``stats()["dropped"]``).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
