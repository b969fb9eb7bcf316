"""``zmesh a2a-gateway`` as its users run it: a process serving a mesh's agents
over HTTP on 127.0.0.1; beyond loopback it wants a token before it binds anything."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest

from zmesh._tools.cli.main import main

from .cli_process import CliProcess, run_zmesh
from .helpers import Mesh, wait_for

pytest.importorskip("a2a.client", reason="zmesh a2a-gateway needs a2a-sdk: pip install 'zmesh-agents[a2a]'")

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("listen", ["0.0.0.0:8000", "192.168.1.10:0", "[::]:0", "gateway.example:80"])
def test_listening_beyond_loopback_without_a_token_is_refused(listen: str, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZMESH_A2A_TOKEN", raising=False)
    assert main(["a2a-gateway", "--mesh", "refused", "--listen", listen]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zmesh a2a-gateway: error: refusing to serve mesh agents on"), err
    assert "without a bearer token" in err and "--token" in err


@pytest.mark.parametrize("given", ["weather", "weather=", "=http://127.0.0.1:1/", "weather=ftp://127.0.0.1/"])
def test_a_remote_that_is_not_name_equals_url_is_a_usage_error(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["a2a-gateway", "--mesh", "bad", "--remote", given]) == 2
    assert "--remote takes NAME=URL" in capsys.readouterr().err


@pytest.mark.parametrize("listen", ["8000", "127.0.0.1:", ":8000", "127.0.0.1:http", "127.0.0.1:70000"])
def test_a_listen_address_that_is_not_host_port_is_a_usage_error(listen: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["a2a-gateway", "--mesh", "bad", "--listen", listen]) == 2
    assert "--listen takes HOST:PORT" in capsys.readouterr().err


async def served_within(http: httpx.AsyncClient, url: str, agent_id: str, timeout: float) -> None:
    """Poll the gateway's list of cards until it has ``agent_id``; fail after ``timeout`` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while agent_id not in [card["name"] for card in (await http.get(url + "/")).json()]:
        assert asyncio.get_running_loop().time() < deadline, f"the gateway did not serve {agent_id!r} in time"
        await asyncio.sleep(0.02)


@pytest.mark.multiprocess
async def test_the_gateway_process_serves_the_meshs_agents_until_sigterm() -> None:
    async with Mesh("zmq") as mesh:
        node = await mesh.node()
        b = node.agent("b", capabilities=("shout",), meta={"description": "shouts back"})
        b.add_handler("shout", lambda msg: str(msg.payload).upper())
        async with CliProcess("a2a-gateway", "--mesh", mesh.name, "--seed", node.endpoint,
                              "--listen", "127.0.0.1:0", "--token", "t0k") as gateway:
            await gateway.wait_for_output(lambda out: len(out) >= 1, 30, "the gateway's line")
            line = json.loads(gateway.out[0])
            assert line["mesh"] == mesh.name and line["token"] is True
            assert line["agent"] == line["node"] and line["agent"].startswith("a2a-gateway-")
            assert line["url"].startswith("http://127.0.0.1:")
            async with httpx.AsyncClient(headers={"Authorization": "Bearer t0k"}, timeout=20) as http:
                await served_within(http, line["url"], "b", 20)
                card = (await http.get(line["url"] + "/b/.well-known/agent-card.json")).json()
                assert card["description"] == "shouts back"
                client = await create_client(line["url"] + "/b/", ClientConfig(streaming=False, httpx_client=http))
                message = Message(role=Role.ROLE_USER, message_id="m", parts=[Part(text="hi")])
                [reply] = [event async for event in client.send_message(SendMessageRequest(message=message))]
                assert reply.message.parts[0].text == "HI"
            gateway.proc.send_signal(signal.SIGTERM)
            assert await gateway.proc.wait() == 143
            await wait_for(lambda: node.registry.node_of(line["agent"]) is None, 10, "the gateway's goodbye")


@pytest.mark.multiprocess
async def test_the_gateway_process_makes_a_remote_a2a_agent_a_mesh_agent() -> None:
    from .a2a_agents import Weather, a2a_agent

    async with a2a_agent(Weather()) as (url, _), Mesh("zmq") as mesh:
        node = await mesh.node()
        caller = node.agent("caller")
        async with CliProcess("a2a-gateway", "--mesh", mesh.name, "--seed", node.endpoint,
                              "--remote", f"weather={url}") as gateway:
            await gateway.wait_for_output(lambda out: len(out) >= 1, 30, "the gateway's line")
            assert json.loads(gateway.out[0])["remotes"] == {"weather": url}
            await node.wait_for_agents("weather", timeout=20)
            assert node.registry.agents()["weather"].capabilities == ("forecast", "alerts")
            assert (await caller.request("weather", "forecast", "rain", timeout=10)).payload == "forecast:RAIN"
            gateway.proc.send_signal(signal.SIGTERM)
            assert await gateway.proc.wait() == 143
            await wait_for(lambda: "weather" not in node.registry.agents(), 10, "the stand-in to leave")


@pytest.mark.multiprocess
async def test_a_remote_whose_card_cannot_be_read_stops_the_gateway_saying_so() -> None:
    async with Mesh("zmq") as mesh:
        node = await mesh.node()
        code, out, err = await run_zmesh("a2a-gateway", "--mesh", mesh.name, "--seed", node.endpoint,
                                         "--remote", "ghost=http://127.0.0.1:9/", timeout=30)
        assert code == 1 and out == "", (out, err)
        assert "cannot use the A2A agent at http://127.0.0.1:9/ as 'ghost'" in err
