"""Ctrl-C and SIGTERM end every zmesh command cleanly: one line, exit 130/143, peers told at once.

Each test signals the command only once it is provably waiting (the mesh
saw its request or subscription, or a fake seed got its hello).
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import zmq

import zmesh
from tests.cli_process import CliProcess
from tests.helpers import wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


def _mesh() -> str:
    return f"sig-{os.getpid()}-{os.urandom(3).hex()}"


def _assert_one_line(cli: CliProcess, line: str) -> None:
    assert cli.err == [line], cli.err
    assert not any("Traceback" in text for text in cli.out + cli.err)


@pytest.mark.parametrize("signum, code, how", [
    (signal.SIGINT, 130, "interrupted (SIGINT)"),
    (signal.SIGTERM, 143, "terminated (SIGTERM)"),
])
async def test_a_signal_during_a_request_exits_cleanly_and_says_goodbye(
    signum: signal.Signals, code: int, how: str
) -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        asked = asyncio.Event()
        never = asyncio.Event()

        async def slow(msg: zmesh.Message) -> None:
            asked.set()
            await never.wait()

        node.agent("b").add_handler("slow", slow)
        departures: list[zmesh.MeshEvent] = []

        async def watch() -> None:
            async for event in node.events():
                if event.kind == "peer_left":
                    departures.append(event)

        watcher = asyncio.ensure_future(watch())
        try:
            async with CliProcess("request", "--mesh", mesh, "--seed", node.endpoint, "b", "slow",
                                  "--null") as cli:
                await asyncio.wait_for(asked.wait(), 15)
                cli.proc.send_signal(signum)
                assert await cli.finish() == code
                _assert_one_line(cli, f"zmesh request: {how}")
                # It said goodbye: "left" (a BYE), not "lost its connection" as after a crash.
                await wait_for(lambda: departures, 5, "the cli node to leave")
                assert [e.detail for e in departures] == ["left"]
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)


async def test_ctrl_c_while_peers_waits_for_the_mesh_exits_130() -> None:
    context = zmq.Context()
    seed = context.socket(zmq.ROUTER)  # a seed that hears the hello and never answers
    seed.setsockopt(zmq.LINGER, 0)
    try:
        seed.bind("tcp://127.0.0.1:*")
        endpoint = seed.getsockopt_string(zmq.LAST_ENDPOINT)
        async with CliProcess("peers", "--mesh", _mesh(), "--seed", endpoint, "--wait", "30") as cli:
            await wait_for(lambda: seed.poll(0), 15, "the cli's hello")
            cli.proc.send_signal(signal.SIGINT)
            assert await cli.finish() == 130
            _assert_one_line(cli, "zmesh peers: interrupted (SIGINT)")
    finally:
        seed.close()
        context.term()


@pytest.mark.parametrize("signum, code, how", [
    (signal.SIGINT, 130, "interrupted (SIGINT)"),
    (signal.SIGTERM, 143, "terminated (SIGTERM)"),
])
async def test_a_signal_stops_sub(signum: signal.Signals, code: int, how: str) -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        async with CliProcess("sub", "--mesh", mesh, "--seed", node.endpoint, "news.>") as cli:
            await wait_for(lambda: node.registry.subscribers("news.x"), 15, "the cli subscriber")
            cli.proc.send_signal(signum)
            assert await cli.finish() == code
            _assert_one_line(cli, f"zmesh sub: {how}")
            await wait_for(lambda: not node.registry.subscribers("news.x"), 5, "the cli to unsubscribe by leaving")


async def test_a_cancellation_that_meets_an_acknowledgement_still_cancels() -> None:
    """``subscribe()`` waits in Watch.settled for peers' acknowledgements. A
    SIGINT cancels the command's task; when the acknowledgement wakes that
    wait in the same loop turn, asyncio.wait_for on 3.10 returned normally
    and the command never stopped (bpo-42130): the cancellation must win."""
    from zmesh._runtime.watch import Watch

    watch = Watch("n")
    acked = [False]
    task = asyncio.ensure_future(watch.settled(lambda: acked[0], 10))
    await asyncio.sleep(0)  # the task waits for a wake
    acked[0] = True
    watch.wake()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
