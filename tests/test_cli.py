"""The zmesh command: demo, peers, send, request, sub against a live node."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

import zmesh
from tests.helpers import wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


async def _zmesh(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "zmesh.cli", *args,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 45)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_demo_runs_every_primitive_and_survives_the_kill() -> None:
    code, out, err = await _zmesh("demo")
    assert code == 0, out + err
    for step in ("request ", "delegate ", "broadcast ", "send ", "handoff ", "SIGKILL researcher",
                 "failed fast", "left every registry", "the newcomer took over", "zmesh demo finished"):
        assert step in out, f"{step!r} missing from:\n{out}"


async def test_peers_send_request_and_sub() -> None:
    mesh = f"cli-{os.getpid()}"
    async with zmesh.Node(mesh, discovery=False) as node:
        b = node.agent("b", capabilities=("echo",))
        got: list[object] = []
        b.add_handler("echo", lambda msg: {"echo": msg.payload, "from": msg.sender})
        b.add_handler("note", lambda msg: got.append(msg.payload))
        seed = ["--mesh", mesh, "--seed", node.endpoint]

        code, out, err = await _zmesh("peers", *seed)
        assert code == 0, err
        assert "AGENT" in out and "b" in out.split() and "echo" in out

        code, out, err = await _zmesh("request", *seed, "b", "echo", '{"x": 1}')
        assert code == 0, err
        reply = json.loads(out)
        assert reply["echo"] == {"x": 1} and reply["from"].startswith("cli-")

        code, out, err = await _zmesh("send", *seed, "b", "note", "hello")
        assert code == 0, err
        await wait_for(lambda: got == ["hello"], 5, "the note")

        sub = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "zmesh.cli", "sub", *seed, "news.>", "--count", "1",
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"},
        )
        try:
            await wait_for(lambda: node.registry.subscribers("news.today.x"), 15, "the cli subscriber")
            assert await b.broadcast("news.today.x", {"n": 1}) == 1
            out_b, err_b = await asyncio.wait_for(sub.communicate(), 15)
        finally:
            if sub.returncode is None:
                sub.kill()
                await sub.wait()
        assert json.loads(out_b.decode()) == {"topic": "news.today.x", "sender": "b", "payload": {"n": 1}}

        code, out, err = await _zmesh("request", "--mesh", mesh, "--seed", node.endpoint, "nobody", "echo")
        assert code == 1 and "AgentNotRegistered" in err


async def test_no_mesh_to_join_is_a_clear_error() -> None:
    code, out, err = await _zmesh("peers", "--mesh", "nobody-here", "--seed", "tcp://127.0.0.1:1", "--wait", "0.5")
    assert code == 1
    assert "no member of mesh 'nobody-here' answered" in err


async def test_version_prints_the_package_version() -> None:
    code, out, _ = await _zmesh("--version")
    assert code == 0
    assert out.strip() == f"zmesh {zmesh.__version__}"
