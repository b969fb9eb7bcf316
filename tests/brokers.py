"""Real brokers for the transport tests, started by the tests themselves on
127.0.0.1 and a port the server picks (``-p -1``), once per session; a test
that needs one that cannot be had skips, naming the install line."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from . import helpers

__all__ = ["nats_url", "start_nats"]


class NatsServer:
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
            self.process.kill()
            self.process.wait(10)


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
