"""Real brokers for the transport tests, started by the tests themselves on
127.0.0.1 and a port the server picks (``-p -1``), once per session; a test
that needs one that cannot be had skips, naming the install line."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from . import helpers

__all__ = ["file_url", "nats_url", "start_nats", "mqtt_url", "start_mosquitto", "redis_url", "start_redis", "queued",
           "until_queued"]


class _ServerProcess:
    """A broker the tests started (``self.process``): stopped, or killed."""

    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        """SIGKILL: what it had read and not yet stored or forwarded is gone."""
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()


class NatsServer(_ServerProcess):
    """A nats-server with JetStream, its store and log in ``directory``."""

    def __init__(self, directory: Path, max_payload: int = 2 << 20, jetstream: bool = True, port: int = -1) -> None:
        self.directory, self.max_payload, self.jetstream = directory, max_payload, jetstream
        exe = shutil.which("nats-server") or next((p for p in ("/usr/sbin/nats-server",) if Path(p).exists()), None)
        if exe is None:
            pytest.skip("nats-server is not installed: apt-get install nats-server")
        log = directory / f"nats-server-{time.monotonic_ns()}.log"
        config = directory / "nats-server.conf"
        # Messages as large as a zmesh node's default limit (1 MiB) and its headers: NATS's default is 1 MB.
        config.write_text(f"max_payload: {max_payload}\n")
        self.process = subprocess.Popen(
            [exe, "-a", "127.0.0.1", "-p", str(port), *(["-js", "-sd", str(directory / "store")] if jetstream else []),
             "-l", str(log), "-c", str(config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while True:  # the log says where it listens (it picked the port)
            text = log.read_text(errors="replace") if log.exists() else ""
            hit = re.search(r"Listening for client connections on \S+:(\d+)", text)
            if hit:
                self.url = f"nats://127.0.0.1:{hit.group(1)}"
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"nats-server did not start listening within 15 s:\n{text[-2000:]}")
            time.sleep(0.02)  # a poll of its log, bounded by the deadline

    def restart(self) -> NatsServer:
        """Stop this server and start another on the same port and store."""
        self.stop()
        port = int(self.url.rsplit(":", 1)[1])
        return NatsServer(self.directory, self.max_payload, self.jetstream, port)



class Mosquitto(_ServerProcess):
    """A mosquitto on 127.0.0.1, its config and log in ``directory``. mosquitto
    cannot pick its own TCP port, so it is given a free one (asked of the
    kernel, then closed) and started again on another if that one was taken meanwhile."""

    def __init__(self, directory: Path, port: int = 0, persistent: bool = False) -> None:
        self.directory, self.persistent = directory, persistent
        exe = shutil.which("mosquitto") or next((p for p in ("/usr/sbin/mosquitto",) if Path(p).exists()), None)
        if exe is None:
            pytest.skip("mosquitto is not installed: apt-get install mosquitto")
        for _ in range(5):
            chosen = port or _free_port()
            log = directory / f"mosquitto-{time.monotonic_ns()}.log"
            config = directory / "mosquitto.conf"
            store = directory / "store"
            store.mkdir(exist_ok=True)
            config.write_text(
                f"listener {chosen} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 100000\nset_tcp_nodelay true\n"
                # as root it would run as user mosquitto, which may not write here
                + ("user root\n" if os.geteuid() == 0 else "")
                + (f"persistence true\npersistence_location {store}/\n" if persistent else "persistence false\n")
                + f"log_dest file {log}\nlog_type error\nlog_type warning\nlog_type notice\n")
            self.process = subprocess.Popen([exe, "-c", str(config)], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
            self.url = f"mqtt://127.0.0.1:{chosen}"
            deadline = time.monotonic() + 15
            while True:  # listening once a client can connect
                if self.process.poll() is not None:
                    break  # the port was taken meanwhile: another one
                try:
                    socket.create_connection(("127.0.0.1", chosen), timeout=1).close()
                    return
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"mosquitto did not listen within 15 s: {log.read_text(errors='replace')}")
                time.sleep(0.02)  # a poll of its port, bounded by the deadline
            if port:
                break
        raise RuntimeError("mosquitto did not start (no free port?)")

    def restart(self) -> Mosquitto:
        """Stop this broker (its sessions saved, if persistent) and start another on the same port."""
        self.stop()
        return Mosquitto(self.directory, int(self.url.rsplit(":", 1)[1]), self.persistent)



class RedisServer(_ServerProcess):
    """A redis-server on 127.0.0.1 with an append-only file in ``directory`` (so a
    restart keeps what it had accepted); like mosquitto it is given a free port."""

    def __init__(self, directory: Path, port: int = 0) -> None:
        self.directory = directory
        exe = shutil.which("redis-server") or next(
            (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if Path(p).exists()), None)
        if exe is None:
            pytest.skip("redis-server is not installed: apt-get install redis-server")
        for _ in range(5):
            chosen = port or _free_port()
            log = directory / f"redis-{time.monotonic_ns()}.log"
            self.process = subprocess.Popen(
                [exe, "--bind", "127.0.0.1", "--port", str(chosen), "--dir", str(directory), "--save", "",
                 "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no", "--logfile", str(log),
                 "--protected-mode", "yes"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.url = f"redis://127.0.0.1:{chosen}"
            deadline = time.monotonic() + 15
            while True:  # ready once its log says so (it loads its append-only file first)
                text = log.read_text(errors="replace") if log.exists() else ""
                if "Ready to accept connections" in text:
                    return
                if self.process.poll() is not None:
                    break  # the port was taken meanwhile: another one
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start within 15 s: {text[-2000:]}")
                time.sleep(0.02)  # a poll of its log, bounded by the deadline
            if port:
                break
        raise RuntimeError("redis-server did not start (no free port?)")

    def restart(self) -> RedisServer:
        """Stop this server (its append-only file kept) and start another on the same port."""
        self.stop()
        return RedisServer(self.directory, int(self.url.rsplit(":", 1)[1]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_mosquitto(directory: Path, persistent: bool = False) -> Mosquitto:
    pytest.importorskip("paho.mqtt", reason="paho-mqtt is not installed: pip install 'zmesh-agents[mqtt]'")
    return Mosquitto(directory, persistent=persistent)


@pytest.fixture(scope="session")
def mqtt_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A mosquitto for the session; ``Mesh("mqtt")`` nodes meet there."""
    server = start_mosquitto(tmp_path_factory.mktemp("mqtt"))
    helpers.BROKERS["mqtt"] = server.url
    try:
        yield server.url
    finally:
        helpers.BROKERS.pop("mqtt", None)
        server.stop()


