"""A node whose event loop stalls past the expiry rejoins its peer, two-sided.

Two nodes, each in its own OS process (tests/_stall_node.py), joined by a
seed, with a fast application expiry (heartbeat 0.5 s, expiry 3 s; the
defaults keep a stalled peer for 120 s, see tests/test_liveness.py). A handler on B
blocks B's event loop for STALL s, so A expires B meanwhile. Within two
heartbeat periods (plus SLACK) of the stall ending, both must list each other
as peers and in their registries, and requests must work both ways; then the
membership must stay two-sided for STABLE_FOR s, with no more frames dropped
as coming from a node that has not joined.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import zmesh

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parent.parent
LIVENESS = zmesh.LivenessConfig(heartbeat=0.5, evasive_after=1.5, expire_after=3.0)  # _stall_node's "fast"
STALL = 5.0
assert STALL > LIVENESS.expire_after + LIVENESS.heartbeat
# Process scheduling, the 0.1 s snapshot period, the pipes and the two echo
# round trips: 0.07-0.09 s measured after a stall shorter than the expiry (no
# rejoin needed); 1 s leaves >10x that for a loaded CI machine.
SLACK = 1.0
REJOIN_BUDGET = 2 * LIVENESS.heartbeat + SLACK
STABLE_FOR = 3.0
ONE_SIDED = ("unknown_publisher", "unknown_peer")
POLL = 0.02
Line = dict[str, Any]


class Child:
    """A tests._stall_node process; its stdout lines are parsed as they come."""

    def __init__(self, agent: str, mesh: str, seed: str, stderr: Path, liveness: str = "fast") -> None:
        self.agent = agent
        self.node_id = f"{agent}-node"
        self.stderr_path = stderr
        with open(stderr, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests._stall_node", agent, mesh, seed, liveness],
                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"},
            )
        self.lines: list[Line] = []
        self._ids = itertools.count()
        self._reader = threading.Thread(target=self._read, name=f"stall-{agent}-stdout")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(json.loads(raw))

    def wait_line(self, predicate: Callable[[Line], bool], timeout: float, what: str) -> Line:
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.lines):
                if predicate(line):
                    return line
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"{self.agent}: no {what} within {timeout} s\n{self.stderr_tail()}")
            time.sleep(POLL)

    def command(self, **cmd: Any) -> int:
        cmd["id"] = next(self._ids)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return int(cmd["id"])

    def request(self, target: str, topic: str, payload: Any = None, timeout: float = 5.0) -> Line:
        """Ask the child to request; wait for (and return) its result line."""
        n = self.command(op="request", target=target, topic=topic, payload=payload, timeout=timeout)
        return self.wait_line(lambda line: line.get("id") == n, timeout + 5, f"result of command {n}")

    def snaps(self, since: float, until: float = float("inf")) -> list[Line]:
        return [line for line in list(self.lines) if "snap" in line and since <= line["t"] <= until]

    def stderr_tail(self, n: int = 15) -> str:
        lines = self.stderr_path.read_text(errors="replace").splitlines()[-n:]
        text = ["".join(c if c.isascii() and c.isprintable() else "?" for c in line) for line in lines]
        return f"--- {self.agent} stderr (last {len(text)} lines) ---\n" + "\n".join(text)

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()  # the child's cue to leave
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def sees(snap: Line, other: Child) -> bool:
    return other.node_id in snap["peers"] and other.agent in snap["agents"]


def one_sided_drops(snap: Line) -> int:
    return sum(snap["dropped"].get(reason, 0) for reason in ONE_SIDED)


def describe(child: Child, snap: Line | None) -> str:
    if snap is None:
        return f"{child.agent}: no snapshot"
    return f"{child.agent} (t={snap['t']:.3f}): peers={snap['peers']} agents={snap['agents']} dropped={snap['dropped']}"


def wait_both_see_each_other(a: Child, b: Child, since: float, deadline: float) -> None:
    while True:
        sa, sb = a.snaps(since), b.snaps(since)
        if sa and sb and sees(sa[-1], b) and sees(sb[-1], a):
            return
        if time.time() > deadline:
            raise AssertionError("the pair never formed:\n" + "\n".join(
                [describe(a, sa[-1] if sa else None), describe(b, sb[-1] if sb else None),
                 a.stderr_tail(), b.stderr_tail()]))
        time.sleep(POLL)


def rejoin(a: Child, b: Child, ended: float, deadline: float) -> float:
    """Poll until both list each other and requests work both ways; return when
    (the later reply's arrival, on the children's clocks)."""
    while time.time() < deadline:
        sa, sb = a.snaps(ended), b.snaps(ended)
        if sa and sb and sees(sa[-1], b) and sees(sb[-1], a):
            left = max(deadline - time.time(), 0.05)
            ra = a.request(b.agent, "echo", timeout=left)
            rb = b.request(a.agent, "echo", timeout=left)
            if ra["ok"] and rb["ok"] and max(ra["t"], rb["t"]) <= deadline:
                return float(max(ra["t"], rb["t"]))
        time.sleep(POLL)
    # Failed: gather the state of both sides for the message.
    sa, sb = a.snaps(ended), b.snaps(ended)
    ra, rb = a.request(b.agent, "echo", timeout=2.0), b.request(a.agent, "echo", timeout=2.0)
    raise AssertionError(
        f"not two-sided within {REJOIN_BUDGET:.1f} s of the stall ending "
        f"({deadline - ended:.1f} s = 2 heartbeats + {SLACK} s slack); at {time.time() - ended:.1f} s:\n"
        + "\n".join([
            describe(a, sa[-1] if sa else None), describe(b, sb[-1] if sb else None),
            f"A -> B echo now: {ra}", f"B -> A echo now: {rb}", a.stderr_tail(), b.stderr_tail(),
        ])
    )


def assert_stays_two_sided(a: Child, b: Child, start: float) -> None:
    end = start + STABLE_FOR
    for child in (a, b):
        child.wait_line(lambda line: "snap" in line and line["t"] >= end, STABLE_FOR + 5, "snapshot after the window")
    for child, other in ((a, b), (b, a)):
        window = child.snaps(start, end)
        # The loops kept running: snapshots every 0.1 s, so many more than this.
        assert len(window) >= STABLE_FOR / 0.1 / 3, f"{child.agent}: only {len(window)} snapshots in {STABLE_FOR} s"
        lost = [s for s in window if not sees(s, other)]
        assert not lost, f"{child.agent} lost {other.agent} after rejoining: {describe(child, lost[0])}"
        grew = one_sided_drops(window[-1]) - one_sided_drops(window[0])
        assert grew == 0, (
            f"{child.agent} still drops {other.agent}'s frames as from a stranger (+{grew} in {STABLE_FOR} s):\n"
            f"{describe(child, window[0])}\n{describe(child, window[-1])}"
        )


@contextlib.contextmanager
def joined_pair(tmp_path: Path) -> Iterator[tuple[Child, Child]]:
    """Nodes A and B in two processes, B joined through A's endpoint; both closed on exit."""
    mesh = f"stall-{os.getpid()}-{time.monotonic_ns() % 10**8}"
    children: list[Child] = []
    try:
        a = Child("A", mesh, "-", tmp_path / "A.stderr")
        children.append(a)
        seed = a.wait_line(lambda line: "ready" in line, 20, "ready line")["ready"]
        b = Child("B", mesh, seed, tmp_path / "B.stderr")
        children.append(b)
        b.wait_line(lambda line: "ready" in line, 20, "ready line")
        wait_both_see_each_other(a, b, 0.0, time.time() + 20)
        yield a, b
    finally:
        for child in children:
            child.close()


