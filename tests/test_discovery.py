"""MdnsDiscovery on 127.0.0.1 only (mDNS never leaves the host).

Every test runs its own coroutine under ``asyncio.run`` with an
``asyncio.wait_for`` deadline, uses a unique mesh name (other test sessions on
this host may share 127.0.0.1:5353) and waits on events or polled conditions,
never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
import types
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import pytest
import zeroconf
from zeroconf import DNSIncoming, DNSOutgoing, DNSQuestion, ServiceInfo, ServiceStateChange, current_time_millis
from zeroconf._services.browser import generate_service_query
from zeroconf.asyncio import AsyncZeroconf
from zeroconf.const import _CLASS_IN, _FLAGS_QR_QUERY, _TYPE_PTR

from tests.helpers import wait_for as until
from zmesh.discovery import sockets as _mdns_sockets
from zmesh.discovery.sockets import IP_MULTICAST_ALL, confine_to_scope, zeroconf_sockets
from zmesh.discovery.mdns import MdnsDiscovery, PeerAdvert, _keep_own_questions, instance_label
from zmesh.interfaces import InterfaceScope, resolve_interfaces

pytestmark = pytest.mark.timeout(30)

LOCAL: InterfaceScope = resolve_interfaces("127.0.0.1")  # never anything but loopback here
SERVICE_TYPE = MdnsDiscovery.SERVICE_TYPE
T = TypeVar("T")


def run(coro: Awaitable[T], deadline: float = 20.0) -> T:
    """Run ``coro`` in a fresh event loop, failing after ``deadline`` seconds."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, deadline)

    return asyncio.run(bounded())


def unique_mesh() -> str:
    """A mesh name no other test (or test session) uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@dataclass
class Recorder:
    """Collects on_peer / on_peer_gone callbacks and wakes waiters."""

    peers: list[PeerAdvert] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def on_peer(self, advert: PeerAdvert) -> None:
        self.peers.append(advert)
        self.changed.set()

    def on_gone(self, node_id: str) -> None:
        self.gone.append(node_id)
        self.changed.set()

    def nodes(self) -> set[str]:
        return {p.node_id for p in self.peers}

    async def wait(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait for ``predicate`` to hold after some callback, with a deadline."""

        async def loop() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), timeout)


def make(
    mesh: str,
    node_id: str,
    rec: Recorder,
    *,
    incarnation: str = "1",
    version: int = 1,
    port: int = 40000,
) -> MdnsDiscovery:
    """An MdnsDiscovery on 127.0.0.1 reporting into ``rec``."""
    return MdnsDiscovery(
        mesh=mesh,
        node_id=node_id,
        incarnation=incarnation,
        version=version,
        scope=LOCAL,
        router_port=port,
        pub_port=port + 1,
        on_peer=rec.on_peer,
        on_peer_gone=rec.on_gone,
    )


def test_two_nodes_discover_each_other_fast_and_ignore_other_mesh() -> None:
    async def main() -> float:
        mesh = unique_mesh()
        ra, rb, rc = Recorder(), Recorder(), Recorder()
        a = make(mesh, "alpha", ra, port=41000)
        b = make(mesh, "beta", rb, port=42000)
        c = make(unique_mesh(), "gamma", rc, port=43000)
        started = time.monotonic()
        try:
            await c.start()
            await a.start()
            await b.start()
            await ra.wait(lambda: "beta" in ra.nodes())
            await rb.wait(lambda: "alpha" in rb.nodes())
            elapsed = time.monotonic() - started
            # c's advert reaches a and b and is filtered out (and vice versa)
            await until(lambda: a.stats["ignored_other_mesh"] >= 1 and b.stats["ignored_other_mesh"] >= 1)
            await until(lambda: c.stats["ignored_other_mesh"] >= 2, what="c ignoring a and b")
            assert ra.nodes() == {"beta"} and rb.nodes() == {"alpha"} and rc.nodes() == set()
            (seen_b,) = ra.peers
            assert seen_b.mesh == mesh and seen_b.incarnation == "1" and seen_b.version == 1
            assert seen_b.addresses == ("127.0.0.1",)
            assert seen_b.router_endpoints() == ["tcp://127.0.0.1:42000"]
            assert seen_b.pub_endpoints() == ["tcp://127.0.0.1:42001"]
            assert a.peers == {"beta": seen_b}
            # our own record is seen by our browser but never reported
            await until(lambda: a.stats["ignored_self"] >= 1 and b.stats["ignored_self"] >= 1)
            assert a.stats["peers_seen"] == 1 and b.stats["peers_seen"] == 1
            return elapsed
        finally:
            await asyncio.gather(a.close(), b.close(), c.close())

    elapsed = run(main())
    assert elapsed < 5.0


