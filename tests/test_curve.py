"""Keyed meshes (CurveZMQ): who can join, read and speak, on 127.0.0.1.

Strangers are raw pyzmq sockets in a context of their own: a SUB or DEALER
with no CURVE at all, or with a key the mesh does not trust. Each
"cannot" is checked beside a control that can (a trusted raw socket), so a
test would notice the stranger getting through.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import msgpack
import pytest
import zmq

import zmesh
from zmesh import Message
from zmesh.security import keygen, load_key
from zmesh.transport.base import endpoint_address

from .cli_process import run_zmesh
from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(60)

FAST = zmesh.LivenessConfig(heartbeat=0.2, evasive_after=0.6, expire_after=1.5)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Keys:
    """Key pairs in ``tmp/trusted`` (trusted by everyone) and ``tmp/outside`` (not)."""

    def __init__(self, root: Path) -> None:
        self.trusted = root / "trusted"
        self.outside = root / "outside"

    def make(self, name: str, trusted: bool = True) -> Path:
        return keygen(name, self.trusted if trusted else self.outside)[1]

    @staticmethod
    def public(secret: Path) -> str:
        return load_key(secret).public

    @staticmethod
    def pair(secret: Path) -> tuple[bytes, bytes]:
        key = load_key(secret)
        return key.public.encode(), key.secret.encode()


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


class Raw:
    """Raw pyzmq sockets in a context of their own, all closed at the end."""

    def __init__(self) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sockets: list[zmq.Socket[Any]] = []

    def socket(self, kind: int) -> zmq.Socket[Any]:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        self.sockets.append(sock)
        return sock

    def close(self) -> None:
        for sock in self.sockets:
            sock.close(0)
        self.ctx.term()


@pytest.fixture
def raw() -> Iterator[Raw]:
    sockets = Raw()
    yield sockets
    sockets.close()


def _sub(raw: Raw, node: zmesh.Node, client: tuple[bytes, bytes] | None) -> zmq.Socket[Any]:
    sock = raw.socket(zmq.SUB)
    if client is not None:
        sock.curve_serverkey = node.public_key.encode()  # type: ignore[union-attr]
        sock.curve_publickey, sock.curve_secretkey = client
    sock.setsockopt(zmq.SUBSCRIBE, b"M")
    sock.connect(endpoint_address(node.pub_endpoint))
    return sock


def _dealer(raw: Raw, node: zmesh.Node, client: tuple[bytes, bytes] | None) -> zmq.Socket[Any]:
    sock = raw.socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, b"stranger|0001|0123456789abcdef")
    if client is not None:
        sock.curve_serverkey = node.public_key.encode()  # type: ignore[union-attr]
        sock.curve_publickey, sock.curve_secretkey = client
    sock.connect(endpoint_address(node.endpoint))
    return sock


def _received(sock: zmq.Socket[Any]) -> list[list[bytes]]:
    got = []
    while sock.poll(0):
        got.append(sock.recv_multipart())
    return got


async def _echo_pair(m: Mesh, a_key: Path, b_key: Path, trusted: Path) -> tuple[zmesh.Node, zmesh.Node]:
    a = await m.node(key=a_key, trusted=trusted, liveness=FAST)
    b = await m.node(key=b_key, trusted=trusted, liveness=FAST)
    a.agent("echo").add_handler("x", lambda msg: msg.payload)
    await b.wait_for_agents("echo")
    await a.wait_until(lambda: b.id in a.peers and a.id in b.peers, 10, "the two nodes to join")
    return a, b


async def test_keyed_nodes_talk_and_every_frame_carries_its_key(keys: Keys) -> None:
    a_key, b_key = keys.make("a"), keys.make("b")
    async with Mesh("zmq") as m:
        a, b = await _echo_pair(m, a_key, b_key, keys.trusted)
        assert a.endpoint.endswith("#" + keys.public(a_key)) and a.pub_endpoint.endswith("#" + keys.public(a_key))
        assert all("#" in e for e in a.registry.record(a.id).routers)  # type: ignore[union-attr]
        assert (await b.agent("c").request("echo", "x", 21, timeout=5)).payload == 21
        got: list[Any] = []
        await a.agent("listener").subscribe("news.*", lambda msg: got.append(msg.payload))
        await b.wait_until(lambda: b.registry.subscribers("news.x"), 5, "the subscription")
        assert await b.agent("d").broadcast("news.x", "hello") == 1
        await wait_for(lambda: got == ["hello"], 5, "the broadcast")
        # the plumbing for identities: the engine knows each peer's authenticated key
        assert a._mesh.engine.members.peers[b.id].public_key == keys.public(b_key)
        assert b._mesh.engine.members.peers[a.id].public_key == keys.public(a_key)
        assert a.stats()["dropped_total"] == 0 and b.stats()["dropped_total"] == 0


async def test_one_key_shared_by_every_node_trusts_itself(keys: Keys) -> None:
    shared = keys.make("fleet")
    async with Mesh("zmq") as m:
        a = await m.node(key=shared)
        b = await m.node(key=shared)
        assert a.trusted == b.trusted == {keys.public(shared)}
        await a.wait_until(lambda: b.id in a.peers and a.id in b.peers, 10, "the two nodes to join")


async def test_a_node_with_an_untrusted_key_cannot_join(keys: Keys) -> None:
    a_key, intruder_key = keys.make("a"), keys.make("intruder", trusted=False)
    async with Mesh("zmq") as m:
        a = await m.node(key=a_key, trusted=keys.trusted)
        intruder = await m.node(key=intruder_key, trusted=[keys.public(a_key)], seeds=[a.endpoint])
        await wait_for(lambda: a.stats()["transport"].get("handshakes_refused", 0) >= 1, 10, "a refusal")
        assert a.peers == [] and intruder.peers == []
        assert a.registry.node_of("x") is None


async def test_a_stranger_cannot_read_broadcasts_without_a_trusted_key(
    keys: Keys, raw: Raw
) -> None:
    a_key, b_key, spy_key, ok_key = keys.make("a"), keys.make("b"), keys.make("spy", False), keys.make("ok")
    async with Mesh("zmq") as m:
        a, b = await _echo_pair(m, a_key, b_key, keys.trusted)
        got: list[Any] = []
        await b.agent("listener").subscribe("news.*", lambda msg: got.append(msg.payload))
        await a.wait_until(lambda: a.registry.subscribers("news.x"), 5, "the subscription")
        strangers = [_sub(raw, a, None), _sub(raw, a, keys.pair(spy_key))]
        control = _sub(raw, a, keys.pair(ok_key))  # a trusted key: reads (the test can see a leak)
        sender = a.agent("src")
        for i in range(50):
            await sender.broadcast("news.x", i)
            if control.poll(0):
                break
            await asyncio.sleep(0.02)  # the raw SUBs attach while we keep publishing
        assert control.poll(1000), "the trusted raw SUB never received a broadcast"
        await wait_for(lambda: got, 5, "the subscribed node's broadcasts")
        assert [_received(s) for s in strangers] == [[], []]
        assert a.stats()["transport"]["handshakes_refused"] >= 1  # the wrong key, refused by ZAP


async def test_a_stranger_cannot_send_to_the_router_without_a_trusted_key(
    keys: Keys, raw: Raw
) -> None:
    a_key, spy_key, ok_key = keys.make("a"), keys.make("spy", False), keys.make("ok")
    junk = msgpack.packb([1, [0, "message", "before", "hello"]])
    async with Mesh("zmq") as m:
        a = await m.node(key=a_key, trusted=keys.trusted)
        for client in (None, keys.pair(spy_key)):
            _dealer(raw, a, client).send(junk)
        await wait_for(lambda: a.stats()["transport"].get("handshakes_refused", 0) >= 1, 10, "ZAP's refusal")
        _dealer(raw, a, keys.pair(ok_key)).send(junk)  # the control: it reaches the engine
        await wait_for(lambda: a.stats()["dropped_total"] >= 1, 10, "the trusted junk to be counted")
        await asyncio.sleep(0)  # one more loop turn: nothing else is queued
        assert a.stats()["dropped"] == {"unknown_peer": 1}


async def test_rotation_admits_a_new_key_and_distrust_cuts_a_peer_off(keys: Keys, raw: Raw) -> None:
    a_key, b_key, c_key = keys.make("a"), keys.make("b"), keys.make("c", trusted=False)
    async with Mesh("zmq") as m:
        a, b = await _echo_pair(m, a_key, b_key, keys.trusted)
        c = await m.node(key=c_key, trusted=keys.trusted, liveness=FAST, seeds=[a.endpoint])
        c.agent("c-agent")
        await wait_for(lambda: a.stats()["transport"].get("handshakes_refused", 0) >= 1, 10, "c refused")
        assert c.peers == []
        a.trust(keys.public(c_key))  # no restart: its next knock gets in
        b.trust(keys.public(c_key))
        await a.wait_until(lambda: set(c.peers) == {a.id, b.id} and c.id in a.peers, 20, "c to join")
        assert (await c.agent("asker").request("echo", "x", 1, timeout=5)).payload == 1
        heard_b: list[Any] = []
        heard_c: list[Any] = []
        await b.agent("lb").subscribe("news.*", lambda msg: heard_b.append(msg.payload))
        await c.agent("lc").subscribe("news.*", lambda msg: heard_c.append(msg.payload))
        await a.wait_until(lambda: len(a.registry.subscribers("news.x")) == 2, 5, "both subscriptions")

        # A connection c's key opened while trusted, that will not heed a BYE:
        hostile = _dealer(raw, a, keys.pair(c_key))
        junk = msgpack.packb([1, [4, False]])
        before = a.stats()["dropped"].get("unknown_peer", 0)
        hostile.send(junk)
        await wait_for(lambda: a.stats()["dropped"].get("unknown_peer", 0) > before, 10, "the raw connection")
        refused = a.stats()["transport"]["handshakes_refused"]
        a.distrust(keys.public(c_key))
        assert c.id not in a.peers and a.registry.node_of("c-agent") is None  # the engine dropped it
        src = a.agent("src")
        await src.broadcast("news.x", "after")
        await wait_for(lambda: heard_b == ["after"], 5, "b to hear the broadcast")
        await asyncio.sleep(0.3)  # c's subscription was cut at distrust(): give a leak time to show
        assert heard_c == []
        await wait_for(lambda: a.stats()["transport"]["handshakes_refused"] > refused, 10,
                       "c's reconnection to be refused")
        assert a.id not in c.peers  # told BYE: it stopped sending at once
        hostile.send(junk)
        await wait_for(lambda: a.stats()["transport"].get("untrusted_key", 0) >= 1, 10,
                       "frames on a connection admitted before distrust() to be dropped")
        assert c.id not in a.peers
        with pytest.raises(zmesh.SecurityError):
            zmesh.Node("m").trust(keys.public(c_key))  # a keyless node trusts no keys


async def test_a_node_distrusted_then_trusted_again_is_told_and_rejoins(keys: Keys) -> None:
    a_key, b_key = keys.make("a"), keys.make("b")
    async with Mesh("zmq") as m:
        a = await m.node(key=a_key, trusted=keys.trusted, liveness=FAST)
        b = await m.node(key=b_key, trusted=keys.trusted, liveness=FAST, seeds=[a.endpoint])
        release = asyncio.Event()

        async def slow(msg: Message) -> str:
            await release.wait()
            return "pong"

        a.agent("ah").add_handler("ping", slow)
        asker = b.agent("bq")
        await b.wait_for_agents("ah", timeout=10)
        pending = asyncio.ensure_future(asker.request("ah", "ping", timeout=30))
        await wait_for(lambda: a.stats()["by_agent"]["ah"]["running"] == 1, 5, "the request to run at a")

        a.distrust(keys.public(b_key))
        with pytest.raises(zmesh.PeerLost):  # told at once (BYE), not a 30 s Timeout
            await asyncio.wait_for(pending, 5)
        await wait_for(lambda: a.id not in b.peers, 5, "b to drop a")
        release.set()

        a.trust(keys.public(b_key))  # b was told to go away: a knocks on it again
        await a.wait_until(lambda: b.id in a.peers and a.id in b.peers, 20, "b to rejoin")
        await b.wait_for_agents("ah", timeout=10)
        assert (await asker.request("ah", "ping", timeout=5)).payload == "pong"


async def test_reloading_the_trusted_directory_adds_and_removes_keys(keys: Keys) -> None:
    a_key, d_key = keys.make("a"), keys.make("d", trusted=False)
    async with Mesh("zmq") as m:
        a = await m.node(key=a_key, trusted=keys.trusted, liveness=FAST)
        d = await m.node(key=d_key, trusted=[keys.public(a_key)], liveness=FAST, seeds=[a.endpoint])
        await wait_for(lambda: a.stats()["transport"].get("handshakes_refused", 0) >= 1, 10, "d refused")
        (keys.outside / "d.key").rename(keys.trusted / "d.key")
        assert a.reload_trusted() == ({keys.public(d_key)}, frozenset())
        await a.wait_until(lambda: d.id in a.peers and a.id in d.peers, 20, "d to join")
        (keys.trusted / "d.key").unlink()
        assert a.reload_trusted() == (frozenset(), {keys.public(d_key)})
        assert d.id not in a.peers


async def test_keyed_nodes_in_two_processes(keys: Keys) -> None:
    ctl_key, worker_key = keys.make("ctl"), keys.make("worker")
    env = {**os.environ, "ZMESH_INTERFACES": "127.0.0.1", "ZMESH_KEY": str(worker_key),
           "ZMESH_TRUSTED": str(keys.trusted)}
    async with zmesh.Node(f"mp-{os.getpid()}", name="ctl-node", discovery=False, liveness=FAST,
                          key=ctl_key, trusted=keys.trusted) as node:
        proc = subprocess.Popen([sys.executable, "-m", "tests._mp_agent", "W", node.mesh, node.endpoint],
                                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        try:
            ctl = node.agent("ctl")
            await node.wait_for_agents("W", timeout=20)
            reply = await ctl.request("W", "whoami", timeout=10)
            assert reply.payload["pid"] == proc.pid and reply.payload["sender"] == "ctl"
            assert (await ctl.request("W", "subscribe", "news.*", timeout=10)).payload == "ok"
            await node.wait_until(lambda: node.registry.subscribers("news.x"), 5, "W's subscription")
            assert await ctl.broadcast("news.x", 7) == 1
            await node.wait_until(lambda: True, 0)  # one turn
            for _ in range(100):
                if (await ctl.request("W", "received", timeout=10)).payload == [["news.x", 7]]:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("W never received the broadcast")
            peer = node._mesh.engine.members.peers[node.peers[0]]
            assert peer.public_key == keys.public(worker_key)
        finally:
            proc.terminate()
            proc.wait(10)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()


async def test_the_cli_joins_a_keyed_mesh_with_key_and_trusted(keys: Keys) -> None:
    a_key, cli_key, spy_key = keys.make("a"), keys.make("cli"), keys.make("spy", trusted=False)
    async with zmesh.Node(f"cli-{os.getpid()}", discovery=False, key=a_key, trusted=keys.trusted) as a:
        a.agent("echo").add_handler("x", lambda msg: {"echo": msg.payload})
        base = ["--mesh", a.mesh, "--seed", a.endpoint]
        code, out, err = await run_zmesh("request", *base, "--key", str(cli_key), "--trusted", str(keys.trusted),
                                         "echo", "x", "5")
        assert (code, out.strip()) == (0, '{"echo": 5}'), err
        code, _, err = await run_zmesh("request", *base, "echo", "x", "5")
        assert code == 1 and "this node has none" in err, err
        code, _, err = await run_zmesh("request", *base, "--key", str(spy_key), "--wait", "1", "echo", "x", "5")
        assert code == 1 and "no member" in err and "trusts this --key" in err, err


async def test_the_secure_demo_runs_with_fresh_keys() -> None:
    code, out, err = await run_zmesh("demo", "--secure", timeout=50)
    assert code == 0, out + err
    assert "fresh key pairs" in out and "the newcomer took over" in out, out
    seed = next(line for line in out.splitlines() if "console node at" in line)
    assert "#" in seed, seed
    keydir = next(w for w in out.split() if "zmesh-demo-keys-" in w)
    assert not os.path.exists(keydir)  # the keys went with the demo


async def test_keyed_nodes_find_each_other_by_mdns_and_ignore_keyless_ones(keys: Keys) -> None:
    a_key, b_key = keys.make("a"), keys.make("b")
    mesh = f"mdns-keys-{os.getpid()}"
    async with zmesh.Node(mesh, key=a_key, trusted=keys.trusted) as a, \
            zmesh.Node(mesh, key=b_key, trusted=keys.trusted) as b, zmesh.Node(mesh) as keyless:
        b.agent("echo").add_handler("x", lambda msg: msg.payload)
        keyless.agent("plain")
        await a.wait_for_agents("echo", timeout=10)  # no seeds: the TXT record's ck= gave b's key
        assert (await a.agent("c").request("echo", "x", 4, timeout=5)).payload == 4
        assert a._mesh.discovery is not None
        await wait_for(lambda: a._mesh.discovery.stats["peers_seen"] >= 2, 10, "a to hear both adverts")  # type: ignore[union-attr]
        assert a.peers == [b.id] and keyless.peers == []
        assert a.registry.node_of("plain") is None
        assert "untrusted_peer" not in a.stats()["dropped"]  # the keyless advert was never dialled


def test_the_blocking_facade_takes_keys_and_changes_trust(keys: Keys) -> None:
    import zmesh.sync as zs

    a_key, b_key = keys.make("a"), keys.make("b", trusted=False)
    with zs.Node(f"sync-keys-{os.getpid()}", key=a_key, trusted=keys.trusted, discovery=False) as a, \
            zs.Node(a.mesh, key=b_key, trusted=[keys.public(a_key)], discovery=False, seeds=[a.endpoint]) as b:
        assert a.public_key == keys.public(a_key) and a.trusted == {a.public_key}
        a.agent("echo").add_handler("x", lambda msg: msg.payload)
        a.trust(keys.public(b_key))
        b.wait_for_agents("echo", timeout=20)
        assert b.agent("c").request("echo", "x", 2, timeout=5).payload == 2
        a.distrust(keys.public(b_key))
        assert b.id not in a.peers
        assert a.reload_trusted() == (frozenset(), frozenset())


def test_a_kept_secure_demo_suggests_commands_that_carry_the_cli_key(tmp_path: Path) -> None:
    from zmesh._tools.demo.app import _try_lines

    (line, *_) = _try_lines("m", "tcp://127.0.0.1:1#KEY", ["peers"], tmp_path)
    assert f"--key {tmp_path / 'cli.key_secret'} --trusted {tmp_path}" in line, line
