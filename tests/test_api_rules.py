"""The Python API's rules: what names and topics are accepted, the stats()
schema the guide documents, and a closed node staying closed."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

import zmesh

from .helpers import Mesh

pytestmark = pytest.mark.timeout(30)

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide.md"


# -- node.stats(): one schema, documented in one table -------------------------


def documented_stats_keys() -> set[str]:
    """The keys named in the first column of the guide's stats() table."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("`node.stats()` has every key below")
    keys: set[str] = set()
    in_table = False
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            in_table = True
            first = line.split("|")[1]
            keys |= set(re.findall(r"`([a-z_]+)`", first))
        elif in_table:
            break
    return keys


def test_the_guide_documents_exactly_the_keys_of_stats_on_a_fresh_node() -> None:
    documented = documented_stats_keys()
    assert "late_replies" in documented and "handler_errors" in documented  # the table was found
    for transport in ("inproc", "zmq"):
        stats = zmesh.Node("fresh", transport=transport, discovery=False).stats()
        assert set(stats) == documented, (transport, set(stats) ^ documented)
        assert stats["late_replies"] == 0 and stats["handler_errors"] == 0


def test_the_guide_names_no_stats_key_that_does_not_exist() -> None:
    keys = set(zmesh.Node("fresh", transport="inproc").stats())
    named = set(re.findall(r'stats\(\)\["([a-z_]+)"\]', GUIDE.read_text(encoding="utf-8")))
    assert named and named <= keys, named - keys


# -- names ---------------------------------------------------------------------

BAD_AGENT_IDS = ["", "has.dot", "has.dot*", "star*", "gt>", "has space", "tab\there", "line\nbreak", "nul\x00",
                 "bell\x07", "x" * 257]
GOOD_AGENT_IDS = ["a", "b1", "worker-control", "sink_0", "cli-4242", "A-node", "ns:agent", "path/like", "ünï",
                  "x" * 256]


async def test_agent_ids_follow_the_documented_rule(transport: str) -> None:
    async with Mesh(transport) as m:
        node = await m.node()
        for bad in BAD_AGENT_IDS:
            with pytest.raises(zmesh.InvalidMessage, match="agent id"):
                node.agent(bad)
        with pytest.raises(zmesh.InvalidMessage):
            node.agent(42)  # type: ignore[arg-type]
        assert node.agents == {}
        for good in GOOD_AGENT_IDS:
            assert node.agent(good).id == good


def test_an_empty_agent_id_is_a_zmesh_error() -> None:
    node = zmesh.Node("m", transport="inproc")
    with pytest.raises(zmesh.ZmeshError):
        node.agent("")


def test_node_and_mesh_names_are_printable_without_spaces() -> None:
    for bad in ("", "has space", "bar|bar", "ctl\x1b[31m", "x" * 65):
        with pytest.raises(zmesh.InvalidMessage, match="name"):
            zmesh.Node("m", name=bad, transport="inproc")
        with pytest.raises(zmesh.InvalidMessage, match="name"):
            zmesh.Node(bad, transport="inproc")
    assert zmesh.Node("lab.eu-1", name="host.example-4242-ab12", transport="inproc").id == "host.example-4242-ab12"


# -- topics and patterns -------------------------------------------------------------

BAD_TOPICS = {
    "a b": "space", " a": "space", "a\tb": "space", "a\x00b": "control", "a..b": "empty word", ".a": "empty word",
    "a.": "empty word", "a.b*": "whole words", "a.>b": "whole words", "a*b.c": "whole words",
}
BAD_PATTERNS = {**BAD_TOPICS, "a.>.b": "last word", ">.a": "last word", "**": "whole words", ">>": "whole words"}
GOOD_PATTERNS = ["a", "a.*", "a.>", "*", ">", "*.b", "a.*.c", "a.*.>", "math.add", "ünï.cödé", "a-b_c:d"]


async def test_bad_topics_are_refused_everywhere_with_a_clear_message(transport: str) -> None:
    async with Mesh(transport) as m:
        node = await m.node()
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("ok", lambda msg: msg.payload)
        for topic, why in BAD_TOPICS.items():
            with pytest.raises(zmesh.InvalidMessage, match=why):
                await a.send("b", topic)
            with pytest.raises(zmesh.InvalidMessage, match=why):
                await a.request("b", topic, timeout=5)
            with pytest.raises(zmesh.InvalidMessage, match=why):
                await a.broadcast(topic)
        for pattern, why in BAD_PATTERNS.items():
            with pytest.raises(zmesh.InvalidMessage, match=why):
                await a.subscribe(pattern)
            with pytest.raises(zmesh.InvalidMessage, match=why):
                a.on(pattern)
        for wildcard in ("a.*", "a.>", "*", ">"):
            with pytest.raises(zmesh.InvalidMessage, match="wildcard"):
                await a.send("b", wildcard)
        with pytest.raises(zmesh.InvalidMessage):
            await a.send("b", ["not", "a", "str"])  # type: ignore[arg-type]
        assert a.subscriptions == frozenset()
        for pattern in GOOD_PATTERNS:
            await a.subscribe(pattern)
        assert a.subscriptions == frozenset(GOOD_PATTERNS)
        assert (await a.request("b", "ok", "fine", timeout=5)).payload == "fine"


