"""Names (internal): what a mesh, node or agent may be called, and how an
identity from the wire is shown in a log line.

Mesh and node names and agent ids are printable text without spaces, so
log lines, ``zmesh peers`` columns and ``grep`` work on them. Agent ids
also keep clear of the topic syntax (``.``, ``*``, ``>``), so an id can be
a topic word.
"""

from __future__ import annotations

from typing import Iterable

from ..errors import InvalidMessage

__all__ = ["check_name", "check_agent_id", "check_capabilities", "printable", "node_address", "replies_to",
           "MAX_AGENT_ID",
           "MAX_NAME", "NODE_ADDRESS_PREFIX", "PROTOCOL_TOPICS"]

MAX_NAME = 64  # mesh and node names (characters)
MAX_AGENT_ID = 256  # characters
_AGENT_ID_RESERVED = frozenset(".*>")
#: A message to ``NODE_ADDRESS_PREFIX + node_id`` is for that node itself, not
#: one of its agents (no agent id has a ``.``): e.g. ``Node.peer_stats``.
NODE_ADDRESS_PREFIX = "zmesh.node."
#: The topics of what nodes' runtimes tell each other as parts of a primitive
#: (a stream's chunks and window, a request's cancel and start, retained
#: values, a published will): a key's topic policy does not apply to them, as
#: it does not to a reply; each is checked where it is taken (a chunk only
#: from its stream's producer, a cancel only from the requester's node, ...).
#: ``zmesh.stats`` is not one of them: a policy decides who may ask for it.
PROTOCOL_TOPICS = frozenset({"zmesh.chunk", "zmesh.more", "zmesh.cancel", "zmesh.watch", "zmesh.started",
                             "zmesh.retained", "zmesh.will_done"})


def _plain(text: str) -> bool:
    """Printable and without whitespace (str.isprintable lets a space through)."""
    return text.isprintable() and not any(c.isspace() for c in text)


def check_name(what: str, value: object) -> str:
    """A mesh or node name: 1-64 printable characters, no whitespace, no ``|``."""
    if (
        not isinstance(value, str) or not value or len(value) > MAX_NAME or "|" in value
        or not _plain(value)
    ):
        raise InvalidMessage(
            f"{what} name must be 1-{MAX_NAME} printable characters without spaces or '|', got {value!r}"
        )
    return value


def check_agent_id(agent_id: object) -> str:
    """An agent id: 1-256 printable characters without whitespace, ``.``, ``*`` or ``>``."""
    if not isinstance(agent_id, str) or not agent_id or len(agent_id) > MAX_AGENT_ID:
        raise InvalidMessage(
            f"agent id must be a non-empty string of at most {MAX_AGENT_ID} characters, got {agent_id!r}"
        )
    if not _plain(agent_id) or not _AGENT_ID_RESERVED.isdisjoint(agent_id):
        raise InvalidMessage(
            f"agent id {agent_id!r} may not contain '.', '*', '>', spaces or control characters "
            "(use '-' or '_' to separate words)"
        )
    return agent_id


def check_capabilities(capabilities: Iterable[str]) -> tuple[str, ...]:
    """``capabilities`` as a tuple; ValueError unless it is an iterable of non-empty strings."""
    if isinstance(capabilities, (str, bytes)):
        raise ValueError(f"capabilities must be an iterable of strings, not one string: "
                         f"use ({capabilities!r},) for one capability")
    caps = tuple(capabilities)
    if any(not isinstance(c, str) or not c for c in caps):
        raise ValueError(f"capabilities must be non-empty strings, got {caps!r}")
    return caps


def node_address(node_id: str) -> str:
    """The address of node ``node_id`` itself, as a message's target or sender."""
    return NODE_ADDRESS_PREFIX + node_id


def replies_to(reply_to: str, agent_id: str) -> bool:
    """Does ``reply_to`` name agent ``agent_id``? zmesh writes the agent id,
    the seed design ``"agent/topic"`` (an agent id may have a ``/`` itself,
    so it is matched whole, not split)."""
    return reply_to == agent_id or reply_to.startswith(agent_id + "/")


def printable(text: str) -> str:
    """``text`` as a log line may show it: printable as it is, else escaped.

    Peer identities come from the wire: one that is not printable (a raw
    ZeroMQ routing id, a name with control characters) is shown escaped, so
    log lines stay one line of text that ``grep`` reads.
    """
    if text.isprintable() and "\ufffd" not in text:
        return text
    return ascii(text)[1:-1]
