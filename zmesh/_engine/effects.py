"""What an engine asks its driver to do: tuples whose first element is one of
these opcodes. Plain tuples and int opcodes keep the hot path cheap.

=================  =============================================  ==========================================
opcode             tuple                                          the driver ...
=================  =============================================  ==========================================
``SEND``           ``(SEND, link, frame)``                        sends ``frame`` on the link with that id
``PUBLISH``        ``(PUBLISH, frame)``                           publishes ``frame`` to every subscriber
``OPEN``           ``(OPEN, link, endpoint)``                     opens link ``link`` to a router endpoint
``CLOSE``          ``(CLOSE, link)``                              closes the link
``SUBSCRIBE``      ``(SUBSCRIBE, pub_endpoint)``                  attaches to a peer's publications
``UNSUBSCRIBE``    ``(UNSUBSCRIBE, pub_endpoint)``                detaches
``ANNOUNCE``       ``(ANNOUNCE,)``                                tells every publisher it is attached to
                                                                  that it is (transport.announce())
``DELIVER``        ``(DELIVER, agent_id, msg, broadcast,          hands ``msg`` to the local agent's inbox;
                   origin, size)``                                ``origin``: the sender's node (or LOCAL)
``REPLIED``        ``(REPLIED, key, reply)``                      resolves the pending request ``key``
``FAILED``         ``(FAILED, key, error)``                       fails it (PeerLost, Timeout)
``EVENT``          ``(EVENT, mesh_event)``                        reports a MeshEvent
``ACKED``          ``(ACKED,)``                                   wakes whoever waits for ``is_settled()``
``REDISCOVER``     ``(REDISCOVER,)``                              refreshes discovery (a peer went quiet)
``DEAD``           ``(DEAD, msg, reason, detail, target)``        records a dead letter
``CREDIT``         ``(CREDIT, node, agent)``                      wakes senders waiting for credit to
                                                                  ``agent`` on ``node`` (or LOCAL)
``NODE_MSG``       ``(NODE_MSG, msg, origin)``                    answers a message for this node itself
                                                                  (its node address, e.g. ``zmesh.stats``)
=================  =============================================  ==========================================
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "Effect", "SEND", "PUBLISH", "OPEN", "CLOSE", "SUBSCRIBE", "UNSUBSCRIBE", "ANNOUNCE",
    "DELIVER", "REPLIED", "FAILED", "EVENT", "ACKED", "REDISCOVER", "DEAD", "CREDIT", "NODE_MSG",
    "NAMES",
]

Effect = tuple[Any, ...]

SEND: Final = 0
PUBLISH: Final = 1
OPEN: Final = 2
CLOSE: Final = 3
SUBSCRIBE: Final = 4
UNSUBSCRIBE: Final = 5
ANNOUNCE: Final = 6
DELIVER: Final = 7
REPLIED: Final = 8
FAILED: Final = 9
EVENT: Final = 10
ACKED: Final = 11
REDISCOVER: Final = 12
DEAD: Final = 13
CREDIT: Final = 14
NODE_MSG: Final = 15

NAMES: Final = (
    "SEND", "PUBLISH", "OPEN", "CLOSE", "SUBSCRIBE", "UNSUBSCRIBE", "ANNOUNCE",
    "DELIVER", "REPLIED", "FAILED", "EVENT", "ACKED", "REDISCOVER", "DEAD", "CREDIT", "NODE_MSG",
)
