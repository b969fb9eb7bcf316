"""Keys and trust without a mesh: keygen, loading, the trusted set, the
environment, secure-by-default on the LAN, endpoints that carry keys."""

from __future__ import annotations

import errno
import logging
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.auth

import zmesh
from zmesh import security
from zmesh.discovery.mdns import PeerAdvert
from zmesh.interfaces import InterfaceScope
from zmesh.security import TrustedKeys, keygen, lan_refusal, load_key, resolve_security
from zmesh.transport.zmq._senders import Senders
from zmesh.transport.zmq._link import link_tag
from zmesh.transport.base import endpoint_address, endpoint_host, endpoint_key

from .helpers import Mesh
from .netns import NetnsLab

pytestmark = pytest.mark.timeout(30)


def test_keygen_writes_zmq_auth_certificates_and_keeps_the_secret_private(tmp_path: Path) -> None:
    public, secret = keygen("alice", tmp_path / "keys")
    assert (public.name, secret.name) == ("alice.key", "alice.key_secret")
    pub, none = zmq.auth.load_certificate(public)
    pub2, sec = zmq.auth.load_certificate(secret)
    assert none is None and pub == pub2 and sec is not None
    assert len(zmq.utils.z85.decode(pub)) == 32 and len(zmq.utils.z85.decode(sec)) == 32
    assert zmq.auth.load_certificates(tmp_path / "keys") == {pub: True}
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(public).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "keys").st_mode) == 0o700  # made by keygen
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == ["alice.key", "alice.key_secret"]  # no leftovers
    assert load_key(secret).public == pub.decode()
    with pytest.raises(zmesh.SecurityError, match="already exists"):
        keygen("alice", tmp_path / "keys")
    with pytest.raises(zmesh.SecurityError, match="bad key name"):
        keygen("../evil", tmp_path)


