"""zmesh.a2a.remote: an A2A agent as a mesh agent, against an a2a-sdk server
written here (its own executor, the SDK's request handler, uvicorn on
127.0.0.1 port 0), called by a mesh agent on another ZeroMQ node."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

import zmesh
from zmesh.a2a import MESSAGE_TOPIC, URL_META, A2ASetupError

from .helpers import Mesh, wait_for

pytest.importorskip("a2a.server.request_handlers", reason="zmesh.a2a needs a2a-sdk: pip install 'zmesh-agents[a2a]'")

import uvicorn
from a2a.server.agent_execution import AgentExecutor
from a2a.types.a2a_pb2 import Message
from starlette.applications import Starlette

from .a2a_agents import QuietServer, Weather, a2a_agent, card, loopback_socket

pytestmark = pytest.mark.timeout(30)


@contextlib.asynccontextmanager
async def bridged(executor: AgentExecutor) -> AsyncIterator[tuple[zmesh.Agent, str, QuietServer]]:
    """The A2A agent as mesh agent ``weather`` on one zmq node; yields a caller on another."""
    async with a2a_agent(executor) as (url, server), Mesh("zmq") as mesh:
        near, far = await mesh.node(), await mesh.node()
        async with zmesh.a2a.remote(near, "weather", url):
            caller = far.agent("caller")
            await far.wait_for_agents("weather", timeout=10)
            yield caller, url, server


async def test_the_remote_agent_is_a_mesh_agent_with_a_capability_per_skill() -> None:
    async with bridged(Weather()) as (caller, url, _):
        info = caller.node.registry.agents()["weather"]
        assert info.capabilities == ("forecast", "alerts")
        assert info.meta == {URL_META: url, "description": "tells the weather"}


async def test_a_mesh_request_is_a_send_message_naming_its_skill() -> None:
    weather = Weather()
    async with bridged(weather) as (caller, _, _):
        reply = await caller.request("weather", "alerts", "storm", timeout=10)
        assert reply.payload == "alerts:STORM"
        reply = await caller.request("weather", MESSAGE_TOPIC, "any", timeout=10)
        assert reply.payload == ":ANY"  # no skill named: the agent picks
        await caller.request("weather", "forecast", {"city": "Oslo"}, timeout=10)
        assert weather.seen[:2] == [("alerts", "storm"), ("", "any")]
        assert weather.seen[2][0] == "forecast" and weather.seen[2][1][0]["data"] == {"city": "Oslo"}
        with pytest.raises(zmesh.NoHandler):
            await caller.request("weather", "tides", "x", timeout=10)


async def test_skills_the_mesh_cannot_take_as_they_are_are_left_out_or_reached_by_message(
        caplog: pytest.LogCaptureFixture) -> None:
    weather = Weather()
    async with a2a_agent(weather, skills=("forecast", "forecast", "", "message", "two words")) as (url, _), \
            Mesh("inproc") as mesh:
        node = await mesh.node()
        async with zmesh.a2a.remote(node, "odd", url):
            assert node.registry.agents()["odd"].capabilities == ("forecast", "message", "two words")
            assert "skill 'two words'" in caplog.text and "is not a mesh topic" in caplog.text
            caller = node.agent("caller")
            assert (await caller.request("odd", "forecast", "a", timeout=10)).payload == "forecast:A"
            assert (await caller.request("odd", "message", "b", timeout=10)).payload == ":B"


async def test_a_one_way_send_reaches_the_a2a_agent() -> None:
    weather = Weather()
    async with bridged(weather) as (caller, _, _):
        await caller.send("weather", "alerts", "fog")
        await wait_for(lambda: ("alerts", "fog") in weather.seen, 10, "the A2A agent to get the message")


async def test_a_mesh_stream_is_send_streaming_message_each_artifact_a_chunk() -> None:
    async with bridged(Weather()) as (caller, _, _):
        stream = caller.stream("weather", "forecast", "sun", timeout=10)
        assert [chunk async for chunk in stream] == ["sun0", "sun1", "sun2"]  # read to its end


async def test_a_failed_task_is_a_handler_error_for_request_and_stream() -> None:
    async with bridged(Weather()) as (caller, _, _):
        with pytest.raises(zmesh.HandlerError) as failed:
            await caller.request("weather", "forecast", "fail", timeout=10)
        assert failed.value.remote_type == "A2ATaskFailed" and "it broke" in failed.value.remote_message
        assert failed.value.agent == "weather"
        with pytest.raises(zmesh.HandlerError, match="it broke"):
            async with caller.stream("weather", "forecast", "fail", timeout=10) as chunks:
                [chunk async for chunk in chunks]


async def test_cancelling_a_mesh_stream_cancels_the_a2a_task() -> None:
    weather = Weather()
    async with bridged(weather) as (caller, _, _):
        async with caller.stream("weather", "forecast", "wait", timeout=20) as chunks:
            async for chunk in chunks:
                assert chunk == "wait0"
                break  # leaving the block cancels the mesh stream
        await asyncio.wait_for(weather.stopped.wait(), 10)


async def test_cancelling_a_mesh_request_cancels_the_a2a_task_found_by_its_context() -> None:
    weather = Weather()
    async with bridged(weather) as (caller, _, _):
        asking = asyncio.ensure_future(caller.request("weather", "forecast", "wait", timeout=20))
        await asyncio.wait_for(weather.waiting.wait(), 10)  # its task works, SendMessage has not answered
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking
        await asyncio.wait_for(weather.stopped.wait(), 10)


async def test_an_agent_that_cannot_be_reached_is_peer_lost() -> None:
    async with bridged(Weather()) as (caller, _, server):
        server.should_exit = True  # the A2A agent goes away; the mesh agent stays
        await wait_for(lambda: all(s.sockets == () or not s.is_serving() for s in server.servers), 10,
                       "the A2A server to stop listening")
        with pytest.raises(zmesh.PeerLost, match="cannot be reached"):
            await caller.request("weather", "forecast", "x", timeout=10)


async def test_a_card_that_cannot_be_read_is_a_setup_error() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}/"  # bound, never listening: refused
        async with Mesh("inproc") as mesh:
            node = await mesh.node()
            with pytest.raises(A2ASetupError, match="cannot use the A2A agent"):
                await zmesh.a2a.remote(node, "nobody", url).start()
            assert "nobody" not in node.registry.agents()


@contextlib.asynccontextmanager
async def slow_answering_agent(refuse: bool = False) -> AsyncIterator[tuple[str, list[str]]]:
    """A hand-written JSON-RPC A2A agent that answers SendMessage with a WORKING task
    and GetTask with WORKING twice, then COMPLETED (``refuse``: SendMessage with a
    JSON-RPC error): yields its URL and the methods called."""
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    calls: list[str] = []
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"

    def task(state: str, artifacts: list[Any]) -> dict[str, Any]:
        return {"id": "t1", "contextId": "c1", "status": {"state": state}, "artifacts": artifacts}

    async def rpc(request: Request) -> JSONResponse:
        body = await request.json()
        calls.append(body["method"])
        if refuse:
            return JSONResponse({"jsonrpc": "2.0", "id": body["id"],
                                 "error": {"code": -32602, "message": "no such forecast"}})
        if body["method"] == "SendMessage":
            result: dict[str, Any] = {"task": task("TASK_STATE_WORKING", [])}
        elif calls.count("GetTask") < 3:
            result = task("TASK_STATE_WORKING", [])
        else:
            result = task("TASK_STATE_COMPLETED", [{"artifactId": "a", "parts": [{"text": "later"}]}])
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": result})

    async def the_card(request: Request) -> JSONResponse:
        described = card(url)
        described.capabilities.streaming = False
        return JSONResponse(agent_card_to_dict(described))

    app = Starlette(routes=[Route("/.well-known/agent-card.json", the_card), Route("/", rpc, methods=["POST"])])
    server = QuietServer(uvicorn.Config(app, lifespan="off", log_config=None, access_log=False))
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        await wait_for(lambda: server.started or serving.done(), 10, "the hand-written A2A server to start")
        yield url, calls
    finally:
        server.should_exit = True
        await asyncio.gather(serving, return_exceptions=True)
        sock.close()


async def test_a_task_still_working_when_send_message_returns_is_polled_to_its_end() -> None:
    async with slow_answering_agent() as (url, calls), Mesh("inproc") as mesh:
        node = await mesh.node()
        async with zmesh.a2a.remote(node, "slow", url):
            reply = await node.agent("caller").request("slow", "forecast", "x", timeout=10)
        assert reply.payload == "later"
        assert calls == ["SendMessage", "GetTask", "GetTask", "GetTask"]


def test_a_payload_of_parts_goes_back_to_the_same_parts() -> None:
    from zmesh.a2a._parts import ReplyNotCarried, message_parts, payload_of

    given = {"parts": [{"text": "see"}, {"data": {"k": [1, 2.5]}, "media_type": "application/json"},
                       {"raw": b"\x00", "filename": "b.bin"}, {"url": "http://127.0.0.1/x.png"}]}
    assert payload_of(Message(parts=message_parts(given))) == given
    assert [p.text for p in message_parts("plain")] == ["plain"]
    assert message_parts(None) == []
    assert message_parts({"parts": "not a list"})[0].HasField("data")  # only the documented form is parts
    with pytest.raises(ReplyNotCarried, match="one of text, raw, url or data"):
        message_parts({"parts": [{"nothing": 1}]})


async def test_a_json_rpc_error_is_a_handler_error_named_after_it() -> None:
    async with slow_answering_agent(refuse=True) as (url, calls), Mesh("inproc") as mesh:
        node = await mesh.node()
        async with zmesh.a2a.remote(node, "picky", url):
            with pytest.raises(zmesh.HandlerError) as refused:
                await node.agent("caller").request("picky", "forecast", "x", timeout=10)
        assert refused.value.remote_type == "InvalidParamsError" and "no such forecast" in refused.value.remote_message
        assert refused.value.agent == "picky" and calls == ["SendMessage"]


async def test_a_stream_to_an_agent_without_streaming_is_its_answer_as_one_chunk() -> None:
    async with slow_answering_agent() as (url, calls), Mesh("inproc") as mesh:
        node = await mesh.node()
        async with zmesh.a2a.remote(node, "slow", url):
            stream = node.agent("caller").stream("slow", "forecast", "x", timeout=10)
            assert [chunk async for chunk in stream] == ["later"]  # read to its end
        assert calls == ["SendMessage", "GetTask", "GetTask", "GetTask"]  # its card says no streaming


async def test_two_meshes_through_a2a_both_ways_stream_and_cancel_end_to_end() -> None:
    """Mesh A's agent served over A2A, and on mesh B a remote stand-in for it: a stream and
    its cancel cross both gateways, down to the handler on mesh A."""
    async with Mesh("zmq") as mesh_a, Mesh("inproc") as mesh_b:
        served_node = await mesh_a.node()
        writer = served_node.agent("writer", capabilities=("write",), meta={"description": "writes"})
        stopped = asyncio.Event()

        @writer.on("write")
        async def write(msg: zmesh.Message) -> AsyncIterator[str]:
            for word in str(msg.payload).split():
                yield word
            if msg.payload == "then wait":
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    stopped.set()
                    raise

        async with zmesh.a2a.serve(served_node) as server:
            await wait_for(lambda: server.lookup("writer") is not None, 10, "the gateway to see 'writer'")
            node_b = await mesh_b.node()
            async with zmesh.a2a.remote(node_b, "far-writer", f"{server.url}/writer/"):
                caller = node_b.agent("caller")
                assert node_b.registry.agents()["far-writer"].meta["description"] == "writes"
                stream = caller.stream("far-writer", "write", "one two three", timeout=10)
                assert [chunk async for chunk in stream] == ["one", "two", "three"]
                reply = await caller.request("far-writer", "write", "just this", timeout=10)
                assert reply.payload == {"parts": [{"data": ["just", "this"]}]}  # a request gets a stream's list
                async with caller.stream("far-writer", "write", "then wait", timeout=20) as chunks:
                    async for chunk in chunks:
                        if chunk == "wait":
                            break
                await asyncio.wait_for(stopped.wait(), 10)
