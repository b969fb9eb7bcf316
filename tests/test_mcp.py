"""``zmesh mcp``: the MCP SDK's own client against it, over stdio (the
command as an MCP host starts it) and over streamable HTTP; the mesh's
agents live in the test's process, so what their handlers see is checked
directly."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import zmesh
from zmesh.mcp import (
    MeshTools,
    Tool,
    arguments_to_payload,
    check_listen,
    result_text,
    serve_http,
    tools_of,
)
from zmesh.registry import AgentInfo

from .helpers import Mesh, wait_for

mcp = pytest.importorskip("mcp", reason="pip install 'zmesh-agents[mcp]'")
from mcp import Client, MCPError, StdioServerParameters

pytestmark = pytest.mark.timeout(60)


def _info(agent_id: str, capabilities: tuple[str, ...], **meta: Any) -> AgentInfo:
    return AgentInfo(agent_id=agent_id, node_id="n", capabilities=capabilities, subscriptions=frozenset(), meta=meta)


# -- the mapping, on its own -------------------------------------------------------------------------


def test_each_capability_is_a_tool_named_as_mcp_allows() -> None:
    agents = {"a": _info("a", ("summarize", "web search")), "b": _info("b", ("web/search", "summarize")),
              "me": _info("me", ("hidden",))}
    tools = tools_of(agents, exclude=frozenset({"me"}))
    assert sorted(tools) == ["summarize", "web_search", "web_search_2"]
    assert {t.capability for t in tools.values()} == {"summarize", "web search", "web/search"}
    assert tools["summarize"].providers == ("a", "b")
    assert tools["summarize"].topic == "summarize" and tools["summarize"].wrapped
    assert "summarize" in tools["summarize"].description and "a, b" in tools["summarize"].description


def test_a_providers_meta_gives_the_topic_schema_and_description() -> None:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    agents = {"a": _info("a", ("summarize", "count", "broken"), **{
        "topic:summarize": "doc.summarize", "schema:summarize": json.dumps(schema),
        "description:summarize": "Summarize a text", "schema:count": '{"type": "integer"}',
        "schema:broken": "{not json", "description": "Agent a's tools"})}
    tools = tools_of(agents)
    summarize, count, broken = tools["summarize"], tools["count"], tools["broken"]
    assert (summarize.topic, summarize.description, summarize.wrapped) == ("doc.summarize", "Summarize a text", False)
    assert summarize.input_schema == schema
    assert arguments_to_payload(summarize, {"text": "hi"}) == {"text": "hi"}
    # a schema that is not an object's: the tool takes it as its one argument, payload
    assert count.wrapped and count.input_schema["properties"]["payload"] == {"type": "integer"}
    assert count.input_schema["required"] == ["payload"] and arguments_to_payload(count, {"payload": 3}) == 3
    # one that is not JSON: as if there were none
    assert broken.wrapped and broken.input_schema["properties"] == {"payload": {"description": "the request's "
                                                                                "payload: any JSON value"}}
    assert broken.description == "Agent a's tools"
    assert arguments_to_payload(broken, None) is None


def test_results_are_text_and_objects_are_structured_too() -> None:
    assert result_text("plain") == ("plain", None)
    assert result_text({"n": 1}) == ('{"n": 1}', {"n": 1})
    assert result_text([1, "x"]) == ('[1, "x"]', None)
    assert result_text(b"\x00\x01") == ('{"base64": "AAE="}', {"base64": "AAE="})
    text, structured = result_text({"x": math.nan, 1: math.inf})
    assert structured == {"x": "NaN", "1": "Infinity"} and json.loads(text) == structured


def test_serving_beyond_loopback_needs_a_token() -> None:
    check_listen("127.0.0.1", None)
    check_listen("::1", None)
    check_listen("10.1.2.3", "s3cret")
    with pytest.raises(ValueError, match="without a bearer token"):
        check_listen("0.0.0.0", None)
    with pytest.raises(ValueError, match="IP address"):
        check_listen("localhost", None)


def test_the_command_refuses_to_listen_beyond_loopback_without_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    from zmesh._tools.cli.main import main

    assert main(["mcp", "--http", "0.0.0.0:0"]) == 2
    assert "without a bearer token" in capsys.readouterr().err


# -- a mesh behind it ------------------------------------------------------------------------------------


class Providers:
    """A node with the agents the tools stand for, and what their handlers saw."""

    def __init__(self, node: zmesh.Node) -> None:
        self.node = node
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        schema = json.dumps({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
        writer = node.agent("writer", capabilities=("summarize", "draft", "hang", "fail"),
                            meta={"schema:summarize": schema, "topic:summarize": "doc.summarize",
                                  "description:summarize": "Summarize a text"})

        async def summarize(msg: zmesh.Message) -> dict[str, Any]:
            return {"summary": msg.payload["text"].upper(), "from": msg.sender}

        async def draft(msg: zmesh.Message) -> AsyncIterator[str]:
            for word in ("a", " haiku", f" about {msg.payload}"):
                yield word

        async def hang(msg: zmesh.Message) -> None:
            self.started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise

        async def fail(msg: zmesh.Message) -> None:
            raise RuntimeError("the model said no")

        writer.add_handler("doc.summarize", summarize)
        writer.add_handler("draft", draft)
        writer.add_handler("hang", hang)
        writer.add_handler("fail", fail)


async def _exercise(client: Client, providers: Providers, sender_prefix: str) -> None:
    """What an MCP host does with the tools, whichever way it reaches them."""
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(listed) == ["draft", "fail", "hang", "summarize"]
    assert listed["summarize"].description == "Summarize a text"
    assert listed["summarize"].input_schema["required"] == ["text"]
    assert listed["draft"].input_schema["properties"].keys() == {"payload"}

    result = await client.call_tool("summarize", {"text": "queues"})
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["summary"] == "QUEUES"
    assert result.structured_content["from"].startswith(sender_prefix)  # the MCP server's own agent asked

    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    result = await client.call_tool("draft", {"payload": "meshes"}, progress_callback=on_progress)
    assert not result.is_error
    assert result.content[0].text == "a haiku about meshes"  # type: ignore[union-attr]
    assert progress == [(1.0, "a"), (2.0, " haiku"), (3.0, " about meshes")]

    failed = await client.call_tool("fail", {"payload": None})
    assert failed.is_error and "HandlerError" in failed.content[0].text  # type: ignore[union-attr]
    assert "the model said no" in failed.content[0].text  # type: ignore[union-attr]

    with pytest.raises(MCPError, match="unknown tool"):
        await client.call_tool("nonesuch", {})

    call = asyncio.ensure_future(client.call_tool("hang", {"payload": 1}))
    await asyncio.wait_for(providers.started.wait(), 10)
    call.cancel()
    await asyncio.wait_for(providers.cancelled.wait(), 10)  # the handler itself saw the cancel
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_an_mcp_host_calls_the_meshs_capabilities_over_stdio() -> None:
    async with Mesh("zmq") as mesh:
        node = await mesh.node()
        providers = Providers(node)
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "zmesh", "mcp", "--mesh", mesh.name, "--seed", node.endpoint],
            env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"})
        async with Client(server) as client:
            await _exercise(client, providers, "zmesh-mcp-")
            # The tool list follows the registry, and says so to a listening client.
            async with client.listen(tools_list_changed=True) as changes:
                reviewer = node.agent("reviewer", capabilities=("review",))
                await asyncio.wait_for(changes.__anext__(), 15)
                assert "review" in {t.name for t in (await client.list_tools()).tools}
                await reviewer.close()
                await asyncio.wait_for(changes.__anext__(), 15)
                assert "review" not in {t.name for t in (await client.list_tools()).tools}


@asynccontextmanager
async def _http(token: str | None = None, timeout: float = 30) -> AsyncIterator[tuple[str, Providers, zmesh.Agent]]:
    async with Mesh("inproc") as mesh:
        node = await mesh.node()
        providers = Providers(node)
        front = node.agent("mcp")
        async with serve_http(front, "127.0.0.1", 0, token=token, timeout=timeout) as url:
            yield url, providers, front


async def test_an_mcp_host_calls_the_meshs_capabilities_over_http() -> None:
    async with _http() as (url, providers, _front), Client(url) as client:
        await _exercise(client, providers, "mcp")


async def test_over_http_a_token_is_asked_of_every_request() -> None:
    import httpx

    async with _http(token="s3cret") as (url, _providers, _front):
        async with httpx.AsyncClient() as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            refused = await http.post(url, json=body, headers={"Authorization": "Bearer wrong"})
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
            assert (await http.post(url, json=body)).status_code == 401
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"}) as authorized, \
                Client(streamable_http_client(url, http_client=authorized)) as client:
            assert "summarize" in {t.name for t in (await client.list_tools()).tools}


async def test_a_call_past_its_timeout_is_an_error_and_stops_the_handler() -> None:
    async with _http(timeout=0.5) as (url, providers, _front), Client(url) as client:
        result = await client.call_tool("hang", {"payload": None})
        assert result.is_error and result.content[0].text.startswith("Timeout")  # type: ignore[union-attr]
        await asyncio.wait_for(providers.cancelled.wait(), 10)


async def test_the_tools_follow_the_registry() -> None:
    async with Mesh("inproc") as mesh:
        node = await mesh.node()
        lone = node.agent("lone", capabilities=("once",))
        tools = MeshTools(node.agent("mcp"), timeout=5)
        assert list(tools.tools()) == ["once"] and isinstance(tools.tools()["once"], Tool)
        await lone.close()
        await wait_for(lambda: not tools.tools(), 5, "the tool to go with its agent")
