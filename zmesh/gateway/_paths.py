"""Which agents a gateway stands in for on the other side (internal).

Every agent a gateway stands in for carries, in its ``meta``, the path of
domains it came through (``zmesh.via``, comma-separated, the domain of
the real agent first). A gateway from domain S to domain T stands in on T
for an agent of S only when T is not on that agent's path yet: a path
vector, as BGP's AS path, so two gateways per LAN, or LANs joined through
one NATS mesh, never loop a message back to where it came from.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from .._agent_profile import MAX_META_KEYS

__all__ = ["ROLE", "VIA", "bridge_id", "check_domain", "lock_id", "path_of", "proxy_meta", "relay_id"]

#: meta name: the domains an agent's proxy came through, comma-separated, the real agent's first.
VIA = "zmesh.via"
#: meta name of a gateway's own agents ("relay", "bridge"): never stood in for.
ROLE = "zmesh.gateway"

_MAX_VIA = 256
_DOMAIN = re.compile(r"^[A-Za-z0-9_:/@+-][A-Za-z0-9_:/@+.-]{0,63}$")


def check_domain(domain: object) -> str:
    """A domain name as given, or ValueError: 1-64 characters of letters, digits and ``_:/@+-.``."""
    if not isinstance(domain, str) or not _DOMAIN.match(domain):
        raise ValueError(f"a gateway domain is 1-64 letters, digits or '_:/@+-.' (no commas or spaces), "
                         f"got {domain!r}")
    return domain


def path_of(meta: Mapping[str, Any], domain: str) -> list[str]:
    """The domains an agent seen in ``domain`` came through, ``domain`` last."""
    via = meta.get(VIA)
    path = [d for d in via.split(",") if d] if isinstance(via, str) else []
    if not path or path[-1] != domain:
        path.append(domain)
    return path


def proxy_meta(meta: Mapping[str, Any], path: list[str]) -> dict[str, Any] | None:
    """The meta of a proxy with this path: the agent's own, and ``VIA``; None when it does not fit."""
    via = ",".join(path)
    out = {k: v for k, v in meta.items() if k != VIA}
    out[VIA] = via
    if len(via) > _MAX_VIA or len(out) > MAX_META_KEYS:
        return None
    return out


def _slug(text: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9_-]+", "_", text)[:48]
    return f"{readable}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def bridge_id(into: str) -> str:
    """The agent that carries broadcasts into domain ``into``: one id, so one gateway holds it at a time."""
    return f"zmesh-bridge-{_slug(into)}"


def lock_id(domain_a: str, domain_b: str) -> str:
    """The agent the gateway that stands in between two domains holds (on its first side's mesh)."""
    return f"zmesh-gateway-{_slug(domain_a + ',' + domain_b)}"


def relay_id(node_id: str) -> str:
    """A gateway node's own agent, the sender of what it relays for an agent it does not stand in for."""
    return f"zmesh-relay-{_slug(node_id)}"