@pytest.mark.skipif(os.name != "posix", reason="file modes")
def test_the_secret_is_created_0600_whatever_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple[str, int, int]] = []
    real_open = os.open

    def recording_open(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        opened.append((os.fspath(path), flags, mode))
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    monkeypatch.setattr(os, "fchmod", lambda fd, mode: None)  # the mode it is created with, alone
    old = os.umask(0)
    try:
        public, secret = keygen("alice", tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600 and stat.S_IMODE(os.stat(public).st_mode) == 0o644
    files = [o for o in opened if o[0].startswith("alice")]
    assert [(name, mode) for name, _, mode in files] == [("alice.key_secret", 0o600), ("alice.key", 0o644)]
    for _, flags, _ in files:
        assert flags & os.O_CREAT and flags & os.O_EXCL and flags & os.O_NOFOLLOW
    monkeypatch.undo()
    old = os.umask(0o077)  # and a umask cannot take the public key's read bits off
    try:
        public, _ = keygen("bob", tmp_path / "made")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(public).st_mode) == 0o644 and stat.S_IMODE(os.stat(public.parent).st_mode) == 0o700


@pytest.mark.skipif(os.name != "posix", reason="file modes and owners")
def test_keygen_refuses_a_directory_another_user_could_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    for mode in (0o777, 0o770, 0o722):
        shared.mkdir(mode)
        os.chmod(shared, mode)
        with pytest.raises(zmesh.SecurityError, match="other users may write to it"):
            keygen("alice", shared)
        assert not list(shared.iterdir())
        shared.rmdir()
    sticky = tmp_path / "sticky"  # as /tmp: others may add files, not replace ours
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    keygen("alice", sticky)
    theirs = tmp_path / "theirs"
    theirs.mkdir(0o755)
    if os.geteuid() == 0:
        os.chown(theirs, 4321, -1)
    else:  # a directory of ours, seen by a process of another (not root) user
        monkeypatch.setattr(os, "geteuid", lambda: os.stat(theirs).st_uid + 1)
    with pytest.raises(zmesh.SecurityError, match="belongs to another user"):
        keygen("alice", theirs)
    assert not list(theirs.iterdir())


@pytest.mark.skipif(os.name != "posix", reason="symbolic links")
def test_keygen_never_writes_through_an_existing_file_or_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.key").write_text("someone else's")
    with pytest.raises(zmesh.SecurityError, match="a.key already exists"):
        keygen("a", tmp_path)
    assert not (tmp_path / "a.key_secret").exists() and (tmp_path / "a.key").read_text() == "someone else's"
    target = tmp_path / "stolen"
    (tmp_path / "b.key_secret").symlink_to(target)  # dangling: where a secret would go to be read
    with pytest.raises(zmesh.SecurityError, match="b.key_secret already exists"):
        keygen("b", tmp_path)
    # and if it appears after the check, O_EXCL refuses it
    monkeypatch.setattr("zmesh._keyfiles._exists", lambda where, dir_fd: False)
    with pytest.raises(zmesh.SecurityError, match="b.key_secret already exists"):
        keygen("b", tmp_path)
    assert not target.exists() and not (tmp_path / "b.key").exists()


def test_keygen_leaves_nothing_when_writing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def full_disk(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if os.fspath(path).endswith("c.key"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", full_disk)
    with pytest.raises(zmesh.SecurityError, match="cannot write the key 'c'.*No space left"):
        keygen("c", tmp_path / "keys")
    assert not (tmp_path / "keys").exists()  # the secret written first, and the directory made, are gone
    (tmp_path / "kept").mkdir(0o700)
    with pytest.raises(zmesh.SecurityError, match="No space left"):
        keygen("c", tmp_path / "kept")
    assert (tmp_path / "kept").is_dir() and not list((tmp_path / "kept").iterdir())  # not ours to remove


def test_a_public_certificate_is_not_a_key(tmp_path: Path) -> None:
    public, _ = keygen("bob", tmp_path)
    with pytest.raises(zmesh.SecurityError, match="only a public key"):
        load_key(public)
    with pytest.raises(zmesh.SecurityError, match="missing.key_secret'.*does not exist.*zmesh keygen"):
        load_key(tmp_path / "missing.key_secret")  # not "Invalid certificate file" (the trial's confusion)
    with pytest.raises(zmesh.SecurityError, match="is a directory"):
        load_key(tmp_path)


def test_no_curve_in_libzmq_is_said_clearly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(security.zmq, "has", lambda capability: False)
    with pytest.raises(zmesh.SecurityError, match="without CurveZMQ"):
        keygen("x", tmp_path)


def test_the_trusted_set_reads_directories_files_and_keys_and_changes_live(tmp_path: Path) -> None:
    a, _ = keygen("a", tmp_path / "dir")
    b, _ = keygen("b", tmp_path / "other")
    c_key = zmq.curve_keypair()[0].decode()
    own = zmq.curve_keypair()[0].decode()
    key = {p: zmq.auth.load_certificate(p)[0].decode() for p in (a, b)}
    trusted = TrustedKeys([tmp_path / "dir", str(b), c_key], own=own)
    assert trusted.keys == {key[a], key[b], c_key, own}
    assert trusted.distrust(key[a]) == {key[a]}
    assert key[a] not in trusted
    assert trusted.reload() == (frozenset(), frozenset())  # a source naming it does not bring it back
    assert trusted.trust(key[a]) == {key[a]}
    d, _ = keygen("d", tmp_path / "dir")
    d_key = zmq.auth.load_certificate(d)[0].decode()
    assert trusted.reload() == ({d_key}, frozenset())
    d.unlink()
    assert trusted.reload() == (frozenset(), {d_key})
    assert TrustedKeys(f"{c_key},{own}").keys == {c_key, own}
    with pytest.raises(zmesh.SecurityError, match="neither a directory"):
        TrustedKeys("no-such-dir")
    with pytest.raises(zmesh.SecurityError, match="bad trusted key"):
        TrustedKeys("~" * 40)


def test_env_vars_give_the_key_and_the_trusted_set(tmp_path: Path) -> None:
    _, secret = keygen("n", tmp_path)
    other = zmq.curve_keypair()[0].decode()
    env = {"ZMESH_KEY": str(secret), "ZMESH_TRUSTED": other}
    got = resolve_security(None, None, False, env)
    assert got.key is not None and got.trusted is not None
    assert got.trusted.keys == {other, got.key.public}
    got = resolve_security(None, None, False, {"ZMESH_KEY": str(secret), "ZMESH_TRUSTED": str(tmp_path)})
    assert got.trusted is not None and got.key is not None and got.trusted.keys == {got.key.public}
    assert not resolve_security(None, None, False, {}).keyed
    with pytest.raises(zmesh.SecurityError, match="ZMESH_KEY"):
        resolve_security(None, None, False, {"ZMESH_KEY": str(tmp_path / "nope.key_secret")})
    with pytest.raises(zmesh.SecurityError, match="no key for this node"):
        resolve_security(None, None, False, {"ZMESH_TRUSTED": other})


def test_a_node_reads_the_env_and_only_the_zmq_transport_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, secret = keygen("n", tmp_path)
    monkeypatch.setenv("ZMESH_KEY", str(secret))
    monkeypatch.setenv("ZMESH_TRUSTED", str(tmp_path))
    node = zmesh.Node("m")
    assert node.public_key == load_key(secret).public and node.trusted == {node.public_key}
    assert zmesh.Node("m", transport="inproc").public_key is None
    with pytest.raises(ValueError, match="'zmq' transport"):
        zmesh.Node("m", transport="inproc", key=secret)


@pytest.mark.parametrize(
    ("local", "keyed", "insecure", "refused"),
    [(True, False, False, False), (False, False, False, True), (False, True, False, False),
     (False, False, True, False), (True, True, False, False)],
)
def test_secure_by_default_beyond_loopback(local: bool, keyed: bool, insecure: bool, refused: bool) -> None:
    why = lan_refusal(local, keyed, insecure, ["10.0.0.5"])
    assert (why is not None) == refused
    if why is not None:
        assert "zmesh keygen" in why and "insecure=True" in why and "10.0.0.5" in why


async def test_a_lan_node_without_keys_refuses_to_start_before_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    lan = InterfaceScope(("10.231.9.11",), (), is_local=False, mode="lan")
    monkeypatch.setattr("zmesh.interfaces.resolve_interfaces", lambda spec: lan)
    node = zmesh.Node("m", interfaces="lan", discovery=False)
    with pytest.raises(zmesh.SecurityError, match="zmesh keygen"):
        await node.start()
    assert node.closed


def test_endpoints_carry_the_public_key_after_a_hash() -> None:
    key = zmq.curve_keypair()[0].decode()
    # Z85 may hold ':' and '#', a host and port never '#': the first '#' separates.
    endpoint = f"tcp://10.0.0.2:5555#{key}"
    assert endpoint_address(endpoint) == "tcp://10.0.0.2:5555"
    assert endpoint_key(endpoint) == key and endpoint_key("tcp://h:1") is None
    assert endpoint_host(endpoint) == endpoint_host("tcp://10.0.0.2:5555") == "10.0.0.2"
    advert = PeerAdvert("n", "1", "m", 1, ("10.0.0.2",), 5555, 5556, public_key=key)
    assert advert.router_endpoints() == [endpoint] and advert.pub_endpoints() == [f"tcp://10.0.0.2:5556#{key}"]


def test_a_keyed_node_dials_only_endpoints_with_keys_and_a_keyless_one_only_without(tmp_path: Path) -> None:
    _, secret = keygen("n", tmp_path)
    key = zmq.curve_keypair()[0].decode()
    with pytest.raises(zmesh.TransportError, match="has no public key"):
        zmesh.Node("m", key=secret, seeds=["tcp://127.0.0.1:5555"])
    with pytest.raises(zmesh.TransportError, match="this node has none"):
        zmesh.Node("m", seeds=[f"tcp://127.0.0.1:5555#{key}"])
    with pytest.raises(zmesh.TransportError, match="bad public key"):
        zmesh.Node("m", key=secret, seeds=["tcp://127.0.0.1:5555#tooshort"])
    zmesh.Node("m", key=secret, seeds=[f"tcp://127.0.0.1:5555#{key}"])


def test_link_tags_differ_per_endpoint_and_per_node() -> None:
    a, b = os.urandom(16), os.urandom(16)
    assert link_tag(a, "tcp://127.0.0.1:1") == link_tag(a, "tcp://127.0.0.1:1")
    assert link_tag(a, "tcp://127.0.0.1:1") != link_tag(a, "tcp://127.0.0.1:2")
    assert link_tag(a, "tcp://127.0.0.1:1") != link_tag(b, "tcp://127.0.0.1:1")


def test_a_key_belongs_to_the_first_connection_while_it_is_up() -> None:
    connected: set[bytes] = set()
    senders = Senders(lambda rid: rid in connected, limit=2)
    first, forger, later = b"bob|01|aaaaaaaaaaaaaaaa", b"bob|01|bbbbbbbbbbbbbbbb", b"bob|01|cccccccccccccccc"
    connected.add(first)
    assert senders.bind(first, "K") == ("bob|01", "K") and senders.by_id[first] == ("bob|01", "K")
    assert senders.bind(forger) is None and senders.refused == 1  # bob's connection is up
    connected.discard(first)
    assert senders.bind(forger) is None  # refused a moment ago: not probed again at once
    assert senders.bind(later) == ("bob|01", None) and first not in senders.by_id  # bob's link closed: free
    assert senders.bind(b"\x00\x01\x02\x03\x04") == ("0x0001020304", None)
    assert senders.bind(b"fake|0001") == ("fake|0001", None)  # a routing id without a tag is its own key
    connected.update((later, b"fake|0001"))
    assert senders.bind(b"carol|02|dddddddddddddddd") is None  # full, and every bound one is connected
    connected.discard(b"fake|0001")
    assert senders.bind(b"carol|02|dddddddddddddddd") == ("carol|02", None)  # a gone one made room


async def test_keygen_on_the_command_line(tmp_path: Path) -> None:
    from .cli_process import run_zmesh

    code, out, err = await run_zmesh("keygen", "carol", "--dir", str(tmp_path))
    assert code == 0, err
    public = zmq.auth.load_certificate(tmp_path / "carol.key")[0].decode()
    assert public in out and "carol.key_secret" in out
    code, _, err = await run_zmesh("keygen", "carol", "--dir", str(tmp_path))
    assert code == 1 and "already exists" in err


def test_lan_in_a_namespace_needs_keys_or_insecure(netns_lab: NetnsLab, tmp_path: Path) -> None:
    (host,) = netns_lab.add_hosts(1)
    _, secret = keygen("lab", tmp_path)
    script = (
        "import asyncio, sys, zmesh\n"
        "async def main(kwargs):\n"
        "    try:\n"
        "        async with zmesh.Node('m', interfaces='lan', discovery=False, **kwargs) as n:\n"
        "            print('started', n.endpoint)\n"
        "    except zmesh.SecurityError as e:\n"
        "        print('refused', e)\n"
        "asyncio.run(main(eval(sys.argv[1])))\n"
    )
    outputs = {}
    for label, kwargs in (("none", "{}"), ("insecure", "{'insecure': True}"), ("keyed", f"{{'key': {str(secret)!r}}}")):
        done = netns_lab.exec(host, [sys.executable, "-c", script, kwargs])
        assert done.returncode == 0, done.stderr
        outputs[label] = done.stdout
    assert outputs["none"].startswith("refused") and "zmesh keygen" in outputs["none"], outputs
    assert outputs["insecure"].startswith(f"started tcp://{host.address}:"), outputs
    assert outputs["keyed"].startswith(f"started tcp://{host.address}:") and "#" in outputs["keyed"], outputs


async def test_keyless_nodes_still_talk_on_loopback() -> None:
    async with Mesh("zmq") as m:
        a, b = await m.node(), await m.node()
        assert a.public_key is None and "#" not in a.endpoint
        echo = a.agent("echo")
        echo.add_handler("x", lambda msg: msg.payload)
        await b.wait_for_agents("echo")
        assert (await b.agent("c").request("echo", "x", 5, timeout=5)).payload == 5


def test_a_secret_given_as_trusted_or_an_empty_trusted_directory_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, secret = keygen("alice", tmp_path / "keys")
    empty = tmp_path / "empty"
    empty.mkdir()
    with caplog.at_level(logging.WARNING, logger="zmesh"):
        assert len(TrustedKeys(str(secret)).keys) == 1  # its public half is what is trusted
        assert TrustedKeys(str(empty)).keys == frozenset()
    said = [r.getMessage() for r in caplog.records]
    assert any("holds a SECRET key" in m for m in said), said
    assert any("holds no .key files" in m for m in said), said
