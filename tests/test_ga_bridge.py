"""zmesh.ga: GenericAgent sub-agent folders as mesh agents, against a
stand-in that follows GenericAgent's file protocol (tests/ga_standin)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import pytest

import zmesh
from zmesh.ga import GABridge, State
from zmesh.ga import _files as files
from zmesh.ga._process import alive, find_subagents

from .cli_process import CliProcess, run_zmesh
from .helpers import wait_for

STANDIN = Path(__file__).parent / "ga_standin" / "agentmain.py"
FAST = {"poll": 0.02, "scan_interval": 0.1}

pytestmark = pytest.mark.timeout(60)


def kill_subagents(root: Path) -> None:
    for pid in find_subagents(root).values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while find_subagents(root) and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    ga = tmp_path / "GenericAgent"
    (ga / "temp").mkdir(parents=True)
    shutil.copy(STANDIN, ga / "agentmain.py")
    monkeypatch.setenv("GA_STANDIN_POLL", "0.02")
    monkeypatch.setenv("GA_STANDIN_POLLS", "5000")
    yield ga
    kill_subagents(ga)


@contextlib.asynccontextmanager
async def bridged(root: Path, **options: Any) -> AsyncIterator[tuple[GABridge, zmesh.Agent]]:
    """A bridge on an in-process node, and an agent of that node to ask it."""
    async with zmesh.Node("ga", transport="inproc") as node, GABridge(node, root, **{**FAST, **options}) as bridge:
        yield bridge, node.agent("me")


def start_standin(root: Path, name: str, text: str) -> int:
    """Launch a sub-agent the way GenericAgent's master does, without the bridge."""
    out = subprocess.run([sys.executable, str(root / "agentmain.py"), "--task", name, f"--input={text}"],
                         cwd=root, capture_output=True, text=True, timeout=30, check=True).stdout
    return int(out.split("PID:")[1])


async def until(condition: Callable[[], Any], what: str) -> None:
    await wait_for(condition, 20.0, what)


def round_done(root: Path, name: str, n: int) -> bool:
    now = files.read_round(files.output_file(root / "temp" / name, n))
    return now is not None and now.done


# -- the protocol's files ----------------------------------------------------


def test_a_round_is_over_only_once_its_text_ends_with_the_marker(tmp_path: Path) -> None:
    out = tmp_path / "output.txt"
    assert files.read_round(out) is None
    for torn in ("", "half an ans", "text\n\n[ROUND EN", "text\n\n[ROUND END]"):
        out.write_text(torn, encoding="utf-8")
        now = files.read_round(out)
        assert now is not None and not now.done, torn
    out.write_bytes(b"\xef\xbb\xbfline one\r\nline two\r\n\r\n[ROUND END]\r\n")
    assert files.read_round(out) == files.Round(True, "line one\nline two")
    out.write_text("[ROUND END]\n", encoding="utf-8")  # a round _stop cancelled at its first step
    assert files.read_round(out) == files.Round(True, "")
    out.write_bytes(b"caf\xc3")  # a write torn inside a character
    assert files.read_round(out) == files.Round(False, "caf\ufffd")


def test_rounds_are_numbered_as_the_child_names_them(tmp_path: Path) -> None:
    assert files.output_file(tmp_path, 0).name == "output.txt"
    assert files.output_file(tmp_path, 3).name == "output3.txt"
    assert files.latest_round(tmp_path) == -1
    for name in ("output.txt", "output1.txt", "output12.txt", "output03.txt", "outputx.txt", "output2.log"):
        (tmp_path / name).write_text("x")
    assert files.latest_round(tmp_path) == 12
    old = time.time() - 3600
    os.utime(tmp_path / "output12.txt", (old, old))
    assert files.latest_round(tmp_path, since=time.time() - 60) == 1


def test_intervene_and_keyinfo_add_to_what_is_not_yet_read(tmp_path: Path) -> None:
    files.write_control(tmp_path, "intervene", "first")
    files.write_control(tmp_path, "intervene", "second")
    assert (tmp_path / "_intervene").read_text(encoding="utf-8") == "first\n\nsecond"
    files.write_control(tmp_path, "stop", "")
    assert (tmp_path / "_stop").read_text(encoding="utf-8").strip(), "an empty _stop is ignored by the child"
    files.write_reply(tmp_path, "next")
    assert not (tmp_path / "_stop").exists(), "a stop left over from the last round would cancel this one"
    assert (tmp_path / "reply.txt").read_text(encoding="utf-8") == "next"
    assert not list(tmp_path.glob(".*tmp")), "no temporary file is left behind"


