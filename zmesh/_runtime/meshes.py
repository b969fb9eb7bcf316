"""Which mesh a node runs (internal): chosen by what its transport says it
moves (``capabilities.level``), never by the transport's name."""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

from .._engine import EngineConfig
from ..clock import Clock
from ..errors import TransportError
from ..transport.base import Transport
from ..transport.message import MessageTransport
from .frame_mesh import FrameMesh
from .message_mesh import MessageMesh
from .port import MeshPort, MeshSink
from .watch import Watch

__all__ = ["open_mesh"]

S = TypeVar("S", bound=MeshSink)


def open_mesh(
    config: EngineConfig,
    transport: Transport | MessageTransport,
    clock: Clock,
    watch: Watch,
    seeds: Iterable[str],
    make_sink: Callable[[MeshPort], S],
) -> FrameMesh[S] | MessageMesh[S]:
    """The frame mesh (the engine over frames) or the message mesh (over a broker)."""
    level = transport.capabilities.level
    if level == "frame" and isinstance(transport, Transport):
        return FrameMesh(config, transport, clock, watch, seeds, make_sink)
    if level == "message" and isinstance(transport, MessageTransport):
        return MessageMesh(config, transport, clock, watch, seeds, make_sink)
    raise TransportError(
        f"transport {transport.name!r} declares level {level!r}: a FrameTransport moves "
        "'frame's, a MessageTransport 'message's"
    )
