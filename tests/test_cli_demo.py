"""``zmesh demo``: the story, its layout, and ``--keep`` (a mesh left running until Ctrl-C)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess

import pytest

from tests.cli_process import ROOT, ZMESH, CliProcess, cli_env, run_zmesh
from tests.helpers import wait_for
from tests.test_fixed_port import free_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]

TIMED_STEP = re.compile(r"^\[\s*\d+\.\d\ds\] (request|delegate|broadcast|send|handoff) ")


@pytest.fixture(scope="module")
def demo() -> subprocess.CompletedProcess[str]:
    """One run of ``zmesh demo`` for the tests that read its output."""
    return subprocess.run([*ZMESH, "demo"], cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=50)


def test_demo_runs_every_primitive_and_survives_the_kill(demo: subprocess.CompletedProcess[str]) -> None:
    assert demo.returncode == 0, demo.stdout + demo.stderr
    for step in ("request ", "delegate ", "broadcast ", "send ", "handoff ", "SIGKILL researcher",
                 "failed fast", "left every registry", "the newcomer took over", "zmesh demo finished"):
        assert step in demo.stdout, f"{step!r} missing from:\n{demo.stdout}"


def test_demo_columns_line_up(demo: subprocess.CompletedProcess[str]) -> None:
    steps = [line for line in demo.stdout.splitlines() if TIMED_STEP.match(line) and " ms" in line]
    assert len(steps) >= 5, demo.stdout
    assert len({line.index(" ms") for line in steps}) == 1, "\n".join(steps)  # round trips in one column
    topics = {"plan.make", "write.summary", "findings.new", "notes.add", "research-backlog", "status"}
    assert len({line.index(t) for line in steps for t in topics if f" {t} " in line}) == 1, "\n".join(steps)


def test_demo_ends_saying_what_to_try_next(demo: subprocess.CompletedProcess[str]) -> None:
    tail = demo.stdout.rstrip().splitlines()[-4:]
    assert tail[0] == "What next:" and "zmesh demo --keep" in tail[1], demo.stdout
    assert "zmesh demo --secure" in tail[2], demo.stdout


def _pids(lines: list[str]) -> list[int]:
    return [int(pid) for line in lines if "] start " in line for pid in re.findall(r"\(pid (\d+)\)", line)]


def _gone(pid: int) -> bool:
    """The process has exited and been reaped (a zombie still has a /proc entry)."""
    return not os.path.exists(f"/proc/{pid}")


async def test_demo_keep_leaves_a_mesh_to_use_and_ctrl_c_stops_all_of_it() -> None:
    port = free_port()
    async with CliProcess("demo", "--keep", "--port", str(port)) as demo:
        await demo.wait_for_output(lambda out: "Ctrl-C here stops the mesh." in out, 40, "the commands to try")
        tries = [shlex.split(line) for line in demo.out if line.startswith("  zmesh ")]
        by_command = {t[1]: t for t in reversed(tries)}  # the first line of each command
        assert {"peers", "request", "sub", "top"} <= set(by_command), demo.out
        seed = next(line.rsplit(" ", 1)[1] for line in demo.out if line.startswith("Seed endpoint"))
        assert seed == f"tcp://127.0.0.1:{port}"  # --port: the console node's, so the seed is known ahead
        assert all(seed in t for t in tries)

        code, out, err = await run_zmesh(*by_command["top"][1:], "--once", "--json", "--interval", "0.2")
        assert code == 0, err
        view = json.loads(out)
        assert {n["node_id"] for n in view["nodes"]} == {"console-node", "planner-node", "writer-node",
                                                           "researcher-2-node"}
        assert all(n["answered"] for n in view["nodes"]), view["nodes"]
        handled = {a["agent_id"]: a["handled"] for a in view["agents"]}
        assert set(handled) == {"console", "planner", "writer", "researcher-2"} and handled["planner"] > 0

        code, out, err = await run_zmesh(*by_command["peers"][1:])
        assert code == 0, err
        assert {"planner", "writer", "researcher-2", "console"} <= set(out.split()), out

        code, out, err = await run_zmesh(*by_command["request"][1:])
        assert code == 0, err
        assert json.loads(out)["researcher"] == "researcher-2"

        children = _pids(demo.out)
        assert len(children) == 4 and not all(map(_gone, children)), demo.out
        demo.proc.send_signal(signal.SIGINT)
        assert await demo.finish(20) == 130
        assert demo.err[-1:] == ["zmesh demo: interrupted (SIGINT)"], demo.err
        assert not any("Traceback" in line for line in demo.err)
    await wait_for(lambda: all(map(_gone, children)), 1, "every agent process to be gone")