# -- lifecycle ---------------------------------------------------------------------


async def test_starting_a_closed_node_raises_node_closed(transport: str) -> None:
    async with Mesh(transport) as m:
        node = await m.node()
        await node.start()  # starting a started node: nothing happens
        await node.close()
        with pytest.raises(zmesh.NodeClosed, match="cannot be started again"):
            await node.start()
        with pytest.raises(zmesh.NodeClosed):
            async with node:
                pass
        never_started = zmesh.Node(m.name, transport=transport, discovery=False)
        await never_started.close()
        with pytest.raises(zmesh.NodeClosed):
            await never_started.start()


async def test_joining_is_true_until_every_member_heard_of_has_answered() -> None:
    async with Mesh("zmq") as m:
        seed, other = await m.node(), await m.node()
        await m.converged()
        alone = await m.node(seeds=[])
        assert not alone.joining  # nothing to knock on
        newcomer = await m.node()  # seeded with the first node only
        assert newcomer.joining  # from start(), before the seed has been knocked on
        await newcomer.wait_until(lambda: not newcomer.joining, 10, "the join")
        # The seed's HELLO named the other member: it has answered too.
        assert {seed.id, other.id} <= set(newcomer.peers)
        await newcomer.close()
        assert not newcomer.joining


async def test_joining_stays_true_while_a_seed_is_down() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with Mesh("zmq") as m:
        node = await m.node(seeds=[f"tcp://127.0.0.1:{port}"])
        with pytest.raises(zmesh.Timeout):
            await node.wait_until(lambda: not node.joining, 0.5, "a join that cannot happen")
        assert node.joining


def test_the_readme_error_tree_lists_every_zmesh_error_under_its_parent() -> None:
    import inspect as _inspect

    from zmesh import errors

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = text[text.index("## Errors"):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    tree: dict[str, str] = {}  # class name -> parent name, as the README draws it
    parents: list[str] = []
    for line in block.strip("\n").splitlines():
        name_at = re.search(r"[A-Z]\w+", line)
        assert name_at is not None, line
        depth = name_at.start() // 4
        del parents[depth:]
        tree[name_at.group(0)] = parents[-1] if parents else ""
        parents.append(name_at.group(0))
    public = {
        name: cls for name, cls in vars(errors).items()
        if _inspect.isclass(cls) and issubclass(cls, errors.ZmeshError) and name in zmesh.__all__
    }
    assert set(tree) == set(public), (sorted(set(public) - set(tree)), sorted(set(tree) - set(public)))
    for name, cls in public.items():
        parent = next((b.__name__ for b in cls.__mro__[1:] if b.__name__ in public), "")
        assert tree[name] == parent, (name, tree[name], parent)


def test_every_node_parameter_is_described_and_no_default_is_the_machines() -> None:
    import inspect as _inspect

    doc = zmesh.Node.__doc__ or ""
    params = list(_inspect.signature(zmesh.Node).parameters)
    undescribed = [p for p in params if f"``{p}``" not in doc]
    assert not undescribed, f"Node's docstring does not describe {undescribed}"
    # help(zmesh.Node) shows defaults as written in the signature: none may be
    # a figure computed from this machine (a thread count from os.cpu_count()).
    int_defaults = {name: p.default for name, p in _inspect.signature(zmesh.Node).parameters.items()
                    if type(p.default) is int}
    assert int_defaults == {"max_payload": 1 << 20, "dead_letter_capacity": 1024, "port": 0, "pub_port": 0}
    assert not hasattr(zmesh.Node, "on_discovered")  # an internal hook, not API


def test_a_zmesh_timeout_is_caught_as_either_timeout_error_on_every_python() -> None:
    import asyncio as _asyncio

    for catch in (TimeoutError, _asyncio.TimeoutError, zmesh.ZmeshError):
        try:
            raise zmesh.Timeout("no reply")
        except catch:  # on 3.10 asyncio.TimeoutError is not the built-in one
            pass


async def test_wait_for_agents_given_a_list_says_how_to_call_it() -> None:
    async with zmesh.Node("rules-wait", transport="inproc") as node:
        node.agent("a")
        with pytest.raises(zmesh.InvalidMessage, match=r"wait_for_agents\('a', 'b'\)"):
            await node.wait_for_agents(["a"], timeout=1)  # type: ignore[arg-type]
        await node.wait_for_agents("a", timeout=1)
