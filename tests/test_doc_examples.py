"""The README's and the guide's examples run as written: the one-process ones
as programs, the cross-process ones as two processes, the second started at
once after the first (as a newcomer would, without waiting for anything).

A fragment (top-level ``await``) runs inside an ``async def main()`` with
``asyncio`` and ``zmesh`` imported. The documented port 5555 is replaced by
a free one and the mesh name "lab" by one of this run's, so parallel runs
(another suite on the machine, its nodes found by mDNS) never collide."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide.md"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def the_block(path: Path, *needles: str) -> str:
    """The one Python block of ``path`` that contains every needle."""
    found = [b for b in python_blocks(path) if all(n in b for n in needles)]
    assert len(found) == 1, f"{path.name}: {len(found)} blocks contain {needles}"
    return found[0]


def program(block: str, port: int) -> str:
    code = block.replace("5555", str(port)).replace('"lab"', f'"doc-{os.getpid()}-{port}"')
    try:
        compile(code, "<example>", "exec")
    except SyntaxError:  # a fragment: it awaits at the top level
        code = "async def main():\n" + textwrap.indent(code, "    ") + "\nasyncio.run(main())\n"
    return "import asyncio\nimport zmesh\n" + code


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


ENV = {**os.environ, "ZMESH_INTERFACES": "127.0.0.1"}


def run(code: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=40, env=ENV)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result


def serve_and_ask(server_block: str, client_block: str) -> str:
    """Start the server, then at once the client; the client's stdout."""
    port = free_port()  # (also names the mesh: server and client must agree)
    server = subprocess.Popen([sys.executable, "-c", program(server_block, port)], cwd=ROOT, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        return run(program(client_block, port)).stdout
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            _, err = server.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
            raise
        assert server.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err


def test_the_readme_one_process_examples_run() -> None:
    out = run(program(the_block(README, 'transport="inproc"', "research.found"), 0)).stdout
    assert out.splitlines()[0] == "3" and "1" in out.splitlines()
    assert run(program(the_block(README, "import zmesh.sync"), 0)).stdout == "hi\n"


def test_the_readme_worker_and_client_run_as_two_processes() -> None:
    out = serve_and_ask(the_block(README, "# worker.py"), the_block(README, "# client.py"))
    assert out == "3\n"


def test_the_guide_service_and_joining_examples_run_as_two_processes() -> None:
    server = the_block(GUIDE, "zmesh.run(main())", "port=5555")
    client = the_block(GUIDE, 'seeds=["tcp://127.0.0.1:5555"]', "request(")
    out = serve_and_ask(server, client + "    print(reply.payload)\n")  # the fragment only asks: say what came
    assert out == "3\n"


def test_the_guides_envelope_example_runs() -> None:
    out = run(program(the_block(GUIDE, "send_envelope"), 0)).stdout
    assert out == "{'found': 1, 'asked_by': 'orchestrator'} task_0817\n"
