"""The mesh protocol engine: no I/O, no asyncio, no clock reads (internal).

:class:`Engine` takes frames (with the transport's sender key), local
commands and the current time, and leaves effects for its driver; see
:mod:`.effects` for what a driver must do and :mod:`.states` for every
per-peer state and transition.
"""

from .config import LOCAL, EngineConfig, first_endpoint
from .core import Engine
from .members import Knock, Peer
from .requests import Pending
from .states import STATES, TRANSITIONS

__all__ = ["Engine", "EngineConfig", "first_endpoint", "LOCAL", "Peer", "Knock", "Pending", "STATES", "TRANSITIONS"]
