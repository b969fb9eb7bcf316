"""What the parts of a node share: peer, seed and pending-request records, and
(for type checkers) the attributes and methods each part relies on.

A node is split by concern: :mod:`zmesh.wire` moves and decodes frames,
:mod:`zmesh.membership` joins peers and keeps them alive, :mod:`zmesh.node`
hosts agents and implements the primitives.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from .liveness import LivenessConfig, PeerLiveness
from .message import Message
from .registry import MeshEvent, NodeRecord, Registry
from .transport.base import Link, Transport

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["NodeState", "Peer", "Seed", "Pending", "SEED_RETRY", "SEED_RETRY_MAX",
           "DISCOVERED_PATIENCE", "LOST_PATIENCE"]

SEED_RETRY = 1.0
SEED_RETRY_MAX = 10.0
DISCOVERED_PATIENCE = 10.0
LOST_PATIENCE = 300.0


@dataclass(slots=True, eq=False)
class Peer:
    node_id: str
    incarnation: str
    key: str
    link: Link
    router: str
    pub: str
    liveness: PeerLiveness | None
    record: NodeRecord
    sub_ready: bool = False
    joined: bool = False
    acked_seq: int = -1


@dataclass(slots=True, eq=False)
class Pending:
    future: asyncio.Future[Message]
    node_id: str
    deadline: float  # on the node's clock (monotonic)
    message: Message
    started: float
    kind: str


@dataclass(slots=True, eq=False)
class Seed:
    endpoint: str
    link: Link
    refused: str = ""
    answered: bool = False
    next_try: float = field(default=0.0)
    give_up_at: float = 0.0  # discovered endpoints are not retried forever
    interval: float = SEED_RETRY
    node_id: str = ""  # set when knocking on a lost peer's address



class NodeState:
    """Base of the node's parts; declares, for type checkers only, the state
    and methods one part uses from another."""

    if TYPE_CHECKING:
        id: str
        mesh: str
        key: str
        max_frame: int
        liveness_config: LivenessConfig
        transport: Transport
        registry: Registry
        _loop: asyncio.AbstractEventLoop | None
        _closed: bool
        _seq: int
        _agents: dict[str, Agent]
        _peers: dict[str, Peer]
        _peers_by_key: dict[str, Peer]
        _seeds: dict[str, Seed]
        _ready_keys: set[str]
        _seed_endpoints: list[str]
        _pending: dict[tuple[str, str], Pending]
        _outbox: dict[str, list[Any]]
        _pub_items: list[bytes]
        _pub_size: int
        _flush_scheduled: bool
        _in_drain: bool
        _hot: bool
        _stats: Counter[str]
        _dropped: Counter[str]
        _logged_drops: set[tuple[str, str]]
        _tasks: set[asyncio.Task[None]]
        _settle_waiters: list[asyncio.Future[None]]
        _tick_handle: asyncio.TimerHandle | None
        _discovery: Any

        @property
        def endpoint(self) -> str: ...
        def _emit(self, events: Iterable[MeshEvent]) -> None: ...
        def _local_record(self) -> NodeRecord: ...
        def _wake_settle_waiters(self) -> None: ...
        def _check_open(self) -> None: ...
        def _on_message(self, msg: Message, peer: Peer | None) -> None: ...
        def _fan_out(self, msg: Message) -> None: ...
        def _on_hello(self, key: str, item: list[Any]) -> None: ...
        def _on_refuse(self, key: str, item: list[Any]) -> None: ...
        def _on_control(self, peer: Peer, kind: int, item: list[Any]) -> None: ...
