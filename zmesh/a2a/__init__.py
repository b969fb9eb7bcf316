"""zmesh and A2A (the Agent2Agent protocol): the mesh's agents served as A2A
agents, and A2A agents as mesh agents.

::

    async with zmesh.Node("lab") as node, zmesh.a2a.serve(node, port=8000) as server:
        ...  # http://127.0.0.1:8000/<agent_id>/ is an A2A agent; GET / lists their cards

Each agent in the node's registry is an A2A agent at ``/<agent_id>/`` (its
card at ``/<agent_id>/.well-known/agent-card.json``, a skill per
capability); a message is a mesh request to it, a streaming message a mesh
stream, a cancelled task a cancelled request. ``zmesh a2a-gateway --mesh M
--listen HOST:PORT`` runs one. Needs ``pip install 'zmesh-agents[a2a]'``
(a2a-sdk and uvicorn), imported only when a server is made.

The other way, ``async with zmesh.a2a.remote(node, "weather", URL):`` makes
the A2A agent at URL mesh agent ``weather`` (a capability per skill): a mesh
request is a SendMessage, a mesh stream a SendStreamingMessage, a cancel a
CancelTask (``--remote NAME=URL`` on the command). See docs/ecosystem.md.
"""

from ._setup import (
    PIP_LINE,
    SKILL_KEY,
    TOPIC_META_PREFIX,
    URL_META,
    A2ASetupError,
    check_listen,
    is_loopback,
)
from .remote import MESSAGE_TOPIC, RemoteAgent, remote
from .server import DEFAULT_KEEP_TASKS, DEFAULT_TIMEOUT, A2AServer, serve

__all__ = ["DEFAULT_KEEP_TASKS", "DEFAULT_TIMEOUT", "MESSAGE_TOPIC", "PIP_LINE", "SKILL_KEY", "TOPIC_META_PREFIX",
           "URL_META", "A2AServer", "A2ASetupError", "RemoteAgent", "check_listen", "is_loopback", "remote", "serve"]