def test_late_joiner_sees_existing_node_and_is_seen() -> None:
    async def main() -> None:
        mesh = unique_mesh()
        ra, rb = Recorder(), Recorder()
        a = make(mesh, "early", ra)
        b = make(mesh, "late", rb)
        try:
            await a.start()
            await until(lambda: a.stats["ignored_self"] >= 1, what="a's own announcement")
            await b.start()
            await asyncio.gather(ra.wait(lambda: ra.nodes() == {"late"}), rb.wait(lambda: rb.nodes() == {"early"}))
        finally:
            await a.close()
            await b.close()

    run(main())


def test_restart_with_new_incarnation_is_reported_again_and_goodbye_reports_gone() -> None:
    async def main() -> None:
        mesh = unique_mesh()
        ra = Recorder()
        a = make(mesh, "watcher", ra)
        b1 = make(mesh, "worker", Recorder(), incarnation="inc-1", port=44000)
        b2 = make(mesh, "worker", Recorder(), incarnation="inc-2", port=45000)
        b3 = make(mesh, "worker", Recorder(), incarnation="inc-3", port=46000)
        try:
            await a.start()
            await b1.start()
            await ra.wait(lambda: len(ra.peers) == 1)
            await b1.close()  # goodbye packets
            await ra.wait(lambda: ra.gone == ["worker"])
            await b2.start()  # restart: new incarnation
            await ra.wait(lambda: len(ra.peers) == 2)
            assert [(p.node_id, p.incarnation, p.router_port) for p in ra.peers] == [
                ("worker", "inc-1", 44000),
                ("worker", "inc-2", 45000),
            ]
            # overlapping restart: inc-3 appears before inc-2 says goodbye -> no "gone"
            await b3.start()
            await ra.wait(lambda: len(ra.peers) == 3)
            await b2.close()
            # zeroconf reads the goodbye in its own thread: on a loaded machine (two suites at once) past 5 s
            await until(lambda: a.stats["peers_gone"] == 1 and len(a._known) == 1, 15.0, "inc-2 withdrawn")
            assert ra.gone == ["worker"]
            assert a.peers["worker"].incarnation == "inc-3"
        finally:
            for d in (a, b1, b2, b3):
                await d.close()

    run(main())


def _raw_info(label: str, properties: dict[str, str], addresses: list[str] | None = None) -> ServiceInfo:
    """A hand-made _zmesh._tcp service description."""
    return ServiceInfo(
        SERVICE_TYPE,
        f"{label}.{SERVICE_TYPE}",
        port=47000,
        properties=properties,
        server=f"{label}.local.",
        parsed_addresses=addresses or ["127.0.0.1"],
    )


async def _register_raw(
    zc: AsyncZeroconf, label: str, properties: dict[str, str], addresses: list[str] | None = None
) -> ServiceInfo:
    """Register a hand-made service (no probing) on the 127.0.0.1-only ``zc``."""
    info = _raw_info(label, properties, addresses)
    await zc.async_register_service(info, cooperating_responders=True)
    return info


