"""zmesh and A2A (the Agent2Agent protocol): the mesh's agents served as A2A agents.

::

    async with zmesh.Node("lab") as node, zmesh.a2a.serve(node, port=8000) as server:
        ...  # http://127.0.0.1:8000/<agent_id>/ is an A2A agent; GET / lists their cards

Each agent in the node's registry is an A2A agent at ``/<agent_id>/`` (its
card at ``/<agent_id>/.well-known/agent-card.json``, a skill per
capability); a message is a mesh request to it, a streaming message a mesh
stream, a cancelled task a cancelled request. ``zmesh a2a-gateway --mesh M
--listen HOST:PORT`` runs one. Needs ``pip install 'zmesh-agents[a2a]'``
(a2a-sdk and uvicorn), imported only when a server is made. See
docs/ecosystem.md.
"""

from ._setup import (
    PIP_LINE,
    SKILL_KEY,
    TOPIC_META_PREFIX,
    A2ASetupError,
    check_listen,
    is_loopback,
)
from .server import DEFAULT_KEEP_TASKS, DEFAULT_TIMEOUT, A2AServer, serve

__all__ = ["DEFAULT_KEEP_TASKS", "DEFAULT_TIMEOUT", "PIP_LINE", "SKILL_KEY", "TOPIC_META_PREFIX", "A2AServer", "A2ASetupError",
           "check_listen", "is_loopback", "serve"]
