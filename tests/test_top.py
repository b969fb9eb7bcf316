"""``zmesh top`` against a real mesh of three nodes, two of them separate processes.

The hub node lives in the test process and hosts ``slow`` (one handler at a
time, an inbox of 4, blocked until the test lets go: broadcasts wait and
are dropped) and ``driver``, which sends; ``worker-1`` and ``worker-2``
are agents in processes of their own (tests/_mp_agent.py). What top shows
is checked four ways: rendered to a string in-process, ``--once --json``
parsed, the live view on a pseudo-terminal (``q`` quits with 0, Ctrl-C
with 130 and one line), and without ``rich`` installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import io
import json
import os
import re
import struct
import subprocess
import sys
import termios
import time
from typing import Any, AsyncIterator, Callable

import pytest
from rich.console import Console

import zmesh
from tests.cli_process import ROOT, ZMESH, CliProcess, cli_env, run_zmesh
from tests.helpers import wait_for
from tests.test_multiprocess import Procs
from zmesh._tools.cli.commands import CLI_NODE_PREFIX, cli_node_name, is_cli_probe
from zmesh._tools.top.app import TopCollector
from zmesh._tools.top.view import probes_line, render

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]

NODES = {"hub", "worker-1-node", "worker-2-node"}
AGENTS = {"slow", "driver", "worker-1", "worker-2"}


class Hub:
    """The test's side of the mesh: node ``hub``, its agents, and the two agent processes."""

    def __init__(self, node: zmesh.Node, procs: Procs) -> None:
        self.node = node
        self.procs = procs
        self.driver = node.agent("driver")
        self.slow = node.agent("slow", capabilities=("slowness",), concurrency=1, inbox_size=4)
        self.release = asyncio.Event()
        self.seed = ["--mesh", node.mesh, "--seed", node.endpoint]

    async def setup(self) -> None:
        async def stuck(msg: zmesh.Message) -> None:
            await self.release.wait()

        def fail(msg: zmesh.Message) -> None:
            raise RuntimeError("on purpose")

        self.slow.add_handler("fail", fail)
        await self.slow.subscribe("ev.*", stuck)
        for i in (1, 2):
            proc = self.procs.start(f"worker-{i}", self.node.endpoint)
            assert proc.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
            assert line.startswith("ready "), line
        await self.node.wait_for_agents("worker-1", "worker-2", timeout=20)
        await self.node.settled(10)

    async def fill_slow(self) -> None:
        """One dead letter, then one broadcast running, two waiting, seven dropped."""
        with pytest.raises(zmesh.HandlerError):
            await self.driver.request("slow", "fail", timeout=10)
        for i in range(10):
            await self.driver.broadcast("ev.x", i)

        def figures() -> tuple[int, int, int]:
            inbox = self.node.stats()["by_agent"]["slow"]
            return inbox["running"], inbox["inbox"], inbox["dropped"]

        await wait_for(lambda: figures() == (1, 2, 7), 10, "slow's inbox to fill")

    @contextlib.asynccontextmanager
    async def traffic(self) -> AsyncIterator[list[int]]:
        """Requests to worker-1, one after another, while the block runs."""
        done: list[int] = []
        stop = asyncio.Event()

        async def ask() -> None:
            while not stop.is_set():
                await self.driver.request("worker-1", "whoami", timeout=10)
                done.append(1)

        task = asyncio.ensure_future(ask())
        try:
            yield done
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)


@contextlib.asynccontextmanager
async def three_nodes() -> AsyncIterator[Hub]:
    procs = Procs(f"top-{os.getpid()}-{time.monotonic_ns() % 10**8}")
    try:
        async with zmesh.Node(procs.mesh, name="hub", discovery=False) as node:
            hub = Hub(node, procs)
            try:
                await hub.setup()
                yield hub
            finally:
                hub.release.set()
    finally:
        await asyncio.to_thread(procs.close)


def _text(view: dict[str, Any]) -> str:
    console = Console(record=True, width=220, file=io.StringIO())
    console.print(render(view))
    return console.export_text()