def test_the_bridge_refuses_a_folder_without_agentmain(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="agentmain.py"):
        GABridge(object(), tmp_path)  # type: ignore[arg-type]


# -- the bridge against the stand-in -------------------------------------------


async def test_a_request_launches_a_subagent_and_its_rounds_are_one_conversation(
        root: Path) -> None:
    async with bridged(root, spawn=True) as (bridge, me):
        (root / "temp" / "writer").mkdir()
        files.write_atomic(root / "temp" / "writer" / "input.txt", "an earlier task")
        await until(lambda: "writer" in bridge.stats()["agents"], what="the folder to be exposed")
        first = await me.request("writer", "task", "draft the intro", timeout=30)
        assert first.payload == "echo: draft the intro"
        assert (root / "temp" / "writer" / "input.txt").read_text(encoding="utf-8") == "draft the intro"
        second = await me.request("writer", "task", {"text": "history"}, timeout=30)
        assert second.payload == "draft the intro | history"
        assert round_done(root, "writer", 1)
        status = (await me.request("writer", "status", None, timeout=5)).payload
        assert status["state"] == "waiting" and status["round"] == 1 and alive(status["pid"])
        assert bridge.stats()["counts"]["launched"] == 1


async def test_a_running_subagent_is_adopted_and_an_idle_folder_is_not_exposed(
        root: Path) -> None:
    pid = start_standin(root, "scout", "look around")
    (root / "temp" / "idle").mkdir()
    (root / "temp" / "idle" / "input.txt").write_text("nothing runs me", encoding="utf-8")
    (root / "temp" / "model_responses").mkdir()  # not a sub-agent's folder
    await until(lambda: round_done(root, "scout", 0), what="round 0")
    async with bridged(root) as (bridge, me):
        assert bridge.stats()["agents"] == ["scout"]
        assert bridge.stats()["folders"]["scout"]["pid"] == pid
        reply = await me.request("scout", "task", "and now?", timeout=30)
        assert reply.payload == "echo: and now?"
        assert round_done(root, "scout", 1)
        with pytest.raises(zmesh.AgentNotRegistered):
            await me.request("idle", "task", "hello", timeout=5)
        assert bridge.stats()["counts"].get("launched", 0) == 0


async def test_a_subagent_that_dies_mid_round_gives_peer_lost_and_leaves(root: Path) -> None:
    start_standin(root, "fragile", "warm up")
    await until(lambda: round_done(root, "fragile", 0), what="round 0")
    async with bridged(root) as (bridge, me):
        with pytest.raises(zmesh.PeerLost, match="exited without ending round 1"):
            await me.request("fragile", "task", "die", timeout=30)
        await until(lambda: "fragile" not in bridge.stats()["agents"], what="the dead sub-agent to leave")
        await until(lambda: me.node.registry.node_of("fragile") is None, what="the registry to forget it")
        assert bridge.stats()["folders"]["fragile"]["state"] == State.ABSENT.value
        assert bridge.stats()["counts"]["lost"] == 1


