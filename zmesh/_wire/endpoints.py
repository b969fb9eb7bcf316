"""Endpoint strings (internal; :mod:`zmesh.transport.base` re-exports them):
``tcp://host:port``, with ``#KEY`` after it when the node has a key."""

from __future__ import annotations

__all__ = ["endpoint_address", "endpoint_host", "endpoint_key", "is_loopback_endpoint"]


def endpoint_address(endpoint: str) -> str:
    """The endpoint without its public key: ``tcp://h:5555#KEY`` -> ``tcp://h:5555``.

    A keyed node's endpoints carry its CurveZMQ public key (40 Z85
    characters) after ``#``; Z85 may contain ``:`` and ``#``, but a host and
    port never hold ``#``, so the first one separates them.
    """
    return endpoint.partition("#")[0]


def endpoint_key(endpoint: str) -> str | None:
    """The public key an endpoint carries (``tcp://h:5555#KEY`` -> ``KEY``), or None."""
    _, sep, key = endpoint.partition("#")
    return key if sep else None


def endpoint_host(endpoint: str) -> str:
    """``tcp://10.0.0.2:5555`` -> ``10.0.0.2`` (the part between scheme and port)."""
    return endpoint.partition("#")[0].split("://", 1)[-1].rsplit(":", 1)[0]


def is_loopback_endpoint(endpoint: str) -> bool:
    return endpoint_host(endpoint).startswith("127.")