@pytest.mark.parametrize("handler", ["stall_async", "stall_sync"])
def test_a_stalled_event_loop_rejoins_two_sided(handler: str, tmp_path: Path) -> None:
    with joined_pair(tmp_path) as (a, b):
        assert a.request("B", "echo")["ok"] and b.request("A", "echo")["ok"]

        trigger = a.command(op="request", target="B", topic=handler, payload=STALL, timeout=30)
        started = b.wait_line(lambda line: "stall_started" in line, 10, "stall start")["t"]
        ended = b.wait_line(lambda line: "stall_ended" in line, STALL + 10, "stall end")["t"]
        # The precondition: A did expire B while B was stalled.
        a.wait_line(lambda line: "snap" in line and line["t"] >= ended, 5, "snapshot after the stall")
        assert any(not sees(s, b) for s in a.snaps(started, ended)), "A never expired B during the stall"

        rejoined = rejoin(a, b, ended, ended + REJOIN_BUDGET)
        result = [line for line in list(a.lines) if line.get("id") == trigger]
        print(f"{handler}: two-sided again {rejoined - ended:.3f} s after the stall ended; trigger: {result}")
        assert_stays_two_sided(a, b, rejoined)


def test_a_plain_handler_that_blocks_runs_in_the_pool_and_the_loop_goes_on(tmp_path: Path) -> None:
    with joined_pair(tmp_path) as (a, b):
        blocked = a.command(op="request", target="B", topic="block_sync", payload=STALL, timeout=30)
        started = b.wait_line(lambda line: "stall_started" in line, 10, "block start")["t"]
        echo = a.request("B", "echo", timeout=2.0)  # answered while the plain handler blocks
        assert echo["ok"] and echo["t"] - started < STALL / 2, echo
        ended = b.wait_line(lambda line: "stall_ended" in line, STALL + 10, "block end")["t"]
        result = a.wait_line(lambda line: line.get("id") == blocked, 5, "the blocked request's reply")
        assert result["ok"] and result["payload"] == "blocked", result
        a.wait_line(lambda line: "snap" in line and line["t"] >= ended, 5, "snapshot after the block")
        # B's loop kept running (snapshots every 0.1 s), so A never lost B (expiry 3 s < STALL).
        assert len(b.snaps(started, ended)) >= STALL / 0.1 / 3
        assert all(sees(s, b) for s in a.snaps(started, ended)), "A lost B while its handler blocked"


