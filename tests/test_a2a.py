"""zmesh.a2a.serve: mesh agents as A2A agents, driven by the a2a-sdk's own
client over HTTP on 127.0.0.1 (port 0), the agents on another ZeroMQ node."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import zmesh
from zmesh.a2a import A2AServer, A2ASetupError, check_listen, is_loopback

from .helpers import Mesh, wait_for

pytest.importorskip("a2a.client", reason="zmesh.a2a's tests need a2a-sdk: pip install 'zmesh-agents[a2a]'")
pytest.importorskip("uvicorn")

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value

pytestmark = pytest.mark.timeout(30)


def text_message(text: str, skill: str | None = None) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=f"m-{text}", parts=[Part(text=text)])
    if skill is not None:
        message.metadata.CopyFrom(ParseDict({"skill": skill}, Struct()))
    return SendMessageRequest(message=message)


class Waiter:
    """A streaming handler that yields ``first`` chunks, then waits until cancelled and says so."""

    def __init__(self, first: int = 1) -> None:
        self.first = first
        self.cancelled = asyncio.Event()

    async def __call__(self, msg: zmesh.Message) -> AsyncIterator[str]:
        for i in range(self.first):
            yield f"chunk{i}"
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


@contextlib.asynccontextmanager
async def gateway(**options: Any) -> AsyncIterator[tuple[A2AServer, zmesh.Node, httpx.AsyncClient]]:
    """A gateway node serving A2A on 127.0.0.1:0 and a second node (its agents the test's), both zmq."""
    async with Mesh("zmq") as mesh:
        near, far = await mesh.node(), await mesh.node()
        await mesh.converged()
        headers = {"Authorization": f"Bearer {options['token']}"} if options.get("token") else {}
        async with zmesh.a2a.serve(near, **options) as server, httpx.AsyncClient(headers=headers,
                                                                                    timeout=20) as http:
            yield server, far, http


async def client_for(server: A2AServer, agent_id: str, http: httpx.AsyncClient, *, streaming: bool) -> Any:
    return await create_client(f"{server.url}/{agent_id}/", ClientConfig(streaming=streaming, httpx_client=http))


async def wait_served(server: A2AServer, agent_id: str) -> None:
    await wait_for(lambda: server.lookup(agent_id) is not None, 10, f"the gateway to see agent {agent_id!r}")


async def task_reaches(client: Any, task_id: str, state: int, timeout: float = 10.0) -> None:
    """Poll GetTask until the task is in ``state``; fail after ``timeout`` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (task := await client.get_task(GetTaskRequest(id=task_id))).status.state != state:
        assert asyncio.get_running_loop().time() < deadline, f"task {task_id} stayed {task.status.state}"
        await asyncio.sleep(0.01)


async def responses(client: Any, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]


# -- where it may listen (no socket: a pure check) --------------------------


def test_loopback_needs_no_token_and_anything_else_does() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host)
        check_listen(host, None)
    for host in ("0.0.0.0", "::", "192.168.1.10", "10.0.0.1", "example.com", ""):
        assert not is_loopback(host)
        with pytest.raises(A2ASetupError, match="without a bearer token"):
            check_listen(host, None)
        check_listen(host, "s3cret")


def test_an_empty_token_is_refused() -> None:
    with pytest.raises(A2ASetupError, match="empty"):
        check_listen("127.0.0.1", "")


def test_a_non_loopback_server_without_a_token_is_refused_before_it_binds() -> None:
    node = zmesh.Node("a2a-refusal", transport="inproc")
    with pytest.raises(A2ASetupError, match="without a bearer token"):
        zmesh.a2a.serve(node, host="0.0.0.0")


def test_without_a2a_sdk_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from zmesh.a2a import PIP_LINE
    from zmesh.a2a._setup import require_sdk

    monkeypatch.setitem(sys.modules, "a2a.server.request_handlers", None)  # as if it were not installed
    with pytest.raises(A2ASetupError) as refused:
        require_sdk()
    assert PIP_LINE in str(refused.value) and "a2a.server.request_handlers is missing" in str(refused.value)


async def test_a_gateway_that_cannot_start_leaves_its_port_free() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with Mesh("inproc") as mesh:
        node = await mesh.node()
        node.agent("taken")
        with pytest.raises(zmesh.AgentExists):
            await zmesh.a2a.serve(node, port=port, agent_id="taken").start()
        with socket.socket() as again:
            again.bind(("127.0.0.1", port))  # nothing of the failed start holds it
        with pytest.raises(A2ASetupError, match="cannot listen"), socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen(1)
            await zmesh.a2a.serve(node, port=holder.getsockname()[1]).start()
        assert "a2a-gateway-" not in " ".join(node.agents)  # nor its agent


# -- cards ------------------------------------------------------------------


async def test_each_agent_has_a_card_and_the_root_lists_them() -> None:
    async with gateway() as (server, far, http):
        far.agent("writer", capabilities=("write", "edit"), meta={"description": "writes things", "model": "m1"})
        far.agent("shouter", capabilities=("shout",))
        await wait_served(server, "writer")
        await wait_served(server, "shouter")
        card = (await http.get(f"{server.url}/writer/.well-known/agent-card.json")).json()
        assert card["name"] == "writer"
        assert card["description"] == "writes things"
        assert card["capabilities"]["streaming"] is True
        assert card["supportedInterfaces"] == [{"url": f"{server.url}/writer/", "protocolBinding": "JSONRPC",
                                                "protocolVersion": "1.0"}]
        assert [s["id"] for s in card["skills"]] == ["write", "edit"]
        assert "model=m1" in card["skills"][0]["tags"]
        listed = (await http.get(f"{server.url}/")).json()
        names = [c["name"] for c in listed]
        assert "writer" in names and "shouter" in names
        assert server.agent_id not in names  # the gateway's own agent is not served
        client = await client_for(server, "writer", http, streaming=False)  # the SDK resolves the card too
        await client.close()


async def test_an_agent_that_joins_is_served_and_one_that_leaves_answers_404() -> None:
    async with gateway() as (server, far, http):
        card_url = f"{server.url}/late/.well-known/agent-card.json"
        assert (await http.get(card_url)).status_code == 404
        late = far.agent("late", capabilities=("echo",))
        late.add_handler("echo", lambda msg: msg.payload)
        await wait_served(server, "late")
        assert (await http.get(card_url)).json()["name"] == "late"
        client = await client_for(server, "late", http, streaming=False)
        [reply] = await responses(client, text_message("here"))
        assert reply.message.parts[0].text == "here"
        await late.close()
        await wait_for(lambda: server.lookup("late") is None, 10, "the gateway to see 'late' leave")
        assert (await http.get(card_url)).status_code == 404
        gone = await http.post(f"{server.url}/late/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                            "params": {}})
        assert gone.status_code == 404 and "late" in gone.json()["error"]
        assert "late" not in [c["name"] for c in (await http.get(f"{server.url}/")).json()]
        await client.close()


# -- messages ---------------------------------------------------------------


async def test_a_text_message_is_a_mesh_request_and_its_reply_an_agent_message() -> None:
    async with gateway() as (server, far, http):
        seen: list[Any] = []
        b = far.agent("b", capabilities=("shout",))

        @b.on("shout")
        async def shout(msg: zmesh.Message) -> str:
            seen.append((msg.sender, msg.payload))
            return str(msg.payload).upper()

        data = far.agent("data", capabilities=("count",))
        data.add_handler("count", lambda msg: {"n": 3, "of": msg.payload})
        await wait_served(server, "data")
        client = await client_for(server, "b", http, streaming=False)
        [reply] = await responses(client, text_message("hello"))
        assert reply.message.role == Role.ROLE_AGENT
        assert [p.text for p in reply.message.parts] == ["HELLO"]
        assert seen == [(server.agent_id, "hello")]
        client = await client_for(server, "data", http, streaming=False)
        [reply] = await responses(client, text_message("x"))
        assert MessageToDict(reply.message.parts[0].data) == {"n": 3, "of": "x"}


async def test_agent_ids_a_url_must_quote_are_served_too() -> None:
    async with gateway() as (server, far, http):
        odd = ("team/a", "a?b#c", "ü-agent", "50%off")
        for agent_id in odd:
            echo = far.agent(agent_id, capabilities=("echo",))
            echo.add_handler("echo", lambda msg, me=agent_id: f"{me}:{msg.payload}")
        for agent_id in odd:
            await wait_served(server, agent_id)
        cards = {c["name"]: c for c in (await http.get(f"{server.url}/")).json()}
        for agent_id in odd:
            url = cards[agent_id]["supportedInterfaces"][0]["url"]
            assert (await http.get(url + ".well-known/agent-card.json")).json()["name"] == agent_id
            client = await client_for(server, url.removeprefix(server.url + "/").removesuffix("/"), http,
                                      streaming=False)
            [reply] = await responses(client, text_message("hi"))
            assert reply.message.parts[0].text == f"{agent_id}:hi"


async def test_parts_other_than_text_arrive_as_a_dict_of_parts() -> None:
    async with gateway() as (server, far, http):
        seen: list[Any] = []
        b = far.agent("b", capabilities=("take",))
        b.add_handler("take", lambda msg: seen.append(msg.payload) or "ok")
        await wait_served(server, "b")
        message = Message(role=Role.ROLE_USER, message_id="m", parts=[
            Part(text="see"), Part(data=ParseDict({"k": [1, 2.5]}, Value())),
            Part(raw=b"\x00\x01", media_type="application/octet-stream", filename="b.bin"),
            Part(url="http://127.0.0.1/x.png", media_type="image/png")])
        client = await client_for(server, "b", http, streaming=False)
        await responses(client, SendMessageRequest(message=message))
        assert seen == [{"parts": [
            {"text": "see"}, {"data": {"k": [1, 2.5]}},
            {"raw": b"\x00\x01", "media_type": "application/octet-stream", "filename": "b.bin"},
            {"url": "http://127.0.0.1/x.png", "media_type": "image/png"}]}]


async def test_a_message_names_its_skill_or_gets_an_error_listing_them() -> None:
    async with gateway() as (server, far, http):
        multi = far.agent("multi", capabilities=("up", "down"))
        multi.add_handler("up", lambda msg: msg.payload.upper())
        multi.add_handler("down", lambda msg: msg.payload.lower())
        await wait_served(server, "multi")
        client = await client_for(server, "multi", http, streaming=False)
        [reply] = await responses(client, text_message("MiX", skill="down"))
        assert reply.message.parts[0].text == "mix"
        with pytest.raises(Exception, match=r"several skills \('up', 'down'\).*metadata\['skill'\]"):
            await responses(client, text_message("MiX"))
        with pytest.raises(Exception, match=r"no skill 'sideways'; its skills: 'up', 'down'"):
            await responses(client, text_message("MiX", skill="sideways"))


async def test_a_skill_can_name_the_topic_it_goes_on() -> None:
    async with gateway() as (server, far, http):
        worker = far.agent("worker", capabilities=("genericagent",), meta={"a2a.topic.genericagent": "task"})
        worker.add_handler("task", lambda msg: f"did {msg.payload}")
        await wait_served(server, "worker")
        client = await client_for(server, "worker", http, streaming=False)
        [reply] = await responses(client, text_message("it"))
        assert reply.message.parts[0].text == "did it"
        card = (await http.get(f"{server.url}/worker/.well-known/agent-card.json")).json()
        assert card["skills"][0]["tags"] == ["zmesh"]  # the topic mapping is not a tag


async def test_return_immediately_makes_a_task_to_poll_and_list() -> None:
    async with gateway() as (server, far, http):
        b = far.agent("b", capabilities=("slow",))
        go = asyncio.Event()

        async def slow(msg: zmesh.Message) -> str:
            await go.wait()
            return f"done {msg.payload}"

        b.add_handler("slow", slow)
        await wait_served(server, "b")
        client = await client_for(server, "b", http, streaming=False)
        request = text_message("x")
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        [submitted] = await responses(client, request)
        assert submitted.task.status.state == TaskState.TASK_STATE_SUBMITTED
        go.set()
        await task_reaches(client, submitted.task.id, TaskState.TASK_STATE_COMPLETED)
        task = await client.get_task(GetTaskRequest(id=submitted.task.id))
        assert [p.text for p in task.artifacts[0].parts] == ["done x"]
        assert [t.id for t in (await client.list_tasks(ListTasksRequest())).tasks] == [submitted.task.id]
        follow_up = text_message("more")
        follow_up.message.task_id = submitted.task.id
        with pytest.raises(Exception, match="terminal state"):  # a zmesh request is one turn
            await responses(client, follow_up)


async def test_subscribe_to_task_follows_a_running_task_to_its_end() -> None:
    async with gateway() as (server, far, http):
        b = far.agent("b", capabilities=("slow",))
        started, go = asyncio.Event(), asyncio.Event()

        async def slow(msg: zmesh.Message) -> str:
            started.set()
            await go.wait()
            return f"done {msg.payload}"

        b.add_handler("slow", slow)
        await wait_served(server, "b")
        plain = await client_for(server, "b", http, streaming=False)
        streaming = await client_for(server, "b", http, streaming=True)
        request = text_message("x")
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        [submitted] = await responses(plain, request)
        await asyncio.wait_for(started.wait(), 10)
        seen: list[StreamResponse] = []

        async def follow() -> None:
            async for event in streaming.subscribe(SubscribeToTaskRequest(id=submitted.task.id)):
                seen.append(event)

        following = asyncio.ensure_future(follow())
        await wait_for(lambda: bool(seen), 10, "the subscription's first event (the task as it is)")
        assert not following.done()
        go.set()
        await asyncio.wait_for(following, 10)  # the stream ends with the task
        states = [e.status_update.status.state for e in seen if e.HasField("status_update")]
        assert states and states[-1] == TaskState.TASK_STATE_COMPLETED, seen
        task = await plain.get_task(GetTaskRequest(id=submitted.task.id))
        assert [p.text for p in task.artifacts[0].parts] == ["done x"]


async def test_a_handler_error_fails_the_task_with_its_message() -> None:
    async with gateway() as (server, far, http):
        b = far.agent("b", capabilities=("boom",))

        def boom(msg: zmesh.Message) -> None:
            raise ValueError("no good input")

        b.add_handler("boom", boom)
        await wait_served(server, "b")
        client = await client_for(server, "b", http, streaming=False)
        [failed] = await responses(client, text_message("x"))
        assert failed.task.status.state == TaskState.TASK_STATE_FAILED
        said = failed.task.status.message.parts[0].text
        assert "HandlerError" in said and "no good input" in said
        task = await client.get_task(GetTaskRequest(id=failed.task.id))
        assert task.status.state == TaskState.TASK_STATE_FAILED
        streaming = await client_for(server, "b", http, streaming=True)
        events = await responses(streaming, text_message("y"))
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_FAILED
        assert "no good input" in events[-1].status_update.status.message.parts[0].text


async def test_a_mesh_timeout_fails_the_task_and_stops_the_handler() -> None:
    async with gateway(timeout=0.5) as (server, far, http):
        slow = far.agent("slow", capabilities=("wait",))
        waiter = Waiter(first=0)

        async def wait(msg: zmesh.Message) -> str:
            async for _ in waiter(msg):
                pass
            return "never"

        slow.add_handler("wait", wait)
        await wait_served(server, "slow")
        client = await client_for(server, "slow", http, streaming=False)
        [failed] = await responses(client, text_message("x"))
        assert failed.task.status.state == TaskState.TASK_STATE_FAILED
        assert "Timeout" in failed.task.status.message.parts[0].text
        await asyncio.wait_for(waiter.cancelled.wait(), 10)


async def test_a_reply_a2a_cannot_carry_fails_the_task_saying_why() -> None:
    async with gateway() as (server, far, http):
        b = far.agent("b", capabilities=("odd",))
        b.add_handler("odd", lambda msg: {"blob": b"\x00"})
        await wait_served(server, "b")
        client = await client_for(server, "b", http, streaming=False)
        [failed] = await responses(client, text_message("x"))
        assert failed.task.status.state == TaskState.TASK_STATE_FAILED
        assert "ReplyNotCarried: a bytes is not JSON" in failed.task.status.message.parts[0].text


async def test_bad_json_rpc_gets_a_json_rpc_error_and_the_server_goes_on() -> None:
    async with gateway() as (server, far, http):
        b = far.agent("b", capabilities=("echo",))
        b.add_handler("echo", lambda msg: msg.payload)
        await wait_served(server, "b")
        for body in (b"{not json", b'{"jsonrpc": "2.0", "id": 7, "method": "NoSuchMethod"}',
                     b'{"jsonrpc": "2.0", "id": 8, "method": "SendMessage", "params": {"message": 5}}'):
            answer = await http.post(f"{server.url}/b/", content=body, headers={"Content-Type": "application/json"})
            assert answer.status_code == 200 and "error" in answer.json(), answer.text
        client = await client_for(server, "b", http, streaming=False)
        [reply] = await responses(client, text_message("still here"))
        assert reply.message.parts[0].text == "still here"


async def test_a_body_over_max_body_is_refused_before_it_is_read_whole() -> None:
    async with gateway(max_body=1000) as (server, far, http):
        b = far.agent("b", capabilities=("echo",))
        b.add_handler("echo", lambda msg: msg.payload)
        await wait_served(server, "b")
        big = text_message("x" * 2000)
        from google.protobuf.json_format import MessageToJson
        body = ('{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": ' + MessageToJson(big) + "}").encode()
        refused = await http.post(f"{server.url}/b/", content=body, headers={"Content-Type": "application/json"})
        assert refused.status_code == 413 and "over 1000 bytes" in refused.json()["error"]

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            for i in range(0, len(body), 500):
                yield body[i:i + 500]

        refused = await http.post(f"{server.url}/b/", content=chunked(), headers={"Content-Type": "application/json"})
        assert refused.status_code == 200 and refused.json()["error"]["message"] == "Payload too large"
        assert server.stats()["too_large"] == 2
        client = await client_for(server, "b", http, streaming=False)
        [reply] = await responses(client, text_message("small"))
        assert reply.message.parts[0].text == "small"
        assert server.max_body == 1000
        assert zmesh.a2a.serve(far).max_body == 4 * far.max_payload


async def test_an_agent_keeps_the_last_tasks_that_ended() -> None:
    async with gateway(keep_tasks=2) as (server, far, http):
        w = far.agent("w", capabilities=("write",))
        w.add_handler("write", lambda msg: msg.payload)
        await wait_served(server, "w")
        client = await client_for(server, "w", http, streaming=True)
        task_ids = [(await responses(client, text_message(f"go{i}")))[0].task.id for i in range(3)]
        assert server.stats()["tasks_forgotten"] == 1
        with pytest.raises(Exception, match="not found|TaskNotFound"):
            await client.get_task(GetTaskRequest(id=task_ids[0]))
        for task_id in task_ids[1:]:
            assert (await client.get_task(GetTaskRequest(id=task_id))).status.state == TaskState.TASK_STATE_COMPLETED


# -- streams ----------------------------------------------------------------


async def test_a_stream_arrives_as_artifact_updates_in_order_and_get_task_has_it() -> None:
    async with gateway() as (server, far, http):
        w = far.agent("w", capabilities=("write",))

        @w.on("write")
        async def write(msg: zmesh.Message) -> AsyncIterator[Any]:
            for i in range(20):
                yield f"t{i} "
            yield {"done": True}

        await wait_served(server, "w")
        client = await client_for(server, "w", http, streaming=True)
        events = await responses(client, text_message("go"))
        kinds = [e.WhichOneof("payload") for e in events]
        assert kinds[0] == "task" and events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
        assert events[1].status_update.status.state == TaskState.TASK_STATE_WORKING
        chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
        assert [c.artifact.parts[0].text for c in chunks[:20]] == [f"t{i} " for i in range(20)]
        assert chunks[-1].artifact.parts[0].HasField("data")
        assert [c.append for c in chunks] == [False] + [True] * 20
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        task = await client.get_task(GetTaskRequest(id=events[0].task.id))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        [artifact] = task.artifacts
        assert [p.text for p in artifact.parts][:20] == [f"t{i} " for i in range(20)]


async def test_cancel_task_mid_stream_cancels_the_mesh_request() -> None:
    async with gateway() as (server, far, http):
        w = far.agent("w", capabilities=("write",))
        waiter = Waiter(first=2)
        w.add_handler("write", waiter)
        await wait_served(server, "w")
        client = await client_for(server, "w", http, streaming=True)
        events: list[StreamResponse] = []
        async with contextlib.aclosing(client.send_message(text_message("go"))) as stream:
            async for event in stream:
                events.append(event)
                if len([e for e in events if e.HasField("artifact_update")]) == 2:
                    break
        task_id = events[0].task.id
        cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        await asyncio.wait_for(waiter.cancelled.wait(), 10)
        task = await client.get_task(GetTaskRequest(id=task_id))
        assert task.status.state == TaskState.TASK_STATE_CANCELED
        assert [p.text for p in task.artifacts[0].parts] == ["chunk0", "chunk1"]


async def test_a_client_that_closes_the_stream_cancels_the_mesh_request() -> None:
    async with gateway() as (server, far, http):
        w = far.agent("w", capabilities=("write",))
        waiter = Waiter(first=1)
        w.add_handler("write", waiter)
        await wait_served(server, "w")
        client = await client_for(server, "w", http, streaming=True)
        task_id = ""
        async with contextlib.aclosing(client.send_message(text_message("go"))) as stream:
            async for event in stream:
                task_id = task_id or event.task.id
                if event.HasField("artifact_update"):
                    break  # leaving the block closes the SSE connection
        await asyncio.wait_for(waiter.cancelled.wait(), 10)
        polling = await client_for(server, "w", http, streaming=False)
        await task_reaches(polling, task_id, TaskState.TASK_STATE_CANCELED)


async def test_a_response_does_not_wait_for_the_clients_delayed_ack() -> None:
    """Nagle's algorithm on the server's sockets holds a response's body until the client ACKs
    its headers, 40 ms or more later (Linux's least delayed ACK): with it off, a card comes in about 1 ms."""
    async with gateway() as (server, far, http):
        far.agent("b", capabilities=("echo",))
        await wait_served(server, "b")
        took = []
        for _ in range(11):
            start = time.perf_counter()
            assert (await http.get(f"{server.url}/b/.well-known/agent-card.json")).status_code == 200
            took.append(time.perf_counter() - start)
        assert sorted(took)[5] < 0.03, f"median {sorted(took)[5] * 1e3:.1f} ms: waited for a delayed ACK"


async def test_closing_the_gateway_mid_stream_cancels_the_mesh_request() -> None:
    async with Mesh("zmq") as mesh:
        near, far = await mesh.node(), await mesh.node()
        w = far.agent("w", capabilities=("write",))
        waiter = Waiter(first=1)
        w.add_handler("write", waiter)
        await mesh.converged()
        server = await zmesh.a2a.serve(near).start()
        async with httpx.AsyncClient(timeout=20) as http:
            await wait_served(server, "w")
            client = await client_for(server, "w", http, streaming=True)
            events: list[StreamResponse] = []

            async def read() -> None:
                async for event in client.send_message(text_message("go")):
                    events.append(event)

            reading = asyncio.ensure_future(read())
            await wait_for(lambda: any(e.HasField("artifact_update") for e in events), 10, "the first chunk")
            await asyncio.wait_for(server.close(), 10)  # an open SSE stream does not hold it up
            await asyncio.wait_for(waiter.cancelled.wait(), 10)
            await asyncio.wait_for(asyncio.gather(reading, return_exceptions=True), 10)
        assert server.agent_id not in near.agents


# -- the bearer token ---------------------------------------------------------


async def test_with_a_token_every_request_needs_it_and_cards_declare_it() -> None:
    async with gateway(token="s3cret") as (server, far, http):
        b = far.agent("b", capabilities=("echo",))
        b.add_handler("echo", lambda msg: msg.payload)
        await wait_served(server, "b")
        async with httpx.AsyncClient(timeout=10) as stranger:
            for url in (f"{server.url}/", f"{server.url}/b/.well-known/agent-card.json"):
                refused = await stranger.get(url)
                assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
            wrong = await stranger.post(f"{server.url}/b/", json={}, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
        assert server.stats()["unauthorized"] == 3
        card = (await http.get(f"{server.url}/b/.well-known/agent-card.json")).json()
        assert card["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": {
            "scheme": "Bearer", "description": "the token the gateway was started with (--token)"}}}
        assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
        client = await client_for(server, "b", http, streaming=False)
        [reply] = await responses(client, text_message("hi"))
        assert reply.message.parts[0].text == "hi"
