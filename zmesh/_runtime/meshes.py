"""Which mesh a node runs, and what it is told of its node (internal): the
mesh is chosen by what the transport says it moves (``capabilities.level``),
never by the transport's name."""

from __future__ import annotations

from typing import Any, Callable, Iterable, TypeVar

from .._engine import EngineConfig, first_endpoint
from ..clock import Clock
from ..errors import TransportError
from ..liveness import LivenessConfig
from ..quotas import Quotas
from ..qos import QosLimits
from ..security import Security
from ..transport.base import Transport
from ..transport.message import MessageTransport
from .frame_mesh import FrameMesh
from .message_mesh import MessageMesh
from .port import MeshPort, MeshSink
from .watch import Watch

__all__ = ["mesh_config", "open_mesh"]

S = TypeVar("S", bound=MeshSink)


def _no_names(node_id: str) -> str | None:
    return None


def mesh_config(
    mesh: str, node_id: str, incarnation: str, max_payload: int, liveness: LivenessConfig,
    transport: Transport | MessageTransport, clock: Clock, store: Any, encoder: Any, decoder: Any,
    security: Security, policy: Any, quotas: Quotas | None = None, qos_limits: QosLimits = QosLimits(),
) -> EngineConfig:
    """What a mesh knows of its node: identity, limits, payload hooks, keys and policy."""
    caps = transport.capabilities
    return EngineConfig(
        mesh=mesh,
        node_id=node_id,
        incarnation=incarnation,
        max_payload=max_payload,
        liveness=liveness if caps.peers_can_vanish else None,
        choose=transport.choose if isinstance(transport, Transport) else first_endpoint,
        wall_clock=clock.time,
        store=store,
        encoder=encoder,
        decoder=decoder,
        public_key=security.key.public if security.key is not None else None,
        key_of_name=security.trusted.key_of_name if security.trusted is not None else _no_names,
        policy=policy,
        quotas=quotas or Quotas(),
        qos_limits=qos_limits,
    )


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