def test_malformed_and_foreign_records_are_ignored_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="zmesh.discovery")
    tag = uuid.uuid4().hex[:8]

    async def main() -> None:
        mesh = unique_mesh()
        good = {"mesh": mesh, "node": "raw-good", "inc": "1", "v": "1", "rp": "47000", "pp": "47001"}
        bad = {
            f"nokeys-{tag}": {"mesh": mesh},
            f"badport-{tag}": {**good, "node": "raw-badport", "rp": "http"},
            f"badv-{tag}": {**good, "node": "raw-badv", "v": "one"},
            f"zeroport-{tag}": {**good, "node": "raw-zeroport", "pp": "0"},
            f"future-{tag}": {**good, "node": "raw-future", "v": "99"},
            f"dupself-{tag}": {**good, "node": "me"},
        }
        rec = Recorder()
        me = make(mesh, "me", rec)
        raw = AsyncZeroconf(interfaces=["127.0.0.1"])
        try:
            await me.start()
            for label, props in bad.items():
                await _register_raw(raw, label, props)
            await _register_raw(raw, f"offlink-{tag}", {**good, "node": "raw-offlink"}, ["10.254.1.2"])
            await _register_raw(raw, f"nul-{tag}", {})
            # a valid record registered after the garbage still gets through: nothing crashed
            await _register_raw(raw, f"good-{tag}", good)
            await rec.wait(lambda: rec.nodes() == {"raw-good"})
            await until(
                lambda: me.stats["ignored_malformed"] >= 5
                and me.stats["ignored_version"] >= 1
                and me.stats["ignored_unreachable"] >= 1
                and me.stats["ignored_self"] >= 2,
                what=f"ignored counters, got {me.stats}",
            )
            # a changed but still malformed record is re-resolved, yet not logged again (checked below;
            # counters are not compared exactly: concurrent test sessions share 127.0.0.1 mDNS)
            changed = _raw_info(f"badport-{tag}", {**good, "node": "raw-badport", "rp": "https"})
            await (await raw.async_update_service(changed))
            await until(lambda: "https" in caplog.text, what="re-resolution of the changed record")
            await _register_raw(raw, f"late-good-{tag}", {**good, "node": "raw-late"})
            await rec.wait(lambda: "raw-late" in rec.nodes())
            assert rec.nodes() == {"raw-good", "raw-late"}
        finally:
            await raw.async_close()
            await me.close()

    run(main())
    # Another process's bad advert is counted and said once, quietly: never a WARNING in every process.
    for label in (f"nokeys-{tag}", f"badport-{tag}", f"badv-{tag}", f"future-{tag}", f"offlink-{tag}"):
        lines = [r for r in caplog.records if label in r.getMessage() and "ignored" in r.getMessage()]
        assert len(lines) == 1, (label, [r.getMessage() for r in lines])
        quiet = logging.INFO if label.startswith(("offlink", "future")) else logging.DEBUG
        assert lines[0].levelno == quiet, (label, lines[0].levelname)


def test_callback_exceptions_do_not_break_discovery(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="zmesh.discovery")

    async def main() -> None:
        mesh = unique_mesh()
        seen = asyncio.Event()

        def explode(advert: PeerAdvert) -> None:
            seen.set()
            raise RuntimeError("boom")

        a = MdnsDiscovery(
            mesh=mesh, node_id="a", incarnation="1", version=1, scope=LOCAL,
            router_port=1000, pub_port=1001, on_peer=explode,
        )
        rb = Recorder()
        b = make(mesh, "b", rb)
        c = make(mesh, "c", Recorder())
        try:
            await a.start()
            await b.start()
            await seen.wait()
            await c.start()
            await until(lambda: a.stats["peers_seen"] == 2, what="a still discovering after a failed callback")
            await rb.wait(lambda: rb.nodes() == {"a", "c"})
        finally:
            await asyncio.gather(a.close(), b.close(), c.close())

    run(main())
    assert any("on_peer callback failed" in r.getMessage() for r in caplog.records)


def test_close_is_idempotent_and_leaves_no_threads() -> None:
    before = set(threading.enumerate())

    async def main() -> None:
        rec = Recorder()
        never_started = make(unique_mesh(), "idle", rec)
        await never_started.close()
        await never_started.close()
        with pytest.raises(RuntimeError):
            await never_started.start()
        d = make(unique_mesh(), "closer", rec)
        await d.start()
        with pytest.raises(RuntimeError):
            await d.start()
        await asyncio.gather(d.close(), d.close())
        await d.close()
        await d.refresh()  # no-op after close

    run(main())
    assert set(threading.enumerate()) == before


