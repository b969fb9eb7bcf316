"""Orchestrator side: peer processes, broker servers, and the measurements.

Peers run as ``python -m bench.peers <system> <role> <json-args>`` in their
own OS processes. Every wait here has a deadline, and every process started
here is stopped (STOP, then SIGTERM, then SIGKILL) when its ``with`` block
ends, whatever happened inside it.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .control import BenchTimeout, Deadline

__all__ = [
    "BenchTimeout",
    "Peer",
    "PeerFailed",
    "PeerGroup",
    "Server",
    "StreamOutcome",
    "free_port",
    "run_rtt",
    "run_rtt_loaded",
    "run_stream",
    "wait_port",
]

HOST = "127.0.0.1"  # the only address the bench ever talks to
_GRACE = 5.0  # seconds the orchestrator waits beyond a peer's own timeout
_ROOT = str(Path(__file__).resolve().parent.parent)


def _with_parent_death_signal(argv: list[str]) -> list[str]:
    """Prefix *argv* so the server gets SIGTERM if the bench process is killed.

    Uses util-linux ``setpriv --pdeathsig`` where present (Linux); normal
    exits stop servers explicitly. (A server that switches user, like
    mosquitto started as root, loses this safety net.)
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None or not sys.platform.startswith("linux"):
        return argv
    return [setpriv, "--pdeathsig", "TERM", "--", *argv]


class PeerFailed(RuntimeError):
    """A peer process reported an error or died."""


def _tail(f: IO[bytes], limit: int = 600) -> str:
    try:
        f.flush()
        f.seek(0)
        text = f.read().decode(errors="replace").strip()
    except (OSError, ValueError):
        return ""
    return text[-limit:].replace("\n", " | ")


