"""Two LANs joined through a NATS server, as issue 23 asks: every LAN a
bridge of its own, a nats-server on a third (the "WAN") in a namespace of
its own, and ``zmesh gateway`` processes on hosts with a leg in a LAN and a
leg in the WAN. LAN 1 runs two gateways (one leads, one stands by), LAN 2
one. An agent on each LAN (``tests._netns_node``, mDNS on its LAN only)
reaches the other through both gateways and the server; the leading
gateway of LAN 1 is killed and the standby takes over; a gateway stopped
with SIGTERM takes its proxies with it. All traffic stays inside the lab's
namespaces."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.netns import Child, Host, NetnsLab
from tests.test_netns_mesh import MeshNode, stop_all, watch

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

JOIN_DEADLINE = 30.0  # two mDNS meshes, two gateways' proxies on each side
TAKEOVER_DEADLINE = 30.0


def _nats_server(lab: NetnsLab, host: Host, directory: Path) -> str:
    """A nats-server with JetStream on ``host``'s WAN address (a port it picks); its URL."""
    exe = shutil.which("nats-server") or next((p for p in ("/usr/sbin/nats-server",) if Path(p).exists()), None)
    if exe is None:
        pytest.skip("nats-server is not installed: apt-get install nats-server")
    log = directory / "nats-server.log"
    child = lab.run(host, [exe, "-a", host.address, "-p", "-1", "-js", "-sd", str(directory / "store"),
                           "-l", str(log)])
    deadline = time.monotonic() + 15
    while True:  # the log says where it listens
        text = log.read_text(errors="replace") if log.exists() else ""
        hit = re.search(r"Listening for client connections on \S+:(\d+)", text)
        if hit:
            return f"nats://{host.address}:{hit.group(1)}"
        assert child.proc.poll() is None and time.monotonic() < deadline, f"nats-server did not start:\n{text}"
        lab.pump(0.05)  # a bounded poll of its log


class GatewayProcess:
    """One ``zmesh gateway`` child between a LAN (its first leg) and the NATS server."""

    def __init__(self, lab: NetnsLab, host: Host, mesh: str, wan_mesh: str, nats: str, domain: str,
                 name: str) -> None:
        self.lab, self.name = lab, name
        lan = host.ifaces[0].address
        self.child: Child = lab.run(host, [
            sys.executable, "-m", "zmesh", "gateway", "--mesh", mesh, "--interfaces", lan, "--insecure",
            "--to", nats, "--to-mesh", wan_mesh, "--domain", domain, "--name", name,
        ], env={"ZMESH_INTERFACES": lan})

    def line(self) -> dict[str, Any]:
        """Its one JSON line (waited for)."""
        self.lab.wait_until(lambda: bool(self.child.lines), 30, f"{self.name}'s line")
        line = json.loads(self.child.lines[0])
        assert isinstance(line, dict)
        return line


def _reaches(lab: NetnsLab, asker: MeshNode, target: MeshNode, within: float) -> tuple[float, dict[str, Any]]:
    """Seconds until ``asker``'s whoami to ``target`` is answered (failed tries retried until then), and the answer."""
    started = time.monotonic()
    outcome: dict[str, Any] = {}
    while time.monotonic() - started < within:
        outcome = asker.call(target.name, "whoami", timeout=2)
        if outcome["ok"]:
            return time.monotonic() - started, outcome["payload"]
    raise AssertionError(f"{target.name} never answered {asker.name}: {outcome}\n{lab.describe()}")


@dataclass
class TwoLans:
    """Alice on LAN 1 (gateways g1a, leading, and g1b), Bob on LAN 2 (gateway g2), a nats-server between."""

    lab: NetnsLab
    alice: MeshNode
    bob: MeshNode
    g1a: GatewayProcess
    g1b: GatewayProcess
    g2: GatewayProcess
    leader: dict[str, Any]
    standby: dict[str, Any]
    hosts: dict[str, Host]


def _two_lans(lab: NetnsLab, directory: Path) -> TwoLans:
    lan1, lan2, wan = lab.add_bridge(), lab.add_bridge(), lab.add_bridge()
    nats_host = lab.add_host([wan])
    host_a, host_b = lab.add_host([lan1]), lab.add_host([lan2])
    g1a_host, g1b_host, g2_host = lab.add_host([lan1, wan]), lab.add_host([lan1, wan]), lab.add_host([lan2, wan])
    nats = _nats_server(lab, nats_host, directory)
    stem = f"ns-{uuid.uuid4().hex[:8]}"
    alice = MeshNode(lab, host_a, f"{stem}-1", "alice", extra=["--liveness", "default"])
    bob = MeshNode(lab, host_b, f"{stem}-2", "bob", extra=["--liveness", "default"])
    g1a = GatewayProcess(lab, g1a_host, f"{stem}-1", f"{stem}-wan", nats, "lan1", "g1a")
    leader = g1a.line()
    assert leader["active"] is True and leader["domains"] == ["lan1", "nats"], leader
    g1b = GatewayProcess(lab, g1b_host, f"{stem}-1", f"{stem}-wan", nats, "lan1", "g1b")
    standby = g1b.line()
    assert standby["active"] is False, standby
    g2 = GatewayProcess(lab, g2_host, f"{stem}-2", f"{stem}-wan", nats, "lan2", "g2")
    assert g2.line()["active"] is True
    took = lab.wait_until(lambda: alice.knows(["bob"]) and bob.knows(["alice"]), JOIN_DEADLINE,
                          "each LAN to see the other's agent")
    print(f"\nagents of two LANs known on the other {took:.2f} s after the last gateway's line")
    assert alice.agents()["bob"] == leader["node"], alice.agents()
    return TwoLans(lab, alice, bob, g1a, g1b, g2, leader, standby,
                   {"a": host_a, "b": host_b, "g1a": g1a_host, "g1b": g1b_host, "g2": g2_host})


