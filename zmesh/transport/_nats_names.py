"""Names on a NATS server (internal): a mesh, node or agent name as one subject
token or a key-value key, and back; the subjects of one mesh (see
docs/transports.md)."""

from __future__ import annotations

from typing import NamedTuple

from .._wire.names import NODE_ADDRESS_PREFIX, node_address
from ._escape import escape, unescape

__all__ = ["Subjects", "subject_token", "unescape", "kv_key", "from_kv_key", "bucket_name", "consumer_name"]


class Subjects(NamedTuple):
    """The subjects of one mesh: ``prefix`` is ``zmesh.MESH.``, ``stream`` the
    name of its stream (and of its key-value bucket)."""

    prefix: str
    stream: str

    @classmethod
    def of(cls, mesh: str) -> Subjects:
        return cls(f"zmesh.{subject_token(mesh)}.", bucket_name(mesh))

    def agent(self, agent: str, topic: str = ">") -> str:
        return f"{self.prefix}agent.{agent}.{topic}"

    def node(self, address: str, topic: str = ">") -> str:
        """Node address ``zmesh.node.NODE``'s subjects: ``zmesh.MESH.node.NODE.TOPIC``."""
        return f"{self.prefix}node.{subject_token(address[len(NODE_ADDRESS_PREFIX):])}.{topic}"

    def pub(self, topic: str) -> str:
        return f"{self.prefix}pub.{topic}"

    def direct(self, subject: str) -> tuple[str, str]:
        """(the address, the topic) of an ``agent`` or ``node`` subject."""
        kind, _, rest = subject[len(self.prefix):].partition(".")
        name, _, topic = rest.partition(".")
        return (name if kind == "agent" else node_address(unescape(name))), topic

    def pub_topic(self, subject: str) -> str:
        return subject[len(self.prefix) + 4:]

    def no_responders(self, node_id: str, reply_to: str = "", correlation_id: str = "", target: str = "") -> str:
        """Where NATS says nobody listens for ``node_id``'s request (``>``: all of them)."""
        if not target:
            return f"{self.prefix}noresp.{subject_token(node_id)}.>"
        return (f"{self.prefix}noresp.{subject_token(node_id)}.{subject_token(reply_to)}."
                f"{subject_token(correlation_id)}.{subject_token(target)}")

    def unanswered(self, subject: str) -> tuple[str, str, str] | None:
        """(reply_to, correlation_id, target) of a no-responders subject."""
        parts = subject[len(self.prefix):].split(".")
        if len(parts) != 5:
            return None
        return unescape(parts[2]), unescape(parts[3]), unescape(parts[4])

    def held(self, agent: str, topic: str = ">") -> str:
        """A QoS 1/2 message's subject, in the mesh's stream."""
        return f"{self.prefix}q.{agent}.{topic}"

    def deliver(self, agent: str) -> str:
        """Where agent ``agent``'s consumer delivers its held messages."""
        return f"{self.prefix}qd.{agent}"

    def held_parts(self, subject: str) -> tuple[str, str]:
        """(agent, topic) of a held message's subject."""
        agent, _, topic = subject[len(self.prefix) + 2:].partition(".")
        return agent, topic


def subject_token(name: str) -> str:
    """``name`` as one subject token: ``%``, ``.``, ``*`` and ``>`` escaped as ``%XX``."""
    return escape(name, "%.*>")


def kv_key(name: str) -> str:
    """``name`` as a KV key (``[-_=a-zA-Z0-9]``): any other character as ``=XX`` per UTF-8 byte."""
    out = []
    for c in name:
        if c.isascii() and (c.isalnum() or c in "-_"):
            out.append(c)
        else:
            out.extend(f"={b:02X}" for b in c.encode())
    return "".join(out)


def from_kv_key(key: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(key):
        if key[i] == "=" and i + 2 < len(key):
            raw += bytes.fromhex(key[i + 1:i + 3])
            i += 3
        else:
            raw += key[i].encode()
            i += 1
    return raw.decode()


def bucket_name(mesh: str) -> str:
    return "zmesh_" + "".join(c if c.isascii() and c.isalnum() or c == "-" else f"_{ord(c):x}_" for c in mesh)


def consumer_name(agent: str) -> str:
    """Agent ``agent``'s JetStream consumer: its id as a KV key, a long one shortened by a hash."""
    key = kv_key(agent)
    if len(key) <= 64:
        return key
    import hashlib

    return f"{key[:40]}_{hashlib.sha256(agent.encode()).hexdigest()[:20]}"
