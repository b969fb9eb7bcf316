"""When a peer counts as silent (the engine alone, on tests/engine_pair.py's
fake network and fake time): what the simulator's heavy-fault seeds found.

A peer is removed, and the requests pending to it fail with ``PeerLost``,
once nothing came from it for ``expire_after`` seconds of the node's own
running time (docs/protocol.md, *Liveness*); time spent waiting on a claim
is no sign of life.
"""

from __future__ import annotations

import pytest

from zmesh._engine import admission
from zmesh._engine import Engine
from zmesh._engine import effects as fx
from zmesh.errors import PeerLost
from zmesh.message import Message

from .engine_pair import LIVENESS, Net, make_engine

pytestmark = pytest.mark.timeout(10)

TICK = LIVENESS.heartbeat / 2  # an engine's liveness timer period


def ask(sender: str, target: str, cid: str = "c1") -> Message:
    return Message(type="task", sender=sender, target=target, topic="work.do", payload=7,
                   correlation_id=cid, reply_to=sender)


def claimed_then_cut() -> tuple[Net, Engine, float]:
    """a and b joined; b restarts, its new run's HELLO reaches a (a claim: a pings the
    old run first), then b is cut off: nothing from the new run, nothing to it.
    Returns the net, a, and when the claim's HELLO arrived."""
    net = Net(make_engine("a", agents=("a1",)), make_engine("b", agents=("b1",)))
    net.connect("a", "b")
    net.advance(5.0)
    a = net.engines["a"]
    net.restart(make_engine("b", inc="0002", agents=("b2",)))
    net.connect("b", "a")
    net.deliver_all()
    hello_at = net.now
    assert a.dropped["claimed_node"] == 1
    net.isolate("b")
    return net, a, hello_at


def test_a_claimant_cut_off_after_its_hello_expires_from_its_hello_not_from_the_claim_window() -> None:
    # zmesh.sim seed 500261 (10 nodes, heavy faults): n8 restarted; n3 read
    # its new HELLO at 21.466 (a claim: n3 pinged the old run first) and took
    # the claim up at 22.466; n8 was cut off from 20.330 to 25.178. n3 counted
    # the new n8 as heard at 22.466, so it outlived the cut, and a request
    # sent to it at 24.495 was lost in the cut and never failed.
    net, a, hello_at = claimed_then_cut()
    window = admission.claim_window(LIVENESS)
    taken = net.advance(hello_at + window + LIVENESS.heartbeat,
                        until=lambda: a.members.peers.get("b") is not None
                        and a.members.peers["b"].incarnation == "0002")
    assert taken is not None and a.members.peers["b"].state == "connecting"
    assert a.members.peers["b"].last_heard == hello_at
    key = net.request("a", ask("a1", "b2"), deadline=taken + 60.0)  # routed to the connecting peer
    assert a.requests.pending[key].node_id == "b"
    gone = net.advance(hello_at + window + LIVENESS.expire_after + LIVENESS.heartbeat,
                       until=lambda: "b" not in a.members.peers)
    assert gone is not None and gone <= hello_at + LIVENESS.expire_after + TICK, (gone, hello_at)
    failed = [s for s in net.effects("a", fx.FAILED) if s.effect[1] == key]
    assert len(failed) == 1 and failed[0].time == gone and isinstance(failed[0].effect[2], PeerLost)


def test_a_claim_kept_through_our_stall_is_not_judged_by_the_stall() -> None:
    # The claim's HELLO came just before our loop froze: the frozen time is
    # neither its silence nor a sign of life (as for a peer: timers.tick's
    # blind shift), so the claimant still gets expire_after of watched time.
    net, a, hello_at = claimed_then_cut()
    net.stalled.add("a")
    stall = 2 * LIVENESS.expire_after
    net.advance(hello_at + stall)
    net.stalled.discard("a")
    woke = net.now
    net.tick("a")  # the tick that finds us just woken judges nobody
    net.advance(woke + 2 * LIVENESS.expire_after)
    assert a.transitions[("joined", "restarted")] == 1  # the claim was taken up ...
    assert a.transitions[("connecting", "silent")] == 1  # ... and the claimant expired, once
    [(gone, left)] = net.events("a", "peer_left", since=hello_at)
    # All of its silence that we watched came after the wake (the claim was
    # taken up a claim window in, which does not count either).
    assert left.node_id == "b"
    assert LIVENESS.expire_after - TICK - 1e-9 <= gone - woke <= LIVENESS.expire_after + TICK + 1e-9, (gone, woke)
