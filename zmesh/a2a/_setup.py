"""What the A2A gateway checks before it starts (internal): its optional
dependencies, and where it may listen."""

from __future__ import annotations

import ipaddress

from ..errors import ZmeshError

__all__ = ["A2A_META", "PIP_LINE", "SKILL_KEY", "TOPIC_META_PREFIX", "URL_META", "A2ASetupError", "check_listen",
           "is_loopback", "require_sdk"]

PIP_LINE = "pip install 'zmesh-agents[a2a]'"
#: The message (or request) metadata key naming the skill (a capability of the agent) a message is for.
SKILL_KEY = "skill"
#: The ``meta`` keys zmesh.a2a reads and writes begin so (cards do not show them as tags).
A2A_META = "a2a."
#: An agent's ``meta`` key ``a2a.topic.<skill>`` names the topic a skill's requests go on (default: the skill).
TOPIC_META_PREFIX = A2A_META + "topic."
#: A remote A2A agent's mesh stand-in says in ``meta["a2a.url"]`` where the agent is.
URL_META = A2A_META + "url"


class A2ASetupError(ZmeshError, ValueError):
    """The A2A gateway cannot start as asked: a2a-sdk or uvicorn is missing,
    or it was told to listen beyond loopback without a token."""


def require_sdk() -> None:
    """Raise A2ASetupError, with the pip line, when a2a-sdk's server or uvicorn is missing."""
    try:
        import a2a.server.request_handlers  # noqa: F401
        import sse_starlette  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise A2ASetupError(f"zmesh.a2a needs a2a-sdk (with its HTTP server) and uvicorn ({exc.name} is "
                            f"missing): {PIP_LINE}") from None


def is_loopback(host: str) -> bool:
    """Is ``host`` a loopback address? ``localhost`` is; any other name is not
    (it is never looked up), nor ``0.0.0.0`` or ``::`` (every interface)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a bearer token (A2ASetupError)."""
    if token is not None and not token:
        raise A2ASetupError("the bearer token is empty: give a non-empty one, or none on loopback")
    if token is None and not is_loopback(host):
        raise A2ASetupError(
            f"refusing to serve mesh agents on {host!r} without a bearer token: anyone who reaches that address "
            "could call every agent. Give a token (serve(..., token=...), zmesh a2a-gateway --token or "
            "$ZMESH_A2A_TOKEN), or listen on 127.0.0.1")
