"""Fault injection with real processes (bench/faults.py): a cut link loses nothing at QoS 1.

A sender and a receiver process on two lab hosts (tests/netns.py); the
receiver's link is cut (every packet dropped, both ways) for 10 s while
300 numbered messages stream at QoS 1, then restored.  Every message must
be handled.  Until this zmesh has QoS 1 (``Node.wait_acked``) the messages
sent into the cut are lost and the test is an expected failure; it starts
asserting by itself once the API is there.  The whole table (every fault,
every QoS level) is ``python -m bench.faults``; see docs/reliability.md.
"""

from __future__ import annotations

import shutil

import pytest

import zmesh
from bench.faults import Params, run_one
from tests.netns import NetnsLab

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]

HAS_QOS1 = hasattr(zmesh.Node, "wait_acked")


@pytest.mark.xfail(not HAS_QOS1, reason="needs QoS 1", strict=False)
def test_cut_link_loses_nothing_at_qos1(netns_lab: NetnsLab) -> None:
    if shutil.which("tc") is None:
        pytest.skip("tc (iproute2) is not installed")
    params = Params(count=300, rate=20.0, ttl=60.0, fault_at=0.1, cut_for=10.0)
    result = run_one(netns_lab, "cut", 1, params, say=print)
    print(result)
    assert result.sent == params.count, result
    assert not [n for n in result.notes if n.startswith("timed out")], result.notes
    assert result.lost == 0, result
