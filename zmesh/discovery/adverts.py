"""What a node advertises over mDNS and what it makes of a peer's advert (internal).

The TXT record (``mesh``, ``node``, ``inc``, ``v``, ``rp``, ``pp``, and
``ck`` for a keyed node) is checked here: a record that cannot be used
raises :class:`Malformed`, whose ``reason`` the discovery counts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import SecurityError
from ..interfaces import InterfaceScope, rank_reachable
from ..security import check_public_key

__all__ = ["PeerAdvert", "Malformed", "instance_label", "parse_advert", "txt_entry_ok", "check_port",
           "TXT_KEYS", "MAX_TXT_ENTRY"]

TXT_KEYS = ("mesh", "node", "inc", "v", "rp", "pp")
MAX_TXT_ENTRY = 255
_MAX_LABEL = 63
_LABEL_OK = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class PeerAdvert:
    """A peer as seen through mDNS: identity, reachable addresses and ports."""

    node_id: str
    incarnation: str
    mesh: str
    version: int
    addresses: tuple[str, ...]
    router_port: int
    pub_port: int
    public_key: str = ""  # keyed nodes: their CurveZMQ public key (Z85)

    def _endpoints(self, port: int) -> list[str]:
        suffix = f"#{self.public_key}" if self.public_key else ""
        return [f"tcp://{addr}:{port}{suffix}" for addr in self.addresses]

    def router_endpoints(self) -> list[str]:
        """ZeroMQ endpoints of the peer's ROUTER socket, best first (with ``#KEY`` if keyed)."""
        return self._endpoints(self.router_port)

    def pub_endpoints(self) -> list[str]:
        """ZeroMQ endpoints of the peer's PUB socket, best first (with ``#KEY`` if keyed)."""
        return self._endpoints(self.pub_port)


def instance_label(node_id: str, incarnation: str, mesh: str = "") -> str:
    """DNS-SD instance label for a node: readable node id plus a short hash.

    The result is a valid DNS label of at most 63 bytes.  The hash of
    (mesh, node id, incarnation) keeps the name unique even after sanitising
    or truncating the node id, lets two meshes on one LAN use the same node
    ids, and gives a restarted node a fresh name so that the previous
    incarnation's goodbye packets cannot withdraw it.
    """
    digest = hashlib.sha1(f"{mesh}\0{node_id}\0{incarnation}".encode()).hexdigest()[:10]
    readable = re.sub(r"[^A-Za-z0-9-]+", "-", node_id).strip("-")[: _MAX_LABEL - len(digest) - 1]
    readable = readable.strip("-")
    label = f"{readable}-{digest}" if readable else f"zmesh-{digest}"
    assert _LABEL_OK.fullmatch(label) and len(label) <= _MAX_LABEL
    return label


def txt_entry_ok(key: str, value: str) -> bool:
    """True when ``key=value`` fits one TXT string."""
    return len(key.encode()) + 1 + len(value.encode()) <= MAX_TXT_ENTRY


def check_port(name: str, port: int) -> None:
    """Validate a TCP port number."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{name} must be an int in 1..65535, got {port!r}")


class Malformed(Exception):
    """A record we cannot use; ``reason`` becomes the stats counter."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def parse_advert(
    properties: Mapping[bytes, bytes | None], parsed: list[str], mesh: str, node_id: str, version: int,
    scope: InterfaceScope,
) -> PeerAdvert:
    """Turn a resolved service (its TXT ``properties`` and IPv4 addresses
    ``parsed``) into a PeerAdvert, as seen by node ``node_id`` of ``mesh``
    speaking protocol ``version`` on ``scope``; or raise Malformed."""
    props: dict[str, str] = {}
    for raw_key, raw_value in properties.items():
        try:
            key = raw_key.decode("utf-8")
            value = raw_value.decode("utf-8") if raw_value is not None else None
        except UnicodeDecodeError as exc:
            raise Malformed("ignored_malformed", f"TXT not UTF-8: {exc}") from None
        if value is not None:
            props[key] = value
    their_mesh = props.get("mesh")
    if their_mesh is not None and their_mesh != mesh:
        raise Malformed("ignored_other_mesh", f"mesh {their_mesh!r}")
    missing = [key for key in TXT_KEYS if key not in props]
    if missing:
        raise Malformed("ignored_malformed", f"TXT missing {', '.join(missing)}")
    their_id = props["node"]
    if their_id == node_id:
        raise Malformed("ignored_self", "another service advertises our node id (duplicate node id?)")
    try:
        their_version = int(props["v"])
        router_port = int(props["rp"])
        pub_port = int(props["pp"])
    except ValueError:
        raise Malformed("ignored_malformed", "non-integer v/rp/pp in TXT") from None
    if not (1 <= router_port <= 65535 and 1 <= pub_port <= 65535):
        raise Malformed("ignored_malformed", f"ports out of range rp={router_port} pp={pub_port}")
    if not their_id or not props["inc"]:
        raise Malformed("ignored_malformed", "empty node id or incarnation")
    if their_version != version:
        raise Malformed("ignored_version", f"protocol version {their_version} (ours {version})")
    public_key = props.get("ck", "")
    if public_key:
        try:
            check_public_key(public_key)
        except SecurityError:
            raise Malformed("ignored_malformed", "bad public key (ck) in TXT") from None
    addresses = tuple(rank_reachable(parsed, scope))
    if not addresses:
        raise Malformed("ignored_unreachable", f"no reachable address in {parsed}")
    return PeerAdvert(
        node_id=their_id,
        incarnation=props["inc"],
        mesh=their_mesh or mesh,
        version=their_version,
        addresses=addresses,
        router_port=router_port,
        pub_port=pub_port,
        public_key=public_key,
    )