async def test_the_view_shows_nodes_agents_rates_inboxes_and_events() -> None:
    async with three_nodes() as hub:
        await hub.fill_slow()
        observer = zmesh.Node(hub.node.mesh, seeds=[hub.node.endpoint], discovery=False)
        async with observer:
            await observer.wait_until(lambda: {r.node_id for r in observer.registry.nodes()} >= NODES, 10, "nodes")
            await observer.wait_until(lambda: not observer.joining, 10, "the join")
            collector = TopCollector(observer, timeout=5)
            collector.watch(observer.events())
            try:
                await collector.snapshot()
                async with hub.traffic() as done:
                    await wait_for(lambda: len(done) >= 20, 10, "traffic to worker-1")
                    late = hub.node.agent("late")
                    visitor = zmesh.Node(hub.node.mesh, name="visitor", seeds=[hub.node.endpoint], discovery=False)
                    async with visitor:
                        await observer.wait_for_agents("late")
                        await observer.wait_until(lambda: "visitor" in observer.peers, 10, "the visitor")
                    await late.close()
                    await wait_for(lambda: {e["kind"] for e in collector.events} >= {
                        "agent_joined", "agent_left", "peer_joined", "peer_left"}, 10, "the events")
                    view = await collector.snapshot()
            finally:
                await collector.close()
    rows = {a["agent_id"]: a for a in view["agents"]}
    assert {n["node_id"] for n in view["nodes"]} == NODES and set(rows) == AGENTS
    assert all(n["answered"] and n["rtt_ms"] > 0 and n["uptime"] > 0 for n in view["nodes"]), view["nodes"]
    assert rows["worker-1"]["handled_per_s"] > 0 and rows["worker-1"]["capabilities"] == ["worker"]
    slow = rows["slow"]
    figures = [slow[k] for k in ("running", "inbox", "inbox_size", "dropped", "dead_letters")]
    assert figures == [1, 2, 4, 7, 1], slow
    assert slow["subscriptions"] == ["ev.*"]

    text = _text(view)
    lines = text.splitlines()
    for node_id in NODES:
        assert any(line.split()[:1] == [node_id] and " ok" in line for line in lines), text
    slow_line = next(line for line in lines if line.split()[:2] == ["slow", "hub"])
    assert slow_line.split()[2:10] == ["slowness", "ev.*", "0.0/s", "2", "1/1", "2/4", "7", "1"], slow_line
    # Its services figures, as `zmesh services` has them: one request, which failed, and its average time.
    assert (slow["requests"], slow["errors"]) == (1, 1) and slow["average_ms"] >= 0, slow
    assert slow_line.split()[10:13] == ["1", "1", f"{slow['average_ms']:.1f}"] and slow_line.rstrip().endswith(" ms"), slow_line
    worker = rows["worker-1"]
    assert worker["requests"] >= 20 and worker["errors"] == 0 and worker["average_ms"] > 0, worker
    assert rows["driver"]["requests"] == 0 and rows["driver"]["average_ms"] is None
    worker_line = next(line for line in lines if line.split()[:1] == ["worker-1"])
    assert re.search(r" (\d+\.\d)/s ", worker_line) and " 0.0/s " not in worker_line, worker_line
    assert "ms" in text and "Events since top joined" in text
    for kind, who in (("agent_joined", "late"), ("agent_left", "late"), ("peer_joined", "visitor"),
                      ("peer_left", "visitor")):
        assert any(kind in line and who in line for line in lines), text


async def test_once_json_shows_the_mesh_with_rates() -> None:
    async with three_nodes() as hub:
        await hub.fill_slow()
        async with hub.traffic():
            code, out, err = await run_zmesh("top", *hub.seed, "--once", "--json", "--interval", "0.5")
    assert code == 0, err
    assert out.count("\n") == 1
    view = json.loads(out)
    assert view["mesh"] == hub.node.mesh and view["observer"].startswith(CLI_NODE_PREFIX)
    nodes = {n["node_id"]: n for n in view["nodes"]}
    agents = {a["agent_id"]: a for a in view["agents"]}
    assert set(nodes) == NODES and set(agents) == AGENTS
    assert nodes["hub"]["endpoint"] == hub.node.endpoint and nodes["hub"]["incarnation"] == hub.node.incarnation
    assert all(n["answered"] and n["rtt_ms"] > 0 for n in nodes.values())
    assert agents["worker-1"]["handled_per_s"] > 0 and nodes["worker-1-node"]["handled_per_s"] > 0
    assert nodes["hub"]["sent_per_s"] > 0  # the driver's requests
    assert (agents["slow"]["inbox"], agents["slow"]["dropped"], agents["slow"]["dead_letters"]) == (2, 7, 1)
    assert isinstance(view["events"], list)



