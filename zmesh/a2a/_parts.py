"""A2A messages and parts to zmesh payloads and back, and which skill a
message asks for (internal; imported once a2a-sdk is known to be there)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from a2a.types.a2a_pb2 import Message, Part
from a2a.utils.errors import InvalidParamsError
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

from ..registry import AgentInfo
from ._setup import SKILL_KEY, TOPIC_META_PREFIX

__all__ = ["ReplyNotCarried", "message_parts", "parts_of", "payload_of", "payload_of_parts", "pick_skill",
           "topic_of"]



class ReplyNotCarried(ValueError):
    """A reply (or chunk) that A2A's parts cannot carry (not JSON: a set, a NaN, a map with non-string keys)."""


def _narrow(value: Any) -> Any:
    """A data part's numbers are doubles on the wire: whole ones come back as ints, as they were sent."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, list):
        return [_narrow(v) for v in value]
    if isinstance(value, dict):
        return {k: _narrow(v) for k, v in value.items()}
    return value


def _part_dict(part: Part) -> dict[str, Any]:
    out: dict[str, Any]
    if part.HasField("text"):
        out = {"text": part.text}
    elif part.HasField("data"):
        out = {"data": _narrow(MessageToDict(part.data))}
    elif part.HasField("raw"):
        out = {"raw": bytes(part.raw)}
    elif part.HasField("url"):
        out = {"url": part.url}
    else:
        out = {}
    if part.media_type:
        out["media_type"] = part.media_type
    if part.filename:
        out["filename"] = part.filename
    return out


def payload_of(message: Message) -> Any:
    """The zmesh payload of an A2A message: its text (text parts joined by
    newlines) when it has only text parts; else ``{"parts": [...]}``, each
    part a dict with one of ``text``, ``data`` (the JSON value), ``raw``
    (bytes) or ``url``, plus ``media_type`` and ``filename`` when set;
    None when it has no parts."""
    return payload_of_parts(message.parts)


def payload_of_parts(given: Sequence[Part]) -> Any:
    """:func:`payload_of` for parts (an artifact's, a chunk's)."""
    parts = list(given)
    if not parts:
        return None
    if all(p.HasField("text") for p in parts):
        return "\n".join(p.text for p in parts)
    return {"parts": [_part_dict(p) for p in parts]}


def _json_safe(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ReplyNotCarried(f"{value!r} is not a JSON number")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ReplyNotCarried(f"a map key {key!r} is not a string")
            _json_safe(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _json_safe(item)
    elif not (value is None or isinstance(value, (str, bool, int, float))):
        raise ReplyNotCarried(f"a {type(value).__name__} is not JSON")


def parts_of(value: Any) -> list[Part]:
    """A reply or a chunk as A2A parts: a str is a text part, bytes a raw
    part, anything else JSON a data part; ReplyNotCarried for the rest."""
    if isinstance(value, str):
        return [Part(text=value)]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return [Part(raw=bytes(value), media_type="application/octet-stream")]
    _json_safe(value)
    try:
        return [Part(data=ParseDict(_listed(value), struct_pb2.Value()))]
    except (ParseError, TypeError, ValueError) as exc:
        raise ReplyNotCarried(str(exc)) from None


def _part_of(item: Mapping[str, Any]) -> Part:
    """A part dict of :func:`payload_of`'s ``{"parts": [...]}`` form back as a Part."""
    if isinstance(item.get("text"), str):
        part = Part(text=item["text"])
    elif isinstance(item.get("raw"), (bytes, bytearray)):
        part = Part(raw=bytes(item["raw"]))
    elif isinstance(item.get("url"), str):
        part = Part(url=item["url"])
    elif "data" in item:
        [part] = parts_of(item["data"])
    else:
        raise ReplyNotCarried(f"a part needs one of text, raw, url or data, got {sorted(item)}")
    part.media_type = str(item.get("media_type", ""))
    part.filename = str(item.get("filename", ""))
    return part


def message_parts(payload: Any) -> list[Part]:
    """A mesh payload as the parts of an A2A message: the inverse of :func:`payload_of`
    (a ``{"parts": [...]}`` dict gives those parts), else as :func:`parts_of`."""
    if isinstance(payload, Mapping) and set(payload) == {"parts"} and isinstance(payload["parts"], list) \
            and all(isinstance(item, Mapping) for item in payload["parts"]):
        return [_part_of(item) for item in payload["parts"]]
    if payload is None:
        return []
    return parts_of(payload)


def _listed(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_listed(v) for v in value]
    if isinstance(value, list):
        return [_listed(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _listed(v) for k, v in value.items()}
    return value


def pick_skill(agent: AgentInfo, metadata: Mapping[str, Any]) -> str:
    """The skill a message is for: ``metadata["skill"]``, or the agent's only
    capability. InvalidParamsError (an A2A error) says which skills exist."""
    skills: Sequence[str] = agent.capabilities
    named = metadata.get(SKILL_KEY)
    listed = ", ".join(repr(s) for s in skills)
    if named is not None:
        if isinstance(named, str) and named in skills:
            return named
        raise InvalidParamsError(message=f"agent {agent.agent_id!r} has no skill {named!r}; its skills: "
                                         f"{listed or 'none'}")
    if len(skills) == 1:
        return skills[0]
    if not skills:
        raise InvalidParamsError(message=f"agent {agent.agent_id!r} declares no skill (capability): there is "
                                         "nothing to call")
    raise InvalidParamsError(message=f"agent {agent.agent_id!r} has several skills ({listed}): name one in "
                                     f"the message's metadata[{SKILL_KEY!r}]")


def topic_of(agent: AgentInfo, skill: str) -> str:
    """The mesh topic a skill's requests go on: the agent's ``meta["a2a.topic.<skill>"]``, else the skill."""
    topic = agent.meta.get(TOPIC_META_PREFIX + skill)
    return topic if isinstance(topic, str) and topic else skill
