"""A small network-namespace lab for multi-host tests on one machine.

Every "host" is a network namespace with ``lo`` up and one veth interface per
attached bridge (``eth0``, ``eth1``...).  Every bridge lives in a namespace of
its own, so nothing is ever attached to the machine's real interfaces and all
traffic stays inside namespaces this lab created.  Bridge ``k`` uses the
private subnet ``10.231.<k+1>.0/24`` (only ever configured inside the lab's
namespaces); hosts get ``.11``, ``.12``... on it.  Multicast (mDNS) works
across a bridge: snooping is off so the bridge floods it, and every host has
a 224.0.0.0/4 route on its first interface.

Namespaces are named ``zm<pid>t<n>h<i>`` / ``zm<pid>t<n>b<k>``, unique per
lab; :meth:`NetnsLab.close` kills the lab's processes and deletes its
namespaces, and the :func:`netns_lab` fixture always calls it, even when the
test fails.  Namespaces left behind by a killed test session (whose pid is
gone) are removed when the next lab starts.

Usage (in a test module)::

    from tests.netns import netns_lab  # noqa: F401  (pytest fixture)

    def test_x(netns_lab: NetnsLab) -> None:
        h1, h2 = netns_lab.add_hosts(2)
        proc = netns_lab.run(h1, [sys.executable, "-c", "..."])
"""

from __future__ import annotations

import ipaddress
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

__all__ = ["Bridge", "Child", "Host", "Iface", "NetnsLab", "netns_lab", "netns_unavailable"]

REPO_ROOT = Path(__file__).resolve().parent.parent
_STALE = re.compile(r"^zm(\d+)t\d+[hb]\d+$")
_CUT_TABLE = "zmesh_lab_cut"
_lab_counter = 0
_unavailable: str | None | bool = False  # False: not probed yet


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS``; raise RuntimeError with stderr on failure."""
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def netns_unavailable() -> str | None:
    """Why namespaces cannot be used here (None when they can); probed once."""
    global _unavailable
    if _unavailable is not False:
        return _unavailable if isinstance(_unavailable, str) else None
    reason: str | None = None
    if not sys.platform.startswith("linux"):
        reason = "network namespaces need Linux"
    elif os.geteuid() != 0:
        reason = "network namespaces need root"
    elif shutil.which("ip") is None:
        reason = "iproute2 ('ip') is not installed"
    else:
        probe = f"zm{os.getpid()}probe"
        result = _ip("netns", "add", probe, check=False)
        if result.returncode != 0:
            reason = f"'ip netns add' failed: {result.stderr.strip()}"
        else:
            _ip("netns", "del", probe, check=False)
    _unavailable = reason
    return reason


def _remove_stale_namespaces() -> None:
    """Delete lab namespaces whose creating process no longer exists."""
    listing = _ip("netns", "list", check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _STALE.match(name)
        if match and int(match.group(1)) != os.getpid() and not Path(f"/proc/{match.group(1)}").exists():
            _ip("netns", "del", name, check=False)


@dataclass
class Bridge:
    """An L2 segment: a Linux bridge ``br0`` in its own namespace."""

    ns: str
    network: ipaddress.IPv4Network
    next_host: int = 11


@dataclass(frozen=True)
class Iface:
    """One interface of a host, attached to a bridge."""

    name: str
    address: str
    bridge: Bridge


@dataclass
class Host:
    """A namespace acting as one machine."""

    name: str
    ns: str
    ifaces: list[Iface] = field(default_factory=list)

    @property
    def address(self) -> str:
        """Address of the first interface."""
        return self.ifaces[0].address

    def address_on(self, bridge: Bridge) -> str:
        """This host's address on ``bridge``."""
        for iface in self.ifaces:
            if iface.bridge is bridge:
                return iface.address
        raise KeyError(f"{self.name} is not attached to bridge {bridge.ns}")