# -- CLI probe nodes: folded, marked -------------------------------------------------------------


async def test_cli_probe_nodes_fold_into_one_line_and_are_marked() -> None:
    mesh = f"top-probes-{os.getpid()}-{os.urandom(3).hex()}"
    async with zmesh.Node(mesh, name="hub", discovery=False) as hub:
        hub.agent("b").add_handler("note", lambda msg: None)
        seed = ["--mesh", mesh, "--seed", hub.endpoint]
        observer = zmesh.Node(mesh, name=cli_node_name(), seeds=[hub.endpoint], discovery=False)  # as top's
        async with observer:
            await observer.wait_until(lambda: "hub" in observer.peers and not observer.joining, 10, "the hub")
            collector = TopCollector(observer, timeout=5)
            collector.watch(observer.events())
            try:
                for command in (["peers"], ["send", "b", "note", "1"]):  # 2 and 4 events
                    code, _, err = await run_zmesh(command[0], *seed, *command[1:])
                    assert code == 0, err
                hub.agent("late")  # an event of a node that is no probe: it stays one
                await wait_for(lambda: collector.probes["went"] == 2 and any(
                    e["agent_id"] == "late" for e in collector.events), 10, "the commands to come and go")
                async with CliProcess("sub", *seed, "x.>") as sub:  # a probe node that stays
                    await wait_for(lambda: any(is_cli_probe(r.node_id) and r.node_id != observer.id
                                               for r in observer.registry.nodes()), 15, "the sub's node")
                    view = await collector.snapshot()
                assert sub.err == []
            finally:
                await collector.close()
    assert [(e["kind"], e["node_id"], e["agent_id"]) for e in view["events"]] == [("agent_joined", "hub", "late")]
    assert {k: view["cli_probes"][k] for k in ("came", "went", "here")} == {"came": 3, "went": 2, "here": 1}
    assert isinstance(view["cli_probes"]["last"], float)
    marks = {n["node_id"]: n["cli_probe"] for n in view["nodes"]}
    probe = next(node_id for node_id in marks if node_id != "hub")
    assert marks == {"hub": False, probe: True} and is_cli_probe(probe)

    lines = _text(view).splitlines()
    assert any(f"{CLI_NODE_PREFIX}*" in line and "CLI probe nodes: 3 came, 2 went (folded)" in line
               for line in lines), lines
    assert any(line.split()[:3] == [probe, "(cli", "probe)"] for line in lines), lines
    assert any("1 nodes (+1 CLI probe), " in line for line in lines), lines
    assert not any(kind in line and CLI_NODE_PREFIX in line for line in lines
                   for kind in ("peer_joined", "peer_left", "agent_joined", "agent_left")), lines


def test_the_folded_line_says_came_and_went_when_they_match() -> None:
    assert probes_line({"came": 3, "went": 3}) == "3 CLI probe nodes came and went"
    assert probes_line({"came": 1, "went": 1}) == "1 CLI probe node came and went"
    assert probes_line({"came": 0, "went": 1}) == "CLI probe nodes: 0 came, 1 went"
    assert probes_line({"came": 0, "went": 0}) == "" and probes_line({}) == ""