def _both_ways(lans: TwoLans, within: float, since: float) -> tuple[float, float]:
    """Seconds after ``since`` until alice reached bob, and bob alice, through the gateways."""
    _, answer = _reaches(lans.lab, lans.alice, lans.bob, within)
    assert answer["node"] == "bob" and answer["addresses"] == [lans.hosts["b"].address]
    alice_took = time.monotonic() - since
    _, answer = _reaches(lans.lab, lans.bob, lans.alice, within)
    assert answer["node"] == "alice" and answer["addresses"] == [lans.hosts["a"].address]
    return alice_took, time.monotonic() - since


def test_agents_on_two_lans_reach_each_other_through_nats_and_a_standby_gateway_takes_over(
    netns_lab: NetnsLab, tmp_path: Path
) -> None:
    lab = netns_lab
    lans = _two_lans(lab, tmp_path)
    alice, bob = lans.alice, lans.bob
    _, answer = _reaches(lab, alice, bob, 15)
    assert answer["sender"] == "alice"
    _, answer = _reaches(lab, bob, alice, 15)
    assert answer["sender"] == "bob"
    _both_ways(lans, 15, time.monotonic())
    # A handler that makes requests of its own, across both gateways.
    outcome = alice.call("alice", "ask", {"targets": ["bob"], "timeout": 5}, timeout=10)
    assert outcome["ok"] and outcome["payload"][0]["node"] == "bob", outcome

    killed = time.monotonic()
    lans.g1a.child.proc.kill()  # no goodbye: the standby has to notice
    lans.g1a.child.proc.wait(5)
    alice_again, bob_again = _both_ways(lans, TAKEOVER_DEADLINE, killed)
    lab.wait_until(lambda: alice.agents().get("bob") == lans.standby["node"], 10, "bob's proxy on the standby")
    print(f"after a kill -9 of LAN 1's leading gateway: alice reached bob again {alice_again:.2f} s later, "
          f"bob reached alice {bob_again:.2f} s later")

    lans.g1b.child.proc.send_signal(signal.SIGTERM)
    assert lab.stop(lans.g1b.child, timeout=15) == 143
    lab.wait_until(lambda: "bob" not in alice.agents() and "alice" not in bob.agents(), 15,
                   "the proxies to leave with the last gateway of LAN 1")
    assert lab.stop(lans.g2.child, timeout=15) == 143
    stop_all(lab, [alice, bob])


def test_a_leading_gateway_cut_off_from_nats_hands_over_to_the_standby(netns_lab: NetnsLab, tmp_path: Path) -> None:
    """Half dead: its LAN leg is up (its lock and proxies stay in LAN 1), its WAN leg silently down."""
    lab = netns_lab
    lans = _two_lans(lab, tmp_path)
    _both_ways(lans, 15, time.monotonic())
    cut = time.monotonic()
    lab.link_down(lans.hosts["g1a"], "eth1")  # its WAN leg, without a word
    alice_again, bob_again = _both_ways(lans, TAKEOVER_DEADLINE, cut)
    lab.wait_until(lambda: lans.alice.agents().get("bob") == lans.standby["node"], 10,
                   "bob's proxy on the standby")
    print(f"after LAN 1's leading gateway lost its WAN leg: alice reached bob again {alice_again:.2f} s later, "
          f"bob reached alice {bob_again:.2f} s later")
    lab.link_up(lans.hosts["g1a"], "eth1")
    # Back, it stays the standby: the lead does not flap back.
    back = time.monotonic()
    _both_ways(lans, 15, back)
    watch(lab, 3.0, lambda: "" if lans.alice.agents().get("bob") == lans.standby["node"]
          else f"bob's proxy moved to {lans.alice.agents().get('bob')}")
    assert lans.g1a.child.proc.poll() is None, "the cut-off gateway is still running"
    for gateway in (lans.g1a, lans.g1b, lans.g2):
        assert lab.stop(gateway.child, timeout=15) == 143
    stop_all(lab, [lans.alice, lans.bob])