def test_refresh_rebrowses_without_duplicate_reports() -> None:
    async def main() -> None:
        mesh = unique_mesh()
        ra, rb = Recorder(), Recorder()
        a, b = make(mesh, "a", ra), make(mesh, "b", rb)
        try:
            await a.start()
            await b.start()
            await asyncio.gather(ra.wait(lambda: len(ra.peers) == 1), rb.wait(lambda: len(rb.peers) == 1))
            await a.refresh()
            c = make(mesh, "c", Recorder())
            await c.start()
            await ra.wait(lambda: ra.nodes() == {"b", "c"})
            await c.close()
            assert len(ra.peers) == 2 and len(rb.peers) == 2
        finally:
            await asyncio.gather(a.close(), b.close())

    run(main())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mesh": "m" * 251}, "mesh is too long"),
        ({"node_id": "n" * 251}, "node is too long"),
        ({"node_id": ""}, "node must be a non-empty string"),
        ({"router_port": 0}, "router_port"),
        ({"pub_port": 70000}, "pub_port"),
        ({"version": -1}, "version"),
    ],
)
def test_constructor_validates(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = dict(
        mesh="m", node_id="n", incarnation="i", version=1, scope=LOCAL,
        router_port=1, pub_port=2, on_peer=lambda advert: None,
    )
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        MdnsDiscovery(**args)  # type: ignore[arg-type]


def test_txt_entries_at_the_limit_are_accepted() -> None:
    d = MdnsDiscovery(
        mesh="m" * 250, node_id="n" * 250, incarnation="i", version=1, scope=LOCAL,
        router_port=1, pub_port=2, on_peer=lambda advert: None,
    )
    assert set(d.txt()) == {"mesh", "node", "inc", "v", "rp", "pp"}


@pytest.mark.parametrize("node_id", ["agent-1", "Planner Agent/ü#2", "x" * 250, "---", "a.b.c"])
def test_instance_label_is_a_valid_unique_dns_label(node_id: str) -> None:
    label = instance_label(node_id, "inc")
    assert 1 <= len(label.encode()) <= 63
    assert all(ch.isascii() and (ch.isalnum() or ch == "-") for ch in label)
    assert not label.startswith("-") and not label.endswith("-")
    assert instance_label(node_id, "inc2") != label
    assert instance_label(node_id + "x", "inc") != label
    assert instance_label(node_id, "inc", "other-mesh") != label


# -- the private zeroconf attributes discovery relies on ---------------------

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="IP_MULTICAST_ALL is Linux's")


@linux_only
def test_zeroconf_still_has_the_sockets_discovery_confines() -> None:
    """The guard for a zeroconf release: ``engine._listen_socket`` and
    ``engine._respond_sockets`` are private; if this fails, zeroconf changed
    them and a local-only node's mDNS may be answered from other interfaces."""

    async def main() -> None:
        d = make(unique_mesh(), "guard", Recorder())
        await d.start()
        try:
            assert d._aiozc is not None
            found = zeroconf_sockets(d._aiozc.zeroconf)
            assert found is not None, f"zeroconf {zeroconf.__version__} renamed its engine's sockets"
            listen, respond = found
            assert respond, "zeroconf has no respond socket for 127.0.0.1"
            for sock in (listen, *respond):
                assert sock.getsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL) == 0
        finally:
            await d.close()

    run(main())


@linux_only
def test_a_zeroconf_without_those_sockets_is_a_warning_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_mdns_sockets, "_warned", False)
    renamed = types.SimpleNamespace(engine=types.SimpleNamespace(listen_socket=None))
    log = logging.getLogger("zmesh.discovery")
    with caplog.at_level(logging.WARNING, logger="zmesh.discovery"):
        confine_to_scope(renamed, LOCAL, log)
        confine_to_scope(renamed, LOCAL, log)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"zeroconf {zeroconf.__version__} has no engine._listen_socket" in warnings[0]