async def test_a_subagent_that_ends_without_a_reply_leaves_unless_it_may_be_launched_again(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # They end 3 s after their round (GenericAgent: 600 s), time for the bridge to adopt them first.
    monkeypatch.setenv("GA_STANDIN_POLL", "0.05")
    monkeypatch.setenv("GA_STANDIN_POLLS", "60")
    async with bridged(root, spawn=["again"]) as (bridge, me):
        start_standin(root, "brief", "once")
        start_standin(root, "again", "once")
        await until(lambda: all(bridge.stats()["folders"].get(n, {}).get("pid") for n in ("brief", "again")),
                    what="both to be adopted")
        assert {"brief", "again"} <= set(bridge.stats()["agents"])
        await until(lambda: "brief" not in bridge.stats()["agents"], what="the ended sub-agent to leave")
        await until(lambda: bridge.stats()["folders"]["again"]["state"] == "absent", what="'again' to end")
        assert "again" in bridge.stats()["agents"]
        reply = await me.request("again", "task", "history", timeout=30)
        assert reply.payload == "history", "a new process: a new conversation"
        counts = bridge.stats()["counts"]
        assert counts["exited"] == 2 and counts["launched"] == 1


async def test_stop_ends_the_running_round_and_never_the_next(root: Path) -> None:
    async with bridged(root, spawn=True) as (bridge, me):
        (root / "temp" / "long").mkdir()
        (root / "temp" / "long" / "input.txt").write_text("x", encoding="utf-8")
        idle = await me.request("ga-bridge", "launch", {"name": "long", "input": "start"}, timeout=30)
        assert idle.payload == "echo: start"
        said = await me.request("long", "stop", None, timeout=5)
        assert said.payload == {"stopped": False, "state": "waiting"}
        assert not (root / "temp" / "long" / "_stop").exists()
        asked = asyncio.ensure_future(me.request("long", "task", "slow 2000", timeout=30))
        out = files.output_file(root / "temp" / "long", 1)
        await until(lambda: (files.read_round(out) or files.Round(False, "")).text.startswith("part0"),
                    what="the round to start")
        said = await me.request("long", "stop", None, timeout=5)
        assert said.payload == {"stopped": True, "round": 1}
        text = (await asked).payload
        assert text.startswith("part0 ") and "part1999" not in text
        after = await me.request("long", "task", "still here?", timeout=30)
        assert after.payload == "echo: still here?"


async def test_keyinfo_and_intervene_reach_the_running_round(root: Path) -> None:
    start_standin(root, "worker", "ready")
    await until(lambda: round_done(root, "worker", 0), what="round 0")
    async with bridged(root) as (bridge, me):
        asked = asyncio.ensure_future(me.request("worker", "task", "slow 5000", timeout=60))
        out = files.output_file(root / "temp" / "worker", 1)
        await until(lambda: out.exists(), what="the round to start")
        said = await me.request("worker", "intervene", "use the short form", timeout=5)
        assert said.payload["written"] == "_intervene"
        await me.send("worker", "keyinfo", {"text": "the deadline is Friday"})
        seen = ("[MASTER] use the short form", "[MASTER keyinfo] the deadline is Friday")
        await until(lambda: all(s in (files.read_round(out) or files.Round(False, "")).text for s in seen),
                    what="the sub-agent to read both at a turn's end")
        await me.request("worker", "stop", None, timeout=5)
        text = (await asked).payload
        assert all(s in text for s in seen) and "part4999" not in text


async def test_control_of_a_folder_with_no_process_is_refused(root: Path) -> None:
    (root / "temp" / "later").mkdir()
    (root / "temp" / "later" / "input.txt").write_text("x", encoding="utf-8")
    async with bridged(root, spawn=True) as (bridge, me):
        with pytest.raises(zmesh.PeerLost, match="no running process"):
            await me.request("later", "intervene", "hello?", timeout=5)
        assert (await me.request("later", "stop", None, timeout=5)).payload == {"stopped": False, "state": "absent"}
        assert not (root / "temp" / "later" / "_intervene").exists()


async def test_stale_control_files_and_outputs_are_cleared_before_a_launch(root: Path) -> None:
    folder = root / "temp" / "reused"
    folder.mkdir()
    (folder / "input.txt").write_text("old task", encoding="utf-8")
    (folder / "output.txt").write_text("the old answer\n\n[ROUND END]\n", encoding="utf-8")
    (folder / "output1.txt").write_text("older\n\n[ROUND END]\n", encoding="utf-8")
    for leftover in ("_stop", "reply.txt", "_intervene"):
        (folder / leftover).write_text("stale", encoding="utf-8")
    async with bridged(root, spawn=True) as (bridge, me):
        reply = await me.request("reused", "task", "new task", timeout=30)
        assert reply.payload == "echo: new task"
        second = await me.request("reused", "task", "history", timeout=30)
        assert second.payload == "new task | history"


async def test_inputs_the_command_line_cannot_carry_go_in_input_txt(root: Path) -> None:
    async with bridged(root, spawn=True) as (bridge, me):
        long_text = "length " + "y" * 100_000
        for name, text, said in (("big", long_text, f"length {len(long_text)}"),
                                 ("dash", "--help me", "echo: --help me"),
                                 ("lines", "crlf one\ntwo", "one\ntwo")):
            (root / "temp" / name).mkdir()
            (root / "temp" / name / "input.txt").write_text("x", encoding="utf-8")
            reply = await me.request("ga-bridge", "launch", {"name": name, "input": text}, timeout=30)
            assert reply.payload == said, name
        assert b"\r\n" in files.output_file(root / "temp" / "lines", 0).read_bytes()


async def test_bad_requests_get_clear_errors_and_nothing_is_written(root: Path) -> None:
    start_standin(root, "calm", "ready")
    await until(lambda: round_done(root, "calm", 0), what="round 0")
    async with bridged(root, max_queued=1) as (bridge, me):
        for payload in ("", "  \n", 42, {"txt": "x"}):
            with pytest.raises(zmesh.HandlerError, match="InvalidMessage"):
                await me.request("calm", "task", payload, timeout=5)
        assert not (root / "temp" / "calm" / "reply.txt").exists()
        with pytest.raises(zmesh.HandlerError, match="may not launch"):
            await me.request("ga-bridge", "launch", {"name": "calm2", "input": "x"}, timeout=5)
        with pytest.raises(zmesh.HandlerError, match="InvalidMessage"):
            await me.request("ga-bridge", "launch", {"name": "../escape", "input": "x"}, timeout=5)
        first = asyncio.ensure_future(me.request("calm", "task", "slow 5000", timeout=60))
        await until(lambda: files.output_file(root / "temp" / "calm", 1).exists(), what="round 1")
        second = asyncio.ensure_future(me.request("calm", "task", "queued", timeout=30))
        await until(lambda: bridge.stats()["folders"]["calm"]["queued"] == 2, what="the second to wait")
        with pytest.raises(zmesh.Backpressure, match="1 round"):
            await me.request("calm", "task", "third", timeout=30)
        await me.request("calm", "stop", None, timeout=5)
        assert (await first).payload.startswith("part0")
        assert (await second).payload == "echo: queued"


async def test_the_command_line_bridge_serves_other_processes_and_leaves_its_subagents_running(root: Path) -> None:
    mesh = f"ga-cli-{os.getpid()}"
    async with CliProcess("ga-bridge", "--root", str(root), "--mesh", mesh, "--spawn") as bridge:
        await bridge.wait_for_output(lambda out: bool(out), 30, "the bridge's first line")
        up = json.loads(bridge.out[0])
        assert up["mesh"] == mesh and up["agents"] == [] and up["root"] == str(root)
        code, out, err = await run_zmesh("request", "--mesh", mesh, "--seed", up["endpoint"], "ga-bridge", "launch",
                                         json.dumps({"name": "cli", "input": "from the shell"}))
        assert (code, json.loads(out or "null")) == (0, "echo: from the shell"), err
        code, out, err = await run_zmesh("request", "--mesh", mesh, "--seed", up["endpoint"], "cli", "task",
                                         "--raw", "history")
        assert (code, json.loads(out or "null")) == (0, "from the shell | history"), err
        bridge.proc.send_signal(signal.SIGTERM)
        assert await bridge.finish() == 143
    assert "cli" in find_subagents(root), "a sub-agent outlives the bridge, for the next one to adopt"


async def test_the_command_line_refuses_a_root_without_agentmain(tmp_path: Path) -> None:
    code, out, err = await run_zmesh("ga-bridge", "--root", str(tmp_path), "--mesh", "ga-bad")
    assert code == 2 and "agentmain.py" in err and out == ""


async def test_a_requester_that_gives_up_stops_its_round(root: Path) -> None:
    start_standin(root, "patient", "ready")
    await until(lambda: round_done(root, "patient", 0), what="round 0")
    async with bridged(root) as (bridge, me):
        with pytest.raises(zmesh.Timeout):
            await me.request("patient", "task", "slow 5000", timeout=1)  # 100 s of work, if nobody stops it
        await until(lambda: round_done(root, "patient", 1), what="the abandoned round to be stopped")
        stopped = files.read_round(files.output_file(root / "temp" / "patient", 1))
        assert stopped is not None and "part4999" not in stopped.text
        after = await me.request("patient", "task", "next", timeout=30)
        assert after.payload == "echo: next"
        assert bridge.stats()["counts"]["stopped_for_requester"] == 1