def start_nats(directory: Path) -> NatsServer:
    pytest.importorskip("nats", reason="nats-py is not installed: pip install 'zmesh-agents[nats]'")
    return NatsServer(directory)


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A nats-server for the session; ``Mesh("nats")`` nodes meet there."""
    server = start_nats(tmp_path_factory.mktemp("nats"))
    helpers.BROKERS["nats"] = server.url
    try:
        yield server.url
    finally:
        helpers.BROKERS.pop("nats", None)
        server.stop()


@pytest.fixture(scope="session")
def file_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A directory for the session's file buses; ``Mesh("file")`` makes one per mesh in it."""
    url = tmp_path_factory.mktemp("file-bus").as_uri()
    helpers.BROKERS["file"] = url
    try:
        yield url
    finally:
        helpers.BROKERS.pop("file", None)


def start_redis(directory: Path) -> RedisServer:
    pytest.importorskip("redis", reason="redis-py is not installed: pip install 'zmesh-agents[redis]'")
    return RedisServer(directory)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server for the session; ``Mesh("redis")`` nodes meet there."""
    server = start_redis(tmp_path_factory.mktemp("redis"))
    helpers.BROKERS["redis"] = server.url
    try:
        yield server.url
    finally:
        helpers.BROKERS.pop("redis", None)
        server.stop()


async def queued(kind: str, url: str, mesh: str) -> int:
    """How many messages the broker holds for the mesh (not yet acknowledged)."""
    if kind == "file":
        from urllib.parse import unquote, urlsplit

        base = Path(unquote(urlsplit(url).path))
        bus = base if base.name == mesh else base / mesh
        return len([f for f in bus.glob("agents/*/inbox/*.envelope") if not f.parts[-3].startswith("zmesh.node.")])
    if kind == "redis":
        import redis.asyncio

        async with redis.asyncio.Redis.from_url(url) as client:
            keys = [key async for key in client.scan_iter(match=f"zmesh:{mesh}:q:*")]
            return sum([int(await client.xlen(key)) for key in keys])
    import nats as nats_py

    client = await nats_py.connect(url)
    try:
        info = await client.jsm().stream_info(f"zmesh_{mesh}")
        return int(info.state.messages)
    finally:
        await client.close()


async def until_queued(kind: str, url: str, mesh: str, count: int, within: float, what: str) -> None:
    """Until the broker holds ``count`` messages for the mesh, polled with a deadline."""
    deadline = time.monotonic() + within
    while await queued(kind, url, mesh) != count:
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)
