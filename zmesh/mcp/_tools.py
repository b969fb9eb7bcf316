"""The mesh's capabilities as MCP tools (internal): names, schemas, arguments
and results, with no MCP import, so the mapping is testable on its own."""

from __future__ import annotations

import base64
import datetime
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..registry import AgentInfo

__all__ = ["DESCRIPTION", "SCHEMA", "TOPIC", "Tool", "arguments_to_payload", "result_text", "tools_of"]

#: Agent meta keys a provider may set for a capability ``cap``: ``"topic:cap"`` the
#: topic its requests go to (default: the capability itself), ``"schema:cap"`` a
#: JSON Schema of the payload (as a JSON string), ``"description:cap"`` (or
#: ``"description"`` for all its capabilities) what the tool does.
TOPIC, SCHEMA, DESCRIPTION = "topic:", "schema:", "description:"
_TOOL_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_MAX_NAME = 128
_PAYLOAD_ONLY: dict[str, Any] = {
    "type": "object",
    "properties": {"payload": {"description": "the request's payload: any JSON value"}},
}


@dataclass(frozen=True)
class Tool:
    """One MCP tool: a capability, the topic its calls go to, its input schema
    (``wrapped``: the schema's one property ``payload`` is the payload)."""

    name: str
    capability: str
    topic: str
    description: str
    input_schema: Mapping[str, Any] = field(hash=False, compare=True)
    wrapped: bool
    providers: tuple[str, ...]


def _tool_name(capability: str, taken: set[str]) -> str:
    base = (_TOOL_NAME.sub("_", capability) or "_")[:_MAX_NAME]
    name, n = base, 2
    while name in taken:
        suffix = f"_{n}"
        name, n = base[: _MAX_NAME - len(suffix)] + suffix, n + 1
    return name


def _schema(text: Any) -> tuple[dict[str, Any], bool] | None:
    """A provider's schema meta as (input schema, wrapped); None when there is none or it is not JSON Schema."""
    if not isinstance(text, str):
        return None
    try:
        schema = json.loads(text)
    except ValueError:
        return None
    if not isinstance(schema, dict):
        return None
    if schema.get("type") == "object":
        return schema, False
    return {"type": "object", "properties": {"payload": schema}, "required": ["payload"]}, True


def tools_of(agents: Mapping[str, AgentInfo], exclude: frozenset[str] = frozenset()) -> dict[str, Tool]:
    """Tool name -> Tool for every capability some agent (not in ``exclude``) declares.

    Where providers of one capability say different things, the first by agent
    id that says it wins. Names are the capability with characters MCP does not
    allow in a tool name made ``_`` (``_2``, ``_3`` ... after a clash).
    """
    providers: dict[str, list[AgentInfo]] = {}
    for agent_id in sorted(agents):
        if agent_id in exclude:
            continue
        info = agents[agent_id]
        for capability in info.capabilities:
            providers.setdefault(capability, []).append(info)
    tools: dict[str, Tool] = {}
    for capability in sorted(providers):
        infos = providers[capability]

        def said(key: str, infos: list[AgentInfo] = infos) -> Any:
            return next((info.meta[key] for info in infos if info.meta.get(key) is not None), None)

        topic = said(TOPIC + capability)
        schema = _schema(said(SCHEMA + capability))
        description = said(DESCRIPTION + capability) or said("description")
        names = ", ".join(info.agent_id for info in infos)
        name = _tool_name(capability, set(tools))
        tools[name] = Tool(
            name=name,
            capability=capability,
            topic=topic if isinstance(topic, str) and topic else capability,
            description=str(description) if description else f"zmesh capability {capability!r} (agents: {names})",
            input_schema=schema[0] if schema else _PAYLOAD_ONLY,
            wrapped=schema[1] if schema else True,
            providers=tuple(info.agent_id for info in infos),
        )
    return tools


def arguments_to_payload(tool: Tool, arguments: Mapping[str, Any] | None) -> Any:
    """The request payload a call's arguments stand for."""
    arguments = dict(arguments or {})
    return arguments.get("payload") if tool.wrapped else arguments


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")
    if isinstance(value, dict):
        return {k if isinstance(k, str) else json.dumps(_jsonable(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def result_text(value: Any) -> tuple[str, dict[str, Any] | None]:
    """A reply payload as an MCP tool result: its text (a string as it is, else
    JSON), and the object itself when it is one (MCP's structured content)."""
    if isinstance(value, str):
        return value, None
    plain = _jsonable(value)
    return json.dumps(plain, ensure_ascii=False), plain if isinstance(plain, dict) else None