async def test_top_json_counts_other_commands_probe_nodes_not_its_own() -> None:
    mesh = f"top-self-{os.getpid()}-{os.urandom(3).hex()}"
    async with zmesh.Node(mesh, name="hub", discovery=False) as hub:
        hub.agent("b")
        seed = ["--mesh", mesh, "--seed", hub.endpoint]
        async with CliProcess("top", *seed, "--json", "--interval", "0.1") as top:
            await top.wait_for_output(lambda out: bool(out), 15, "top's first view")
            for _ in range(2):
                code, _, err = await run_zmesh("peers", *seed)
                assert code == 0, err

            def went_twice(out: list[str]) -> bool:
                return any(json.loads(line)["cli_probes"]["went"] >= 2 for line in out)

            await top.wait_for_output(went_twice, 15, "both commands to come and go")
            view = next(v for v in map(json.loads, top.out) if v["cli_probes"]["went"] >= 2)
    assert is_cli_probe(view["observer"])
    assert {k: view["cli_probes"][k] for k in ("came", "went", "here")} == {"came": 2, "went": 2, "here": 0}
    assert [n["node_id"] for n in view["nodes"]] == ["hub"]
    assert not any(is_cli_probe(e["node_id"]) for e in view["events"]), view["events"]

# -- the live view, on a pseudo-terminal ---------------------------------------------------------

# The child becomes a session leader with the pty as its controlling terminal,
# so Ctrl-C typed into the pty is a SIGINT to it, as in a real terminal.
_AS_TERMINAL = ("import fcntl, os, sys, termios; os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                "os.execv(sys.executable, [sys.executable] + sys.argv[1:])")
_ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|[()][0-9A-Za-z]|[=>78])")


class PtyTop:
    """``zmesh top ARGS`` on a pseudo-terminal of 60 x 220; ``screen`` is all it drew, as text."""

    def __init__(self, *args: str) -> None:
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 220, 0, 0))
        self.cooked = termios.tcgetattr(self.slave)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _AS_TERMINAL, *ZMESH[1:], "top", *args], cwd=ROOT,
            env={**cli_env(), "TERM": "xterm-256color"}, stdin=self.slave, stdout=self.slave, stderr=self.slave,
        )
        self.raw = b""
        os.set_blocking(self.master, False)
        asyncio.get_running_loop().add_reader(self.master, self._read)

    def _read(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self.raw += os.read(self.master, 65536)

    @property
    def screen(self) -> str:
        return _ANSI.sub("", self.raw.decode(errors="replace"))

    async def wait_for_screen(self, predicate: Callable[[str], bool], what: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.screen):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no {what} (exit {self.proc.poll()}); screen:\n{self.screen[-3000:]}")
            await asyncio.sleep(0.02)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    async def exit_code(self, timeout: float = 15) -> int:
        code = await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout)
        self._read()
        return code

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.master)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


# slow's row: capabilities, subscriptions, rate, handled, running, inbox, dropped, dead letters.
_SLOW_ROW = re.compile(r"slow +hub +slowness +ev\.\* +\d+\.\d/s +2 +1/1 +2/4 +7 +1 ")
# worker-1's node: endpoint, incarnation, up time, RTT.
_WORKER_NODE_ROW = re.compile(r"worker-1-node +tcp://127\.0\.0\.1:\d+ +[0-9a-f]{22} +\d+s +\d+\.\d ms ")


def _shows_the_mesh(screen: str) -> bool:
    return (all(name in screen for name in NODES | AGENTS) and _SLOW_ROW.search(screen) is not None
            and _WORKER_NODE_ROW.search(screen) is not None and "Events since top joined" in screen)


@pytest.mark.parametrize("key, code, last_words", [(b"q", 0, ""), (b"\x03", 130, "zmesh top: interrupted (SIGINT)")])
async def test_the_live_view_draws_the_mesh_and_quits_on_q_or_ctrl_c(key: bytes, code: int, last_words: str) -> None:
    async with three_nodes() as hub:
        await hub.fill_slow()
        top = PtyTop(*hub.seed, "--interval", "0.2")
        try:
            await top.wait_for_screen(_shows_the_mesh, "view of the mesh")
            hub.node.agent("late")  # an event, seen live
            await top.wait_for_screen(lambda s: re.search(r"agent_joined +hub +late", s) is not None, "event")
            assert "q quits" in top.screen
            top.type(key)
            assert await top.exit_code() == code, top.screen[-2000:]
            last_line = top.screen.rstrip().splitlines()[-1].strip()
            if last_words:
                assert last_line == last_words, top.screen[-2000:]
            assert "interrupted" not in top.screen.replace(last_words, "") and "Traceback" not in top.screen
            restored = termios.tcgetattr(top.slave)
            assert restored[3] & (termios.ICANON | termios.ECHO) == top.cooked[3] & (termios.ICANON | termios.ECHO)
            await wait_for(lambda: not any(p.startswith(CLI_NODE_PREFIX) for p in hub.node.peers), 5,
                           "top's goodbye")
        finally:
            top.close()


