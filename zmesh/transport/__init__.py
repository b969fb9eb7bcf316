"""Transports: what moves frames or messages between nodes.

A frame-level transport (:class:`FrameTransport`, also called
:class:`Transport`: ZeroMQ, in-process) moves opaque frames and the node's
engine speaks the mesh protocol over them (:mod:`zmesh.transport.base`). A
message-level transport (:class:`MessageTransport`: a broker, the in-memory
:class:`~zmesh.transport.memory.MemoryTransport`) routes whole messages
itself and keeps membership its own way (:mod:`zmesh.transport.message`).
Each declares its :class:`TransportCapabilities`; the node decides from them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

from .base import Transport, TransportCapabilities
from .message import MessageHost, MessageTransport

#: The frame-level transport interface (the same class as :class:`Transport`).
FrameTransport = Transport

if TYPE_CHECKING:
    from ..security import Security

__all__ = ["FrameTransport", "MessageHost", "MessageTransport", "Transport", "TransportCapabilities",
           "default_transport", "make_transport", "transport_class"]

#: Names the transport a node makes when it is given none.
TRANSPORT_ENV_VAR = "ZMESH_TRANSPORT"


def default_transport() -> str:
    """``$ZMESH_TRANSPORT`` (a name or a URL), else ``"zmq"``."""
    return os.environ.get(TRANSPORT_ENV_VAR, "").strip() or "zmq"


def transport_class(spec: str | Transport | MessageTransport) -> type[Transport] | type[MessageTransport]:
    """The class of the transport ``spec`` names (``"zmq"``, ``"inproc"``) or is;
    its ``capabilities`` say what it can do before one is made."""
    if isinstance(spec, (Transport, MessageTransport)):
        return type(spec)
    if spec == "inproc":
        from .inproc import InprocTransport

        return InprocTransport
    if spec == "zmq":
        from .zmq import ZmqTransport

        return ZmqTransport
    if isinstance(spec, str) and spec.startswith(("nats://", "tls://")):
        from .nats import NatsTransport

        return NatsTransport
    if isinstance(spec, str) and spec.startswith(("mqtt://", "mqtts://")):
        from .mqtt import MqttTransport

        return MqttTransport
    if isinstance(spec, str) and spec.startswith("file://"):
        from .file import FileTransport

        return FileTransport
    if isinstance(spec, str) and spec.startswith(("redis://", "rediss://")):
        from .redis import RedisTransport

        return RedisTransport
    raise ValueError(
        f"unknown transport {spec!r}: use 'zmq', 'inproc', a file://, nats://, mqtt:// or redis:// URL, or a Transport instance")


def make_transport(
    spec: str | Transport | MessageTransport, interfaces: str | Sequence[str] | None, port: int = 0, pub_port: int = 0,
    security: Security | None = None,
) -> Transport | MessageTransport:
    """A transport from its name (``"zmq"``, ``"inproc"``), its URL
    (``"nats://127.0.0.1:4222"``, ``"mqtt://127.0.0.1:1883"``,
    ``"redis://127.0.0.1:6379"``) or the instance itself.

    ``port``, ``pub_port`` (0: any free port) and ``security`` with a key
    (see :mod:`zmesh.security`) are for ``"zmq"`` only.
    """
    for what, value in (("port", port), ("pub_port", pub_port)):
        if value.__class__ is not int or not 0 <= value < 65536:
            raise ValueError(f"{what} must be an int from 0 (any free port) to 65535, got {value!r}")
    if (port or pub_port) and spec != "zmq":
        raise ValueError("port= and pub_port= are for the 'zmq' transport (a Transport instance sets its own)")
    if security is not None and security.keyed and spec != "zmq":
        raise ValueError("key= and trusted= are for the 'zmq' transport (a Transport instance sets its own)")
    if isinstance(spec, (Transport, MessageTransport)):
        return spec
    cls = transport_class(spec)  # the factory's own table of names
    if spec == "zmq":
        return cls(interfaces=interfaces, port=port, pub_port=pub_port, security=security)  # type: ignore[call-arg]
    if "://" in spec:
        return cls(spec)  # type: ignore[call-arg]
    return cls()
