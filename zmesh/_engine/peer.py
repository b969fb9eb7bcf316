"""What an engine keeps for another node (internal): a peer, known by its
HELLO, or a knock on an endpoint whose node has not answered yet."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..registry import NodeRecord
from .config import SEED_RETRY

if TYPE_CHECKING:
    from .identity import Rule

__all__ = ["Peer", "Knock"]


@dataclass(slots=True, eq=False)
class Peer:
    node_id: str
    incarnation: str
    key: str
    link: int
    router: str
    pub: str
    record: NodeRecord
    state: str
    last_heard: float
    last_sent: float
    last_knock: float
    acked_seq: int = -1
    was_joined: bool = False
    update_sent: float = 0.0  # when our record last went to it (sent again until acknowledged)
    since: float = 0.0  # when its HELLO made it a peer
    challenged: float = -math.inf  # when we last pinged it because another connection claimed its name
    answered: bool = True  # a frame came over its connection since (publications do not count)
    ponged: float = -math.inf  # when we last answered its PING(true)
    public_key: str | None = None  # keyed mode: the key its HELLO's connection authenticated with
    rule: Rule | None = None  # keyed mode: what the policy lets its key use (None: anything)

    @property
    def node_key(self) -> str:
        """``node|incarnation``: its name for this run (its connection key adds a part of its own)."""
        return f"{self.node_id}|{self.incarnation}"

    @property
    def joined(self) -> bool:
        return self.state == "joined" or self.state == "evasive"


@dataclass(slots=True, eq=False)
class Knock:
    """An endpoint we say HELLO to until its node answers, refuses, or we give up."""

    endpoint: str
    link: int
    state: str = "knocking"
    next_try: float = 0.0
    give_up_at: float = 0.0  # 0: never (a seed the user gave)
    interval: float = SEED_RETRY
    node_id: str = ""  # set when knocking on a lost peer's address
    hellos: int = 1  # HELLOs said to it so far
