"""Names on an MQTT broker (internal): a mesh, node or agent name as one topic
level, a zmesh topic as levels, a pattern as a topic filter, and back (see
docs/transports.md)."""

from __future__ import annotations

from typing import NamedTuple

from .._wire.names import NODE_ADDRESS_PREFIX, node_address
from ._escape import escape, unescape

__all__ = ["Topics", "level", "unlevel"]


def level(name: str) -> str:
    """``name`` as one topic level: ``%``, ``/``, ``+`` and ``#`` escaped as ``%XX``."""
    return escape(name, "%/+#")


unlevel = unescape


def _levels(topic: str) -> str:
    """A zmesh topic (or pattern: ``*`` -> ``+``, ``>`` -> ``#``) as topic levels."""
    return "/".join("+" if w == "*" else "#" if w == ">" else level(w) for w in topic.split("."))


def _words(levels: list[str]) -> str:
    return ".".join(unlevel(w) for w in levels)


class Topics(NamedTuple):
    """The topics of one mesh; ``prefix`` is ``zmesh/MESH/``."""

    prefix: str

    @classmethod
    def of(cls, mesh: str) -> Topics:
        return cls(f"zmesh/{level(mesh)}/")

    def agent(self, agent: str, topic: str | None = None) -> str:
        """Agent ``agent``'s topic ``topic`` (None: the filter for all of them)."""
        return f"{self.prefix}agent/{level(agent)}/{'#' if topic is None else _levels(topic)}"

    def node(self, address: str, topic: str | None = None) -> str:
        """Node address ``zmesh.node.NODE``'s topic ``topic`` (None: the filter for all)."""
        name = level(address[len(NODE_ADDRESS_PREFIX):])
        return f"{self.prefix}node/{name}/{'#' if topic is None else _levels(topic)}"

    def pub(self, topic_or_pattern: str) -> str:
        return f"{self.prefix}pub/{_levels(topic_or_pattern)}"

    def record(self, node_id: str | None = None) -> str:
        """Node ``node_id``'s retained record (None: the filter for every node's)."""
        return f"{self.prefix}record/{'+' if node_id is None else level(node_id)}"

    def loaded(self, token: str) -> str:
        """Where a starting node hears its own marker once the retained records came."""
        return f"{self.prefix}loaded/{level(token)}"

    def parse(self, mqtt_topic: str) -> tuple[str, str, str] | None:
        """(kind, address or node id, zmesh topic) of a topic of this mesh;
        kind is ``agent``, ``node``, ``pub``, ``record`` or ``loaded``."""
        if not mqtt_topic.startswith(self.prefix):
            return None
        parts = mqtt_topic[len(self.prefix):].split("/")
        kind = parts[0]
        if kind in ("agent", "node") and len(parts) >= 3:
            name = unlevel(parts[1])
            return kind, (name if kind == "agent" else node_address(name)), _words(parts[2:])
        if kind == "pub" and len(parts) >= 2:
            return kind, "", _words(parts[1:])
        if kind in ("record", "loaded") and len(parts) == 2:
            return kind, unlevel(parts[1]), ""
        return None
