"""``zmesh.a2a.serve``: every agent of a mesh reachable as an A2A agent over HTTP.

The gateway is one agent (``a2a-gateway-<pid>``) on a node of the mesh; an
A2A request to ``http://HOST:PORT/<agent_id>/`` becomes a request (or a
stream) from it to ``agent_id``. Routes follow the registry: each request
looks the agent up, so one that joins is served at once and one that leaves
answers 404. See docs/ecosystem.md.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._http import BearerToken, bind_tcp
from ..node import Node
from ..registry import AgentInfo
from ._setup import A2ASetupError, check_listen, require_sdk

if TYPE_CHECKING:
    from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from ..agent import Agent
    from ._handler import MeshRequestHandler
    from ._store import BoundedTaskStore

__all__ = ["BODY_PER_PAYLOAD", "DEFAULT_KEEP_TASKS", "DEFAULT_TIMEOUT", "A2AServer", "serve"]

log = logging.getLogger("zmesh.a2a")

#: Seconds an A2A request (a whole stream) may take on the mesh, unless ``serve(timeout=...)`` says otherwise.
DEFAULT_TIMEOUT = 300.0
#: Tasks that ended each agent's server keeps for GetTask, unless ``serve(keep_tasks=...)`` says otherwise.
DEFAULT_KEEP_TASKS = 1000
#: The largest request body taken, as a multiple of the node's ``max_payload`` (a bigger one could not
#: become a mesh payload anyway), unless ``serve(max_body=...)`` says otherwise.
BODY_PER_PAYLOAD = 4
_START_TIMEOUT = 10.0


class _BodyLimit:
    """ASGI middleware: a request body beyond ``limit`` bytes gets 413 (by its
    Content-Length), or a JSON-RPC "Payload too large" error (a chunked one)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self._app = app
        self._limit = limit
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self._limit:
            from starlette.responses import JSONResponse

            self.refused += 1
            await JSONResponse({"error": f"the request body is over {self._limit} bytes"}, status_code=413)(
                scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self._limit:
                    from starlette.exceptions import HTTPException

                    self.refused += 1
                    raise HTTPException(413)  # the SDK answers it as a JSON-RPC error
            return message

        await self._app(scope, counted, send)


def _bind(host: str, port: int) -> socket.socket:
    try:
        return bind_tcp(host, port)
    except OSError as exc:
        raise A2ASetupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


class A2AServer:
    """The mesh's agents as A2A agents, over HTTP (JSON-RPC), on one node.

    ``async with zmesh.a2a.serve(node) as server:`` starts it (the node must
    be started); ``server.port`` is the port bound, ``server.url`` the base
    URL (``http://127.0.0.1:<port>``). Agent ``b`` is served at
    ``server.url + "/b/"``, its card at ``.../b/.well-known/agent-card.json``;
    ``GET /`` lists every card. ``token``: require ``Authorization: Bearer
    <token>`` on every request (needed to listen beyond loopback). ``url``:
    the base URL cards give (behind a proxy). ``timeout``: seconds a request
    or a whole stream may take on the mesh. ``keep_tasks``: tasks that ended
    each agent keeps for GetTask. ``max_body``: the largest request body in
    bytes (default 4 x the node's ``max_payload``). ``agent_id``: the gateway's own agent.
    """

    def __init__(self, node: Node, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None,
                 url: str | None = None, timeout: float = DEFAULT_TIMEOUT, keep_tasks: int = DEFAULT_KEEP_TASKS,
                 max_body: int | None = None, agent_id: str | None = None) -> None:
        check_listen(host, token)
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise A2ASetupError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not (isinstance(keep_tasks, int) and keep_tasks >= 0):
            raise A2ASetupError(f"keep_tasks must be 0 or more, got {keep_tasks!r}")
        if max_body is not None and not (isinstance(max_body, int) and max_body > 0):
            raise A2ASetupError(f"max_body must be a positive number of bytes, got {max_body!r}")
        require_sdk()
        self.node = node
        self.host = host
        self.token = token
        self.timeout = float(timeout)
        self.keep_tasks = keep_tasks
        self.max_body = max_body if max_body is not None else BODY_PER_PAYLOAD * node.max_payload
        #: The gateway's own agent id: every mesh request comes from it (it is not served).
        self.agent_id = agent_id or f"a2a-gateway-{os.getpid()}"
        self._port = port
        self._url = url.rstrip("/") if url else None
        self._handlers: dict[str, tuple[MeshRequestHandler, JsonRpcDispatcher, BoundedTaskStore]] = {}
        self._forgotten = 0  # tasks of handlers closed already
        self._guard: BearerToken | None = None
        self._limit: _BodyLimit | None = None
        self._sock: socket.socket | None = None
        self._server: Any = None
        self._serving: asyncio.Task[None] | None = None
        self._agent: Agent | None = None

    @property
    def port(self) -> int:
        """The port bound (the one asked for, or the free one picked for ``port=0``)."""
        return self._port

    @property
    def url(self) -> str:
        """The base URL cards name: ``url=`` if given, else ``http://HOST:PORT``."""
        if self._url:
            return self._url
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"http://{host}:{self._port}"

    # -- the registry ------------------------------------------------------

    def lookup(self, agent_id: str) -> AgentInfo | None:
        """The registry entry of a served agent, or None (not in the mesh, or the gateway's own)."""
        if agent_id == self.agent_id:
            return None
        registry = self.node.registry
        node_id = registry.node_of(agent_id)
        record = registry.record(node_id) if node_id else None
        if record is None or agent_id not in record.agents:
            return None
        return AgentInfo(agent_id, record.node_id, record.agents[agent_id], record.subs.get(agent_id, frozenset()),
                         record.meta.get(agent_id, {}))

    def served(self) -> list[AgentInfo]:
        """Every agent served now, by id."""
        return [info for agent_id, info in sorted(self.node.registry.agents().items()) if agent_id != self.agent_id]

    def _dispatcher(self, agent: AgentInfo) -> JsonRpcDispatcher:
        """The agent's JSON-RPC endpoint, made on its first request (it holds the agent's tasks)."""
        made = self._handlers.get(agent.agent_id)
        if made is None:
            from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher

            from ._cards import agent_card
            from ._executor import MeshExecutor
            from ._handler import MeshRequestHandler
            from ._store import BoundedTaskStore

            assert self._agent is not None  # requests come only once started
            store = BoundedTaskStore(self.keep_tasks)
            handler = MeshRequestHandler(
                agent.agent_id, self.lookup,
                agent_executor=MeshExecutor(self._agent, agent.agent_id, self.lookup, self.timeout),
                task_store=store, agent_card=agent_card(agent, self.url, bearer=self.token is not None))
            made = self._handlers[agent.agent_id] = (handler, JsonRpcDispatcher(handler), store)
        return made[1]

    def stats(self) -> dict[str, int]:
        """``agents_called``: agents that got an A2A request; ``tasks_forgotten``: ended
        tasks let go beyond ``keep_tasks``; ``unauthorized``: requests refused (401);
        ``too_large``: request bodies refused beyond ``max_body``."""
        return {"agents_called": len(self._handlers),
                "tasks_forgotten": self._forgotten + sum(store.forgotten for _, _, store in self._handlers.values()),
                "unauthorized": self._guard.refused if self._guard is not None else 0,
                "too_large": self._limit.refused if self._limit is not None else 0}

    # -- HTTP --------------------------------------------------------------

    def _app(self) -> ASGIApp:
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        from ._cards import agent_card, card_dict

        bearer = self.token is not None

        def unknown(agent_id: str) -> Response:
            return JSONResponse({"error": f"no agent {agent_id!r} in mesh {self.node.mesh!r}"}, status_code=404)

        async def cards(request: Request) -> Response:
            return JSONResponse([card_dict(agent_card(a, self.url, bearer=bearer)) for a in self.served()])

        async def card(request: Request) -> Response:
            agent_id = request.path_params["agent_id"]
            agent = self.lookup(agent_id)
            if agent is None:
                return unknown(agent_id)
            return JSONResponse(card_dict(agent_card(agent, self.url, bearer=bearer)))

        async def rpc(request: Request) -> Response:
            agent_id = request.path_params["agent_id"]
            agent = self.lookup(agent_id)
            if agent is None:
                return unknown(agent_id)
            response: Response = await self._dispatcher(agent).handle_requests(request)
            return response

        app: ASGIApp = Starlette(routes=[
            Route("/", cards, methods=["GET"]),
            # ":path": an agent id may hold a "/" (its URL quotes it, but the path arrives unquoted)
            Route("/{agent_id:path}/.well-known/agent-card.json", card, methods=["GET"]),
            Route("/{agent_id:path}/", rpc, methods=["POST"]),
            Route("/{agent_id:path}", rpc, methods=["POST"]),
        ])
        self._limit = _BodyLimit(app, self.max_body)
        if self.token is None:
            return self._limit
        self._guard = BearerToken(self._limit, self.token, challenge='Bearer realm="zmesh-a2a"')  # the token first: a stranger's body is not read
        return self._guard

    # -- life --------------------------------------------------------------

    async def start(self) -> A2AServer:
        """Join as the gateway agent and listen; returns once the port accepts connections."""
        if self._serving is not None:
            raise A2ASetupError("this A2A server was started already")
        import uvicorn

        class _Server(uvicorn.Server):
            @contextmanager
            def capture_signals(self) -> Iterator[None]:  # the application's signals are its own (zmesh.run)
                yield

        self._agent = self.node.agent(self.agent_id)
        try:
            self._sock = _bind(self.host, self._port)
        except A2ASetupError:
            await self.close()
            raise
        self._port = self._sock.getsockname()[1]
        config = uvicorn.Config(self._app(), lifespan="off", log_config=None, access_log=False,
                                timeout_graceful_shutdown=2)
        self._server = _Server(config)
        self._serving = asyncio.ensure_future(self._server.serve(sockets=[self._sock]))
        deadline = time.monotonic() + _START_TIMEOUT
        while not self._server.started:
            if self._serving.done() or time.monotonic() > deadline:
                await self.close()
                raise A2ASetupError(f"the A2A server on {self.host}:{self._port} did not start")
            await asyncio.sleep(0.005)
        log.info("zmesh.a2a: serving mesh %r at %s as agent %r", self.node.mesh, self.url, self.agent_id)
        return self

    async def close(self) -> None:
        """Cancel what is running (each mesh request's handler sees the cancel), stop listening, leave."""
        made, self._handlers = list(self._handlers.values()), {}
        self._forgotten += sum(store.forgotten for _, _, store in made)
        await asyncio.gather(*(handler.aclose() for handler, _, _ in made), return_exceptions=True)
        if self._server is not None:
            self._server.should_exit = True
        if self._serving is not None:
            await asyncio.gather(self._serving, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._agent is not None:
            agent, self._agent = self._agent, None
            await agent.close()

    async def __aenter__(self) -> A2AServer:  # noqa: PYI034 - as Node and Gateway (typing.Self is 3.11+)
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def serve(node: Node, host: str = "127.0.0.1", port: int = 0, **options: Any) -> A2AServer:
    """The mesh agents ``node`` sees, as A2A agents on ``http://host:port/<agent_id>/``:
    ``async with zmesh.a2a.serve(node) as server: ... server.port``.
    Options: ``token``, ``url``, ``timeout``, ``keep_tasks``, ``max_body``, ``agent_id``
    (see :class:`A2AServer`)."""
    return A2AServer(node, host, port, **options)