@pytest.mark.parametrize("work", [1.0, 4.0])  # the reply leaves before / after B expired A
def test_a_requester_whose_loop_stalled_still_gets_its_reply(work: float, tmp_path: Path) -> None:
    with joined_pair(tmp_path) as (a, b):
        asked = a.command(op="request", target="B", topic="work", payload=work, timeout=30)
        a.command(op="request", target="A", topic="stall_async", payload=STALL, timeout=30)  # A blocks itself
        ended = a.wait_line(lambda line: "stall_ended" in line, STALL + 10, "stall end")["t"]
        b.wait_line(lambda line: "snap" in line and line["t"] >= ended, 5, "snapshot after the stall")
        assert any(a.node_id not in s["peers"] for s in b.snaps(ended - STALL, ended)), "B never expired A"

        result = a.wait_line(lambda line: line.get("id") == asked, REJOIN_BUDGET + 5, "the work reply")
        assert result["ok"], "\n".join([
            f"the request failed {result['t'] - ended:+.3f} s after the stall ended: {result}",
            *(f"{s['t'] - ended:+.3f} s  A: peers={s['peers']} dropped={s['dropped']}"
              for s in a.snaps(ended - STALL - 1, result["t"] + 1)),
            *(f"{s['t'] - ended:+.3f} s  B: peers={s['peers']}" for s in b.snaps(ended - STALL - 1, ended + 1)[::5]),
            a.stderr_tail(), b.stderr_tail(),
        ])
        assert result["payload"] == {"worked": work}
        assert result["t"] - ended <= REJOIN_BUDGET, f"the reply came {result['t'] - ended:.2f} s after the stall"
        rejoined = rejoin(a, b, ended, ended + REJOIN_BUDGET)
        assert_stays_two_sided(a, b, rejoined)
