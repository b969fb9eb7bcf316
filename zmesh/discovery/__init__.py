"""Discovery: how a node finds the others without being told.

:mod:`.mdns` announces a node and browses for its mesh by DNS-SD over
multicast DNS, on the addresses :mod:`zmesh.interfaces` resolved;
:mod:`.sockets` keeps zeroconf's sockets on them. Discovery only reports
endpoints; the runtime decides what to do with them
(``zmesh._runtime.discovery_glue``). Nothing is imported here, so zeroconf
loads only when a node discovers.
"""

__all__: list[str] = []