@dataclass
class Child:
    """A process running inside a host, with its stdout collected as lines."""

    host: Host
    proc: subprocess.Popen[bytes]
    stderr_path: Path
    lines: list[str] = field(default_factory=list)
    _buffer: bytes = b""

    def stderr(self) -> str:
        """Everything the process wrote to stderr so far."""
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def send(self, line: str) -> None:
        """Write one line to the child's stdin (if it was started with stdin)."""
        assert self.proc.stdin is not None, "child was started without stdin=True"
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def _feed(self, data: bytes) -> None:
        """Append raw output, splitting complete lines."""
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        self.lines.extend(part.decode(errors="replace") for part in complete)


class NetnsLab:
    """Builds hosts, bridges and processes in namespaces; :meth:`close` undoes all."""

    def __init__(self) -> None:
        """Reserve a unique name prefix; nothing is created yet."""
        global _lab_counter
        _lab_counter += 1
        self.prefix = f"zm{os.getpid()}t{_lab_counter}"
        self.bridges: list[Bridge] = []
        self.hosts: list[Host] = []
        self.children: list[Child] = []
        self._namespaces: list[str] = []
        self._tmp = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        _remove_stale_namespaces()

    # -- topology -------------------------------------------------------------
    def _add_ns(self, name: str) -> str:
        _ip("netns", "add", name)
        self._namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")
        return name

    def add_bridge(self) -> Bridge:
        """Create a new L2 segment with its own 10.231.<k>.0/24 subnet."""
        k = len(self.bridges)
        ns = self._add_ns(f"{self.prefix}b{k}")
        _ip("-n", ns, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
        _ip("-n", ns, "link", "set", "br0", "up")
        bridge = Bridge(ns=ns, network=ipaddress.IPv4Network(f"10.231.{k + 1}.0/24"))
        self.bridges.append(bridge)
        return bridge

    @property
    def default_bridge(self) -> Bridge:
        """The first bridge, created on demand."""
        return self.bridges[0] if self.bridges else self.add_bridge()

    def add_host(self, bridges: Sequence[Bridge] | None = None) -> Host:
        """Create a host attached to ``bridges`` (default: the first bridge), in order."""
        i = len(self.hosts)
        host = Host(name=f"h{i}", ns=self._add_ns(f"{self.prefix}h{i}"))
        self.hosts.append(host)
        for j, bridge in enumerate(bridges if bridges is not None else [self.default_bridge]):
            self.attach(host, bridge, ifname=f"eth{j}")
        return host

    def add_hosts(self, n: int, bridge: Bridge | None = None) -> list[Host]:
        """Create ``n`` hosts on one bridge (default: the first)."""
        return [self.add_host([bridge or self.default_bridge]) for _ in range(n)]

    def attach(self, host: Host, bridge: Bridge, *, ifname: str | None = None) -> Iface:
        """Give ``host`` a new interface on ``bridge`` with the next free address."""
        ifname = ifname or f"eth{len(host.ifaces)}"
        port = f"{host.name}e{len(host.ifaces)}"
        address = str(bridge.network.network_address + bridge.next_host)
        bridge.next_host += 1
        _ip("-n", bridge.ns, "link", "add", port, "type", "veth", "peer", "name", ifname, "netns", host.ns)
        _ip("-n", bridge.ns, "link", "set", port, "master", "br0", "up")
        _ip("-n", host.ns, "addr", "add", f"{address}/{bridge.network.prefixlen}", "dev", ifname)
        _ip("-n", host.ns, "link", "set", ifname, "multicast", "on", "up")
        iface = Iface(name=ifname, address=address, bridge=bridge)
        host.ifaces.append(iface)
        if len(host.ifaces) == 1:
            self._multicast_route(host)
        return iface

    def _multicast_route(self, host: Host) -> None:
        """(Re)install the 224.0.0.0/4 route on the host's first interface."""
        _ip("-n", host.ns, "route", "replace", "224.0.0.0/4", "dev", host.ifaces[0].name)

    # -- faults ---------------------------------------------------------------
    def link_down(self, host: Host, ifname: str | None = None) -> None:
        """Take one interface of ``host`` down (default: its first)."""
        _ip("-n", host.ns, "link", "set", ifname or host.ifaces[0].name, "down")

    def link_up(self, host: Host, ifname: str | None = None) -> None:
        """Bring an interface back up (and restore the multicast route)."""
        name = ifname or host.ifaces[0].name
        _ip("-n", host.ns, "link", "set", name, "up")
        if name == host.ifaces[0].name:
            self._multicast_route(host)

    def _nft(self, host: Host, script: str) -> None:
        if shutil.which("nft") is None:
            pytest.skip("nftables ('nft') is not installed")
        proc = subprocess.run(
            ["ip", "netns", "exec", host.ns, "nft", "-f", "-"],
            input=script, capture_output=True, text=True, timeout=20, check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"nft in {host.ns} failed: {proc.stderr.strip()}")

    def cut(self, host: Host) -> None:
        """Drop all of ``host``'s non-loopback traffic with an nftables rule set."""
        self._nft(
            host,
            f"table inet {_CUT_TABLE} {{\n"
            "  chain input { type filter hook input priority -200; policy drop; iifname \"lo\" accept; }\n"
            "  chain output { type filter hook output priority -200; policy drop; oifname \"lo\" accept; }\n"
            "}\n",
        )

    def restore(self, host: Host) -> None:
        """Undo :meth:`cut`."""
        self._nft(host, f"delete table inet {_CUT_TABLE}\n")

    # Random loss needs neither netem nor nft/iptables (often missing): a
    # classic-BPF program on a clsact qdisc (cls_bpf, direct action) drops a
    # packet when the kernel's per-packet random number is above a threshold
    # ("ld rand"), like iptables' ``-m statistic --mode random``.  Drops are on
    # *ingress* at both ends of the host's veth pair (the host's interface and
    # its port in the bridge namespace), so to both TCP ends they look like
    # packets lost on the wire, not local send errors.
    @staticmethod
    def _tc(ns: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", ns, "tc", *args],
                              capture_output=True, text=True, timeout=20, check=False)

    def _ingress_points(self, host: Host, ifname: str | None) -> list[tuple[str, str]]:
        """(namespace, device) of both ends of one of ``host``'s interfaces."""
        name = ifname or host.ifaces[0].name
        index = next(i for i, iface in enumerate(host.ifaces) if iface.name == name)
        return [(host.ns, name), (host.ifaces[index].bridge.ns, f"{host.name}e{index}")]

    def drop_random(self, host: Host, probability: float, ifname: str | None = None,
                    *, protocol: str = "ip") -> None:
        """Drop each packet on one of ``host``'s links (default: its first) with ``probability``, both ways.

        ``protocol`` is tc's (``ip``: IPv4 only, as iptables would; ``all``:
        ARP too).  ``probability >= 1`` drops everything (a silent cut).
        Replaces an earlier :meth:`drop_random` on that link; undo with
        :meth:`clear_drops`.
        """
        if shutil.which("tc") is None:
            raise RuntimeError("tc (iproute2) is not installed")
        if not probability >= 0.0:
            raise ValueError(f"probability must be >= 0, got {probability}")
        if probability >= 1.0:
            program = "1,6 0 0 2"  # ret TC_ACT_SHOT
        else:
            threshold = min(int((1.0 - probability) * 2**32), 2**32 - 1)
            # ld rand; jge #threshold -> drop; ret TC_ACT_OK ; drop: ret TC_ACT_SHOT
            program = f"4,32 0 0 {0xFFFFF000 + 56},53 0 1 {threshold},6 0 0 2,6 0 0 0"
        self.clear_drops(host, ifname)
        for ns, dev in self._ingress_points(host, ifname):
            for args in (("qdisc", "add", "dev", dev, "clsact"),
                         ("filter", "add", "dev", dev, "ingress", "protocol", protocol, "prio", "1",
                          "bpf", "da", "bytecode", program)):
                proc = self._tc(ns, *args)
                if proc.returncode != 0:
                    raise RuntimeError(f"tc {' '.join(args)} in {ns} failed: {proc.stderr.strip()}")

    def clear_drops(self, host: Host, ifname: str | None = None) -> None:
        """Undo :meth:`drop_random` (a no-op when nothing was installed)."""
        for ns, dev in self._ingress_points(host, ifname):
            self._tc(ns, "qdisc", "del", "dev", dev, "clsact")

    # -- processes --------------------------------------------------------------
    def run(
        self,
        host: Host,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        stdin: bool = False,
    ) -> Child:
        """Start ``argv`` inside ``host`` (``ip netns exec``), collecting stdout lines.

        The environment is ours plus ``env``, with PYTHONPATH pointing at the
        repository and ZMESH_INTERFACES defaulting to the host's addresses.
        """
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), *filter(None, [full_env.get("PYTHONPATH")])]
        )
        full_env["ZMESH_INTERFACES"] = ",".join(iface.address for iface in host.ifaces)
        full_env.update(env or {})
        stderr_path = self._tmp / f"{host.name}-{len(self.children)}.stderr"
        with open(stderr_path, "wb") as stderr:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", host.ns, *argv],
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=full_env,
                cwd=str(REPO_ROOT),
            )
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        child = Child(host=host, proc=proc, stderr_path=stderr_path)
        self.children.append(child)
        return child

    def exec(self, host: Host, argv: Sequence[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside ``host`` to completion (bounded by ``timeout``)."""
        return subprocess.run(
            ["ip", "netns", "exec", host.ns, *argv],
            capture_output=True, text=True, timeout=timeout, check=False, cwd=str(REPO_ROOT),
        )

    def pump(self, timeout: float) -> None:
        """Read whatever the children have written, waiting at most ``timeout``."""
        sel = selectors.DefaultSelector()
        try:
            for child in self.children:
                stream: IO[bytes] | None = child.proc.stdout
                if stream is not None and not stream.closed:
                    sel.register(stream, selectors.EVENT_READ, child)
            if not sel.get_map():
                return
            for key, _ in sel.select(timeout):
                child = key.data
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if data:
                    child._feed(data)
                else:
                    sel.unregister(key.fileobj)
                    assert child.proc.stdout is not None
                    child.proc.stdout.close()
        finally:
            sel.close()

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str = "condition") -> float:
        """Pump children output until ``predicate()``; return the time it took.

        Raises AssertionError (with the children's output) on timeout.
        """
        start = time.monotonic()
        deadline = start + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.describe()}")
            self.pump(min(remaining, 0.1))
        return time.monotonic() - start

    def describe(self) -> str:
        """All children's output, for failure messages."""
        parts = []
        for child in self.children:
            parts.append(
                f"--- {child.host.name} pid={child.proc.pid} rc={child.proc.poll()}\n"
                + "\n".join(child.lines[-50:])
                + f"\n--- stderr:\n{child.stderr()[-3000:]}"
            )
        return "\n".join(parts)

    def stop(self, child: Child, timeout: float = 5.0) -> int:
        """SIGTERM a child, SIGKILL it after ``timeout``, drain its output; return rc."""
        if child.proc.poll() is None:
            child.proc.send_signal(signal.SIGTERM)
            try:
                child.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait(timeout)
        stream = child.proc.stdout
        if stream is not None and not stream.closed:
            while True:
                try:
                    data = os.read(stream.fileno(), 65536)
                except BlockingIOError:
                    break
                if not data:
                    break
                child._feed(data)
            stream.close()
        if child.proc.stdin is not None and not child.proc.stdin.closed:
            try:
                child.proc.stdin.close()
            except BrokenPipeError:
                pass
        return child.proc.returncode

    # -- teardown -----------------------------------------------------------------
    def close(self) -> None:
        """Kill every child and delete every namespace of this lab (idempotent)."""
        for child in self.children:
            try:
                self.stop(child, timeout=3.0)
            except Exception:  # keep tearing down whatever happens
                if child.proc.poll() is None:
                    child.proc.kill()
        for ns in reversed(self._namespaces):
            _ip("netns", "del", ns, check=False)
        self._namespaces.clear()
        shutil.rmtree(self._tmp, ignore_errors=True)


@pytest.fixture
def netns_lab() -> Iterator[NetnsLab]:
    """A fresh :class:`NetnsLab`, skipped when namespaces are unavailable, always torn down."""
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    lab = NetnsLab()
    try:
        yield lab
    finally:
        lab.close()
