"""The file transport: the seed's FileBroker layout on disk, the seed's own
FileBroker code (tests/_seed_file_broker.py, in another process) talking to
zmesh agents both ways, QoS 1 files that outlive a killed node, torn and
malformed files, polling where inotify is not used (the shared semantics
are test_conformance's, as ``file``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import zmesh
from zmesh.transport.file import FileTransport

from .helpers import rest_of_output, wait_for

pytestmark = pytest.mark.timeout(60)

HERE = Path(__file__).resolve().parent

#: The seed design's example envelope, exactly as 000_* writes it (less its comments).
SEED_ENVELOPE: dict[str, Any] = {
    "header": {
        "msg_id": "msg_20260512_001", "type": "task", "version": "1.0", "sender": "agent_main",
        "sender_type": "orchestrator", "target": "agent_sub_search", "target_type": "worker",
        "topic": "research.paper.search", "priority": 3, "qos": 1, "timestamp": "2026-05-12T10:30:00Z",
        "ttl": 300, "correlation_id": "task_0817", "reply_to": "agent_main/result",
    },
    "payload": {"action": "search_papers", "query": "transformer architecture 2025", "max_results": 10},
}


def seed(bus: Path, *commands: list[Any]) -> list[Any]:
    """Run the seed's FileBroker on ``bus`` in another process; what its consume calls returned."""
    script = bus.parent / f"commands-{time.monotonic_ns()}.json"
    script.write_text(json.dumps(commands))
    out = subprocess.run([sys.executable, str(HERE / "_seed_file_broker.py"), str(bus), str(script)],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


async def consumed(bus: Path, agent: str, count: int, within: float = 10.0) -> list[Any]:
    """What the seed's consume(agent) returns, polled until ``count`` envelopes came."""
    got: list[Any] = []
    deadline = time.monotonic() + within
    loop = asyncio.get_running_loop()
    while len(got) < count:
        assert time.monotonic() < deadline, f"the seed's consume({agent!r}) got {len(got)} of {count}"
        got += (await loop.run_in_executor(None, seed, bus, ["consume", agent]))[0]
        if len(got) < count:
            await asyncio.sleep(0.05)
    return got


async def test_the_layout_on_disk_is_the_seeds(tmp_path: Path) -> None:
    bus = tmp_path / "bus"
    async with zmesh.Node("lab", transport=bus.as_uri()) as node:
        worker = node.agent("worker")
        await worker.subscribe("news.*", lambda msg: None)
        await node.settled()
        assert (bus / "agents" / "worker" / "inbox").is_dir()
        record = json.loads((bus / "agents" / "worker.json").read_text())
        assert record["agent_id"] == "worker" and record["node"] == node.id
        assert (bus / "nodes" / f"{node.id}.record").is_file()
        subscription = bus / "agents" / f"zmesh.node.{node.id}" / "subscriptions" / "news_*"
        assert subscription.read_text() == "news.*"  # the seed's subscription file: the topic, '.' as '_'
        assert (bus / "topics").is_dir()
    assert not (bus / "agents" / "worker.json").exists()  # gone with its node
    assert not (bus / "nodes" / f"{node.id}.record").exists()


async def test_the_seeds_file_broker_and_zmesh_agents_talk_both_ways(tmp_path: Path) -> None:
    bus = tmp_path / "bus"
    loop = asyncio.get_running_loop()
    async with zmesh.Node("lab", transport=bus.as_uri()) as node:
        planner = node.agent("planner")
        heard: list[zmesh.Message] = []
        await planner.subscribe("research.paper.search", heard.append, inline=True)
        searcher = node.agent("agent_sub_search")
        tasks: list[zmesh.Message] = []
        searcher.add_handler("research.paper.search", tasks.append, inline=True)
        await node.settled()
        await loop.run_in_executor(None, seed, bus, ["subscribe", "agent_sub", "research.paper"])
        # zmesh -> seed: a broadcast reaches the seed's subscriber; a send reaches its inbox
        await wait_for(lambda: node.transport.reaches("agent_sub"), 5, "the seed agent's folder")
        assert await planner.broadcast("research.paper", {"found": 3}) >= 0
        await planner.send("agent_sub", "research.paper", {"direct": True})
        envelopes = await consumed(bus, "agent_sub", 2)
        assert sorted(json.dumps(e["payload"]) for e in envelopes) == ['{"direct": true}', '{"found": 3}']
        assert {e["header"]["sender"] for e in envelopes} == {"planner"}
        assert all(e["header"]["version"] == "1.0" for e in envelopes)
        # seed -> zmesh: its own example envelope, published as it publishes, reaches its target;
        # one with no target reaches the topic's subscribers
        # (stamped now: the example's 2026-05-12 with its ttl of 300 s would be dead-lettered "expired")
        example = {**SEED_ENVELOPE, "header": {**SEED_ENVELOPE["header"],
                                               "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}
        untargeted = {"header": {**example["header"], "msg_id": "msg_2", "target": "", "qos": 0,
                                 "correlation_id": ""}, "payload": {"n": 2}}
        await loop.run_in_executor(None, seed, bus, ["publish", "research.paper.search", example],
                                   ["publish", "research.paper.search", untargeted])
        await wait_for(lambda: tasks and heard, 10, "the seed's envelopes at the zmesh agents")
        task = tasks[0]
        assert (task.id, task.type, task.sender, task.sender_type, task.correlation_id, task.reply_to) == (
            "msg_20260512_001", "task", "agent_main", "orchestrator", "task_0817", "agent_main/result")
        assert task.payload == SEED_ENVELOPE["payload"] and task.qos == 1
        assert [h.payload for h in heard] == [{"n": 2}]
        assert not list((bus / "topics").rglob("*.envelope*"))  # routed once, and deleted
        assert node.dead_letters.total == 0


async def test_the_seeds_own_route_delivers_to_a_zmesh_subscriber(tmp_path: Path) -> None:
    bus = tmp_path / "bus"
    loop = asyncio.get_running_loop()
    node = zmesh.Node("lab", transport=FileTransport(bus, topic_poll=30.0))  # zmesh does not route here
    async with node:
        heard: list[zmesh.Message] = []
        await node.agent("planner").subscribe("jobs.done", heard.append, inline=True)
        await node.settled()
        envelope = {"header": {"msg_id": "m7", "type": "notify", "topic": "jobs.done", "sender": "old"},
                    "payload": "done"}
        await loop.run_in_executor(None, seed, bus, ["publish", "jobs.done", envelope], ["route"])
        await wait_for(lambda: heard, 10, "the seed's route() into the node's inbox")
        assert (heard[0].payload, heard[0].sender, heard[0].topic) == ("done", "old", "jobs.done")


def _child(bus: Path, block: bool) -> subprocess.Popen[str]:
    code = (
        "import asyncio, sys, zmesh\n"
        "async def main():\n"
        f"    async with zmesh.Node('lab', transport={bus.as_uri()!r}) as node:\n"
        "        async def job(msg):\n"
        f"            if {block}: await asyncio.Event().wait()\n"
        "            print(msg.payload, flush=True)\n"
        "        node.agent('rx', concurrency=1).add_handler('job', job)\n"
        "        print('ready', flush=True)\n"
        "        await asyncio.Event().wait()\n"
        "asyncio.run(main())\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


@pytest.mark.multiprocess
async def test_qos_1_files_outlive_a_killed_node_and_go_to_the_agents_next_host(tmp_path: Path) -> None:
    bus = tmp_path / "bus"
    loop = asyncio.get_running_loop()
    first = await loop.run_in_executor(None, _child, bus, True)  # its handler never ends
    second = None
    try:
        async with zmesh.Node("lab", transport=FileTransport(bus, expiry=30.0)) as node:
            await node.wait_for_agents("rx", timeout=10)
            tx = node.agent("tx")
            for n in range(5):
                await tx.send("rx", "job", n, qos=1)
            inbox = bus / "agents" / "rx" / "inbox"
            await wait_for(lambda: len(list(inbox.glob("*.envelope"))) == 5, 10, "five files in rx's inbox")
            first.kill()
            rest_of_output(first)
            assert len(list(inbox.glob("*.envelope"))) == 5  # held, not deleted: none was handled
            second = await loop.run_in_executor(None, _child, bus, False)
            await wait_for(lambda: not list(inbox.glob("*.envelope")), 20, "the next host to handle them")
            second.terminate()
            out = rest_of_output(second)
            assert sorted(int(line) for line in out.split()) == [0, 1, 2, 3, 4]
    finally:
        for child in (first, second):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait(10)


@pytest.mark.multiprocess
async def test_what_a_dead_node_left_is_cleared_but_not_its_agents_messages(tmp_path: Path) -> None:
    bus = tmp_path / "bus"
    loop = asyncio.get_running_loop()
    child = await loop.run_in_executor(None, _child, bus, True)
    try:
        async with zmesh.Node("lab", transport=FileTransport(bus, heartbeat=0.2, expiry=1.0)) as node:
            await node.wait_for_agents("rx", timeout=10)
            dead = next(r.node_id for r in node.registry.nodes() if r.node_id != node.id)
            await node.agent("tx").send("rx", "job", 1, qos=1)
            await node.agent("news").broadcast("x.y", 0)
            inbox = bus / "agents" / "rx" / "inbox"
            await wait_for(lambda: list(inbox.glob("*.envelope")), 10, "the message in rx's inbox")
            child.kill()
            rest_of_output(child)
            await wait_for(lambda: not (bus / "nodes" / f"{dead}.record").exists(), 10, "its record cleared")
            assert not (bus / "agents" / f"zmesh.node.{dead}").exists()  # no more broadcasts written there
            assert not (bus / "agents" / "rx.json").exists()
            assert len(list(inbox.glob("*.envelope"))) == 1  # kept for rx's next host
            await wait_for(lambda: "rx" not in node.registry.agents(), 10, "rx out of the registry")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


async def test_torn_and_malformed_files_are_waited_for_then_dropped_and_counted(tmp_path: Path) -> None:
    bus = tmp_path / "bus"
    async with zmesh.Node("lab", transport=bus.as_uri()) as node:
        got: list[zmesh.Message] = []
        node.agent("rx").add_handler("job", got.append, inline=True)
        await node.settled()
        inbox = bus / "agents" / "rx" / "inbox"
        torn = inbox / "msg_torn.envelope"
        whole = json.dumps({"header": {"msg_id": "torn", "topic": "job"}, "payload": "whole"})
        torn.write_text(whole[:20])  # a writer that does not rename, half done
        (inbox / "msg_zz.envelope").write_text(json.dumps({"header": {"msg_id": "zz", "topic": "job"},
                                                           "payload": "after"}))
        await wait_for(lambda: got, 10, "the envelope after it")  # so the node has looked at the half file
        assert torn.exists() and [g.payload for g in got] == ["after"]  # and left it
        torn.write_text(whole)
        await wait_for(lambda: len(got) == 2, 10, "the whole envelope")
        assert got[1].payload == "whole"
        (inbox / "msg_bad.envelope").write_text('{"header": {"msg_id": "b", "topic": "job", "qos": 9}}')
        old = time.time() - 10
        junk = inbox / "msg_junk.envelope"
        junk.write_text("not json")
        os.utime(junk, (old, old))  # not being written any more
        await wait_for(lambda: node.stats()["dropped"].get("malformed", 0) == 2, 10, "two dropped")
        await wait_for(lambda: not list(inbox.glob("*.envelope")), 5, "the dropped files deleted")
        assert len(got) == 2


async def test_polling_without_inotify_and_names_with_slashes(tmp_path: Path) -> None:
    bus = tmp_path / "bus"

    def transport() -> FileTransport:
        return FileTransport(bus, use_inotify=False, poll=0.02)

    async with zmesh.Node("lab", transport=transport()) as n1, zmesh.Node("lab", transport=transport()) as n2:
        n2.agent("team/alpha").add_handler("add", lambda msg: msg.payload + 1)
        await n1.wait_for_agents("team/alpha", timeout=10)
        assert (bus / "agents" / "team%2Falpha" / "inbox").is_dir()
        started = time.monotonic()
        assert (await n1.agent("a").request("team/alpha", "add", 41, timeout=5)).payload == 42
        assert time.monotonic() - started < 2


def test_urls_and_options_are_checked(tmp_path: Path) -> None:
    assert FileTransport(f"file://{tmp_path}/bus").root == tmp_path / "bus"
    assert FileTransport(tmp_path / "bus").root == tmp_path / "bus"
    with pytest.raises(zmesh.TransportError, match="on this host"):
        FileTransport("file://otherhost/bus")
    for bad in ({"heartbeat": 0}, {"expiry": 0.5}, {"poll": 0}, {"topic_poll": -1}):
        with pytest.raises(ValueError):
            FileTransport(tmp_path, **bad)  # type: ignore[arg-type]
    assert zmesh.Node("m", transport=(tmp_path / "bus").as_uri()).transport.name == "file"


async def test_a_bus_directory_that_cannot_be_made_is_a_transport_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a directory")
    with pytest.raises(zmesh.TransportError, match="cannot use"):
        async with zmesh.Node("m", transport=FileTransport(blocker / "bus")):
            pass
