"""The interface every benchmarked system implements.

A system has two halves:

* the orchestrator half, a :class:`System` subclass: availability check,
  server start/stop, and the workloads (:data:`WORKLOADS`; each returns
  ``None`` when the workload does not apply to the system);
* the peer half, a module-level ``peer(role, args, ctl)`` function in the
  same module, run inside ``python -m bench.peers <key> <role> <json>``.

:class:`PeerSystem` wires the three workloads to the shared harness
(:func:`bench.harness.run_stream` and :func:`bench.harness.run_rtt`), so a
new system usually only writes ``available``, maybe ``setup``/``teardown``
and ``peer_args``, and the peer roles ``sink``, ``source``, ``echo`` and
``client`` (see ``bench/README.md``).
"""

from __future__ import annotations

import shutil
from abc import ABC
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..harness import Server, run_rtt, run_rtt_loaded, run_stream
from ..roles import INFLIGHT

__all__ = ["BASIC", "PAYLOADS", "WORKLOADS", "BrokerSystem", "PeerSystem", "Sizes", "System", "binary_available"]

#: The three workloads of the main table, in table order.
BASIC = ("throughput", "rtt", "fanout")
#: Payload workloads: name -> envelope size in bytes (one-way, as ``throughput``).
PAYLOADS = {"payload-64k": 64 * 1024, "payload-1m": 1 << 20}
#: Every workload name, in table order: the main three, then
#: ``paced`` (one-way, the sender yields to its event loop after every send),
#: ``inflight64`` (requests/s with 64 outstanding), the payload sizes and
#: ``rtt-loaded`` (RTT while a second sender floods the echo server's node).
WORKLOADS = (*BASIC, "paced", "inflight64", *PAYLOADS, "rtt-loaded")


@dataclass(frozen=True)
class Sizes:
    """Message counts and timeouts for one bench run."""

    throughput_n: int
    rtt_n: int
    fanout_n: int  # data envelopes per subscriber
    subscribers: int = 4
    warmup: int = 2000  # envelopes each receiver sees before measuring
    rtt_warmup: int = 500  # round trips before measuring
    timeout: float = 120.0  # hard limit for one workload run, seconds
    repeat: int = 1  # runs per workload; the table shows the median
    paced_n: int = 5000  # one-way envelopes, each sent alone
    inflight_n: int = 10000  # requests, 64 outstanding
    payload_64k_n: int = 2000  # 64 KiB envelopes
    payload_1m_n: int = 200  # 1 MiB envelopes

    def count(self, workload: str) -> int:
        """The message count of *workload* (round trips for the RTT workloads)."""
        return int({
            "throughput": self.throughput_n, "rtt": self.rtt_n, "fanout": self.fanout_n,
            "paced": self.paced_n, "inflight64": self.inflight_n, "payload-64k": self.payload_64k_n,
            "payload-1m": self.payload_1m_n, "rtt-loaded": self.rtt_n,
        }[workload])  # fmt: skip


class System(ABC):
    """Orchestrator half of a benchmarked system."""

    #: Short id used by ``--systems`` and by ``python -m bench.peers``.
    key: ClassVar[str]
    #: Human label for the table and chart.
    label: ClassVar[str]
    #: Extra words shown under the table (e.g. "fan-out uses PUB/SUB").
    notes: ClassVar[str] = ""

    def __init__(self, sizes: Sizes) -> None:
        self.sizes = sizes

    @property
    def name(self) -> str:
        return self.key

    def available(self) -> tuple[bool, str]:
        """Whether this system can run here; the note says why not (one line)."""
        return True, ""

    def setup(self) -> None:
        """Start whatever server the system needs (bind 127.0.0.1 only)."""

    def teardown(self) -> None:
        """Stop what :meth:`setup` started. Must be safe to call twice."""

    def versions(self) -> dict[str, str]:
        """Client/server versions to record in results.json."""
        return {}

    def throughput(self, n: int) -> float | None:
        """One-way msgs/s from one sender process to one receiver process."""
        return None

    def rtt(self, n: int) -> tuple[float, float] | None:
        """(p50, p99) round-trip time in microseconds over n awaited requests."""
        return None

    def fanout(self, n: int, subscribers: int = 4) -> float | None:
        """Deliveries/s: one publisher, n messages to each of *subscribers* processes."""
        return None

    def paced(self, n: int) -> float | None:
        """One-way msgs/s when the sender yields to its event loop after every send."""
        return None

    def inflight(self, n: int, window: int = INFLIGHT) -> float | None:
        """Requests/s over n requests with *window* outstanding."""
        return None

    def payload(self, n: int, workload: str) -> float | None:
        """One-way msgs/s of n envelopes of ``PAYLOADS[workload]`` bytes."""
        return None

    def rtt_loaded(self, n: int) -> tuple[float, float] | None:
        """(p50, p99) RTT in microseconds while another sender floods the echo server's node."""
        return None

    def measure(self, workload: str, n: int) -> Any:
        """One run of *workload* with count *n*: a rate, a (p50, p99) pair, or None."""
        if workload == "throughput":
            return self.throughput(n)
        if workload == "rtt":
            return self.rtt(n)
        if workload == "fanout":
            return self.fanout(n, self.sizes.subscribers)
        if workload == "paced":
            return self.paced(n)
        if workload == "inflight64":
            return self.inflight(n)
        if workload in PAYLOADS:
            return self.payload(n, workload)
        if workload == "rtt-loaded":
            return self.rtt_loaded(n)
        raise ValueError(f"unknown workload {workload!r}")


