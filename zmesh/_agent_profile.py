"""What an agent says of itself in its node's record (internal to the
registry): its ``meta`` and its last will, checked where the agent is made
and where a peer's record is read."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import msgpack

from .errors import FrameError, InvalidMessage
from .topics import check_topic

__all__ = ["check_meta", "MAX_META_KEYS", "check_will", "MAX_WILL_BYTES", "MAX_WILLS", "Will", "parse_meta", "parse_wills"]

#: An agent's last will: the (topic, payload) broadcast for it when its node goes without a goodbye.
Will = tuple[str, Any]


#: An agent's ``meta``: at most this many keys, each at most 64 characters; string values at most 256.
MAX_META_KEYS = 16
_META_VALUES = (str, int, float, bool, type(None))


def check_meta(meta: object, error: Callable[[str], Exception] = ValueError) -> dict[str, Any]:
    """An agent's ``meta`` as a plain dict; ``error`` unless it is a small map of
    names to strings, numbers, booleans or None."""
    if meta is None:
        return {}
    if not isinstance(meta, dict) or len(meta) > MAX_META_KEYS:
        raise error(f"meta must be a dict of at most {MAX_META_KEYS} entries, got {meta!r}"[:300])
    for key, value in meta.items():
        if not isinstance(key, str) or not key or len(key) > 64:
            raise error(f"meta keys must be non-empty strings of at most 64 characters, got {key!r}"[:300])
        if value.__class__ not in _META_VALUES or (isinstance(value, str) and len(value) > 256):
            raise error(f"meta[{key!r}] must be a string (at most 256 characters), a number, a bool or None, "
                        f"got {value!r}"[:300])
    return dict(meta)


def _malformed_meta(why: str) -> FrameError:
    return FrameError("malformed", "record field meta")


def parse_meta(meta_in: Any, agents: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A peer record's ``meta`` field; FrameError if it is malformed."""
    if meta_in.__class__ is not dict or not all(a in agents for a in meta_in):
        raise FrameError("malformed", "record field meta")
    return {a: check_meta(m, _malformed_meta) for a, m in meta_in.items()}


#: A will's payload, msgpack-encoded, is at most this many bytes.
MAX_WILL_BYTES = 4096


def check_will(will: object) -> Will | None:
    """An agent's last will as a ``(topic, payload)`` tuple (None: none), the
    payload a copy as msgpack reads it back (a caller changing its own object
    later changes nothing); InvalidMessage unless it is a concrete topic
    outside ``zmesh.`` and a payload msgpack encodes in at most
    :data:`MAX_WILL_BYTES` bytes."""
    if will is None:
        return None
    if not isinstance(will, (tuple, list)) or len(will) != 2:
        raise InvalidMessage(f"a will is a (topic, payload) pair, got {will!r}"[:300])
    topic, payload = will
    why = _will_topic_error(topic)
    if why:
        raise InvalidMessage(why)
    try:
        encoded = msgpack.packb(payload)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several types for what it cannot encode
        raise InvalidMessage(f"a will's payload must be plain data msgpack encodes: {exc}"[:300]) from None
    if len(encoded) > MAX_WILL_BYTES:
        raise InvalidMessage(f"a will's payload is {len(encoded)} bytes encoded, over the limit of {MAX_WILL_BYTES}")
    return (topic, msgpack.unpackb(encoded, raw=False, strict_map_key=False))


def _will_topic_error(topic: object) -> str:
    try:
        check_topic(topic)  # type: ignore[arg-type]
    except InvalidMessage as exc:
        return f"a will's topic: {exc}"
    assert isinstance(topic, str)
    if topic.startswith("zmesh."):
        return f"a will's topic may not start with 'zmesh.' (zmesh's own), got {topic!r}"
    return ""


#: Wills one node's record may hold at most.
MAX_WILLS = 1000


def parse_wills(wills_in: Any, agents: Mapping[str, Any]) -> dict[str, Will]:
    """A peer record's ``wills`` field; FrameError if it is malformed or breaks
    a rule :func:`check_will` applies (a peer's will is published by others)."""
    if wills_in.__class__ is not dict or len(wills_in) > MAX_WILLS or not all(a in agents for a in wills_in):
        raise FrameError("malformed", "record field wills")
    wills: dict[str, Will] = {}
    for agent_id, will in wills_in.items():
        if will.__class__ is not list or len(will) != 2 or _will_topic_error(will[0]):
            raise FrameError("malformed", "record field wills")
        try:
            size = len(msgpack.packb(will[1]))
        except Exception:  # noqa: BLE001 - it came out of msgpack, but a hook may have made anything of it
            size = MAX_WILL_BYTES + 1
        if size > MAX_WILL_BYTES:
            raise FrameError("malformed", "a will's payload over the limit")
        wills[agent_id] = (will[0], will[1])
    return wills
