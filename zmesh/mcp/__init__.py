"""The mesh's capabilities as MCP tools, for chat hosts and IDEs.

``zmesh mcp --mesh M`` (stdio; ``--http HOST:PORT`` for streamable HTTP)
serves one tool per capability declared in the registry; a call goes to one
provider (``stream_any``: picked and failed over as ``request_any`` is), its
chunks go out as progress notifications, and an MCP cancel cancels the mesh
request (the handler sees ``CancelledError``). The tool list follows the
registry, announced to clients listening for ``tools_list_changed``::

    async with zmesh.Node("lab") as node:
        await zmesh.mcp.serve_stdio(node.agent("mcp"))

A provider says more of a capability ``cap`` in its ``meta``:
``"topic:cap"`` the topic calls go to (default: ``cap``), ``"schema:cap"`` a
JSON Schema of the payload (a JSON string; without one the tool takes one
argument, ``payload``), ``"description:cap"`` (or ``"description"``). Needs
the MCP SDK: ``pip install 'zmesh-agents[mcp]'``. See docs/ecosystem.md.
"""

from ._tools import (
           DESCRIPTION,
           SCHEMA,
           TOPIC,
           Tool,
           arguments_to_payload,
           result_text,
           tools_of,
)
from .server import (
           DEFAULT_TIMEOUT,
           MAX_CHUNKS,
           MeshTools,
           check_listen,
           serve_http,
           serve_stdio,
)

__all__ = ["DEFAULT_TIMEOUT", "DESCRIPTION", "MAX_CHUNKS", "SCHEMA", "TOPIC", "MeshTools", "Tool",
           "arguments_to_payload", "check_listen", "result_text", "serve_http", "serve_stdio", "tools_of"]
