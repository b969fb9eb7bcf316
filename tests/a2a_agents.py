"""Test helper: an A2A agent written with the a2a-sdk (its own executor, the SDK's
request handler, uvicorn on 127.0.0.1 port 0), for zmesh.a2a.remote to stand in for."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

from .helpers import wait_for

__all__ = ["QuietServer", "Weather", "a2a_agent", "card", "loopback_socket"]


def loopback_socket() -> socket.socket:
    """A listening TCP socket on 127.0.0.1, a free port (TCP named: asyncio turns Nagle off)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    return sock


class Weather(AgentExecutor):
    """An A2A agent: ``forecast`` answers in upper case (a message), streams three
    chunks, fails on "fail", and on "wait" streams one chunk and waits to be cancelled."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.waiting = asyncio.Event()
        self.stopped = asyncio.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        from google.protobuf.json_format import MessageToDict

        assert context.message is not None
        skill = MessageToDict(context.message.metadata).get("skill", "")
        text = context.get_user_input()
        self.seen.append((skill, text or MessageToDict(context.message)["parts"]))
        task_id, context_id = context.task_id or "", context.context_id or ""
        streaming = context.call_context.state.get("method") == "SendStreamingMessage"
        if not streaming and text not in ("fail", "wait"):
            await event_queue.enqueue_event(Message(role=Role.ROLE_AGENT, message_id=f"{task_id}-r",
                                                    parts=[Part(text=f"{skill}:{text.upper()}")]))
            return
        await event_queue.enqueue_event(Task(id=task_id, context_id=context_id,
                                             status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                                             history=[context.message]))
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        if text == "fail":
            await updater.failed(Message(role=Role.ROLE_AGENT, message_id=f"{task_id}-f",
                                         parts=[Part(text="it broke")]))
            return
        try:
            for i in range(1 if text == "wait" else 3):
                await updater.add_artifact([Part(text=f"{text}{i}")], artifact_id="a", append=i > 0)
            if text == "wait":
                self.waiting.set()
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.stopped.set()
            raise
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def card(url: str, skills: tuple[str, ...] = ("forecast", "alerts")) -> AgentCard:
    return AgentCard(
        name="weather", description="tells the weather", version="1",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True), default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id=skill, name=skill, description=f"the {skill}", tags=["w"]) for skill in skills])


class QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers (the test runner's are its own)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def a2a_agent(executor: AgentExecutor,
                    skills: tuple[str, ...] = ("forecast", "alerts")) -> AsyncIterator[tuple[str, QuietServer]]:
    """The executor served by the a2a-sdk on 127.0.0.1 (a free port): yields its URL and server."""
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(),
                                    agent_card=card(url, skills))
    app = Starlette(routes=[*create_agent_card_routes(card(url, skills)), *create_jsonrpc_routes(handler, "/")])
    server = QuietServer(uvicorn.Config(app, lifespan="off", log_config=None, access_log=False,
                                    timeout_graceful_shutdown=2))
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        await wait_for(lambda: server.started or serving.done(), 10, "the A2A test server to start")
        yield url, server
    finally:
        await handler.aclose()
        server.should_exit = True
        await asyncio.gather(serving, return_exceptions=True)
        sock.close()
