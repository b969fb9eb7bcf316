"""Transports: what moves frames between nodes (ZeroMQ, in-process).

See :mod:`zmesh.transport.base` for the interface and the capabilities a
transport declares.
"""

from __future__ import annotations

from typing import Sequence

from .base import Transport, TransportCapabilities

__all__ = ["Transport", "TransportCapabilities", "make_transport"]


def make_transport(spec: str | Transport, interfaces: str | Sequence[str] | None) -> Transport:
    """A transport from its name (``"zmq"``, ``"inproc"``) or the instance itself."""
    if isinstance(spec, Transport):
        return spec
    if spec == "inproc":
        from .inproc import InprocTransport

        return InprocTransport()
    if spec == "zmq":
        from .zmq import ZmqTransport

        return ZmqTransport(interfaces=interfaces)
    raise ValueError(f"unknown transport {spec!r}: use 'zmq', 'inproc' or a Transport instance")