async def test_q_on_a_pipe_ends_the_batch_view() -> None:
    """Not a terminal: one view after another, as ``top -b`` prints them; ``q`` on stdin still quits."""
    async with three_nodes() as hub:
        proc = await asyncio.create_subprocess_exec(
            *ZMESH, "top", *hub.seed, "--interval", "0.2", cwd=ROOT, env=cli_env(),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            seen = ""
            while seen.count("Agents") < 2:  # two views, one after the other
                seen += (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
            assert all(name in seen for name in NODES | AGENTS) and "\x1b[" not in seen
            proc.stdin.write(b"q\n")
            await proc.stdin.drain()
            assert await asyncio.wait_for(proc.wait(), 15) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_without_rich_top_says_how_to_install_it_and_json_still_works() -> None:
    no_rich = ("import sys; sys.modules['rich'] = None; from zmesh._tools.cli.main import main; "
               "raise SystemExit(main(sys.argv[1:]))")
    async with zmesh.Node(f"norich-{os.getpid()}", discovery=False) as node:
        node.agent("b")
        seed = ["--mesh", node.mesh, "--seed", node.endpoint]

        async def run(*args: str) -> tuple[int, str, str]:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", no_rich, "top", *seed, *args, cwd=ROOT, env=cli_env(),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode is not None
            return proc.returncode, out.decode(), err.decode()

        code, out, err = await run()
        assert code == 2 and out == "", (out, err)
        assert err.count("\n") == 1 and "pip install 'zmesh-agents[top]'" in err and "--json" in err, err
        assert node.peers == []  # it said so before joining anything

        code, out, err = await run("--once", "--json", "--interval", "0.1")
        assert code == 0, err
        assert [a["agent_id"] for a in json.loads(out)["agents"]] == ["b"]



def test_a_narrow_terminal_keeps_the_numbers_and_drops_long_identifiers() -> None:
    node = {"node_id": "worker-node-1", "endpoint": "tcp://127.0.0.1:45678", "incarnation": "18ed08e57e9a8528c41eb0",
            "uptime": 12.0, "rtt_ms": 0.4, "peers": 2, "agents": 3, "handled_per_s": 10.0, "sent_per_s": 5.0,
            "pending_requests": 0, "dropped_total": 0, "dead_letters": 1, "answered": True, "error": None}
    agent = {"agent_id": "researcher", "node_id": "worker-node-1", "capabilities": ["search", "summarise"],
             "subscriptions": ["news.>"], "handled_per_s": 2.5, "handled": 40, "running": 1, "concurrency": 16,
             "inbox": 3, "inbox_size": 16384, "dropped": 0, "dead_letters": 0, "requests": 40, "errors": 2,
             "average_ms": 812.25}
    view = {"mesh": "lab", "observer": "top-1", "time": 0.0, "nodes": [node], "agents": [agent], "events": []}

    def text(width: int) -> str:
        console = Console(record=True, width=width, file=io.StringIO())
        console.print(render(view, width=width))
        return console.export_text()

    wide, narrow = text(220), text(80)
    assert "INCARNATION" in wide and "18ed08e57e9a8528c41eb0" in wide
    assert "INCARNATION" not in narrow
    assert "REQUESTS" in wide and "812.2 ms" in wide
    assert "812.2 ms" in text(100) and "REQUESTS" not in text(100)  # the average outlasts the counts
    for column in ("UP", "RTT", "HANDLED", "PENDING", "DROPPED", "DEAD", "RATE", "RUNNING", "INBOX", "STATUS"):
        assert column in narrow, (column, narrow)
    assert "3/16384" in narrow and "10.0/s" in narrow and "…" not in narrow, narrow  # whole values, not cut off
