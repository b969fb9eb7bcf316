"""Wires mDNS discovery (zmesh.discovery) into a node: adverts become join attempts."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from .._wire.codec import PROTOCOL_VERSION
from ..discovery.mdns import MdnsDiscovery, PeerAdvert
from ..transport.base import endpoint_address

if TYPE_CHECKING:
    from ..transport.base import Transport

__all__ = ["start_mdns"]

log = logging.getLogger("zmesh")


async def start_mdns(
    mesh: str, node_id: str, incarnation: str, transport: Transport, discovered: Callable[[str], None]
) -> MdnsDiscovery:
    """Advertise node ``node_id`` of ``mesh`` and tell ``discovered`` the
    router endpoint of every peer of its mesh that shows up.

    ``transport`` declares ``discovery="mdns"``: its endpoints are TCP ports
    on the addresses of its ``scope`` (an :class:`zmesh.interfaces.InterfaceScope`).
    """

    keyed = transport.public_key is not None

    def on_peer(advert: PeerAdvert) -> None:
        if bool(advert.public_key) != keyed:
            log.debug("zmesh %s: ignored %s on mDNS: %s", node_id, advert.node_id,
                      "it has no key, we have" if keyed else "it has a key, we have none")
            return
        endpoints = advert.router_endpoints()
        if endpoints:  # already ranked: an address on a network we share comes first
            discovered(endpoints[0])

    discovery = MdnsDiscovery(
        mesh=mesh,
        node_id=node_id,
        incarnation=incarnation,
        version=PROTOCOL_VERSION,
        scope=getattr(transport, "scope"),
        router_port=int(endpoint_address(transport.router_endpoint).rsplit(":", 1)[1]),
        pub_port=int(endpoint_address(transport.pub_endpoint).rsplit(":", 1)[1]),
        on_peer=on_peer,
        logger=log,
        public_key=transport.public_key,
    )
    await discovery.start()
    return discovery
