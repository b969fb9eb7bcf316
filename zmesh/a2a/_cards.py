"""A mesh agent's A2A agent card, made from its registry entry (internal)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol

from .. import __version__
from ..registry import AgentInfo
from ._setup import A2A_META

__all__ = ["BEARER_SCHEME", "MODES", "agent_card", "agent_url", "card_dict"]

#: The name cards give the bearer-token security scheme (when the gateway has a token).
BEARER_SCHEME = "bearer"
#: What every served agent takes and gives: text, and JSON data.
MODES = ("text/plain", "application/json")


def agent_url(base: str, agent_id: str) -> str:
    """Where the gateway serves ``agent_id``: ``<base>/<agent_id>/``."""
    return f"{base}/{quote(agent_id, safe='')}/"


def _tags(agent: AgentInfo) -> list[str]:
    """The agent's ``meta`` as ``name=value`` tags (its description and the ``a2a.*`` keys left out)."""
    return ["zmesh"] + [f"{k}={v}" for k, v in sorted(agent.meta.items())
                        if k != "description" and not k.startswith(A2A_META)]


def agent_card(agent: AgentInfo, base: str, *, bearer: bool) -> AgentCard:
    """The card of mesh agent ``agent``: its id as the name, a skill per capability
    (described by ``meta["description"]``), JSON-RPC at :func:`agent_url`, streaming."""
    described = agent.meta.get("description")
    description = described if isinstance(described, str) and described else (
        f"zmesh agent {agent.agent_id!r} on node {agent.node_id!r}")
    tags = _tags(agent)
    card = AgentCard(
        name=agent.agent_id,
        description=description,
        supported_interfaces=[AgentInterface(url=agent_url(base, agent.agent_id),
                                             protocol_binding=TransportProtocol.JSONRPC.value,
                                             protocol_version=PROTOCOL_VERSION_CURRENT)],
        version=str(agent.meta.get("version", __version__)),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=list(MODES),
        default_output_modes=list(MODES),
        skills=[AgentSkill(id=skill, name=skill, description=f"{description} ({skill})", tags=tags)
                for skill in agent.capabilities],
    )
    if bearer:
        card.security_schemes[BEARER_SCHEME].CopyFrom(SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="Bearer", description="the token the gateway was started with (--token)")))
        card.security_requirements.append(SecurityRequirement(schemes={BEARER_SCHEME: StringList()}))
    return card


def card_dict(card: AgentCard) -> dict[str, Any]:
    """The card as the JSON the A2A SDK serves."""
    return agent_card_to_dict(card)