class PeerSystem(System):
    """A :class:`System` whose workloads run through the shared peer harness.

    Subclasses list what they support in ``supports`` and give the
    connection details their peers need in :meth:`peer_args`.
    """

    supports: ClassVar[frozenset[str]] = frozenset(BASIC)

    def peer_args(self, workload: str) -> dict[str, Any]:
        """JSON-able arguments passed to every peer of *workload*."""
        return {"workload": workload}

    def _timeout(self, n: int) -> float:
        # bounded: a floor for process start-up plus 1 ms per message, capped
        return min(self.sizes.timeout, 20.0 + n / 1000.0)

    def throughput(self, n: int) -> float | None:
        if "throughput" not in self.supports:
            return None
        out = run_stream(self.key, self.peer_args("throughput"), n, 1, self.sizes.warmup, self._timeout(n))
        return out.rate

    def rtt(self, n: int) -> tuple[float, float] | None:
        if "rtt" not in self.supports:
            return None
        res = run_rtt(self.key, self.peer_args("rtt"), n, self.sizes.rtt_warmup, self._timeout(n * 5))
        return float(res["p50_us"]), float(res["p99_us"])

    def fanout(self, n: int, subscribers: int = 4) -> float | None:
        if "fanout" not in self.supports:
            return None
        args = self.peer_args("fanout")
        out = run_stream(self.key, args, n, subscribers, self.sizes.warmup, self._timeout(n * subscribers))
        return out.rate

    def paced(self, n: int) -> float | None:
        if "paced" not in self.supports:
            return None
        out = run_stream(self.key, self.peer_args("paced"), n, 1, self.sizes.warmup, self._timeout(n * 4))
        return out.rate

    def inflight(self, n: int, window: int = INFLIGHT) -> float | None:
        if "inflight64" not in self.supports:
            return None
        args = dict(self.peer_args("inflight64"), window=window)
        res = run_rtt(self.key, args, n, self.sizes.rtt_warmup, self._timeout(n))
        return float(res["rate"])

    def payload(self, n: int, workload: str) -> float | None:
        if workload not in self.supports:
            return None
        size = PAYLOADS[workload]
        args = dict(self.peer_args(workload), size=size)
        warmup = min(self.sizes.warmup, 500)  # small envelopes: they warm the connection, not the memory
        out = run_stream(self.key, args, n, 1, warmup, self._timeout(n * max(1, size // 2048)))
        return out.rate

    def rtt_loaded(self, n: int) -> tuple[float, float] | None:
        if "rtt-loaded" not in self.supports:
            return None
        res = run_rtt_loaded(self.key, self.peer_args("rtt-loaded"), n, self.sizes.rtt_warmup, self._timeout(n * 5))
        return float(res["p50_us"]), float(res["p99_us"])


class BrokerSystem(PeerSystem):
    """A :class:`PeerSystem` whose peers talk through a broker the bench starts.

    Subclasses name the client module (``client``, ``client_pip``) and the
    server binary (``binary``, ``binary_apt``) and say how to start it on a
    port in :meth:`server_argv`; availability, start and stop are shared.
    """

    client: ClassVar[str]
    client_pip: ClassVar[str]
    binary: ClassVar[str]
    binary_apt: ClassVar[str]

    _server: Server | None = None
    _binary = ""

    def available(self) -> tuple[bool, str]:
        ok, note = module_available(self.client, self.client_pip)
        if not ok:
            return ok, note
        ok, path = binary_available(self.binary, self.binary_apt)
        self._binary = path if ok else ""
        return ok, "" if ok else path

    def server_argv(self, port: int, tmp: Path) -> list[str]:
        """The command line that starts the server on 127.0.0.1:*port* (files go in *tmp*)."""
        raise NotImplementedError

    def setup(self) -> None:
        self._server = Server(self.binary, self._binary)
        self._server.start(self.server_argv)

    def teardown(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


def binary_available(binary: str, apt_package: str) -> tuple[bool, str]:
    """``(True, path)`` if *binary* is on PATH (or in /usr/sbin), else an install hint."""
    path = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/local/sbin:/sbin")
    if path:
        return True, path
    return False, f"{binary} not installed: apt-get install {apt_package}"


def module_available(module: str, pip_package: str) -> tuple[bool, str]:
    """``(True, "")`` if *module* imports, else an install hint."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        return False, f"{module} not importable: pip install {pip_package}"
    return True, ""
