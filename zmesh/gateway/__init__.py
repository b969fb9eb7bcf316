"""Gateways: one mesh's agents reachable from another's, through a node in each.

A gateway joins, say, a LAN mesh on ZeroMQ to a mesh on NATS, so agents on
two LANs reach each other through a NATS server or cluster with the same
API::

    async with zmesh.Node("lab") as lan, zmesh.Node("lab", transport="nats://127.0.0.1:4222") as wan, \\
            Gateway(lan, wan, domain_a="lan1", domain_b="nats"):
        ...  # every agent of each side now has a proxy on the other

Each agent of one side gets a proxy on the other with its id,
capabilities, meta (plus ``zmesh.via``, the domains it came through) and
subscriptions. Messages, requests, streams, cancels and handoffs sent to
the proxy go on to the agent, from the sender's own proxy; broadcasts cross
once, through the side's bridge. Two gateways between the same domains are
each other's standby: an agent id can be taken once per mesh, so only one
stands in for an agent at a time, and when its gateway goes the other takes
over. ``zmesh gateway --mesh M --from zmq --to nats://HOST:PORT`` runs one.
See docs/scaling.md.
"""

from ._paths import ROLE, VIA, bridge_id
from ._side import DEFAULT_TIMEOUT, PROXY_CONCURRENCY
from .gateway import RESYNC_INTERVAL, STEP_DOWN_AFTER, Gateway

__all__ = ["DEFAULT_TIMEOUT", "PROXY_CONCURRENCY", "RESYNC_INTERVAL", "ROLE", "STEP_DOWN_AFTER", "VIA", "Gateway",
           "bridge_id"]
