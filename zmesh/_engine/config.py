"""How an engine is set up, and the constants its parts share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .._wire import codec
from ..liveness import LivenessConfig
from ..message import new_id
from ..quotas import Quotas
from ..qos import QosLimits

__all__ = ["EngineConfig", "LOCAL", "BATCH_BYTES", "MAX_LOGGED_DROPS", "HEADER_ALLOWANCE", "first_endpoint",
           "SEED_RETRY", "SEED_RETRY_MAX", "SEED_SILENT_HELLOS", "DISCOVERED_PATIENCE", "LOST_PATIENCE", "MAX_READY_KEYS", "MAX_READY_PER_KEY",
           "READY_PATIENCE", "MAX_DEPARTED",
           "REDISCOVER_MIN", "REDISCOVER_MAX", "MAX_REFUSALS_PER_SECOND", "MAX_KNOCKING", "MAX_WAITING", "MAX_CONNECTING", "CREDIT_WINDOW", "CREDIT_WINDOW_BYTES"]

LOCAL = "\x00local"  # outbox key of this node's own agents
BATCH_BYTES = 256 * 1024  # a batch is flushed early once it reaches this size
MAX_LOGGED_DROPS = 1024  # bounds the memory that logging "once per peer and reason" takes
HEADER_ALLOWANCE = 64 * 1024

# Flow control (see credit.py): what one sender node may have outstanding to
# one agent. Protocol constants: a receiver reports after half a window.
# 2048 keeps a fast sender from stalling on credit: with 512 it waited for
# a report every few hundred messages, and QoS 0 throughput between two
# processes fell about 20 % (docs/reliability.md). The default inbox holds
# eight such windows.
CREDIT_WINDOW = 2048
CREDIT_WINDOW_BYTES = 8 << 20

# Knocking and looking for peers (seconds).
SEED_RETRY = 1.0
SEED_RETRY_MAX = 10.0
SEED_SILENT_HELLOS = 3  # a seed that has not answered this many HELLOs (2.5 s) is warned about, once
DISCOVERED_PATIENCE = 10.0  # an endpoint heard of second-hand is not knocked on forever
LOST_PATIENCE = 300.0  # a peer that went silent is knocked on this long (a cut link may heal)
#: The ``peer_left`` detail of a peer that went silent: it may only have stalled, and come back.
SILENT_DETAIL = "expired"
REDISCOVER_MIN = 10.0  # while knocking on a lost peer, refresh discovery after this ...
REDISCOVER_MAX = 60.0  # ... doubling up to this
MAX_READY_KEYS = 1024  # subscribers seen before their HELLO, remembered at most ...
MAX_READY_PER_KEY = 16  # ... of which this many from one public key (keyed mode) ...
READY_PATIENCE = 30.0  # ... each for this long (a HELLO follows its SUB in milliseconds)
MAX_DEPARTED = 1024  # connection keys of departed peers remembered, to drop their last frames quietly
MAX_REFUSALS_PER_SECOND = 8  # refusals answered (each opens a connection to where the stranger says)
# Joining (see admission.py): outgoing links to nodes nobody vouched for yet are bounded.
MAX_KNOCKING = 64  # second-hand endpoints (peer lists, discovery) knocked on at once ...
MAX_WAITING = 1024  # ... and waiting for their turn, at most
MAX_CONNECTING = 64  # peers that said HELLO but are not attached yet


def first_endpoint(endpoints: tuple[str, ...]) -> str | None:
    return endpoints[0] if endpoints else None


@dataclass(frozen=True, slots=True)
class EngineConfig:
    mesh: str
    node_id: str
    incarnation: str
    max_payload: int = 1 << 20
    #: None where the transport itself knows when a peer is gone (in-process).
    liveness: LivenessConfig | None = LivenessConfig()
    #: Of a peer's endpoints, the one to dial from here (the transport's scope rule).
    choose: Callable[[tuple[str, ...]], str | None] = first_endpoint
    #: Wall-clock seconds, for the timestamp of replies the engine writes itself.
    wall_clock: Callable[[], float] = lambda: 0.0
    version: int = codec.PROTOCOL_VERSION
    #: Ids of the replies the engine writes itself (a simulator passes a seeded one).
    new_id: Callable[[], str] = new_id
    #: Flow control: messages (and bytes) one sender may have outstanding to one agent.
    window: int = CREDIT_WINDOW
    window_bytes: int = CREDIT_WINDOW_BYTES
    #: Durable QoS state (a :class:`zmesh.store.Store`); None keeps it in memory only.
    store: Any = None
    #: Payload hooks (``Node(encoder=..., decoder=...)``, see zmesh/_wire/packer.py).
    encoder: codec.Encoder | None = None
    decoder: codec.Decoder | None = None
    #: Keyed mode: this node's public key (Z85), the key a node name is bound
    #: to by the trusted directory (``NAME.key``), and the parsed
    #: ``Node(policy=...)`` (see :mod:`.identity`).
    public_key: str | None = None
    key_of_name: Callable[[str], str | None] = lambda name: None
    policy: Any = None
    #: What one peer and one key may take of this node (``Node(quotas=...)``).
    quotas: Quotas = Quotas()
    #: Bounds on what QoS 1 and 2 keep (``Node(qos_limits=...)``).
    qos_limits: QosLimits = QosLimits()
