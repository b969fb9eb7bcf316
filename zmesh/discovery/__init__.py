"""Discovery: how a node finds the others without being told.

:mod:`.mdns` announces a node and browses for its mesh by DNS-SD over
multicast DNS; :mod:`.interfaces` resolves ``Node(interfaces=...)`` into the
addresses a node binds, announces and listens on; :mod:`.sockets` keeps
zeroconf's sockets on them. Discovery only reports endpoints; the runtime
decides what to do with them (``zmesh._runtime.discovery_glue``).
"""

from .interfaces import InterfaceScope, resolve_interfaces

# .mdns is not imported here: zeroconf loads only when a node discovers.
__all__ = ["InterfaceScope", "resolve_interfaces"]
