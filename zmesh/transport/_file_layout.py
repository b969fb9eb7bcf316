"""Where things are on the file bus (internal): the seed design's
``FileBroker`` layout, under the bus directory ``DIR``::

    DIR/topics/<topic as folders>/msg_<id>.envelope   published by a seed FileBroker, routed by any node
    DIR/agents/<id>/inbox/msg_<id>.envelope           an agent's messages, read and then deleted
    DIR/agents/<id>/subscriptions/<topic with _>      what an agent (or a node) subscribed to: the topic
    DIR/agents/<id>.json                              the registry record of an agent (zmesh's: its node)
    DIR/nodes/<node>.record                           a zmesh node's membership record, touched every heartbeat

A node's own address ``zmesh.node.NODE`` is an agent directory like the
others (``DIR/agents/zmesh.node.NODE/``): its inbox gets what is sent to the
node and the broadcasts its subscriptions match. A name is one path
component: ``%`` and ``/`` (and a leading ``.``) are written ``%XX``.
Files are written under a temporary name (``.tmp-...``, which no reader
looks at) and renamed into place, so nobody ever reads half an envelope."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from ._escape import escape, unescape

__all__ = ["BusLayout", "component", "write_atomically"]

ENVELOPE = ".envelope"


def component(name: str) -> str:
    """``name`` as one path component."""
    text = escape(name, "%/\\\x00")
    if text.startswith(".") or not text:
        text = "%2E" + text[1:] if text else "%00"
    return text


def from_component(text: str) -> str:
    return unescape(text)


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` at ``path``, renamed into place (OSError when the directory is not there)."""
    tmp = path.parent / f".tmp-{uuid.uuid4().hex}"
    with open(tmp, "wb") as out:
        out.write(data)
    try:
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


class BusLayout:
    """The paths of one bus directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.topics = root / "topics"
        self.agents = root / "agents"
        self.nodes = root / "nodes"

    def make(self) -> None:
        for folder in (self.topics, self.agents, self.nodes):
            folder.mkdir(parents=True, exist_ok=True)

    def agent(self, address: str) -> Path:
        return self.agents / component(address)

    def inbox(self, address: str) -> Path:
        return self.agent(address) / "inbox"

    def subscriptions(self, address: str) -> Path:
        return self.agent(address) / "subscriptions"

    def subscription(self, address: str, pattern: str) -> Path:
        """The seed's subscription file: the topic with ``.`` as ``_``."""
        return self.subscriptions(address) / component(pattern.replace(".", "_"))

    def agent_record(self, address: str) -> Path:
        return self.agents / (component(address) + ".json")

    def node_record(self, node_id: str) -> Path:
        return self.nodes / (component(node_id) + ".record")

    def topic_folder(self, topic: str) -> Path:
        """The seed's folder of a topic: one folder per word."""
        return self.topics.joinpath(*(component(word) for word in topic.split(".")))

    @staticmethod
    def envelope_name(msg_id: str) -> str:
        return f"msg_{component(msg_id)}{ENVELOPE}"
