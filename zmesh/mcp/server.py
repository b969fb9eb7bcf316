"""The MCP server: a node's view of the mesh's capabilities, served as tools
over stdio or streamable HTTP (see zmesh.mcp)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .._follow import follow as follow_nodes
from .._http import BearerToken, bind_tcp
from ..agent import Agent
from ..errors import ZmeshError
from ._tools import Tool, arguments_to_payload, result_text, tools_of

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

__all__ = ["DEFAULT_TIMEOUT", "MAX_CHUNKS", "MeshTools", "check_listen", "serve_http", "serve_stdio"]

log = logging.getLogger("zmesh.mcp")

#: Seconds a tool call may take (the whole stream) unless told otherwise.
DEFAULT_TIMEOUT = 300.0
#: Chunks one call collects for its result at most (each also went out as progress).
MAX_CHUNKS = 10_000
#: Seconds between two looks at the registry when no event said it changed.
RESYNC_INTERVAL = 1.0
_PROGRESS_TEXT = 4096


def _sdk() -> Any:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ImportError("zmesh.mcp needs the MCP SDK: pip install 'zmesh-agents[mcp]'") from None
    from mcp import types
    return types


class MeshTools:
    """The mesh's capabilities as an MCP server's tools, asked through ``agent``.

    Each capability is a tool (see zmesh.mcp for names, schemas and results);
    a call is ``agent.stream_any(capability, topic, payload)``: each chunk goes
    out as a progress notification, and the result is the reply (one chunk),
    the chunks joined (all strings) or their list. A cancelled call cancels the
    mesh request. The tool list follows the registry; a change is published
    to clients listening for ``tools_list_changed``.
    """

    def __init__(self, agent: Agent, *, timeout: float = DEFAULT_TIMEOUT, name: str = "zmesh") -> None:
        types = _sdk()
        from mcp.server.lowlevel import Server
        from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        self.agent, self.node, self.timeout = agent, agent.node, float(timeout)
        self._types = types
        self._bus = InMemorySubscriptionBus()
        self.server: Server[Any] = Server(
            name, version=_version(), instructions="Tools are the capabilities of the agents of zmesh mesh "
            f"{agent.node.mesh!r}; each call goes to one agent that provides it.",
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self._bus),
        )
        self.counts = {"calls": 0, "errors": 0, "cancelled": 0, "chunks": 0}

    def tools(self) -> dict[str, Tool]:
        """The tools as the registry has them now (this server's own agent left out)."""
        return tools_of(self.node.registry.agents(), frozenset({self.agent.id}))

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        types = self._types
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description, input_schema=dict(t.input_schema))
            for t in self.tools().values()
        ])

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        types = self._types
        tool = self.tools().get(params.name)
        if tool is None:
            from mcp.shared.exceptions import MCPError

            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}: no agent of the mesh provides it")
        self.counts["calls"] += 1
        chunks: list[Any] = []
        try:
            async with self.agent.stream_any(tool.capability, tool.topic, arguments_to_payload(tool, params.arguments),
                                             timeout=self.timeout) as stream:
                async for chunk in stream:
                    chunks.append(chunk)
                    self.counts["chunks"] += 1
                    if len(chunks) > MAX_CHUNKS:
                        raise _TooLong(f"the reply came in more than {MAX_CHUNKS} chunks")
                    text, _ = result_text(chunk)
                    await ctx.session.report_progress(len(chunks), None, text[:_PROGRESS_TEXT])
        except asyncio.CancelledError:
            self.counts["cancelled"] += 1
            raise
        except (ZmeshError, _TooLong) as exc:
            self.counts["errors"] += 1
            message = f"{type(exc).__name__}: {exc}"
            return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)
        text, structured = result_text(_result(chunks))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=structured)

    async def follow(self) -> None:
        """Publish ``tools_list_changed`` whenever the tools change, until cancelled."""
        from mcp.server.subscriptions import ToolsListChanged

        published = tuple(self.tools().values())

        async def step() -> bool:
            nonlocal published
            if self.node.closed:
                return False
            now = tuple(self.tools().values())
            if now != published:
                published = now
                await self._bus.publish(ToolsListChanged())
            return True

        await follow_nodes((self.node,), RESYNC_INTERVAL, step)


class _TooLong(Exception):
    pass


def _result(chunks: list[Any]) -> Any:
    if len(chunks) == 1:
        return chunks[0]
    if chunks and all(isinstance(c, str) for c in chunks):
        return "".join(chunks)
    return chunks or None


def _version() -> str:
    from .. import __version__

    return __version__


async def serve_stdio(agent: Agent, *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Serve the mesh's tools over this process's stdin and stdout until stdin closes."""
    tools = MeshTools(agent, timeout=timeout)
    from mcp.server.stdio import stdio_server

    following = asyncio.get_running_loop().create_task(tools.follow())
    try:
        async with stdio_server() as (read, write):
            await tools.server.run(read, write, tools.server.create_initialization_options())
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following


def check_listen(host: str, token: str | None) -> None:
    """ValueError unless ``host`` is loopback or a bearer ``token`` guards it."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise ValueError(f"listen on an IP address, not {host!r} (127.0.0.1 for this machine only)") from None
    if not loopback and not token:
        raise ValueError(f"refusing to serve the mesh's tools on {host} without a bearer token: anyone who can "
                         "reach it could call every agent; pass a token (--token, or $ZMESH_MCP_TOKEN), or listen "
                         "on 127.0.0.1")


@contextlib.asynccontextmanager
async def serve_http(agent: Agent, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None,
                     timeout: float = DEFAULT_TIMEOUT) -> AsyncIterator[str]:
    """Serve the mesh's tools over streamable HTTP while the block runs; yields the URL (``http://H:P/mcp``).

    Loopback unless a bearer ``token`` is given (ValueError otherwise), which
    every request must then carry (``Authorization: Bearer TOKEN``).
    """
    check_listen(host, token)
    tools = MeshTools(agent, timeout=timeout)
    import uvicorn

    app: Any = tools.server.streamable_http_app(host=host)
    manager = tools.server.session_manager
    config = uvicorn.Config(BearerToken(app, token) if token else app, host=host, port=port, log_level="warning",
                            lifespan="off")
    server = uvicorn.Server(config)
    listening = bind_tcp(host, port)  # bound here, so the URL is known (and connectable) before serve() runs
    try:
        bound = listening.getsockname()[1]
        loop = asyncio.get_running_loop()
        async with manager.run():
            serving = loop.create_task(server.serve(sockets=[listening]))
            following = loop.create_task(tools.follow())
            try:
                yield f"http://{host if ':' not in host else f'[{host}]'}:{bound}/mcp"
            finally:
                server.should_exit = True
                following.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await following
                await serving
    finally:
        listening.close()
