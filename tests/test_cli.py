"""The zmesh command: peers, send, request, sub against a live node; payloads and output.

Signals are in test_cli_signals.py, the demo in test_cli_demo.py.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

import zmesh
from tests.cli_process import CliProcess, run_zmesh
from tests.helpers import wait_for
from tests.test_fixed_port import free_port
from zmesh._tools.cli.commands import CLI_NODE_PREFIX, _refusal_hint, cli_node_name, is_cli_probe
from zmesh._tools.cli.json_output import PayloadError, dumps, parse_payload
from zmesh._tools.cli.main import _parser, main
from zmesh.security import keygen

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


def _strict_loads(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in the output is not JSON: {text}")

    return json.loads(text, parse_constant=refuse)


def _mesh() -> str:
    return f"cli-{os.getpid()}-{os.urandom(3).hex()}"


async def test_peers_send_request_and_sub() -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        b = node.agent("b", capabilities=("echo",))
        got: list[object] = []
        b.add_handler("echo", lambda msg: {"echo": msg.payload, "from": msg.sender})
        b.add_handler("note", lambda msg: got.append(msg.payload))
        seed = ["--mesh", mesh, "--seed", node.endpoint]

        code, out, err = await run_zmesh("peers", *seed)
        assert code == 0, err
        assert "AGENT" in out and "b" in out.split() and "echo" in out

        code, out, err = await run_zmesh("request", *seed, "b", "echo", '{"x": 1}')
        assert code == 0, err
        reply = json.loads(out)
        assert reply["echo"] == {"x": 1} and reply["from"].startswith(CLI_NODE_PREFIX)

        code, out, err = await run_zmesh("send", *seed, "b", "note", '"hello"')
        assert code == 0, err
        await wait_for(lambda: got == ["hello"], 5, "the note")

        async with CliProcess("sub", *seed, "news.>", "--count", "1") as sub:
            await wait_for(lambda: node.registry.subscribers("news.today.x"), 15, "the cli subscriber")
            assert await b.broadcast("news.today.x", {"n": 1}) == 1
            assert await sub.finish() == 0, sub.err
        assert [json.loads(line) for line in sub.out] == [{"topic": "news.today.x", "sender": "b", "payload": {"n": 1}}]

        code, out, err = await run_zmesh("request", *seed, "nobody", "echo", "--null")
        assert code == 1 and "AgentNotRegistered" in err


async def test_no_mesh_to_join_is_a_clear_error() -> None:
    mesh = _mesh()  # a name no other run's probe nodes use: they would answer each other by mDNS
    code, out, err = await run_zmesh("peers", "--mesh", mesh, "--seed", "tcp://127.0.0.1:1", "--wait", "0.5")
    assert code == 1
    assert f"no member of mesh {mesh!r} answered" in err


async def test_a_mesh_name_node_refuses_is_a_usage_error_not_a_traceback() -> None:
    code, out, err = await run_zmesh("peers", "--mesh", "a|b", "--seed", "tcp://127.0.0.1:1")
    assert code == 2
    assert err.startswith("zmesh peers: error: mesh name must be") and "Traceback" not in err, err


async def test_port_binds_the_commands_node_on_that_port() -> None:
    mesh = _mesh()
    port = free_port()
    async with zmesh.Node(mesh, discovery=False) as node:
        def sender_endpoint(msg: zmesh.Message) -> str:
            record = node.registry.record(node.registry.node_of(msg.sender) or "")
            return record.router if record is not None else ""

        node.agent("b").add_handler("where", sender_endpoint)
        code, out, err = await run_zmesh(
            "request", "--mesh", mesh, "--seed", node.endpoint, "--port", str(port), "b", "where", "--null")
        assert code == 0, err
        assert json.loads(out) == f"tcp://127.0.0.1:{port}"


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
async def test_a_port_out_of_range_is_a_usage_error(port: str) -> None:
    code, out, err = await run_zmesh("peers", "--mesh", "m", "--port", port)
    assert code == 2 and "--port" in err and "Traceback" not in err, err


async def test_version_prints_the_package_version() -> None:
    code, out, _ = await run_zmesh("--version")
    assert code == 0
    assert out.strip() == f"zmesh {zmesh.__version__}"


# -- sub --count: exactly N -------------------------------------------------


async def test_sub_count_prints_exactly_n_of_a_burst() -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        b = node.agent("b")
        async with CliProcess("sub", "--mesh", mesh, "--seed", node.endpoint, "burst.>", "--count", "3") as sub:
            await wait_for(lambda: node.registry.subscribers("burst.x"), 15, "the cli subscriber")
            for n in range(10):
                assert await b.broadcast("burst.x", {"n": n}) == 1
            assert await sub.finish() == 0, sub.err
        assert [json.loads(line)["payload"] for line in sub.out] == [{"n": 0}, {"n": 1}, {"n": 2}]


@pytest.mark.parametrize("count", [1, 3])
async def test_sub_count_prints_exactly_n_of_a_trickle(count: int) -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        b = node.agent("b")
        async with CliProcess("sub", "--mesh", mesh, "--seed", node.endpoint, "tick", "--count", str(count)) as sub:
            await wait_for(lambda: node.registry.subscribers("tick"), 15, "the cli subscriber")
            n = 0
            while not sub.exited and n < 200:  # keep ticking while it closes: later ticks must not print
                await b.broadcast("tick", n)
                n += 1
                await asyncio.sleep(0.05)  # the pace of the trickle, 20 a second
            assert await sub.finish() == 0, sub.err
        assert [json.loads(line)["payload"] for line in sub.out] == list(range(count))


# -- payloads: strict JSON in, strict JSON out ------------------------------


@pytest.mark.parametrize("command", ["request", "send"])
@pytest.mark.parametrize("payload, where", [('{"x": 1, "y": }', "line 1 column 15 (char 14)"), ('{"x": NaN}', "NaN")])
async def test_a_payload_that_is_not_json_is_a_usage_error_and_never_sent(command: str, payload: str, where: str) -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        b = node.agent("b")
        got: list[object] = []
        b.add_handler("math.add", lambda msg: got.append(msg.payload))
        code, out, err = await run_zmesh(command, "--mesh", mesh, "--seed", node.endpoint, "b", "math.add", payload)
        assert code == 2, (out, err)
        assert err.count("\n") == 1 and where in err and "--raw" in err, err
        assert out == "" and got == [] and node.peers == []  # it never joined, so nothing was sent


@pytest.mark.parametrize("command, topic", [("request", "bad topic"), ("send", "news.*"), ("sub", "a.>b")])
async def test_a_bad_topic_is_a_usage_error(command: str, topic: str) -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        b = node.agent("b")
        got: list[object] = []
        b.add_handler("echo", lambda msg: got.append(msg.payload))
        args = [topic] if command == "sub" else ["b", topic, "1"]
        code, out, err = await run_zmesh(command, "--mesh", mesh, "--seed", node.endpoint, *args)
        assert code == 2, (out, err)  # the guide: 2 is a usage error, nothing was sent
        assert err.count("\n") == 1 and ("topic" in err or "pattern" in err), err
        assert got == []


async def test_a_seed_that_never_answers_is_a_warning_not_silence() -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        node.agent("b")
        dead = f"tcp://127.0.0.1:{free_port()}"  # nobody listens there
        code, out, err = await run_zmesh("peers", "--mesh", mesh, "--seed", node.endpoint, "--seed", dead,
                                         "--wait", "1")
        assert code == 0, err
        assert node.id in out
        assert "warning: not every seed or member" in err and "--seed" in err, err


async def test_raw_sends_the_argument_as_a_plain_string() -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        node.agent("b").add_handler("echo", lambda msg: msg.payload)
        code, out, err = await run_zmesh(
            "request", "--mesh", mesh, "--seed", node.endpoint, "b", "echo", "--raw", '{"x": 1, "y": }')
        assert code == 0, err
        assert json.loads(out) == '{"x": 1, "y": }'


async def test_output_is_strict_json_even_for_nan_and_infinity() -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        node.agent("b").add_handler(
            "floats", lambda msg: {"nan": math.nan, "up": math.inf, "down": [-math.inf, 1.5]})
        code, out, err = await run_zmesh("request", "--mesh", mesh, "--seed", node.endpoint, "b", "floats", "--null")
        assert code == 0, err
        assert _strict_loads(out) == {"nan": "NaN", "up": "Infinity", "down": ["-Infinity", 1.5]}


def test_dumps_is_strict_json_for_what_json_cannot_hold() -> None:
    value = {"f": [math.nan, math.inf, -math.inf, 0.5], 1: "int key", math.nan: "nan key", "b": b"\x00",
             "t": (1, 2), None: True}
    assert _strict_loads(dumps(value)) == {
        "f": ["NaN", "Infinity", "-Infinity", 0.5], "1": "int key", "NaN": "nan key", "b": "b'\\x00'",
        "t": [1, 2], "null": True,
    }


def test_dumps_writes_datetimes_as_iso_8601() -> None:
    when = datetime.datetime(2024, 5, 1, 12, 30, 5, 250, tzinfo=datetime.timezone.utc)
    value = {"at": when, "day": datetime.date(2024, 5, 1), "times": [when]}
    assert _strict_loads(dumps(value)) == {
        "at": "2024-05-01T12:30:05.000250+00:00", "day": "2024-05-01", "times": ["2024-05-01T12:30:05.000250+00:00"],
    }


async def test_request_prints_a_timestamp_as_iso_8601() -> None:
    mesh = _mesh()
    when = datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    async with zmesh.Node(mesh, discovery=False) as node:
        node.agent("b").add_handler("when", lambda msg: {"at": when})
        code, out, err = await run_zmesh("request", "--mesh", mesh, "--seed", node.endpoint, "b", "when", "--null")
        assert code == 0, err
        assert _strict_loads(out) == {"at": "2024-05-01T10:30:00+00:00"}  # the same instant, in UTC
        assert datetime.datetime.fromisoformat(_strict_loads(out)["at"]) == when


def test_parse_payload_names_the_position_and_refuses_constants() -> None:
    assert parse_payload('{"x": [1, "two", null]}') == {"x": [1, "two", None]}
    assert parse_payload(None) is None
    with pytest.raises(PayloadError, match=r"line 1 column 15 \(char 14\)"):
        parse_payload('{"x": 1, "y": }')
    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(PayloadError, match="not a JSON value"):
            parse_payload(f"[{constant}]")


def test_the_request_timeout_default_is_the_python_apis() -> None:
    python_default = inspect.signature(zmesh.Agent.request).parameters["timeout"].default
    parser, _ = _parser()
    assert parser.parse_args(["request", "b", "topic"]).timeout == python_default


# -- joining: a refusal stops at once ----------------------------------------


async def test_a_mesh_name_mismatch_stops_at_once_and_names_the_mesh_that_answered() -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        code, out, err = await run_zmesh(
            "peers", "--mesh", mesh.upper(), "--seed", node.endpoint, "--wait", "30", timeout=15)
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert "mesh names differ" in last and f"this node used {mesh.upper()!r}" in last, err
    assert last.endswith(f"to join that mesh, pass --mesh {mesh}"), err
    assert "check --seed" not in err
    assert len(err.strip().splitlines()) == 1, err  # the explanation, not also the library's log line


async def test_a_keyed_mesh_still_refuses_without_naming_itself(tmp_path: Path) -> None:
    trusted = tmp_path / "trusted"
    a_key, cli_key = keygen("a", trusted)[1], keygen("cli", trusted)[1]
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False, key=a_key, trusted=trusted) as node:
        code, out, err = await run_zmesh(
            "peers", "--mesh", mesh.upper(), "--seed", node.endpoint, "--key", str(cli_key), "--trusted",
            str(trusted), "--wait", "30", timeout=15)
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.endswith(f"refused this node: another mesh. The mesh names differ (they are case-sensitive): "
                         f"check --mesh (this node used {mesh.upper()!r})"), err
    assert mesh not in last


@pytest.mark.parametrize("reason, hint", [
    ("another mesh: 'lab'", "pass --mesh lab"),  # this version, keyless: the refusing node's mesh
    ("another mesh: 'a b'", "pass --mesh 'a b'"),  # quoted for the shell
    ("mesh 'Lab' is not 'lab'", "pass --mesh lab"),  # older versions: the stranger's name first
    ("mesh 'lab' is not 'Lab'", "pass --mesh lab"),  # this node refused the other's HELLO: its own name second
    ("another mesh", "check --mesh (this node used 'Lab')"),  # keyed, or a version in between: no name
])
def test_the_refusal_hint_names_the_other_mesh_whoever_refused(reason: str, hint: str) -> None:
    said = _refusal_hint("tcp://127.0.0.1:5555", reason, "Lab")
    assert said.startswith(f"tcp://127.0.0.1:5555 refused this node: {reason}. The mesh names differ"), said
    assert said.endswith(hint), said


def test_a_refusal_of_another_kind_gets_no_mesh_hint() -> None:
    said = _refusal_hint("tcp://127.0.0.1:5555", "another protocol version", "Lab")
    assert said == "tcp://127.0.0.1:5555 refused this node: another protocol version"


# -- usage errors: the subcommand's own usage ----------------------------------


_POSITIONALS = {"keygen": ["name"], "send": ["b", "topic", "1"], "request": ["b", "topic", "1"], "sub": ["news.>"],
                "services": ["summarize"],
                "ga-bridge": ["--root", "."], "gateway": ["--to", "nats://127.0.0.1:4222"]}


@pytest.mark.parametrize("command", sorted(_parser()[1]))
@pytest.mark.parametrize("bad", [["--bogus"], ["--bogus=1", "extra"]])
def test_a_bad_flag_prints_the_subcommands_own_usage(
    command: str, bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main([command, *_POSITIONALS.get(command, []), *bad])
    out, err = capsys.readouterr()
    assert exit.value.code == 2 and out == ""
    assert err.startswith(f"usage: zmesh {command} "), err
    assert err.rstrip().endswith(f"zmesh {command}: error: unrecognized arguments: {' '.join(bad)}"), err


def test_a_bad_flag_before_the_subcommand_prints_the_top_level_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["--bogus", "peers"])
    out, err = capsys.readouterr()
    assert exit.value.code == 2 and out == ""
    assert err.startswith("usage: zmesh [-h]"), err
    assert err.rstrip().endswith("zmesh: error: unrecognized arguments: --bogus"), err


# -- what each command prints: JSON -------------------------------------------


_PROBE_NAME = re.compile(rf"{re.escape(CLI_NODE_PREFIX)}\d+-[0-9a-f]{{4}}")


async def test_peers_json_is_the_registry_and_marks_cli_probe_nodes() -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        b = node.agent("b", capabilities=("echo", "math"))
        await b.subscribe("news.>", lambda msg: None)
        node.agent("a")
        seed = ["--mesh", mesh, "--seed", node.endpoint]
        async with CliProcess("sub", *seed, "never.>") as sub:  # a probe node that stays while peers looks
            await wait_for(lambda: any(_PROBE_NAME.fullmatch(p) for p in node.peers), 15, "the sub's node")
            probe = next(p for p in node.peers if _PROBE_NAME.fullmatch(p))

            code, out, err = await run_zmesh("peers", *seed, "--json")
            assert code == 0, err
            assert out.count("\n") == 1
            view = _strict_loads(out)
            code, table, err = await run_zmesh("peers", *seed)
            assert code == 0, err
        assert sub.err == []
    assert view["mesh"] == mesh
    nodes = {n["node_id"]: n for n in view["nodes"]}
    assert set(nodes) == {node.id, probe}  # not the peers command's own node
    assert nodes[node.id] == {
        "node_id": node.id, "endpoint": node.endpoint, "incarnation": node.incarnation, "cli_probe": False,
        "agents": [{"agent_id": "a", "capabilities": [], "subscriptions": []},
                   {"agent_id": "b", "capabilities": ["echo", "math"], "subscriptions": ["news.>"]}],
    }
    assert nodes[probe]["cli_probe"] is True
    assert nodes[probe]["agents"] == [{"agent_id": probe, "capabilities": [], "subscriptions": ["never.>"]}]
    probe_line = next(line for line in table.splitlines() if line.startswith(probe))
    assert probe_line.startswith(f"{probe} (cli probe) "), table
    node_line = next(line for line in table.splitlines() if line.startswith(node.id))
    assert "(cli probe)" not in node_line, table


async def test_send_prints_one_json_object_and_every_printing_command_takes_json() -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        b = node.agent("b")
        got: list[zmesh.Message] = []
        b.add_handler("note", got.append)
        b.add_handler("echo", lambda msg: msg.payload)
        seed = ["--mesh", mesh, "--seed", node.endpoint]
        for flags in ([], ["--json"]):
            code, out, err = await run_zmesh("send", *seed, "b", "note", '"hello"', *flags)
            assert code == 0, err
            assert out.count("\n") == 1
            sent = _strict_loads(out)
            await wait_for(lambda: len(got) == 1, 5, "the note")
            msg = got.pop()
            assert sent == {"id": msg.id, "target": "b", "topic": "note"}
            assert _PROBE_NAME.fullmatch(msg.sender), msg.sender  # the probe node's name, its agent's too

        code, out, err = await run_zmesh("request", *seed, "b", "echo", '{"x": [1]}', "--json")
        assert code == 0, err
        assert _strict_loads(out) == {"x": [1]}
        async with CliProcess("sub", *seed, "news.>", "--count", "1", "--json") as sub:
            await wait_for(lambda: node.registry.subscribers("news.x"), 15, "the cli subscriber")
            assert await b.broadcast("news.x", 5) == 1
            assert await sub.finish() == 0, sub.err
        assert [_strict_loads(line)["payload"] for line in sub.out] == [5]


@pytest.mark.parametrize("command", ["", "peers", "send", "request", "sub", "services", "top"])
def test_the_help_says_what_json_each_command_prints(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"] if command else ["--help"])
    out = " ".join(capsys.readouterr().out.split())  # as one line: argparse wraps it
    assert exit.value.code == 0 and "--json" in out, out
    if not command:
        assert "peers prints a table (--json: the registry as one JSON object)" in out, out
        assert 'send prints {"id", "target", "topic"} as JSON' in out, out


def test_two_cli_nodes_of_one_process_have_two_names() -> None:
    names = {cli_node_name() for _ in range(20)}
    assert len(names) > 1 and all(_PROBE_NAME.fullmatch(n) and str(os.getpid()) in n for n in names), names
    assert all(is_cli_probe(n) for n in names) and not is_cli_probe("cli-4242") and not is_cli_probe("hub")


# -- a payload, or --null -----------------------------------------------------


@pytest.mark.parametrize("command", ["request", "send"])
async def test_no_payload_is_a_usage_error_that_says_how_to_send_none(command: str) -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        got: list[object] = []
        node.agent("b").add_handler("t", lambda msg: got.append(msg.payload))
        code, out, err = await run_zmesh(command, "--mesh", mesh, "--seed", node.endpoint, "b", "t")
        assert code == 2 and out == "", (out, err)
        assert err.startswith(f"usage: zmesh {command} "), err
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"zmesh {command}: error: no payload") and "--null" in last and "--raw" in last, err
        assert got == [] and node.peers == []  # it never joined


@pytest.mark.parametrize("command", ["request", "send"])
async def test_null_sends_null_and_goes_with_no_payload(command: str) -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        got: list[object] = []

        def handle(msg: zmesh.Message) -> str:
            got.append(msg.payload)
            return "got it"

        node.agent("b").add_handler("t", handle)
        seed = ["--mesh", mesh, "--seed", node.endpoint]
        code, out, err = await run_zmesh(command, *seed, "b", "t", "--null")
        assert code == 0, err
        await wait_for(lambda: got == [None], 5, "the null")
        if command == "request":
            assert _strict_loads(out) == "got it"
        for clash in (["1", "--null"], ["--raw", "x", "--null"], ["--null", "--raw", "x"]):
            code, out, err = await run_zmesh(command, *seed, "b", "t", *clash)
            assert code == 2 and "--null" in err, err
            assert re.search(r"error: argument \S+: not allowed with argument", err), err
        assert got == [None]


async def test_request_stream_prints_each_chunk_as_it_comes_and_an_error_after_them() -> None:
    mesh = _mesh()
    async with zmesh.Node(mesh, discovery=False) as node:
        writer = node.agent("writer")
        gate = asyncio.Event()

        @writer.on("draft")
        async def draft(msg: zmesh.Message) -> Any:
            yield {"token": "first"}
            await gate.wait()  # the first line is out before the second is made
            for word in msg.payload.split():
                yield {"token": word}

        @writer.on("flaky")
        async def flaky(msg: zmesh.Message) -> Any:
            yield "one"
            raise RuntimeError("the model went away")

        async with CliProcess("request", "--mesh", mesh, "--seed", node.endpoint, "writer", "draft",
                              '"hello streaming world"', "--stream") as cli:
            await cli.wait_for_output(lambda lines: len(lines) >= 1, 20, "the first chunk")
            gate.set()
            assert await cli.finish() == 0, cli.err
        assert [json.loads(line) for line in cli.out] == [
            {"token": "first"}, {"token": "hello"}, {"token": "streaming"}, {"token": "world"}]

        code, out, err = await run_zmesh("request", "--mesh", mesh, "--seed", node.endpoint, "writer", "flaky",
                                         "--null", "--stream")
        assert code == 1 and out.splitlines() == ['"one"'] and "the model went away" in err