class Peer:
    """One peer process and its line-based control channel."""

    def __init__(self, system: str, role: str, args: dict[str, Any], name: str) -> None:
        self.name = name
        env = dict(os.environ)
        env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the peer
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.peers", system, role, json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            env=env,
            cwd=_ROOT,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._held: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def stderr_tail(self) -> str:
        return _tail(self._stderr)

    def expect(self, word: str, deadline: Deadline) -> dict[str, Any]:
        """Wait for the peer's next ``WORD [json]`` line; raise on ERROR, exit or timeout."""
        for i, held in enumerate(self._held):
            if held.split(" ", 1)[0] == word:
                del self._held[i]
                return self._parse(held)
        while True:
            try:
                line = self._lines.get(timeout=max(0.001, deadline.left()))
            except queue.Empty:
                raise BenchTimeout(f"{self.name}: no {word} in time. {self.stderr_tail()}") from None
            if line is None:
                self._lines.put(None)  # stay at EOF for later calls
                rc = self.proc.wait(timeout=5)
                raise PeerFailed(f"{self.name} exited (rc={rc}) before {word}: {self.stderr_tail()}")
            head = line.split(" ", 1)[0]
            if head == "ERROR":
                raise PeerFailed(f"{self.name}: {line[6:]}")
            if head == word:
                return self._parse(line)
            if head in ("READY", "WARM", "RESULT"):
                self._held.append(line)
            # anything else is stray library output: ignore it

    @staticmethod
    def _parse(line: str) -> dict[str, Any]:
        parts = line.split(" ", 1)
        data = json.loads(parts[1]) if len(parts) > 1 and parts[1].strip() else {}
        if not isinstance(data, dict):
            raise PeerFailed(f"bad control line: {line!r}")
        return data

    def send(self, word: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(word + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # already gone; close() reaps it

    def close(self, grace: float = 5.0) -> None:
        """STOP and close stdin, then escalate to SIGTERM and SIGKILL; always reaps."""
        if self.proc.poll() is None:
            self.send("STOP")
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        for action in (None, self.proc.terminate, self.proc.kill):
            if action is not None:
                action()
            try:
                self.proc.wait(timeout=grace if action is None else 3.0)
                break
            except subprocess.TimeoutExpired:
                continue
        self._stderr.close()


class PeerGroup:
    """Starts peers; on leaving the ``with`` block stops and reaps every one."""

    def __init__(self) -> None:
        self.peers: list[Peer] = []

    def start(self, system: str, role: str, args: dict[str, Any], name: str) -> Peer:
        peer = Peer(system, role, args, name)
        self.peers.append(peer)
        return peer

    def __enter__(self) -> PeerGroup:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        for peer in self.peers:
            peer.send("STOP")
        for peer in self.peers:
            peer.close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, deadline: Deadline, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll until 127.0.0.1:port accepts a connection; fail early if *proc* dies."""
    while True:
        if proc is not None and proc.poll() is not None:
            raise PeerFailed(f"server exited (rc={proc.returncode}) before accepting connections")
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return
        except OSError:
            pass
        deadline.check(f"server on {HOST}:{port} to accept connections")
        time.sleep(0.02)


class Server:
    """A broker binary run on 127.0.0.1:<free port>, with its own temp dir and log."""

    def __init__(self, name: str, binary: str) -> None:
        self.name = name
        self.binary = binary
        self.port = 0
        self.dir = tempfile.TemporaryDirectory(prefix=f"bench-{name}-")
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, argv_for_port: Any, timeout: float = 15.0, attempts: int = 3) -> None:
        """Start ``argv_for_port(port, dir) -> argv``; retry on a new port if it dies."""
        last = ""
        for _ in range(attempts):
            self.port = free_port()
            argv: Sequence[str] = argv_for_port(self.port, Path(self.dir.name))
            self._log = open(Path(self.dir.name) / "server.log", "w+b")  # noqa: SIM115 - closed in stop()
            self.proc = subprocess.Popen(
                _with_parent_death_signal(list(argv)),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self.dir.name,
            )
            try:
                wait_port(self.port, Deadline(timeout), self.proc)
                return
            except (PeerFailed, BenchTimeout) as exc:
                last = f"{exc}: {_tail(self._log)}"
                self.stop()
        raise PeerFailed(f"{self.name} did not start: {last}")

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        self.stop()
        self.dir.cleanup()


@dataclass(frozen=True)
class StreamOutcome:
    """Result of one stream run: *delivered* envelopes in *elapsed* seconds."""

    delivered: int
    elapsed: float

    @property
    def rate(self) -> float:
        return self.delivered / self.elapsed


def run_stream(
    system: str, args: dict[str, Any], n: int, sinks: int, warmup: int, timeout: float
) -> StreamOutcome:
    """One sender, *sinks* receivers, n data envelopes each receiver must get.

    Elapsed time runs from the sender's clock just before its first data
    envelope to the last receiver's clock at its n-th data envelope, or to
    the sender's clock when every message it sent was acknowledged
    (``t_acked``, QoS 1 senders), whichever is later.
    """
    deadline = Deadline(timeout + _GRACE)  # peers give up first and report what they have
    common = dict(args, n=n, warmup=warmup, timeout=timeout)
    with PeerGroup() as group:
        rx = [group.start(system, "sink", dict(common, index=i), f"{system} sink {i}") for i in range(sinks)]
        tx = group.start(system, "source", common, f"{system} source")  # starts up meanwhile
        tx.send("PEERS " + json.dumps([p.expect("READY", deadline) for p in rx]))
        tx.expect("READY", deadline)
        for p in rx:
            p.expect("WARM", deadline)
        tx.send("GO")
        sent = tx.expect("RESULT", deadline)
        t0 = float(sent["t0"])
        results = [p.expect("RESULT", deadline) for p in rx]
    short = [r["count"] for r in results if r["count"] < n or r["t_last"] is None]
    if short:
        raise PeerFailed(f"receivers got {short} of {n} data envelopes")
    t_end = max(float(r["t_last"]) for r in results)
    if sent.get("t_acked") is not None:
        t_end = max(t_end, float(sent["t_acked"]))
    return StreamOutcome(delivered=n * sinks, elapsed=t_end - t0)


def run_rtt(system: str, args: dict[str, Any], n: int, warmup: int, timeout: float) -> dict[str, Any]:
    """An echo server and one client doing warmup + n awaited round trips."""
    deadline = Deadline(timeout + _GRACE)  # peers give up first and report what they have
    common = dict(args, n=n, warmup=warmup, timeout=timeout)
    with PeerGroup() as group:
        server = group.start(system, "echo", common, f"{system} echo")
        client = group.start(system, "client", common, f"{system} client")  # starts up meanwhile
        client.send("PEERS " + json.dumps(server.expect("READY", deadline)))
        return client.expect("RESULT", deadline)


def run_rtt_loaded(system: str, args: dict[str, Any], n: int, warmup: int, timeout: float) -> dict[str, Any]:
    """:func:`run_rtt` while a ``flooder`` peer floods the echo server's node.

    The echo peer gets ``args["workload"] == "rtt-loaded"`` and hosts a sink
    for the flood beside the echo agent (it names that sink ``flood_agent``
    in its READY); the flooder joins it, starts at GO and says WARM once it
    is flooding; only then does the client join and do its warmup + n round
    trips. The flooder reports at STOP what it sent: the result is the
    client's, with ``flood_rate`` (msgs/s the node took meanwhile) added.
    """
    deadline = Deadline(timeout + _GRACE)
    common = dict(args, n=n, warmup=warmup, timeout=timeout)
    with PeerGroup() as group:
        server = group.start(system, "echo", common, f"{system} echo")
        flooder = group.start(system, "flooder", common, f"{system} flooder")
        client = group.start(system, "client", common, f"{system} client")  # starts up meanwhile
        info = server.expect("READY", deadline)
        flooder.send("PEERS " + json.dumps([info]))
        flooder.expect("READY", deadline)
        flooder.send("GO")
        flooder.expect("WARM", deadline)
        client.send("PEERS " + json.dumps(info))
        res = client.expect("RESULT", deadline)
        flooder.send("STOP")
        flood = flooder.expect("RESULT", deadline)
    return dict(res, flood_rate=float(flood["rate"]), flood_sent=int(flood["sent"]))
