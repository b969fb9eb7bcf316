"""Names on a Redis server (internal): the channels, stream keys and record
keys of one mesh, and a zmesh pattern as a channel glob (see
docs/transports.md). The mesh's name is one ``:``-separated token (``%``
and ``:`` escaped as ``%XX``); an agent's or node's name and a topic are the
rest of the name, as they are (Redis names are binary-safe)."""

from __future__ import annotations

from typing import NamedTuple

from .._wire.names import NODE_ADDRESS_PREFIX, node_address
from ._escape import escape

__all__ = ["Keys", "glob_of"]

_GLOB_SPECIAL = frozenset("\\*?[]^")


def _literal(text: str) -> str:
    """``text`` matched as it is by a Redis glob."""
    if not any(c in _GLOB_SPECIAL for c in text):
        return text
    return "".join("\\" + c if c in _GLOB_SPECIAL else c for c in text)


def glob_of(pattern: str) -> str:
    """A glob that matches (at least) the topics zmesh's ``pattern`` does:
    ``*`` and ``>`` both as ``*`` (a Redis ``*`` crosses dots too, so what
    arrives is matched against the pattern again)."""
    return ".".join("*" if w in ("*", ">") else _literal(w) for w in pattern.split("."))


class Keys(NamedTuple):
    """The names of one mesh; ``prefix`` is ``zmesh:MESH:``."""

    prefix: str

    @classmethod
    def of(cls, mesh: str) -> Keys:
        return cls(f"zmesh:{escape(mesh, '%:')}:")

    def direct(self, address: str) -> str:
        """The channel of an agent (``zmesh:MESH:agent:AGENT``) or of a node
        address (``zmesh:MESH:node:NODE``)."""
        if address.startswith(NODE_ADDRESS_PREFIX):
            return f"{self.prefix}node:{address[len(NODE_ADDRESS_PREFIX):]}"
        return f"{self.prefix}agent:{address}"

    def address(self, channel: str) -> str:
        """The address a :meth:`direct` channel is for ("" if it is none)."""
        rest = channel[len(self.prefix):] if channel.startswith(self.prefix) else ""
        if rest.startswith("agent:"):
            return rest[6:]
        if rest.startswith("node:"):
            return node_address(rest[5:])
        return ""

    def queue(self, agent: str) -> str:
        """The stream that holds agent ``agent``'s QoS 1/2 messages."""
        return f"{self.prefix}q:{agent}"

    def queued_agent(self, stream: str) -> str:
        return stream[len(self.prefix) + 2:]

    def pub(self, topic: str) -> str:
        return f"{self.prefix}pub:{topic}"

    def pub_glob(self, pattern: str) -> str:
        return f"{self.prefix}pub:{glob_of(pattern)}"

    def pub_topic(self, channel: str) -> str:
        return channel[len(self.prefix) + 4:]

    def record(self, node_id: str) -> str:
        """The key that holds node ``node_id``'s record (with an expiry)."""
        return f"{self.prefix}record:{node_id}"

    def records_glob(self) -> str:
        return f"{_literal(self.prefix)}record:*"

    def record_node(self, key: str) -> str:
        return key[len(self.prefix) + 7:]

    @property
    def records(self) -> str:
        """The channel where nodes tell of their records as they change and are renewed."""
        return f"{self.prefix}records"