def test_a_resolve_that_raises_is_counted_and_logged_once_never_left_unretrieved(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG, logger="zmesh.discovery")

    async def main() -> None:
        me = make(unique_mesh(), "me", Recorder())
        resolving: list[asyncio.Task[None]] = []

        async def broken_resolve(service_type: str, name: str) -> None:
            if not name.startswith(("p1.", "p2.", "p3.")):
                return  # another run's node on this host, advertised on 127.0.0.1 too: not this test's
            resolving.append(asyncio.current_task())  # type: ignore[arg-type]
            raise RuntimeError(f"zeroconf fell over on {name}")

        monkeypatch.setattr(me, "_resolve", broken_resolve)
        try:
            await me.start()
            for peer in ("p1", "p2", "p3"):
                me._on_state_change(None, me.SERVICE_TYPE, f"{peer}.{me.SERVICE_TYPE}", ServiceStateChange.Added)
            await until(lambda: me.stats["resolve_failed"] == 3, what=f"three failures counted, got {me.stats}")
        finally:
            await me.close()

    run(main())
    said = [r for r in caplog.records if "resolving" in r.getMessage() and "RuntimeError" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG], said


@pytest.mark.parametrize("zeroconf_stopped", [False, True])
def test_a_registration_that_fails_at_start_is_tried_again(
    zeroconf_stopped: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from zeroconf import NotRunningException
    from zeroconf.asyncio import AsyncZeroconf as RealAsyncZeroconf

    failures = [1]
    real_register = RealAsyncZeroconf.async_register_service

    async def flaky_register(self: Any, info: ServiceInfo, *args: Any, **kwargs: Any) -> Any:
        if failures:
            failures.pop()
            if zeroconf_stopped:
                await self.async_close()  # as seen: the instance is not running any more
            raise NotRunningException
        return await real_register(self, info, *args, **kwargs)

    monkeypatch.setattr(RealAsyncZeroconf, "async_register_service", flaky_register)

    async def main() -> None:
        mesh = unique_mesh()
        seen = Recorder()
        me, other = make(mesh, "me", Recorder()), make(mesh, "other", seen)
        try:
            await me.start()
            assert await me.wait_announced()
            await other.start()
            await seen.wait(lambda: "me" in seen.nodes())
        finally:
            await other.close()
            await me.close()

    with caplog.at_level(logging.DEBUG, logger="zmesh.discovery"):
        run(main())
    assert not failures
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_a_question_heard_on_one_interface_does_not_silence_a_node_on_several() -> None:
    """zeroconf skips our query for a second after another querier asked the
    same (RFC 6762 7.3), not knowing on which interface it heard it. A node on
    127.0.0.1 and the LAN so skipped its LAN queries after a 'local' node's, and
    never heard of LAN peers (test_netns_discovery's mixed-scope test, under
    load): a node whose scope spans interfaces is silenced by its own questions only."""
    question = DNSQuestion(SERVICE_TYPE, _TYPE_PTR, _CLASS_IN)

    async def asks_after_hearing_it(scope: InterfaceScope) -> bool:
        aiozc = AsyncZeroconf(interfaces=["127.0.0.1"])
        try:
            zc = aiozc.zeroconf
            # a responder remembers a question only if it has something to answer
            await _register_raw(aiozc, f"asker-{uuid.uuid4().hex[:8]}", {"mesh": unique_mesh()})
            _keep_own_questions(zc, scope)
            heard = DNSOutgoing(_FLAGS_QR_QUERY)
            heard.add_question(question)
            # no await from here on: nobody else's query can come between
            zc.query_handler.async_response([DNSIncoming(heard.packets()[0])], False)
            return bool(generate_service_query(zc, current_time_millis(), {SERVICE_TYPE}, True, None))
        finally:
            await aiozc.async_close()

    assert not run(asks_after_hearing_it(LOCAL)), "one interface: the RFC's suppression stays"
    several = replace(LOCAL, addresses=("127.0.0.1", "192.0.2.1"))  # nothing binds the second here
    assert run(asks_after_hearing_it(several))
